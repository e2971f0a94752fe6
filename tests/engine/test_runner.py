"""The workload driver's random draws: sizes and Poisson gaps match the stdlib's own functions,
so a scenario's seed means the same run whichever way the driver is written."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import yaml

from flowctl_core.broker import Broker
from flowctl_core.clients import Producer
from flowctl_core.clock import Scheduler
from flowctl_core.events import EventBus, EventCollector
from flowctl_core.runner import RateDriver, run_scenario
from flowctl_core.scenario import ProducerSpec, parse_scenario
from schemas.model import US_PER_SECOND


def _driver(seed: int, **spec: object) -> RateDriver:
    scheduler = Scheduler(0)
    broker = Broker(EventBus("draws", scheduler), scheduler)
    producer = Producer(broker, "p", capacity=10)
    producer_spec = ProducerSpec.model_validate({"name": "p", "rate": 50, **spec})
    return RateDriver(producer, producer_spec, random.Random(seed), 0, 10_000_000)


@pytest.mark.parametrize(
    ("size", "size_max"),
    # Spans of 1901 and of powers of two (1024, 2): an off-by-one in the bit count shows on both.
    [(100, 2000), (0, 1023), (1, 2), (7, 8), (0, 1)],
)
def test_sizes_are_randint_draws(size: int, size_max: int) -> None:
    driver = _driver(11, size=size, size_max=size_max)
    reference = random.Random(11)
    assert [driver._size() for _ in range(5000)] == [
        reference.randint(size, size_max) for _ in range(5000)
    ]


def test_fixed_size_draws_nothing() -> None:
    driver = _driver(11, size=512)
    assert {driver._size() for _ in range(100)} == {512}
    assert driver.rng.random() == random.Random(11).random()


def _arrivals_us(driver: RateDriver) -> list[int]:
    """When the driver's messages arrived: nothing is bound, so each is rejected as unroutable
    and completes at once; the window never fills and no arrival is suppressed."""
    scheduler = driver.producer.broker.scheduler
    collector = EventCollector()
    driver.producer.broker.bus.subscribe(collector)
    driver.start(scheduler)
    scheduler.run_until(driver.end_us)
    assert driver.suppressed == 0
    return [event["ts"] for event in collector.of_type("message_rejected")]


def _expected_arrivals_us(gap_us: Callable[[], int], end_us: int) -> list[int]:
    arrivals = [0]
    while (next_us := arrivals[-1] + gap_us()) < end_us:
        arrivals.append(next_us)
    return arrivals


def test_poisson_gaps_are_expovariate_draws() -> None:
    driver = _driver(5, size=100, arrival="poisson")
    reference = random.Random(5)
    mean_us = US_PER_SECOND / 50
    expected = _expected_arrivals_us(
        lambda: max(1, round(reference.expovariate(1.0) * mean_us)), driver.end_us
    )
    assert len(expected) > 400
    assert _arrivals_us(driver) == expected


def test_uniform_arrivals_draw_nothing() -> None:
    driver = _driver(5, size=100)
    assert _arrivals_us(driver) == _expected_arrivals_us(lambda: 20_000, driver.end_us)
    assert driver.rng.random() == random.Random(5).random()


@pytest.mark.parametrize("start_s", [0.0, 1.0])
def test_a_rate_consumer_of_a_queue_declared_by_a_step_consumes(start_s: float) -> None:
    """A queue declared by a step, its rate consumer built then: it was never started, so the
    queue stopped at 11 and held its producer for the rest of the run (an audit). It consumes
    from the declare on, or from its ``start_s`` when that is later."""
    text = f"""
name: late-queue
kind: scripted
queues: [{{name: q0}}]
producers: [{{name: p, capacity: 5, routing_key: late}}]
consumers: [{{name: c, queue: late, rate: 100, start_s: {start_s}}}]
steps:
  - advance: {{seconds: 0.5}}
  - declare: {{queue: late, arguments: {{qpid.max_count: 100, qpid.flow_stop_count: 10,
      qpid.flow_resume_count: 5}}}}
  - send: {{producer: p, count: 30}}
  - advance: {{seconds: 2}}
"""
    log = EventCollector()
    result = run_scenario(parse_scenario(yaml.safe_load(text)), [log])
    events = [e for e in log.events if e["queue"] == "late"]
    dequeues = [e["ts"] - result.start_us for e in events if e["event_type"] == "dequeue"]
    assert len(dequeues) == 30
    assert min(dequeues) >= max(0.5, start_s) * US_PER_SECOND
    kinds = [e["event_type"] for e in events]
    assert "flow_stopped" in kinds and kinds.count("flow_resumed") == kinds.count("flow_stopped")


def _held_back(arrival: str, rate: float, bursts: bool = False, stop_s: float = 0) -> str:
    """A producer offering ``rate`` msgs/s to a queue whose 45 msgs/s consumer holds its
    window full most of the time (slow-consumer's shape, 20 s; ``stop_s``: when it stops)."""
    burst = ", bursts: {start_s: 0.5, every_s: 2.0, count: 50}" if bursts else ""
    burst += f", stop_s: {stop_s}" if stop_s else ""
    return f"""
name: held-back
kind: workload
duration_s: 20
seed: 7
queues: [{{name: q, arguments: {{qpid.max_count: 2000, qpid.policy_type: reject}}}}]
producers:
  - {{name: fast, capacity: 100, routing_key: q, size: 2048, rate: {rate},
     arrival: {arrival}{burst}}}
  - {{name: steady, capacity: 100, routing_key: q, size: 2048, rate: 30, arrival: poisson}}
consumers: [{{name: c, queue: q, rate: 45}}]
"""


def _run(text: str) -> tuple[list[dict[str, object]], list[int], int]:
    """The run's events, its drivers' suppressed arrivals and how many arrivals were stepped
    through the scheduler (ticks)."""
    ticks = 0
    tick = RateDriver._tick

    def counted(self: RateDriver) -> None:
        nonlocal ticks
        ticks += 1
        tick(self)

    log = EventCollector()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RateDriver, "_tick", counted)
        result = run_scenario(parse_scenario(yaml.safe_load(text)), [log])
    return log.events, [d.suppressed for d in result.drivers], ticks


@pytest.mark.parametrize(
    ("arrival", "rate", "bursts", "stop_s"),
    [("uniform", 20_000, False, 0), ("poisson", 20_000, False, 0), ("uniform", 33_333, True, 0),
     ("poisson", 5_000, True, 0), ("uniform", 20_000, False, 40), ("poisson", 20_000, False, 40)],
)  # fmt: skip
def test_arrivals_a_held_back_producer_offers_are_suppressed_without_a_step_each(
    arrival: str, rate: float, bursts: bool, stop_s: float
) -> None:
    """While a producer's window is full, the arrivals due before the scheduler's next callback
    are suppressed at once (the same draws), not stepped through one scheduler entry each: the
    same events and suppressed counts as stepping each one, in a fraction of the steps. A
    producer offering 100,000 msgs/s held back this way took the engine two minutes for
    204,000 events (a review). A stop_s past the run's end counts no arrival after it."""
    text = _held_back(arrival, rate, bursts, stop_s)
    events, suppressed, ticks = _run(text)
    with pytest.MonkeyPatch.context() as patch:
        # Each arrival stepped through the scheduler, as the driver did before.
        patch.setattr(RateDriver, "_suppressed_until_due", lambda self, next_us, _: next_us)
        stepped_events, stepped_suppressed, stepped_ticks = _run(text)
    assert events == stepped_events
    assert suppressed == stepped_suppressed
    assert suppressed[0] > 20 * rate / 2  # held back most of the run
    assert ticks < stepped_ticks / 10


def test_a_poisson_producer_held_back_at_a_billion_msgs_per_second_is_not_drawn_one_by_one() -> (
    None
):
    """Above :data:`POISSON_DRAWS_SKIPPED_ABOVE` expected arrivals before the next callback, the
    next arrival is drawn from the callback's time (a Poisson process has no memory) and those
    before it counted as expected: the run is as long as its events, not its offered arrivals
    (10^9 msgs/s for 20 s), and arrivals at least a microsecond apart, as stepped, are
    counted: about 20 million, not the nominal 20 billion."""
    events, suppressed, ticks = _run(_held_back("poisson", 1e9))
    enqueues = [e for e in events if e["event_type"] == "enqueue"]
    assert ticks < 2 * len(enqueues)
    assert suppressed[0] == pytest.approx(20e6, rel=0.1)

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
    mean_us = 1_000_000 / 50
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
    assert min(dequeues) >= max(0.5, start_s) * 1e6
    kinds = [e["event_type"] for e in events]
    assert "flow_stopped" in kinds and kinds.count("flow_resumed") == kinds.count("flow_stopped")

"""Builds a broker from a scenario and drives it on the virtual clock."""

from __future__ import annotations

import gc
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import log

from flowctl_core.broker import Broker
from flowctl_core.clients import Consumer, Producer
from flowctl_core.clock import Scheduler, seconds_to_us
from flowctl_core.events import BatchSubscriber, EventBus, Subscriber, prefill_link
from flowctl_core.protocols.amqp091 import Amqp091Connection
from flowctl_core.protocols.artemis import (
    AddressConfig,
    ArtemisConfig,
    ArtemisConsumerConfig,
    ArtemisProducerConfig,
    ArtemisServer,
)
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.queue import Message
from flowctl_core.scenario import (
    ArtemisSpec,
    ConnectionSpec,
    ConsumerSpec,
    ProducerSpec,
    Scenario,
)
from schemas.broker_events import AMQP_1_0
from schemas.model import US_PER_SECOND

ProtocolConnection = Amqp10Connection | Amqp091Connection

ProgressCallback = Callable[[float], None]  # fraction of the run done, 0..1

# Workload runs advance the clock in slices so that a progress bar can follow them.
_PROGRESS_SLICES = 200


@dataclass
class RunResult:
    run_id: str
    scenario: Scenario
    broker: Broker
    producers: dict[str, Producer]
    consumers: dict[str, Consumer]
    events: int
    start_us: int
    end_us: int
    drivers: list[RateDriver] = field(default_factory=list)
    connections: dict[str, ProtocolConnection] = field(default_factory=dict)
    artemis: ArtemisServer | None = None


#: Arrivals a Poisson producer held back is expected to offer before the scheduler's next
#: callback, above which they are not drawn one by one (:meth:`RateDriver._suppressed_until_due`).
POISSON_DRAWS_SKIPPED_ABOVE = 100_000


class RateDriver:
    """The application behind a workload producer: messages at a rate, plus periodic bursts.

    While the producer's window is full the application thread is blocked in ``send``, so arrivals
    that fall due meanwhile are not generated (they are counted in ``suppressed``) rather than
    piling up in an unbounded backlog.
    """

    def __init__(
        self, producer: Producer, spec: ProducerSpec, rng: random.Random, start_us: int, end_us: int
    ) -> None:
        self.producer = producer
        self.spec = spec
        self.rng = rng
        self.start_us = start_us + seconds_to_us(spec.start_s)
        # No later than the run's end: a stop_s past it would count arrivals after the run.
        self.end_us = (
            end_us if spec.stop_s is None else min(end_us, start_us + seconds_to_us(spec.stop_s))
        )
        self.suppressed = 0
        self._mean_interval_us = US_PER_SECOND / spec.rate if spec.rate else 0.0
        self._poisson = spec.arrival == "poisson"
        self._fixed_size = spec.size if spec.size_max in (None, spec.size) else None
        self._size_span = 1 if spec.size_max is None else spec.size_max - spec.size + 1
        self._size_bits = self._size_span.bit_length()

    def start(self, scheduler: Scheduler) -> None:
        if self.spec.rate and self.start_us < self.end_us:
            scheduler.call_at(self.start_us, self._tick)
        bursts = self.spec.bursts
        if bursts is not None:
            first = self.start_us + seconds_to_us(bursts.start_s)
            if first < self.end_us:
                scheduler.call_at(first, self._burst)

    def _size(self) -> int:
        if self._fixed_size is not None:
            return self._fixed_size
        # randint(size, size_max) written out (CPython's rejection sampling on getrandbits):
        # the same draws as before, without three Python frames per message.
        getrandbits, span, bits = self.rng.getrandbits, self._size_span, self._size_bits
        draw = getrandbits(bits)
        while draw >= span:
            draw = getrandbits(bits)
        return self.spec.size + draw

    def _interval_us(self) -> int:
        if self._poisson:
            # expovariate(1.0) written out: the same draws, one Python frame fewer per arrival.
            interval = -log(1.0 - self.rng.random()) * self._mean_interval_us
        else:
            interval = self._mean_interval_us
        return max(1, round(interval))

    def _tick(self) -> None:
        producer = self.producer
        scheduler = producer.broker.scheduler
        if producer.backlog:
            self.suppressed += 1
            next_us = self._suppressed_until_due(scheduler.now_us + self._interval_us(), scheduler)
        else:
            producer.send_one(self._size())
            next_us = scheduler.now_us + self._interval_us()
        if next_us < self.end_us:
            scheduler.call_at(next_us, self._tick)

    def _suppressed_until_due(self, next_us: int, scheduler: Scheduler) -> int:
        """The first arrival from ``next_us`` on that is not due before everything else the
        scheduler holds; those before it are suppressed here. The producer is blocked, and
        nothing but a scheduled callback can unblock it, so an arrival due before the next one
        would be suppressed too: taken here, with the same draws, instead of one scheduler
        entry each (a producer offering 100,000 msgs/s to a window held full for seconds cost
        the engine two minutes for 204,000 events). An arrival due at the same instant as a
        callback already scheduled runs after it, as it would have: it is scheduled."""
        limit = self.end_us
        due = scheduler.next_due_us()
        if due is not None:
            limit = min(limit, due)
        if next_us >= limit:
            return next_us
        if not self._poisson:
            # A fixed interval: the arrivals before the limit counted, not stepped through.
            step = self._interval_us()
            skipped = -(-(limit - next_us) // step)
            self.suppressed += skipped
            return next_us + skipped * step
        # Arrivals are at least a microsecond apart (:meth:`_interval_us`).
        expected = (limit - next_us) / max(self._mean_interval_us, 1.0)
        if expected > POISSON_DRAWS_SKIPPED_ABOVE:
            # Too many draws to take one by one (a rate of 10^9 msgs/s held for minutes): the
            # arrivals after the limit are a Poisson process of their own (it has no memory), so
            # the next one is drawn from the limit, and those before it are counted as expected.
            self.suppressed += 1 + round(expected)
            return limit + self._interval_us() - 1
        while next_us < limit:
            self.suppressed += 1
            next_us += self._interval_us()
        return next_us

    def _burst(self) -> None:
        bursts = self.spec.bursts
        assert bursts is not None
        producer = self.producer
        for _ in range(bursts.count):
            producer.send(self._size())
        scheduler = producer.broker.scheduler
        next_us = scheduler.now_us + seconds_to_us(bursts.every_s)
        if next_us < self.end_us:
            scheduler.call_at(next_us, self._burst)


def default_run_id(scenario: Scenario, seed: int) -> str:
    """``<name>-s<seed>-<digest of the scenario>``: the same scenario and seed give the same
    events (the engine is deterministic), so they get the same run id, and simulating them again
    finds that run already written rather than adding a copy that readers would count twice. The
    description does not change the events, and fields left at their defaults are left out, so that
    a field added to the scenario format later does not rename every run."""
    spec = scenario.model_dump(mode="json", exclude={"description"}, exclude_defaults=True)
    canonical = json.dumps({"scenario": spec, "seed": seed}, sort_keys=True)
    return f"{scenario.name}-s{seed}-{hashlib.sha256(canonical.encode()).hexdigest()[:8]}"


def build(
    scenario: Scenario, run_id: str, subscribers: Iterable[Subscriber], validate: bool = False
) -> tuple[Broker, dict[str, Producer], dict[str, Consumer]]:
    scheduler = Scheduler(scenario.start_us)
    bus = EventBus(run_id, scheduler, validate=validate)
    for subscriber in subscribers:
        # A sink that takes rows in batches is spared a Python call per event; run_scenario
        # hands it the last partial batch.
        if isinstance(subscriber, BatchSubscriber):
            bus.subscribe_batch(subscriber.write_rows)
        else:
            bus.subscribe(subscriber)
    # The same config the scenario's validation declared its queues with.
    broker = Broker(bus, scheduler, scenario.broker_config())
    for queue in scenario.queues:
        declared = broker.declare_queue(
            queue.name, scenario.queue_arguments(queue), service_time_us=queue.service_time_us
        )
        if queue.prefill is not None:
            count, size = queue.prefill.count, queue.prefill.size
            if declared.flow.should_stop(count, count * size):
                # Scenario validation refuses it; a scenario changed with model_copy is not
                # validated again.
                raise ValueError(
                    f"queue {queue.name!r}: a prefill of {count} messages of {size} bytes would "
                    "stop its flow before the run starts"
                )
            # Written before the run by someone else: no transfer to complete, logged as the
            # enqueues of the reserved producer "prefill" (events.PREFILL_LINK).
            link = prefill_link()
            for _ in range(count):
                declared.enqueue(Message(broker.next_message_id(), size, None), link)
    for exchange in scenario.exchanges:
        broker.declare_exchange(exchange.name, exchange.type)
        for binding in exchange.bindings:
            broker.bind(exchange.name, binding.queue, binding.key)
    producers = {
        p.name: Producer(
            broker, p.name, capacity=p.capacity, exchange=p.exchange, routing_key=p.routing_key
        )
        for p in scenario.producers
    }
    consumers = {
        c.name: Consumer(broker, c.name, broker.queue(c.queue), rate=c.rate)
        for c in scenario.consumers
        if c.queue in broker.queues
    }
    return broker, producers, consumers


def connection_config(spec: ConnectionSpec) -> ConnectionConfig:
    return ConnectionConfig(
        name=spec.name,
        protocol=spec.protocol,
        publishers=tuple(
            PublisherConfig(
                p.name, p.queue, p.size, p.batch, p.initial_delivery_count, p.reports_available
            )
            for p in spec.publishers
        ),
        consumers=tuple(
            ConsumerConfig(
                c.name,
                c.queue,
                c.credit,
                c.top_up_below,
                c.drain,
                c.drain_poll_us,
                c.echo,
                tuple((seconds_to_us(x.after_s), x.credit) for x in c.credit_changes),
                c.process_us,
            )
            for c in spec.consumers
        ),
        latency_us=spec.latency_us,
        frame_cost_us=spec.frame_cost_us,
        socket_buffer_frames=spec.socket_buffer_frames,
        max_frame_size=spec.max_frame_size,
        client_incoming_window=spec.client_incoming_window,
    )


def open_connection(
    spec: ConnectionSpec, broker: Broker, policy: RabbitPolicy
) -> ProtocolConnection:
    """The client connection of ``spec``, opened now: its 0.9.1 publishing connection or 1.0
    session learns the broker's alarms in force as it opens."""
    config = connection_config(spec)
    if config.protocol == AMQP_1_0:
        return Amqp10Connection(broker, config, policy)
    return Amqp091Connection(broker, config, policy)


def schedule_connections(
    scenario: Scenario, broker: Broker, start_us: int
) -> dict[str, ProtocolConnection]:
    """The scenario's connections, each opened and started at its ``start_s``: those at the
    run's start now (the dict returned), the later ones added to it when they open."""
    scheduler = broker.scheduler
    policy = RabbitPolicy(**scenario.rabbitmq.model_dump())
    connections: dict[str, ProtocolConnection] = {}

    def open_later(spec: ConnectionSpec) -> None:
        connection = open_connection(spec, broker, policy)
        connections[spec.name] = connection
        connection.start()

    for spec in scenario.connections:
        if spec.start_s:
            scheduler.call_at(start_us + seconds_to_us(spec.start_s), open_later, spec)
        else:
            connection = open_connection(spec, broker, policy)
            connections[spec.name] = connection
            scheduler.call_at(start_us, connection.start)
    return connections


def artemis_config(spec: ArtemisSpec) -> ArtemisConfig:
    return ArtemisConfig(
        addresses=tuple(
            AddressConfig(
                a.name,
                a.settings(),
                tuple(a.queues),
                a.prefill.count if a.prefill else 0,
                a.prefill.size if a.prefill else 1024,
            )
            for a in spec.addresses
        ),
        producers=tuple(
            ArtemisProducerConfig(
                p.name,
                p.address,
                protocol=p.protocol,
                window=p.window,
                size=p.size,
                count=p.count,
                send_cost_us=p.send_cost_us,
                max_rate=p.max_rate,
                start_us=seconds_to_us(p.start_s),
                latency_us=p.latency_us,
            )
            for p in spec.producers
        ),
        consumers=tuple(
            ArtemisConsumerConfig(
                c.name,
                c.queue,
                window=c.window,
                process_us=c.process_us,
                max_rate=c.max_rate,
                start_us=seconds_to_us(c.start_s),
                latency_us=c.latency_us,
            )
            for c in spec.consumers
        ),
        latency_us=spec.latency_us,
        core_message_overhead_bytes=spec.core_message_overhead_bytes,
        amqp_message_overhead_bytes=spec.amqp_message_overhead_bytes,
        queue_reference_overhead_bytes=spec.queue_reference_overhead_bytes,
        core_encode_overhead_bytes=spec.core_encode_overhead_bytes,
        core_delivery_overhead_bytes=spec.core_delivery_overhead_bytes,
    )


def build_artemis(scenario: Scenario, broker: Broker) -> ArtemisServer | None:
    if scenario.artemis is None:
        return None
    return ArtemisServer(broker, artemis_config(scenario.artemis))


def _schedule_alarms(scenario: Scenario, broker: Broker, start_us: int) -> None:
    scheduler = broker.scheduler
    for alarm in scenario.alarms:
        scheduler.call_at(
            start_us + seconds_to_us(alarm.raise_s), broker.raise_alarm, alarm.resource
        )
        if alarm.clear_s is not None:
            scheduler.call_at(
                start_us + seconds_to_us(alarm.clear_s), broker.clear_alarm, alarm.resource
            )


def run_scenario(
    scenario: Scenario,
    subscribers: Iterable[Subscriber] = (),
    *,
    run_id: str | None = None,
    seed: int | None = None,
    progress: ProgressCallback | None = None,
    validate: bool = False,
) -> RunResult:
    with _fewer_gc_passes():
        return _run_scenario(scenario, subscribers, run_id, seed, progress, validate)


@contextmanager
def _fewer_gc_passes() -> Iterator[None]:
    """Run the cyclic GC less often: a run allocates millions of short-lived acyclic objects
    (events, transfers), and at the default threshold the collector rescans the live ones every
    700 allocations (~8% of a run). Cycles (the protocol front ends make some) are still freed."""
    previous = gc.get_threshold()
    gc.set_threshold(max(previous[0], 10_000), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _run_scenario(
    scenario: Scenario,
    subscribers: Iterable[Subscriber],
    run_id: str | None,
    seed: int | None,
    progress: ProgressCallback | None,
    validate: bool,
) -> RunResult:
    seed = scenario.seed if seed is None else seed
    run_id = run_id or default_run_id(scenario, seed)
    broker, producers, consumers = build(scenario, run_id, subscribers, validate)
    try:
        return _drive(scenario, broker, producers, consumers, run_id, seed, progress)
    finally:
        # Batch subscribers get the rows still buffered in the bus, also when the run failed:
        # by then a subscriber called per row would have had every one of them too.
        broker.bus.flush()


def _drive(
    scenario: Scenario,
    broker: Broker,
    producers: dict[str, Producer],
    consumers: dict[str, Consumer],
    run_id: str,
    seed: int,
    progress: ProgressCallback | None,
) -> RunResult:
    """Schedule the scenario's clients, connections and alarms, and run it to its end."""
    scheduler = broker.scheduler
    start_us = scheduler.now_us
    end_us = start_us + seconds_to_us(scenario.duration_s or 0)

    for spec in scenario.consumers:
        consumer = consumers.get(spec.name)
        if consumer is not None:
            _schedule_consumer(scheduler, consumer, spec, start_us)

    connections = schedule_connections(scenario, broker, start_us)
    _schedule_alarms(scenario, broker, start_us)
    artemis = build_artemis(scenario, broker)
    if artemis is not None:
        scheduler.call_at(start_us, artemis.start)

    drivers: list[RateDriver] = []
    if scenario.kind == "workload":
        rng = random.Random(seed)
        for spec_p in scenario.producers:
            driver = RateDriver(
                producers[spec_p.name], spec_p, random.Random(rng.getrandbits(64)), start_us, end_us
            )
            driver.start(scheduler)
            drivers.append(driver)
        span = end_us - start_us
        for slice_index in range(1, _PROGRESS_SLICES + 1):
            scheduler.run_until(start_us + span * slice_index // _PROGRESS_SLICES)
            if progress is not None:
                progress(slice_index / _PROGRESS_SLICES)
    else:
        _run_steps(scenario, broker, producers, consumers, progress, start_us)
        end_us = scheduler.now_us

    return RunResult(
        run_id=run_id,
        scenario=scenario,
        broker=broker,
        producers=producers,
        consumers=consumers,
        events=broker.bus.seq,
        start_us=start_us,
        end_us=end_us,
        drivers=drivers,
        connections=connections,
        artemis=artemis,
    )


def _schedule_consumer(
    scheduler: Scheduler, consumer: Consumer, spec: ConsumerSpec, start_us: int
) -> None:
    """A rate consumer consumes from ``start_s`` after the run's start (now, if that has passed)
    until ``stop_s``; one consuming by ``consume`` steps (no rate) is not scheduled."""
    if spec.rate is None:
        return
    stop_us = None if spec.stop_s is None else start_us + seconds_to_us(spec.stop_s)
    begin_us = max(scheduler.now_us, start_us + seconds_to_us(spec.start_s))
    if stop_us is None or begin_us < stop_us:
        scheduler.call_at(begin_us, consumer.start, stop_us)


def _run_steps(
    scenario: Scenario,
    broker: Broker,
    producers: dict[str, Producer],
    consumers: dict[str, Consumer],
    progress: ProgressCallback | None,
    start_us: int,
) -> None:
    scheduler = broker.scheduler
    scheduler.run_due()
    total = len(scenario.steps)
    for index, step in enumerate(scenario.steps, start=1):
        action, spec = step.action
        if action == "send":
            producers[spec.producer].send(spec.size, spec.count, spec.routing_key)
        elif action == "consume":
            consumers[spec.consumer].consume(spec.count)
        elif action == "set_thresholds":
            broker.set_thresholds(spec.queue, spec.thresholds())
        elif action == "advance":
            scheduler.advance(seconds_to_us(spec.seconds))
        elif action == "declare":
            broker.declare_queue(spec.queue, spec.arguments)
            for consumer_spec in scenario.consumers:
                if consumer_spec.queue == spec.queue and consumer_spec.name not in consumers:
                    consumer = Consumer(
                        broker,
                        consumer_spec.name,
                        broker.queue(spec.queue),
                        rate=consumer_spec.rate,
                    )
                    consumers[consumer_spec.name] = consumer
                    # A rate consumer of a queue declared by a step starts now (or at its
                    # start_s, if later): it was built and never started (an audit).
                    _schedule_consumer(scheduler, consumer, consumer_spec, start_us)
        # Work released by this step (completions, pumped sends) happens at the same instant.
        scheduler.run_due()
        if progress is not None:
            progress(index / total)

"""Small builders shared by the engine tests (no Spark)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flowctl_core import Broker, BrokerConfig, EventBus, EventCollector, Scheduler
from flowctl_core.clients import Consumer, Producer
from flowctl_core.protocols.config import ConnectionConfig
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.wire import Frame, Wire
from flowctl_core.queue import Message
from schemas.broker_events import AMQP_1_0
from schemas.model import US_PER_SECOND

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


class Rig:
    """A broker on a fresh clock with every event collected and validated against the schema."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.scheduler = Scheduler(START_US)
        self.bus = EventBus("test-run", self.scheduler, validate=True)
        self.log = EventCollector()
        self.bus.subscribe(self.log)
        self.broker = Broker(self.bus, self.scheduler, config or BrokerConfig())

    def queue(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        return self.broker.declare_queue(name, arguments)

    def producer(
        self, name: str, capacity: int | None, routing_key: str, exchange: str = ""
    ) -> Producer:
        return Producer(
            self.broker, name, capacity=capacity, exchange=exchange, routing_key=routing_key
        )

    def consumer(self, name: str, queue: str, rate: float | None = None) -> Consumer:
        return Consumer(self.broker, name, self.broker.queue(queue), rate=rate)

    def settle(self) -> None:
        self.scheduler.run_due()

    def events(self, *types: str, queue: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.log.events
            if (not types or e["event_type"] in types)
            and (queue is None or e.get("queue") == queue)
        ]


# No broker-wide defaults at all, as Qpid's unit tests run: ratios 0 / 0 and no default limit.
NO_DEFAULTS = BrokerConfig(
    default_flow_stop_ratio=0, default_flow_resume_ratio=0, default_queue_limit_bytes=0
)

#: Seed 001 §1.1.2's queue: ON above 4000 msgs or 8K bytes, OFF below 3000 msgs and 6K bytes.
QPID_4000_8K = {
    "qpid.max_count": 5000,
    "qpid.max_size": 10240,
    "qpid.flow_stop_count": 4000,
    "qpid.flow_resume_count": 3000,
    "qpid.flow_stop_size": 8192,
    "qpid.flow_resume_size": 6144,
}


def completed_ids(rig: Rig) -> list[int]:
    """The message ids of the rig's ``transfer_completed`` events, in order."""
    return [e["message_id"] for e in rig.events("transfer_completed")]


NEVER = 10**12  # a queue service time no test reaches: the queue never confirms
SECOND = US_PER_SECOND


def expected_core_bound_bytes(
    window: int, size: int, latency_us: int, send_cost_us: int, overhead: int, *, encode: int
) -> int:
    """One CORE producer's share of an address's overshoot bound, from its config alone.

    Worked out here rather than read from the engine, so that a wrong engine bound fails.
    Seed 003 (4.1.1): "It is therefore possible to go over the address limit by approximately:
    total number of producers on address * producer window size". DESIGN §2: a request is
    granted whole while the address is not full and nothing is granted while it is full, so
    what a producer can land once the address is full is what its credit already covers plus
    what is on the wire. A message costs its encoded size in credit, ``encoded = size +
    encode`` (the CORE encode overhead). The client asks only when balance + arriving < needed =
    max(encoded, window // 2) and brings arriving up to needed, so balance + arriving stays below
    2 x needed, the message sent after the check included: (2 x needed - 1) // encoded messages
    (none when a message encodes to 0 bytes: it takes no credit). On the wire besides: none when
    the latency is below the send cost, else at most latency // send_cost. Each message counts
    its memory estimate, size + the CORE overhead.
    """
    encoded = size + encode
    on_credit = (2 * max(encoded, window // 2) - 1) // encoded if encoded else 0
    on_the_wire = latency_us // send_cost_us if latency_us >= send_cost_us else 0
    return (on_credit + on_the_wire) * (size + overhead)


class Rabbit:
    """A broker on a fresh virtual clock with one AMQP 1.0 connection, events validated."""

    def __init__(self, prefill: int = 0, service_time_us: int = 0, size: int = 100) -> None:
        self.scheduler = Scheduler(0)
        self.log = EventCollector()
        bus = EventBus("t", self.scheduler, validate=True)
        bus.subscribe(self.log)
        self.broker = Broker(bus, self.scheduler)
        self.queue = self.broker.declare_queue("q", service_time_us=service_time_us)
        self.fill(prefill, size)

    def fill(self, count: int, size: int = 100) -> None:
        for _ in range(count):
            self.queue.enqueue(Message(self.broker.next_message_id(), size, None))

    def connect(self, **config: Any) -> Amqp10Connection:
        connection = Amqp10Connection(self.broker, ConnectionConfig("c", AMQP_1_0, **config))
        connection.start()
        return connection

    def run_for(self, us: int) -> None:
        self.scheduler.run_until(self.scheduler.now_us + us)


def record_frames(wire: Wire) -> list[Frame]:
    """Every frame that reaches the far end of ``wire`` from now on, in order (the far end still
    reads each)."""
    frames: list[Frame] = []
    read = wire.reader
    assert read is not None

    def recording(frame: Frame) -> None:
        frames.append(frame)
        read(frame)

    wire.reader = recording
    return frames

"""Per-queue run summaries computed from the engine's own state (no log re-reading)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from flowctl_core.runner import RunResult
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0, ARTEMIS_CORE
from schemas.model import US_PER_SECOND


@dataclass(frozen=True)
class QueueSummary:
    queue: str
    enqueued: int
    dequeued: int
    rejected: int
    evicted: int
    depth_msgs: int
    flow_stopped_count: int
    flow_stopped: bool
    peak_depth_msgs: int
    peak_depth_bytes: int
    flow_stop_count: int
    flow_stop_size: int
    max_overshoot_msgs: int
    max_overshoot_bytes: int
    # An Artemis address's blocking is the queue's flow control: its thresholds and overshoot
    # are the address's (artemis_addresses), the flow state and count those it logs.
    flow_by_address: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_summaries(result: RunResult) -> list[QueueSummary]:
    rows = []
    for queue in result.broker.queues.values():
        stats, flow = queue.stats, queue.flow
        flow_stopped, flow_stopped_count = queue.logged_flow_state
        rows.append(
            QueueSummary(
                queue=queue.name,
                enqueued=stats.enqueued,
                dequeued=stats.dequeued,
                rejected=stats.rejected,
                evicted=stats.evicted,
                depth_msgs=queue.depth_msgs,
                flow_stopped_count=flow_stopped_count,
                flow_stopped=flow_stopped,
                peak_depth_msgs=stats.peak_depth_msgs,
                peak_depth_bytes=stats.peak_depth_bytes,
                flow_stop_count=flow.stop_count,
                flow_stop_size=flow.stop_size,
                max_overshoot_msgs=stats.max_overshoot_msgs,
                max_overshoot_bytes=stats.max_overshoot_bytes,
                flow_by_address=queue.flow_shown_by_address,
            )
        )
    return rows


@dataclass(frozen=True)
class LinkMessages:
    """Messages one protocol link moved: published by the client, or received by it."""

    connection: str
    protocol: str
    link: str
    role: str  # publisher | consumer
    queue: str
    messages: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ConnectionTotals:
    """Per connection: what seed 004 compares between AMQP 0.9.1 and AMQP 1.0."""

    connection: str
    protocol: str
    sent: int
    received: int
    # Times the connection's reader was blocked (AMQP 0.9.1 only; 0 for AMQP 1.0).
    blocked: int

    @property
    def total(self) -> int:
        return self.sent + self.received

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


def link_messages(result: RunResult) -> list[LinkMessages]:
    """One row per publisher and consumer link of every protocol connection, in declared order."""
    rows: list[LinkMessages] = []
    for name, connection in result.connections.items():
        protocol = connection.config.protocol
        sent, received = connection.sent(), connection.received()
        for publisher in connection.config.publishers:
            rows.append(
                LinkMessages(
                    name,
                    protocol,
                    publisher.name,
                    "publisher",
                    publisher.queue,
                    sent[publisher.name],
                )
            )
        for consumer in connection.config.consumers:
            rows.append(
                LinkMessages(
                    name,
                    protocol,
                    consumer.name,
                    "consumer",
                    consumer.queue,
                    received[consumer.name],
                )
            )
    return rows


def connection_totals(result: RunResult) -> list[ConnectionTotals]:
    rows = []
    for name, connection in result.connections.items():
        rows.append(
            ConnectionTotals(
                connection=name,
                protocol=connection.config.protocol,
                sent=sum(connection.sent().values()),
                received=sum(connection.received().values()),
                blocked=connection.blocked_count,
            )
        )
    return rows


#: The protocols seed 004 compares, and how it words what each role moves.
COMPARED_PROTOCOLS = (AMQP_1_0, AMQP_0_9_1)
ROLE_MOVES = {"publisher": "sent", "consumer": "received"}


@dataclass(frozen=True)
class ProtocolComparison:
    """What the links of one role moved over AMQP 1.0 and over 0.9.1 in one run (seed 004:
    "the total send throughput of AMQP 1.0 is four times higher", "receives 73 times more")."""

    role: str  # publisher | consumer
    amqp10: int
    amqp091: int

    @property
    def ratio(self) -> float | None:
        """AMQP 1.0's messages per 0.9.1 message; None when 0.9.1 moved none."""
        return self.amqp10 / self.amqp091 if self.amqp091 else None


def protocol_comparisons(result: RunResult) -> list[ProtocolComparison]:
    """Per role that links of both protocols have, their messages side by side: publishers'
    against publishers', consumers' against consumers' (a sum over every link of a protocol
    would set one protocol's publishers against the other's publishers plus a consumer)."""
    moved: dict[tuple[str, str], int] = {}
    for link in link_messages(result):
        key = (link.role, link.protocol)
        moved[key] = moved.get(key, 0) + link.messages
    return [
        ProtocolComparison(role, *(moved[(role, protocol)] for protocol in COMPARED_PROTOCOLS))
        for role in ROLE_MOVES
        if all((role, protocol) in moved for protocol in COMPARED_PROTOCOLS)
    ]


@dataclass(frozen=True)
class ArtemisAddressSummary:
    """Per Artemis address (seed 003): what its policy did and how far its size went."""

    address: str
    policy: str
    max_size_bytes: int
    reject_threshold: int
    accepted: int
    paged: int
    dropped: int
    failed: int
    rejected: int
    size_bytes: int
    peak_size_bytes: int
    # Peak size above max-size-bytes, and the bound CORE producers can push it to (BLOCK).
    overshoot_bytes: int
    overshoot_bound_bytes: int
    core_producers: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ArtemisLinkSummary:
    """Per Artemis client: messages moved, refused, and time spent waiting for credit."""

    link: str
    protocol: str
    role: str  # publisher | consumer
    target: str  # address (publisher) or queue (consumer)
    window: int | None  # bytes (CORE); None for AMQP producers (credits in messages)
    max_rate: int
    messages: int  # sent (publisher) or processed (consumer)
    received: int  # consumer: delivered into its buffer; publisher: 0
    refused: int  # publisher: FAIL errors and AMQP rejections it was told about
    blocked_s: float  # publisher: time with a message in hand and no credit
    peak_buffered_bytes: int  # consumer: the client buffer's peak

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def artemis_addresses(result: RunResult) -> list[ArtemisAddressSummary]:
    server = result.artemis
    if server is None:
        return []
    rows = []
    for name, address in server.addresses.items():
        state, settings = address.state, address.state.settings
        rows.append(
            ArtemisAddressSummary(
                address=name,
                policy=settings.address_full_policy,
                max_size_bytes=settings.max_size_bytes,
                reject_threshold=settings.max_size_bytes_reject_threshold,
                accepted=state.accepted,
                paged=state.paged,
                dropped=state.dropped,
                failed=state.failed,
                rejected=state.rejected,
                size_bytes=state.size,
                peak_size_bytes=state.peak_size,
                overshoot_bytes=address.max_over_bytes,
                overshoot_bound_bytes=server.overshoot_bound_bytes(name),
                core_producers=sum(
                    1 for p in server.producers_on(name) if p.protocol == ARTEMIS_CORE
                ),
            )
        )
    return rows


def artemis_links(result: RunResult) -> list[ArtemisLinkSummary]:
    server = result.artemis
    if server is None:
        return []
    rows = []
    for name, producer in server.producers.items():
        config = producer.config
        rows.append(
            ArtemisLinkSummary(
                link=name,
                protocol=producer.protocol,
                role="publisher",
                target=config.address,
                window=config.window if producer.protocol == ARTEMIS_CORE else None,
                max_rate=config.max_rate,
                messages=producer.sent,
                received=0,
                refused=producer.refused,
                blocked_s=producer.blocked_total_us() / US_PER_SECOND,
                peak_buffered_bytes=0,
            )
        )
    for name, consumer in server.consumers.items():
        consumer_config = consumer.config
        rows.append(
            ArtemisLinkSummary(
                link=name,
                protocol=ARTEMIS_CORE,
                role="consumer",
                target=consumer_config.queue,
                window=consumer_config.window,
                max_rate=consumer_config.max_rate,
                messages=consumer.processed,
                received=consumer.received,
                refused=0,
                blocked_s=0.0,
                peak_buffered_bytes=consumer.peak_buffered_bytes,
            )
        )
    return rows

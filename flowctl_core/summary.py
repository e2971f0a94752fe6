"""Per-queue run summaries computed from the engine's own state (no log re-reading)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from flowctl_core.runner import RunResult


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_summaries(result: RunResult) -> list[QueueSummary]:
    rows = []
    for queue in result.broker.queues.values():
        stats, flow = queue.stats, queue.flow
        rows.append(
            QueueSummary(
                queue=queue.name,
                enqueued=stats.enqueued,
                dequeued=stats.dequeued,
                rejected=stats.rejected,
                evicted=stats.evicted,
                depth_msgs=queue.depth_msgs,
                flow_stopped_count=flow.flow_stopped_count,
                flow_stopped=flow.flow_stopped,
                peak_depth_msgs=stats.peak_depth_msgs,
                peak_depth_bytes=stats.peak_depth_bytes,
                flow_stop_count=flow.stop_count,
                flow_stop_size=flow.stop_size,
                max_overshoot_msgs=stats.max_overshoot_msgs,
                max_overshoot_bytes=stats.max_overshoot_bytes,
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

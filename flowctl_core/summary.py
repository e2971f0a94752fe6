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

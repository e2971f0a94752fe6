"""What the what-if of a Qpid threshold change counts as messages lost at the queue's limit:
rejections on a reject queue, evictions on a ring queue (DESIGN §2), judged alike."""

from __future__ import annotations

from flowctl_core.flowlimit import FlowThresholds
from flowctl_core.whatif import AIM_RELIEVE, AIM_STEADY, QueueComparison, QueueOutcome


def _outcome(
    stop: int, resume: int, *, episodes: int, evicted: int, stopped_s: float
) -> QueueOutcome:
    return QueueOutcome(
        thresholds=FlowThresholds(stop_count=stop, resume_count=resume),
        enqueued=250,
        rejected=0,
        episodes=episodes,
        time_stopped_s=stopped_s,
        max_overshoot_msgs=0,
        max_overshoot_bytes=0,
        peak_depth_msgs=100,
        peak_depth_bytes=6_400,
        evicted=evicted,
    )


def test_a_raise_that_stops_less_by_evicting_more_is_not_validated() -> None:
    """A ring queue's stop raised: it stops less, because the ring now drops the oldest
    messages instead of holding the producer. That is no relief (a review: the what-if
    weighed rejections only, always 0 on a ring)."""
    before = _outcome(90, 60, episodes=3, evicted=0, stopped_s=4.0)
    after = _outcome(99, 66, episodes=1, evicted=120, stopped_s=1.0)
    compared = QueueComparison("ticks", before, after)
    assert compared.aim == AIM_RELIEVE
    assert compared.failures() == ["more evictions"]
    assert "evicted msgs 0 -> 120" in compared.evidence()


def test_a_resume_change_that_evicts_no_more_is_judged_on_its_episodes() -> None:
    before = _outcome(90, 60, episodes=3, evicted=10, stopped_s=4.0)
    after = _outcome(90, 40, episodes=2, evicted=10, stopped_s=4.5)
    compared = QueueComparison("ticks", before, after)
    assert compared.aim == AIM_STEADY
    assert compared.validated
    assert "evicted" not in compared.evidence()  # shown only when it moved

"""The depth timeline's fast path (buckets from a hash aggregation, jobs/episodes.py) against its
rule, :func:`jobs.transforms.depth_timeline.depth_timeline` (a window over every event in seq
order), on seeded random logs: with clocks that only move forward, and with clocks stepping back
across bucket edges, where the fast path hands the queues concerned to the rule."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from chispa import assert_df_equality

from jobs.transforms.depth_timeline import (
    bucket_summaries,
    depth_timeline,
    seq_disordered_queues,
    timeline_from_summaries,
)
from jobs.transforms.episodes import run_bounds
from tests.conftest import at, event

pytestmark = pytest.mark.spark

COLUMNS = (
    "run_id", "broker", "queue", "date", "bucket_start", "bucket_s", "events", "max_depth_msgs",
    "last_depth_msgs", "max_depth_bytes", "last_depth_bytes", "flow_stop_count",
    "flow_resume_count", "flow_stop_size", "flow_resume_size", "stopped_in_bucket", "flow_stopped",
)  # fmt: skip


def random_log(run_id: str, seed: int, steps_back: bool) -> list[dict[str, Any]]:
    """400 events of three queues (and some of a link only) over ~10 minutes from 23:55, so the
    buckets are 2 s wide and cross midnight; values and thresholds are often missing, flow
    stops and resumes come repeated. With ``steps_back`` the clock sometimes goes back 3-20 s."""
    rng = random.Random(seed)
    ts = at(1) - timedelta(minutes=5)
    kinds = ("enqueue", "enqueue", "dequeue", "dequeue", "flow_stopped", "flow_resumed")
    rows = []
    for seq in range(1, 401):
        ts += timedelta(milliseconds=rng.randrange(0, 3000))
        if steps_back and rng.random() < 0.05:
            ts -= timedelta(seconds=rng.randrange(3, 20))
        if rng.random() < 0.08:
            rows.append(event(seq, ts, "flow", run_id=run_id, link="c", credit=rng.randrange(3)))
            continue
        fields: dict[str, Any] = {"run_id": run_id, "queue": rng.choice(("q1", "q2", "q3"))}
        if rng.random() < 0.8:
            depth = rng.randrange(0, 12)
            fields |= {"depth_msgs": depth, "depth_bytes": depth * 100}
        if rng.random() < 0.1:
            fields |= {"flow_stop_count": rng.randrange(0, 10), "flow_resume_count": 3}
        if rng.random() < 0.05:
            fields |= {"flow_stop_size": rng.choice((0, 500)), "flow_resume_size": 200}
        kind = "thresholds_changed" if rng.random() < 0.05 else rng.choice(kinds)
        rows.append(event(seq, ts, kind, **fields))
    return rows


def fast_path(events: Any, bounds: Any) -> tuple[Any, list[Any]]:
    """The job's fast path (jobs/episodes.py ``write_depth_timeline``), and the queues it hands to
    the rule."""
    summaries = bucket_summaries(events, bounds)
    return (
        timeline_from_summaries(events, bounds, summaries),
        seq_disordered_queues(summaries).collect(),
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_forward_clocks_take_the_buckets_path_and_give_the_rules_rows(
    make_events: Any, seed: int
) -> None:
    events = make_events(
        random_log("r1", seed, steps_back=False) + random_log("r2", seed + 10, False)
    )
    bounds = run_bounds(events)
    actual, disordered = fast_path(events, bounds)
    assert disordered == []
    expected = depth_timeline(events, bounds)
    assert expected.count() > 300  # buckets of 2 s over ~10 minutes, three queues, two runs
    assert_df_equality(
        actual.select(*COLUMNS),
        expected.select(*COLUMNS),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_clocks_stepping_back_hand_their_queues_to_the_rule(make_events: Any) -> None:
    events = make_events(random_log("r1", 3, steps_back=False) + random_log("r2", 4, True))
    bounds = run_bounds(events)
    actual, disordered = fast_path(events, bounds)
    assert {(row.run_id, row.queue) for row in disordered} == {
        ("r2", "q1"),
        ("r2", "q2"),
        ("r2", "q3"),
    }
    assert_df_equality(
        actual.select(*COLUMNS),
        depth_timeline(events, bounds).select(*COLUMNS),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_value_carried_in_counts_towards_the_buckets_largest_depth(make_events: Any) -> None:
    """A bucket whose first events log no depth starts at the depth carried in: 9 here, larger
    than the 2 it logs, as the rule's per-event state has it (buckets of 0.5 s: the run lasts
    100 s)."""
    rows = [
        event(1, at(1), "enqueue", queue="q", depth_msgs=9, depth_bytes=900),
        event(2, at(1) + timedelta(seconds=10), "thresholds_changed", queue="q", flow_stop_count=5),
        event(
            3, at(1) + timedelta(seconds=10.2), "dequeue", queue="q", depth_msgs=2, depth_bytes=200
        ),
        event(
            4, at(1) + timedelta(seconds=100), "dequeue", queue="q", depth_msgs=1, depth_bytes=100
        ),
    ]
    events = make_events(rows)
    bounds = run_bounds(events)
    actual, _ = fast_path(events, bounds)
    second = actual.where("events = 2").first()
    assert (second.max_depth_msgs, second.last_depth_msgs, second.flow_stop_count) == (9, 2, 5)
    assert_df_equality(
        actual.select(*COLUMNS),
        depth_timeline(events, bounds).select(*COLUMNS),
        ignore_row_order=True,
        ignore_nullable=True,
    )

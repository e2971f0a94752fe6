"""Silver queue_depth_timeline from hand-built events (jobs/transforms/depth_timeline.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.transforms.depth_timeline import ROUND_WIDTHS_US, bucket_width_us, depth_timeline
from jobs.transforms.episodes import run_bounds
from schemas.timelines import QUEUE_DEPTH_TIMELINE
from tests.conftest import at, event, naive

pytestmark = pytest.mark.spark

START = at(1)


def after(seconds: float) -> Any:
    return START + timedelta(seconds=seconds)


def stop_and_resume() -> list[dict[str, Any]]:
    """Stop 4 / resume 2 on q; the run's watermark is 1,000 s after its first event."""
    q = {"queue": "q"}
    thresholds = {"flow_stop_count": 4, "flow_resume_count": 2, "flow_stop_size": 0}
    return [
        event(1, after(0), "queue_declared", **q, **thresholds, flow_resume_size=0, depth_msgs=0),
        event(2, after(1), "enqueue", **q, link="p", depth_msgs=3, depth_bytes=30),
        event(3, after(2), "enqueue", **q, link="p", depth_msgs=5, depth_bytes=50),
        event(4, after(2), "flow_stopped", **q, depth_msgs=5),
        event(5, after(3), "dequeue", **q, depth_msgs=4, depth_bytes=40),
        event(6, after(7), "dequeue", **q, depth_msgs=2, depth_bytes=20),
        event(7, after(7), "flow_resumed", **q, depth_msgs=2),
        # New thresholds, no depth logged: the depth carried is the last one logged (2).
        event(8, after(12), "thresholds_changed", **q, flow_stop_count=10, flow_resume_count=8),
        # A link event of the run without a queue: not a queue's point, but the run's watermark.
        event(9, after(500), "flow", link="c", credit=5),
        event(10, after(1000), "dequeue", **q, depth_msgs=1, depth_bytes=10),
    ]


TIMELINE_COLUMNS = (
    "run_id, queue, bucket_start, bucket_s, events, max_depth_msgs, last_depth_msgs, "
    "max_depth_bytes, last_depth_bytes, flow_stop_count, flow_resume_count, stopped_in_bucket, "
    "flow_stopped"
)
#: Typed as the table types them (schemas/timelines.py), not by a second spelling here.
TIMELINE_TYPES = QUEUE_DEPTH_TIMELINE.to_spark(TIMELINE_COLUMNS.split(", "))


def timeline_of(make_events: Any, rows: list[dict[str, Any]]) -> Any:
    events = make_events(rows)
    return depth_timeline(events, run_bounds(events))


def test_buckets_hold_max_and_last_depth_thresholds_and_flow_state(
    spark: Any, make_events: Any
) -> None:
    # 1,000 s / 300 buckets = 3.3 s, rounded up to 5 s: buckets [0, 5), [5, 10), [10, 15) and
    # the one of the watermark, [1000, 1005).
    actual = timeline_of(make_events, stop_and_resume()).select(*TIMELINE_COLUMNS.split(", "))
    expected = spark.createDataFrame(
        [
            # Declared at 0, 3 then 5 (stopped at 2 s), 4: stopped at its end.
            ("r1", "q", naive(after(0)), 5.0, 5, 5, 4, 50, 40, 4, 2, True, True),
            # Stopped when it began, resumed at 7 s at depth 2.
            ("r1", "q", naive(after(5)), 5.0, 2, 2, 2, 20, 20, 4, 2, True, False),
            # Only the thresholds changed: the depth is still 2, never stopped.
            ("r1", "q", naive(after(10)), 5.0, 1, 2, 2, 20, 20, 10, 8, False, False),
            ("r1", "q", naive(after(1000)), 5.0, 1, 1, 1, 10, 10, 10, 8, False, False),
        ],
        TIMELINE_TYPES,
    )
    assert_df_equality(
        actual,
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,  # the table's column docs
        ignore_column_order=True,
    )


def test_a_short_run_gets_the_narrowest_bucket(spark: Any, make_events: Any) -> None:
    # 50 ms / 300 is 0.17 ms: every bucket is 1 ms wide, and events 0.5 ms apart share one.
    q = {"run_id": "r2", "queue": "fast"}
    rows = [
        event(1, after(0), "enqueue", **q, depth_msgs=1),
        event(2, after(0.0005), "enqueue", **q, depth_msgs=2),
        event(3, after(0.05), "dequeue", **q, depth_msgs=1),
    ]
    actual = timeline_of(make_events, rows)
    got = [(r.bucket_start, r.bucket_s, r.events, r.last_depth_msgs) for r in actual.collect()]
    assert sorted(got) == [
        (naive(after(0)), 0.001, 2, 2),
        (naive(after(0.05)), 0.001, 1, 1),
    ]


def test_date_is_the_utc_day_of_the_bucket(spark: Any, make_events: Any) -> None:
    rows = [
        event(1, at(1, 23, 59), "enqueue", queue="q", depth_msgs=1),
        event(2, at(2, 0, 1), "dequeue", queue="q", depth_msgs=0),
    ]
    dates = timeline_of(make_events, rows).select("date").distinct().collect()
    assert sorted(r.date for r in dates) == [at(1).date(), at(2).date()]


@pytest.mark.parametrize(
    ("span_us", "width_us"),
    [
        (0, 1_000),  # one instant: the narrowest bucket
        (300_000, 1_000),  # exactly 300 buckets of 1 ms
        (300_001, 2_000),  # one microsecond more: the next round width
        (600_000_000, 2_000_000),  # 10 minutes: 2 s
        (1_000_000_000, 5_000_000),  # 1,000 s: 3.3 s rounded up to 5 s
        (86_400_000_000, 300_000_000),  # a day: 288 s rounded up to 5 minutes
        (10 * 86_400_000_000, 300_000_000),  # ten days: a day's width, 300 buckets a day
        (72_000_000_000, 300_000_000),  # 20 h: 240 s, the first width above 200 s
    ],
)
def test_bucket_width_is_round_and_gives_at_most_300_buckets(
    spark: Any, span_us: int, width_us: int
) -> None:
    width = spark.range(1).select(bucket_width_us(F.lit(span_us)).alias("w")).first().w
    assert width == width_us
    assert min(span_us, 86_400_000_000) // width <= 300
    # Counted from the epoch, buckets never straddle midnight (jobs/episodes.py recomputes a
    # day's buckets from that day's events).
    assert 86_400_000_000 % width == 0


def test_every_round_width_divides_a_day() -> None:
    assert all(86_400_000_000 % width == 0 for width in ROUND_WIDTHS_US)
    assert sorted(ROUND_WIDTHS_US) == list(ROUND_WIDTHS_US)


def test_rewriting_a_run_replaces_its_rows(
    spark: Any, make_events: Any, pipeline_conf: Any
) -> None:
    """Idempotent as the episodes are: the run's rows are replaced, other runs' kept."""
    from jobs.episodes import depth_timeline_path, write_depth_timeline
    from jobs.span_events import SpanEvents

    _, conf = pipeline_conf()
    other = [event(1, after(0), "enqueue", run_id="r9", queue="q", depth_msgs=1)]
    events = make_events(stop_and_resume() + other)
    bounds = run_bounds(events)
    day = START.date()
    both = SpanEvents(events, False, day, day, ("r1", "r9"))
    assert write_depth_timeline(spark, conf, both, bounds) == 5
    # Delta copies the rows of other runs sharing a rewritten file: the count written may be 5.
    r1 = SpanEvents(events.where("run_id = 'r1'"), False, day, day, ("r1",))
    write_depth_timeline(spark, conf, r1, bounds)
    table = spark.read.format("delta").load(depth_timeline_path(conf))
    assert sorted(r.run_id for r in table.collect()) == ["r1"] * 4 + ["r9"]

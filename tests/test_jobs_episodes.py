"""Silver episodes from hand-built events (jobs/transforms/episodes.py)."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from jobs.transforms.episodes import link_starvation_episodes, queue_flow_episodes, run_bounds
from tests.conftest import at, event, naive

pytestmark = pytest.mark.spark

EPISODE_COLUMNS = [
    "run_id",
    "queue",
    "start_seq",
    "end_seq",
    "is_open",
    "duration_s",
    "peak_depth_msgs",
    "overshoot_msgs",
    "overshoot_bytes",
    "producers",
    "overshoot_bound_msgs",
    "overshoot_ratio",
]


def stopped_across_midnight(run_id: str = "r1") -> list[dict]:
    """Stop 4 / resume 2: p1's enqueue at 23:55 triggers the stop, p2 joins, resumed at 01:00."""
    q = {"run_id": run_id, "queue": "q"}
    limits = {"flow_stop_count": 4, "flow_resume_count": 2, "flow_stop_size": 0}
    return [
        event(1, at(1, 23), "queue_declared", **q, **limits, depth_msgs=0, flow_stopped_count=0),
        event(2, at(1, 23, 50), "enqueue", **q, link="p1", capacity=3, depth_msgs=4),
        event(3, at(1, 23, 55), "enqueue", **q, link="p1", capacity=3, depth_msgs=5),
        event(4, at(1, 23, 55), "flow_stopped", **q, depth_msgs=5, flow_stopped_count=1),
        event(5, at(1, 23, 58), "enqueue", **q, link="p2", capacity=2, depth_msgs=6),
        event(6, at(2, 0, 30), "enqueue", **q, link="p1", capacity=3, depth_msgs=7),
        event(7, at(2, 1), "dequeue", **q, depth_msgs=1),
        event(8, at(2, 1), "flow_resumed", **q, depth_msgs=1, flow_stopped_count=1),
        event(9, at(2, 2), "dequeue", **q, depth_msgs=0),
    ]


def episodes_of(make_events, rows):
    events = make_events(rows)
    return queue_flow_episodes(events, run_bounds(events))


def test_episode_across_midnight_has_peak_overshoot_and_bound(spark, make_events):
    actual = episodes_of(make_events, stopped_across_midnight())
    # peak 7 - stop 4 = 3; producers p1 (its triggering enqueue included, capacity 3) and p2 (2).
    expected = spark.createDataFrame(
        [("r1", "q", 4, 8, False, 3900.0, 7, 3, None, 2, 5, 0.6)],
        "run_id string, queue string, start_seq long, end_seq long, is_open boolean, "
        "duration_s double, peak_depth_msgs long, overshoot_msgs long, overshoot_bytes long, "
        "producers long, overshoot_bound_msgs long, overshoot_ratio double",
    )
    assert_df_equality(
        actual.select(*EPISODE_COLUMNS), expected, ignore_nullable=True, ignore_metadata=True
    )
    row = actual.first()
    assert (row.start_ts, row.end_ts, str(row.start_date)) == (
        naive(at(1, 23, 55)),
        naive(at(2, 1)),
        "2024-01-01",
    )
    assert (row.flow_stop_count, row.flow_resume_count, row.flow_stopped_count) == (4, 2, 1)


def test_episode_open_at_watermark(make_events):
    rows = stopped_across_midnight()[:6]  # never resumed; the run's last event is at 00:30
    row = episodes_of(make_events, rows).first()
    assert (row.is_open, row.end_seq, row.end_ts, row.duration_s) == (True, None, None, None)
    assert row.run_watermark_ts == naive(at(2, 0, 30))
    assert row.peak_depth_msgs == 7


def test_two_runs_of_the_same_queue_are_separate_timelines(spark, make_events):
    second = [
        event(1, at(1, 12), "enqueue", run_id="r2", queue="q", link="p9", capacity=10,
              depth_msgs=20, flow_stop_count=10),
        event(2, at(1, 12), "flow_stopped", run_id="r2", queue="q", depth_msgs=20),
        event(3, at(1, 13), "flow_resumed", run_id="r2", queue="q", depth_msgs=1),
    ]  # fmt: skip
    actual = episodes_of(make_events, stopped_across_midnight() + second)
    got = {r.run_id: r for r in actual.collect()}
    assert set(got) == {"r1", "r2"}
    assert (got["r2"].peak_depth_msgs, got["r2"].overshoot_msgs) == (20, 10)
    assert (got["r2"].overshoot_bound_msgs, got["r2"].overshoot_ratio) == (10, 1.0)
    assert got["r1"].overshoot_bound_msgs == 5


def test_triggering_enqueue_counts_even_when_the_transition_is_stamped_later(make_events):
    # DESIGN.md §4: the bound includes "the enqueue that triggered it"; a log may stamp the
    # flow_stopped a little after that enqueue: the order (seq) decides, not the timestamps.
    rows = [
        event(1, at(1, 9), "enqueue", queue="q", link="early", capacity=7, depth_msgs=1,
              flow_stop_count=1),
        event(2, at(1, 10), "enqueue", queue="q", link="trigger", capacity=4, depth_msgs=2,
              flow_stop_count=1),
        event(3, at(1, 10, 0, 1), "flow_stopped", queue="q", depth_msgs=2, flow_stop_count=1),
        event(4, at(1, 10, 5), "flow_resumed", queue="q", depth_msgs=0, flow_stop_count=1),
    ]  # fmt: skip
    row = episodes_of(make_events, rows).first()
    # "early" enqueued before the episode and is not counted; "trigger" is.
    assert (row.producers, row.overshoot_bound_msgs, row.overshoot_msgs) == (1, 4, 1)


def test_events_out_of_order_in_the_input_give_the_same_episodes(make_events):
    rows = stopped_across_midnight()
    in_order = episodes_of(make_events, rows)
    shuffled = episodes_of(make_events, [rows[i] for i in (8, 3, 0, 6, 1, 7, 5, 2, 4)])
    assert_df_equality(in_order, shuffled, ignore_row_order=True)


def test_high_frequency_toggling_within_one_second(make_events):
    rows, seq = [], 0
    for i in range(10):  # 10 stop/resume pairs, 100 ms apart, each stopped for 40 ms
        start = at(3, 12, 0, 0, i * 100_000)
        end = at(3, 12, 0, 0, i * 100_000 + 40_000)
        for ts, kind, depth in ((start, "enqueue", 5), (start, "flow_stopped", 5),
                                (end, "dequeue", 1), (end, "flow_resumed", 1)):  # fmt: skip
            seq += 1
            rows.append(event(seq, ts, kind, queue="q", depth_msgs=depth, flow_stop_count=4,
                              link="p1" if kind == "enqueue" else None, capacity=1))  # fmt: skip
    actual = episodes_of(make_events, rows).orderBy("start_seq").collect()
    assert len(actual) == 10
    assert {r.duration_s for r in actual} == {0.04}
    assert {(r.overshoot_msgs, r.overshoot_bound_msgs) for r in actual} == {(1, 1)}


def test_repeated_flow_stopped_while_stopped_is_one_episode(make_events):
    rows = [
        event(1, at(1, 1), "flow_stopped", queue="q", depth_msgs=5, flow_stop_count=4),
        event(2, at(1, 2), "flow_stopped", queue="q", depth_msgs=6),
        event(3, at(1, 3), "flow_resumed", queue="q", depth_msgs=1),
    ]
    actual = episodes_of(make_events, rows).collect()
    assert [(r.start_seq, r.end_seq, r.peak_depth_msgs) for r in actual] == [(1, 3, 6)]


def link_starving_across_midnight() -> list[dict]:
    link = {"link": "l1", "link_role": "consumer"}
    return [
        event(1, at(1, 22), "link_attached", **link, credit=10, available=0),
        event(2, at(1, 23), "flow", **link, credit=0, available=5),  # starves
        event(3, at(2, 0, 30), "transfer", link="l1"),  # carries no credit: no state change
        event(4, at(2, 1), "flow", link="l1", credit=10),  # credit granted: ends it
        event(5, at(2, 2), "flow", link="l1", credit=0, available=3),  # starves again
        event(6, at(2, 3), "link_detached", link="l1"),  # ends it
        event(7, at(2, 4), "enqueue", queue="other", depth_msgs=1),  # watermark
    ]


def test_link_starving_across_midnight(spark, make_events):
    events = make_events(link_starving_across_midnight())
    actual = link_starvation_episodes(events, run_bounds(events))
    expected = spark.createDataFrame(
        [
            ("l1", "consumer", 2, 4, "credit", False, 7200.0, 5),
            ("l1", "consumer", 5, 6, "detached", False, 3600.0, 3),
        ],
        "link string, link_role string, start_seq long, end_seq long, end_reason string, "
        "is_open boolean, duration_s double, available_at_start long",
    )
    columns = expected.columns
    assert_df_equality(
        actual.select(*columns),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )


def test_link_starvation_open_at_watermark(make_events):
    events = make_events(link_starving_across_midnight()[:3])
    row = link_starvation_episodes(events, run_bounds(events)).first()
    assert (row.start_seq, row.is_open, row.end_reason) == (2, True, None)
    assert row.run_watermark_ts == naive(at(2, 0, 30))

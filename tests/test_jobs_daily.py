"""Gold daily metrics from hand-built events (jobs/transforms/daily.py)."""

from __future__ import annotations

from datetime import date

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.transforms.daily import link_starvation_daily, queue_flow_daily
from jobs.transforms.episodes import link_starvation_episodes, queue_flow_episodes, run_bounds
from jobs.transforms.timeutil import summed_seconds
from schemas.tables import LINK_STARVATION_DAILY, QUEUE_FLOW_DAILY
from tests.conftest import at, event, naive
from tests.test_jobs_episodes import (
    link_starving_across_midnight,
    producer_without_window,
    stopped_across_midnight,
)

pytestmark = pytest.mark.spark

DAY1, DAY2, DAY3 = date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)
QUEUE_COLUMNS = [
    "date",
    "run_id",
    "queue",
    "flow_stopped_count",
    "flow_stopped_counter_delta",
    "counter_check_ok",
    "stopped_at_day_start",
    "time_stopped_s",
    "observed_s",
    "stopped_share",
    "episodes",
    "max_overshoot_msgs",
]
#: Typed as the table types them (schemas/), not by a second spelling here.
QUEUE_TYPES = QUEUE_FLOW_DAILY.to_spark(QUEUE_COLUMNS)


def queue_daily(make_events, rows, date_from, date_to):
    events = make_events(rows)
    bounds = run_bounds(events)
    return queue_flow_daily(
        events, queue_flow_episodes(events, bounds), bounds, date_from, date_to
    ).select(*QUEUE_COLUMNS)


def test_stopped_interval_across_midnight_is_split_with_carry_over(spark, make_events):
    actual = queue_daily(make_events, stopped_across_midnight(), DAY1, DAY2)
    # Run observed from 23:00 (first event) to 02:00 (watermark); stopped 23:55 -> 01:00.
    expected = spark.createDataFrame(
        [
            (DAY1, "r1", "q", 1, 1, True, False, 300.0, 3600.0, 300 / 3600, 1, 3),
            (DAY2, "r1", "q", 0, 0, True, True, 3600.0, 7200.0, 0.5, 0, None),
        ],
        QUEUE_TYPES,
    )
    assert_df_equality(
        actual, expected, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


def test_processing_only_the_second_day_carries_the_stop_over(spark, make_events):
    actual = queue_daily(make_events, stopped_across_midnight(), DAY2, DAY2).collect()
    assert [(r.date, r.time_stopped_s, r.stopped_at_day_start, r.flow_stopped_counter_delta)
            for r in actual] == [(DAY2, 3600.0, True, 0)]  # fmt: skip


def test_interval_open_at_the_watermark_ends_there(make_events):
    rows = stopped_across_midnight()[:6]  # stopped at 23:55, last event 00:30 on day 2
    got = {r.date: r for r in queue_daily(make_events, rows, DAY1, DAY3).collect()}
    assert set(got) == {DAY1, DAY2}  # nothing observed on day 3
    assert (got[DAY2].time_stopped_s, got[DAY2].observed_s, got[DAY2].stopped_share) == (
        1800.0,
        1800.0,
        1.0,
    )


def test_two_runs_of_the_same_queue_get_one_row_each(make_events):
    rows = stopped_across_midnight("r1") + stopped_across_midnight("r2")
    got = queue_daily(make_events, rows, DAY1, DAY1).collect()
    assert sorted((r.run_id, r.flow_stopped_count, r.time_stopped_s) for r in got) == [
        ("r1", 1, 300.0),
        ("r2", 1, 300.0),
    ]


def test_high_frequency_toggling_counts_every_episode(make_events):
    rows, seq = [event(1, at(3, 11), "queue_declared", queue="q", flow_stopped_count=0)], 1
    for i in range(10):  # 10 stop/resume pairs within one second, each stopped for 40 ms
        start, end = at(3, 12, 0, 0, i * 100_000), at(3, 12, 0, 0, i * 100_000 + 40_000)
        for ts, kind in ((start, "enqueue"), (start, "flow_stopped"), (end, "flow_resumed")):
            seq += 1
            counter = i + 1 if kind != "enqueue" else i
            rows.append(event(seq, ts, kind, queue="q", depth_msgs=5, flow_stop_count=4,
                              flow_stopped_count=counter))  # fmt: skip
    row = queue_daily(make_events, rows, DAY3, DAY3).first()
    assert (row.flow_stopped_count, row.flow_stopped_counter_delta, row.episodes) == (10, 10, 10)
    assert row.counter_check_ok
    assert row.time_stopped_s == pytest.approx(0.4)


def test_counter_disagreeing_with_events_is_flagged(make_events):
    rows = stopped_across_midnight()
    rows[3] = {**rows[3], "flow_stopped_count": 2}  # the counter jumps by 2 for one flow_stopped
    row = queue_daily(make_events, rows, DAY1, DAY1).first()
    assert (row.flow_stopped_count, row.flow_stopped_counter_delta) == (1, 2)
    assert row.counter_check_ok is False


def test_p95_overshoot_is_exact_with_linear_interpolation(make_events):
    rows, seq = [], 0
    for i, peak in enumerate((5, 6, 8, 14)):  # stop 4: overshoots 1, 2, 4, 10
        seq += 2
        rows += [
            event(seq - 1, at(1, i + 1), "flow_stopped", queue="q", depth_msgs=peak,
                  flow_stop_count=4),
            event(seq, at(1, i + 1, 30), "flow_resumed", queue="q", depth_msgs=1),
        ]  # fmt: skip
    events = make_events(rows)
    bounds = run_bounds(events)
    row = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY1).first()
    # Position 0.95 * 3 = 2.85 between 4 and 10: 4 + 0.85 * 6 = 9.1.
    assert (row.episodes, row.max_overshoot_msgs) == (4, 10)
    assert row.p95_overshoot_msgs == pytest.approx(9.1)


def test_link_starving_across_midnight(spark, make_events):
    events = make_events(link_starving_across_midnight())
    bounds = run_bounds(events)
    starvations = link_starvation_episodes(events, bounds)
    actual = link_starvation_daily(events, starvations, bounds, DAY1, DAY2).select(
        "date", "link", "link_role", "starved_s", "episodes", "attached_s", "starved_share"
    )
    # Attached 22:00 -> 03:00 (detach); starved 23:00 -> 01:00 and 02:00 -> 03:00.
    expected = spark.createDataFrame(
        [
            (DAY1, "l1", "consumer", 3600.0, 1, 7200.0, 0.5),
            (DAY2, "l1", "consumer", 7200.0, 1, 10800.0, 7200 / 10800),
        ],
        LINK_STARVATION_DAILY.to_spark(
            ["date", "link", "link_role", "starved_s", "episodes", "attached_s", "starved_share"]
        ),
    )
    assert_df_equality(
        actual, expected, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


def test_link_attached_before_the_log_starts_is_attached_from_its_first_event(make_events):
    from jobs.transforms.daily import link_attachments

    rows = [
        event(1, at(1, 9), "enqueue", queue="q", depth_msgs=1),
        event(2, at(1, 10), "flow", link="l1", credit=5),  # first event, no attach, no role
        event(3, at(1, 11), "flow", link="l1", credit=0, available=2, link_role="publisher"),
        event(4, at(1, 12), "link_detached", link="l1"),
        event(5, at(1, 13), "link_attached", link="l1"),
        event(6, at(1, 14), "flow", link="l2", credit=1, link_role="consumer"),  # role first
    ]
    got = {
        (r.link, r.start_seq): (r.end_seq, r.link_role)
        for r in link_attachments(make_events(rows)).collect()
    }
    assert got == {
        ("l1", 2): (4, None),
        ("l1", 5): (None, "publisher"),
        ("l2", 6): (None, "consumer"),
    }


def test_a_link_is_attached_from_its_first_event_by_seq_whatever_the_clock_says(make_events):
    """A link's first event is its first by ``seq`` (the total order), with that event's own ts:
    a clock stepping back stamps the next event earlier, and neither that ts nor the next event
    starts the interval."""
    from jobs.transforms.daily import link_attachments

    rows = [
        event(1, at(1, 10), "flow", link="l1", credit=5),  # first: no attach, no role
        event(2, at(1, 9, 30), "flow", link="l1", credit=3, link_role="consumer"),  # earlier ts
        event(3, at(1, 11), "link_detached", link="l1"),
        event(4, at(1, 12), "link_attached", link="l2", link_role="publisher"),  # first, relevant
        event(5, at(1, 13), "flow", link="l2", credit=0),
    ]
    got = {
        (r.link, r.start_seq): (r.start_ts, r.end_seq, r.end_event_type, r.link_role)
        for r in link_attachments(make_events(rows)).collect()
    }
    assert got == {
        ("l1", 1): (naive(at(1, 10)), 3, "link_detached", None),
        ("l2", 4): (naive(at(1, 12)), None, None, "publisher"),
    }


def test_a_producer_named_only_on_enqueues_has_no_link_rows(make_events):
    """DESIGN §3: "Enqueue events name the producer in `link`", but "A link event is emitted
    whenever a link's `credit` or `available` changes": only link events make a link with
    attached time. An AMQP 0-10 producer (no credit, no attach) gets no link row; a link's
    attached time starts at its first link event, not at an enqueue naming it."""
    from jobs.transforms.daily import link_attachments

    rows = [
        event(1, at(1, 9), "enqueue", queue="q", link="p1", depth_msgs=1, capacity=10),
        event(2, at(1, 9, 30), "enqueue", queue="q", link="l1", depth_msgs=2, capacity=10),
        event(3, at(1, 10), "flow", link="l1", credit=5, available=0),
        event(4, at(1, 11), "enqueue", queue="q", link="p1", depth_msgs=3, capacity=10),
    ]
    got = [(r.link, r.start_seq, r.end_seq) for r in link_attachments(make_events(rows)).collect()]
    assert got == [("l1", 3, None)]


def test_the_daily_max_ratio_is_over_the_episodes_that_have_a_bound(make_events):
    rows = [
        *producer_without_window(),
        event(5, at(1, 12), "enqueue", queue="q", link="p1", capacity=2, depth_msgs=5),
        event(6, at(1, 12), "flow_stopped", queue="q", depth_msgs=5),
        event(7, at(1, 12, 5), "flow_resumed", queue="q", depth_msgs=1),
    ]
    events = make_events(rows)
    bounds = run_bounds(events)
    (row,) = queue_flow_daily(
        events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY1
    ).collect()
    # Episode 1: overshoot 27 - 4 = 23, no bound (p2 has no window), no ratio. Episode 2 (stop
    # still 4): overshoot 5 - 4 = 1, bound 2 (p1), ratio 0.5. Max overshoot 23; p95 of [1, 23]:
    # 1 + 0.95 * 22 = 21.9; the max ratio is that of the one episode with a guarantee, 0.5.
    assert (row.episodes, row.max_overshoot_msgs, row.max_overshoot_ratio) == (2, 23, 0.5)
    assert row.p95_overshoot_msgs == pytest.approx(21.9)


DAY4 = date(2024, 1, 4)


def test_a_declared_queue_gets_a_row_for_every_idle_day_up_to_its_run_watermark(spark, make_events):
    """DESIGN §4: "A queue gets a row for every day of its run's observed span from its
    declaration on, idle days included"."""
    rows = [
        event(1, at(1, 10), "queue_declared", queue="q", depth_msgs=0, flow_stopped_count=0),
        event(2, at(1, 10), "enqueue", queue="q", link="p1", capacity=5, depth_msgs=1,
              flow_stopped_count=0),
        event(3, at(3, 12), "queue_declared", queue="other", depth_msgs=0, flow_stopped_count=0),
        event(1, at(3, 6), "queue_declared", run_id="r2", queue="q", flow_stopped_count=0),
        event(2, at(3, 18), "enqueue", run_id="r2", queue="q", depth_msgs=1, flow_stopped_count=0),
    ]  # fmt: skip
    actual = queue_daily(make_events, rows, DAY1, DAY4)
    # r1 observes day 1 10:00 -> day 3 12:00 (its watermark), r2 day 3 06:00 -> 18:00. r1's q,
    # declared on day 1, is idle on days 2 and 3: no stopped events, a counter change of 0 (it
    # cannot move without events), so the check holds; nothing stopped; observed the run's
    # seconds: day 1 10:00 -> 24:00 = 50400, day 2 86400, day 3 00:00 -> 12:00 = 43200; share
    # 0 / observed = 0; no episode, so no overshoot. "other" is declared on day 3 and r2's q on
    # day 3: one row each. Day 4 is after both watermarks: no row; r2 has no row before day 3.
    expected = spark.createDataFrame(
        [
            (DAY1, "r1", "q", 0, 0, True, False, 0.0, 50400.0, 0.0, 0, None),
            (DAY2, "r1", "q", 0, 0, True, False, 0.0, 86400.0, 0.0, 0, None),
            (DAY3, "r1", "q", 0, 0, True, False, 0.0, 43200.0, 0.0, 0, None),
            (DAY3, "r1", "other", 0, 0, True, False, 0.0, 43200.0, 0.0, 0, None),
            (DAY3, "r2", "q", 0, 0, True, False, 0.0, 43200.0, 0.0, 0, None),
        ],
        QUEUE_TYPES,
    )
    assert_df_equality(
        actual, expected, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )
    # Processing day 2 alone (the declaration is on day 1, before the range) gives the idle row,
    # with nothing measured: depths and overshoots are null.
    events = make_events(rows)
    bounds = run_bounds(events)
    (idle,) = queue_flow_daily(
        events, queue_flow_episodes(events, bounds), bounds, DAY2, DAY2
    ).collect()
    assert (idle.date, idle.run_id, idle.queue, idle.observed_s, idle.stopped_share) == (
        DAY2, "r1", "q", 86400.0, 0.0
    )  # fmt: skip
    assert idle.flow_stopped_counter_delta == 0 and idle.counter_check_ok is True
    nothing_measured = (
        idle.max_depth_msgs, idle.max_depth_bytes, idle.max_overshoot_msgs,
        idle.p95_overshoot_msgs, idle.max_overshoot_bytes, idle.p95_overshoot_bytes,
        idle.max_overshoot_ratio,
    )  # fmt: skip
    assert nothing_measured == (None,) * 7


def test_an_undeclared_queue_starts_at_its_first_event_and_a_midnight_watermark_day_counts(
    make_events,
):
    rows = [
        event(1, at(1, 22), "enqueue", queue="q1", depth_msgs=1, flow_stopped_count=0),
        event(2, at(2, 6), "enqueue", queue="q2", depth_msgs=1, flow_stopped_count=0),
        event(3, at(4), "alarm_raised"),  # the watermark: day 4 00:00, of no queue
    ]
    got = {
        (r.queue, r.date): (r.observed_s, r.stopped_share, r.time_stopped_s, r.episodes)
        for r in queue_daily(make_events, rows, DAY1, DAY4).collect()
    }
    # The run observes day 1 22:00 -> day 4 00:00: day 1 7200 s, days 2 and 3 86400 s, day 4 0 s
    # (its watermark's day: an observed instant, so a row, with no share: 0 observed). q1 from
    # its first event (day 1); q2, seen without a declaration, from its first event (day 2, not
    # day 1 although the run observed day 1). Observed seconds are the run's, not the queue's:
    # q2's day 2 is 86400 s although it was first seen at 06:00.
    assert got == {
        ("q1", DAY1): (7200.0, 0.0, 0.0, 0),
        ("q1", DAY2): (86400.0, 0.0, 0.0, 0),
        ("q1", DAY3): (86400.0, 0.0, 0.0, 0),
        ("q1", DAY4): (0.0, None, 0.0, 0),
        ("q2", DAY2): (86400.0, 0.0, 0.0, 0),
        ("q2", DAY3): (86400.0, 0.0, 0.0, 0),
        ("q2", DAY4): (0.0, None, 0.0, 0),
    }


def test_seconds_add_up_the_same_whatever_the_order_of_the_rows(spark) -> None:
    # As doubles, 0.1 + 0.2 + 0.3 is 0.6000000000000001 and 0.3 + 0.2 + 0.1 is 0.6: one plan of
    # a query and another can feed a sum its rows in either order (the demo's starved_s did).
    def total(order: list[float]) -> tuple[float, float]:
        rows = spark.createDataFrame([(s,) for s in order], "s double").coalesce(1)
        row = rows.agg(F.sum("s").alias("doubles"), summed_seconds("s").alias("micros")).first()
        return row.doubles, row.micros

    forward, backward = total([0.1, 0.2, 0.3]), total([0.3, 0.2, 0.1])
    assert forward[0] != backward[0]  # the doubles' sum depends on the order
    assert forward[1] == backward[1] == 0.6
    assert spark.createDataFrame([(None,)], "s double").agg(summed_seconds("s")).first()[0] is None

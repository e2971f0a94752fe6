"""Silver episodes from hand-built events (jobs/transforms/episodes.py)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from chispa import assert_df_equality

from jobs.transforms.episodes import (
    link_starvation_episodes,
    queue_flow_episodes,
    queue_segment_stats,
    queue_segment_stats_by_lookup,
    run_bounds,
)
from schemas.model import US_PER_SECOND
from schemas.tables import LINK_STARVATION_EPISODES, QUEUE_FLOW_EPISODES
from tests.conftest import at, event, naive

pytestmark = pytest.mark.spark

LINK_EPISODE_COLUMNS = (
    "link", "link_role", "start_seq", "end_seq", "end_reason", "is_open", "duration_s",
    "available_at_start",
)  # fmt: skip
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


def episodes_of(make_events, rows, segment_stats=queue_segment_stats):
    """queue_flow_episodes of ``rows``, their segments' stats by ``segment_stats`` (the rule by
    default, as the transform's own default)."""
    events = make_events(rows)
    return queue_flow_episodes(events, run_bounds(events), segment_stats)


def test_episode_across_midnight_has_peak_overshoot_and_bound(spark, make_events):
    actual = episodes_of(make_events, stopped_across_midnight())
    # peak 7 - stop 4 = 3; producers p1 (its triggering enqueue included, capacity 3) and p2 (2).
    expected = spark.createDataFrame(
        [("r1", "q", 4, 8, False, 3900.0, 7, 3, None, 2, 5, 0.6)],
        QUEUE_FLOW_EPISODES.to_spark(EPISODE_COLUMNS),
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
        LINK_STARVATION_EPISODES.to_spark(LINK_EPISODE_COLUMNS),
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


def reference_queue_flow_episodes(events, bounds):
    """The episode definition spelled out with ten window functions over every queue event (the
    implementation before the segment aggregation): the oracle the faster one is checked against.
    Overshoot, duration and start date are spelled out here too (DESIGN §4), not imported from
    the code under test."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from jobs.transforms.episodes import QUEUE_KEYS, THRESHOLD_COLUMNS

    def overshoot(peak: str, stop: str):
        # "peak minus the stop threshold, floored at 0, for thresholds that are on" (0 = off)
        on = (F.coalesce(F.col(stop), F.lit(0)) > 0) & F.col(peak).isNotNull()
        return F.when(on, F.greatest(F.col(peak) - F.col(stop), F.lit(0)))

    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before_here = in_order.rowsBetween(Window.unboundedPreceding, -1)
    transition = F.when(
        F.col("event_type").isin("flow_stopped", "flow_resumed"), F.col("event_type")
    )
    carried = (*THRESHOLD_COLUMNS, "flow_stopped_count")
    stopped = F.coalesce(F.col("_last_transition") == "flow_stopped", F.lit(False))
    was_stopped = F.coalesce(F.col("_previous_transition") == "flow_stopped", F.lit(False))
    triggers = (
        (F.col("event_type") == "enqueue")
        & (F.col("_next_event_type") == "flow_stopped")
        & ~stopped
    )
    tagged = (
        events.where(F.col("queue").isNotNull())
        .select(
            *QUEUE_KEYS,
            "seq",
            "ts",
            "event_type",
            "link",
            "capacity",
            "size_bytes",
            "depth_msgs",
            "depth_bytes",
            # DESIGN §6: a collector's sample of the queue (a queue_declared with an interval).
            F.when(
                F.col("event_type") == "queue_declared",
                F.get_json_object("detail", "$.sample_interval_ms").cast("long"),
            ).alias("_sampled"),
            F.last(transition, ignorenulls=True).over(upto_here).alias("_last_transition"),
            F.last(transition, ignorenulls=True).over(before_here).alias("_previous_transition"),
            F.lead("event_type").over(in_order).alias("_next_event_type"),
            F.lead("seq").over(in_order).alias("_next_seq"),
            *(F.last(c, ignorenulls=True).over(upto_here).alias(c) for c in carried),
        )
        .withColumns(
            {
                "_stopped": stopped,
                "_was_stopped": was_stopped,
                "_triggers": triggers,
                "_entry_seq": F.when(stopped & ~was_stopped, F.col("seq")),
            }
        )
        .withColumn(
            "episode_seq",
            F.when(F.col("_triggers"), F.col("_next_seq")).when(
                F.col("_stopped") | F.col("_was_stopped"),
                F.last("_entry_seq", ignorenulls=True).over(upto_here),
            ),
        )
        .where(F.col("episode_seq").isNotNull())
    )
    at_start = F.col("seq") == F.col("episode_seq")
    at_end = ~F.col("_stopped") & F.col("_was_stopped")
    producer = F.when((F.col("event_type") == "enqueue") & F.col("link").isNotNull(), F.col("link"))
    start_end = {
        "start_ts": F.max(F.when(at_start, F.col("ts"))),
        **{c: F.max(F.when(at_start, F.col(c))) for c in carried},
        "end_seq": F.max(F.when(at_end, F.col("seq"))),
        "end_ts": F.max(F.when(at_end, F.col("ts"))),
    }
    dequeue = F.col("event_type") == "dequeue"
    per_producer = (
        tagged.withColumn("_producer", producer)
        .groupBy(*QUEUE_KEYS, "episode_seq", "_producer")
        .agg(
            *(value.alias(name) for name, value in start_end.items()),
            F.max("depth_msgs").alias("peak_depth_msgs"),
            F.max("depth_bytes").alias("peak_depth_bytes"),
            F.max(F.when(F.col("_producer").isNotNull(), F.col("capacity"))).alias("capacity"),
            F.max("_sampled").alias("_sampled"),
            F.count(F.when(dequeue, 1)).alias("_dequeues"),
            F.sum(F.when(dequeue, F.col("size_bytes"))).alias("_dequeued_size"),
            F.count(F.when(dequeue & F.col("size_bytes").isNull(), 1)).alias("_unsized"),
        )
    )
    episodes = (
        per_producer.groupBy(*QUEUE_KEYS, F.col("episode_seq").alias("start_seq"))
        .agg(
            *(F.max(name).alias(name) for name in start_end),
            F.max("peak_depth_msgs").alias("peak_depth_msgs"),
            F.max("peak_depth_bytes").alias("peak_depth_bytes"),
            F.count("_producer").alias("producers"),
            # DESIGN §4: the bound is null when any producer has no capacity (its enqueues in
            # the episode carry none).
            F.max(F.col("_producer").isNotNull() & F.col("capacity").isNull()).alias("_uncapped"),
            F.sum("capacity").alias("_capacity_sum"),
            F.max("_sampled").alias("sample_interval_ms"),
            F.sum("_dequeues").alias("dequeued_msgs"),
            # The dequeues' sizes, when every one of them logs one (none: 0).
            F.when(F.sum("_unsized") == 0, F.coalesce(F.sum("_dequeued_size"), F.lit(0))).alias(
                "dequeued_bytes"
            ),
        )
        .withColumn(
            "overshoot_bound_msgs",
            F.when(~F.col("_uncapped"), F.col("_capacity_sum")),
        )
        .join(bounds.select("run_id", "run_watermark_ts"), "run_id")
    )
    overshoot_msgs = overshoot("peak_depth_msgs", "flow_stop_count")
    overshoot_bytes = overshoot("peak_depth_bytes", "flow_stop_size")
    bound = F.col("overshoot_bound_msgs")
    # The test session's time zone is UTC (conftest), so to_date gives the UTC day; the log's ts
    # only grow with seq, so no duration is negative.
    duration_s = (F.unix_micros("end_ts") - F.unix_micros("start_ts")) / F.lit(float(US_PER_SECOND))
    return episodes.select(
        *QUEUE_KEYS, "start_seq", "start_ts", F.to_date("start_ts").alias("start_date"),
        "end_seq", "end_ts", F.col("end_seq").isNull().alias("is_open"),
        duration_s.alias("duration_s"),
        # The run's watermark only where the episode is still open (schemas/tables.py).
        F.when(F.col("end_seq").isNull(), F.col("run_watermark_ts")).alias("run_watermark_ts"),
        "flow_stopped_count", "peak_depth_msgs", "peak_depth_bytes",
        *THRESHOLD_COLUMNS, overshoot_msgs.alias("overshoot_msgs"),
        overshoot_bytes.alias("overshoot_bytes"), "producers",
        bound.alias("overshoot_bound_msgs"),
        F.when(bound > 0, overshoot_msgs / bound).alias("overshoot_ratio"),
        "sample_interval_ms", "dequeued_msgs", "dequeued_bytes",
    )  # fmt: skip


def random_queue_log(seed: int, events: int = 400, bursty: bool = False) -> list[dict]:
    """Two runs, three queues and a link-only event mixed in, with every irregularity the episode
    definition has to handle: repeated stops and resumes, a stop as a queue's first event,
    thresholds and counters logged only now and then, enqueues without producer or capacity, and
    runs of one queue's events far apart in seq (other queues' traffic in between).

    ``bursty``: flow stops and resumes come in bursts (one stretch of 40 events in three) between
    calm stretches with gaps of thousands of seq, so a queue's changes are unevenly spread: the
    seq blocks of the lookup path (mean gap between changes) then hold many stretches in the
    bursts and none in the calm."""
    rng = random.Random(seed)
    calm = ["enqueue"] * 8 + ["dequeue"] * 6 + ["queue_declared", "thresholds_changed"]
    kinds = calm + ["flow_stopped"] * 3 + ["flow_resumed"] * 3
    steps = (1, 1, 1, 2, 7, 300, 4000) if bursty else (1, 1, 1, 2, 7, 300)
    rows = []
    for run in ("r1", "r2"):
        seq = rng.randint(0, 5)
        for i in range(events // 2):
            in_burst = not bursty or (i // 40) % 3 == 1
            seq += rng.choice(steps[:5] if bursty and in_burst else steps)
            ts = at(1, 12) + timedelta(seconds=seq * 7)
            if rng.random() < 0.05:
                rows.append(event(seq, ts, "flow", run_id=run, link="l1", credit=0, available=1))
                continue
            kind = rng.choice(kinds if in_burst else calm)
            queue = rng.choice(("qa", "qb", "qb", "qc"))
            fields = {"run_id": run, "queue": queue}
            if rng.random() < 0.7:
                fields["depth_msgs"] = rng.randint(0, 60)
            if rng.random() < 0.5:
                fields["depth_bytes"] = rng.randint(0, 60_000)
            if rng.random() < 0.3:
                fields.update(flow_stop_count=rng.choice((0, 20, 40)), flow_resume_count=10)
            if rng.random() < 0.2:
                fields.update(flow_stop_size=rng.choice((0, 30_000)), flow_resume_size=1000)
            if rng.random() < 0.3:
                fields["flow_stopped_count"] = i
            if kind == "queue_declared" and rng.random() < 0.5:  # a collector's sample
                sample = {"origin": "jolokia", "sample_interval_ms": rng.choice((500, 30_000))}
                fields["detail"] = json.dumps(sample)
            if kind == "dequeue" and rng.random() < 0.9:  # now and then a dequeue sizeless
                fields["size_bytes"] = rng.randint(1, 2_000)
            if kind == "enqueue" and rng.random() < 0.9:
                fields["link"] = rng.choice(("p1", "p2", "p3", "p4"))
                if rng.random() < 0.9:
                    fields["capacity"] = rng.randint(1, 50)
            rows.append(event(seq, ts, kind, **fields))
    return rows


SEGMENT_STATS = {"rule": queue_segment_stats, "lookup": queue_segment_stats_by_lookup}


@pytest.mark.parametrize("path", SEGMENT_STATS)
@pytest.mark.parametrize(
    ("seed", "bursty"), [(0, False), (1, False), (2, False), (3, True), (4, True)]
)
def test_segment_aggregation_matches_the_window_definition(make_events, seed, bursty, path):
    events = make_events(random_queue_log(seed, events=800 if bursty else 400, bursty=bursty))
    bounds = run_bounds(events)
    expected = reference_queue_flow_episodes(events, bounds)
    assert expected.count() > 10  # the log must exercise plenty of episodes
    assert expected.where("sample_interval_ms IS NOT NULL").count() > 0  # and samples in them
    # and dequeues in them, summed or, one sizeless among them, not
    assert expected.where("dequeued_bytes > 0").count() > 0
    assert expected.where("dequeued_msgs > 0 AND dequeued_bytes IS NULL").count() > 0
    assert_df_equality(
        queue_flow_episodes(events, bounds, SEGMENT_STATS[path]),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )


@pytest.mark.parametrize("path", SEGMENT_STATS)
def test_a_trigger_is_merged_with_its_producer_and_one_without_link_adds_none(make_events, path):
    q = {"queue": "q"}
    rows = [
        # The trigger of the first episode is the queue's first event (before any change), and
        # its producer enqueues again during the episode with a larger window: one producer.
        event(1, at(1, 1), "enqueue", **q, link="p", capacity=5, depth_msgs=4),
        event(2, at(1, 2), "flow_stopped", **q, depth_msgs=4, flow_stop_count=3),
        event(3, at(1, 3), "enqueue", **q, link="p", capacity=7, depth_msgs=5),
        event(4, at(1, 4), "flow_resumed", **q, depth_msgs=0),
        # The second episode's trigger names no producer: its depth counts, no producer.
        event(5, at(1, 5), "enqueue", **q, depth_msgs=9),
        event(6, at(1, 6), "flow_stopped", **q, depth_msgs=9),
        event(7, at(1, 7), "enqueue", **q, link="p2", capacity=3, depth_msgs=8),
        event(8, at(1, 8), "flow_resumed", **q, depth_msgs=1),
    ]
    actual = episodes_of(make_events, rows, SEGMENT_STATS[path])
    got = [
        (r.start_seq, r.end_seq, r.peak_depth_msgs, r.producers, r.overshoot_bound_msgs)
        for r in actual.orderBy("start_seq").collect()
    ]
    assert got == [(2, 4, 5, 1, 7), (6, 8, 9, 1, 3)]


@pytest.mark.parametrize("path", SEGMENT_STATS)
def test_a_trigger_s_window_counts_with_the_producer_s_enqueues_in_the_episode(make_events, path):
    """The trigger's producer is one of the episode's producers, its window the largest it logs
    on the trigger or in the episode: none at all voids the bound, one on either side counts."""
    q = {"queue": "q", "flow_stop_count": 3}
    rows = [
        # p triggers without a window and does not enqueue again: two producers, no bound.
        event(1, at(1, 1), "enqueue", **q, link="p", depth_msgs=4),
        event(2, at(1, 2), "flow_stopped", **q, depth_msgs=4),
        event(3, at(1, 3), "enqueue", **q, link="p2", capacity=2, depth_msgs=6),
        event(4, at(1, 4), "flow_resumed", **q, depth_msgs=0),
        # p3 triggers without a window and logs one (4) in the episode: one producer, bound 4.
        event(5, at(1, 5), "enqueue", **q, link="p3", depth_msgs=5),
        event(6, at(1, 6), "flow_stopped", **q, depth_msgs=5),
        event(7, at(1, 7), "enqueue", **q, link="p3", capacity=4, depth_msgs=6),
        event(8, at(1, 8), "flow_resumed", **q, depth_msgs=1),
        # p4 triggers with a window (6) and enqueues in the episode without one: bound 6.
        event(9, at(1, 9), "enqueue", **q, link="p4", capacity=6, depth_msgs=5),
        event(10, at(1, 10), "flow_stopped", **q, depth_msgs=5),
        event(11, at(1, 11), "enqueue", **q, link="p4", depth_msgs=7),
        event(12, at(1, 12), "flow_resumed", **q, depth_msgs=1),
    ]
    actual = episodes_of(make_events, rows, SEGMENT_STATS[path])
    got = [
        (r.start_seq, r.producers, r.overshoot_msgs, r.overshoot_bound_msgs)
        for r in actual.orderBy("start_seq").collect()
    ]
    assert got == [(2, 2, 3, None), (6, 1, 3, 4), (10, 1, 4, 6)]


def test_stop_as_the_first_event_and_a_resume_without_stop(make_events):
    rows = [
        event(1, at(1, 1), "flow_resumed", queue="q", depth_msgs=0),  # not stopped: no change
        event(2, at(1, 2), "flow_stopped", queue="q", depth_msgs=9, flow_stop_count=4),
        event(3, at(1, 3), "enqueue", queue="q", link="p", capacity=2, depth_msgs=11),
        event(4, at(1, 4), "flow_resumed", queue="q", depth_msgs=1),
        event(5, at(1, 5), "flow_resumed", queue="q", depth_msgs=0),  # repeated: no change
        event(6, at(1, 6), "enqueue", queue="q", link="p", capacity=2, depth_msgs=12),
    ]
    actual = episodes_of(make_events, rows).collect()
    assert [(r.start_seq, r.end_seq, r.peak_depth_msgs, r.producers) for r in actual] == [
        (2, 4, 11, 1)
    ]


def test_a_credit_logged_without_available_is_not_known_to_starve(make_events):
    """DESIGN §4: "the link's state is the `credit` and `available` of its latest event that
    carries a credit": that event's own available, not one carried from an earlier event."""
    link = {"link": "l1", "link_role": "consumer"}
    rows = [
        event(1, at(1, 12), "link_attached", **link, credit=5, available=3),
        event(2, at(1, 13), "flow", link="l1", credit=0),  # available unknown: not starved
        event(3, at(1, 14), "flow", link="l1", available=4),  # no credit: the state is unchanged
        event(4, at(1, 15), "flow", link="l1", credit=0, available=2),  # starves
        event(5, at(1, 16), "link_detached", link="l1", credit=0, available=2),
    ]
    events = make_events(rows)
    got = [
        (r.start_seq, r.end_seq, r.duration_s, r.available_at_start)
        for r in link_starvation_episodes(events, run_bounds(events)).collect()
    ]
    assert got == [(4, 5, 3600.0, 2)]


def test_an_episode_whose_end_a_clock_stamped_before_its_start_is_an_instant(make_events):
    """ts need not follow seq (a collector's clock stepping back): an episode stopped at 00:10 of
    day 2 and resumed by a later event stamped 23:50 of day 1 lasts 0 s, and a run over day 2
    alone still finds it (it starts there)."""
    from jobs.transforms.episodes import overlapping

    rows = [
        event(1, at(2, 0, 10), "enqueue", queue="q", depth_msgs=6, flow_stop_count=5),
        event(2, at(2, 0, 10), "flow_stopped", queue="q", depth_msgs=6),
        event(3, at(1, 23, 50), "flow_resumed", queue="q", depth_msgs=1),
    ]
    episodes = episodes_of(make_events, rows)
    day1, day2 = at(1).date(), at(2).date()
    found = overlapping(episodes, day2, day2).collect()
    assert [(r.start_seq, r.end_seq, r.duration_s) for r in found] == [(2, 3, 0.0)]
    assert overlapping(episodes, day1, day1).count() == 0


def producer_without_window() -> list[dict]:
    """Issue 18's case: stop 4; p1 (window 3) triggers the stop, p2 (no window: its enqueues
    carry no capacity) pushes the queue to 27."""
    return [
        event(1, at(1, 10), "enqueue", queue="q", link="p1", capacity=3, depth_msgs=5,
              flow_stop_count=4),
        event(2, at(1, 10), "flow_stopped", queue="q", depth_msgs=5),
        event(3, at(1, 10, 1), "enqueue", queue="q", link="p2", depth_msgs=27),
        event(4, at(1, 10, 5), "flow_resumed", queue="q", depth_msgs=2),
    ]  # fmt: skip


@pytest.mark.parametrize("path", SEGMENT_STATS)
def test_a_producer_without_a_window_leaves_the_bound_and_ratio_null(spark, make_events, path):
    """DESIGN §4: "When any of those producers has no capacity (no window), the bound and the
    ratio are null: there is no guarantee to hold"."""
    actual = episodes_of(make_events, producer_without_window(), SEGMENT_STATS[path])
    # Overshoot 27 - 4 = 23, still measured; producers p1 and p2; p2 has no capacity, so no
    # bound and no ratio (before: bound 3 from p1 alone, ratio 23 / 3 = 7.67).
    expected = spark.createDataFrame(
        [("r1", "q", 2, 4, False, 300.0, 27, 23, None, 2, None, None)],
        QUEUE_FLOW_EPISODES.to_spark(EPISODE_COLUMNS),
    )
    assert_df_equality(
        actual.select(*EPISODE_COLUMNS), expected, ignore_nullable=True, ignore_metadata=True
    )


@pytest.mark.parametrize("path", SEGMENT_STATS)
def test_a_window_of_zero_counts_and_a_capacity_missing_on_one_enqueue_does_not_void_it(
    make_events, path
):
    """A capacity of 0 (the engine's ``prefill`` producer) is a window of 0, not a missing one;
    a producer whose capacity one enqueue leaves out still has the window its others log."""
    rows = [
        event(1, at(1, 10), "enqueue", queue="q", link="p1", capacity=3, depth_msgs=5,
              flow_stop_count=4),
        event(2, at(1, 10), "flow_stopped", queue="q", depth_msgs=5),
        event(3, at(1, 10, 1), "enqueue", queue="q", link="p1", depth_msgs=6),  # no capacity
        event(4, at(1, 10, 2), "enqueue", queue="q", link="prefill", capacity=0, depth_msgs=7),
        event(5, at(1, 10, 5), "flow_resumed", queue="q", depth_msgs=1),
        event(6, at(1, 11), "enqueue", queue="q", link="prefill", capacity=0, depth_msgs=5),
        event(7, at(1, 11), "flow_stopped", queue="q", depth_msgs=5),
        event(8, at(1, 11, 5), "flow_resumed", queue="q", depth_msgs=1),
    ]  # fmt: skip
    got = [
        (r.start_seq, r.producers, r.overshoot_msgs, r.overshoot_bound_msgs, r.overshoot_ratio)
        for r in episodes_of(make_events, rows, SEGMENT_STATS[path]).orderBy("start_seq").collect()
    ]
    # Episode 1: p1 (window 3) and prefill (0): bound 3 + 0 = 3; overshoot 7 - 4 = 3; ratio 1.
    # Episode 2: prefill alone: bound 0, overshoot 5 - 4 = 1, and no ratio (nothing to divide by).
    assert got == [(2, 2, 3, 3, 1.0), (7, 1, 1, 0, None)]

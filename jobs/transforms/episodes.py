"""Silver episodes (DESIGN.md §4): queue flow-stopped episodes and link credit starvations.

Inputs are bronze events of whole runs: an episode may start days before the range being processed
and end days after it, and the watermark is the run's last event.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.intervals import true_intervals
from jobs.transforms.timeutil import micros, seconds_between, utc_date

QUEUE_KEYS = ("run_id", "broker", "queue")
LINK_KEYS = ("run_id", "broker", "link")
THRESHOLD_COLUMNS = ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")


def run_bounds(events: DataFrame) -> DataFrame:
    """Per run: its first event's ts and its watermark (its last event's ts)."""
    return events.groupBy("run_id").agg(
        F.min("ts").alias("first_event_ts"), F.max("ts").alias("run_watermark_ts")
    )


def _carried(column: str, in_order: Window) -> Column:
    """The latest non-null value of ``column`` up to and including this event."""
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return F.last(column, ignorenulls=True).over(upto_here)


def queue_flow_episodes(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per stopped episode, in the ``queue_flow_episodes`` layout.

    The queue is stopped after an event when its latest flow_stopped / flow_resumed (by seq) is a
    flow_stopped; an episode is a maximal stretch of stopped events, so a repeated flow_stopped
    while already stopped does not start a second episode. Its events are those from the
    flow_stopped through the flow_resumed, plus the enqueue that triggered it (the queue's event
    right before the flow_stopped).

    One shuffle and one sort of the queue events: windows over (run, broker, queue) by seq tag each
    event with its episode (the start's seq), and one aggregation per episode, clustered like the
    windows (so no further shuffle), yields its start, end, peaks and producers.
    """
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before_here = in_order.rowsBetween(Window.unboundedPreceding, -1)
    transition = F.when(
        F.col("event_type").isin("flow_stopped", "flow_resumed"), F.col("event_type")
    )
    carried = (*THRESHOLD_COLUMNS, "flow_stopped_count")
    stopped = F.coalesce(F.col("_last_transition") == "flow_stopped", F.lit(False))
    was_stopped = F.coalesce(F.col("_previous_transition") == "flow_stopped", F.lit(False))
    # The queue's enqueue right before the flow_stopped that starts an episode triggered it (flow
    # goes ON on an enqueue). The engine logs both at the same ts; other logs may stamp the
    # transition a little later, so only the order (seq) is relied on.
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
            "depth_msgs",
            "depth_bytes",
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
            F.when(F.col("_triggers"), F.col("_next_seq"))
            # while stopped, and the event that resumes (it was stopped before it)
            .when(
                F.col("_stopped") | F.col("_was_stopped"),
                F.last("_entry_seq", ignorenulls=True).over(upto_here),
            ),
        )
        .where(F.col("episode_seq").isNotNull())
    )
    at_start = F.col("seq") == F.col("episode_seq")
    at_end = ~F.col("_stopped") & F.col("_was_stopped")
    producer = F.when((F.col("event_type") == "enqueue") & F.col("link").isNotNull(), F.col("link"))
    # Per episode and producer first (a producer's capacity counts once), then per episode.
    start_end = {
        "start_ts": F.max(F.when(at_start, F.col("ts"))),
        **{c: F.max(F.when(at_start, F.col(c))) for c in carried},
        "end_seq": F.max(F.when(at_end, F.col("seq"))),
        "end_ts": F.max(F.when(at_end, F.col("ts"))),
    }
    per_producer = (
        tagged.withColumn("_producer", producer)
        .groupBy(*QUEUE_KEYS, "episode_seq", "_producer")
        .agg(
            *(value.alias(name) for name, value in start_end.items()),
            F.max("depth_msgs").alias("peak_depth_msgs"),
            F.max("depth_bytes").alias("peak_depth_bytes"),
            F.max(F.when(F.col("_producer").isNotNull(), F.col("capacity"))).alias("capacity"),
        )
    )
    episodes = (
        per_producer.groupBy(*QUEUE_KEYS, F.col("episode_seq").alias("start_seq"))
        .agg(
            *(F.max(name).alias(name) for name in start_end),
            F.max("peak_depth_msgs").alias("peak_depth_msgs"),
            F.max("peak_depth_bytes").alias("peak_depth_bytes"),
            F.count("_producer").alias("producers"),
            F.sum("capacity").alias("overshoot_bound_msgs"),
        )
        .join(bounds.select("run_id", "run_watermark_ts"), "run_id")
    )
    overshoot_msgs = _overshoot("peak_depth_msgs", "flow_stop_count")
    overshoot_bytes = _overshoot("peak_depth_bytes", "flow_stop_size")
    bound = F.col("overshoot_bound_msgs")
    return episodes.select(
        *QUEUE_KEYS,
        "start_seq",
        "start_ts",
        utc_date("start_ts").alias("start_date"),
        "end_seq",
        "end_ts",
        F.col("end_seq").isNull().alias("is_open"),
        seconds_between(micros("start_ts"), micros("end_ts")).alias("duration_s"),
        "run_watermark_ts",
        "flow_stopped_count",
        "peak_depth_msgs",
        "peak_depth_bytes",
        *THRESHOLD_COLUMNS,
        overshoot_msgs.alias("overshoot_msgs"),
        overshoot_bytes.alias("overshoot_bytes"),
        "producers",
        bound.alias("overshoot_bound_msgs"),
        F.when(bound > 0, overshoot_msgs / bound).alias("overshoot_ratio"),
    )


def _overshoot(peak: str, stop_threshold: str) -> Column:
    """max(0, peak - threshold) for a threshold that is on; null when it is off (0 or unknown)."""
    on = F.coalesce(F.col(stop_threshold), F.lit(0)) > 0
    return F.when(on, F.greatest(F.col(peak) - F.col(stop_threshold), F.lit(0)))


def link_starvation_episodes(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per credit starvation, in the ``link_starvation_episodes`` layout.

    A link's state is the credit and available of its latest event carrying a credit (by seq);
    an event carrying credit but no available keeps the last known available. The link starves
    while credit == 0 and available > 0; a link_detached ends every starvation.
    """
    in_order = Window.partitionBy(*LINK_KEYS).orderBy("seq")
    detached = F.col("event_type") == "link_detached"
    # Only events that carry link state (or detach) matter; dropping the rest (enqueues name their
    # producer's link but carry no credit) before the shuffle changes no carried value.
    carries_state = (
        F.col("credit").isNotNull()
        | F.col("available").isNotNull()
        | F.col("link_role").isNotNull()
        | detached
    )
    state_events = (
        events.where(F.col("link").isNotNull() & carries_state)
        .withColumn("link_role", _carried("link_role", in_order))
        .withColumn("available", _carried("available", in_order))
        .where(F.col("credit").isNotNull() | detached)
        .withColumn(
            "starved",
            ~detached & (F.col("credit") == 0) & (F.coalesce(F.col("available"), F.lit(0)) > 0),
        )
    )
    starvations = true_intervals(
        state_events, LINK_KEYS, "starved", carry=("link_role", "available")
    ).join(bounds.select("run_id", "run_watermark_ts"), "run_id")
    return starvations.select(
        *LINK_KEYS,
        "link_role",
        "start_seq",
        "start_ts",
        utc_date("start_ts").alias("start_date"),
        "end_seq",
        "end_ts",
        F.when(F.col("end_event_type") == "link_detached", F.lit("detached"))
        .when(F.col("end_seq").isNotNull(), F.lit("credit"))
        .alias("end_reason"),
        F.col("end_seq").isNull().alias("is_open"),
        seconds_between(micros("start_ts"), micros("end_ts")).alias("duration_s"),
        "run_watermark_ts",
        F.col("available").alias("available_at_start"),
    )


def day_bounds(date_from: date, date_to: date) -> tuple[datetime, datetime]:
    """[00:00 UTC of date_from, 00:00 UTC of the day after date_to)."""
    start = datetime.combine(date_from, time(0), tzinfo=UTC)
    end = datetime.combine(date_to + timedelta(days=1), time(0), tzinfo=UTC)
    return start, end


def overlapping(episodes: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Episodes overlapping the days [date_from, date_to]; open ones overlap from their start on."""
    return episodes.where(overlap_predicate(date_from, date_to))


def overlap_predicate(date_from: date, date_to: date) -> str:
    """SQL predicate selecting the episodes a run over [date_from, date_to] (re)computes.

    Used both to filter what is written and as Delta's replaceWhere, so that every episode a rerun
    replaces is also one it rewrites. Open episodes always match: they may have closed since.
    """
    start, end = day_bounds(date_from, date_to)
    fmt = "%Y-%m-%d %H:%M:%S"
    return (
        f"start_ts < TIMESTAMP '{end.strftime(fmt)}+00:00' AND "
        f"(end_ts IS NULL OR end_ts >= TIMESTAMP '{start.strftime(fmt)}+00:00')"
    )

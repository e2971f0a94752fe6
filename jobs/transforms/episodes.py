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
    flow_stopped through the flow_resumed, plus the enqueue that triggered it (the engine emits it
    right before the flow_stopped, at the same ts).
    """
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("seq")
    transition = F.when(
        F.col("event_type").isin("flow_stopped", "flow_resumed"), F.col("event_type")
    )
    queue_events = (
        events.where(F.col("queue").isNotNull())
        .withColumn("_transition", transition)
        .withColumn("stopped", _carried("_transition", in_order) == "flow_stopped")
        .select(
            *QUEUE_KEYS,
            "seq",
            "ts",
            "event_type",
            "link",
            "capacity",
            "depth_msgs",
            "depth_bytes",
            "stopped",
            *(_carried(c, in_order).alias(c) for c in (*THRESHOLD_COLUMNS, "flow_stopped_count")),
        )
    )
    starts = true_intervals(
        queue_events,
        QUEUE_KEYS,
        "stopped",
        carry=(*THRESHOLD_COLUMNS, "flow_stopped_count"),
    )

    # Tag each event with the episode it belongs to (the episode's start_seq), if any.
    was_stopped = F.coalesce(F.lag("stopped").over(in_order), F.lit(False))
    next_starts_episode = (
        (F.lead("event_type").over(in_order) == "flow_stopped")
        & ~F.coalesce(F.col("stopped"), F.lit(False))
        & (F.lead("ts").over(in_order) == F.col("ts"))
    )
    entering = F.coalesce(F.col("stopped"), F.lit(False)) & ~was_stopped
    episode_start = _carried("_entry_seq", in_order)
    tagged = (
        queue_events.withColumn("_entry_seq", F.when(entering, F.col("seq")))
        .withColumn("_was_stopped", was_stopped)
        .withColumn("_triggers", next_starts_episode & (F.col("event_type") == "enqueue"))
        .withColumn("_next_seq", F.lead("seq").over(in_order))
        .withColumn(
            "episode_seq",
            F.when(F.col("_triggers"), F.col("_next_seq"))
            # while stopped, and the event that resumes (it was stopped before it)
            .when(F.col("stopped") | F.col("_was_stopped"), episode_start),
        )
        .where(F.col("episode_seq").isNotNull())
    )
    producer_capacity = (
        tagged.where((F.col("event_type") == "enqueue") & F.col("link").isNotNull())
        .groupBy(*QUEUE_KEYS, "episode_seq", "link")
        .agg(F.max("capacity").alias("capacity"))
        .groupBy(*QUEUE_KEYS, "episode_seq")
        .agg(
            F.count("link").alias("producers"),
            F.sum("capacity").alias("overshoot_bound_msgs"),
        )
    )
    peaks = tagged.groupBy(*QUEUE_KEYS, "episode_seq").agg(
        F.max("depth_msgs").alias("peak_depth_msgs"),
        F.max("depth_bytes").alias("peak_depth_bytes"),
    )
    episodes = (
        starts.join(
            peaks.withColumnRenamed("episode_seq", "start_seq"), [*QUEUE_KEYS, "start_seq"], "left"
        )
        .join(
            producer_capacity.withColumnRenamed("episode_seq", "start_seq"),
            [*QUEUE_KEYS, "start_seq"],
            "left",
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
        F.coalesce(F.col("producers"), F.lit(0)).alias("producers"),
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
    state_events = (
        events.where(F.col("link").isNotNull())
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

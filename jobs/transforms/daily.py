"""Gold daily metrics (DESIGN.md §4): ``queue_flow_daily`` and ``link_starvation_daily``.

"Observed" time: a run observes a day from max(00:00, the run's first event) to min(24:00, the
run's watermark). ``stopped_share`` divides by that, so a run that starts at noon and is stopped
all afternoon has a share of 1, not 0.5. A link's share divides by its attached time in the day.

A queue has a row for every day from its declaration through its run's watermark day, idle days
included (DESIGN §4), besides any day it has an event or is stopped in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.episodes import LINK_KEYS, QUEUE_KEYS, queue_sample_interval
from jobs.transforms.intervals import DAY_INDEX_EPOCH, split_by_day, true_intervals
from jobs.transforms.timeutil import micros, summed_seconds
from jobs.transforms.validate import LINK_EVENT_TYPES
from schemas.model import US_PER_DAY


def in_days(column: str, date_from: date, date_to: date) -> Column:
    """``column`` (a date) within [date_from, date_to]."""
    return F.col(column).between(F.lit(date_from), F.lit(date_to))


def open_ends_at_watermark(episodes: DataFrame, bounds: DataFrame) -> DataFrame:
    """Attach the run's current watermark and the effective end of each episode."""
    return (
        episodes.drop("run_watermark_ts")
        .join(bounds.select("run_id", "run_watermark_ts"), "run_id")
        .withColumn("effective_end_ts", F.coalesce("end_ts", "run_watermark_ts"))
    )


def episodes_per_day(
    episodes: DataFrame,
    bounds: DataFrame,
    keys: Sequence[str],
    date_from: date,
    date_to: date,
    *,
    seconds: str,
    latest: Column,
    more: Sequence[Column] = (),
) -> DataFrame:
    """Per ``keys`` and day in range: the episodes' seconds clipped to the day (open ones until
    the run's current watermark) as ``seconds``, the episodes starting that day (``episodes``),
    and ``latest`` and ``more``, aggregates over them (a column of the latest episode, say)."""
    return (
        split_by_day(
            open_ends_at_watermark(episodes, bounds),
            F.col("start_ts"),
            F.col("effective_end_ts"),
            date_from,
            date_to,
        )
        .groupBy(*keys, "date")
        .agg(
            summed_seconds("clipped_s").alias(seconds),
            F.count(F.when(F.col("start_date") == F.col("date"), 1)).alias("episodes"),
            latest,
            *more,
        )
    )


def observed_seconds(bounds: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Per run and day in range: seconds of the day within [first event, watermark]."""
    observed = split_by_day(
        bounds, F.col("first_event_ts"), F.col("run_watermark_ts"), date_from, date_to
    )
    return observed.select("run_id", "date", F.col("clipped_s").alias("observed_s"))


def _queue_days(
    queue_events: DataFrame, bounds: DataFrame, date_from: date, date_to: date
) -> DataFrame:
    """Per queue and day in range: flow_stopped events, max depths and the counter's change, for
    every day it has events and every idle day from its declaration through its run's watermark
    day (DESIGN §4: "A queue gets a row for every day of its run's observed span from its
    declaration on, idle days included"). ``_has_events`` is true on days with events, null on
    idle days.

    The counter at 00:00 is the last counter value (by seq) of the days before; a queue without one
    (a collector joining a live broker, or a queue declared that day) starts from its first value of
    the day, less one if that first event is itself a flow_stopped (the counter is after the event).
    A queue with no counter value up to the day's end has an unknown (null) change.

    The declaration is the queue's earliest ``ts``: its ``queue_declared`` where the log has one
    (the engine declares a queue before any other event of it), else its first event (a collector
    joining a live broker). An event stamped before a declaration shows the queue existed
    already, so the earliest ts starts the span either way, as a run's first event starts its
    observation (:func:`observed_seconds`). The watermark's day is included even when the
    watermark is 00:00 (an observed instant, with 0 observed seconds). So the days are the
    queue's days with events (all of them, from the earliest, are in ``queue_events``) and the
    idle days each of them is followed by: up to the day before its next day with events, and
    never past the watermark's day (a clock stepping back can stamp events days after it; those
    days have rows, the idle days between them and the watermark's day none, as in the metrics
    oracle and the DuckDB peer). The idle days come out of the per-day rows themselves (an
    explode), so the events are read and aggregated once.
    """
    with_counter = F.when(F.col("flow_stopped_count").isNotNull(), F.col("seq"))
    per_day = (
        queue_events.where(F.col("date") <= F.lit(date_to))
        .groupBy(*QUEUE_KEYS, "date")
        .agg(
            F.count(F.when(F.col("event_type") == "flow_stopped", 1)).alias("flow_stopped_count"),
            F.max("depth_msgs").alias("max_depth_msgs"),
            F.max("depth_bytes").alias("max_depth_bytes"),
            F.max(queue_sample_interval()).alias("sample_interval_ms"),
            F.max_by("flow_stopped_count", with_counter).alias("_last_counter"),
            # With its seq: the value at a later day's 00:00 is the latest by seq, not by date
            # (ts may step back across midnight). Fixed-width buffers keep this a hash aggregation.
            F.max(with_counter).alias("_last_counter_seq"),
            F.min_by("flow_stopped_count", with_counter).alias("_first_counter"),
            F.min_by(F.col("event_type") == "flow_stopped", with_counter).alias("_first_is_stop"),
        )
    )
    by_date = Window.partitionBy(*QUEUE_KEYS).orderBy("date")
    before_day = by_date.rowsBetween(Window.unboundedPreceding, -1)
    counter_at_start = F.coalesce(
        F.max_by("_last_counter", "_last_counter_seq").over(before_day),
        F.col("_first_counter") - F.col("_first_is_stop").cast("long"),
    )
    own_day = F.unix_date("date")
    # least() skips the null lead of a queue's last day with events.
    idle_until = F.least(F.unix_date(F.lead("date").over(by_date)) - 1, F.col("_watermark_day"))
    # No idle day after date_to is generated (the range filter would drop it).
    last_day = F.least(idle_until, F.lit((date_to - DAY_INDEX_EPOCH).days))
    watermark_day = F.floor(micros("run_watermark_ts") / F.lit(US_PER_DAY))
    with_days = (
        per_day.join(bounds.select("run_id", watermark_day.alias("_watermark_day")), "run_id")
        .select(
            "*",
            counter_at_start.alias("_counter_at_start"),
            own_day.alias("_own_day"),
            F.greatest(own_day, last_day).cast("int").alias("_last_day"),
        )
        .withColumn("_day", F.explode(F.sequence("_own_day", "_last_day")))
    )
    has_events = F.col("_day") == F.col("_own_day")
    counter_delta = F.coalesce("_last_counter", "_counter_at_start") - F.col("_counter_at_start")
    return (
        with_days.withColumn("date", F.date_from_unix_date("_day"))
        .where(in_days("date", date_from, date_to))
        .select(
            *QUEUE_KEYS,
            "date",
            *(
                F.when(has_events, F.col(c)).alias(c)
                for c in (
                    "flow_stopped_count",
                    "max_depth_msgs",
                    "max_depth_bytes",
                    "sample_interval_ms",
                )
            ),
            F.when(has_events, counter_delta).alias("flow_stopped_counter_delta"),
            F.when(has_events, F.lit(True)).alias("_has_events"),
        )
    )


def queue_flow_daily(
    queue_events: DataFrame,
    episodes: DataFrame,
    bounds: DataFrame,
    date_from: date,
    date_to: date,
) -> DataFrame:
    """Rows of ``queue_flow_daily`` for the days [date_from, date_to].

    ``queue_events``: bronze events (with ``date``) of the runs concerned, for every day up to
    date_to (earlier days give the counter at 00:00 and the declaration). ``episodes``: silver
    episodes overlapping the range. ``bounds``: :func:`jobs.transforms.episodes.run_bounds` of
    those runs.
    A queue gets a row for a day when it has an event that day, is stopped during it, or is
    between its declaration and its run's watermark (:func:`_queue_days`). An idle day's row
    has what a day without events of the queue has: no stopped events, a counter change of 0
    (it cannot move without events), no time stopped, the run's observed seconds, no episode, and
    null depths and overshoots (nothing measured).
    """
    activity = _queue_days(
        queue_events.where(F.col("queue").isNotNull()), bounds, date_from, date_to
    )
    ended = open_ends_at_watermark(episodes, bounds)
    today = F.col("_today")  # the episode starts on this day: it counts here
    stopped = (
        split_by_day(ended, F.col("start_ts"), F.col("effective_end_ts"), date_from, date_to)
        .withColumn("_today", F.col("start_date") == F.col("date"))
        .groupBy(*QUEUE_KEYS, "date")
        .agg(
            summed_seconds("clipped_s").alias("time_stopped_s"),
            F.max(micros("start_ts") < F.col("day_start_us")).alias("stopped_at_day_start"),
            F.count(F.when(today, 1)).alias("episodes"),
            F.max(F.when(today, F.col("overshoot_msgs"))).alias("max_overshoot_msgs"),
            F.percentile(F.when(today, F.col("overshoot_msgs")), 0.95).alias("p95_overshoot_msgs"),
            F.max(F.when(today, F.col("overshoot_bytes"))).alias("max_overshoot_bytes"),
            F.percentile(F.when(today, F.col("overshoot_bytes")), 0.95).alias(
                "p95_overshoot_bytes"
            ),
            F.max(F.when(today, F.col("overshoot_ratio"))).alias("max_overshoot_ratio"),
        )
    )
    daily = activity.join(stopped, [*QUEUE_KEYS, "date"], "full_outer").join(
        observed_seconds(bounds, date_from, date_to), ["run_id", "date"], "left"
    )
    time_stopped = F.coalesce(F.col("time_stopped_s"), F.lit(0.0))
    observed = F.coalesce(F.col("observed_s"), F.lit(0.0))
    stopped_events = F.coalesce(F.col("flow_stopped_count"), F.lit(0))
    # A day without events of the queue cannot move its counter: 0. A day with events but no
    # counter value up to its end (a collector that logs none) leaves the change unknown: null,
    # and so the check, rather than a false alarm.
    counter_delta = F.when(F.col("_has_events").isNull(), F.lit(0)).otherwise(
        F.col("flow_stopped_counter_delta")
    )
    return daily.select(
        "date",
        "broker",
        "run_id",
        "queue",
        stopped_events.alias("flow_stopped_count"),
        counter_delta.alias("flow_stopped_counter_delta"),
        (stopped_events == counter_delta).alias("counter_check_ok"),
        F.coalesce(F.col("stopped_at_day_start"), F.lit(False)).alias("stopped_at_day_start"),
        time_stopped.alias("time_stopped_s"),
        observed.alias("observed_s"),
        F.when(observed > 0, time_stopped / observed).alias("stopped_share"),
        F.coalesce(F.col("episodes"), F.lit(0)).alias("episodes"),
        "max_depth_msgs",
        "max_depth_bytes",
        "max_overshoot_msgs",
        "p95_overshoot_msgs",
        "max_overshoot_bytes",
        "p95_overshoot_bytes",
        "max_overshoot_ratio",
        "sample_interval_ms",
    )


#: Events that report a link's own state (DESIGN §3: "A link event is emitted whenever a link's
#: credit or available changes"): the link events that must name their link
#: (jobs.transforms.validate.LINK_EVENT_TYPES, a contract rule) and a transfer, which changes
#: credit too; as opposed to queue events that merely name their producer's link.
LINK_STATE_EVENT_TYPES = (*LINK_EVENT_TYPES, "transfer")


def is_link_event() -> Column:
    return (
        F.col("event_type").isin(*LINK_STATE_EVENT_TYPES)
        | F.col("credit").isNotNull()
        | F.col("available").isNotNull()
    )


def link_attachments(link_events: DataFrame) -> DataFrame:
    """Attached intervals of each link: from its link_attached (or its first link event, when the
    run saw it attach before the log starts) to its link_detached, or open at the watermark.

    Only link events (:func:`is_link_event`) make a link: a producer named on enqueues alone (an
    AMQP 0-10 producer has no link credit, no attach) has no attached time and no link rows.

    Only a link's first event, its attach / detach events and events naming its role can start or
    end an interval or carry the role, so only those are shuffled and sorted. The first events
    come from one hash aggregation per link over fixed-width values (its least seq, the ts
    there and whether that event is among the others), not from a join of the events with
    their least seqs, which read the events a third time (the 10M bench, alternated warm in one
    JVM: medians 2.8 -> 2.5 s, 4.9 -> 4.3 JVM CPU-s, same rows). A first event kept that way
    is no attach or detach and names no role, so its type (left null) and role are null to
    every rule here: it can only start an interval, never end one.
    """
    in_order = Window.partitionBy(*LINK_KEYS).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    marker = F.when(F.col("event_type").isin("link_attached", "link_detached"), F.col("event_type"))
    attached = F.coalesce(F.last(marker, ignorenulls=True).over(upto_here), F.lit("link_attached"))
    columns = ("seq", "ts", "event_type", "link_role")
    events = link_events.where(F.col("link").isNotNull() & is_link_event())
    relevant = marker.isNotNull() | F.col("link_role").isNotNull()
    firsts = (
        events.groupBy(*LINK_KEYS)
        .agg(
            F.min("seq").alias("seq"),
            F.min_by("ts", "seq").alias("ts"),
            F.min_by(relevant, "seq").alias("_relevant"),
        )
        .where(~F.col("_relevant"))  # otherwise it is among the relevant events already
        .select(
            *LINK_KEYS,
            "seq",
            "ts",
            F.lit(None).cast("string").alias("event_type"),
            F.lit(None).cast("string").alias("link_role"),
        )
    )
    rows = (
        events.where(relevant)
        .select(*LINK_KEYS, *columns)
        .unionByName(firsts)
        .withColumn("link_role", F.last("link_role", ignorenulls=True).over(upto_here))
        .withColumn("attached", attached == "link_attached")
    )
    return true_intervals(rows, LINK_KEYS, "attached", carry=("link_role",))


def link_starvation_daily(
    link_events: DataFrame,
    starvations: DataFrame,
    bounds: DataFrame,
    date_from: date,
    date_to: date,
) -> DataFrame:
    """Rows of ``link_starvation_daily`` for the days [date_from, date_to].

    ``link_events``: bronze events of the runs concerned (all days up to date_to, for the attach
    state at 00:00); ``starvations``: silver starvations overlapping the range.
    """
    attachments = open_ends_at_watermark(link_attachments(link_events), bounds)
    attached = (
        split_by_day(attachments, F.col("start_ts"), F.col("effective_end_ts"), date_from, date_to)
        .groupBy(*LINK_KEYS, "date")
        .agg(
            summed_seconds("clipped_s").alias("attached_s"),
            F.max_by("link_role", "start_seq").alias("attached_role"),
        )
    )
    starved = episodes_per_day(
        starvations,
        bounds,
        LINK_KEYS,
        date_from,
        date_to,
        seconds="starved_s",
        latest=F.max_by("link_role", "start_seq").alias("starved_role"),
    )
    daily = attached.join(starved, [*LINK_KEYS, "date"], "full_outer")
    attached_s = F.coalesce(F.col("attached_s"), F.lit(0.0))
    starved_s = F.coalesce(F.col("starved_s"), F.lit(0.0))
    return daily.select(
        "date",
        "broker",
        "run_id",
        "link",
        F.coalesce("starved_role", "attached_role").alias("link_role"),
        starved_s.alias("starved_s"),
        F.coalesce(F.col("episodes"), F.lit(0)).alias("episodes"),
        attached_s.alias("attached_s"),
        F.when(attached_s > 0, starved_s / attached_s).alias("starved_share"),
    )

"""episodes: bronze broker_events -> silver queue_flow_episodes, link_starvation_episodes,
blocking_episodes, queue_depth_timeline and carried_events.

An episode is a fact about a stretch of a run that can begin before the processed days and end after
them, so a run over [from, to] recomputes every episode that overlaps those days (open ones
included: they may have closed since), and replaces exactly those rows (replaceWhere on the overlap
predicate). The runs concerned are those with events in the days plus those owning an episode the
predicate replaces, so nothing replaced goes missing; their episodes on the neighbouring days the
new events can change are recomputed too (:class:`Scope`).
Cost: the span's bronze days plus the state carried into it (jobs/span_events.py), column-pruned;
an episode that began before the span cannot change and is not rewritten.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.config import PipelineConf
from jobs.delta_io import (
    days_predicate,
    ensure_table,
    local_table_missing,
    read_table,
    replace_where,
    replace_where_at,
    table_path,
)
from jobs.pipeline_state import run_recorded
from jobs.span_events import (
    SpanEvents,
    kept_in_memory,
    local_files_within,
    released,
    runs_in,
    span_events,
    whole_runs,
    write_carried_events,
)
from jobs.transforms.blocking import BLOCKING_INPUT_COLUMNS, blocking_episodes
from jobs.transforms.depth_timeline import bucket_summaries, run_buckets, timeline_from_summaries
from jobs.transforms.episodes import (
    link_starvation_episodes,
    overlap_predicate,
    queue_flow_episodes,
    queue_segment_stats,
    queue_segment_stats_by_lookup,
    run_bounds,
)
from jobs.transforms.timeutil import US_PER_DAY, US_PER_SECOND, micros, utc_date
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from schemas.timelines import QUEUE_DEPTH_TIMELINE

log = logging.getLogger("flowctl.episodes")

EPISODE_INPUT_COLUMNS = (
    "run_id", "broker", "seq", "ts", "event_type", "queue", "link", "link_role", "capacity",
    "depth_msgs", "depth_bytes", "flow_stopped_count", "flow_stop_count", "flow_resume_count",
    "flow_stop_size", "flow_resume_size", "credit", "available", "detail",
)  # fmt: skip

#: The silver tables of episodes and the gold tables of days: what a run's scope is read from.
EPISODE_TABLES = (QUEUE_FLOW_EPISODES, LINK_STARVATION_EPISODES, BLOCKING_EPISODES)
DAILY_TABLES = (QUEUE_FLOW_DAILY, LINK_STARVATION_DAILY, BLOCKING_DAILY)


#: The bronze sources of :func:`_scope_sources` (a gold or silver source is named by its table).
BRONZE_IN_DAYS = "bronze in the days"
BRONZE_LATER = "bronze after the days"


@dataclass(frozen=True)
class Scope:
    """What a run of the episodes and daily_metrics jobs over [date_from, date_to] recomputes.

    A day's rows are final only once its runs are complete: they depend on the run's watermark
    (an open interval is clipped there, observed seconds end there), on episodes that began
    earlier and may peak later, and on the state carried in from earlier days. So for the runs
    concerned the jobs also recompute, back to ``span_from``, the days whose rows were computed
    against an earlier watermark (the runs' latest gold day before the range) or that hold the
    start of an episode the range touches or of one still open, and forward to ``span_to``, the
    runs' later days in
    bronze (whose state at 00:00 the range may change, e.g. days processed out of order). Other
    runs' rows of those extra days are left alone. The nightly run of the latest day thus also
    refreshes the day before for runs still going, and processing days in any order, or a range
    at once, gives the same tables.
    """

    date_from: date
    date_to: date
    runs: tuple[str, ...]
    span_from: date
    span_to: date
    #: The runs with gold rows before ``span_from`` (history processed before the span): the
    #: span starts from the state carried into it, or from whole runs when one of them has none
    #: (jobs/span_events.py).
    with_history: tuple[str, ...] = ()

    @property
    def extended(self) -> bool:
        return bool(self.runs) and (self.span_from < self.date_from or self.span_to > self.date_to)

    def episode_predicate(self) -> str:
        """Silver episodes replaced: those overlapping the range, and the runs' episodes
        overlapping the span, that start within the span (also the filter of what is written).

        Every episode the range can change starts within the span (``span_from`` is the
        earliest start among them); one that began before it ended before the range, and its
        events before the span are not read (only the state carried into it)."""
        predicate = overlap_predicate(self.date_from, self.date_to)
        if self.extended:
            span = overlap_predicate(self.span_from, self.span_to)
            predicate = f"({predicate}) OR ({runs_in(self.runs)} AND {span})"
        return f"({predicate}) AND start_date >= DATE '{self.span_from.isoformat()}'"

    def day_predicate(self) -> str:
        """Gold rows replaced: every row of the range's days, and the runs' rows of the span."""
        predicate = days_predicate("date", self.date_from, self.date_to)
        if not self.extended:
            return predicate
        span = days_predicate("date", self.span_from, self.span_to)
        return f"({predicate}) OR ({runs_in(self.runs)} AND {span})"


def processing_scope(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> Scope:
    """The :class:`Scope` of a run over [date_from, date_to]: the runs concerned and their span.

    The runs concerned: those with bronze events in the days, owning a silver episode
    overlapping them, or spanning them (events before and after, none within: a quiet stretch is
    still observed, and its links still attached, so a day's rows do not depend on the range it
    was processed in). A run that ended stopped or starved before the days is not among them:
    its open episode ends at its watermark, and nothing of it can change until it has new events.
    Their span: back to their latest gold day before the range and the earliest start of their
    episodes the new events may change (those overlapping the range, and the open ones, computed
    against an earlier watermark), forward to their latest bronze day after it.

    One Spark job (:func:`_scope_sources`) reads the small tables and, of bronze, the days and the
    partitions after them (none in the nightly run of the latest day); a second, over bronze
    before the days, only when some run with later events has none in the range."""
    found = _scope_sources(spark, conf, date_from, date_to)
    runs = {r.run_id for r in found if r.in_range}
    later = {r.run_id for r in found if r.source == BRONZE_LATER}
    if later - runs:
        spanning = (
            read_table(spark, conf, BRONZE_BROKER_EVENTS)
            .where(F.col("date") < F.lit(date_from))
            .where(F.col("run_id").isin(*sorted(later - runs)))
            .select("run_id")
            .distinct()
            .collect()
        )
        runs |= {r.run_id for r in spanning}
    if not runs:
        return Scope(date_from, date_to, (), date_from, date_to)
    of_runs = [r for r in found if r.run_id in runs]
    gold = [r for r in of_runs if r.source in {t.name for t in DAILY_TABLES}]
    earlier = [r.last for r in gold]
    earlier += [r.first for r in of_runs if r.source in {t.name for t in EPISODE_TABLES}]
    after = [r.last for r in of_runs if r.source == BRONZE_LATER]
    span_from = min([date_from, *earlier])
    # Gold days are read back to the first before the range, and the span starts no later.
    with_history = {r.run_id for r in gold if r.first < span_from}
    return Scope(
        date_from,
        date_to,
        tuple(sorted(runs)),
        span_from,
        max([date_to, *after]),
        tuple(sorted(with_history)),
    )


def _scope_sources(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> list[Row]:
    """Per source and run, what the scope of a run over the days is read from, in one Spark job
    over the small gold and silver tables and bronze's partitions of the days and after them:
    rows of ``source``, ``run_id``, ``first`` and ``last`` day, ``in_range`` (the run has events
    or episodes in the days).

    The sources: bronze's days (the runs with events in them), bronze after them (the runs that
    go on, and how far), a gold table's days before the range (the latest is the day the run's
    rows were last computed against a watermark), an episode table's changeable episodes, those
    overlapping the range or still open (the earliest start; overlapping ones put the run in
    range)."""
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS)

    def rows(source: str, df: DataFrame, day: str, in_range: Column) -> DataFrame:
        return df.select(
            F.lit(source).alias("source"),
            "run_id",
            F.col(day).alias("day"),
            in_range.alias("in_range"),
        )

    # Bronze's days and the days after them in one scan (a Delta scan's file listing is a Spark
    # job of its own): the source is told by the day.
    in_days = F.col("date") <= F.lit(date_to)
    from_the_days = bronze.where(F.col("date") >= F.lit(date_from))
    sources = [
        from_the_days.select(
            F.when(in_days, F.lit(BRONZE_IN_DAYS)).otherwise(F.lit(BRONZE_LATER)).alias("source"),
            "run_id",
            F.col("date").alias("day"),
            in_days.alias("in_range"),
        )
    ]
    sources += [
        rows(
            table.name,
            read_table(spark, conf, table).where(F.col("date") < F.lit(date_from)),
            "date",
            F.lit(False),
        )
        for table in DAILY_TABLES
    ]
    overlaps = overlap_predicate(date_from, date_to)
    sources += [
        rows(
            table.name,
            read_table(spark, conf, table).where(f"({overlaps}) OR end_ts IS NULL"),
            "start_date",
            F.expr(overlaps),
        )
        for table in EPISODE_TABLES
    ]
    return (
        reduce(DataFrame.unionByName, sources)
        .groupBy("source", "run_id")
        .agg(
            F.min("day").alias("first"),
            F.max("day").alias("last"),
            F.max("in_range").alias("in_range"),
        )
        .collect()
    )


def run_episodes(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> dict[str, Any]:
    """:func:`process_episodes` over the days, after the earlier days behind bronze, recorded in
    the pipeline state (jobs/pipeline_state.py)."""
    return run_recorded(spark, conf, "episodes", process_episodes, date_from, date_to)


def process_episodes(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> dict[str, Any]:
    sc, label = spark.sparkContext, f"episodes {date_from}..{date_to}"
    sc.setJobDescription(f"{label}: runs concerned and their span")
    scope = processing_scope(spark, conf, date_from, date_to)
    read = kept_in_memory(
        span_events(spark, conf, scope.runs, scope.span_from, scope.span_to, scope.with_history),
        conf,
    )
    # Tiny (one row per run) and used by every table: computed once.
    bounds = run_bounds(read.events).cache()
    try:
        if read.carried and timeline_width_changed(spark, conf, read, bounds):
            bounds.unpersist()
            released(read)
            read = kept_in_memory(
                whole_runs(spark, conf, scope.runs, scope.span_from, scope.span_to), conf
            )
            bounds = run_bounds(read.events).cache()
        return write_episodes(spark, conf, scope, read, bounds, label)
    finally:
        bounds.unpersist()
        released(read)


def write_episodes(
    spark: SparkSession,
    conf: PipelineConf,
    scope: Scope,
    read: SpanEvents,
    bounds: DataFrame,
    label: str,
) -> dict[str, Any]:
    """The writes of :func:`process_episodes` from the span's events ``read``."""
    sc = spark.sparkContext
    columns = dict.fromkeys((*EPISODE_INPUT_COLUMNS, *BLOCKING_INPUT_COLUMNS))
    events = read.events.select(*columns)
    predicate = scope.episode_predicate()
    # On a small span the rule's one sort costs less than the lookup's extra stages and
    # broadcasts (conf/pipeline.yaml ``span.sort_queue_segments_max_mb``).
    small = local_files_within(read.events, conf.sort_queue_segments_max_bytes)
    segment_stats = queue_segment_stats if small else queue_segment_stats_by_lookup
    queue_episodes = queue_flow_episodes(events, bounds, segment_stats).where(predicate)
    link_episodes = link_starvation_episodes(events, bounds).where(predicate)
    blockings = blocking_episodes(events, bounds).where(predicate)
    report: dict[str, Any] = {
        "runs": len(scope.runs),
        "span": f"{scope.span_from.isoformat()}..{scope.span_to.isoformat()}",
        "read": read.describe(),
    }
    sc.setJobDescription(f"{label}: write queue_flow_episodes")
    report["queue_flow_episodes"] = replace_where(
        spark, conf, QUEUE_FLOW_EPISODES, queue_episodes, predicate
    )
    sc.setJobDescription(f"{label}: write link_starvation_episodes")
    report["link_starvation_episodes"] = replace_where(
        spark, conf, LINK_STARVATION_EPISODES, link_episodes, predicate
    )
    sc.setJobDescription(f"{label}: write blocking_episodes")
    report["blocking_episodes"] = replace_where(
        spark, conf, BLOCKING_EPISODES, blockings, predicate
    )
    sc.setJobDescription(f"{label}: write queue_depth_timeline")
    report["queue_depth_timeline"] = write_depth_timeline(spark, conf, read, bounds)
    sc.setJobDescription(f"{label}: write carried_events")
    report["carried_events"] = write_carried_events(spark, conf, read)
    sc.setJobDescription(None)
    log.info("%s: %s", label, report)
    return report


def depth_timeline_path(conf: PipelineConf) -> str:
    """Where ``queue_depth_timeline`` lives: <warehouse>/silver/queue_depth_timeline."""
    return table_path(conf, QUEUE_DEPTH_TIMELINE)


def timeline_width_changed(
    spark: SparkSession, conf: PipelineConf, read: SpanEvents, bounds: DataFrame
) -> bool:
    """Whether a run's bucket width (from its ``bounds`` now) differs from the width of its
    buckets before the span: those must be cut again, from the run's whole events.

    Only a run younger than a day at the span's start can have changed: the width grows with
    the run's span up to a day's, and its buckets were last cut at a watermark no earlier than
    its last event before the span. A young run's buckets lie on the days of its first and last
    events, so only those days of the timeline are read, and only for such runs."""
    path = depth_timeline_path(conf)
    if read.state is None or local_table_missing(path):
        return False
    ages = read.state.groupBy("run_id").agg(
        utc_date(F.min("ts")).alias("first_day"),
        (micros(F.max("ts")) - micros(F.min("ts"))).alias("_span_us"),
    )
    young = ages.where(F.col("_span_us") < US_PER_DAY).collect()
    if not young:
        return False
    ensure_table(spark, path, QUEUE_DEPTH_TIMELINE)
    first_day = min(r.first_day for r in young)
    earlier = (
        spark.read.format("delta")
        .load(path)
        .where(runs_in(tuple(r.run_id for r in young)))
        .where(days_predicate("date", first_day, read.span_from - timedelta(days=1)))
        .select("run_id", F.round(F.col("bucket_s") * US_PER_SECOND).cast("long").alias("_was"))
    )
    changed = earlier.join(run_buckets(bounds), "run_id").where(F.col("_was") != F.col("_width_us"))
    return bool(changed.limit(1).collect())


def write_depth_timeline(
    spark: SparkSession, conf: PipelineConf, read: SpanEvents, bounds: DataFrame
) -> int:
    """Replace the ``queue_depth_timeline`` rows of the span's days of ``read.runs`` by those of
    their events, or every row of the runs when whole runs were read (a run's bucket width
    follows its span until it has lasted a day, so its buckets are then cut again)."""
    if not read.runs:
        return 0
    # Buckets from a hash aggregation, not a sort of every queue event (the write of 10 million
    # events' timeline, warm: 12.4-14.5 -> 5.6-6.1 s); the queues whose clock stepped back over a
    # bucket edge take the rule's path.
    summaries = bucket_summaries(read.events, bounds).cache()
    try:
        timeline = timeline_from_summaries(read.events, bounds, summaries)
        replaced = runs_in(read.runs)
        if read.carried:
            days = days_predicate("date", read.span_from, read.span_to)
            replaced = f"{replaced} AND {days}"
            timeline = timeline.where(days)
        return replace_where_at(
            spark, depth_timeline_path(conf), QUEUE_DEPTH_TIMELINE, timeline, replaced
        )
    finally:
        summaries.unpersist()


def main(argv: list[str] | None = None) -> int:
    args = parse_date_range(date_range_parser("Bronze events -> silver episodes"), argv)
    conf, spark = start_job(args, "flowctl-episodes")
    run_episodes(spark, conf, args.date_from, args.date_to)
    return 0


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("episodes", main))

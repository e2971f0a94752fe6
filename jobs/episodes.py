"""episodes: bronze broker_events -> silver queue_flow_episodes, link_starvation_episodes,
blocking_episodes, queue_depth_timeline and carried_events.

An episode is a fact about a stretch of a run that can begin before the processed days and end after
them, so a run over [from, to] recomputes every episode that overlaps those days (open ones
included: they may have closed since), and replaces exactly those rows (replaceWhere on the overlap
predicate). The runs concerned are those with events in the days plus those owning an episode the
predicate replaces, so nothing replaced goes missing; their episodes on the neighbouring days the
new events can change are recomputed too (:class:`jobs.scope.Scope`).
Cost: the span's bronze days plus the state carried into it (jobs/span_events.py), column-pruned;
an episode that began before the span cannot change and is not rewritten.
"""

from __future__ import annotations

import logging
import sys
from datetime import date, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.concurrent_jobs import write_tables
from jobs.config import PipelineConf
from jobs.delta_io import (
    days_predicate,
    ensure_table,
    local_table_missing,
    replace_where,
    replace_where_at,
    table_path,
)
from jobs.pipeline_state import run_recorded
from jobs.scope import Scope, runs_in
from jobs.span_events import (
    SpanEvents,
    kept_in_memory,
    local_files_within,
    released,
    scope_and_span,
    whole_runs,
    write_carried_events,
)
from jobs.transforms.blocking import BLOCKING_INPUT_COLUMNS, blocking_episodes
from jobs.transforms.depth_timeline import bucket_summaries, run_buckets, timeline_from_summaries
from jobs.transforms.episodes import (
    link_starvation_episodes,
    queue_flow_episodes,
    queue_segment_stats,
    queue_segment_stats_by_lookup,
    run_bounds,
)
from jobs.transforms.timeutil import micros, utc_date
from schemas.model import US_PER_DAY, US_PER_SECOND
from schemas.tables import (
    BLOCKING_EPISODES,
    CARRIED_EVENTS,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_EPISODES,
)
from schemas.timelines import QUEUE_DEPTH_TIMELINE

log = logging.getLogger("flowctl.episodes")

EPISODE_INPUT_COLUMNS = (
    "run_id", "broker", "seq", "ts", "event_type", "queue", "link", "link_role", "capacity",
    "size_bytes", "depth_msgs", "depth_bytes", "flow_stopped_count", "flow_stop_count",
    "flow_resume_count", "flow_stop_size", "flow_resume_size", "credit", "available", "detail",
)  # fmt: skip


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
    scope, read = scope_and_span(spark, conf, date_from, date_to)
    read = kept_in_memory(read, conf)
    # Tiny (one row per run) and used by every table: computed once.
    bounds = run_bounds(read.events).cache()
    try:
        if read.carried and timeline_width_changed(spark, conf, read, bounds):
            bounds.unpersist()
            released(read)
            read = kept_in_memory(whole_runs(spark, conf, scope), conf)
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
    """The writes of :func:`process_episodes` from the span's events ``read``, the longest first
    (jobs/concurrent_jobs.py)."""
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
        # The runs started from their carried rows; the others' events were all read.
        "carried_in": list(read.history),
    }
    report |= write_tables(
        spark,
        label,
        [
            (
                QUEUE_FLOW_EPISODES.name,
                lambda: replace_where(spark, conf, QUEUE_FLOW_EPISODES, queue_episodes, predicate),
            ),
            (
                LINK_STARVATION_EPISODES.name,
                lambda: replace_where(
                    spark, conf, LINK_STARVATION_EPISODES, link_episodes, predicate
                ),
            ),
            (
                BLOCKING_EPISODES.name,
                lambda: replace_where(spark, conf, BLOCKING_EPISODES, blockings, predicate),
            ),
            (QUEUE_DEPTH_TIMELINE.name, lambda: write_depth_timeline(spark, conf, read, bounds)),
            (CARRIED_EVENTS.name, lambda: write_carried_events(spark, conf, read)),
        ],
        conf.concurrent_jobs,
    )
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

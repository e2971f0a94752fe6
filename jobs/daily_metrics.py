"""daily_metrics: bronze + silver -> gold ``queue_flow_daily`` (with what flow control costs the
producers, jobs/transforms/queue_costs.py), ``link_starvation_daily`` and ``blocking_daily``.

Gold rows of the days [from, to] are replaced as a whole (replaceWhere on ``date``), and so are
the rows of the runs concerned on the neighbouring days their new events change (see
:class:`jobs.scope.Scope`). State at 00:00 comes from earlier days: the counter, a queue's
declaration and a link's attachment from the events carried into the span (silver
``carried_events``, jobs/span_events.py), stopped and starved intervals from silver episodes that
began earlier. Run the episodes job over the same days first.
"""

from __future__ import annotations

import logging
import sys
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.concurrent_jobs import write_tables
from jobs.config import PipelineConf
from jobs.delta_io import read_table, replace_where
from jobs.pipeline_state import run_recorded
from jobs.scope import Scope
from jobs.span_events import (
    SpanEvents,
    earlier_enqueues,
    kept_in_memory,
    released,
    scope_and_span,
)
from jobs.transforms.blocking import blocking_daily
from jobs.transforms.daily import link_starvation_daily, observed_seconds, queue_flow_daily
from jobs.transforms.episodes import overlapping, run_bounds
from jobs.transforms.queue_costs import QUEUE_COST_INPUT_COLUMNS, with_queue_costs
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)

log = logging.getLogger("flowctl.daily_metrics")

DAILY_INPUT_COLUMNS = (
    "run_id", "broker", "seq", "ts", "date", "event_type", "queue", "link", "link_role",
    "depth_msgs", "depth_bytes", "flow_stopped_count", "credit", "available",
    *QUEUE_COST_INPUT_COLUMNS,
)  # fmt: skip


def run_daily_metrics(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> dict[str, Any]:
    """:func:`process_daily_metrics` over the days, after the earlier days behind bronze, recorded
    in the pipeline state; refused when episodes are behind on any of them
    (jobs/pipeline_state.py)."""
    return run_recorded(spark, conf, "daily_metrics", process_daily_metrics, date_from, date_to)


def process_daily_metrics(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> dict[str, Any]:
    sc, label = spark.sparkContext, f"daily_metrics {date_from}..{date_to}"
    sc.setJobDescription(f"{label}: runs concerned and their span")
    scope, read = scope_and_span(spark, conf, date_from, date_to)
    read = kept_in_memory(read, conf)
    # Tiny (one row per run) and used by every table: computed once.
    bounds = run_bounds(read.events.select("run_id", "seq", "ts")).cache()
    try:
        return write_daily_metrics(spark, conf, scope, read, bounds, label)
    finally:
        bounds.unpersist()
        released(read)


def write_daily_metrics(
    spark: SparkSession,
    conf: PipelineConf,
    scope: Scope,
    read: SpanEvents,
    bounds: DataFrame,
    label: str,
) -> dict[str, Any]:
    """The writes of :func:`process_daily_metrics` from the span's events ``read`` and their
    runs' ``bounds`` (:func:`~jobs.transforms.episodes.run_bounds`), the longest first
    (jobs/concurrent_jobs.py)."""
    first, last = scope.span_from, scope.span_to
    events = read.events.where(F.col("date") <= F.lit(last)).select(*DAILY_INPUT_COLUMNS)
    # A transfer held over midnight completes in the span; its enqueue may be days earlier.
    enqueues_before = earlier_enqueues(spark, conf, read)
    cost_events = (
        events
        if enqueues_before is None
        else events.unionByName(enqueues_before.select(*DAILY_INPUT_COLUMNS))
    )
    of_runs = F.col("run_id").isin(*scope.runs)
    episodes = overlapping(read_table(spark, conf, QUEUE_FLOW_EPISODES), first, last).where(of_runs)
    starvations = overlapping(read_table(spark, conf, LINK_STARVATION_EPISODES), first, last).where(
        of_runs
    )
    blockings = overlapping(read_table(spark, conf, BLOCKING_EPISODES), first, last).where(of_runs)
    days = scope.day_predicate()
    report: dict[str, Any] = {
        "runs": len(scope.runs),
        "span": f"{first.isoformat()}..{last.isoformat()}",
        # Taken off by the pipeline state, which records the later days recomputed.
        "span_to": last,
        "read": read.describe(),
        # The runs started from their carried rows; the others' events were all read.
        "carried_in": list(read.history),
    }
    observed = observed_seconds(bounds, first, last)
    queue_days = with_queue_costs(
        queue_flow_daily(events, episodes, bounds, first, last), cost_events, first, last
    ).where(days)
    link_days = link_starvation_daily(events, starvations, bounds, first, last).where(days)
    blocking_days = blocking_daily(blockings, observed, bounds, first, last).where(days)
    report |= write_tables(
        spark,
        label,
        [
            (
                QUEUE_FLOW_DAILY.name,
                lambda: replace_where(spark, conf, QUEUE_FLOW_DAILY, queue_days, days),
            ),
            (
                LINK_STARVATION_DAILY.name,
                lambda: replace_where(spark, conf, LINK_STARVATION_DAILY, link_days, days),
            ),
            (
                BLOCKING_DAILY.name,
                lambda: replace_where(spark, conf, BLOCKING_DAILY, blocking_days, days),
            ),
        ],
        conf.concurrent_jobs,
    )
    log.info("%s: %s", label, report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_date_range(date_range_parser("Bronze + silver -> gold daily metrics"), argv)
    conf, spark = start_job(args, "flowctl-daily-metrics")
    run_daily_metrics(spark, conf, args.date_from, args.date_to)
    return 0


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("daily_metrics", main))

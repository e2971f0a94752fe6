"""episodes: bronze broker_events -> silver queue_flow_episodes + link_starvation_episodes.

An episode is a fact about a stretch of a run that can begin before the processed days and end after
them, so a run over [from, to] recomputes, from all bronze events of the runs concerned, every
episode that overlaps those days (open ones included: they may have closed since), and replaces
exactly those rows (replaceWhere on the overlap predicate). The runs concerned are those with events
in the days plus those owning an episode the predicate replaces, so nothing replaced goes missing.
Cost: whole runs are read (column-pruned); simulation runs and collector sessions are bounded.
"""

from __future__ import annotations

import logging
import sys
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.config import PipelineConf
from jobs.delta_io import days_predicate, read_table, replace_where
from jobs.transforms.episodes import (
    link_starvation_episodes,
    overlap_predicate,
    overlapping,
    queue_flow_episodes,
    run_bounds,
)
from schemas.tables import BRONZE_BROKER_EVENTS, LINK_STARVATION_EPISODES, QUEUE_FLOW_EPISODES

log = logging.getLogger("flowctl.episodes")

EPISODE_INPUT_COLUMNS = (
    "run_id", "broker", "seq", "ts", "event_type", "queue", "link", "link_role", "capacity",
    "depth_msgs", "depth_bytes", "flow_stopped_count", "flow_stop_count", "flow_resume_count",
    "flow_stop_size", "flow_resume_size", "credit", "available",
)  # fmt: skip


def runs_concerned(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> list[str]:
    """Runs with bronze events in the days, owning a silver episode overlapping them, or spanning
    them (events before and after, none within: a quiet stretch is still observed, and its links
    still attached, so a day's rows do not depend on the range it was processed in).

    The spanning runs are searched among those with events after the range, usually none when the
    latest days are processed, so the common nightly run reads no other day."""
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS)
    in_days = bronze.where(days_predicate("date", date_from, date_to)).select("run_id")
    predicate = overlap_predicate(date_from, date_to)
    for table in (QUEUE_FLOW_EPISODES, LINK_STARVATION_EPISODES):
        in_days = in_days.unionByName(
            read_table(spark, conf, table).where(predicate).select("run_id")
        )
    runs = {r.run_id for r in in_days.distinct().collect()}
    later = {
        r.run_id
        for r in bronze.where(F.col("date") > F.lit(date_to)).select("run_id").distinct().collect()
    }
    if later - runs:
        spanning = (
            bronze.where(F.col("date") < F.lit(date_from))
            .where(F.col("run_id").isin(*sorted(later - runs)))
            .select("run_id")
            .distinct()
            .collect()
        )
        runs |= {r.run_id for r in spanning}
    return sorted(runs)


def bronze_events_of_runs(spark: SparkSession, conf: PipelineConf, runs: list[str]) -> DataFrame:
    return read_table(spark, conf, BRONZE_BROKER_EVENTS).where(F.col("run_id").isin(*runs))


def run_episodes(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> dict[str, Any]:
    runs = runs_concerned(spark, conf, date_from, date_to)
    events = bronze_events_of_runs(spark, conf, runs).select(*EPISODE_INPUT_COLUMNS)
    # Tiny (one row per run) and used by both tables: computed once.
    bounds = run_bounds(events).cache()
    predicate = overlap_predicate(date_from, date_to)
    queue_episodes = overlapping(queue_flow_episodes(events, bounds), date_from, date_to)
    link_episodes = overlapping(link_starvation_episodes(events, bounds), date_from, date_to)
    report = {
        "runs": len(runs),
        "queue_flow_episodes": replace_where(
            spark, conf, QUEUE_FLOW_EPISODES, queue_episodes, predicate
        ),
        "link_starvation_episodes": replace_where(
            spark, conf, LINK_STARVATION_EPISODES, link_episodes, predicate
        ),
    }
    bounds.unpersist()
    log.info("episodes %s..%s: %s", date_from, date_to, report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_date_range(date_range_parser("Bronze events -> silver episodes"), argv)
    conf, spark = start_job(args, "flowctl-episodes")
    run_episodes(spark, conf, args.date_from, args.date_to)
    return 0


if __name__ == "__main__":
    sys.exit(main())

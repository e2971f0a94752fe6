"""spark-submit entry point: bronze + silver + gold -> gold ``threshold_recommendations``.

For each day D of ``--date`` / ``--from --to``, after the earlier days whose recommendations are
behind bronze (the pipeline state, jobs/pipeline_state.py), it recommends, in each entity's own
broker's knobs (Qpid thresholds; Artemis address limits and windows; RabbitMQ credit, prefetch and
length limits), as of D from the evidence of the policy's look-back window ending on D, and
replaces the rows of those days (a rerun of a day leaves the table as it was). ``--policy`` names
the policy YAML (default conf/recommend.yaml).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.concurrent_jobs import run_at_once
from jobs.config import ConfError, PipelineConf
from jobs.delta_io import days_predicate, read_table, replace_where_at
from jobs.pipeline_state import RECOMMEND, run_recorded
from jobs.recommend_day_rollup import window_rollup

# The policy's home is jobs/recommend_policy.py; load_policy and DEFAULT_POLICY are named here too,
# as the entry point's own, for the flowctl command and the tests that read the policy from here.
from jobs.recommend_policy import DEFAULT_POLICY as DEFAULT_POLICY
from jobs.recommend_policy import RecommendPolicy
from jobs.recommend_policy import load_policy as load_policy
from jobs.transforms.recommend import threshold_recommendations
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS
from schemas.tables import (
    BLOCKING_EPISODES,
    BRONZE_BROKER_EVENTS,
    GOLD,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)

log = logging.getLogger(__name__)


def blocking_in_window(first: date, date_to: date) -> str:
    """The blocking episodes recommend reads for a window from ``first`` to ``date_to``: those
    begun in it (a 0.9.1 connection blocked by a queue's credit flow: evidence for its length
    limit), and an alarm set before it that lasted into it (a queue's intake leaves out the time
    an alarm held its publishers, recommend_rabbitmq.queue_growth: a night that read only the
    alarms set in its window wrote other rows than a range run over the same day: a review)."""
    return (
        f"({days_predicate('start_date', first, date_to)}) OR (kind = 'alarm' AND "
        f"start_date < DATE '{first.isoformat()}' AND "
        f"(end_ts IS NULL OR end_ts >= TIMESTAMP '{first.isoformat()} 00:00:00+00:00'))"
    )


def recommendations_path(conf: PipelineConf) -> str:
    return conf.table_path(GOLD, THRESHOLD_RECOMMENDATIONS.name)


def _days(date_from: date, date_to: date) -> list[date]:
    return [date_from + timedelta(days=n) for n in range((date_to - date_from).days + 1)]


def recommendations_for_days(
    spark: SparkSession,
    conf: PipelineConf,
    policy: RecommendPolicy,
    date_from: date,
    date_to: date,
) -> tuple[DataFrame, list[DataFrame]]:
    """The recommendation rows as of each day of the range (not written), and the per-day
    frames they are a union of, persisted: unpersist them once the rows are written."""
    first = policy.window_from(date_from)
    evidence = {
        "events": read_table(spark, conf, BRONZE_BROKER_EVENTS).where(
            days_predicate("date", first, date_to)
        ),
        "queue_episodes": read_table(spark, conf, QUEUE_FLOW_EPISODES).where(
            days_predicate("start_date", first, date_to)
        ),
        "queue_daily": read_table(spark, conf, QUEUE_FLOW_DAILY).where(
            days_predicate("date", first, date_to)
        ),
        "link_starvations": read_table(spark, conf, LINK_STARVATION_EPISODES).where(
            days_predicate("start_date", first, date_to)
        ),
        "link_daily": read_table(spark, conf, LINK_STARVATION_DAILY).where(
            days_predicate("date", first, date_to)
        ),
        "blocking_episodes": read_table(spark, conf, BLOCKING_EPISODES).where(
            blocking_in_window(first, date_to)
        ),
    }

    # The facts merged over days, kept day by day: the window's bronze is read for them only on
    # the days not kept yet or changed since (jobs/recommend_day_rollup.py).
    rollup = window_rollup(spark, conf, first, date_to)

    def rows_as_of(day: date) -> Callable[[], DataFrame]:
        def compute() -> DataFrame:
            rows = threshold_recommendations(
                **evidence, policy=policy, as_of=day, rollup=rollup
            ).persist(StorageLevel.MEMORY_AND_DISK)
            rows.count()
            return rows

        return compute

    # Each day's rows (a few per queue and link) are computed and kept on their own: one query
    # over every day would be a plan of several thousand operators, which Spark's adaptive
    # execution re-optimises whole after each of its stages, costing more CPU than the data (the
    # demo's four days: ~2 minutes, most of it planning). Their planning, on the driver, runs
    # beside another day's (jobs/concurrent_jobs.py).
    days = [(f"rows as of {day.isoformat()}", rows_as_of(day)) for day in _days(date_from, date_to)]
    label = f"recommend {date_from}..{date_to}"
    per_day = list(run_at_once(spark, label, days, conf.concurrent_jobs).values())
    rows = per_day[0]
    for more in per_day[1:]:
        rows = rows.unionByName(more)
    return rows, per_day


def run_recommend(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    policy: RecommendPolicy | None = None,
) -> dict[str, Any]:
    """Write the recommendations as of each day in [date_from, date_to], after the earlier days
    whose recommendations are behind bronze (their look-back window rewritten since), recorded
    in the pipeline state with each day's window; refused when episodes or daily_metrics are
    behind on a day up to date_to (jobs/pipeline_state.py). Returns the counts."""
    chosen = policy or load_policy()

    def process(spark: SparkSession, conf: PipelineConf, first: date, last: date) -> dict[str, Any]:
        return write_recommendations(spark, conf, chosen, first, last)

    return run_recorded(
        spark, conf, RECOMMEND, process, date_from, date_to, evidence_from=chosen.window_from
    )


def write_recommendations(
    spark: SparkSession,
    conf: PipelineConf,
    policy: RecommendPolicy,
    date_from: date,
    date_to: date,
) -> dict[str, Any]:
    """Replace the recommendations as of each day in [date_from, date_to]; returns the counts."""
    rows, per_day = recommendations_for_days(spark, conf, policy, date_from, date_to)
    path = recommendations_path(conf)
    predicate = days_predicate("date", date_from, date_to)
    try:
        written = replace_where_at(spark, path, THRESHOLD_RECOMMENDATIONS, rows, predicate)
    finally:
        for day_rows in per_day:
            day_rows.unpersist()
    counted = (
        spark.read.format("delta").load(path).where(predicate).groupBy("date", "verdict").count()
    ).collect()  # days x verdicts: a few rows
    verdicts: dict[str, int] = {}
    for row in counted:
        verdicts[row.verdict] = verdicts.get(row.verdict, 0) + row["count"]
    # The set as of the last day is what the dashboard and whatif read (each day has its own).
    latest = max((row.date for row in counted), default=None)
    latest_verdicts = {r.verdict: r["count"] for r in counted if r.date == latest}
    log.info("threshold_recommendations: replaced %s with %d rows %s", predicate, written, verdicts)
    return {
        "rows": written,
        "days": len({row.date for row in counted}),
        "verdicts": dict(sorted(verdicts.items())),
        "latest": latest,
        "latest_rows": sum(latest_verdicts.values()),
        "latest_verdicts": dict(sorted(latest_verdicts.items())),
        "path": path,
    }


def main(argv: list[str] | None = None) -> int:
    parser = date_range_parser("Bronze + silver + gold -> gold threshold_recommendations")
    parser.add_argument("--policy", help=f"recommendation policy YAML (default: {DEFAULT_POLICY})")
    args = parse_date_range(parser, argv)
    # Before Spark starts: a policy that cannot be used is one line on stderr and exit status 2.
    try:
        policy = load_policy(args.policy)
    except ConfError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    conf, spark = start_job(args, "flowctl-recommend")
    run_recommend(spark, conf, args.date_from, args.date_to, policy)
    return 0


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("recommend", main))

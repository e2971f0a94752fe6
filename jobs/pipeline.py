"""The whole pipeline in-process, for local use: ingest -> episodes -> daily_metrics, one session.

``flowctl pipeline`` and the end-to-end tests call :func:`run_pipeline`, then read the gold tables
(:func:`most_stopped_queue_rows`, :func:`starved_link_rows`; the tests, every row with
:func:`daily_metrics_rows`).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.cli import configure_logging, date_range_parser, parse_date_range
from jobs.config import PipelineConf, load_conf

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, SparkSession

    from schemas.model import TableSchema

log = logging.getLogger("flowctl.pipeline")


def _conf(conf_path: str | None, warehouse_dir: str | None) -> PipelineConf:
    """The conf, with another warehouse if given: its Great Expectations results then go beside
    it (<warehouse>/../quality), not into the conf's folder where another warehouse's are."""
    conf = load_conf(conf_path)
    if not warehouse_dir:
        return conf
    quality_dir = conf.quality_dir
    if "://" not in warehouse_dir:
        quality_dir = str(Path(warehouse_dir).parent / "quality")
    return dataclasses.replace(conf, warehouse_dir=warehouse_dir, quality_dir=quality_dir)


def _session(conf: PipelineConf, spark: SparkSession | None) -> SparkSession:
    from jobs.spark_session import build_spark_session

    return spark or build_spark_session(conf, app_name="flowctl-pipeline")


def run_pipeline(
    conf_path: str | None,
    date_from: date,
    date_to: date,
    raw_dir: str | None = None,
    *,
    warehouse_dir: str | None = None,
    spark: SparkSession | None = None,
    allow_empty_days: bool = False,
    on_step: Callable[[str, float | None], None] | None = None,
) -> dict[str, Any]:
    """Run ingest, episodes and daily_metrics over the days [date_from, date_to].

    Raises :class:`jobs.ingest.IngestRefused` before writing anything when the raw input cannot
    be what was meant (see :func:`jobs.ingest.run_ingest`; ``allow_empty_days`` as there).

    Returns each job's counts and seconds: ``{"ingest": {...}, "episodes": {...},
    "daily_metrics": {...}, "seconds": {"ingest": s, ...}, "ok": bool}``; ``ok`` is false when
    ingest's accounting or Great Expectations failed, and then episodes and daily_metrics are
    not run (their keys are absent), as in the nightly DAG. ``warehouse_dir`` overrides the
    conf's (tests use a temporary one); ``spark`` reuses a session instead of building one;
    ``on_step(job, None)`` is called as a job starts and ``on_step(job, seconds)`` as it ends
    (a command line's progress: a job runs for minutes on a large day).
    """
    from jobs.daily_metrics import run_daily_metrics
    from jobs.episodes import run_episodes
    from jobs.ingest import ingest_succeeded, run_ingest

    conf = _conf(conf_path, warehouse_dir)
    session = _session(conf, spark)
    result: dict[str, Any] = {"seconds": {}}
    steps = (
        (
            "ingest",
            lambda: run_ingest(
                session,
                conf,
                date_from,
                date_to,
                raw_dir=raw_dir,
                allow_empty_days=allow_empty_days,
            ),
        ),
        ("episodes", lambda: run_episodes(session, conf, date_from, date_to)),
        ("daily_metrics", lambda: run_daily_metrics(session, conf, date_from, date_to)),
    )
    for name, step in steps:
        if on_step is not None:
            on_step(name, None)
        started = time.perf_counter()
        result[name] = step()
        result["seconds"][name] = round(time.perf_counter() - started, 3)
        if on_step is not None:
            on_step(name, result["seconds"][name])
        if name == "ingest" and not ingest_succeeded(result["ingest"]):
            # As the nightly DAG stops at ingest's exit 1: no metrics from suspect bronze rows.
            unfinished = result["ingest"].get("caught_up_failed")
            log.error(
                "ingest %s failed (balanced=%s, Great Expectations success=%s): episodes "
                "and daily_metrics not run",
                f"{date_from}..{date_to}"
                if unfinished is None
                else f"of {unfinished} (unfinished before, ingested again before "
                f"{date_from}..{date_to}, which was ingested)",
                result["ingest"].get("balanced"),
                result["ingest"].get("great_expectations_success"),
            )
            result["ok"] = False
            return result
    result["ok"] = True
    return result


def daily_metrics_rows(
    conf_path: str | None,
    date_from: date,
    date_to: date,
    *,
    warehouse_dir: str | None = None,
    spark: SparkSession | None = None,
) -> list[dict[str, Any]]:
    """Gold ``queue_flow_daily`` rows of the days, ordered by date, broker, run_id, queue."""
    from jobs.delta_io import days_predicate, read_table
    from schemas.tables import QUEUE_FLOW_DAILY

    conf = _conf(conf_path, warehouse_dir)
    session = _session(conf, spark)
    rows = (
        read_table(session, conf, QUEUE_FLOW_DAILY)
        .where(days_predicate("date", date_from, date_to))
        .orderBy("date", "broker", "run_id", "queue")
        .collect()
    )
    return [row.asDict() for row in rows]


#: The most starved link-days the console lists (the dashboard has them all).
STARVED_LINKS_SHOWN = 10
#: The most stopped queue-days the console lists (the dashboard has them all).
STOPPED_QUEUES_SHOWN = 20


def _most_of(
    conf_path: str | None,
    date_from: date,
    date_to: date,
    warehouse_dir: str | None,
    spark: SparkSession | None,
    *,
    table: TableSchema,
    measure: str,
    order: tuple[Column | str, ...],
    shown: int,
) -> tuple[list[dict[str, Any]], int, int]:
    """The gold ``table`` rows of the days whose ``measure`` is above 0, at most ``shown`` in
    ``order``; how many such rows, and all the rows: what the console says of a table, without
    collecting every row (a day of a broker of thousands of queues printed them all)."""
    from pyspark.sql import functions as F

    from jobs.delta_io import days_predicate, read_table

    conf = _conf(conf_path, warehouse_dir)
    session = _session(conf, spark)
    days = read_table(session, conf, table).where(days_predicate("date", date_from, date_to))
    hit = F.col(measure) > 0
    totals = days.agg(F.count(F.lit(1)).alias("all"), F.count(F.when(hit, 1)).alias("hit")).first()
    top = days.where(hit).orderBy(*order).limit(shown)
    all_rows = int(totals["all"]) if totals else 0
    hit_rows = int(totals["hit"]) if totals else 0
    return [row.asDict() for row in top.collect()], hit_rows, all_rows


def most_stopped_queue_rows(
    conf_path: str | None,
    date_from: date,
    date_to: date,
    *,
    warehouse_dir: str | None = None,
    spark: SparkSession | None = None,
) -> tuple[list[dict[str, Any]], int, int]:
    """The most stopped gold ``queue_flow_daily`` rows of the days (at most
    :data:`STOPPED_QUEUES_SHOWN`: longest stopped first, then most episodes, then most
    rejected), the queue-days stopped and all the queue-days (:func:`_most_of`)."""
    from pyspark.sql import functions as F

    from schemas.tables import QUEUE_FLOW_DAILY

    order = (
        F.col("time_stopped_s").desc_nulls_last(),
        F.col("episodes").desc_nulls_last(),
        F.col("rejected").desc_nulls_last(),
        "date",
        "broker",
        "run_id",
        "queue",
    )
    return _most_of(
        conf_path, date_from, date_to, warehouse_dir, spark, table=QUEUE_FLOW_DAILY,
        measure="time_stopped_s", order=order, shown=STOPPED_QUEUES_SHOWN,
    )  # fmt: skip


def starved_link_rows(
    conf_path: str | None,
    date_from: date,
    date_to: date,
    *,
    warehouse_dir: str | None = None,
    spark: SparkSession | None = None,
) -> tuple[list[dict[str, Any]], int, int]:
    """The most starved gold ``link_starvation_daily`` rows of the days (at most
    :data:`STARVED_LINKS_SHOWN`, most starved seconds first), the link-days that starved and
    all the link-days (:func:`_most_of`)."""
    from pyspark.sql import functions as F

    from schemas.tables import LINK_STARVATION_DAILY

    order = (F.col("starved_s").desc(), "date", "broker", "run_id", "link")
    return _most_of(
        conf_path, date_from, date_to, warehouse_dir, spark, table=LINK_STARVATION_DAILY,
        measure="starved_s", order=order, shown=STARVED_LINKS_SHOWN,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = date_range_parser("Run ingest -> episodes -> daily_metrics in one Spark session")
    parser.add_argument("--raw", help="raw event log root (default: paths.raw of the conf)")
    parser.add_argument(
        "--allow-empty-days",
        action="store_true",
        help="replace days that bronze holds with what raw has even when files bronze read are "
        "gone (by default refused: it usually means a wrong --raw)",
    )
    args = parse_date_range(parser, argv)
    configure_logging()
    # A refusal (conf, raw input, days behind) is one line and its exit code: run_job_process.
    result = run_pipeline(
        args.conf,
        args.date_from,
        args.date_to,
        raw_dir=args.raw,
        allow_empty_days=args.allow_empty_days,
    )
    rows, stopped, queue_days = most_stopped_queue_rows(args.conf, args.date_from, args.date_to)
    for row in rows:
        print(row)
    print(f"{stopped} of {queue_days} queue-days stopped")
    print({name: result[name] for name in ("seconds", "ok")})
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("pipeline", main))

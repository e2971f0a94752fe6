"""spark-submit entry point: Delta table maintenance after the nightly jobs (OPTIMIZE, VACUUM).

OPTIMIZE compacts the small files a day's replaceWhere leaves behind, only in the partitions of the
days given (the rest were compacted on their own nights). VACUUM then deletes files that no
version within the retention period still references; the retention (default 168 h, Delta's own
default) bounds how far back time travel and a concurrent reader can go, so it is never shortened
below Delta's safety check here. Delta ignores a VACUUM's own ``RETAIN`` (other than 0 hours) and
goes by the table property ``delta.deletedFileRetentionDuration``: the retention is set there.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Collection
from datetime import date
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.config import PipelineConf
from jobs.delta_io import days_predicate
from jobs.recommend_day_rollup import bronze_digests_now, carry_through_compaction
from schemas.model import TableSchema
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS
from schemas.tables import BRONZE_BROKER_EVENTS, GOLD, PIPELINE_TABLES

log = logging.getLogger(__name__)

DEFAULT_RETENTION_HOURS = 168
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


def maintained_tables(conf: PipelineConf) -> list[tuple[str, TableSchema]]:
    """(path, schema) of every Delta table of the pipeline, the recommendations included."""
    tables = [
        (conf.table_path(layer, name), schema) for name, (layer, schema) in PIPELINE_TABLES.items()
    ]
    tables.append(
        (conf.table_path(GOLD, THRESHOLD_RECOMMENDATIONS.name), THRESHOLD_RECOMMENDATIONS)
    )
    return tables


def retention_hours_arg(text: str) -> int:
    """argparse type of ``--retention-hours``: whole hours, at least Delta's safety minimum."""
    try:
        hours = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole hours, got {text!r}") from None
    if hours < DEFAULT_RETENTION_HOURS:
        raise argparse.ArgumentTypeError(
            f"{hours} h is below Delta's safety minimum of {DEFAULT_RETENTION_HOURS} h (files a "
            "concurrent reader or time travel may still need)"
        )
    return hours


def _set_retention(spark: SparkSession, table: DeltaTable, path: str, hours: int) -> None:
    """Make ``hours`` the table's retention, where VACUUM reads it (a commit only on change)."""
    wanted = f"interval {hours} hours"
    properties = table.detail().first().properties or {}
    if properties.get(RETENTION_PROPERTY) != wanted:
        spark.sql(
            f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{RETENTION_PROPERTY}' = '{wanted}')"
        )


def _vacuum(spark: SparkSession, path: str) -> None:
    """VACUUM in LITE mode, which finds the files to delete in the Delta log instead of listing
    the whole table folder (seconds instead of a minute on tiny local tables); FULL when LITE
    cannot, e.g. once the log entries it needs have expired."""
    try:
        spark.sql(f"VACUUM delta.`{path}` LITE").collect()
    except Exception as exc:  # Delta raises a plain AnalysisException-style error here
        log.info("VACUUM LITE of %s not possible (%s); running a full VACUUM", path, exc)
        spark.sql(f"VACUUM delta.`{path}`").collect()


def run_maintenance(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    tables: Collection[str] | None = None,
) -> dict[str, Any]:
    """OPTIMIZE the days' partitions of every existing table (or of ``tables``, by name), then
    VACUUM it with ``retention_hours`` as its retention; returns per table the files the
    compaction added and removed. A table not created yet is skipped."""
    if retention_hours < DEFAULT_RETENTION_HOURS:
        raise ValueError(f"retention {retention_hours} h is below {DEFAULT_RETENTION_HOURS} h")
    report: dict[str, Any] = {}
    for path, schema in maintained_tables(conf):
        if tables is not None and schema.name not in tables:
            continue
        if not DeltaTable.isDeltaTable(spark, path):
            log.info("%s: no Delta table at %s yet, skipped", schema.name, path)
            continue
        table = DeltaTable.forPath(spark, path)
        # Every table is partitioned by one date column: compact only the days just written.
        (partition,) = schema.partition_by
        bronze_before = (
            bronze_digests_now(spark, conf, date_from, date_to)
            if schema.name == BRONZE_BROKER_EVENTS.name
            else None
        )
        metrics = (
            table.optimize()
            .where(days_predicate(partition, date_from, date_to))
            .executeCompaction()
            .select("metrics.numFilesAdded", "metrics.numFilesRemoved")
            .first()
        )
        if bronze_before is not None:
            # What recommend keeps of those days stays theirs: a compaction changes no row.
            carry_through_compaction(spark, conf, date_from, date_to, bronze_before)
        _set_retention(spark, table, path, retention_hours)
        _vacuum(spark, path)
        report[schema.name] = {
            "files_added": int(metrics[0]) if metrics else 0,
            "files_removed": int(metrics[1]) if metrics else 0,
        }
        log.info(
            "%s: optimized %s..%s %s, vacuumed",
            schema.name,
            date_from,
            date_to,
            report[schema.name],
        )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = date_range_parser("OPTIMIZE the days' partitions and VACUUM every Delta table")
    parser.add_argument(
        "--retention-hours",
        type=retention_hours_arg,
        default=DEFAULT_RETENTION_HOURS,
        help=f"how long VACUUM keeps files no longer in the table, set as each table's "
        f"{RETENTION_PROPERTY} (whole hours, at least and by default {DEFAULT_RETENTION_HOURS})",
    )
    args = parse_date_range(parser, argv)
    conf, spark = start_job(args, "flowctl-maintenance")
    run_maintenance(spark, conf, args.date_from, args.date_to, args.retention_hours)
    return 0


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("maintenance", main))

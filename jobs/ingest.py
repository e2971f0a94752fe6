"""ingest: raw Parquet event log -> bronze ``broker_events`` + ``broker_events_quarantine``.

Per run of the job over [from, to]:

1. List ``<raw>/date=D/*.parquet`` for each day and check each file's footer and schema with pyarrow
   (cheap: no data is read). A file that cannot be opened, or whose schema breaks the contract,
   becomes one quarantine record (record_kind='file') and is not read.
2. Spark reads the remaining files with ``ignoreCorruptFiles``, so a damaged page cannot crash the
   job; a file yielding fewer rows than its footer declares is "partially read" and every row read
   from it is quarantined.
3. Rows are classified (jobs/transforms/validate.py): accepted, quarantined with reasons, or
   identical duplicates of an accepted (run_id, seq), which are dropped and counted.
4. Bronze and quarantine are written with replaceWhere on the days, so a rerun replaces them, and
   Great Expectations validates the accepted rows; the result and counts go to <quality>/.

Accounting: rows_read = rows_accepted + rows_quarantined + duplicates_dropped, always; rows a
damaged file declared but that could not be read are reported as rows_unreadable.
Exit status: 0 whatever the input (bad input is quarantined, not fatal); 1 when the Great
Expectations suite fails on accepted rows (a rule bug) or the accounting does not balance.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import quality
from jobs.cli import configure_logging, date_range_parser, parse_date_range
from jobs.config import PipelineConf, load_conf
from jobs.delta_io import conform, days_predicate, replace_where
from jobs.transforms.validate import ACCEPTED, DUPLICATE, QUARANTINED, classify_events
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import BROKER_EVENTS_QUARANTINE, BRONZE_BROKER_EVENTS

log = logging.getLogger("flowctl.ingest")

# <raw>/date=YYYY-MM-DD/<file>: the part of a path that names a raw file, relative to the raw root.
RELATIVE_PATH_PATTERN = r"(date=[0-9]{4}-[0-9]{2}-[0-9]{2}/[^/]+)$"


@dataclass(frozen=True)
class RawFile:
    day: date
    relative_path: str  # date=YYYY-MM-DD/part-....parquet: stable lineage, whatever the raw root
    path: str  # as the filesystem and Spark address it
    footer_rows: int | None
    problem: str | None  # why the file is quarantined whole, or None


def days_between(date_from: date, date_to: date) -> list[date]:
    return [date_from + timedelta(days=i) for i in range((date_to - date_from).days + 1)]


def _schema_problem(schema: pa.Schema) -> str | None:
    """Why a file's schema breaks the contract, or None. Extra columns are allowed (DESIGN §3)."""
    expected = BROKER_EVENTS.to_pyarrow()
    problems = []
    for field in expected:
        index = schema.get_field_index(field.name)
        if index < 0:
            if not field.nullable:
                problems.append(f"missing_column:{field.name}")
        elif not schema.field(index).type.equals(field.type):
            problems.append(f"wrong_type:{field.name}:{schema.field(index).type}")
    return ";".join(problems) or None


def inspect_raw_files(raw_dir: str, days: list[date]) -> list[RawFile]:
    """List the raw files of the days and check their footers, without reading any data."""
    if "://" not in raw_dir:  # a local path, possibly relative (--raw)
        raw_dir = Path(raw_dir).resolve().as_posix()
    filesystem, root = pafs.FileSystem.from_uri(
        raw_dir if "://" in raw_dir else Path(raw_dir).as_uri()
    )
    files = []
    for day in days:
        selector = pafs.FileSelector(f"{root}/date={day.isoformat()}", allow_not_found=True)
        for info in sorted(filesystem.get_file_info(selector), key=lambda i: i.path):
            name = info.base_name
            if info.type != pafs.FileType.File or name.startswith(("_", ".")):
                continue
            if not name.endswith(".parquet"):
                continue
            relative = f"date={day.isoformat()}/{name}"
            address = info.path if "://" not in raw_dir else f"{raw_dir}/{relative}"
            try:
                with filesystem.open_input_file(info.path) as handle:
                    parquet = pq.ParquetFile(handle)
                    rows = parquet.metadata.num_rows
                    problem = _schema_problem(parquet.schema_arrow)
            except Exception as exc:  # any unreadable footer: truncated, not Parquet, ...
                rows, problem = None, f"unreadable_file:{type(exc).__name__}"
                log.warning("unreadable raw file %s: %s", relative, exc)
            files.append(RawFile(day, relative, address, rows, problem))
    return files


def read_raw_events(spark: SparkSession, files: list[RawFile]) -> DataFrame:
    """The rows of the readable files, with ``date`` (from the path) and ``source_file``."""
    raw_schema = BROKER_EVENTS.to_spark()
    if not files:
        return spark.createDataFrame([], raw_schema).withColumns(
            {"date": F.lit(None).cast("date"), "source_file": F.lit(None).cast("string")}
        )
    # Hadoop reports file paths as URIs; undo the percent-encoding ('+' is literal in a URI).
    uri_path = F.regexp_replace(F.col("_metadata.file_path"), r"\+", "%2B")
    relative = F.url_decode(F.regexp_extract(uri_path, RELATIVE_PATH_PATTERN, 1))
    return (
        spark.read.schema(raw_schema)
        .option("ignoreCorruptFiles", "true")
        .parquet(*(f.path for f in files))
        .select("*", relative.alias("source_file"))
        .withColumn("date", F.to_date(F.regexp_extract("source_file", r"^date=([0-9-]{10})/", 1)))
    )


def _quarantined_files(spark: SparkSession, files: list[RawFile]) -> DataFrame:
    rows = [
        {
            "date": f.day,
            "source_file": f.relative_path,
            "record_kind": "file",
            "reason": f.problem,
            "file_rows": f.footer_rows,
        }
        for f in files
    ]
    schema = BROKER_EVENTS_QUARANTINE.to_spark()
    empty_events = {c: F.lit(None).cast(schema[c].dataType) for c in BROKER_EVENTS.names}
    frame = spark.createDataFrame(
        rows, "date date, source_file string, record_kind string, reason string, file_rows bigint"
    )
    return frame.withColumns(empty_events)


def run_ingest(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    raw_dir: str | None = None,
) -> dict[str, Any]:
    """Ingest the raw days [date_from, date_to]; returns the counts (also logged and stored)."""
    raw_root = raw_dir or conf.raw_dir
    label = f"{date_from.isoformat()}_{date_to.isoformat()}"
    files = inspect_raw_files(raw_root, days_between(date_from, date_to))
    bad_files = [f for f in files if f.problem]
    good_files = [f for f in files if not f.problem]

    raw = read_raw_events(spark, good_files).persist(StorageLevel.MEMORY_AND_DISK)
    rows_per_file = {
        r.source_file: r["count"] for r in raw.groupBy("source_file").count().collect()
    }
    partially_read = sorted(
        f.relative_path for f in good_files if rows_per_file.get(f.relative_path, 0) < f.footer_rows
    )
    for name in partially_read:
        log.warning("raw file %s could be read only in part; its rows are quarantined", name)

    classified = classify_events(raw, partially_read).persist(StorageLevel.MEMORY_AND_DISK)
    counts = {r.status: r["count"] for r in classified.groupBy("status").count().collect()}
    accepted = classified.where(F.col("status") == ACCEPTED)
    rejected_rows = classified.where(F.col("status") == QUARANTINED).withColumns(
        {"record_kind": F.lit("row"), "file_rows": F.lit(None).cast("long")}
    )
    rejected_files = [*bad_files, *(f for f in good_files if f.relative_path in partially_read)]
    file_records = _quarantined_files(
        spark,
        [
            f
            if f.problem
            else RawFile(f.day, f.relative_path, f.path, f.footer_rows, "partially_read_file")
            for f in rejected_files
        ],
    )

    days = days_predicate("date", date_from, date_to)
    rows_accepted = replace_where(spark, conf, BRONZE_BROKER_EVENTS, accepted, days)
    quarantine = conform(rejected_rows, BROKER_EVENTS_QUARANTINE).unionByName(
        conform(file_records, BROKER_EVENTS_QUARANTINE)
    )
    replace_where(spark, conf, BROKER_EVENTS_QUARANTINE, quarantine, days)
    reasons = {
        r.reason: r["count"]
        for r in classified.where(F.col("status") == QUARANTINED)
        .groupBy("reason")
        .count()
        .collect()
    }

    report: dict[str, Any] = {
        "date_from": date_from.isoformat(),
        "date_to": date_to.isoformat(),
        "files_listed": len(files),
        "files_quarantined": len(bad_files),
        "files_partially_read": len(partially_read),
        "rows_read": sum(rows_per_file.values()),
        "rows_accepted": counts.get(ACCEPTED, 0),
        "rows_quarantined": counts.get(QUARANTINED, 0),
        "duplicates_dropped": counts.get(DUPLICATE, 0),
        "rows_unreadable": sum(
            f.footer_rows - rows_per_file.get(f.relative_path, 0)
            for f in good_files
            if f.relative_path in partially_read
        ),
        "quarantine_reasons": dict(sorted(reasons.items())),
        "quarantined_files": {f.relative_path: f.problem for f in bad_files},
    }
    report["balanced"] = (
        report["rows_read"]
        == report["rows_accepted"] + report["rows_quarantined"] + report["duplicates_dropped"]
        and rows_accepted == report["rows_accepted"]
    )
    if conf.validate_with_great_expectations:
        validation = quality.validate_accepted_events(
            conform(accepted, BRONZE_BROKER_EVENTS), label
        )
        report["great_expectations_success"] = validation["success"]
        report["great_expectations_result"] = quality.store_result(
            {"counts": report, "validation": validation}, conf.quality_dir, label
        )
    # Unpersisting raw while classified (built on it) is still in use breaks the plan of the
    # `_metadata` column in Spark 4.1; both go when the job is done.
    classified.unpersist()
    raw.unpersist()
    log.info(
        "ingest %s: files %d (quarantined %d, partially read %d); rows read %d = accepted %d + "
        "quarantined %d + duplicates dropped %d; balanced=%s",
        label,
        report["files_listed"],
        report["files_quarantined"],
        report["files_partially_read"],
        report["rows_read"],
        report["rows_accepted"],
        report["rows_quarantined"],
        report["duplicates_dropped"],
        report["balanced"],
    )
    return report


def ingest_succeeded(report: dict[str, Any]) -> bool:
    return bool(report["balanced"]) and report.get("great_expectations_success", True)


def main(argv: list[str] | None = None) -> int:
    from jobs.spark_session import build_spark_session

    parser = date_range_parser("Raw event log -> bronze broker_events + quarantine")
    parser.add_argument("--raw", help="raw event log root (default: paths.raw of the conf)")
    args = parse_date_range(parser, argv)
    configure_logging()
    conf = load_conf(args.conf)
    spark = build_spark_session(conf, app_name="flowctl-ingest")
    report = run_ingest(spark, conf, args.date_from, args.date_to, raw_dir=args.raw)
    return 0 if ingest_succeeded(report) else 1


if __name__ == "__main__":
    sys.exit(main())

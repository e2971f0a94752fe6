"""Reading and writing the pipeline's Delta tables, always through their TableSchema."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from flowctl_core.wording import counted
from jobs.config import PipelineConf
from schemas.model import TableSchema
from schemas.tables import PIPELINE_TABLES

log = logging.getLogger(__name__)


def table_path(conf: PipelineConf, schema: TableSchema) -> str:
    layer, _ = PIPELINE_TABLES[schema.name]
    return conf.table_path(layer, schema.name)


#: Delta table properties set when a table is created. The wide event tables collect data-skipping
#: statistics (min/max/null count per written file) on the columns jobs filter on only, not on the
#: first 32 columns: on every column they cost about as much as the rest of the bronze write.
TABLE_PROPERTIES: dict[str, dict[str, str]] = {
    "broker_events": {"delta.dataSkippingStatsColumns": "run_id,seq,ts"},
    "broker_events_quarantine": {"delta.dataSkippingStatsColumns": "run_id,seq,ts,reason"},
}

#: (Spark application, table path, columns) known to hold a Delta table with those columns: every
#: job reads and writes several tables, and asking Delta whether one exists costs a log replay.
_ENSURED: set[tuple[str, str, tuple[str, ...]]] = set()


def sql_string(text: str) -> str:
    """``text`` as a quoted Spark SQL string literal (backslashes are escapes there too)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def local_table_missing(path: str) -> bool:
    """True when ``path`` is a local folder holding no Delta table (no ``_delta_log``), checked
    on the file system; a URI is never known to be missing here (it is Spark's to read)."""
    return "://" not in path and not Path(path, "_delta_log").is_dir()


def ensure_table(spark: SparkSession, path: str, schema: TableSchema) -> None:
    """Create the Delta table with the schema's columns, NOT NULLs, partitioning and
    :data:`TABLE_PROPERTIES` if absent; give an existing one the schema's columns it lacks
    (:func:`add_missing_columns`). Once per application and table."""
    key = (spark.sparkContext.applicationId, path, tuple(schema.names))
    existed = not local_table_missing(path)
    if key in _ENSURED and existed:
        return
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(schema.to_spark())
        .partitionedBy(*schema.partition_by)
        .comment(f"{schema.name} v{schema.version}: {schema.doc}")
    )
    for name, value in TABLE_PROPERTIES.get(schema.name, {}).items():
        builder = builder.property(name, value)
    builder.execute()
    if existed:
        add_missing_columns(spark, path, schema)
        drop_relaxed_not_nulls(spark, path, schema)
    _ENSURED.add(key)


def add_missing_columns(spark: SparkSession, path: str, schema: TableSchema) -> list[str]:
    """Add to the Delta table at ``path`` the columns of ``schema`` it lacks, as nullable columns
    at its end, and return their names: a table created by an earlier version (a Delta write of a
    column the table does not have fails). Rows written before hold null there."""
    present = set(DeltaTable.forPath(spark, path).toDF().columns)
    missing = [c for c in schema.columns if c.name not in present]
    if missing:
        ddl = {f.name: f.dataType.simpleString() for f in schema.to_spark().fields}
        columns = ", ".join(
            f"`{c.name}` {ddl[c.name]} COMMENT {sql_string(c.doc)}" for c in missing
        )
        spark.sql(f"ALTER TABLE {_delta_table(path)} ADD COLUMNS ({columns})")
        log.info("%s: added columns %s", schema.name, ", ".join(c.name for c in missing))
    return [c.name for c in missing]


def drop_relaxed_not_nulls(spark: SparkSession, path: str, schema: TableSchema) -> list[str]:
    """Drop the NOT NULL of the Delta table's columns that ``schema`` now allows to be null, and
    return their names: a table created by an earlier version would refuse the nulls (the
    episode tables' ``run_watermark_ts``, which became null on closed episodes). Rows written
    before keep their values until a rerun replaces them."""
    held = {f.name for f in DeltaTable.forPath(spark, path).toDF().schema.fields if not f.nullable}
    relaxed = [c.name for c in schema.columns if c.nullable and c.name in held]
    for name in relaxed:
        spark.sql(f"ALTER TABLE {_delta_table(path)} ALTER COLUMN `{name}` DROP NOT NULL")
    if relaxed:
        log.info("%s: columns now nullable: %s", schema.name, ", ".join(relaxed))
    return relaxed


def _delta_table(path: str) -> str:
    return "delta.`{}`".format(path.replace("`", "``"))


def conform(df: DataFrame, schema: TableSchema) -> DataFrame:
    """Select the schema's columns in order, cast to their types; fails on a missing column."""
    spark_schema = schema.to_spark()
    return df.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in spark_schema.fields))


def rows_frame(
    spark: SparkSession,
    schema: TableSchema,
    rows: Sequence[Sequence[object] | Mapping[str, object]] = (),
    *,
    as_parquet_read: bool = False,
) -> DataFrame:
    """A DataFrame of a few ``rows`` with ``schema``'s Spark types, built through Arrow: each row
    a tuple in the schema's column order or a mapping by column name (a column it lacks is
    null); no rows give an empty frame. ``as_parquet_read`` gives the schema as a read of a
    Parquet file does, every column nullable and without the columns' docs (rows that break the
    contract, as a raw file can hold them).

    ``spark.createDataFrame`` on Python rows makes a Python RDD whose every action runs Python
    workers (~0.3 s warm for two rows, written); from an Arrow table the JVM reads the rows
    itself (~0.05 s). For a few rows only: they are all held on the driver."""
    import pyarrow as pa

    records = [
        row if isinstance(row, Mapping) else dict(zip(schema.names, row, strict=True))
        for row in rows
    ]
    arrow_schema = schema.to_pyarrow()
    spark_schema = schema.to_spark()
    if as_parquet_read:
        arrow_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        spark_schema = StructType([StructField(f.name, f.dataType) for f in spark_schema.fields])
    # Arrow truncates a float given for an integer column (1.5 -> 1) where Spark refuses it,
    # and leaves out a key the schema lacks (a misspelt column would silently read as null).
    integers = [f.name for f in arrow_schema if pa.types.is_integer(f.type)]
    for record in records:
        unknown = sorted(set(record) - set(schema.names))
        if unknown:
            raise ValueError(f"{schema.name} has no column {', '.join(map(repr, unknown))}")
        for name in integers:
            value = record.get(name)
            if value is not None and not isinstance(value, int):
                raise ValueError(f"{schema.name}: {name} takes whole numbers, not {value!r}")
    table = pa.Table.from_pylist(records, schema=arrow_schema)
    # Arrow keeps a null in a NOT NULL field; Spark would then trust a nullability that lies.
    for field in arrow_schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"{schema.name}: {field.name} is NOT NULL, and a row has it null")
    return spark.createDataFrame(table, spark_schema)


def read_table(spark: SparkSession, conf: PipelineConf, schema: TableSchema) -> DataFrame:
    path = table_path(conf, schema)
    ensure_table(spark, path, schema)
    return spark.read.format("delta").load(path)


def files_matching(
    spark: SparkSession, conf: PipelineConf, schema: TableSchema, predicate: str
) -> list[str]:
    """The table's data files that may hold rows matching a partition ``predicate``.

    Answered from the Delta log (partition pruning of the snapshot's file list), without reading
    data; a local table that does not exist yet has none (and is not created).
    """
    path = table_path(conf, schema)
    if local_table_missing(path):
        return []
    return list(read_table(spark, conf, schema).where(predicate).inputFiles())


def has_files_matching(
    spark: SparkSession, conf: PipelineConf, schema: TableSchema, predicate: str
) -> bool:
    """Whether :func:`files_matching` finds any."""
    return bool(files_matching(spark, conf, schema, predicate))


def replace_where(
    spark: SparkSession,
    conf: PipelineConf,
    schema: TableSchema,
    df: DataFrame,
    predicate: str,
) -> int:
    """Atomically replace the rows matching ``predicate`` by ``df``; returns the rows written.

    Delta checks that every written row matches the predicate, so a job cannot write outside the
    slice it replaces: that is what makes a rerun of the same range idempotent.
    """
    return replace_where_at(spark, table_path(conf, schema), schema, df, predicate)


def replace_where_at(
    spark: SparkSession, path: str, schema: TableSchema, df: DataFrame, predicate: str
) -> int:
    """:func:`replace_where` on the table at ``path`` (created from ``schema`` if absent)."""
    ensure_table(spark, path, schema)
    version_before, _ = latest_commit(spark, path)
    (
        conform(df, schema)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .save(path)
    )
    version, output_rows = latest_commit(spark, path)
    # Nothing to write and nothing to replace makes no commit: the latest one is someone else's.
    written = output_rows if version != version_before else 0
    log.info("%s: replaced %s with %s", schema.name, predicate, counted(written, "row"))
    return written


#: A commit file of the Delta log (the protocol's ``<version, 20 digits>.json``); checkpoints,
#: checksums and compacted ranges have other names.
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def latest_local_commit(log_dir: Path) -> tuple[int, int]:
    """:func:`latest_commit` of a local table, read from its newest commit file's ``commitInfo``
    action: a directory listing and one small file, no Spark job (Delta's ``history(1)`` costs a
    log replay and a job, and every write asks twice). A log cleanup never removes the newest
    commit file, so it is always there."""
    versions = [int(m.group(1)) for m in map(_COMMIT_FILE.match, os.listdir(log_dir)) if m]
    if not versions:
        return -1, 0
    version = max(versions)
    with open(log_dir / f"{version:020d}.json", encoding="utf-8") as commit:
        for line in commit:
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is not None:
                metrics = info.get("operationMetrics") or {}
                return version, int(metrics.get("numOutputRows", 0))
    return version, 0


def latest_commit(spark: SparkSession, path: str) -> tuple[int, int]:
    """Version and numOutputRows of the table's latest commit (from the Delta log: no data is
    scanned); version -1 for a table without commits. Local tables are read by
    :func:`latest_local_commit`, others through Delta's history."""
    log_dir = Path(path, "_delta_log")
    if "://" not in path and log_dir.is_dir():
        return latest_local_commit(log_dir)
    latest = DeltaTable.forPath(spark, path).history(1).select("version", "operationMetrics")
    row = latest.first()
    if row is None:
        return -1, 0
    metrics = row.operationMetrics or {}
    return int(row.version), int(metrics.get("numOutputRows", 0))


def days_predicate(column: str, date_from: date, date_to: date) -> str:
    """``column`` within [date_from, date_to], as a replaceWhere predicate.

    Spelled with >= / <=: Delta 4.3's replaceWhere fails on BETWEEN ("Invalid call to nullable on
    unresolved object").
    """
    return (
        f"{column} >= DATE '{date_from.isoformat()}' AND {column} <= DATE '{date_to.isoformat()}'"
    )

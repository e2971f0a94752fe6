"""Silver ``recommend_day_rollup``: recommend's day rollup of bronze (jobs/transforms/
recommend_rollup.py) kept day by day, so that a night computes it for the new day only and
merges the rest of its look-back window from what is kept, instead of reading the whole window's
bronze for those facts again.

A day's rows are kept with a digest of the names of the bronze files they were computed from,
and of the rollup's rules (its version and columns: rows kept by other rules are computed again).
Delta never rewrites a data file in place: any change of a day's rows in bronze (a day ingested
again, a raw file added, a copy moved to a later day's quarantine, OPTIMIZE) replaces files, so
a day whose digest differs from its files' now is computed again, and a day bronze no longer
holds loses its rows. An OPTIMIZE moves rows and changes none: the maintenance job gives the
kept days the compacted files' digest (:func:`carry_through_compaction`), so they are not
computed again. A bronze table with deletion vectors (rows deleted without a new file) is not
digested this way: its rollup is computed from bronze every time.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import date

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import (
    days_predicate,
    latest_commit,
    local_table_missing,
    read_table,
    replace_where_at,
    rows_frame,
    table_path,
)
from jobs.transforms.recommend_rollup import ROLLUP_RULES_VERSION, day_rollup
from schemas.tables import BRONZE_BROKER_EVENTS, RECOMMEND_DAY_ROLLUP

log = logging.getLogger(__name__)

#: What the kept rows are computed by: a day kept by other rules is computed again.
ROLLUP_RULES = f"v{ROLLUP_RULES_VERSION}: {', '.join(RECOMMEND_DAY_ROLLUP.names)}"

_DAY_FOLDER = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/([^/]+)$")


def bronze_file_digests(files: Iterable[str], rules: str = "") -> dict[date, str] | None:
    """Per day, a digest of the names of its bronze data files (``.../date=YYYY-MM-DD/name``)
    and of ``rules`` (what the rows are computed by); None when a file is not in a day's folder
    (a table written with random file prefixes: its files do not tell their day)."""
    names: dict[date, list[str]] = defaultdict(list)
    for path in files:
        found = _DAY_FOLDER.search(path)
        if found is None:
            return None
        names[date.fromisoformat(found.group(1))].append(found.group(2))
    return {
        day: hashlib.sha256("\n".join([rules, *sorted(day_names)]).encode()).hexdigest()
        for day, day_names in names.items()
    }


def days_to_compute(kept: dict[date, str], bronze: dict[date, str]) -> list[date]:
    """The days whose kept rows are not those of bronze's files now: missing, computed from
    other files, or of a day bronze no longer holds."""
    return sorted(day for day in {*kept, *bronze} if kept.get(day) != bronze.get(day))


def _unsafe_to_digest(spark: SparkSession, path: str) -> str | None:
    """Why bronze's file names may not tell its rows (None: they do): deletion vectors delete
    rows without a new file, and the feature stays once a table used it."""
    detail = DeltaTable.forPath(spark, path).detail().first()
    features = set(getattr(detail, "tableFeatures", None) or []) if detail else set()
    properties = (detail.properties or {}) if detail else {}
    if "deletionVectors" in features or properties.get("delta.enableDeletionVectors") == "true":
        return "bronze has deletion vectors"
    return None


def _emptied(spark: SparkSession, path: str) -> None:
    """Empty the kept table when an earlier version wrote other columns: its rows are of other
    rules anyway, and a column dropped since (NOT NULL there) would refuse the new rows."""
    if local_table_missing(path):
        return
    columns = DeltaTable.forPath(spark, path).toDF().columns
    if columns != list(RECOMMEND_DAY_ROLLUP.names):
        (
            rows_frame(spark, RECOMMEND_DAY_ROLLUP)
            .write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .partitionBy(*RECOMMEND_DAY_ROLLUP.partition_by)
            .save(path)
        )
        log.info("recommend_day_rollup: kept by an earlier version (other columns); emptied")


def window_rollup(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> DataFrame:
    """The day rollup of bronze's days [date_from, date_to]: the kept days' rows, after the days
    whose bronze files changed (or that were never kept) are computed and replaced, and the
    kept days before ``date_from`` (out of the window) dropped."""
    window = days_predicate("date", date_from, date_to)
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(window)
    why_not = _unsafe_to_digest(spark, table_path(conf, BRONZE_BROKER_EVENTS))
    digests = None if why_not else bronze_file_digests(bronze.inputFiles(), ROLLUP_RULES)
    if digests is None:
        log.info("recommend_day_rollup: %s; computed from bronze", why_not or "files not by day")
        return day_rollup(bronze)
    path = table_path(conf, RECOMMEND_DAY_ROLLUP)
    _emptied(spark, path)
    kept_table = read_table(spark, conf, RECOMMEND_DAY_ROLLUP)
    kept = {
        row.date: row.bronze_files
        # One row per day kept (a look-back window: a few).
        for row in kept_table.where(window).select("date", "bronze_files").distinct().collect()
    }
    stale = days_to_compute(kept, digests)
    earlier = f"date < DATE '{date_from.isoformat()}'"
    dropped = bool(kept_table.where(earlier).inputFiles())
    if stale or dropped:
        replaced = [f"date IN ({', '.join(_sql_date(day) for day in stale)})"] if stale else []
        computed_days = [day for day in stale if day in digests]
        if computed_days:
            digest = F.create_map(
                *(part for day in computed_days for part in (F.lit(day), F.lit(digests[day])))
            )
            # A day that reappeared after the digest was taken: no digest, computed again next.
            computed = day_rollup(bronze.where(F.col("date").isin(computed_days))).withColumn(
                "bronze_files", F.coalesce(digest[F.col("date")], F.lit(""))
            )
        else:
            computed = rows_frame(spark, RECOMMEND_DAY_ROLLUP)
        predicate = " OR ".join([*replaced, *([earlier] if dropped else [])])
        replace_where_at(spark, path, RECOMMEND_DAY_ROLLUP, computed, predicate)
        log.info("recommend_day_rollup: computed %d of %d days", len(computed_days), len(digests))
    return read_table(spark, conf, RECOMMEND_DAY_ROLLUP).where(window)


def bronze_digests_now(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> tuple[int, dict[date, str] | None]:
    """Bronze's latest version and the digests of the days [date_from, date_to] at it."""
    path = table_path(conf, BRONZE_BROKER_EVENTS)
    version, _ = latest_commit(spark, path)
    at = spark.read.format("delta").option("versionAsOf", version).load(path)
    files = at.where(days_predicate("date", date_from, date_to)).inputFiles()
    return version, bronze_file_digests(files, ROLLUP_RULES)


def carry_through_compaction(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    before: tuple[int, dict[date, str] | None],
) -> int:
    """After an OPTIMIZE of bronze's days [date_from, date_to] (``before``: bronze's version
    and digests just before it), give the kept days computed from the files it compacted the
    digest of the files it wrote: a compaction moves rows, it changes none, so those days need
    not be computed again. Only when the compaction is bronze's one commit since ``before``
    (nothing else can have changed the days' rows). Returns the days carried."""
    version_before, digests_before = before
    version_after, digests_after = bronze_digests_now(spark, conf, date_from, date_to)
    path = table_path(conf, RECOMMEND_DAY_ROLLUP)
    if (
        version_after != version_before + 1
        or digests_before is None
        or digests_after is None
        or local_table_missing(path)
        or not _is_compaction(spark, table_path(conf, BRONZE_BROKER_EVENTS))
    ):
        return 0
    moved = {
        day: (old, digests_after[day])
        for day, old in digests_before.items()
        if day in digests_after and digests_after[day] != old
    }
    kept = DeltaTable.forPath(spark, path)
    for day, (old, new) in sorted(moved.items()):
        kept.update(
            condition=(F.col("date") == F.lit(day)) & (F.col("bronze_files") == F.lit(old)),
            set={"bronze_files": F.lit(new)},
        )
    if moved:
        log.info("recommend_day_rollup: %d days carried through bronze's compaction", len(moved))
    return len(moved)


def _is_compaction(spark: SparkSession, path: str) -> bool:
    """Whether the table's latest commit is an OPTIMIZE (not another writer's commit while the
    compaction found nothing to do)."""
    latest = DeltaTable.forPath(spark, path).history(1).select("operation").first()
    return latest is not None and latest.operation == "OPTIMIZE"


def _sql_date(day: date) -> str:
    return f"DATE '{day.isoformat()}'"

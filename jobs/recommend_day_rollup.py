"""Silver ``recommend_day_rollup``: recommend's day rollup of bronze (jobs/transforms/
recommend_rollup.py) kept day by day, so that a night computes it for the new day only and
merges the rest of its look-back window from what is kept, instead of reading the whole window's
bronze for those facts again.

A day's rows are kept with a digest of the names of the bronze files they were computed from.
Delta never rewrites a data file in place: any change of a day's rows in bronze (a day ingested
again, a raw file added, a copy moved to a later day's quarantine, OPTIMIZE) replaces files, so
a day whose digest differs from its files' now is computed again, and a day bronze no longer
holds loses its rows. A bronze table with deletion vectors (rows deleted without a new file)
is not digested this way: its rollup is computed from bronze every time.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import days_predicate, read_table, replace_where_at, table_path
from jobs.transforms.recommend_rollup import day_rollup
from schemas.tables import BRONZE_BROKER_EVENTS, RECOMMEND_DAY_ROLLUP

log = logging.getLogger(__name__)

_DAY_FOLDER = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/([^/]+)$")


def bronze_file_digests(files: Iterable[str]) -> dict[date, str]:
    """Per day, a digest of the names of its bronze data files (``.../date=YYYY-MM-DD/name``)."""
    names: dict[date, list[str]] = defaultdict(list)
    for path in files:
        found = _DAY_FOLDER.search(path)
        if found is None:
            raise ValueError(f"{path}: a bronze data file outside a date= partition")
        names[date.fromisoformat(found.group(1))].append(found.group(2))
    return {
        day: hashlib.sha256("\n".join(sorted(day_names)).encode()).hexdigest()
        for day, day_names in names.items()
    }


def days_to_compute(kept: dict[date, str], bronze: dict[date, str]) -> list[date]:
    """The days whose kept rows are not those of bronze's files now: missing, computed from
    other files, or of a day bronze no longer holds."""
    return sorted(day for day in {*kept, *bronze} if kept.get(day) != bronze.get(day))


def _has_deletion_vectors(spark: SparkSession, path: str) -> bool:
    properties = spark.sql("SHOW TBLPROPERTIES delta.`{}`".format(path.replace("`", "``")))
    return any(
        row.key == "delta.enableDeletionVectors" and row.value.lower() == "true"
        for row in properties.collect()  # a table's properties: a few rows
    )


def window_rollup(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> DataFrame:
    """The day rollup of bronze's days [date_from, date_to]: the kept days' rows, after the days
    whose bronze files changed (or that were never kept) are computed and replaced."""
    window = days_predicate("date", date_from, date_to)
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(window)
    if _has_deletion_vectors(spark, table_path(conf, BRONZE_BROKER_EVENTS)):
        log.info("recommend_day_rollup: bronze has deletion vectors; computed from bronze")
        return day_rollup(bronze)
    digests = bronze_file_digests(bronze.inputFiles())
    path = table_path(conf, RECOMMEND_DAY_ROLLUP)
    kept_rows = read_table(spark, conf, RECOMMEND_DAY_ROLLUP).where(window)
    kept = {
        row.date: row.bronze_files
        # One row per day kept (a look-back window: a few).
        for row in kept_rows.select("date", "bronze_files").distinct().collect()
    }
    stale = days_to_compute(kept, digests)
    if stale:
        listed = ", ".join(f"DATE '{day.isoformat()}'" for day in stale)
        digest = F.create_map(
            *(part for day in stale if day in digests for part in (F.lit(day), F.lit(digests[day])))
        )
        computed = day_rollup(bronze.where(F.col("date").isin(stale))).withColumn(
            "bronze_files", digest[F.col("date")]
        )
        replace_where_at(spark, path, RECOMMEND_DAY_ROLLUP, computed, f"date IN ({listed})")
        log.info("recommend_day_rollup: computed %d of %d days", len(stale), len(digests))
    return read_table(spark, conf, RECOMMEND_DAY_ROLLUP).where(window)

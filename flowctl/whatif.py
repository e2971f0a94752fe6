"""What-if over the Delta tables: the recommended thresholds read from the gold
``threshold_recommendations`` table, for :func:`flowctl_core.whatif.run_whatif` to replay."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from flowctl_core.flowlimit import FlowThresholds
from flowctl_core.whatif import overrides_from_recommendations

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession


def load_recommended_thresholds(
    spark: SparkSession,
    table_path: str,
    *,
    as_of: date | None = None,
    broker: str | None = None,
) -> dict[str, FlowThresholds]:
    """queue -> thresholds from the Delta table at ``table_path``: the rows of ``as_of`` (default:
    the latest day in the table), optionally of one broker."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(table_path).where(F.col("entity_kind") == "queue")
    if broker is not None:
        table = table.where(F.col("broker") == broker)
    if as_of is None:
        latest = table.agg(F.max("date").alias("latest")).first()
        if latest is None or latest["latest"] is None:
            return {}
        as_of = latest["latest"]
    rows = table.where(F.col("date") == F.lit(as_of)).collect()
    return overrides_from_recommendations(row.asDict() for row in rows)

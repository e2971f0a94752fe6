"""What-if over the Delta tables: the recommendations read from the gold
``threshold_recommendations`` table, for the engine to replay: Qpid's thresholds
(:func:`load_recommended_thresholds`, :func:`flowctl_core.whatif.run_whatif`) and every other
broker's knob (:func:`whatif_knobs`, :func:`flowctl_core.whatif_knobs.run_knob_whatif`)."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

from flowctl_core.flowlimit import FlowThresholds
from flowctl_core.scenario import Scenario
from flowctl_core.whatif import overrides_from_recommendations
from flowctl_core.whatif_knobs import (
    KnobComparison,
    knob_applies,
    knob_changes_from_recommendations,
    run_knob_whatifs,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession


def load_recommendation_rows(
    spark: SparkSession,
    table_path: str,
    *,
    as_of: date | None = None,
    broker: str | None = None,
    entity_kind: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``table_path`` as of ``as_of`` (default: the latest day in
    the table), optionally of one broker and one kind of entity, as dicts."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(table_path)
    if entity_kind is not None:
        table = table.where(F.col("entity_kind") == entity_kind)
    if broker is not None:
        table = table.where(F.col("broker") == broker)
    if as_of is None:
        latest = table.agg(F.max("date").alias("latest")).first()
        if latest is None or latest["latest"] is None:
            return []
        as_of = latest["latest"]
    return [row.asDict() for row in table.where(F.col("date") == F.lit(as_of)).collect()]


def recommendation_days(spark: SparkSession, table_path: str, broker: str) -> list[date]:
    """The days the Delta table at ``table_path`` holds recommendations of ``broker`` for, in
    order (one row per day: what ``--as-of`` can name)."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(table_path).where(F.col("broker") == broker)
    return sorted(row.date for row in table.select("date").distinct().collect())


def load_recommended_thresholds(
    spark: SparkSession,
    table_path: str,
    *,
    as_of: date | None = None,
    broker: str | None = None,
) -> dict[str, FlowThresholds]:
    """queue -> thresholds from the Delta table at ``table_path``: the Qpid queue rows of
    ``as_of`` (default: the latest day in the table), optionally of one broker."""
    rows = load_recommendation_rows(
        spark, table_path, as_of=as_of, broker=broker, entity_kind="queue"
    )
    return overrides_from_recommendations(rows)


def whatif_knobs(
    spark: SparkSession,
    table_path: str,
    scenario: Scenario,
    *,
    as_of: date | None = None,
    seed: int | None = None,
) -> list[KnobComparison]:
    """Each recommendation of the scenario's broker that changes a knob other than Qpid's
    thresholds, replayed on the scenario (one re-run per change, beside one run as written that
    they share); rows about entities the scenario does not have are skipped."""
    rows = load_recommendation_rows(spark, table_path, as_of=as_of, broker=scenario.broker.name)
    changes = [c for c in knob_changes_from_recommendations(rows) if knob_applies(scenario, c)]
    return run_knob_whatifs(scenario, changes, seed=seed)

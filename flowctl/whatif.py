"""What-if over the Delta tables: one day's recommendations read from the gold
``threshold_recommendations`` table (:func:`recommendation_day`, :func:`load_recommendation_rows`),
for the engine to replay: Qpid's thresholds (:func:`flowctl_core.whatif.run_whatif`) and every
other broker's knob (:func:`whatif_knobs`, :func:`flowctl_core.whatif_knobs.run_knob_whatif`)."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

from flowctl_core.scenario import Scenario
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
    day: date,
    broker: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of ``day`` of the Delta table at ``table_path``, optionally of one broker, as
    dicts (:func:`recommendation_day` says which day to take)."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(table_path).where(F.col("date") == F.lit(day))
    if broker is not None:
        table = table.where(F.col("broker") == broker)
    return [row.asDict() for row in table.collect()]


def recommendation_days(spark: SparkSession, table_path: str, broker: str) -> list[date]:
    """The days the Delta table at ``table_path`` holds recommendations of ``broker`` for, in
    order (one row per day)."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(table_path).where(F.col("broker") == broker)
    return sorted(row.date for row in table.select("date").distinct().collect())


def recommendation_day(held_days: list[date], as_of: date | None) -> date | None:
    """The day whose recommendations are replayed: of the days held (in order), the latest on or
    before ``as_of`` (default: the latest), as "as of" reads; None when there is none. One day
    for every kind of row, so Qpid's thresholds and the other knobs come from the same night."""
    eligible = [day for day in held_days if as_of is None or day <= as_of]
    return eligible[-1] if eligible else None


def whatif_knobs(
    rows: list[dict[str, Any]], scenario: Scenario, *, seed: int | None = None
) -> list[KnobComparison]:
    """Each recommendation of ``rows`` (the scenario's broker's, one day's) that changes a knob
    other than Qpid's thresholds, replayed on the scenario (one re-run per change, beside one run
    as written that they share); rows about entities the scenario does not have are skipped."""
    changes = [c for c in knob_changes_from_recommendations(rows) if knob_applies(scenario, c)]
    return run_knob_whatifs(scenario, changes, seed=seed)

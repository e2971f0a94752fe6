"""A scenario's recommendations as the pipeline computes them: the engine's event log read by
Spark, then the episodes, daily and blocking transforms and ``threshold_recommendations``.

Shared by the tests that replay those recommendations on the engine (test_whatif and
test_recommend_brokers), so both judge what the real transforms recommend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowctl_core.clock import seconds_to_us
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import Scenario
from flowctl_core.sink import ParquetSink
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from jobs.recommend_policy import RecommendPolicy


def _day(ts_us: int) -> date:
    return datetime.fromtimestamp(ts_us / seconds_to_us(1), tz=UTC).date()


#: Spark as the jobs run it: each stage compiled, and no fallback to interpreting a stage that
#: does not compile (tests/conftest.py runs the tests' Spark interpreted, for their few rows).
COMPILED_SPARK = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "CODEGEN_ONLY",
    "spark.sql.codegen.fallback": "false",
    # Small sides broadcast as the jobs plan them (Spark's default; the tests' settings broadcast
    # only where the code asks): each broadcast join is compiled into its stream side's stage,
    # the larger method the 64 KB limit applies to.
    "spark.sql.autoBroadcastJoinThreshold": "10MB",
}


@contextmanager
def compiled(spark: Any) -> Iterator[None]:
    """:data:`COMPILED_SPARK` within the block. A stage whose method passes the JVM's 64 KB
    then fails the query (the jobs would fall back after a page of Janino's errors on the
    console); and a bundled scenario's hundreds of thousands of events are computed ~3x faster
    than interpreted (bursty-producer's recommendations, warm: 33 -> 10 s)."""
    before = {key: spark.conf.get(key, None) for key in COMPILED_SPARK}
    try:
        for key, value in COMPILED_SPARK.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def recommendation_rows(
    spark: Any, scenario: Scenario, raw: Path, policy: RecommendPolicy | None = None
) -> list[dict[str, Any]]:
    """The scenario run on the engine into Parquet under ``raw``, then the recommendations over
    the days it covers, as of its last day (``policy``: default conf/recommend.yaml), as dicts,
    computed by Spark :func:`compiled`."""
    with compiled(spark):
        return _recommendation_rows(spark, [scenario], raw, policy)


def recommendations_by_broker(
    spark: Any, scenarios: list[Scenario], raw: Path, policy: RecommendPolicy | None = None
) -> dict[str, list[dict[str, Any]]]:
    """:func:`recommendation_rows` of several scenarios in one computation, by broker: each run
    on the engine into ``raw`` (its run_id its name), the recommendations over the days they
    cover, as of the last. A computation costs seconds of Spark planning whatever its rows, so
    scenarios of one day and policy, each on a broker of its own, are cheaper computed
    together; each broker must have rows, and no row another broker's."""
    with compiled(spark):
        rows = _recommendation_rows(spark, scenarios, raw, policy)
    brokers = [scenario.broker.name for scenario in scenarios]
    assert {row["broker"] for row in rows} == set(brokers), "each scenario's rows apart"
    return {broker: [row for row in rows if row["broker"] == broker] for broker in brokers}


def _recommendation_rows(
    spark: Any, scenarios: list[Scenario], raw: Path, policy: RecommendPolicy | None
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from jobs.recommend import load_policy
    from jobs.transforms.blocking import blocking_episodes
    from jobs.transforms.daily import link_starvation_daily, queue_flow_daily
    from jobs.transforms.episodes import (
        link_starvation_episodes,
        queue_flow_episodes,
        run_bounds,
    )
    from jobs.transforms.recommend import threshold_recommendations

    assert len({s.name for s in scenarios}) == len(scenarios), "two scenarios, one run_id"
    assert len({s.broker.name for s in scenarios}) == len(scenarios), "two scenarios, one broker"
    spans = []
    for scenario in scenarios:
        with ParquetSink(raw, scenario.name) as sink:
            result = run_scenario(scenario, [sink], run_id=scenario.name)
        spans += [_day(result.start_us), _day(result.end_us)]
    first_day, last_day = min(spans), max(spans)
    events = (
        spark.read.parquet(str(raw))
        .withColumn("date", F.to_date("date"))
        .withColumn("source_file", F.input_file_name())
        .cache()
    )
    bounds = run_bounds(events).cache()
    queue_episodes = queue_flow_episodes(events, bounds).cache()
    starvations = link_starvation_episodes(events, bounds)
    table = threshold_recommendations(
        events,
        queue_episodes,
        queue_flow_daily(events, queue_episodes, bounds, first_day, last_day),
        starvations,
        link_starvation_daily(events, starvations, bounds, first_day, last_day),
        policy or load_policy(),
        last_day,
        blocking_episodes(events, bounds),
    )
    assert [(f.name, f.dataType) for f in table.schema.fields] == [
        (f.name, f.dataType) for f in THRESHOLD_RECOMMENDATIONS.to_spark().fields
    ]
    rows = [row.asDict() for row in table.collect()]
    events.unpersist()
    return rows


def with_first_artemis_address(scenario: Scenario, **settings: Any) -> Scenario:
    """``scenario`` with its first Artemis address's settings changed (``max_size_bytes``,
    ``max_size_bytes_reject_threshold``, ...), the others as they are."""
    assert scenario.artemis is not None
    first, *others = scenario.artemis.addresses
    addresses = [first.model_copy(update=settings), *others]
    return scenario.model_copy(
        update={"artemis": scenario.artemis.model_copy(update={"addresses": addresses})}
    )

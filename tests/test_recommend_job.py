"""The recommend job on real Delta tables: rows for each day, idempotent reruns, maintenance."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pytest

from jobs.config import PipelineConf
from jobs.delta_io import replace_where
from jobs.maintenance import run_maintenance
from jobs.recommend import load_policy, recommendations_path, run_recommend
from schemas.tables import (
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from tests.test_recommend import DAY, LONG, Log, _rows

pytestmark = pytest.mark.spark


def write_warehouse(spark: Any, conf: PipelineConf) -> None:
    """Bronze, silver and gold tables of one hand-built day (DAY) in the conf's warehouse."""
    log = Log()
    log.queue("orders", 500, 400, [(100, LONG, 550), (400, LONG, 560)])
    log.queue("payments", 960, 860, [(100, LONG, 1000)])
    log.consumer("indexer", credit=20, deliveries=1000, starved_s=30.0, starvations=6)
    day = f"DATE '{DAY.isoformat()}'"
    for schema, rows, column in (
        (BRONZE_BROKER_EVENTS, log.events, "date"),
        (QUEUE_FLOW_EPISODES, log.episodes, "start_date"),
        (QUEUE_FLOW_DAILY, log.daily, "date"),
        (LINK_STARVATION_EPISODES, log.starvations, "start_date"),
        (LINK_STARVATION_DAILY, log.link_daily, "date"),
    ):
        replace_where(spark, conf, schema, _rows(spark, schema, rows), f"{column} = {day}")


@pytest.fixture
def warehouse(spark: Any, pipeline_conf: Callable[..., Any]) -> PipelineConf:
    _, conf = pipeline_conf()
    write_warehouse(spark, conf)
    return conf


def test_rerun_replaces_the_days_and_changes_nothing(spark: Any, warehouse: PipelineConf) -> None:
    following = date(2026, 3, 4)
    first = run_recommend(spark, warehouse, DAY, following, load_policy())
    table = spark.read.format("delta").load(recommendations_path(warehouse))
    before = sorted(map(tuple, table.collect()))
    # Two queues, the consumer link, and the queue the consumer reads ("work"), for each day: the
    # day after still sees DAY's evidence in its 7-day window.
    assert first["rows"] == 8
    assert first["verdicts"] == {"at_risk_of_overflow": 2, "keep": 2, "raise": 4}
    again = run_recommend(spark, warehouse, DAY, following, load_policy())
    assert again["rows"] == 8
    assert sorted(map(tuple, table.collect())) == before

    # Maintenance of every table is the DAG's last task; two tables are enough to test it here.
    maintained = {"queue_flow_daily", "threshold_recommendations"}
    report = run_maintenance(spark, warehouse, DAY, following, tables=maintained)
    assert set(report) == maintained
    assert sorted(map(tuple, table.collect())) == before

"""The recommend job on real Delta tables: rows for each day, idempotent reruns, maintenance."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from delta.tables import DeltaTable

from flowctl.render import recommendations_line
from jobs.config import PipelineConf
from jobs.delta_io import replace_where, rows_frame
from jobs.maintenance import run_maintenance
from jobs.recommend import load_policy, recommendations_path, run_recommend
from schemas.tables import (
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from tests.test_recommend import DAY, LONG, Log

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
        replace_where(spark, conf, schema, rows_frame(spark, schema, rows), f"{column} = {day}")


@pytest.fixture
def warehouse(spark: Any, pipeline_conf: Callable[..., Any]) -> PipelineConf:
    _, conf = pipeline_conf()
    write_warehouse(spark, conf)
    return conf


def test_rerun_replaces_the_days_and_changes_nothing(spark: Any, warehouse: PipelineConf) -> None:
    following = date(2026, 3, 4)

    def table_rows() -> list[tuple[Any, ...]]:
        # Loaded anew each time: a DataFrame keeps the Delta snapshot it was loaded at, so reusing
        # one would not see what a rerun wrote (a doubled table would still compare equal).
        table = spark.read.format("delta").load(recommendations_path(warehouse))
        return sorted(map(tuple, table.collect()))

    first = run_recommend(spark, warehouse, DAY, following, load_policy())
    before = table_rows()
    # Two queues, the consumer link, and the queue the consumer reads ("work"), for each day: the
    # day after still sees DAY's evidence in its 7-day window. Qpid's bound is 50 + 15 = 65
    # messages past the stop threshold, 78 with the 20 % margin (seed 001), so below max_count
    # 1000 a stop threshold up to 922 is safe: "orders" (stop 500) may be raised, "payments"
    # (stop 960, 40 past it seen) is at risk. "indexer" delivered 1,000 messages in 100 s with
    # credit 20 and starved 30 s: it needs more credit (raise). "work" has no thresholds: keep.
    verdicts = {
        "orders": "raise",
        "payments": "at_risk_of_overflow",
        "indexer": "raise",
        "work": "keep",
    }
    assert len(before) == first["rows"] == 8
    # What the console says: every day's set, then the last day's (the dashboard's).
    assert (first["days"], first["latest"], first["latest_rows"]) == (2, following, 4)
    assert first["verdicts"] == {"at_risk_of_overflow": 2, "keep": 2, "raise": 4}
    assert first["latest_verdicts"] == {"at_risk_of_overflow": 1, "keep": 1, "raise": 2}
    assert recommendations_line(first) == (
        "threshold_recommendations: 8 rows, a set for each of 2 days (at risk of overflow 2, "
        "keep 2, raise 4); as of 2026-03-04 (the dashboard's): 4 (at risk of overflow 1, "
        "keep 1, raise 2)"
    )
    table = spark.read.format("delta").load(recommendations_path(warehouse))
    assert {
        (row.date, row.entity): row.verdict
        for row in table.select("date", "entity", "verdict").collect()
    } == {(day, entity): v for day in (DAY, following) for entity, v in verdicts.items()}

    again = run_recommend(spark, warehouse, DAY, following, load_policy())
    assert again["rows"] == 8
    assert table_rows() == before

    # Maintenance of every table is the DAG's last task; two tables are enough to test it here.
    maintained = {"queue_flow_daily", "threshold_recommendations"}
    report = run_maintenance(spark, warehouse, DAY, following, tables=maintained)
    assert set(report) == maintained
    assert table_rows() == before
    # Delta ignores VACUUM's own RETAIN: the retention is the table's property.
    detail = DeltaTable.forPath(spark, recommendations_path(warehouse)).detail().first()
    assert detail.properties["delta.deletedFileRetentionDuration"] == "interval 168 hours"


def test_an_alarm_set_before_the_window_is_read_with_it(spark: Any) -> None:
    """A queue's intake leaves out the time an alarm held its publishers: an alarm set before
    the window and lasting into it is read (a night read only those set in its window, and its
    x-max-length came out half a range run's for the same day: a review); one that ended
    before, and a connection's episode before the window, are not."""
    from datetime import date, datetime

    from jobs.recommend import blocking_in_window

    utc = datetime.fromisoformat
    episodes = spark.createDataFrame(
        [
            ("alarm", date(2026, 3, 2), utc("2026-03-02T23:59:59+00:00"), None, "open"),
            ("alarm", date(2026, 3, 2), utc("2026-03-02T23:00:00+00:00"),
             utc("2026-03-03T00:00:03+00:00"), "into"),
            ("alarm", date(2026, 3, 2), utc("2026-03-02T10:00:00+00:00"),
             utc("2026-03-02T11:00:00+00:00"), "ended"),
            ("connection", date(2026, 3, 2), utc("2026-03-02T23:00:00+00:00"),
             utc("2026-03-03T00:00:03+00:00"), "earlier connection"),
            ("connection", date(2026, 3, 3), utc("2026-03-03T01:00:00+00:00"),
             utc("2026-03-03T01:00:01+00:00"), "connection"),
            ("alarm", date(2026, 3, 6), utc("2026-03-06T01:00:00+00:00"), None, "after"),
        ],
        "kind string, start_date date, start_ts timestamp, end_ts timestamp, name string",
    )  # fmt: skip
    read = episodes.where(blocking_in_window(date(2026, 3, 3), date(2026, 3, 5)))
    assert sorted(r.name for r in read.collect()) == ["connection", "into", "open"]

"""Recommend's day rollup kept day by day (jobs/recommend_day_rollup.py): computed for the days
not kept or whose bronze files changed, read back for the others, and the recommendations the
same as from the window's bronze."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import pytest

from jobs.config import PipelineConf
from jobs.delta_io import latest_commit, read_table, replace_where, rows_frame, table_path
from jobs.recommend import load_policy, recommendations_for_days
from jobs.recommend_day_rollup import bronze_file_digests, days_to_compute, window_rollup
from jobs.transforms.recommend import threshold_recommendations
from jobs.transforms.recommend_rollup import day_rollup
from schemas.tables import (
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
    RECOMMEND_DAY_ROLLUP,
)
from tests.test_recommend import DAY, Log
from tests.test_recommend_job import write_warehouse

DAY_FOLDER = "file:/w/bronze/broker_events/date="


def test_a_days_digest_is_of_its_file_names_in_any_order() -> None:
    one = bronze_file_digests([f"{DAY_FOLDER}2026-03-03/a.parquet", f"{DAY_FOLDER}2026-03-03/b"])
    same = bronze_file_digests([f"{DAY_FOLDER}2026-03-03/b", f"{DAY_FOLDER}2026-03-03/a.parquet"])
    added = bronze_file_digests(
        [f"{DAY_FOLDER}2026-03-03/{name}" for name in ("a.parquet", "b", "c.parquet")]
    )
    assert one == same
    assert set(one) == {date(2026, 3, 3)}
    assert added[date(2026, 3, 3)] != one[date(2026, 3, 3)]
    two_days = bronze_file_digests([f"{DAY_FOLDER}2026-03-03/a", f"{DAY_FOLDER}2026-03-04/a"])
    assert set(two_days) == {date(2026, 3, 3), date(2026, 3, 4)}
    # Files that do not tell their day (random prefixes): nothing is digested.
    assert bronze_file_digests([f"{DAY_FOLDER}2026-03-03/a", "file:/w/bronze/x/ab/part-0"]) is None
    # Other rules, the same files: another digest (rows kept by other rules are not read).
    other_rules = bronze_file_digests(
        [f"{DAY_FOLDER}2026-03-03/a.parquet", f"{DAY_FOLDER}2026-03-03/b"], "v0: date"
    )
    assert other_rules[date(2026, 3, 3)] != one[date(2026, 3, 3)]


def test_the_days_to_compute_are_the_missing_the_changed_and_the_gone() -> None:
    first, second, third = (date(2026, 3, day) for day in (3, 4, 5))
    kept = {first: "x", second: "y", third: "z"}
    assert days_to_compute(kept, {first: "x", second: "y", third: "z"}) == []
    # The second day's files changed, the third is no longer in bronze, a fourth is new.
    fourth = date(2026, 3, 6)
    assert days_to_compute(kept, {first: "x", second: "y2", fourth: "w"}) == [
        second,
        third,
        fourth,
    ]


@pytest.mark.spark
def test_the_kept_table_has_the_rollups_columns(spark: Any) -> None:
    rollup = day_rollup(rows_frame(spark, BRONZE_BROKER_EVENTS, []))
    kept = RECOMMEND_DAY_ROLLUP.to_spark()
    assert [(f.name, f.dataType) for f in rollup.schema.fields] == [
        (f.name, f.dataType) for f in kept.fields if f.name != "bronze_files"
    ]


def _rows(frame: Any, drop: tuple[str, ...] = ()) -> list[str]:
    """The frame's rows, as text in order (nulls do not sort with values)."""
    return sorted(repr(tuple(row)) for row in frame.drop(*drop).collect())


@pytest.fixture
def warehouse(spark: Any, pipeline_conf: Callable[..., Any]) -> PipelineConf:
    _, conf = pipeline_conf()
    write_warehouse(spark, conf)
    return conf


@pytest.mark.spark
def test_kept_days_are_read_back_and_changed_days_computed_again(
    spark: Any, warehouse: PipelineConf
) -> None:
    following = DAY + timedelta(days=1)
    path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)

    def bronze() -> Any:
        return read_table(spark, warehouse, BRONZE_BROKER_EVENTS)

    kept = window_rollup(spark, warehouse, DAY - timedelta(days=6), following)
    assert _rows(kept, ("bronze_files",)) == _rows(day_rollup(bronze()))
    written, _ = latest_commit(spark, path)

    # Nothing changed in bronze: the kept rows are read, nothing is written.
    again = window_rollup(spark, warehouse, DAY - timedelta(days=6), following)
    assert latest_commit(spark, path)[0] == written
    assert _rows(again) == _rows(kept)

    # DAY ingested again without the queue "payments", and a day after it added: both days are
    # computed again, in one commit, and the rows are bronze's now.
    log = Log()
    log.queue("orders", 500, 400, [(100, 10.0, 550)])
    replace_where(
        spark,
        warehouse,
        BRONZE_BROKER_EVENTS,
        rows_frame(spark, BRONZE_BROKER_EVENTS, log.events),
        f"date = DATE '{DAY.isoformat()}'",
    )
    _write_next_day(spark, warehouse, log.events)
    changed = window_rollup(spark, warehouse, DAY - timedelta(days=6), following)
    assert latest_commit(spark, path)[0] == written + 1
    assert {row.queue for row in changed.where("date = DATE '2026-03-03'").collect()} >= {"orders"}
    assert "payments" not in {row.queue for row in changed.collect()}
    assert _rows(changed, ("bronze_files",)) == _rows(day_rollup(bronze()))
    assert {row.date for row in changed.select("date").distinct().collect()} == {DAY, following}


@pytest.mark.spark
def test_recommendations_from_the_kept_rollup_are_those_from_bronze(
    spark: Any, warehouse: PipelineConf
) -> None:
    """The day after DAY, its look-back holding DAY: the rollup kept first, then read back by
    the job's path, gives the rows computed from the window's bronze alone."""
    policy = load_policy()
    following = DAY + timedelta(days=1)
    window_rollup(spark, warehouse, policy.window_from(following), following)
    rows, per_day = recommendations_for_days(spark, warehouse, policy, following, following)
    try:
        kept = _rows(rows)
    finally:
        for frame in per_day:
            frame.unpersist()
    from_bronze = threshold_recommendations(
        events=read_table(spark, warehouse, BRONZE_BROKER_EVENTS),
        queue_episodes=read_table(spark, warehouse, QUEUE_FLOW_EPISODES),
        queue_daily=read_table(spark, warehouse, QUEUE_FLOW_DAILY),
        link_starvations=read_table(spark, warehouse, LINK_STARVATION_EPISODES),
        link_daily=read_table(spark, warehouse, LINK_STARVATION_DAILY),
        policy=policy,
        as_of=following,
    )
    assert kept == _rows(from_bronze)
    assert len(kept) == 4


@pytest.mark.spark
def test_a_kept_day_bronze_no_longer_holds_is_dropped_and_so_are_days_out_of_the_window(
    spark: Any, warehouse: PipelineConf
) -> None:
    """A day re-ingested with every row quarantined leaves bronze; its kept rows go, alone in a
    run (no day to compute: the review's empty map), and a later window drops the days before
    it."""
    following = DAY + timedelta(days=1)
    path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)
    _write_next_day(spark, warehouse, _one_queue_events())
    assert _days(window_rollup(spark, warehouse, DAY, following)) == {DAY, following}
    replace_where(
        spark,
        warehouse,
        BRONZE_BROKER_EVENTS,
        rows_frame(spark, BRONZE_BROKER_EVENTS, []),
        f"date = DATE '{following.isoformat()}'",
    )
    assert _days(window_rollup(spark, warehouse, DAY, following)) == {DAY}
    # The next window starts after DAY: DAY's rows leave the table.
    assert _days(window_rollup(spark, warehouse, following, following)) == set()
    assert _days(spark.read.format("delta").load(path)) == set()


@pytest.mark.spark
def test_a_table_kept_with_other_columns_is_emptied_and_computed_again(
    spark: Any, warehouse: PipelineConf
) -> None:
    path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)
    spark.createDataFrame([(DAY, "b", 5)], "date date, broker string, rejected long").write.format(
        "delta"
    ).partitionBy("date").save(path)
    kept = window_rollup(spark, warehouse, DAY, DAY)
    assert spark.read.format("delta").load(path).columns == list(RECOMMEND_DAY_ROLLUP.names)
    bronze = read_table(spark, warehouse, BRONZE_BROKER_EVENTS)
    assert _rows(kept, ("bronze_files",)) == _rows(day_rollup(bronze))


def _days(frame: Any) -> set[date]:
    return {row.date for row in frame.select("date").distinct().collect()}


def _one_queue_events() -> list[dict[str, Any]]:
    log = Log()
    log.queue("orders", 500, 400, [(100, 10.0, 550)])
    return log.events


@pytest.mark.spark
def test_bronzes_compaction_carries_the_kept_days_over(spark: Any, warehouse: PipelineConf) -> None:
    """The nightly maintenance OPTIMIZEs the day just ingested, after recommend kept it: new file
    names, the same rows. The kept day takes the new files' digest, and is not computed again."""
    from jobs.maintenance import run_maintenance

    path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)
    more = [{**event, "run_id": "r-more"} for event in _one_queue_events()]
    bronze_frame = rows_frame(spark, BRONZE_BROKER_EVENTS, more)
    bronze_frame.write.format("delta").mode("append").save(
        table_path(warehouse, BRONZE_BROKER_EVENTS)
    )
    kept = _rows(window_rollup(spark, warehouse, DAY, DAY))
    report = run_maintenance(spark, warehouse, DAY, DAY, tables={BRONZE_BROKER_EVENTS.name})
    assert report[BRONZE_BROKER_EVENTS.name]["files_removed"] >= 2
    carried, _ = latest_commit(spark, path)
    again = window_rollup(spark, warehouse, DAY, DAY)
    assert latest_commit(spark, path)[0] == carried  # read back, not computed again
    assert _rows(again, ("bronze_files",)) == _rows(
        day_rollup(read_table(spark, warehouse, BRONZE_BROKER_EVENTS))
    )
    assert _rows(again) != kept  # the digest moved with the files


def _write_next_day(spark: Any, conf: PipelineConf, events: list[dict[str, Any]]) -> None:
    """``events`` a day later, in run r-next, as bronze's day after DAY."""
    following = DAY + timedelta(days=1)
    later = [
        {**event, "run_id": "r-next", "ts": event["ts"] + timedelta(days=1), "date": following}
        for event in events
    ]
    replace_where(
        spark,
        conf,
        BRONZE_BROKER_EVENTS,
        rows_frame(spark, BRONZE_BROKER_EVENTS, later),
        f"date = DATE '{following.isoformat()}'",
    )


@pytest.mark.spark
def test_another_writers_commit_is_not_taken_for_a_compaction(
    spark: Any, warehouse: PipelineConf
) -> None:
    """Bronze's one commit since the digest was taken is an append, not an OPTIMIZE: its rows are
    new, so nothing is carried over and the day is computed again."""
    from jobs.recommend_day_rollup import bronze_digests_now, carry_through_compaction

    window_rollup(spark, warehouse, DAY, DAY)
    before = bronze_digests_now(spark, warehouse, DAY, DAY)
    more = [{**event, "run_id": "r-more"} for event in _one_queue_events()]
    rows_frame(spark, BRONZE_BROKER_EVENTS, more).write.format("delta").mode("append").save(
        table_path(warehouse, BRONZE_BROKER_EVENTS)
    )
    assert carry_through_compaction(spark, warehouse, DAY, DAY, before) == 0
    path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)
    version, _ = latest_commit(spark, path)
    again = window_rollup(spark, warehouse, DAY, DAY)
    assert latest_commit(spark, path)[0] == version + 1
    assert "r-more" in {row.run_id for row in again.collect()}


@pytest.mark.spark
def test_bronze_with_deletion_vectors_is_not_digested(spark: Any, warehouse: PipelineConf) -> None:
    """A deletion vector deletes rows without writing a file, so bronze's file names no longer
    tell its rows: the rollup is computed from bronze, nothing is kept. The feature stays once
    a table enabled it, so turning the property off again changes nothing."""
    from jobs.delta_io import local_table_missing

    bronze = table_path(warehouse, BRONZE_BROKER_EVENTS)
    kept_path = table_path(warehouse, RECOMMEND_DAY_ROLLUP)
    first, last = DAY - timedelta(days=6), DAY + timedelta(days=1)

    def rows_of_bronze() -> list[tuple[Any, ...]]:
        return _rows(day_rollup(read_table(spark, warehouse, BRONZE_BROKER_EVENTS)))

    for enabled in ("true", "false"):
        spark.sql(
            f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES "
            f"('delta.enableDeletionVectors' = '{enabled}')"
        )
        assert _rows(window_rollup(spark, warehouse, first, last)) == rows_of_bronze()
        assert local_table_missing(kept_path)

"""jobs/delta_io.py on real Delta tables: the latest commit read from a local table's log equals
what Delta's own history says, after every kind of write the jobs make; a table an earlier
version created takes the schema's relaxed NOT NULLs; a few rows become a frame of a table's
schema without Python workers."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from jobs.delta_io import (
    ensure_table,
    latest_commit,
    latest_local_commit,
    replace_where_at,
    rows_frame,
)
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import PIPELINE_STATE, QUEUE_FLOW_EPISODES

pytestmark = pytest.mark.spark


def _history_commit(spark: Any, path: str) -> tuple[int, int]:
    """What Delta's history says of the latest commit (the URI form takes that path)."""
    return latest_commit(spark, Path(path).as_uri())


def test_the_latest_commit_read_from_the_log_equals_deltas_history(spark, tmp_path):
    path = str(tmp_path / "state")
    ensure_table(spark, path, PIPELINE_STATE)
    seen = [latest_local_commit(Path(path, "_delta_log"))]
    assert seen[0] == _history_commit(spark, path) == (0, 0)  # the creation writes no row
    now = datetime.now(UTC).replace(tzinfo=None)

    def write(rows: list[tuple[str, date]], predicate: str) -> int:
        frame = rows_frame(spark, PIPELINE_STATE, [(job, day, 7, now, None) for job, day in rows])
        written = replace_where_at(spark, path, PIPELINE_STATE, frame, predicate)
        seen.append(latest_commit(spark, path))
        assert seen[-1] == _history_commit(spark, path)
        return written

    days = [date(2024, 1, d) for d in (1, 2, 3)]
    assert write([("ingest", d) for d in days], "true") == 3
    assert write([("episodes", days[0])], "job = 'episodes'") == 1
    # Nothing to write and nothing to replace: no commit, so 0 rows and the same version.
    assert write([], "job = 'daily_metrics'") == 0
    assert [version for version, _ in seen] == [0, 1, 2, 2]
    assert [rows for _, rows in seen] == [0, 3, 1, 1]


def test_a_table_an_earlier_version_created_takes_the_nulls_the_schema_now_allows(spark, tmp_path):
    """queue_flow_episodes' run_watermark_ts was NOT NULL; a closed episode's is null now. The
    first ensure_table of a job relaxes the existing table, keeping its rows, so the nights that
    follow can write closed episodes into it."""
    path = str(tmp_path / "episodes")
    earlier = dataclasses.replace(
        QUEUE_FLOW_EPISODES,
        columns=tuple(
            dataclasses.replace(c, nullable=False) if c.name == "run_watermark_ts" else c
            for c in QUEUE_FLOW_EPISODES.columns
        ),
    )
    (
        DeltaTable.create(spark)
        .location(path)
        .addColumns(earlier.to_spark())
        .partitionedBy(*earlier.partition_by)
        .execute()
    )
    start = datetime(2024, 1, 1, 10)
    kept = {"run_id": "r0", "broker": "b", "queue": "q", "start_seq": 1, "start_ts": start,
            "start_date": date(2024, 1, 1), "is_open": True, "run_watermark_ts": start,
            "producers": 1}  # fmt: skip
    frame = spark.createDataFrame([kept], earlier.to_spark())
    frame.write.format("delta").mode("append").save(path)

    def watermark_nullable() -> bool:
        return bool(spark.read.format("delta").load(path).schema["run_watermark_ts"].nullable)

    assert not watermark_nullable()
    ensure_table(spark, path, QUEUE_FLOW_EPISODES)
    assert watermark_nullable()
    closed = kept | {"start_seq": 5, "end_seq": 6, "end_ts": start, "is_open": False}
    closed["run_watermark_ts"] = None
    new_rows = spark.createDataFrame([closed], QUEUE_FLOW_EPISODES.to_spark())
    assert replace_where_at(spark, path, QUEUE_FLOW_EPISODES, new_rows, "start_seq = 5") == 1
    rows = spark.read.format("delta").load(path).orderBy("start_seq").collect()
    assert [(r.start_seq, r.run_watermark_ts) for r in rows] == [(1, start), (5, None)]


def _lineage(frame: Any) -> str:
    """The RDDs an action on ``frame`` runs, as Spark describes them."""
    return str(frame._jdf.queryExecution().toRdd().toDebugString())


def test_a_few_rows_become_a_frame_of_the_tables_schema_without_python_workers(spark):
    """The pipeline state's rows, written by every job call: built through Arrow, the frame has
    the schema's types, nullability and docs, its rows read back as given (a timestamp as naive
    UTC), and no Python RDD runs them (``createDataFrame`` on Python rows does: ~0.3 s a write)."""
    at = datetime(2024, 1, 2, 3, 4, 5, 6)
    window_from = date(2023, 12, 27)
    rows = [
        ("ingest", date(2024, 1, 1), 3, at, None),
        ("recommend", date(2024, 1, 2), 3, at, window_from),
    ]
    frame = rows_frame(spark, PIPELINE_STATE, rows)
    assert frame.schema == PIPELINE_STATE.to_spark()
    assert [tuple(r) for r in frame.collect()] == rows
    assert "PythonRDD" not in _lineage(frame)
    assert "PythonRDD" in _lineage(spark.createDataFrame(rows, PIPELINE_STATE.to_spark()))
    empty = rows_frame(spark, BROKER_EVENTS)
    assert (empty.schema, empty.count()) == (BROKER_EVENTS.to_spark(), 0)
    with pytest.raises(ValueError):  # a row one column short
        rows_frame(spark, PIPELINE_STATE, [("ingest", date(2024, 1, 1), 3, at)])
    with pytest.raises(ValueError, match="pipeline_state: bronze_version is NOT NULL"):
        rows_frame(spark, PIPELINE_STATE, [{"job": "ingest", "date": date(2024, 1, 1)}])
    with pytest.raises(ValueError, match=r"bronze_version takes whole numbers, not 3\.5"):
        rows_frame(spark, PIPELINE_STATE, [("ingest", date(2024, 1, 1), 3.5, at, None)])
    with pytest.raises(ValueError, match="pipeline_state has no column 'jbo'"):
        rows_frame(spark, PIPELINE_STATE, [{"jbo": "ingest"}], as_parquet_read=True)
    relaxed = rows_frame(spark, PIPELINE_STATE, [{"job": "ingest"}], as_parquet_read=True)
    assert [tuple(r) for r in relaxed.collect()] == [("ingest", None, None, None, None)]
    assert all(f.nullable and not f.metadata for f in relaxed.schema.fields)

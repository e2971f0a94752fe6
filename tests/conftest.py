"""Shared fixtures: ONE local SparkSession with Delta for the whole run, and tiny-data helpers.

Spark tests are marked ``@pytest.mark.spark``. The session is built by the same factory as the jobs
(jobs/spark_session.py), with settings that suit tiny data (``TEST_SPARK_SETTINGS``: one shuffle
partition, interpreted expressions, no broadcast the code does not ask for, no UI).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from jobs.jvm_class_archive import sharing_option
from schemas.broker_events import BROKER_EVENTS
from tests.file_order import (  # noqa: F401  (hooks: pytest finds them by name here)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_sessionfinish,
)


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that uses the Spark session (the ``spark`` fixture, directly or through another
    fixture) is a Spark test, marked or not. A test that starts a JVM of its own in a subprocess
    carries its mark by hand."""
    if "spark" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.spark)


# PySpark returns timestamps as naive datetimes in the process's local time zone: make that UTC.
os.environ["TZ"] = "UTC"
time.tzset()
# pytest-xdist's workers set COLUMNS=80, and the command line's tables take that width
# (flowctl/render.py): the tests read them as a pipe gets them, whether run in workers or not.
# Here, before any test module imports flowctl.render.
os.environ.pop("COLUMNS", None)
TEST_SPARK_SETTINGS = {
    "spark.sql.shuffle.partitions": "1",
    # Tiny data: compiling whole-stage code and re-planning adaptively cost more than they save.
    "spark.sql.codegen.wholeStage": "false",
    # ... and so does compiling each expression (Janino): interpreted, a warm pipeline job of the
    # tests' size took about a sixth less time (tests/test_processing_order.py's days).
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    # Inferring filters from every operator's constraints costs planning time on the jobs' wide
    # plans, and on rows this few there is nothing to prune: 27 warm job calls of
    # tests/test_processing_order.py's days took 264 -> 219 s without it (the results are the same:
    # the inferred filters are implied by the plan).
    "spark.sql.constraintPropagation.enabled": "false",
    # No join broadcast unless the code asks for it (F.broadcast, as in production): every other
    # join of rows this few planned as a broadcast ran a Spark job of its own to collect its
    # small side (a recommendations day ran ~50 jobs, most of them broadcasts); sort-merge joins
    # on one shuffle partition run within the query's job. Alternated runs alone, CPU of the
    # whole machine: the redo-recommendations test of tests/test_pipeline_state.py 179 and 175
    # -> 167 and 162 CPU-s; test_carried_state, test_recommend_job and test_jobs_episodes
    # together 253 and 249 -> 237 and 232 (bench/job_call_cost.py --setting measures such).
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.default.parallelism": "2",
    # Each test worker's JVM lives the whole suite on a machine the suite keeps busy, its heap
    # small: the serial collector costs the least CPU. 5 warm rounds of
    # tests/test_processing_order.py's days (9 job calls a round): G1 217 and 224 s wall, 260 and
    # 271 CPU-s; parallel 204 s, 233 CPU-s. bench/job_call_cost.py's six warm calls, alternated:
    # parallel 82.0 and 81.4 CPU-s, serial 74.5 and 70.5 (no concurrent marking, no GC threads
    # competing with the other worker for the two cores).
    # Its JIT compiles as much as it runs (jstat in a suite run: ~500 s of compile time in a
    # worker's first 850 s, ~60,000 methods): each test file meets new planner paths. C2 inlining
    # as shallow as before JDK 14 and shallower (Scala's deep call chains made each compile
    # large) cuts that work more than it slows the code: tests/test_recommend_brokers.py,
    # test_jobs_daily.py, test_jobs_episodes.py and test_recommend_job.py in one fresh JVM,
    # alternated, 606 / 579 CPU-s (398 / 376 s) with the defaults, 533 / 501 with MaxInlineLevel
    # 6, FreqInlineSize 100, InlineSmallCode 1000, and 494 / 458 CPU-s (369 / 347 s) with these.
    # And the classes come parsed and verified from the suite's class-data-sharing archive when
    # scripts/test.sh wrote it (jobs/jvm_class_archive.py; nothing when it did not).
    "spark.driver.extraJavaOptions": " ".join(
        [
            "-XX:+UseSerialGC -XX:MaxInlineLevel=3 -XX:MaxInlineSize=20",
            "-XX:FreqInlineSize=50 -XX:InlineSmallCode=500",
            *filter(None, [sharing_option()]),
        ]
    ),
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    # Delta's log store for local paths in its own tests: commits written under a JVM lock and
    # renamed with java.io, where the default (HDFSLogStore, through Hadoop's FileContext) forks
    # a `readlink` twice per commit file without Hadoop's native library (1,344 processes in 36
    # job calls of tests/test_processing_order.py's days). Nine warm calls of those days, two
    # rounds each way alternated: 76.2 and 74.1 s -> 69.3 and 68.1 s. Each test process is the one
    # writer of its tables; the jobs' own conf keeps Delta's default.
    "spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStore",
    "spark.sql.session.timeZone": "UTC",
}


def at(day: int, hh: int = 0, mm: int = 0, ss: int = 0, us: int = 0) -> datetime:
    """A UTC instant in January 2024: ``at(1, 23, 59)`` is 2024-01-01 23:59:00Z."""
    return datetime(2024, 1, day, hh, mm, ss, us, tzinfo=UTC)


def naive(ts: datetime) -> datetime:
    """What Spark's collect() returns for ``ts`` (naive, UTC)."""
    return ts.astimezone(UTC).replace(tzinfo=None)


def event(seq: int, ts: datetime, event_type: str, **fields: Any) -> dict[str, Any]:
    """One broker_events row; run r1 on broker b1 unless told otherwise."""
    return {
        "run_id": "r1",
        "broker": "b1",
        "seq": seq,
        "ts": ts,
        "event_type": event_type,
        **fields,
    }


@pytest.fixture(autouse=True, scope="session")
def failure_traces_in_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The traces of the failures tests provoke go to a scratch folder, not the checkout's
    var/log (jobs/failures.py; a test that checks them sets its own folder)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLOWCTL_LOG_DIR", str(tmp_path_factory.mktemp("log")))
        yield


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from jobs.config import load_conf
    from jobs.spark_session import build_spark_session

    scratch = tmp_path_factory.mktemp("spark")
    conf = dataclasses.replace(load_conf(), warehouse_dir=str(scratch / "warehouse"))
    session = build_spark_session(
        conf,
        app_name="flowctl-tests",
        extra_settings={**TEST_SPARK_SETTINGS, "spark.sql.warehouse.dir": str(scratch / "sql")},
    )
    yield session
    session.stop()


@pytest.fixture
def make_events(spark: Any) -> Callable[[list[dict[str, Any]]], Any]:
    """Rows (dicts) -> a DataFrame with the broker_events columns plus ``date`` (UTC day of ts),
    every column nullable, as a Parquet read is: rows that break the contract are representable.
    Built through Arrow (jobs/delta_io.py ``rows_frame``): no action on it runs Python workers."""
    from pyspark.sql import functions as F

    from jobs.delta_io import rows_frame

    def build(rows: list[dict[str, Any]]) -> Any:
        frame = rows_frame(spark, BROKER_EVENTS, rows, as_parquet_read=True)
        return frame.withColumn("date", F.to_date("ts"))

    return build


@pytest.fixture
def pipeline_conf(tmp_path: Path) -> Callable[..., Any]:
    """Write a pipeline YAML whose paths are under tmp_path; returns (conf path, PipelineConf)."""
    from jobs.config import load_conf

    def write(validate: bool = False) -> tuple[str, Any]:
        document = {
            "spark": {"master": "local[2]", "conf": TEST_SPARK_SETTINGS},
            "paths": {
                "raw": str(tmp_path / "raw"),
                "warehouse": str(tmp_path / "warehouse"),
                "quality": str(tmp_path / "quality"),
            },
            "ingest": {"validate_with_great_expectations": validate},
        }
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return str(path), load_conf(path)

    return write


def scratch_conf(root: Path, name: str = "") -> Any:
    """conf/pipeline.yaml's conf with the raw events under ``root`` and the warehouse and quality
    results under ``root / name`` (one per processing order compared), Great Expectations off."""
    from jobs.config import load_conf

    return dataclasses.replace(
        load_conf(),
        raw_dir=str(root / "raw"),
        warehouse_dir=str(root / name / "warehouse"),
        quality_dir=str(root / name / "quality"),
        validate_with_great_expectations=False,
    )


def write_raw_runs(raw_dir: Path, rows: list[dict[str, Any]]) -> None:
    """:func:`write_raw` of each run of ``rows`` apart (a file names one run), copies of the
    rows (write_raw takes their ``_date`` keys)."""
    for run in sorted({r["run_id"] for r in rows}):
        write_raw(raw_dir, [dict(r) for r in rows if r["run_id"] == run])


def write_raw(raw_dir: Path, rows: list[dict[str, Any]], part: str = "00000") -> list[Path]:
    """Write rows as the engine's sink does: a file per UTC day, <raw>/date=D/part-<run>-N.parquet.

    ``rows`` may hold anything pyarrow accepts for the column types (broken rows included); a row's
    ``_date`` key, if present, overrides the day directory it is filed under.
    """
    by_day: dict[date, list[dict[str, Any]]] = {}
    for row in rows:
        day = row.pop("_date", None) or row["ts"].astimezone(UTC).date()
        by_day.setdefault(day, []).append(row)
    written = []
    for day, day_rows in sorted(by_day.items()):
        folder = raw_dir / f"date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        run_id = day_rows[0].get("run_id") or "unknown"
        path = folder / f"part-{run_id}-{part}.parquet"
        pq.write_table(pa.Table.from_pylist(day_rows, schema=_lenient_schema()), path)
        written.append(path)
    return written


def _lenient_schema() -> pa.Schema:
    """broker_events with every column nullable, so tests can write rows that break the contract."""
    return pa.schema([f.with_nullable(True) for f in BROKER_EVENTS.to_pyarrow()])

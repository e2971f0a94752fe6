"""When the episodes and daily_metrics jobs keep a span's events in memory for their writes
(jobs/span_events.py :func:`kept_in_memory`, the conf's ``span.keep_in_memory_max_mb``).

Whichever way a span is read, the tables are the same: tests/test_carried_state.py's four-day run
keeps its spans in memory, tests/cluster/test_local_cluster.py reads the same run with
``keep_in_memory_max_mb: 0`` and checks the same hand-derived tables.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.config import load_conf
from jobs.span_events import SpanEvents, kept_in_memory, local_files_within, released

pytestmark = pytest.mark.spark

DAY = date(2024, 1, 1)


@pytest.fixture
def span(spark: Any, tmp_path: Path) -> tuple[SpanEvents, int]:
    """Events of run r1 in two local Parquet files (one in a folder whose name Hadoop escapes),
    and the bytes they hold."""
    sizes = 0
    for folder in ("a", "date=2024-01-01 b"):
        path = tmp_path / folder / "part-0.parquet"
        path.parent.mkdir()
        pq.write_table(pa.table({"run_id": ["r1"] * 50, "seq": list(range(50))}), path)
        sizes += path.stat().st_size
    events = spark.read.parquet(str(tmp_path / "a"), str(tmp_path / "date=2024-01-01 b"))
    return SpanEvents(events, True, DAY, DAY, ("r1",)), sizes


def test_a_span_is_kept_in_memory_up_to_the_confs_bytes(span: tuple[SpanEvents, int]) -> None:
    read, size = span
    assert local_files_within(read.events, size) and not local_files_within(read.events, size - 1)
    conf = load_conf()
    kept = kept_in_memory(read, dataclasses.replace(conf, span_in_memory_max_bytes=size))
    assert kept.events.is_cached and kept.events.count() == 100
    released(kept)
    assert not kept.events.is_cached
    too_big = kept_in_memory(read, dataclasses.replace(conf, span_in_memory_max_bytes=size - 1))
    assert too_big is read and not read.events.is_cached
    # A span without runs reads nothing: no listing, nothing kept.
    assert kept_in_memory(dataclasses.replace(read, runs=()), conf).events is read.events


def test_files_on_another_file_system_are_never_kept() -> None:
    class OnObjectStorage:
        def inputFiles(self) -> list[str]:  # named as DataFrame names it
            return ["s3a://bucket/bronze/date=2024-01-01/part-0.parquet"]

    assert not local_files_within(OnObjectStorage(), 10**12)  # type: ignore[arg-type]

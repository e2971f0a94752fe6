"""jobs/delta_io.py on real Delta tables: the latest commit read from a local table's log equals
what Delta's own history says, after every kind of write the jobs make."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from jobs.delta_io import ensure_table, latest_commit, latest_local_commit, replace_where_at
from schemas.tables import PIPELINE_STATE

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
        frame = spark.createDataFrame(
            [(job, day, 7, now) for job, day in rows], PIPELINE_STATE.to_spark()
        )
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

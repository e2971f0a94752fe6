"""What the collector tests share: a log written by hand, a collector session over it, and the
rows the session committed (in ``seq`` order)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow.parquet as pq

from collectors.base import LogCollector

CollectorT = TypeVar("CollectorT", bound=LogCollector)
NOON = datetime(2026, 11, 27, 12, tzinfo=UTC)


def committed_rows(raw: Path) -> list[dict[str, Any]]:
    """Every row a session committed under ``raw``, in ``seq`` order."""
    files = sorted(raw.glob("date=*/*.parquet"))
    rows = [row for path in files for row in pq.read_table(path).to_pylist()]
    return sorted(rows, key=lambda row: row["seq"])


class CollectorSetup(Generic[CollectorT]):
    """A log file ``log_name`` under ``tmp_path``, a raw folder and a state file, and
    ``make(log_path=, raw_dir=, state_path=, **options)`` the collector over them (its clock at
    noon unless given)."""

    def __init__(self, tmp_path: Path, log_name: str, make: Callable[..., CollectorT]) -> None:
        self.log = tmp_path / "log" / log_name
        self.log.parent.mkdir(exist_ok=True)
        self.raw = tmp_path / "raw"
        self.state = tmp_path / "state" / "collector.json"
        self.make = make

    def write(self, *lines: str) -> None:
        with self.log.open("a") as handle:
            handle.write("".join(lines))

    def collector(self, **kwargs: Any) -> CollectorT:
        kwargs.setdefault("clock", lambda: NOON)
        return self.make(log_path=self.log, raw_dir=self.raw, state_path=self.state, **kwargs)

    def collect(self, **kwargs: Any) -> CollectorT:
        """A collector run once over what the log holds (``--once``)."""
        collector = self.collector(**kwargs)
        collector.run(stop=lambda: False, once=True)
        return collector

    def rows(self) -> list[dict[str, Any]]:
        return committed_rows(self.raw)

"""The Parquet event sink: the only part of the engine package that does I/O.

It subscribes to the event bus, buffers at most one row group of events, and streams them into
Hive-partitioned files ``<out>/date=YYYY-MM-DD/part-<run_id>-NNNNN.parquet``. A file is written
under a hidden name (readers such as Spark skip names starting with ``.``) and renamed when
complete, so a crashed run never leaves a half-written visible file. Existing files are never
rewritten.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flowctl_core.errors import ConfigurationError
from flowctl_core.events import COLUMNS, ROW_LAYOUT, TS_AT, EventRow
from schemas.broker_events import BROKER_EVENTS, PARTITION_COLUMN
from schemas.model import US_PER_DAY

DEFAULT_ROW_GROUP_SIZE = 131_072
# Rows are converted to Arrow in chunks this small so that they are still in the CPU cache; a
# chunk of rows is garbage once converted, so the Python-object buffer stays small too.
CONVERT_CHUNK_ROWS = 16_384
UNIQUE_PER_EVENT_COLUMNS = frozenset({"seq", "ts", "message_id", "latency_us"})
# Row-group statistics are kept where readers prune on them (a run's seq and time ranges): min/max
# of all 30 columns took about a quarter of the write time (measured) and no reader uses the rest.
STATISTICS_COLUMNS = ("run_id", "seq", "ts")
# seq and ts only increase and message_id mostly does (a dequeue trails its enqueue by the queue's
# depth): delta encoding stores them in a few bits per row, smaller than plain and no slower.
DELTA_ENCODED_COLUMNS = ("seq", "ts", "message_id")


class SinkError(ConfigurationError):
    """An event-log folder that cannot be written as asked (``--out``); the message names it."""


def run_files(out_dir: str | Path, run_id: str) -> list[Path]:
    """The visible files of ``run_id`` under ``out_dir`` (every date), by exact name: a glob on
    the prefix would also match the files of run ``<run_id>-x``."""
    own_name = re.compile(rf"part-{re.escape(run_id)}-\d{{5,}}\.parquet")
    return sorted(
        path
        for path in Path(out_dir).glob(f"{PARTITION_COLUMN}=*/part-*.parquet")
        if own_name.fullmatch(path.name)
    )


def rows_in_files(paths: list[Path]) -> int:
    """Rows the files' footers declare (no data is read)."""
    return sum(pq.read_metadata(path).num_rows for path in paths)


def _date_of_day(day: int) -> str:
    return datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y-%m-%d")


@dataclass
class _OpenFile:
    writer: pq.ParquetWriter
    hidden: Path
    final: Path
    rows: int = 0


#: Characters Spark cannot take literally in a file name: Hadoop reads ':' as a URI scheme and
#: the others as a glob (which may match nothing, or other files). The ingest quarantines a raw
#: file so named (jobs/raw_files.py); the sink never writes one.
UNADDRESSABLE_CHARACTERS = ":{}[]*?\\"


def unaddressable_characters(name: str) -> str:
    """The characters of ``name`` Spark cannot read in a file name, sorted, each once ("" when
    none): :data:`UNADDRESSABLE_CHARACTERS`."""
    return "".join(sorted({c for c in name if c in UNADDRESSABLE_CHARACTERS}))


def file_name_refusal(name: str) -> str | None:
    """Why ``name`` cannot be part of a raw file's name, None when it can: empty, a ``/``, a
    leading ``.`` or ``_`` (a hidden file, which Spark skips), a leading or trailing space, or
    :func:`unaddressable_characters`
    (the ingest would quarantine every such file whole). The sink's run ids and the collectors'
    broker names are checked here."""
    if not name or "/" in name or name.startswith((".", "_")):
        return "cannot name a file: no '/' and no leading '.' or '_'"
    if name != name.strip():
        # ' a ' and 'a' would name two runs (or brokers) that read alike.
        return "has a leading or trailing space: give it without"
    unaddressable = unaddressable_characters(name)
    if unaddressable:
        return f"Spark cannot read a file named with {unaddressable!r}: choose another"
    return None


class ParquetSink:
    def __init__(
        self,
        out_dir: str | Path,
        run_id: str,
        *,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
        compression: str = "zstd",
    ) -> None:
        if row_group_size < 1:
            raise ValueError("row_group_size must be >= 1")
        refusal = file_name_refusal(run_id)
        if refusal is not None:
            raise SinkError(f"run_id {run_id!r}: {refusal}")
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        self.row_group_size = row_group_size
        self._chunk_rows = min(CONVERT_CHUNK_ROWS, row_group_size)
        self.compression = compression
        self.schema = BROKER_EVENTS.to_pyarrow()
        if tuple(self.schema.names) != COLUMNS:
            raise SinkError("the sink's schema and the engine's columns disagree")
        self.rows_written = 0
        self.files: list[Path] = []
        self._types = {field.name: field.type for field in self.schema}
        # Dictionary-encode the columns that repeat (names, thresholds, depths); a dictionary
        # attempt on per-event values only costs time before Parquet falls back to plain.
        self._dictionary_columns = [n for n in COLUMNS if n not in UNIQUE_PER_EVENT_COLUMNS]
        self._rows: list[EventRow] = []
        self._batches: list[tuple[int, pa.RecordBatch]] = []
        self._pending_rows = 0
        self._convert_at = self._chunk_rows
        self._last_ts_us = -(2**63)
        # Per open file: writer, hidden path, final path, rows written to it.
        self._writers: dict[int, _OpenFile] = {}
        self._file_number = 0
        self._closed = False

    def __call__(self, row: EventRow) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) >= self._convert_at:
            self._chunk_full()

    def write_rows(self, rows: list[EventRow]) -> None:
        """Take rows in a batch (:meth:`EventBus.subscribe_batch`): cut into the same chunks
        and row groups as one call per row, so the files are the same."""
        start = 0
        while start < len(rows):
            end = start + self._convert_at - len(self._rows)
            self._rows.extend(rows[start:end])
            start = end
            if len(self._rows) >= self._convert_at:
                self._chunk_full()

    def _chunk_full(self) -> None:
        self._convert()
        if self._pending_rows >= self.row_group_size:
            self.flush()
        # A chunk never crosses a row-group boundary, so row groups hold row_group_size rows.
        self._convert_at = min(self._chunk_rows, self.row_group_size - self._pending_rows)

    def _convert(self) -> None:
        """Turn the buffered rows into record batches of one UTC day each."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        ts_us = list(map(itemgetter(TS_AT), rows))
        ts_array = pa.array(ts_us, type=pa.int64())
        if ts_us[0] < self._last_ts_us or (
            len(ts_us) > 1 and pc.any(pc.less(ts_array[1:], ts_array[:-1])).as_py()
        ):
            raise SinkError("events must arrive in time order")
        self._last_ts_us = ts_us[-1]
        first_day, last_day = ts_us[0] // US_PER_DAY, ts_us[-1] // US_PER_DAY
        if first_day == last_day:
            self._batches.append((first_day, self._to_batch(rows, ts_array)))
        else:  # the chunk straddles midnight (rare): split it per UTC day
            for day in range(first_day, last_day + 1):
                begin = bisect.bisect_left(ts_us, day * US_PER_DAY)
                end = bisect.bisect_left(ts_us, (day + 1) * US_PER_DAY)
                if end > begin:
                    day_batch = self._to_batch(rows[begin:end], ts_array[begin:end])
                    self._batches.append((day, day_batch))
        self._pending_rows += len(rows)

    def _to_batch(self, rows: list[EventRow], ts_array: pa.Array) -> pa.RecordBatch:
        """``rows`` as Arrow; ``ts_array`` is their ts column, already converted for the checks."""
        arrays: dict[str, pa.Array] = {"ts": ts_array.cast(self._types["ts"])}
        for position, entry in enumerate(ROW_LAYOUT):
            if position == TS_AT:
                continue
            values = list(map(itemgetter(position), rows))
            if isinstance(entry, str):
                arrays[entry] = pa.array(values, type=self._types[entry])
            else:
                arrays.update(zip(entry, self._group_arrays(entry, values), strict=True))
        return pa.RecordBatch.from_arrays([arrays[name] for name in COLUMNS], schema=self.schema)

    def _group_arrays(self, columns: tuple[str, ...], groups: list[EventRow]) -> list[pa.Array]:
        """A nested column group: each distinct tuple object is converted once, then spread."""
        ids = pa.array(list(map(id, groups)), type=pa.int64())
        encoded = pc.dictionary_encode(ids)
        # The batch holds every group alive, so equal ids are the same tuple: any row holding
        # a distinct id gives its group. index_in finds one in C, where an id -> group dict
        # cost a Python dict insert per row.
        rows_of_distinct = pc.index_in(encoded.dictionary, value_set=ids).to_pylist()
        distinct = [groups[row] for row in rows_of_distinct]
        return [
            pa.array([group[index] for group in distinct], type=self._types[name]).take(
                encoded.indices
            )
            for index, name in enumerate(columns)
        ]

    def flush(self) -> None:
        """Write everything buffered as one row group per UTC day."""
        self._convert()
        batches, self._batches = self._batches, []
        if not batches:
            return
        by_day: dict[int, list[pa.RecordBatch]] = {}
        for day, batch in batches:
            by_day.setdefault(day, []).append(batch)
        for day, day_batches in by_day.items():
            table = pa.Table.from_batches(day_batches, schema=self.schema)
            open_file = self._open_file(day)
            open_file.writer.write_table(table, row_group_size=table.num_rows)
            open_file.rows += table.num_rows
        self._pending_rows = 0
        # Time only moves forward: files of earlier days are complete.
        last_day = batches[-1][0]
        for day in [d for d in self._writers if d < last_day]:
            self._finish(day)

    def _open_file(self, day: int) -> _OpenFile:
        open_file = self._writers.get(day)
        if open_file is not None:
            return open_file
        partition = self.out_dir / f"{PARTITION_COLUMN}={_date_of_day(day)}"
        partition.mkdir(parents=True, exist_ok=True)
        self._file_number += 1
        name = f"part-{self.run_id}-{self._file_number:05d}.parquet"
        final, hidden = partition / name, partition / f".{name}.inprogress"
        if final.exists():
            raise SinkError(
                f"{final} exists: a run never rewrites earlier files (use a new run_id)"
            )
        writer = pq.ParquetWriter(
            hidden,
            self.schema,
            compression=self.compression,
            use_dictionary=self._dictionary_columns,
            write_statistics=list(STATISTICS_COLUMNS),
            column_encoding=dict.fromkeys(DELTA_ENCODED_COLUMNS, "DELTA_BINARY_PACKED"),
        )
        open_file = self._writers[day] = _OpenFile(writer, hidden, final)
        return open_file

    def _finish(self, day: int) -> None:
        open_file = self._writers.pop(day)
        open_file.writer.close()
        os.replace(open_file.hidden, open_file.final)
        self.files.append(open_file.final)
        self.rows_written += open_file.rows

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        for day in sorted(self._writers):
            self._finish(day)
        self._closed = True

    def abort(self) -> None:
        """Drop unfinished files (e.g. after an error), keeping completed ones."""
        for day in list(self._writers):
            open_file = self._writers.pop(day)
            open_file.writer.close()
            open_file.hidden.unlink(missing_ok=True)
        self._rows.clear()
        self._batches.clear()
        self._pending_rows = 0
        self._closed = True

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

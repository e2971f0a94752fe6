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
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from flowctl_core.events import Event
from schemas.broker_events import BROKER_EVENTS, PARTITION_COLUMN

US_PER_DAY = 86_400 * 1_000_000
DEFAULT_ROW_GROUP_SIZE = 131_072


class SinkError(RuntimeError):
    pass


def _date_of_day(day: int) -> str:
    return datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y-%m-%d")


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
        if not run_id or "/" in run_id or run_id.startswith((".", "_")):
            raise SinkError(f"run_id {run_id!r} cannot name a file")
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        self.row_group_size = row_group_size
        self.compression = compression
        self.schema = BROKER_EVENTS.to_pyarrow()
        self.rows_written = 0
        self.files: list[Path] = []
        self._buffer: list[Event] = []
        self._writers: dict[int, tuple[pq.ParquetWriter, Path, Path]] = {}
        self._file_number = 0
        self._closed = False

    def __call__(self, event: Event) -> None:
        self._buffer.append(event)
        if len(self._buffer) >= self.row_group_size:
            self.flush()

    def flush(self) -> None:
        buffer, self._buffer = self._buffer, []
        if not buffer:
            return
        first_day, last_day = buffer[0]["ts"] // US_PER_DAY, buffer[-1]["ts"] // US_PER_DAY
        if last_day < first_day:
            raise SinkError("events must arrive in time order")
        table = self._to_table(buffer)
        if first_day == last_day:
            self._writer_for(first_day).write_table(table)
        else:  # the buffer straddles midnight (rare): split it per UTC day
            ts_us = [event["ts"] for event in buffer]
            for day in range(first_day, last_day + 1):
                begin = bisect.bisect_left(ts_us, day * US_PER_DAY)
                end = bisect.bisect_left(ts_us, (day + 1) * US_PER_DAY)
                if end > begin:
                    self._writer_for(day).write_table(table.slice(begin, end - begin))
        self.rows_written += len(buffer)
        # Time only moves forward: files of earlier days are complete.
        for day in [d for d in self._writers if d < last_day]:
            self._finish(day)

    def _to_table(self, buffer: list[Event]) -> pa.Table:
        """Columnar conversion of a batch of event dicts, in the batch's (seq) order.

        Events of one kind share one key set, so bucketing by key count lets each bucket convert
        with C-level itemgetter/zip instead of a dict.get per cell (about a third faster).
        """
        buckets: dict[int, list[Event]] = {}
        for event in buffer:
            bucket = buckets.get(len(event))
            if bucket is None:
                buckets[len(event)] = [event]
            else:
                bucket.append(event)
        tables = [self._bucket_table(bucket) for bucket in buckets.values()]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        return table.sort_by("seq") if len(tables) > 1 else table

    def _bucket_table(self, events: list[Event]) -> pa.Table:
        keys = list(events[0])
        if len(keys) < 2:  # itemgetter of one key returns the value, not a row
            return self._cellwise_table(events)
        try:
            # Same key count and every key of the first event present means the same key set.
            rows = list(map(itemgetter(*keys), events))
        except KeyError:  # mixed key sets of one size: dict.get per cell copes with any mix
            return self._cellwise_table(events)
        columns = dict(zip(keys, zip(*rows, strict=True), strict=True))
        count = len(events)
        arrays = [
            pa.array(columns[field.name], type=field.type)
            if field.name in columns
            else pa.nulls(count, field.type)
            for field in self.schema
        ]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _cellwise_table(self, events: list[Event]) -> pa.Table:
        return pa.Table.from_arrays(
            [
                pa.array([event.get(field.name) for event in events], type=field.type)
                for field in self.schema
            ],
            schema=self.schema,
        )

    def _writer_for(self, day: int) -> pq.ParquetWriter:
        entry = self._writers.get(day)
        if entry is not None:
            return entry[0]
        partition = self.out_dir / f"{PARTITION_COLUMN}={_date_of_day(day)}"
        partition.mkdir(parents=True, exist_ok=True)
        self._file_number += 1
        name = f"part-{self.run_id}-{self._file_number:05d}.parquet"
        final, hidden = partition / name, partition / f".{name}.inprogress"
        if final.exists():
            raise SinkError(
                f"{final} exists: a run never rewrites earlier files (use a new run_id)"
            )
        writer = pq.ParquetWriter(hidden, self.schema, compression=self.compression)
        self._writers[day] = (writer, hidden, final)
        return writer

    def _finish(self, day: int) -> None:
        writer, hidden, final = self._writers.pop(day)
        writer.close()
        os.replace(hidden, final)
        self.files.append(final)

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
            writer, hidden, _ = self._writers.pop(day)
            writer.close()
            hidden.unlink(missing_ok=True)
        self._buffer.clear()
        self._closed = True

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

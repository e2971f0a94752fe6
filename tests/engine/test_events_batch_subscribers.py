"""Batch subscribers of the event bus: the same rows, in the same order, as per-row ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flowctl_core.clock import Scheduler
from flowctl_core.events import BATCH_ROWS, NO_LINK, EventBus, EventRow
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import parse_scenario
from flowctl_core.sink import ParquetSink
from tests.engine.test_sink_and_cli import MIDNIGHT_SCENARIO


def _emit(bus: EventBus, scheduler: Scheduler, count: int) -> None:
    context = bus.context("b", "dequeue", "q")
    for message_id in range(count):
        bus.emit_row(context, NO_LINK, message_id, 10, 0, 0)
        scheduler.advance(1)


def test_batches_hold_every_row_in_order_and_flush_hands_over_the_rest() -> None:
    scheduler = Scheduler(0)
    bus = EventBus("r", scheduler)
    per_row: list[EventRow] = []
    batches: list[list[EventRow]] = []
    bus.subscribe(per_row.append)
    bus.subscribe_batch(batches.append)
    _emit(bus, scheduler, BATCH_ROWS + 5)
    assert [len(batch) for batch in batches] == [BATCH_ROWS]
    bus.flush()
    bus.flush()  # nothing buffered: no empty batch
    assert [len(batch) for batch in batches] == [BATCH_ROWS, 5]
    assert [row for batch in batches for row in batch] == per_row


def test_a_bus_without_batch_subscribers_buffers_nothing() -> None:
    scheduler = Scheduler(0)
    bus = EventBus("r", scheduler)
    _emit(bus, scheduler, 3)
    bus.flush()
    assert bus._batch is None


@pytest.mark.parametrize("batch_sizes", [[1], [7, 1, 250], [1000], [3000, 1]])
def test_sink_writes_the_same_files_from_batches_as_row_by_row(
    tmp_path: Path, batch_sizes: list[int]
) -> None:
    # Batches that straddle the conversion chunks and row groups (row_group_size 700 cuts
    # chunks of 700, not 16,384) must give the same row groups as one call per row.
    scheduler = Scheduler(1_767_225_600_000_000)
    bus = EventBus("r", scheduler)
    rows: list[EventRow] = []
    bus.subscribe(rows.append)
    _emit(bus, scheduler, 5_000)
    with ParquetSink(tmp_path / "rows", "r", row_group_size=700) as by_row:
        for row in rows:
            by_row(row)
    with ParquetSink(tmp_path / "batches", "r", row_group_size=700) as by_batch:
        start, sizes = 0, iter(batch_sizes * len(rows))
        while start < len(rows):
            end = start + next(sizes)
            by_batch.write_rows(rows[start:end])
            start = end
    assert len(by_row.files) == len(by_batch.files) == 1
    assert by_row.files[0].read_bytes() == by_batch.files[0].read_bytes()
    metadata = pq.ParquetFile(by_batch.files[0]).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        *[700] * 7,
        100,
    ]


def test_run_scenario_hands_the_sink_every_row_of_the_run(tmp_path: Path) -> None:
    scenario = parse_scenario(MIDNIGHT_SCENARIO)
    with ParquetSink(tmp_path, "all") as sink:
        result = run_scenario(scenario, [sink], run_id="all")
    seqs = sorted(
        s for path in sink.files for s in pq.read_table(path, columns=["seq"])["seq"].to_pylist()
    )
    assert seqs == list(range(1, result.events + 1))
    assert result.events < BATCH_ROWS  # the whole run was the last, partial batch


def test_a_failed_run_still_hands_over_the_buffered_rows(tmp_path: Path) -> None:
    # As with one call per row, the sink has had every emitted row when the error reaches it.
    scenario = parse_scenario(MIDNIGHT_SCENARIO)
    received: list[EventRow] = []

    class Failing:
        def __call__(self, row: EventRow) -> None:
            if row[0] == 100:
                raise RuntimeError("boom")

    class Batches:
        def write_rows(self, rows: list[EventRow]) -> None:
            received.extend(rows)

    with pytest.raises(RuntimeError, match="boom"):
        run_scenario(scenario, [Batches(), Failing()], run_id="failed")
    assert [row[0] for row in received] == list(range(1, 101))

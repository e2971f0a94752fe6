"""The Parquet sink, the bundled scenarios and the CLI (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flowctl.cli import app
from flowctl_core.clock import Scheduler
from flowctl_core.events import (
    NO_LINK,
    NO_LINK_STATE,
    EventBus,
    EventCollector,
    as_dict,
    flatten,
)
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import ScenarioError, bundled_scenarios, load_scenario, parse_scenario
from flowctl_core.sink import ParquetSink, SinkError
from flowctl_core.summary import queue_summaries
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES
from schemas.model import US_PER_SECOND

runner = CliRunner()

MIDNIGHT_SCENARIO = {
    "name": "midnight",
    "kind": "workload",
    "start": "2026-05-01T23:59:00Z",
    "duration_s": 120,
    "seed": 3,
    "queues": [{"name": "q", "arguments": {"qpid.max_count": 100}}],
    "producers": [
        {"name": "p", "capacity": 5, "routing_key": "q", "rate": 50, "arrival": "poisson"}
    ],
    "consumers": [{"name": "c", "queue": "q", "rate": 40}],
}


def _run_to(tmp_path: Path, row_group_size: int = 64) -> tuple[ParquetSink, int]:
    scenario = parse_scenario(MIDNIGHT_SCENARIO)
    sink = ParquetSink(tmp_path, "run-a", row_group_size=row_group_size)
    with sink:
        result = run_scenario(scenario, [sink], run_id="run-a")
    return sink, result.events


def test_sink_partitions_by_utc_date_and_keeps_every_event(tmp_path: Path) -> None:
    sink, events = _run_to(tmp_path)
    assert sorted(p.parent.name for p in sink.files) == ["date=2026-05-01", "date=2026-05-02"]
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == events == sink.rows_written
    seqs = sorted(table.column("seq").to_pylist())
    assert seqs == list(range(1, events + 1))
    for path in sink.files:
        day = path.parent.name.removeprefix("date=")
        stamps = pq.read_table(path).column("ts").to_pylist()
        assert {ts.date().isoformat() for ts in stamps} == {day}
    assert not list(tmp_path.rglob(".*inprogress"))


def test_sink_schema_is_the_contract(tmp_path: Path) -> None:
    sink, _ = _run_to(tmp_path)
    schema = pq.read_schema(sink.files[0])
    expected = BROKER_EVENTS.to_pyarrow()
    assert schema.names == expected.names
    for field in expected:
        assert schema.field(field.name).type == field.type
    assert str(schema.field("ts").type) == "timestamp[us, tz=UTC]"
    types = set(pq.read_table(sink.files[0]).column("event_type").to_pylist())
    assert types <= set(EVENT_TYPES)
    assert {"queue_declared", "enqueue", "dequeue"} <= types


def test_sink_never_rewrites_a_run(tmp_path: Path) -> None:
    _run_to(tmp_path)
    with pytest.raises(SinkError, match="never rewrites"):
        _run_to(tmp_path)


def test_runs_are_deterministic(tmp_path: Path) -> None:
    scenario = load_scenario("bursty-producer")
    logs = []
    for attempt in range(2):
        sink = ParquetSink(tmp_path / str(attempt), "same")
        with sink:
            run_scenario(scenario, [sink], run_id="same")
        logs.append(ds.dataset(tmp_path / str(attempt), partitioning="hive").to_table())
    assert logs[0].equals(logs[1])


def test_every_bundled_scenario_loads_and_runs() -> None:
    names = {path.stem for path in bundled_scenarios()}
    assert {
        "qpid-900-500",
        "qpid-4000-8k",
        "qpid-165-worst-case",
        "bursty-producer",
        "slow-consumer",
        "fanout-three-queues",
    } <= names
    for path in bundled_scenarios():
        scenario = load_scenario(path)
        assert scenario.name == path.stem
        if scenario.kind == "scripted":
            result = run_scenario(scenario, validate=True)
            assert result.events > 0


def test_bundled_165_scenario_reaches_165() -> None:
    result = run_scenario(load_scenario("qpid-165-worst-case"), validate=True)
    (summary,) = queue_summaries(result)
    assert summary.peak_depth_msgs == 165 and summary.max_overshoot_msgs == 65
    # Seed 001: ON at the 101st (C1 holds 50, C2 15: 165). Each of the 4 consume steps takes it
    # below 80 (OFF) before any held message, freeing every window, and the refill passes 100
    # again (C1's next 71 + C2's 15; C1's last 79 + C2's 21; C2's 115 twice): 1 + 4 = 5 stops,
    # ON at the end with 115 queued.
    assert (summary.flow_stopped_count, summary.flow_stopped, summary.depth_msgs) == (5, True, 115)


def test_bundled_900_500_scenario() -> None:
    result = run_scenario(load_scenario("qpid-900-500"), validate=True)
    (summary,) = queue_summaries(result)
    assert (summary.flow_stopped_count, summary.peak_depth_msgs) == (1, 901)
    assert summary.depth_msgs == 0 and not summary.flow_stopped


def test_an_artemis_address_that_blocks_is_its_queues_flow_control_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """artemis-block-core-producers' address blocks 168 times: its queue's summary counts them
    as its events do (not 0, its own thresholds being off), and the threshold columns point at
    the addresses' table, where the limit and overshoot are."""
    from flowctl.render import print_summary

    with ParquetSink(tmp_path, "run-a") as sink:
        result = run_scenario(load_scenario("artemis-block-core-producers"), [sink], run_id="a")
    events = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    blocks = events.filter(pc.field("event_type") == "flow_stopped").num_rows
    (summary,) = queue_summaries(result)
    assert summary.flow_by_address and summary.flow_stopped_count == blocks == 168
    print_summary(result)
    orders = next(line for line in capsys.readouterr().out.splitlines() if "│ orders" in line)
    cells = [cell.strip() for cell in orders.strip("│").split("│")]
    assert cells[0] == "orders" and cells[5:] == ["168", "664", "679,936", *["address"] * 3]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"producers": [{"name": "p", "capacity": 0, "routing_key": "q", "rate": 1}]}, "capacity"),
        ({"duration_s": -1}, "duration_s"),
        ({"kind": "scripted"}, "steps"),
        ({"consumers": [{"name": "c", "queue": "nowhere", "rate": 1}]}, "nowhere"),
        ({"queues": [{"name": "q", "arguments": {}, "colour": "red"}]}, "colour"),
    ],
)
def test_bad_scenarios_name_the_field(patch: dict[str, object], field: str) -> None:
    with pytest.raises(ScenarioError, match=field) as raised:
        parse_scenario({**MIDNIGHT_SCENARIO, **patch}, "conf/x.yaml")
    assert "conf/x.yaml" in str(raised.value)


def test_cli_bad_scenario_names_file_and_field_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nkind: workload\nduration_s: 10\nproducers:\n  - {name: p, rate: -3}\n"
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert "bad.yaml" in result.output and "producers.0.rate" in result.output
    assert not out.exists()


def test_cli_bad_thresholds_write_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nkind: scripted\nqueues:\n"
        "  - {name: q, arguments: {qpid.max_count: 10, qpid.flow_stop_count: 11}}\n"
        "steps:\n  - advance: {seconds: 1}\n"
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", str(bad), "--out", str(out)])
    assert result.exit_code == 2 and "exceeds max_count" in result.output
    assert not out.exists()


def test_cli_simulate_prints_the_summary(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "qpid-165-worst-case", "--out", str(tmp_path), "--run-id", "r165"]
    )
    assert result.exit_code == 0, result.output
    assert "payments" in result.output and "165" in result.output
    assert list(tmp_path.glob("date=*/part-r165-*.parquet"))


def test_cli_lists_scenarios() -> None:
    result = runner.invoke(app, ["scenarios"])
    assert result.exit_code == 0
    assert "qpid-165-worst-case" in result.output and "workload" in result.output


def test_sink_writes_exactly_the_rows_the_bus_emitted(tmp_path: Path) -> None:
    # Both ways of emitting (by column name, and as cached groups) land in the same columns.
    scheduler = Scheduler(1_767_225_600_000_000)
    bus = EventBus("rows", scheduler, validate=True)
    collector = EventCollector()
    sink = ParquetSink(tmp_path, "rows")
    bus.subscribe(sink)
    bus.subscribe(collector)
    with sink:
        bus.emit("b", "enqueue", {"queue": "a", "depth_msgs": 1, "link": "p", "outstanding": 3})
        scheduler.advance(5)
        bus.emit("b", "flow", {"link": "p", "credit": 5, "detail": '{"origin":"receiver"}'})
        # Column groups are tuples that events share: each must land on its own rows.
        consumer = ("c", None, "conn", "amqp-0-10", "consumer", *NO_LINK_STATE)
        context = bus.context("b", "dequeue", "a", (True, 1, 100, 50, 0, 0, 200, 0))
        for message_id, link in ((7, consumer), (8, NO_LINK), (9, consumer)):
            bus.emit_row(context, link, message_id, 10, 0, 0)
    table = pq.read_table(sink.files[0])
    assert table.column("seq").to_pylist() == [1, 2, 3, 4, 5]
    assert table.column("queue").to_pylist() == ["a", None, "a", "a", "a"]
    assert table.column("credit").to_pylist() == [None, 5, None, None, None]
    assert table.column("outstanding").to_pylist() == [3, None, None, None, None]
    assert table.column("link").to_pylist() == ["p", "p", "c", None, "c"]
    assert table.column("connection").to_pylist() == [None, None, "conn", None, "conn"]
    assert table.column("flow_stopped").to_pylist() == [None, None, True, True, True]
    assert table.column("detail").to_pylist() == [None, '{"origin":"receiver"}', None, None, None]
    written = [
        {**row, "ts": int(row["ts"].timestamp() * US_PER_SECOND)} for row in table.to_pylist()
    ]
    assert written == [{k: v for k, v in e.items()} for e in collector.events]


def test_bus_rejects_unknown_columns_and_badly_laid_out_groups() -> None:
    bus = EventBus("checked", Scheduler(0), validate=True)
    context = bus.context("b", "enqueue", "a")
    with pytest.raises(ValueError, match="unknown columns"):
        bus.emit("b", "enqueue", {"queue": "a", "depth": 1})
    with pytest.raises(ValueError, match="context group is not a tuple"):
        bus.emit_row(context[:-1], NO_LINK, 1, 1, 1, 1)  # a group one column short
    with pytest.raises(ValueError, match="link group is not a tuple"):  # a (mutable) list
        bus.emit_row(context, list(NO_LINK), 1, 1, 1, 1)
    with pytest.raises(ValueError, match="context of run 'other' emitted on run 'checked'"):
        bus.emit_row(EventBus("other", Scheduler(0)).context("b", "enqueue"), NO_LINK, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="unknown event type"):
        bus.emit("b", "enqueued", {})
    with pytest.raises(ValueError, match="unknown event type"):
        bus.emit_row(bus.context("b", "enqueued"), NO_LINK, 1, 1, 1, 1)


def test_row_views_follow_the_schema_order() -> None:
    bus = EventBus("views", Scheduler(5))
    flow_state = (False, 0, 100, 50, 0, 0, 200, 0)
    link = ("p", "s", "conn", "amqp-1.0", "sender", 3, 7, None, 2, 20, None, "{}")
    row = bus.emit_row(bus.context("b", "enqueue", "q", flow_state), link, 9, 10, 4, 40)
    plain = flatten(row)
    assert plain == (
        *("views", "b", 1, 5, "enqueue", "q"),
        *("p", "s", "conn", "amqp-1.0", "sender"),
        *(9, 10, 4, 40),
        *flow_state,
        *(3, 7, None, 2, 20, None, "{}"),
    )
    assert tuple(as_dict(row)) == tuple(BROKER_EVENTS.names)
    assert as_dict(row)["credit"] == 3 and as_dict(row)["max_count"] == 200


def _emit_dequeues(bus: EventBus, scheduler: Scheduler, count: int, step_us: int = 1) -> None:
    context = bus.context("b", "dequeue", "q", (False, 0, 100, 50, 0, 0, 200, 0))
    for message_id in range(count):
        bus.emit_row(context, NO_LINK, message_id, 10, 0, 0)
        scheduler.advance(step_us)


def _sink_on_bus(
    tmp_path: Path, run_id: str, row_group_size: int, start_us: int = 1_767_225_600_000_000
) -> tuple[Scheduler, EventBus, ParquetSink]:
    scheduler = Scheduler(start_us)
    bus = EventBus(run_id, scheduler)
    sink = ParquetSink(tmp_path, run_id, row_group_size=row_group_size)
    bus.subscribe(sink)
    return scheduler, bus, sink


def test_row_groups_hold_exactly_row_group_size_rows(tmp_path: Path) -> None:
    # 20,000 is not a multiple of the sink's conversion chunk: chunks must stop at the boundary.
    scheduler, bus, sink = _sink_on_bus(tmp_path, "groups", row_group_size=20_000)
    with sink:
        _emit_dequeues(bus, scheduler, 50_000)
    metadata = pq.ParquetFile(sink.files[0]).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sizes == [20_000, 20_000, 10_000]
    assert sink.rows_written == 50_000


def test_abort_counts_only_the_rows_of_kept_files(tmp_path: Path) -> None:
    # A run that crosses midnight then fails: the first day's file is complete and kept.
    start_us = 1_767_225_600_000_000 + 86_400_000_000 - 1_000
    scheduler, bus, sink = _sink_on_bus(tmp_path, "aborted", row_group_size=100, start_us=start_us)
    with pytest.raises(RuntimeError, match="boom"), sink:
        _emit_dequeues(bus, scheduler, 1_500)
        raise RuntimeError("boom")
    kept = sum(pq.read_metadata(path).num_rows for path in sink.files)
    assert [path.parent.name for path in sink.files] == ["date=2026-01-01"]
    assert kept == sink.rows_written == 1_000
    assert not list(tmp_path.rglob(".*inprogress"))


def test_sink_refuses_events_out_of_time_order(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path, "order", row_group_size=4)
    context = EventBus("r", Scheduler(0)).context("b", "dequeue", "q")
    with pytest.raises(SinkError, match="time order"), sink:
        for seq, ts in enumerate([10, 30, 20, 40], start=1):
            sink((seq, ts, 1, 10, 0, 0, context, NO_LINK))


def test_sink_encodings_and_statistics(tmp_path: Path) -> None:
    # Readers prune on run_id/seq/ts, so those keep min/max; seq, ts and message_id are
    # delta-encoded; everything reads back with the declared schema.
    scheduler, bus, sink = _sink_on_bus(tmp_path, "encodings", row_group_size=500)
    with sink:
        _emit_dequeues(bus, scheduler, 1_200, step_us=7)
    metadata = pq.ParquetFile(sink.files[0]).metadata
    names = BROKER_EVENTS.names
    for group in range(metadata.num_row_groups):
        chunks = {names[i]: metadata.row_group(group).column(i) for i in range(len(names))}
        with_statistics = {n for n, chunk in chunks.items() if chunk.is_stats_set}
        assert with_statistics == {"run_id", "seq", "ts"}
        for name in ("seq", "ts", "message_id"):
            assert "DELTA_BINARY_PACKED" in chunks[name].encodings, name
    first = metadata.row_group(0).column(names.index("seq")).statistics
    assert (first.min, first.max) == (1, 500)
    table = pq.read_table(sink.files[0])
    assert table.schema.equals(BROKER_EVENTS.to_pyarrow())
    assert table.column("message_id").to_pylist() == list(range(1_200))
    assert table.column("seq").to_pylist() == list(range(1, 1_201))

"""Simulating the same scenario and seed again does not add a second copy of the run.

The engine is deterministic, so a scenario and a seed name one stream of events; the default run
id is derived from them. When the output already holds that run, simulate runs the engine only for
its summary and writes nothing: the event log's files are never rewritten (DESIGN §3: "Each run
writes new files and never rewrites old ones") and readers do not count the run twice.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
from typer.testing import CliRunner

from flowctl.cli import app
from flowctl_core.runner import default_run_id
from flowctl_core.scenario import parse_scenario
from flowctl_core.sink import run_files
from tests.engine.test_sink_and_cli import MIDNIGHT_SCENARIO

runner = CliRunner()


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Each file's (size, modification time in ns): any rewrite changes the latter."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file()
    }


def test_default_run_id_is_derived_from_scenario_and_seed() -> None:
    scenario = parse_scenario(MIDNIGHT_SCENARIO)
    run_id = default_run_id(scenario, 3)
    assert run_id == default_run_id(parse_scenario(MIDNIGHT_SCENARIO), 3)
    assert run_id.startswith("midnight-s3-") and len(run_id) == len("midnight-s3-") + 8
    assert default_run_id(scenario, 4) != run_id
    changed = {**MIDNIGHT_SCENARIO, "duration_s": 121}
    assert default_run_id(parse_scenario(changed), 3) != run_id
    # The description does not change the events, hence not the run.
    described = {**MIDNIGHT_SCENARIO, "description": "two minutes across midnight"}
    assert default_run_id(parse_scenario(described), 3) == run_id


def test_cli_rerun_writes_nothing_and_still_prints_the_summary(tmp_path: Path) -> None:
    args = ["simulate", "qpid-165-worst-case", "--out", str(tmp_path)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    before = _snapshot(tmp_path)
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "is already in" in second.output and "nothing written" in second.output
    assert "payments" in second.output and "165" in second.output  # the summary
    assert _snapshot(tmp_path) == before
    runs = ds.dataset(tmp_path, partitioning="hive").to_table().column("run_id").to_pylist()
    assert len(set(runs)) == 1


def test_cli_another_seed_is_another_run(tmp_path: Path) -> None:
    for seed in ("1", "2"):
        result = runner.invoke(
            app, ["simulate", "bursty-producer", "--out", str(tmp_path), "--seed", seed]
        )
        assert result.exit_code == 0, result.output
    runs = set(ds.dataset(tmp_path, partitioning="hive").to_table().column("run_id").to_pylist())
    assert len(runs) == 2 and all("-s1-" in r or "-s2-" in r for r in runs)


def test_cli_interrupted_run_is_reported_not_completed_silently(tmp_path: Path) -> None:
    scenario = tmp_path / "midnight.yaml"
    scenario.write_text(
        "name: midnight\nkind: workload\nstart: 2026-05-01T23:59:00Z\nduration_s: 120\nseed: 3\n"
        "queues: [{name: q, arguments: {qpid.max_count: 100}}]\n"
        "producers: [{name: p, capacity: 5, routing_key: q, rate: 50, arrival: poisson}]\n"
        "consumers: [{name: c, queue: q, rate: 40}]\n"
    )
    out = tmp_path / "raw"
    args = ["simulate", str(scenario), "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    run_id = default_run_id(parse_scenario({**MIDNIGHT_SCENARIO}), 3)
    files = run_files(out, run_id)
    assert [p.parent.name for p in files] == ["date=2026-05-01", "date=2026-05-02"]
    files[-1].unlink()  # as if the run had stopped before midnight's file was complete
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    assert f"events of run {run_id}" in again.output and "--run-id" in again.output
    assert run_files(out, run_id) == files[:1]


def test_cli_explicit_run_id_is_never_overwritten(tmp_path: Path) -> None:
    args = ["simulate", "qpid-165-worst-case", "--out", str(tmp_path), "--run-id", "mine"]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "never rewrites" in again.output


def test_run_files_match_the_run_exactly(tmp_path: Path) -> None:
    for name in ("part-r-00001.parquet", "part-r-2-00001.parquet", "part-r-00002.parquet"):
        day = tmp_path / "date=2026-05-01"
        day.mkdir(exist_ok=True)
        (day / name).write_bytes(b"")
    (tmp_path / "date=2026-05-01" / ".part-r-00003.parquet.inprogress").write_bytes(b"")
    assert [p.name for p in run_files(tmp_path, "r")] == [
        "part-r-00001.parquet",
        "part-r-00002.parquet",
    ]

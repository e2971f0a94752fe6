"""Simulating the same scenario and seed again replaces that run instead of adding a copy.

The engine is deterministic, so a scenario and a seed name one stream of events; the default run
id is derived from them, and the sink (``replace_run``) swaps the run's files only once the new
run is complete. A run id given by hand keeps the old rule: files are never overwritten.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flowctl_core.cli import app
from flowctl_core.runner import default_run_id, run_scenario
from flowctl_core.scenario import parse_scenario
from flowctl_core.sink import ParquetSink
from tests.test_engine_sink_cli import MIDNIGHT_SCENARIO

runner = CliRunner()


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


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


def test_cli_rerun_replaces_the_run_files(tmp_path: Path) -> None:
    args = ["simulate", "qpid-165-worst-case", "--out", str(tmp_path)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    files = _files(tmp_path)
    before = ds.dataset(tmp_path, partitioning="hive").to_table()
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "were replaced" in second.output
    assert _files(tmp_path) == files  # the same names, no second copy of the run
    after = ds.dataset(tmp_path, partitioning="hive").to_table()
    assert after.num_rows == before.num_rows and after.equals(before)
    assert len(set(after.column("run_id").to_pylist())) == 1


def test_cli_another_seed_is_another_run(tmp_path: Path) -> None:
    for seed in ("1", "2"):
        result = runner.invoke(
            app, ["simulate", "bursty-producer", "--out", str(tmp_path), "--seed", seed]
        )
        assert result.exit_code == 0, result.output
    runs = set(ds.dataset(tmp_path, partitioning="hive").to_table().column("run_id").to_pylist())
    assert len(runs) == 2 and all("-s1-" in r or "-s2-" in r for r in runs)


def test_cli_explicit_run_id_is_never_overwritten(tmp_path: Path) -> None:
    args = ["simulate", "qpid-165-worst-case", "--out", str(tmp_path), "--run-id", "mine"]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "never rewrites" in again.output


def _simulate(out: Path, scenario: dict[str, object], run_id: str) -> ParquetSink:
    sink = ParquetSink(out, run_id, row_group_size=64, replace_run=True)
    with sink:
        run_scenario(parse_scenario(scenario), [sink], run_id=run_id)
    return sink


def test_replace_deletes_files_the_rerun_no_longer_writes_and_only_those(
    tmp_path: Path,
) -> None:
    # The earlier run crossed midnight (two files); the new one stays within the first day.
    _simulate(tmp_path, MIDNIGHT_SCENARIO, "r")
    _simulate(tmp_path, {**MIDNIGHT_SCENARIO, "name": "other"}, "r-2")  # "r-" prefix, another run
    shorter = {**MIDNIGHT_SCENARIO, "duration_s": 30}
    sink = _simulate(tmp_path, shorter, "r")
    assert sink.replaced_files == 2
    assert [p.parent.name for p in sink.files] == ["date=2026-05-01"]
    kept = {p.name for p in tmp_path.rglob("part-*.parquet")}
    assert kept == {"part-r-00001.parquet", "part-r-2-00001.parquet", "part-r-2-00002.parquet"}
    rows = ds.dataset(tmp_path, partitioning="hive").to_table()
    stamps = rows.filter(ds.field("run_id") == "r").column("ts").to_pylist()
    assert max(stamps).isoformat() < "2026-05-01T23:59:31"


def test_failed_rerun_leaves_the_earlier_run_as_it_was(tmp_path: Path) -> None:
    _simulate(tmp_path, MIDNIGHT_SCENARIO, "r")
    before = {p: pq.read_table(p) for p in tmp_path.rglob("part-*.parquet")}
    sink = ParquetSink(tmp_path, "r", row_group_size=64, replace_run=True)
    with pytest.raises(RuntimeError, match="boom"), sink:
        # Past midnight: the first day's new file is complete, yet must not replace the old one.
        # Another seed, so a replaced file would differ from the old one.
        run_scenario(parse_scenario({**MIDNIGHT_SCENARIO, "seed": 4}), [sink], run_id="r")
        raise RuntimeError("boom")
    after = {p: pq.read_table(p) for p in tmp_path.rglob("part-*.parquet")}
    assert after.keys() == before.keys() and all(after[p].equals(before[p]) for p in before)
    assert not list(tmp_path.rglob(".*inprogress")) and sink.rows_written == 0

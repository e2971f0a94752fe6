"""A pipeline conf that cannot be read is an error naming the file, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flowctl_core.cli import app
from jobs.config import ConfError, load_conf
from jobs.pipeline import _conf


def test_missing_conf_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfError, match=f"pipeline conf {tmp_path / 'nope.yaml'}"):
        load_conf(tmp_path / "nope.yaml")


def test_conf_that_is_not_yaml_or_not_a_mapping(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("spark: [unclosed\n")
    with pytest.raises(ConfError, match="is not valid YAML"):
        load_conf(broken)
    broken.write_text("- a list\n")
    with pytest.raises(ConfError, match="expected a mapping"):
        load_conf(broken)


def test_cli_pipeline_with_a_missing_conf_exits_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = CliRunner().invoke(app, ["pipeline", "--from", "2026-03-02", "--conf", str(missing)])
    assert result.exit_code == 2
    assert "error:" in result.output and str(missing) in result.output.replace("\n", "")
    assert "Traceback" not in result.output


def test_another_warehouse_keeps_its_quality_results_beside_it(tmp_path: Path) -> None:
    conf = _conf(None, str(tmp_path / "demo" / "warehouse"))
    assert conf.quality_dir == str(tmp_path / "demo" / "quality")
    assert _conf(None, None).quality_dir == load_conf().quality_dir

"""A pipeline conf or recommendation policy that cannot be read is an error naming the file, not a
traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl.cli import app
from jobs.config import PROJECT_ROOT, ConfError, load_conf
from jobs.pipeline import _conf

DAY = "2026-03-02"


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


def test_a_conf_that_is_empty_repeats_a_key_or_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """Each of these was read as something else (an audit): an empty conf as every default, a
    section given twice as its last copy alone, a Latin-1 file as a crash."""
    conf = tmp_path / "conf.yaml"
    conf.write_text("# nothing yet\n")
    with pytest.raises(ConfError, match=r"conf\.yaml is empty: expected a mapping of sections"):
        load_conf(conf)
    conf.write_text("paths:\n  raw: /a\nspark:\n  master: local[1]\npaths:\n  raw: /b\n")
    with pytest.raises(
        ConfError, match=r"line 5, column 1: key 'paths' given twice \(first at line 1\)"
    ):
        load_conf(conf)
    conf.write_bytes(b"paths:\n  raw: /caf\xe9\n")
    with pytest.raises(ConfError, match=r"not UTF-8 text \(byte 0xe9 at offset 18\)"):
        load_conf(conf)


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


def test_a_relative_folder_is_where_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--warehouse var/wh2`` (or ``demo --out var/demo2``) names a folder under the working
    directory; Spark read a relative Delta location as a table name and failed (exit 70). The
    conf file's own folders are the project root's, a URI is left as it is."""
    monkeypatch.chdir(tmp_path)
    conf = _conf(None, "var/wh2")
    assert conf.warehouse_dir == str(tmp_path / "var" / "wh2")
    assert conf.quality_dir == str(tmp_path / "var" / "quality")
    assert conf.table_path("bronze", "broker_events").startswith(str(tmp_path))
    assert load_conf().raw_dir == str(PROJECT_ROOT / "var" / "raw")
    remote = _conf(None, "s3a://bucket/warehouse")
    assert remote.warehouse_dir == "s3a://bucket/warehouse"


class SparkStarted(Exception):
    """Raised in place of starting Spark: the command got past its up-front checks."""


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spark sessions the command asked for (none is started)."""
    import jobs.spark_session

    started: list[str] = []

    def build(*_args: Any, app_name: str = "", **_kwargs: Any) -> None:
        started.append(app_name)
        raise SparkStarted(app_name)

    monkeypatch.setattr(jobs.spark_session, "build_spark_session", build)
    return started


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_cli_pipeline_with_a_bad_policy_exits_2_before_spark_starts(
    tmp_path: Path, no_spark: list[str]
) -> None:
    policy = tmp_path / "recommend.yaml"
    policy.write_text("lookback_days: 0\n")
    result = CliRunner().invoke(
        app, ["pipeline", "--from", DAY, "--raw", str(tmp_path), "--policy", str(policy)]
    )
    assert result.exit_code == 2, result.output
    assert no_spark == []  # refused before Spark (and so before ingest)
    output = result.output.replace("\n", "")
    assert len(_error_lines(result.output)) == 1
    assert f"recommendation policy {policy}" in output
    assert "lookback_days = 0 is out of range (allowed: 1 <= lookback_days <= 3660)" in output
    assert "Traceback" not in result.output and not isinstance(result.exception, SparkStarted)


def test_cli_pipeline_with_a_missing_policy_names_it_and_the_option(
    tmp_path: Path, no_spark: list[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    result = CliRunner().invoke(app, ["pipeline", "--from", DAY, "--policy", str(missing)])
    assert result.exit_code == 2 and no_spark == []
    output = result.output.replace("\n", "")
    assert len(_error_lines(result.output)) == 1
    assert str(missing) in output and "(--policy)" in output


def test_cli_pipeline_without_recommend_does_not_read_the_policy(
    tmp_path: Path, no_spark: list[str]
) -> None:
    (tmp_path / f"date={DAY}").mkdir()
    (tmp_path / f"date={DAY}" / "part-r1-00000.parquet").touch()  # the day has a raw file
    result = CliRunner().invoke(
        app,
        [
            "pipeline", "--from", DAY, "--no-recommend", "--raw", str(tmp_path),
            "--policy", str(tmp_path / "nope.yaml"),
        ],
    )  # fmt: skip
    # Got as far as starting Spark (whose stand-in fails there, reported as a failure of the
    # run, exit 70), not refused for the policy it does not need.
    assert no_spark == ["flowctl"]
    assert result.exit_code == 70 and "nope.yaml" not in result.output
    # Said, though: it was passed over without a word (a review).
    assert (
        "warning: --policy is not read: only recommend reads it, and --no-recommend leaves it out"
        in result.stderr
    )


def test_a_spark_job_with_a_bad_conf_exits_2_like_the_pipeline(
    tmp_path: Path, no_spark: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """jobs/cli.py start_job, behind every spark-submit entry point: a conf error is a usage error
    (exit 2, as jobs/pipeline.py and `flowctl pipeline`), one line on stderr, before Spark."""
    from jobs import recommend

    missing = tmp_path / "nope.yaml"
    with pytest.raises(SystemExit) as exited:
        recommend.main(["--date", DAY, "--conf", str(missing)])
    assert exited.value.code == 2
    assert no_spark == []
    err = capsys.readouterr().err
    assert _error_lines(err) == [err.strip()]
    assert f"pipeline conf {missing}" in err


def test_start_job_exits_2_on_a_conf_that_is_not_yaml(
    tmp_path: Path, no_spark: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.cli import date_range_parser, parse_date_range, start_job

    broken = tmp_path / "broken.yaml"
    broken.write_text("spark: [unclosed\n")
    args = parse_date_range(date_range_parser("t"), ["--date", DAY, "--conf", str(broken)])
    with pytest.raises(SystemExit) as exited:
        start_job(args, "t")
    assert exited.value.code == 2 and no_spark == []
    assert "is not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        # Every key of a section commented out: YAML null, the section's defaults.
        ("spark:\n  # master: local[2]\n", None),
        ('spark: "local[2]"\n', "spark: should be a mapping of settings, got 'local[2]'"),
        ("paths: var/raw\n", "paths: should be a mapping of settings, got 'var/raw'"),
        ("spark: {conf: [a, b]}\n", "spark.conf: should be a mapping of settings"),
        ("spark: {conf: {spark.x: null}}\n", "spark.conf.spark.x: should be a string, number or"),
        ("paths: {raw: 5}\n", "paths.raw: should be a valid string, got 5"),
        # A quoted boolean is a string: bool("false") would be True.
        ('delta: {resolve_jars: "false"}\n', "delta.resolve_jars: should be a valid boolean"),
        (
            'ingest: {validate_with_great_expectations: "no"}\n',
            "ingest.validate_with_great_expectations: should be a valid boolean, got 'no'",
        ),
        (
            "paths: {raws: /elsewhere}\n",
            "paths.raws: unknown key (did you mean 'raw'? known: raw, warehouse, quality)",
        ),
        ("sprak: {master: x}\n", "sprak: unknown key (did you mean 'spark'?"),
        (
            "ingest: {max_rows_from_files_quarantined_whole: -1}\n",
            "ingest.max_rows_from_files_quarantined_whole: should be greater than or equal to 0, "
            "got -1",
        ),
        ("span: {keep_in_memory_max_mb: 1.5}\n", "span.keep_in_memory_max_mb: should be a valid "),
        ("span: {sort_queue_segments_max_mb: -1}\n", "span.sort_queue_segments_max_mb: "),
        (
            "spark: {concurrent_jobs: 0}\n",
            "spark.concurrent_jobs: should be greater than or equal to 1, got 0",
        ),
    ],
)
def test_conf_keys_and_types_are_checked_and_named(
    tmp_path: Path, document: str, expected: str | None
) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text(document)
    if expected is None:
        assert load_conf(conf).spark_master is None  # left to spark-submit
        return
    with pytest.raises(ConfError) as raised:
        load_conf(conf)
    assert str(raised.value).startswith(f"pipeline conf {conf}: ")
    assert expected in str(raised.value)


def test_cli_pipeline_with_a_conf_of_the_wrong_shape_exits_2_with_one_line(
    tmp_path: Path, no_spark: list[str]
) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text("spark:\n  conf: [a]\npaths: {raws: x}\n")
    result = CliRunner().invoke(app, ["pipeline", "--from", DAY, "--conf", str(conf)])
    assert result.exit_code == 2 and no_spark == []
    assert len(_error_lines(result.output)) == 1 and "Traceback" not in result.output
    output = result.output.replace("\n", "")
    assert "spark.conf: should be a mapping" in output and "paths.raws: unknown key" in output


def test_the_bundled_conf_is_valid() -> None:
    conf = load_conf()
    assert conf.spark_master == "local[2]" and conf.resolve_delta_jars
    assert conf.spark_settings["spark.sql.shuffle.partitions"] == "4"
    assert conf.span_in_memory_max_bytes == 4 * 1024 * 1024
    assert conf.sort_queue_segments_max_bytes == 40 * 1024 * 1024
    assert conf.concurrent_jobs == 2

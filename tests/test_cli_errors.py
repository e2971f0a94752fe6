"""A bad scenario file or argument is ONE ``error:`` line naming the file and the field, exit
status 2, never a traceback, and nothing written (README); unknown fields get the closest known
one. Found by a new-user trial; no Spark here (the dashboard refuses before Spark starts)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl.cli import app, help_from_docstring
from flowctl_core.scenario import BUNDLED_DIR, ScenarioError, load_scenario
from jobs.cli import date_range_parser, parse_date_range

runner = CliRunner()
WORST_CASE = (BUNDLED_DIR / "qpid-165-worst-case.yaml").read_text(encoding="utf-8")


def _scenario(tmp_path: Path, text: str, name: str = "trial.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def spark_never_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that starts Spark fails the test: these refusals come before it."""
    import jobs.spark_session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(jobs.spark_session, "build_spark_session", no_spark)


@pytest.mark.parametrize(
    ("start", "reason"),
    [("2026-13-02", "month must be in 1..12"), ("2026-02-30T09:00:00Z", "day is out of range")],
)
def test_an_impossible_date_is_one_error_naming_the_field(
    tmp_path: Path, start: str, reason: str
) -> None:
    bad = _scenario(tmp_path, re.sub(r"(?m)^start: .*$", f"start: {start}", WORST_CASE))
    out = tmp_path / "out"
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(out)]))
    assert line.startswith(f"error: {bad}: start: invalid date or time {start!r}: {reason}")
    assert "(line 4)" in line
    assert not out.exists()


def test_an_impossible_date_deeper_down_names_its_path(tmp_path: Path) -> None:
    bad = _scenario(
        tmp_path,
        WORST_CASE.replace(
            "{name: C2, capacity: 15,", "{name: C2, start_s: 2026-02-30, capacity: 15,"
        ),
    )
    with pytest.raises(ScenarioError, match=r": producers\.1\.start_s: invalid date or time"):
        load_scenario(bad)


def test_out_that_is_a_file_is_refused_and_nothing_written(tmp_path: Path) -> None:
    afile = tmp_path / "passwd"
    afile.write_text("root\n")
    line = _one_error_line(
        runner.invoke(app, ["simulate", "qpid-165-worst-case", "--out", str(afile)])
    )
    assert line == f"error: --out {afile}: is a file, not a folder"
    under = afile / "raw"
    line = _one_error_line(
        runner.invoke(app, ["simulate", "qpid-165-worst-case", "--out", str(under)])
    )
    assert line == f"error: --out {under}: is under {afile}, a file, not a folder"
    assert afile.read_text() == "root\n"
    assert sorted(tmp_path.iterdir()) == [afile]


def test_dashboard_refuses_a_warehouse_without_gold_tables_before_spark(
    tmp_path: Path, spark_never_starts: None
) -> None:
    warehouse = tmp_path / "x" / "nowh"
    line = _one_error_line(runner.invoke(app, ["dashboard", "--warehouse", str(warehouse)]))
    assert line.startswith(f"error: no gold tables under {warehouse}/gold (")
    assert line.endswith("; run flowctl pipeline first")
    assert not (tmp_path / "x").exists()  # no tables, no report.html


def test_dashboard_job_entry_point_refuses_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs import dashboard

    conf = tmp_path / "pipeline.yaml"
    conf.write_text(f"paths:\n  warehouse: {tmp_path / 'nowh'}\n")
    assert dashboard.main(["--conf", str(conf), "--out", str(tmp_path / "r.html")]) == 2
    assert "error: no gold tables under" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.yaml"]


def test_errors_are_never_wrapped(tmp_path: Path) -> None:
    # Not a terminal (CliRunner, like CI or a pipe): Rich would fold at 80 columns.
    deep = tmp_path / ("a-rather-long-folder-name-" * 6) / "missing-scenario.yaml"
    line = _one_error_line(runner.invoke(app, ["simulate", str(deep), "--out", "/tmp/unused"]))
    assert len(line) > 200
    assert line == f"error: {deep}: no such scenario file or bundled scenario"


def test_a_mistyped_bundled_scenario_gets_the_closest_name() -> None:
    line = _one_error_line(runner.invoke(app, ["simulate", "bursty-produce", "--out", "/tmp/x"]))
    assert line == (
        "error: bursty-produce: no such scenario file or bundled scenario; "
        "did you mean 'bursty-producer'?"
    )
    line = _one_error_line(runner.invoke(app, ["simulate", "zzz", "--out", "/tmp/x"]))
    assert line == (
        "error: zzz: no such scenario file or bundled scenario (flowctl scenarios lists them)"
    )


def test_an_unknown_field_gets_the_closest_known_one(tmp_path: Path) -> None:
    bad = _scenario(tmp_path, WORST_CASE.replace("capacity: 50, routing_key:", "routing_kye:"))
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path)]))
    assert line.startswith(
        f"error: {bad}: producers.0.routing_kye: unknown field (did you mean 'routing_key'? known: "
        "name, capacity, exchange, routing_key,"
    )


def test_a_naive_start_names_start(tmp_path: Path) -> None:
    bad = _scenario(tmp_path, WORST_CASE.replace("2026-03-02T11:00:00Z", "2026-03-02T11:00:00"))
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path)]))
    assert line == f"error: {bad}: start: needs a time zone, e.g. 2026-01-01T00:00:00Z (line 4)"


def test_an_unknown_producer_names_the_step_field(tmp_path: Path) -> None:
    bad = _scenario(tmp_path, WORST_CASE.replace("send: {producer: C2,", "send: {producer: loadr,"))
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path)]))
    assert line == (
        f"error: {bad}: steps.1.send.producer: unknown producer 'loadr' (producers: 'C1', 'C2')"
        " (line 16)"
    )


def test_whatif_help_says_what_each_aim_must_do() -> None:
    result = runner.invoke(app, ["whatif", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert "fails what the change is for" in text
    assert "must cut the overshoot, the rejections or the evictions without more time" in text
    assert "must cut the time stopped or the episodes without more rejections (or evictions" in text
    assert "(flapping) must cut the episodes without more rejections or evictions" in text
    assert "cuts neither its overshoot nor its rejections, or makes it stop longer" not in text


def test_help_wraps_each_paragraph_of_a_command_docstring_as_one() -> None:
    """Piped (80 columns), a command's help is wrapped by the terminal, not broken where the
    docstring's lines end: each help line but a paragraph's last is close to the full width."""
    result = runner.invoke(app, ["probe", "publish", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    prose = result.output.split("╭")[0].splitlines()
    paragraphs = [p.splitlines() for p in "\n".join(line.rstrip() for line in prose).split("\n\n")]
    description = [
        lines for lines in paragraphs if "".join(lines).strip() and "Usage:" not in "".join(lines)
    ]
    assert len(description) == 2
    for lines in description:
        assert all(len(line) >= 60 for line in lines[:-1]), lines
    assert "how long the sender had messages to send and no credit" in " ".join(
        result.output.split()
    )


def test_help_from_docstring_keeps_paragraphs_and_joins_their_lines() -> None:
    doc = """First line
        goes on.

        Second paragraph,
        two lines.
        """
    assert help_from_docstring(doc) == "First line goes on.\n\nSecond paragraph, two lines."
    assert help_from_docstring(doc + "\f\n        Not for the help.") == help_from_docstring(doc)


def test_job_entry_points_word_a_bad_date_as_flowctl(capsys: pytest.CaptureFixture[str]) -> None:
    for option in ("--date", "--from", "--to"):
        parser = date_range_parser("test")
        with pytest.raises(SystemExit) as exited:
            parse_date_range(parser, [option, "2026-3-2"])
        assert exited.value.code == 2
        # One line, as flowctl's own, saying where the usage is rather than printing it.
        assert capsys.readouterr().err.splitlines() == [
            f"error: argument {option}: expected YYYY-MM-DD, got '2026-3-2' "
            f"(see {parser.prog} --help)"
        ]


def test_whatif_checks_a_local_recommendations_table_but_leaves_a_uri_to_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobs.spark_session

    class SparkStarted(Exception):
        pass

    def spark_started(*args: object, **kwargs: object) -> None:
        raise SparkStarted

    monkeypatch.setattr(jobs.spark_session, "build_spark_session", spark_started)
    monkeypatch.setenv("FLOWCTL_LOG_DIR", str(tmp_path / "logs"))
    local = tmp_path / "nowhere"
    line = _one_error_line(
        runner.invoke(app, ["whatif", "qpid-165-worst-case", "--recommendations", str(local)])
    )
    assert line == f"error: {local}: not a Delta table (run `flowctl pipeline` first)"
    remote = runner.invoke(
        app, ["whatif", "qpid-165-worst-case", "--recommendations", "s3a://bucket/recs"]
    )
    # Past the local check, on to Spark: the stand-in's failure is the one-line exit 70.
    assert remote.exit_code == 70
    assert remote.output.startswith("error: whatif: Spark failure: SparkStarted"), remote.output


@pytest.mark.parametrize("where", ["folder", "under_a_file"])
def test_dashboard_refuses_an_out_it_cannot_write_before_spark(
    tmp_path: Path, spark_never_starts: None, where: str
) -> None:
    """Found by a new-user trial: ``--out`` naming a folder, or a path under a file, failed with
    a traceback after Spark had read every gold table."""
    warehouse = tmp_path / "wh"
    (warehouse / "gold" / "queue_flow_daily" / "_delta_log").mkdir(parents=True)
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "reports" if where == "folder" else tmp_path / "afile" / "r.html"
    if where == "folder":
        out.mkdir()
    line = _one_error_line(
        runner.invoke(app, ["dashboard", "--warehouse", str(warehouse), "--out", str(out)])
    )
    expected = "is a folder; give the page's file name" if where == "folder" else "is a file"
    assert line.startswith(f"error: --out {out}: ") and expected in line


# A Spark setting whose value Spark refuses used to hang the job: PySpark converts each Java error
# by reading the session's settings, which fails again, without end. A new JVM each, so that the
# test session's own Spark is not given the bad setting.
@pytest.mark.spark
@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "spark.sql.shuffle.partitions: 4",
            "spark.conf.spark.sql.shuffle.partitions: [INVALID_CONF_VALUE.TYPE_MISMATCH] The "
            "value 'four' in the config \"spark.sql.shuffle.partitions\" is invalid",
        ),
        ("spark.driver.memory: 6g", "Spark's JVM exited before it started"),
        # Refused before a JVM starts: spark-submit would print its stack trace first.
        ('master: "local[2]"', "spark.master 'locl[2]' is not a master URL"),
    ],
)
def test_a_spark_setting_spark_refuses_is_one_error_line(
    tmp_path: Path, setting: str, expected: str
) -> None:
    import subprocess
    import sys

    from jobs.config import DEFAULT_CONF

    bad_value = {
        "spark.sql.shuffle.partitions: 4": "four",
        "spark.driver.memory: 6g": "6gb",
        'master: "local[2]"': "locl[2]",
    }
    text = DEFAULT_CONF.read_text(encoding="utf-8")
    assert setting in text
    key = setting.split(":")[0]
    conf = tmp_path / "pipeline.yaml"
    conf.write_text(text.replace(setting, f"{key}: {bad_value[setting]}"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "jobs.episodes", "--date", "2026-03-02", "--conf", str(conf)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2, done.stderr
    assert errors == [errors[0]] and errors[0].startswith(f"error: pipeline conf {conf}: ")
    assert expected in errors[0] and "Traceback" not in done.stderr
    if key == "master":
        assert "Exception in thread" not in done.stderr, done.stderr


@pytest.mark.parametrize(("hours", "why"), [("-5", "below Delta's safety minimum"),
                                            ("1.5", "expected whole hours")])  # fmt: skip
def test_maintenance_refuses_a_retention_delta_would_not_keep(
    capsys: pytest.CaptureFixture[str], hours: str, why: str
) -> None:
    """Found by a new-user trial: a negative --retention-hours ran (and Delta ignored it)."""
    from jobs import maintenance

    with pytest.raises(SystemExit) as exited:
        maintenance.main(["--date", "2026-03-02", "--retention-hours", hours])
    assert exited.value.code == 2
    assert why in capsys.readouterr().err


def test_an_impossible_date_and_a_reversed_range_say_which_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by a new-user trial: 2026-02-30 is of the right shape but no date, and was answered
    "expected YYYY-MM-DD"; a reversed range did not say which days."""
    with pytest.raises(SystemExit):
        parse_date_range(date_range_parser("test"), ["--date", "2026-02-30"])
    assert "'2026-02-30' is not a date: day is out of range for month" in capsys.readouterr().err
    line = _one_error_line(runner.invoke(app, ["pipeline", "--from", "2026-02-30"]))
    assert line == "error: --from: '2026-02-30' is not a date: day is out of range for month"
    reversed_range = ["pipeline", "--from", "2026-03-03", "--to", "2026-03-02"]
    line = _one_error_line(runner.invoke(app, reversed_range))
    assert line == "error: --to 2026-03-02 is before --from 2026-03-03"


def test_a_policy_key_typo_gets_the_closest_known_one(tmp_path: Path) -> None:
    from jobs.config import ConfError
    from jobs.recommend import load_policy

    policy = tmp_path / "policy.yaml"
    policy.write_text("lookback_daysx: 3\n", encoding="utf-8")
    with pytest.raises(ConfError, match=r"lookback_daysx \(did you mean 'lookback_days'"):
        load_policy(policy)


def test_demo_out_never_removes_a_folder_it_did_not_write(tmp_path: Path) -> None:
    """``flowctl demo --out`` clears an earlier demo's output; a mistyped --out naming a folder of
    the user's (or a file) is refused before anything is simulated or removed."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (mine / "raw").mkdir()
    line = _one_error_line(runner.invoke(app, ["demo", "--out", str(mine)]))
    assert line == (
        f"error: --out {mine}: holds notes.txt, which a demo does not write: name a new folder "
        "or an earlier demo's (or --keep)"
    )
    assert (mine / "notes.txt").read_text() == "keep me" and (mine / "raw").is_dir()
    afile = tmp_path / "afile"
    afile.write_text("")
    line = _one_error_line(runner.invoke(app, ["demo", "--out", str(afile)]))
    assert line == f"error: --out {afile}: is a file, not a folder"


def test_a_workload_longer_than_a_year_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Found by a fault trial: ``duration_s: 1e12`` started writing without a word of its size."""
    bad = _scenario(
        tmp_path,
        "name: huge\nkind: workload\nduration_s: 1e12\nqueues: [{name: q}]\n"
        "producers: [{name: p, routing_key: q, rate: 10}]\n",
    )
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "o")]))
    assert "duration_s: 1e+12 s is 11,574,074 days of virtual time; at most 31,622,400 s" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("command", "text", "expected"),
    [
        (
            "simulate",
            "name: x\n  bad: [\n",
            ": not valid YAML: line 2, column 6: mapping values are not allowed here",
        ),
        (
            "--conf",
            "spark: [unclosed\n",
            " is not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>' "
            "(while parsing a flow sequence at line 1)",
        ),
        (
            "--policy",
            'queue:\n  safety_margin: "\\q"\n',
            " is not valid YAML: line 2, column 20: found unknown escape character 'q' "
            "(while scanning a double-quoted scalar)",
        ),
    ],
)
def test_a_file_that_is_not_yaml_is_one_line_with_its_line_and_column(
    tmp_path: Path, command: str, text: str, expected: str, spark_never_starts: None
) -> None:
    """PyYAML's own message is four lines naming "<unicode string>" (a new-user trial)."""
    bad = _scenario(tmp_path, text, "bad.yaml")
    if command == "simulate":
        args = ["simulate", str(bad), "--out", str(tmp_path / "out")]
    else:
        args = ["pipeline", "--from", "2026-03-02", "--raw", str(tmp_path), command, str(bad)]
    line = _one_error_line(runner.invoke(app, args))
    assert line.endswith(f"{bad}{expected}"), line
    assert "<unicode string>" not in line


def test_status_refuses_a_warehouse_that_does_not_exist_before_spark(
    tmp_path: Path, spark_never_starts: None
) -> None:
    """As the dashboard refuses one: a mistyped --warehouse is not an empty table and exit 0
    (``status --check`` in a script would pass on it)."""
    missing = tmp_path / "nowh"
    for check in ([], ["--check"]):
        line = _one_error_line(runner.invoke(app, ["status", "--warehouse", str(missing), *check]))
        assert line == f"error: {missing}: no such warehouse (no job has run on it; mistyped?)"
    assert not missing.exists()


def test_pipeline_refuses_a_raw_folder_that_does_not_exist_before_spark(
    tmp_path: Path, spark_never_starts: None
) -> None:
    """A mistyped --raw took a JVM's start (6 s) before the ingest refused it."""
    missing = tmp_path / "rwa"
    line = _one_error_line(
        runner.invoke(app, ["pipeline", "--from", "2026-03-02", "--raw", str(missing)])
    )
    assert line == (
        f"error: ingest refused, nothing written: raw folder {missing} does not exist (a wrong "
        "--raw or paths.raw?)"
    )


def test_pipeline_refuses_days_without_raw_files_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk-through: `flowctl pipeline --from` a day the raw folder has no file of took a JVM's
    start (5-14 s) before the ingest's refusal; the same line now comes before it. Where bronze
    has a folder of the days, the ingest's own refusal (that ingesting would delete them) needs
    its Delta log: Spark starts, as here (stopped there)."""
    import jobs.spark_session
    from tests.conftest import at, event, write_raw

    raw = tmp_path / "raw"
    write_raw(raw, [event(1, at(1, 9), "queue_declared", queue="q")])  # 2024-01-01 only
    (raw / "date=2024-01-02").mkdir()  # a day's folder without a file is no raw file
    warehouse = tmp_path / "warehouse"
    started: list[str] = []

    def no_spark(*args: object, **kwargs: object) -> None:
        started.append("spark")
        raise RuntimeError("Spark would start here")

    monkeypatch.setattr(jobs.spark_session, "build_spark_session", no_spark)
    asked = ["pipeline", "--raw", str(raw), "--warehouse", str(warehouse)]
    line = _one_error_line(
        runner.invoke(app, [*asked, "--from", "2024-01-02", "--to", "2024-01-03"])
    )
    assert line == (
        "error: ingest refused, nothing written: no raw files for 2024-01-02 .. 2024-01-03 "
        f"(looked in {raw}/date=2024-01-02 .. date=2024-01-03): a wrong day or --raw / "
        "paths.raw? --allow-empty-days ingests nothing on purpose"
    )
    assert started == [] and not warehouse.exists()
    # A range with one day of files, a day allowed empty, or a day bronze has: Spark starts.
    (warehouse / "bronze" / "broker_events" / "date=2024-01-03").mkdir(parents=True)
    for more in (
        ["--from", "2024-01-01", "--to", "2024-01-02"],
        ["--from", "2024-01-02", "--allow-empty-days"],
        ["--from", "2024-01-03"],
    ):
        runner.invoke(app, [*asked, *more])
    assert started == ["spark"] * 3


def test_pipeline_takes_a_warehouse_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's "give a run its own --warehouse": the session's conf (what every job of the
    run reads its paths from) names it. Stopped where Spark would start."""
    import jobs.spark_session

    warehouses: list[str] = []

    def no_spark(conf: Any, *args: object, **kwargs: object) -> None:
        warehouses.append(conf.warehouse_dir)
        raise RuntimeError("Spark would start here")

    monkeypatch.setattr(jobs.spark_session, "build_spark_session", no_spark)
    warehouse = tmp_path / "wh"
    (tmp_path / "date=2026-03-02").mkdir()
    (tmp_path / "date=2026-03-02" / "part-r1-00000.parquet").touch()  # a file of the day
    result = runner.invoke(
        app,
        ["pipeline", "--from", "2026-03-02", "--raw", str(tmp_path), "--warehouse", str(warehouse)],
    )
    assert "No such option" not in result.output, result.output
    assert warehouses == [str(warehouse)]


def test_field_errors_give_their_line_and_say_what_a_date_looks_like(tmp_path: Path) -> None:
    """Every error of a file gets its line (the file's deepest node on the field's path; none for
    a field missing from the top level), pydantic's "Value error, " prefix goes, and a start
    that is no date says what one looks like (a new-user trial)."""
    bad = _scenario(
        tmp_path,
        "name: x\nbroker: {name: b}\nstart: yesterday\nqueues:\n"
        "  - {name: q, arguments: {qpid.flow_stop_cuont: 5}}\n",
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(bad)
    assert str(raised.value).splitlines() == [
        f"{bad}: invalid scenario (3 errors)",
        "  kind: Field required",
        "  start: expected a date and time such as 2026-03-02T09:00:00Z, got 'yesterday' (line 3)",
        "  queues.0.arguments: unknown argument 'qpid.flow_stop_cuont'; did you mean "
        "'qpid.flow_stop_count'? (known qpid.* arguments: qpid.max_count, qpid.max_size, "
        "qpid.policy_type, qpid.flow_stop_count, qpid.flow_resume_count, qpid.flow_stop_size, "
        "qpid.flow_resume_size) (line 5)",
    ]


def test_an_impossible_date_is_listed_with_the_files_other_errors(tmp_path: Path) -> None:
    """A timestamp that is no date no longer stops the load alone: it is validated with the rest
    of the file, so one run lists every problem (a new-user trial found only the date reported)."""
    bad = _scenario(
        tmp_path,
        "name: x\nkind: scripted\nbroker: {name: b}\nstart: 2026-13-02\nqueues:\n"
        "  - {name: q, arguments: {qpid.flow_stop_cuont: 5}}\n",
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(bad)
    lines = str(raised.value).splitlines()
    assert lines[0] == f"{bad}: invalid scenario (2 errors)"
    assert lines[1] == "  start: invalid date or time '2026-13-02': month must be in 1..12 (line 4)"
    assert lines[2].startswith("  queues.0.arguments: unknown argument 'qpid.flow_stop_cuont';")
    assert lines[2].endswith("(line 6)")
    assert len(lines) == 3


def test_a_value_and_an_unknown_key_of_one_arguments_mapping_are_reported_together(
    tmp_path: Path,
) -> None:
    """A resume of 1.5 beside a mistyped key: the key was reported only once the value was
    fixed, a run later (a README walk-through)."""
    bad = _scenario(
        tmp_path,
        "name: x\nkind: scripted\nbroker: {name: b}\nstart: 2026-03-02T09:00:00Z\nqueues:\n"
        "  - {name: q, arguments: {qpid.flow_stop_cnt: 5, qpid.flow_resume_count: 1.5}}\n",
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(bad)
    (line,) = str(raised.value).splitlines()
    assert line.startswith(
        f"{bad}: queues.0.arguments: queue 'q': qpid.flow_resume_count must be a non-negative "
        "integer, got 1.5; unknown argument 'qpid.flow_stop_cnt'; did you mean "
        "'qpid.flow_stop_count'?"
    ), line
    assert line.endswith("(line 6)")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["simulat"],
            "error: flowctl: No such command 'simulat'. Did you mean 'simulate'? "
            "(see `flowctl --help`)",
        ),
        (
            ["simulate", "x", "--outt", "y"],
            "error: flowctl simulate: No such option: --outt (Possible options: --out) "
            "(see `flowctl simulate --help`)",
        ),
    ],
)
def test_a_usage_error_is_one_error_line_too(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `flowctl` command (main): an unknown command or option was a box of five lines."""
    from flowctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_the_command_alone_or_with_help_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    from flowctl.cli import main

    for args, code in (([], 2), (["--help"], 0)):
        with pytest.raises(SystemExit) as exited:
            main(args)
        assert exited.value.code == code
        assert "Usage: flowctl [OPTIONS] COMMAND [ARGS]..." in capsys.readouterr().out


def test_a_name_cut_short_gets_the_one_it_begins() -> None:
    """`bursty` is too short beside `bursty-producer` to be close by spelling, but only it begins
    so; a beginning two names share suggests neither."""
    from flowctl_core.errors import closest_name

    names = ["bursty-producer", "qpid-165-worst-case", "qpid-4000-8k"]
    assert closest_name("bursty", names) == "bursty-producer"
    assert closest_name("qpid-165-worstcase", names) == "qpid-165-worst-case"
    assert closest_name("qpid", names) is None
    assert closest_name("", names) is None
    line = _one_error_line(runner.invoke(app, ["simulate", "bursty", "--out", "x"]))
    assert line.endswith(
        "no such scenario file or bundled scenario; did you mean 'bursty-producer'?"
    )


def test_a_sweep_of_a_mistyped_queue_gets_the_closest_one() -> None:
    line = _one_error_line(
        runner.invoke(app, ["sweep", "bursty-producer", "--knob", "qpid.flow_stop_count",
                            "--entity", "event", "--values", "1000..2000+1000"])
    )  # fmt: skip
    assert line == (
        "error: bursty-producer: 'event' is no Qpid queue: qpid.flow_stop_count is Qpid's; "
        "did you mean 'events'?"
    )


#: A small workload every case below breaks in one place (an audit's bad inputs, each of which
#: crashed the run with "unexpected error", ran on a wrong reading, or was refused for a field
#: it never gave).
_QPID = "name: t\nkind: workload\nduration_s: 1\nqueues: [{name: q}]\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            _QPID + "producers: [{name: p, routing_key: q, rate: 10, capacity: true}]\n",
            "producers.0.capacity: Input should be a valid integer, got true (line 5)",
        ),
        (
            _QPID + "producers: [{name: p, routing_key: q, rate: 10, capacity: 9.5}]\n",
            "producers.0.capacity: Input should be a valid integer, got 9.5 (line 5)",
        ),
        (
            _QPID.replace("duration_s: 1", "duration_s: true"),
            "duration_s: Input should be a valid number, not a boolean (line 3)",
        ),
        (
            _QPID + "producers: [{name: p, routing_key: q, rate: 10,\n"
            "  capacity: 99999999999999999999999}]\n",
            "producers.0.capacity: Input should be less than or equal to 9223372036854775807",
        ),
        (
            "name: t\nkind: scripted\nqueues: [{name: q}]\nsteps: [{advance: {seconds: .inf}}]\n",
            "steps.0.advance.seconds: Input should be a finite number, got .inf (line 4)",
        ),
        (
            _QPID.replace("kind: workload", "kind: workload\nstart: 9999-12-31T23:59:55Z").replace(
                "duration_s: 1", "duration_s: 10"
            ),
            "duration_s: the run would end 10 s after 9999-12-31T23:59:55+00:00, past 9999-12-31",
        ),
        (
            _QPID + "producers: [{name: p, routing_key: q, rate: 10}]\n"
            "consumers: [{name: p, queue: q}]\n",
            "consumers: names shared by a producer and a consumer: ['p']",
        ),
        (
            "name: t\nkind: workload\nduration_s: 1\nseed: 1\nseed: 2\nqueues: [{name: q}]\n",
            "not valid YAML: line 5, column 1: key 'seed' given twice (first at line 4)",
        ),
        (
            "name: r\nkind: workload\nduration_s: 1\nqueues: [{name: q}]\nconnections:\n"
            "  - {name: c, protocol: amqp-0-9-1,\n"
            "     consumers: [{name: r, queue: q, credit: 100000}]}\n",
            "connections.0.consumers.0.credit: consumer 'r': 100,000 is past the most it can "
            "grant, 65,535 (basic.qos prefetch-count is a short) (line 7)",
        ),
        (
            "name: r\nkind: workload\nduration_s: 1\nqueues: [{name: q}]\nconnections:\n"
            "  - {name: c, protocol: amqp-1.0,\n"
            "     consumers: [{name: r, queue: q, credit: 4294967296}]}\n",
            "consumer 'r': 4,294,967,296 is past the most it can grant, 4,294,967,295 (AMQP 1.0 "
            "link credit is a uint)",
        ),
    ],
)
def test_a_scenario_value_no_broker_or_clock_can_take_is_refused_naming_its_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    bad = _scenario(tmp_path, text)
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "o")]))
    assert expected in line, line
    assert not (tmp_path / "o").exists()


def test_a_scenario_that_is_not_utf8_text_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\nkind: workload\n")
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "o")]))
    assert line == f"error: {bad}: not UTF-8 text (byte 0xe9 at offset 9): save it as UTF-8"


def test_a_prefetch_below_the_default_top_up_point_needs_no_top_up_setting(tmp_path: Path) -> None:
    """A 0.9.1 consumer with a prefetch of 50 was refused for the 1.0-only top_up_below default
    (100) it never gave; it now tops up at half its credit, and a value given is still checked."""
    from flowctl_core.scenario import load_scenario

    text = (
        "name: r\nkind: workload\nduration_s: 1\nqueues: [{name: q}]\nconnections:\n"
        "  - {name: c, protocol: amqp-0-9-1, consumers: [{name: r, queue: q, credit: 50}]}\n"
        "  - {name: d, protocol: amqp-1.0, consumers: [{name: s, queue: q}]}\n"
    )
    scenario = load_scenario(_scenario(tmp_path, text))
    consumers = [c for connection in scenario.connections for c in connection.consumers]
    assert [(c.credit, c.top_up_below) for c in consumers] == [(50, 25), (200, 100)]
    # Given on the 1.0 consumer, past its credit: checked (on the 0.9.1 one it is refused as a
    # 1.0 setting, tests/engine/test_scenario_reachability.py).
    given = _scenario(
        tmp_path, text.replace("queue: q}]}", "queue: q, credit: 50, top_up_below: 60}]}"), "g.yaml"
    )
    line = _one_error_line(
        runner.invoke(app, ["simulate", str(given), "--out", str(tmp_path / "o")])
    )
    assert "connections.1.consumers.0.top_up_below: consumer 's': top_up_below (60) exceeds" in line


@pytest.mark.parametrize("run_id", ["colon:run", "a{b}", "glob*?"])
def test_a_run_id_spark_cannot_read_as_a_file_name_is_refused(tmp_path: Path, run_id: str) -> None:
    """simulate wrote part-colon:run-00001.parquet, which the ingest then quarantined whole as
    unaddressable_file_name (an audit): the sink refuses such a name, naming the characters."""
    good = _scenario(tmp_path, _QPID + "producers: [{name: p, routing_key: q, rate: 10}]\n")
    args = ["simulate", str(good), "--out", str(tmp_path / "o"), "--run-id", run_id]
    line = _one_error_line(runner.invoke(app, args))
    assert f"run_id {run_id!r}: Spark cannot read a file named with" in line, line
    assert not list((tmp_path / "o").rglob("*.parquet"))


def test_a_run_id_with_a_space_at_an_end_is_refused(tmp_path: Path) -> None:
    """``--run-id ' spaced '`` named files ``part- spaced -00001.parquet``, a run that reads
    alike beside 'spaced' (a review)."""
    good = _scenario(tmp_path, _QPID + "producers: [{name: p, routing_key: q, rate: 10}]\n")
    args = ["simulate", str(good), "--out", str(tmp_path / "o"), "--run-id", " spaced "]
    line = _one_error_line(runner.invoke(app, args))
    assert line == "error: run_id ' spaced ': has a leading or trailing space: give it without"
    assert not list((tmp_path / "o").rglob("*.parquet"))


def test_a_warehouse_that_is_a_file_is_said_so(tmp_path: Path, spark_never_starts: None) -> None:
    """whatif said "not a Delta table (run `flowctl pipeline` first)" for a --warehouse that is
    a file (a review), where simulate's --out says "is a file": every command says it so."""
    afile = tmp_path / "afile"
    afile.write_text("")
    for command in (["whatif", "qpid-165-worst-case"], ["status"], ["dashboard"]):
        line = _one_error_line(runner.invoke(app, [*command, "--warehouse", str(afile)]))
        assert line == f"error: --warehouse {afile}: is a file, not a folder", command
    line = _one_error_line(
        runner.invoke(app, ["whatif", "qpid-165-worst-case", "--recommendations", str(afile)])
    )
    assert line == f"error: --recommendations {afile}: is a file, not a Delta table's folder"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("notaurl", "notaurl: not a broker URL: amqp://[user:password@]host:port"),
        (
            "amqp://u:secret@127.0.0.1:notaport",
            "amqp://u:***@127.0.0.1:notaport: not a broker URL: amqp://[user:password@]host:port",
        ),
    ],
)
def test_probe_publish_refuses_a_url_that_is_no_broker_url(
    tmp_path: Path, url: str, expected: str
) -> None:
    args = ["probe", "publish", url, "q", "--raw", str(tmp_path / "raw"), "--broker", "b"]
    line = _one_error_line(runner.invoke(app, args))
    assert line == f"error: {expected}", line


def test_probe_publish_refuses_a_vhost_for_artemis_before_writing_anything(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "raw"
    args = ["probe", "publish", "amqp://127.0.0.1:1", "q", "--raw", str(raw), "--broker", "b"]
    args += ["--product", "artemis", "--vhost", "tenant-1"]
    line = _one_error_line(runner.invoke(app, args))
    assert line == "error: --vhost 'tenant-1': a RabbitMQ virtual host; Artemis has none"
    assert not raw.exists()
    args[-1] = ""
    line = _one_error_line(runner.invoke(app, args))
    assert line == "error: --vhost '': a RabbitMQ virtual host's name, not empty"


def test_probe_publish_names_its_own_option_for_a_raw_folder_that_is_a_file(
    tmp_path: Path,
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    args = ["probe", "publish", "amqp://127.0.0.1:1", "q", "--raw", str(afile), "--broker", "b"]
    line = _one_error_line(runner.invoke(app, args))
    assert line == f"error: --raw {afile}: is a file, not a folder"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: a\nkind: workload\nduration_s: 1\nartemis:\n  addresses: [{name: metrics}]\n"
            "  producers: [{name: p, address: metrix}]\n",
            "artemis.producers.0.address: artemis producer 'p' sends to unknown address 'metrix'; "
            "did you mean 'metrics'? (line 6)",
        ),
        (
            "name: a\nkind: workload\nduration_s: 1\nartemis:\n  addresses: [{name: jobs}]\n"
            "  consumers: [{name: c, queue: jbos}]\n",
            "artemis.consumers.0.queue: artemis consumer 'c' reads unknown queue 'jbos' (a queue "
            "of an artemis address); did you mean 'jobs'? (line 6)",
        ),
        (
            "name: r\nkind: workload\nduration_s: 1\nqueues: [{name: orders}]\nconnections:\n"
            "  - name: c\n    protocol: amqp-1.0\n    consumers: [{name: r, queue: ordres}]\n",
            "connections.0.consumers.0.queue: connection 'c': link 'r' uses unknown queue "
            "'ordres' (protocol links need a queue from `queues`); did you mean 'orders'? "
            "(line 8)",
        ),
    ],
)
def test_a_cross_reference_in_the_broker_sections_names_its_field_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    """Artemis and RabbitMQ sections said "(top level)" where the Qpid ones name the field and
    its line (an audit)."""
    bad = _scenario(tmp_path, text)
    line = _one_error_line(runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "o")]))
    assert line.endswith(expected), line


def test_counts_in_messages_say_one_in_the_singular() -> None:
    # "1 rows, a set for each of 1 days", "skipped 1 entries" (a README walk-through).
    from flowctl_core.wording import counted

    assert [counted(1, "row"), counted(2, "day"), counted(0, "entry", "entries")] == [
        "1 row",
        "2 days",
        "0 entries",
    ]
    assert counted(12_345, "raw file") == "12,345 raw files"


@pytest.mark.parametrize(
    ("command", "option", "url", "shown"),
    [
        (
            "artemis",
            "--jolokia",
            "localhost:8161/console/jolokia",
            "localhost:8161/console/jolokia",
        ),
        ("artemis", "--jolokia", "http://127.0.0.1:port/jolokia", "http://127.0.0.1:port/jolokia"),
        ("rabbitmq", "--management", "ftp://127.0.0.1:15672", "ftp://127.0.0.1:15672"),
        ("rabbitmq", "--management", "http://u:secret@:15672", "http://u:***@:15672"),
    ],
)
def test_collect_refuses_an_api_url_that_is_no_http_url(
    tmp_path: Path, command: str, option: str, url: str, shown: str
) -> None:
    """urllib's "unknown url type" was read as an API not answering yet, and sampling waited
    for it forever (an audit): the collector is refused before it starts."""
    log = tmp_path / "broker.log"
    log.write_text("")
    raw = str(tmp_path / "raw")
    args = ["collect", command, "--log", str(log), "--raw", raw, option, url, "--once"]
    line = _one_error_line(runner.invoke(app, args))
    assert line == f"error: {option} {shown}: not an HTTP URL: http[s]://host[:port]/path", line
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("ending", ["ok", "ingest failed", "recommend failed"])
def test_pipeline_runs_every_job_before_its_report_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """A new user's trial of `make demo`: the tables and the ingest's accounting printed, then
    recommend ran for minutes under a spinner below what read as the end. Now recommend runs
    first and the report follows every job; an ingest that failed its accounting still gets its
    tables and its accounting line, no recommendations, and exit 1; a recommend that fails
    still gets the report of the jobs before it (their days are written), then its error line.
    Spark and the jobs stubbed: the order of the calls is the claim."""
    import flowctl.cli
    import jobs.pipeline
    import jobs.recommend

    calls: list[str] = []

    def stub(name: str, result: Any = None) -> Any:
        def record(*_: Any, **__: Any) -> Any:
            calls.append(name)
            return result

        return record

    ok = ending != "ingest failed"
    outcome = {"ok": ok, "ingest": {}, "seconds": {"ingest": 1.0}}

    def recommend_failing(*_: Any, **__: Any) -> Any:
        calls.append("recommend")
        raise RuntimeError("the recommend job broke")

    monkeypatch.setattr(flowctl.cli, "_refuse_missing_raw_before_spark", stub("raw checked"))
    monkeypatch.setattr(flowctl.cli, "_spark_session", stub("spark", object()))
    monkeypatch.setattr(jobs.pipeline, "run_pipeline", stub("pipeline", outcome))
    monkeypatch.setattr(
        jobs.recommend,
        "run_recommend",
        recommend_failing if ending == "recommend failed" else stub("recommend", {}),
    )
    monkeypatch.setattr(jobs.pipeline, "most_stopped_queue_rows", stub("queue rows", ([], 0, 0)))
    monkeypatch.setattr(jobs.pipeline, "starved_link_rows", stub("link rows", ([], 0, 0)))
    monkeypatch.setattr(flowctl.cli, "print_daily_metrics", stub("queue table"))
    monkeypatch.setattr(flowctl.cli, "print_starved_links", stub("link table"))
    monkeypatch.setattr(flowctl.cli, "format_ingest_report", stub("accounting", "ACCOUNTED"))
    monkeypatch.setattr(flowctl.cli, "recommendations_line", stub("counts", "RECOMMENDED"))
    result = runner.invoke(
        app, ["pipeline", "--from", "2026-03-02", "--warehouse", str(tmp_path / "wh")]
    )
    report = ["queue rows", "queue table", "link rows", "link table", "accounting"]
    if ending == "recommend failed":
        assert result.exit_code != 0, result.output
        assert calls == ["raw checked", "spark", "pipeline", "recommend", *report]
        assert result.output.index("ACCOUNTED") < result.output.index("the recommend job broke")
        assert "RECOMMENDED" not in result.output
    elif ok:
        assert result.exit_code == 0, result.output
        assert calls == ["raw checked", "spark", "pipeline", "recommend", *report, "counts"]
        assert result.output.index("ACCOUNTED") < result.output.index("RECOMMENDED")
        assert "seconds per job: ingest 1.0" in result.output
    else:
        assert result.exit_code == 1, result.output
        assert calls == ["raw checked", "spark", "pipeline", *report]
        assert "ingest accounting or Great Expectations validation failed" in result.output


@pytest.mark.parametrize("command", [[], ["status"], ["simulate"], ["collect", "artemis"]])
def test_a_flag_shows_no_value_in_the_help(command: list[str]) -> None:
    """typer showed ``<bool>`` beside every on/off flag (``--check``, ``--once``, ``--help``),
    which refuses a value: a new user's `--check true` failed (a review)."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    assert "--help" in result.output


def test_the_version_is_printed() -> None:
    """The version pyproject.toml declares (the installed metadata, which the command reads,
    must not lag a bump of it)."""
    import tomllib

    declared = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"flowctl {declared['project']['version']}\n"


def test_a_scripted_scenario_refuses_another_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scripted scenario's steps draw nothing at random: `--seed -1` wrote its events again,
    the same, under another run id, which the pipeline counted twice (a review). Its own seed is
    taken, and a seed outside the scenario file's range is refused as the file's is."""
    from flowctl.cli import main

    out = tmp_path / "out"
    simulate = ["simulate", "qpid-900-500", "--out", str(out), "--seed"]
    line = _one_error_line(runner.invoke(app, [*simulate, "-1"]))
    assert line == (
        "error: --seed -1: qpid-900-500 is a scripted scenario; its steps draw nothing at "
        "random, so another seed only writes the same events under another run id"
    )
    assert not out.exists()
    assert runner.invoke(app, [*simulate, "0"]).exit_code == 0
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "bursty-producer", "--out", str(out), "--seed", str(2**63)])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "error: flowctl simulate: Invalid value for '--seed': 9223372036854775808 is not a "
        "signed 64-bit integer (the scenario's seed) (see `flowctl simulate --help`)\n"
    )


@pytest.mark.parametrize("command", ["artemis", "rabbitmq"])
def test_collect_once_over_a_file_that_is_no_broker_log_fails(tmp_path: Path, command: str) -> None:
    """`collect --once` over some other file (a typo'd --log) warned and exited 0, so a script
    took it for a collection (a review)."""
    log = tmp_path / "scenario.yaml"
    log.write_text("name: x\nkind: workload\nduration_s: 3\n")
    args = ["collect", command, "--log", str(log), "--raw", str(tmp_path / "raw"), "--once"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[-1] == (
        f"error: --log {log}: none of the 3 lines read begins with a timestamp as "
        f"{'Artemis' if command == 'artemis' else 'RabbitMQ'}'s lines do: not the broker's log"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["sweep", "qpid-165-worst-case", "--knob", "qpid.flow_stop_count", "--entity", "q",
          "--values", "1000", "--values=2000"],
         "error: flowctl sweep: --values is given twice; give it once (one value)"),
        (["pipeline", "--from", "2026-03-02", "--recommend", "--no-recommend"],
         "error: flowctl pipeline: --recommend and --no-recommend are opposites; give one of "
         "them"),
        (["collect", "artemis", "--log", "a.log", "--log", "b.log", "--raw", "r"],
         "error: flowctl collect artemis: --log is given twice; give it once (one value)"),
    ],
)  # fmt: skip
def test_an_option_given_twice_is_refused(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """click keeps an option's last value: `sweep --values 1000 --values 2000` swept 2,000
    alone, and `--recommend --no-recommend` said nothing (a review)."""
    from flowctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert capsys.readouterr().err == line + "\n"
    # After `--`, a token is no option; nor is an option's value that looks like one.
    from flowctl.cli import _refused_options

    assert _refused_options(["simulate", "s", "--out", "o", "--", "--out"]) is None
    assert _refused_options(["simulate", "s", "--out", "o", "--run-id", "--out"]) is None
    assert _refused_options(["simulate", "s", "--run-id=--out", "--out", "o"]) is None
    assert _refused_options(["simulate", "s", "--out=o", "--out", "o"]) is not None


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["simulate", "qpid-165-worst-case", "--out", "o", "--run-id", ""],
         "error: --run-id: empty; leave it out for the derived one"),
        (["whatif", "qpid-165-worst-case", "--recommendations", "", "--warehouse", "w"],
         "error: --recommendations: empty; give the table's folder or URI"),
        (["whatif", "qpid-165-worst-case", "--recommendations", "r", "--warehouse", ""],
         "error: --recommendations and --warehouse: give one (the table, or its warehouse)"),
    ],
)  # fmt: skip
def test_an_empty_value_or_an_option_that_would_do_nothing_is_refused(
    args: list[str], line: str, tmp_path: Path, spark_never_starts: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """An empty --run-id fell back to the derived one, and an empty --recommendations passed the
    check of the two options together, each without a word (a review)."""
    monkeypatch.chdir(tmp_path)
    assert _one_error_line(runner.invoke(app, args)) == line
    assert not (tmp_path / "o").exists()


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    subcommands = getattr(command, "commands", {})
    return [path] + [
        found for name, sub in subcommands.items() for found in _command_paths(sub, (*path, name))
    ]


def test_no_help_is_cut_short_at_80_columns() -> None:
    """A help cell of one long word was cut with an ellipsis at 80 columns
    ("RAW/../collector-state/…", "http://127.0.0.1:8161/c…", "--no-allow-empty-d…": a
    review): every command's help, at 80, has none."""
    from typer.main import get_command

    paths = _command_paths(get_command(app))
    assert ("collect", "artemis") in paths and len(paths) > 10
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (path, result.output)
        assert "…" not in result.output, (path, result.output)


def test_collect_once_going_on_in_a_stack_trace_is_no_refusal(tmp_path: Path) -> None:
    """A cron --once whose session read the broker's lines before, reading on in a stack trace
    (untimed lines), is the broker's log: exit 0, not "not the broker's log" (a review)."""
    log = tmp_path / "artemis.log"
    log.write_text(
        "2026-11-27 10:00:00,000 ERROR [org.apache.activemq.artemis.core.server] AMQ224000: "
        "failure\n"
    )
    args = ["collect", "artemis", "--log", str(log), "--raw", str(tmp_path / "raw"), "--once"]
    assert runner.invoke(app, args).exit_code == 0
    with log.open("a") as more:
        more.write("\tat org.apache.activemq.artemis.A.b(A.java:1)\n\tat java.lang.Thread.run\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["simulate", "qpid-900-500", "--out", ""],
         "error: flowctl simulate: --out is empty; give a path"),
        (["simulate", "qpid-900-500", "--out="],
         "error: flowctl simulate: --out is empty; give a path"),
        (["collect", "artemis", "--log", "", "--raw", "r", "--once"],
         "error: flowctl collect artemis: --log is empty; give a path"),
    ],
)  # fmt: skip
def test_an_empty_path_is_refused(
    args: list[str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """typer reads an empty path as `.`: `simulate --out ""` wrote its event log into the
    working directory (a review)."""
    from flowctl.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert capsys.readouterr().err == line + "\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("stop", "code", "line"),
    [
        (
            "ctrl-c",
            130,
            "error: demo: interrupted: Ctrl-C (SIGINT): what it wrote before is kept; "
            "`flowctl status` names any day a job left behind, and the same command run again "
            "catches it up (exit 130)",
        ),
        (
            "sigterm",
            143,
            "error: demo: interrupted: SIGTERM: what it wrote before is kept; `flowctl status` "
            "names any day a job left behind, and the same command run again catches it up "
            "(exit 143)",
        ),
    ],
)
def test_an_interrupted_command_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], stop: str, code: int, line: str
) -> None:
    """A crash review: Ctrl-C of `flowctl pipeline` printed two lines of Spark's executor and
    nothing of its own, and SIGTERM (a scheduler stopping it) nothing at all. Each is one line
    by jobs/failures.py's table, exit 128 + the signal, said once by the command typed (demo,
    around the pipeline's own decorated step, whose line named the pipeline: a review);
    SIGTERM's handler is the command's only while it runs."""
    import os
    import signal
    import threading
    import time

    import typer

    from flowctl.cli import _one_line_failures

    if stop == "sigterm" and threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's: the SIGTERM would end the worker")

    @_one_line_failures("pipeline")
    def pipeline_step() -> None:
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not interrupt the command")

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(typer.Exit) as exited:
        _one_line_failures("demo")(pipeline_step)()
    assert exited.value.exit_code == code
    assert " ".join(capsys.readouterr().err.split()) == line
    assert signal.getsignal(signal.SIGTERM) == before

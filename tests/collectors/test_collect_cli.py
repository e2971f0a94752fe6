"""``flowctl collect artemis`` as a user types it: a log read once into the event log, a second
invocation going on with the same run, and its refusals as one ``error:`` line (exit 2)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conformance.brokers import free_port
from flowctl.cli import app
from tests.collectors.test_artemis_collector import block, unblock

runner = CliRunner()


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "artemis.log"
    with path.open("a") as handle:
        handle.write("".join(lines))
    return path


def test_collect_once_then_go_on(tmp_path: Path) -> None:
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    raw = tmp_path / "raw"
    args = ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--log-timezone", "UTC"]
    first = runner.invoke(app, [*args, "--once"])
    assert first.exit_code == 0, first.output
    assert "(new session)" in first.output
    assert "committed 1 event in 1 file" in first.output
    assert "held now: address orders" in first.output
    assert (tmp_path / "collector-state" / "artemis.json").is_file()  # beside raw, not in it
    _log(tmp_path, unblock("2026-11-27 10:00:04,000"))
    second = runner.invoke(app, [*args, "--once"])
    assert second.exit_code == 0, second.output
    assert "(going on at seq 1)" in second.output
    assert "held now" not in second.output
    rows = [r for p in sorted(raw.glob("date=*/*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert [(r["seq"], r["event_type"]) for r in rows] == [(0, "flow_stopped"), (1, "flow_resumed")]


def _rows(raw: Path) -> list[tuple[int, str]]:
    files = sorted(raw.glob("date=*/*.parquet"))
    return [(r["seq"], r["event_type"]) for p in files for r in pq.read_table(p).to_pylist()]


def test_two_raw_folders_side_by_side_are_two_sessions(tmp_path: Path) -> None:
    """bad/r1 and bad/r4 share the default state file bad/collector-state/artemis.json:
    collecting into r4 went on with r1's session ("going on at seq 1") and wrote nothing."""
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    base = ["collect", "artemis", "--log", str(log), "--log-timezone", "UTC", "--once"]
    first, second = tmp_path / "bad" / "r1", tmp_path / "bad" / "r4"
    assert runner.invoke(app, [*base, "--raw", str(first)]).exit_code == 0
    result = runner.invoke(app, [*base, "--raw", str(second)])
    assert result.exit_code == 0, result.output
    assert "(new session)" in result.stdout and "committed 1 event in 1 file" in result.stdout
    assert _rows(second) == [(0, "flow_stopped")]
    _log(tmp_path, unblock("2026-11-27 10:00:04,000"))
    for raw in (first, second):
        again = runner.invoke(app, [*base, "--raw", str(raw)])
        assert "(going on at seq 1)" in again.stdout, again.output
        assert _rows(raw) == [(0, "flow_stopped"), (1, "flow_resumed")]


def test_a_newest_file_cut_short_without_a_state_file_goes_on(tmp_path: Path) -> None:
    """A power loss cut the newest file short and the state file is gone: "unexpected error:
    Parquet magic bytes not found" named no file. The file is set aside and its lines are
    written again, with the same seq."""
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    raw = tmp_path / "raw"
    args = ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--log-timezone", "UTC"]
    assert runner.invoke(app, [*args, "--once"]).exit_code == 0
    _log(tmp_path, unblock("2026-11-27 10:00:04,000"))
    assert runner.invoke(app, [*args, "--once"]).exit_code == 0
    newest = sorted(raw.glob("date=*/*.parquet"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    (tmp_path / "collector-state" / "artemis.json").unlink()
    result = runner.invoke(app, [*args, "--once"])
    assert result.exit_code == 0, result.output
    assert "(going on at seq 1)" in result.stdout
    assert _rows(raw) == [(0, "flow_stopped"), (1, "flow_resumed")]
    assert newest.with_name(f"{newest.name}.unreadable").is_file()
    # Said as the session starts, with its time as every collector line is.
    said = [line for line in result.stderr.splitlines() if "is set aside as" in line]
    assert len(said) == 1 and re.match(STAMPED_WARNING, said[0]), result.stderr


#: The start of a collector's warning on the console: its UTC time, then "warning: ".
STAMPED_WARNING = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ warning: "


def _one_error_line(output: str, code: int, exit_code: int) -> str:
    assert exit_code == code, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def test_a_time_zone_that_is_none(tmp_path: Path) -> None:
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    result = runner.invoke(
        app,
        ["collect", "artemis", "--log", str(log), "--raw", str(tmp_path / "raw"),
         "--log-timezone", "Mars/Olympus", "--once"],
    )  # fmt: skip
    line = _one_error_line(result.stderr, 2, result.exit_code)
    assert "--log-timezone Mars/Olympus: not a time zone" in line
    assert not (tmp_path / "raw").exists()


def test_the_session_of_another_broker(tmp_path: Path) -> None:
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    base = ["collect", "artemis", "--log", str(log), "--raw", str(tmp_path / "raw"), "--once"]
    state = ["--state", str(tmp_path / "state.json")]
    assert runner.invoke(app, [*base, *state, "--broker", "a1"]).exit_code == 0
    result = runner.invoke(app, [*base, *state, "--broker", "a2"])
    line = _one_error_line(result.stderr, 2, result.exit_code)
    assert "is the session of broker 'a1', not 'a2'" in line


@pytest.mark.parametrize(
    ("broker", "said"),
    [
        ("host:61616", "Spark cannot read a file named with ':'"),
        ("dc1/artemis", "no '/' and no leading '.' or '_'"),
        ("", "the broker's name cannot be blank"),
        (" a1", "has a leading or trailing space"),
    ],
)
def test_a_broker_name_that_cannot_name_the_session_is_refused_first(
    tmp_path: Path, broker: str, said: str
) -> None:
    """An audit: ``--broker host:61616`` wrote files the ingest quarantines whole, a blank one
    rows it quarantines, and one with a '/' failed at its first commit, leaving a hidden file
    behind; now one line before anything is read or written."""
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    raw = tmp_path / "raw"
    result = runner.invoke(
        app, ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--once",
              "--broker", broker],
    )  # fmt: skip
    line = _one_error_line(result.stderr, 2, result.exit_code)
    assert said in line and "--broker" in line
    assert not raw.exists() or not any(raw.rglob("*"))


def test_collect_rabbitmq_once(tmp_path: Path) -> None:
    log = tmp_path / "rabbit@localhost.log"
    log.write_text(
        "2026-11-27 22:17:58.054471+00:00 [warning] <0.320.0> memory resource limit alarm set "
        "on node rabbit@localhost.\n"
    )
    raw = tmp_path / "raw"
    result = runner.invoke(
        app, ["collect", "rabbitmq", "--log", str(log), "--raw", str(raw), "--once"]
    )
    assert result.exit_code == 0, result.output
    assert "held now: memory@rabbit@localhost alarm" in result.output
    rows = [r for p in sorted(raw.glob("date=*/*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert [(r["event_type"], r["broker"]) for r in rows] == [("alarm_raised", "rabbitmq")]
    assert (tmp_path / "collector-state" / "rabbitmq.json").is_file()


def test_a_rabbitmq_node_other_than_the_logs_is_refused(tmp_path: Path) -> None:
    """An audit's case: `--node rabbit@localhost` on audit@localhost's log wrote nothing, exit 0:
    every alarm was another node's, every queue and connection filtered out. The boot banner
    names the log's node: one line (exit 2) before any row, and the right node collects."""
    log = tmp_path / "audit.log"
    log.write_text(
        "2026-12-04 20:53:30.464673+00:00 [info] <0.223.0>  node           : audit@localhost\n"
        "2026-12-04 20:53:40.054471+00:00 [warning] <0.320.0> memory resource limit alarm set "
        "on node audit@localhost.\n"
    )
    raw = tmp_path / "raw"
    args = ["collect", "rabbitmq", "--log", str(log), "--raw", str(raw), "--once"]
    result = runner.invoke(app, [*args, "--node", "rabbit@localhost"], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {log}: the node's boot banner (2026-12-04 20:53:30 UTC) says this is "
        "audit@localhost's log, not rabbit@localhost's (--node, or the log file's name): give "
        "--node audit@localhost"
    )
    assert not list(raw.glob("date=*/*.parquet"))
    result = runner.invoke(app, [*args, "--node", "audit@localhost"], terminal_width=200)
    assert result.exit_code == 0 and "held now: memory@audit@localhost alarm" in result.output


def test_a_log_that_cannot_be_the_brokers(tmp_path: Path) -> None:
    """A mistyped --log is one error line before anything is read or locked; a log not written
    yet is waited for by a running collector (it says so), not by --once."""
    raw = tmp_path / "raw"
    for log, said in (
        (tmp_path / "no-such-folder" / "artemis.log", f"no folder {tmp_path / 'no-such-folder'}"),
        (tmp_path, "a folder, not the broker's log file"),
        (tmp_path / "artemis.log", "no such file (nothing to read once)"),
    ):
        result = runner.invoke(
            app, ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--once"]
        )
        line = _one_error_line(result.stderr, 2, result.exit_code)
        assert line == f"error: --log {log}: {said}"
    assert not raw.exists() and not (tmp_path / "collector-state").exists()


def test_collect_once_with_an_api_that_does_not_answer_says_no_sample_was_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A --once run does not wait for the API: "sampling waits" said otherwise (a README
    # walk-through). The log is still read and committed, and the run exits 0 (a cron's next
    # run samples again).
    log = tmp_path / "rabbit@localhost.log"
    log.write_text(
        "2026-11-27 22:17:58.054471+00:00 [warning] <0.320.0> memory resource limit alarm set "
        "on node rabbit@localhost.\n"
    )
    port = free_port()
    args = ["collect", "rabbitmq", "--log", str(log), "--raw", str(tmp_path / "raw")]
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        result = runner.invoke(app, [*args, "--management", f"http://127.0.0.1:{port}", "--once"])
    assert result.exit_code == 0, result.output
    assert "committed 1 event in 1 file" in result.output
    warned = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("no sample taken this run (--once)"), warned
    # The reason in the system's words, not Python's "<urlopen error [Errno 111] ...>".
    assert "does not answer (Connection refused): " in warned[0], warned
    # On the console with its UTC time: a collector runs for days.
    said = [line for line in result.stderr.splitlines() if "does not answer" in line]
    assert len(said) == 1 and re.match(STAMPED_WARNING, said[0]), said


def test_a_state_or_raw_folder_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit's case: a read-only folder (`chattr +i`), or a disk full in a commit, was an
    "unexpected error ... please report it" with a trace. It is the user's folder, named with
    the option that chose it (exit 2); the next start goes on from the last commit."""
    log = _log(tmp_path, block("2026-11-27 10:00:00,000"))
    raw = tmp_path / "raw"
    args = ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--log-timezone", "UTC"]
    (tmp_path / "a-file").write_text("")
    state = tmp_path / "a-file" / "artemis.json"  # its folder is a file: nothing goes there
    result = runner.invoke(app, [*args, "--state", str(state), "--once"])
    line = _one_error_line(result.output, 2, result.exit_code)
    assert line.startswith(f"error: {state}.lock: cannot write there (")
    assert line.endswith("check --state (default: beside --raw), then start again: it goes on "
                         "from the last commit")  # fmt: skip

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    result = runner.invoke(app, [*args, "--once"])
    assert result.exit_code == 2, result.output
    started, line = result.output.strip().splitlines()  # the line it starts with, then why
    # Its start with its UTC time: a collector runs for days.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", started[:20]), started
    assert started[21:].startswith(f"collecting {log} into {raw}")
    assert line == (
        f"error: {raw}/date=2026-11-27: cannot write there (No space left on device); check "
        "--raw, then start again: it goes on from the last commit"
    )
    monkeypatch.undo()
    again = runner.invoke(app, [*args, "--once"])
    assert again.exit_code == 0 and "(new session)" in again.output, again.output
    assert "committed 1 event in 1 file" in again.output

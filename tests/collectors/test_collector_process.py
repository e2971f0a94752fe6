"""``flowctl collect artemis`` as the long-running process it is: SIGTERM commits what is
pending and exits 0; SIGKILL loses nothing committed, and the next start reads the lines after
its checkpoint again with the same ``seq``, so the event log has every block line once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.collectors.session_setup import committed_rows
from tests.collectors.test_artemis_collector import block, unblock

FLOWCTL = [sys.executable, "-m", "flowctl.cli"]


def _start(log: Path, raw: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*FLOWCTL, "collect", "artemis", "--log", str(log), "--raw", str(raw),
         "--log-timezone", "UTC", "--flush-interval", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def _wait_for_rows(raw: Path, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(committed_rows(raw)) < count:
        assert time.monotonic() < deadline, f"{count} rows not committed in {timeout_s:.0f} s"
        time.sleep(0.1)


def test_sigterm_commits_and_sigkill_loses_nothing(tmp_path: Path) -> None:
    log, raw = tmp_path / "artemis.log", tmp_path / "raw"
    log.write_text(block("2026-11-27 10:00:00,000"))
    first = _start(log, raw)
    _wait_for_rows(raw, 1)
    with log.open("a") as handle:
        handle.write(unblock("2026-11-27 10:00:04,000"))
    _wait_for_rows(raw, 2)
    first.send_signal(signal.SIGTERM)
    output, _ = first.communicate(timeout=30)
    assert first.returncode == 0, output
    assert "committed 2 events in 2 files" in output

    second = _start(log, raw, "--flush-interval", "3600")  # nothing committed before the kill
    time.sleep(2.0)
    with log.open("a") as handle:
        handle.write(block("2026-11-27 10:01:00,000"))
    time.sleep(1.0)
    second.kill()
    second.communicate(timeout=30)
    assert len(committed_rows(raw)) == 2  # the block was read, never committed

    third = _start(log, raw, "--once")
    output, _ = third.communicate(timeout=60)
    assert third.returncode == 0, output
    assert "(going on at seq 2)" in output
    rows = committed_rows(raw)
    assert [(r["seq"], r["event_type"]) for r in rows] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
        (2, "flow_stopped"),
    ]
    assert len({r["run_id"] for r in rows}) == 1


def test_a_log_not_written_yet_is_waited_for(tmp_path: Path) -> None:
    """Started before its broker, the collector says it waits for the log, then reads it once
    it appears."""
    log, raw = tmp_path / "artemis.log", tmp_path / "raw"
    waiting = _start(log, raw)
    assert waiting.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(waiting.stdout or ()), daemon=True)
    reader.start()
    said_it_waits = f"warning: --log {log} does not exist yet: waiting for the broker to write it"
    deadline = time.monotonic() + 30.0
    # The log is written only once the process has looked for it and said so: a process slow
    # to start on a loaded machine would otherwise find the log already there.
    # Said with its UTC time, as every collector line.
    while not any(said_it_waits in line and line[19:21] == "Z " for line in lines):
        assert waiting.poll() is None, "".join(lines)
        assert time.monotonic() < deadline, f"no waiting line in 30 s: {''.join(lines)}"
        time.sleep(0.1)
    log.write_text(block("2026-11-27 10:00:00,000"))
    _wait_for_rows(raw, 1)
    waiting.send_signal(signal.SIGTERM)
    returncode = waiting.wait(timeout=30)
    reader.join(timeout=30)
    output = "".join(lines)
    assert returncode == 0, output
    assert "committed 1 event in 1 file" in output


def test_ctrl_c_while_a_day_is_committed_loses_no_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit's case: a Ctrl-C arriving while a new day's first line commits the day before
    (its address's state already changed, its row not yet written) raised KeyboardInterrupt
    there, and the stop committed a checkpoint holding that change without the row: the block
    at 00:00:00.200 was never written, and the next start logged 'blocked again without
    unblocking'. Ctrl-C is now a flag read between two lines, as SIGTERM."""
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from flowctl.cli import app

    log, raw = tmp_path / "artemis.log", tmp_path / "raw"
    log.write_text(
        block("2026-11-27 23:59:59,100")
        + unblock("2026-11-27 23:59:59,500")
        + block("2026-11-28 00:00:00,200")
        + unblock("2026-11-28 00:00:01,300")
    )
    write_table = pq.write_table
    interrupted: list[bool] = []

    def write_with_ctrl_c(*args: Any, **kwargs: Any) -> None:
        if not interrupted:
            interrupted.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        write_table(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", write_with_ctrl_c)
    before = signal.getsignal(signal.SIGINT)
    asked = ["collect", "artemis", "--log", str(log), "--raw", str(raw), "--log-timezone", "UTC"]
    result = CliRunner().invoke(app, [*asked, "--once"], terminal_width=200)
    assert interrupted and result.exit_code == 0, result.output
    assert signal.getsignal(signal.SIGINT) is before  # the command's handler is put back
    # Stopped after the line being read, the block of 00:00:00.200 written with it.
    events = [(0, "flow_stopped"), (1, "flow_resumed"), (2, "flow_stopped")]
    assert [(r["seq"], r["event_type"]) for r in committed_rows(raw)] == events
    monkeypatch.setattr(pq, "write_table", write_table)
    again = CliRunner().invoke(app, [*asked, "--once"], terminal_width=200)
    assert again.exit_code == 0 and "(going on at seq 3)" in again.output, again.output
    assert "blocked again" not in again.output
    rows = committed_rows(raw)
    assert [(r["seq"], r["event_type"]) for r in rows] == [*events, (3, "flow_resumed")]
    assert [r["flow_stopped_count"] for r in rows] == [1, 1, 2, 2]

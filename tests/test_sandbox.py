"""conformance/sandbox.py: the commands it prints beside its scratch Artemis are ones flowctl and
Artemis's CLI take (the broker itself is the real-broker tests' ArtemisBroker; the sandbox was
tried by hand against it: the producer blocks, the collector writes flow_stopped, the drain
flow_resumed)."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
from typer.testing import CliRunner

from conformance.sandbox import ADDRESS, commands
from flowctl.cli import app

BLOCK = (
    "2026-11-28 10:00:00,000 WARN  [org.apache.activemq.artemis.core.server] AMQ222183: "
    "Blocking message production on address 'orders'; size=102508 bytes (49 messages); "
    "maxSize=102400 bytes (-1 messages)\n"
)


def _refusing_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_printed_collect_command_collects_the_sandbox_log(tmp_path: Path) -> None:
    broker: Any = SimpleNamespace(
        instance=tmp_path / "instance",
        core_url="tcp://127.0.0.1:61616",
        amqp_url=f"amqp://127.0.0.1:{_refusing_port()}",
        http_port=_refusing_port(),
    )
    log = broker.instance / "log" / "artemis.log"
    log.parent.mkdir(parents=True)
    log.write_text(BLOCK)
    printed = commands(broker, tmp_path / "raw")
    args = shlex.split(printed["collect"])
    assert args[0] == ".venv/bin/flowctl"
    result = CliRunner().invoke(app, [*args[1:], "--once"])
    assert result.exit_code == 0, result.output
    rows = [
        row
        for path in (tmp_path / "raw").glob("date=*/*.parquet")
        for row in pq.read_table(path).to_pylist()
    ]
    assert [(r["event_type"], r["queue"], r["broker"]) for r in rows] == [
        ("flow_stopped", ADDRESS.name, "sandbox")
    ]
    for client in (
        "fill (blocks at 100 KiB; Ctrl-C it)",
        "drain (stops 2 s after the last message)",
    ):
        assert f"--url {broker.core_url} --destination queue://orders" in printed[client]
    # The probe command is one the CLI takes (nothing listens: it says so in one line).
    probe = shlex.split(
        printed["or, after the drain: an AMQP publisher of flowctl's own, recording its link"]
    )
    result = CliRunner().invoke(app, probe[1:])
    assert result.exit_code == 1 and "probe publish: no link attached at amqp://" in result.output

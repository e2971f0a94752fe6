"""The suite's shared Spark driver (tests/shared_driver.py): who starts it, what a worker is
told, and a second Python process joining a running driver with a session of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jobs.config import PROJECT_ROOT
from tests import shared_driver


class _PluginManager:
    def __init__(self, xdist: bool) -> None:
        self.xdist = xdist

    def has_plugin(self, name: str) -> bool:
        return name == "xdist" and self.xdist


def _config(workers: int | None, *, xdist: bool = True, collect_only: bool = False) -> Any:
    return SimpleNamespace(
        option=SimpleNamespace(numprocesses=workers, collectonly=collect_only),
        pluginmanager=_PluginManager(xdist),
        stash=pytest.Stash(),
    )


@pytest.mark.parametrize(
    ("workers", "xdist", "controller"),
    [(2, True, True), (0, True, False), (None, True, False), (2, False, False)],
)
def test_only_a_controller_handing_tests_to_workers_starts_the_driver(workers, xdist, controller):
    config = _config(workers, xdist=xdist)
    started: list[Path] = []
    stopped: list[Path] = []

    def build(scratch: Path) -> Any:
        started.append(scratch)
        (scratch / "warehouse").mkdir()
        os.write(2, b"a JVM's warning\n")  # what the JVM started here writes goes to the log
        return SimpleNamespace(stop=lambda: stopped.append(scratch))

    shared_driver.start_shared_driver(config, build)
    assert bool(started) == controller
    assert shared_driver.is_xdist_controller(config) == controller
    worker = SimpleNamespace(**vars(_config(2)), workerinput={})
    assert not shared_driver.is_xdist_controller(worker)
    shared_driver.stop_shared_driver(config)
    assert stopped == started
    # The warehouses go, the log stays.
    assert [sorted(p.name for p in scratch.iterdir()) for scratch in started] == [
        ["driver.log"] for _ in started
    ]
    assert all((s / "driver.log").read_bytes() == b"a JVM's warning\n" for s in started)
    for scratch in started:
        shutil.rmtree(scratch)


def test_a_collect_only_run_starts_no_driver():
    config = _config(2, collect_only=True)
    shared_driver.start_shared_driver(config, lambda scratch: pytest.fail("started"))
    assert shared_driver.worker_input(config) == {}


def test_a_driver_that_did_not_start_fails_the_spark_tests_with_its_reason():
    config = _config(2)

    def refuse(scratch: Path) -> Any:
        raise RuntimeError("Java gateway process exited before sending its port number")

    shared_driver.start_shared_driver(config, refuse)  # not raised: the other tests still run
    told = shared_driver.worker_input(config)
    (reason,) = told.values()
    assert list(told) == [shared_driver.FAILURE_KEY]
    assert reason.startswith(
        "RuntimeError: Java gateway process exited before sending its port number (the "
        "driver's output: /"
    )
    with pytest.raises(pytest.fail.Exception, match="the shared Spark driver did not start: "):
        shared_driver.worker_session(SimpleNamespace(workerinput=told))
    shared_driver.stop_shared_driver(config)
    shutil.rmtree(reason.split("output: ")[1].rstrip(")").removesuffix("/driver.log"))
    # Without a shared driver a worker builds its own session.
    assert shared_driver.worker_session(SimpleNamespace(workerinput={})) is None


_JOINER = """
import json, os, subprocess, sys
from tests.shared_driver import join_shared_driver
session = join_shared_driver(sys.argv[1])
session.conf.set("spark.sql.shuffle.partitions", "7")
session.range(5).write.format("delta").save(sys.argv[2])
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.environ.get('PYSPARK_GATEWAY_PORT'))"],
    capture_output=True, text=True, check=True,
)
print(json.dumps({
    "partitions": session.conf.get("spark.sql.shuffle.partitions"),
    "child_sees_gateway": child.stdout.strip(),
    "same_jvm_context": session.sparkContext._jsc.sc().applicationId(),
}))
"""


@pytest.mark.spark
def test_a_second_process_joins_the_driver_with_a_session_of_its_own(spark, tmp_path):
    """What the shared driver's workers do: another Python process connects to this session's
    JVM, writes a Delta table there and sets a SQL setting that stays in its own session; a
    process it starts in turn gets no gateway to connect to (it starts its own JVM)."""
    gateway = spark.sparkContext._gateway.gateway_parameters
    table = tmp_path / "joined"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    joined = subprocess.run(
        [sys.executable, "-c", _JOINER, f"{gateway.port}:{gateway.auth_token}", str(table)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
        timeout=300,
    )
    assert joined.returncode == 0, joined.stderr[-3000:]
    seen = json.loads(joined.stdout.strip().splitlines()[-1])
    assert seen == {
        "partitions": "7",
        "child_sees_gateway": "None",
        "same_jvm_context": spark.sparkContext.applicationId,
    }
    assert spark.conf.get("spark.sql.shuffle.partitions") != "7"
    assert sorted(r.id for r in spark.read.format("delta").load(str(table)).collect()) == [
        0,
        1,
        2,
        3,
        4,
    ]

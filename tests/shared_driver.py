"""One Spark driver JVM for all the suite's test workers: the pytest-xdist controller starts it,
each worker joins it with a SparkSession of its own.

The suite is CPU-bound on two cores, and a JVM spends its first minutes compiling Spark's and
Delta's code (a test worker's JIT: ~95 CPU-s in its first 90 s, ~200 after 5 minutes), which
Java 17 keeps for no other JVM. One driver compiles it once, and the worker that reaches a
code path second finds it compiled. Each worker's session is a ``newSession()`` of the shared
driver's: its own SQL settings, temporary views and functions, over the one SparkContext and its
Delta log cache (each worker's tables are in its own temporary folders).

Without xdist (``-p no:xdist``, ``-n 0``) the ``spark`` fixture builds a session of its own
(:func:`tests.conftest.build_test_session`), as a worker does when told of no driver.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The keys of ``workerinput`` (what xdist hands a worker): ``port:secret`` of the driver's py4j
#: gateway, or why the driver did not start. Not environment variables: a process a test starts
#: must start a JVM of its own.
GATEWAY_KEY = "flowctl_spark_gateway"
FAILURE_KEY = "flowctl_spark_driver_failure"


@dataclass
class SharedDriver:
    """The controller's driver: its session (None if it did not start, ``failure`` says why) and
    the scratch folder of its warehouses and its log."""

    scratch: Path
    session: Any = None
    failure: str = ""

    @property
    def log(self) -> Path:
        return self.scratch / "driver.log"

    def worker_input(self) -> dict[str, str]:
        if self.session is None:
            return {FAILURE_KEY: self.failure}
        parameters = self.session.sparkContext._gateway.gateway_parameters
        return {GATEWAY_KEY: f"{parameters.port}:{parameters.auth_token}"}


_DRIVER = pytest.StashKey[SharedDriver]()


def is_xdist_controller(config: pytest.Config) -> bool:
    """Whether this process hands tests to xdist workers (``-n N``, N > 0) and runs none."""
    return (
        not hasattr(config, "workerinput")
        and bool(getattr(config.option, "numprocesses", None))
        and config.pluginmanager.has_plugin("xdist")
    )


def start_shared_driver(config: pytest.Config, build: Callable[[Path], Any]) -> None:
    """In the xdist controller of a run that runs tests, start the driver (``build`` makes its
    session in the scratch folder it is given). A driver that does not start fails the Spark
    tests, with the reason, and no other test."""
    if not is_xdist_controller(config) or config.option.collectonly:
        return
    driver = SharedDriver(Path(tempfile.mkdtemp(prefix="flowctl-spark-driver-")))
    config.stash[_DRIVER] = driver
    try:
        with _output_to(driver.log):
            driver.session = build(driver.scratch)
    except Exception as error:  # reported by every Spark test, not as the run's crash
        driver.failure = f"{type(error).__name__}: {error} (the driver's output: {driver.log})"


@contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """This process's standard output and error go to ``log`` meanwhile, and those of the JVM
    it starts meanwhile for good: Spark's warnings would otherwise print between the terminal's
    test dots (a worker's own JVM wrote them into the captured output of the test that started
    it)."""
    with log.open("ab") as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            yield
        finally:
            for fd, kept in zip((1, 2), saved, strict=True):
                os.dup2(kept, fd)
                os.close(kept)


def stop_shared_driver(config: pytest.Config) -> None:
    """Stop the driver; its warehouses go, its log stays (its path is in the report header)."""
    driver = config.stash.get(_DRIVER, None)
    if driver is None:
        return
    if driver.session is not None:
        driver.session.stop()
    for entry in driver.scratch.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
    del config.stash[_DRIVER]


def report_header(config: pytest.Config) -> str | None:
    driver = config.stash.get(_DRIVER, None)
    if driver is None:
        return None
    return f"spark: one driver JVM for the workers, its output in {driver.log}"


def worker_input(config: pytest.Config) -> dict[str, str]:
    """What a worker is told of the shared driver (nothing when there is none)."""
    driver = config.stash.get(_DRIVER, None)
    return driver.worker_input() if driver is not None else {}


def worker_session(config: Any) -> Any | None:
    """In a worker: a session of its own on the shared driver; None when there is no shared
    driver (the caller builds a session). Fails the calling test when the driver did not start."""
    given = getattr(config, "workerinput", {})
    if FAILURE_KEY in given:
        pytest.fail(f"the shared Spark driver did not start: {given[FAILURE_KEY]}")
    address = given.get(GATEWAY_KEY)
    return join_shared_driver(address) if address else None


@contextmanager
def _gateway_environment(port: str, secret: str) -> Iterator[None]:
    """PySpark connects to a running JVM when these are set; unset again at once, so that a
    process a test starts does not connect to the shared driver."""
    saved = {key: os.environ.get(key) for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"] = port, secret
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def join_shared_driver(address: str) -> Any:
    """A session of this process's own on the running driver at ``address`` (``port:secret``).

    PySpark makes it the JVM's default session too (the last process to join wins); a query
    runs under its caller's session, which Spark keeps per thread."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from jobs.spark_session import keep_gateway_classes

    port, secret = address.split(":", 1)
    with _gateway_environment(port, secret):
        gateway = launch_gateway()
    jvm = gateway.jvm
    context = jvm.org.apache.spark.SparkContext.getOrCreate()
    java_context = jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(context)
    python_context = SparkContext(gateway=gateway, jsc=java_context)
    running = jvm.org.apache.spark.sql.classic.SparkSession.getDefaultSession().get()
    session = SparkSession(python_context, jsparkSession=running.newSession())
    keep_gateway_classes(session)
    return session

"""A failure a job did not check for is one ``error:`` line with an exit code per kind and the
full trace in a log file (jobs/failures.py): a Delta conflict says to retry, never 1,000 lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs import failures
from jobs.config import DEFAULT_CONF, PROJECT_ROOT


def _named(type_name: str, message: str) -> Exception:
    """An exception of the given class name, as PySpark and Delta raise them."""
    return type(type_name, (Exception,), {})(message)


CONFLICT = _named(
    "ConcurrentAppendException",
    "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to partition "
    "[date=2026-03-04] by a concurrent update. Please try the operation again.\n"
    "Conflicting commit: {...}\n\tat org.apache.spark.sql.delta...",
)


@pytest.mark.parametrize(
    "error, kind, code",
    [
        (CONFLICT, "Delta commit conflict", 75),
        (_named("ConcurrentWriteException", "concurrent WRITE ... Please retry"), "Delta", 75),
        (_named("MetadataChangedException", "The metadata changed"), "Delta commit conflict", 75),
        (_named("Py4JJavaError", "java.lang.OutOfMemoryError: Java heap space"), "out of", 71),
        (_named("Py4JJavaError", "An error occurred while calling o123.save"), "Spark", 70),
        (_named("AnalysisException", "[PATH_NOT_FOUND] Path does not exist"), "Spark", 70),
        (_named("KeyError", "'Spark' is not a key"), "unexpected error", 1),
    ],
)
def test_each_failure_has_its_kind_and_exit_code(error: Exception, kind: str, code: int) -> None:
    rule = failures.rule_for(error)
    assert rule.kind.startswith(kind) and rule.exit_code == code


def test_a_conflict_is_one_line_that_says_to_retry_with_its_trace_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(failures.LOG_DIR_ENV_VAR, str(tmp_path / "logs"))

    def main() -> int:
        raise CONFLICT

    assert failures.run_entry_point("ingest", main) == 75
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ingest: Delta commit conflict: ")
    assert "Files were added to partition [date=2026-03-04]" in err
    assert "[DELTA_CONCURRENT_APPEND]" not in err and "\tat " not in err
    assert "run this one again" in err
    (log,) = (tmp_path / "logs").glob("flowctl-ingest-*.log")
    assert f"full trace: {log}" in err
    trace = log.read_text()
    assert "Traceback" in trace and "Conflicting commit" in trace


def test_an_unwritable_log_folder_is_said_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(failures.LOG_DIR_ENV_VAR, str(blocker / "logs"))

    def main() -> int:
        raise CONFLICT

    assert failures.run_entry_point("episodes", main) == 75
    assert "the trace could not be written" in capsys.readouterr().err


def test_a_normal_exit_status_passes_through() -> None:
    assert failures.run_entry_point("daily_metrics", lambda: 0) == 0
    assert failures.run_entry_point("daily_metrics", lambda: 1) == 1


def test_every_spark_submit_entry_point_stops_its_session_before_exiting() -> None:
    """A job module run as its own process (spark-submit) goes through run_job_process: left to
    the JVM's shutdown, a local-cluster master starts dozens of executors (tests/cluster saw 45
    for jobs/pipeline.py when it went through run_entry_point alone)."""
    main_blocks = {
        path.name: path.read_text().partition('if __name__ == "__main__":')[2]
        for path in sorted((PROJECT_ROOT / "jobs").glob("*.py"))
    }
    entry_points = {name: block for name, block in main_blocks.items() if "run_" in block}
    assert {"ingest.py", "episodes.py", "daily_metrics.py", "pipeline.py"} <= set(entry_points)
    for name, block in entry_points.items():
        assert f'run_job_process("{name.removesuffix(".py")}", main)' in block, name


@pytest.mark.spark
def test_a_jvm_error_in_a_real_job_is_one_line_and_a_log_file(tmp_path: Path) -> None:
    """A Delta table whose log is garbage: Spark fails inside the job (nothing checked it first);
    the spark-submit entry point prints one line and exits 70 with the trace in a file."""
    warehouse = tmp_path / "warehouse"
    log_dir = warehouse / "bronze" / "broker_events" / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / "00000000000000000000.json").write_text("{not json\n")
    conf = tmp_path / "pipeline.yaml"
    conf.write_text(
        DEFAULT_CONF.read_text().replace("warehouse: var/warehouse", f"warehouse: {warehouse}")
    )
    done = subprocess.run(
        [sys.executable, "-m", "jobs.maintenance", "--date", "2026-03-02", "--conf", str(conf)],
        cwd=PROJECT_ROOT,
        env={**os.environ, failures.LOG_DIR_ENV_VAR: str(tmp_path / "logs")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 70, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: maintenance: Spark failure: ")
    assert "Traceback" not in done.stderr
    # Nor Spark's own report of the failed task, the same trace again (conf/log4j2.properties).
    assert not [line for line in done.stderr.splitlines() if line.startswith("\tat ")]
    assert "Lost task" not in done.stderr and "Exception in task" not in done.stderr
    (log,) = (tmp_path / "logs").glob("flowctl-maintenance-*.log")
    assert str(log) in lines[0] and "Traceback" in log.read_text()


def _lose_a_delta_race(spark: Any, path: str) -> None:
    """Two writers of one partition, interleaved the way concurrent runs interleave: this one
    reads the table, the other replaces the partition and commits first, then this one commits
    and Delta refuses it (a real ConcurrentDeleteReadException through py4j)."""
    rows = spark.range(3).selectExpr("id", "DATE '2026-03-04' AS date")
    rows.write.format("delta").partitionBy("date").mode("overwrite").save(path)
    jvm = spark._jvm
    transaction = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, path
    ).startTransaction()
    transaction.filterFiles()  # what this writer read: the whole table
    rows.write.format("delta").mode("overwrite").option(
        "replaceWhere", "date = DATE '2026-03-04'"
    ).save(path)
    nothing = getattr(getattr(jvm.scala.collection.immutable, "Nil$"), "MODULE$")
    update = getattr(
        getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$ManualUpdate$"), "MODULE$"
    )
    transaction.commit(nothing, update)


@pytest.mark.spark
def test_a_real_delta_conflict_is_one_line_naming_the_partition_and_a_log_file(
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(failures.LOG_DIR_ENV_VAR, str(tmp_path / "logs"))

    def main() -> int:
        _lose_a_delta_race(spark, str(tmp_path / "table"))
        return 0

    assert failures.run_entry_point("daily_metrics", main) == 75
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(
        "error: daily_metrics: Delta commit conflict: ConcurrentDeleteReadException: "
        "Transaction conflict detected, a concurrent WRITE deleted data"
    ), err
    assert "in the partition [date=2026-03-04]" in err and "run this one again" in err
    (log,) = (tmp_path / "logs").glob("flowctl-daily_metrics-*.log")
    assert f"full trace: {log}" in err
    assert "io.delta.exceptions.ConcurrentDeleteReadException" in log.read_text()


def _all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _all_subclasses(sub)
    return found


def test_flowctls_own_errors_are_four_families_each_with_its_exit_code_and_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One hierarchy (flowctl_core/errors.py) mapped to exit codes in one table: every error class
    flowctl raises on purpose belongs to a family, and none of them leaves a trace file."""
    import flowctl.cli  # noqa: F401 - imports every module that defines an error class
    import jobs.jvm_jars  # noqa: F401
    from flowctl_core import errors
    from flowctl_core.flowlimit import FlowConfigError
    from flowctl_core.protocols.artemis_flow import ArtemisConfigError
    from flowctl_core.sink import SinkError
    from jobs.config import ConfError
    from jobs.pipeline_state import StaleInputError

    families = {
        errors.ConfigurationError,
        errors.ScenarioError,
        errors.ProtocolError,
        errors.PipelineError,
    }
    assert set(errors.FlowctlError.__subclasses__()) == families
    for error_class in _all_subclasses(errors.FlowctlError):
        assert failures.rule_for(error_class.__new__(error_class)).stated, error_class
    expected = {
        ConfError("conf/pipeline.yaml: paths.raw: not a folder"): 2,
        FlowConfigError("q1: flow_stop_count must be >= 0"): 2,
        ArtemisConfigError("max-size-bytes: must be -1 or > 0"): 2,
        SinkError("--out x: is a file, not a folder"): 2,
        errors.ScenarioError("s.yaml: steps.0: unknown step"): 2,
        errors.ProtocolError("amqp:invalid-field", "delivery-count must be a uint"): 2,
        StaleInputError("episodes is behind bronze on 2026-03-02"): 65,
    }
    monkeypatch.setenv(failures.LOG_DIR_ENV_VAR, str(tmp_path / "logs"))
    for error, code in expected.items():

        def main(error: Exception = error) -> int:
            raise error

        assert failures.run_entry_point("job", main) == code, error
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and str(error) in line and "trace" not in line, line
    assert not (tmp_path / "logs").exists()


def test_an_interrupted_job_is_one_line_and_exit_128_plus_the_signal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The spark-submit entry points let Ctrl-C through as a trace, and a SIGTERM (Airflow
    stopping a task) ended the job without a word (a review): both are rules of the one table."""
    from jobs.failures import Terminated, rule_for

    def interrupted() -> int:
        raise KeyboardInterrupt

    def terminated() -> int:
        raise Terminated("SIGTERM")

    assert (rule_for(KeyboardInterrupt()).exit_code, rule_for(Terminated()).exit_code) == (130, 143)
    assert failures.run_entry_point("episodes", interrupted) == 130
    assert capsys.readouterr().err.startswith(
        "error: episodes: interrupted: Ctrl-C (SIGINT): what it wrote before is kept;"
    )
    assert failures.run_entry_point("episodes", terminated) == 143
    assert "error: episodes: interrupted: SIGTERM:" in capsys.readouterr().err

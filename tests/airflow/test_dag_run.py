"""The nightly DAG deployed as the README says and run for real: ``airflow dags test`` with real
``spark-submit``s of the jobs over a small raw event log, then the gold rows it wrote; and a day
without raw files, refused unless a Variable allows it.

A throw-away Airflow home (sqlite metadata database, the DAG file linked into its dags folder), a
Spark connection to ``local[2]`` and the ``flowctl_conf`` Variable are created here with the
Airflow CLI. The worker's PATH has Airflow's virtualenv first and not the jobs' one (the case that
killed spark-submit with exit 127): the DAG puts the jobs' spark-submit first itself.

maintenance (OPTIMIZE and VACUUM of every pipeline table: the slowest task on tiny tables, ~3
JVM-minutes on a busy machine, changing no row asserted here) is marked successful rather than run:
its spark-submit is built as the others' (tests/airflow/test_dag.py renders its days) and its job
is tested in the main suite (tests/test_recommend_job.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import TEST_SPARK_SETTINGS
from tests.delta_log import delta_rows

PROJECT_DIR = Path(__file__).resolve().parents[2]
AIRFLOW = Path(sys.executable).parent / "airflow"
JOBS_BIN = PROJECT_DIR / ".venv" / "bin"
RUN_TASKS = ["ingest", "episodes", "daily_metrics", "recommend"]
MARKED_SUCCESSFUL = "maintenance"

# Under the daily cron timetable a run's data interval ends at its logical date: the run of
# 2026-03-02 processes 2026-03-01. The raw log has both days, so processing the wrong one shows.
LOGICAL_DATE = "2026-03-02"
PROCESSED_DAY = "2026-03-01"
# A run whose day (2026-03-05) has no raw files at all.
EMPTY_LOGICAL_DATE = "2026-03-06"
EMPTY_DAY = "2026-03-05"

# A run that waits for a retry would sit out the DAG's 10-minute retry delay: stop at the first
# sign of one and fail with the output instead.
RETRY_SIGNS = ("new_state=up_for_retry", "No tasks to run. unrunnable tasks")
# A log4j line at INFO from the JVM (our pattern and Spark's default: "25/11/25 18:59:03 INFO").
JVM_INFO_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")


@dataclass
class Deployment:
    home: Path
    env: dict[str, str]
    conf: Path
    raw: Path
    warehouse: Path


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float


def airflow(deployment: Deployment, *args: str, timeout: float = 300) -> Run:
    """``airflow <args>`` in the deployment; the output is kept in a file and read as it grows, so
    a run that starts waiting for a retry is stopped at once."""
    log_file = deployment.home / f"cli-{time.monotonic_ns()}.log"
    started = time.monotonic()
    with open(log_file, "w") as sink:
        process = subprocess.Popen(
            [str(AIRFLOW), *args],
            env=deployment.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its spark-submit and JVM go with it if it is stopped
        )
        try:
            while process.poll() is None:
                output = log_file.read_text(errors="replace")
                if time.monotonic() - started > timeout or any(s in output for s in RETRY_SIGNS):
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait(timeout=60)
                    break
                time.sleep(2)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    return Run(process.returncode, log_file.read_text(errors="replace"), time.monotonic() - started)


def _scenario(tmp: Path, name: str, start: str, broker: str) -> Path:
    """The Qpid documentation's worst case (peak 165 for a stop at 100, producers of 50 and 15),
    started on another day under another name: a few seconds of events, ~1,200 rows."""
    scenario = yaml.safe_load((PROJECT_DIR / "conf/scenarios/qpid-165-worst-case.yaml").read_text())
    scenario.update(name=name, start=start, broker={"name": broker})
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def _driver_options() -> str:
    """C1 only, and the suite's class archive if it was written (jobs/jvm_class_archive.py: its
    name depends on the jobs' pyspark, so the jobs' virtualenv says it; ~10 CPU-s less a JVM)."""
    sharing = subprocess.run(
        [str(JOBS_BIN / "python"), "-m", "jobs.jvm_class_archive", "--option"],
        cwd=PROJECT_DIR,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    return " ".join(filter(None, ["-XX:TieredStopAtLevel=1", sharing]))


def _worker_path() -> str:
    """The worker's PATH: Airflow's virtualenv first (its python3 has pyspark-client, no Spark),
    and the jobs' virtualenv nowhere."""
    kept = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != JOBS_BIN]
    return os.pathsep.join([str(AIRFLOW.parent), *kept])


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("nightly")
    home, dags, raw = tmp / "airflow-home", tmp / "dags", tmp / "raw"
    home.mkdir()
    dags.mkdir()
    # Linked, as an operator deploys it: the DAG finds the project through the link.
    (dags / "flowctl_nightly.py").symlink_to(PROJECT_DIR / "airflow_dags" / "flowctl_nightly.py")
    for name, start, broker in [
        ("dag-processed-day", f"{PROCESSED_DAY}T11:00:00Z", "qpid-payments"),
        ("dag-next-day", f"{LOGICAL_DATE}T11:00:00Z", "qpid-next-day"),
    ]:
        scenario = _scenario(tmp, name, start, broker)
        subprocess.run(
            [str(JOBS_BIN / "flowctl"), "simulate", str(scenario), "--out", str(raw)],
            check=True,
            capture_output=True,
            timeout=300,
        )

    # The project's conf with the test's folders and the other Spark tests' settings for their
    # tiny data (one shuffle partition, no adaptive planning, no generated code): a day here is
    # ~1,200 rows.
    conf = yaml.safe_load((PROJECT_DIR / "conf/pipeline.yaml").read_text())
    conf["paths"] = {
        "raw": str(raw),
        "warehouse": str(tmp / "warehouse"),
        "quality": str(tmp / "quality"),
    }
    conf["spark"]["conf"].update(TEST_SPARK_SETTINGS)
    # Their driver option (a collector for a JVM that lives the whole suite) is replaced: these
    # JVMs live a minute and run C1 only, C2 compiling Spark was ~45 % of their CPU (ingest 92 ->
    # 52 CPU-s). It also shows the conf's own driver options reaching spark-submit beside the
    # log4j2 file.
    conf["spark"]["conf"]["spark.driver.extraJavaOptions"] = _driver_options()
    conf_path = tmp / "pipeline.yaml"
    conf_path.write_text(yaml.safe_dump(conf))

    env = {
        key: value
        for key, value in os.environ.items()
        # A clean worker: no Airflow settings, Spark installation or Python of the caller's.
        if not key.startswith(("AIRFLOW", "SPARK_", "PYSPARK_")) and key != "PYTHONPATH"
    }
    env |= {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "PATH": _worker_path(),
        "FLOWCTL_LOG_DIR": str(tmp / "log"),
    }
    deployed = Deployment(home, env, conf_path, raw, tmp / "warehouse")
    # The README's deployment steps, as written there.
    for step in [
        ["db", "migrate"],
        ["connections", "add", "spark_default", "--conn-type", "spark", "--conn-host", "local[2]"],
        ["variables", "set", "flowctl_conf", str(conf_path)],
        ["dags", "reserialize"],
    ]:
        done = airflow(deployed, *step)
        assert done.returncode == 0, f"airflow {' '.join(step)}:\n{done.output[-4000:]}"
    yield deployed


def _task_durations(output: str) -> dict[str, float]:
    """Seconds per task, from the timestamps of the ``[DAG TEST] starting`` / ``end task`` lines."""
    marks = {
        (what, task): datetime.fromisoformat(stamp)
        for stamp, what, task in re.findall(
            r"^(\S+) \[info\s*\] \[DAG TEST\] (starting|end task) task_id=(\w+)", output, re.M
        )
    }
    return {
        task: (marks[("end task", task)] - start).total_seconds()
        for (what, task), start in marks.items()
        if what == "starting" and ("end task", task) in marks
    }


def _job_lines(output: str, phrase: str) -> list[str]:
    """The task log's lines with ``phrase`` that the Spark provider's hook logged: spark-submit's
    command and the job's own output (an exception's copy of them in a trace is left out)."""
    return [line for line in output.splitlines() if phrase in line and "SparkSubmitHook]" in line]


def _task_state(run: Run) -> str:
    """The state ``airflow tasks test`` left its task in (its exit status is 0 either way)."""
    states = re.findall(r"Task instance state updated .*new_state=(\w+)", run.output)
    return states[-1] if states else "none"


def test_the_run_of_a_logical_date_processes_the_day_before_with_the_confs_driver_memory(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = airflow(deployment, "dags", "list", "-o", "json")
    assert listed.returncode == 0, listed.output[-4000:]
    assert '"dag_id": "flowctl_nightly"' in listed.output, "reserialize did not register the DAG"

    run = airflow(
        deployment,
        *("dags", "test", "flowctl_nightly", LOGICAL_DATE),
        *("--mark-success-pattern", MARKED_SUCCESSFUL),
        timeout=1500,
    )
    durations = _task_durations(run.output)
    spark_lines = [line for line in _job_lines(run.output, "") if "Spark-Submit cmd: " not in line]
    with capsys.disabled():  # the CI log shows what the real run cost
        print(
            f"\nnightly DAG, logical date {LOGICAL_DATE}: {len(durations)} tasks (real "
            f"spark-submits; {MARKED_SUCCESSFUL} marked successful) in {run.seconds:.0f} s ("
            + ", ".join(f"{task} {seconds:.0f} s" for task, seconds in durations.items())
            + f"); {len(spark_lines)} lines of job output in the task logs"
        )
    assert run.returncode == 0, run.output[-6000:]
    assert re.search(
        rf"DagRun Finished: dag_id=flowctl_nightly, logical_date={LOGICAL_DATE} .*state=success.*"
        rf"data_interval_start={PROCESSED_DAY} 00:00:00\+00:00",
        run.output,
    ), run.output[-6000:]
    assert sorted(durations) == sorted(RUN_TASKS)
    assert re.search(rf"\[DAG TEST\] Marking success for .*\b{MARKED_SUCCESSFUL}\b", run.output)

    conf = yaml.safe_load(deployment.conf.read_text())
    memory = conf["spark"]["conf"]["spark.driver.memory"]
    number, unit = re.fullmatch(r"(\d+)([mg])", memory).groups()  # type: ignore[union-attr]
    wanted_mib = int(number) * (1024 if unit == "g" else 1)
    assert wanted_mib > 1024, "a conf at spark-submit's own 1g default would show nothing here"
    for task in RUN_TASKS:
        app = "flowctl-" + task.replace("_", "-")
        (started,) = _job_lines(run.output, f"INFO jobs.cli: {app} processes ")
        # Every job logs the day it processes: the data interval's start, never the logical date.
        assert f"processes {PROCESSED_DAY} (conf {deployment.conf})" in started, started
        # The heap of the driver JVM the DAG started is the conf's spark.driver.memory (G1 reports
        # -Xmx itself; Spark's own default would be 1024 MiB).
        heap_mib = int(re.search(r"driver JVM max heap (\d+) MiB", started).group(1))  # type: ignore[union-attr]
        assert 0.9 * wanted_mib <= heap_mib <= wanted_mib, started
        assert f"(spark.driver.memory {memory} in the conf)" in started
    # spark-submit got them as options, beside the conf's own driver option and the log4j2 file.
    submits = _job_lines(run.output, "Spark-Submit cmd: spark-submit --master local[2]")
    assert len(submits) == len(RUN_TASKS)
    log4j2 = PROJECT_DIR / "conf" / "log4j2.properties"
    for submit in submits:
        assert f"--conf spark.driver.memory={memory}" in submit
        driver_options = conf["spark"]["conf"]["spark.driver.extraJavaOptions"]
        assert driver_options.startswith("-XX:TieredStopAtLevel=1")
        assert (
            f"--conf spark.driver.extraJavaOptions={driver_options} "
            f'-Dlog4j2.configurationFile="{log4j2}"'
        ) in submit
        assert "--packages" not in submit
    # Quiet task logs: no Spark INFO at all (the issue counted ~2,200 lines of it per task).
    assert not [line for line in spark_lines if JVM_INFO_LINE.search(line)]

    processed = date.fromisoformat(PROCESSED_DAY)
    bronze = delta_rows(deployment.warehouse / "bronze" / "broker_events")
    assert {row["date"] for row in bronze} == {processed}
    raw_day = pq.read_table(deployment.raw / f"date={PROCESSED_DAY}").to_pylist()
    assert sorted(row["seq"] for row in bronze) == sorted(event["seq"] for event in raw_day)
    # One queue of one run, on the processed day only: the next day's run is still in raw.
    (daily,) = delta_rows(deployment.warehouse / "gold" / "queue_flow_daily")
    assert daily["date"] == processed and daily["queue"] == "payments"
    assert daily["run_id"].startswith("dag-processed-day-")
    assert daily["flow_stopped_count"] == sum(
        event["event_type"] == "flow_stopped" for event in raw_day
    )
    assert daily["flow_stopped_count"] > 0
    # Qpid's worked example: stop at 100, producers' windows 50 + 15 -> peak 165, overshoot 65.
    assert daily["max_depth_msgs"] == 165 and daily["max_overshoot_msgs"] == 65
    assert daily["counter_check_ok"] is True
    recommendations = delta_rows(deployment.warehouse / "gold" / "threshold_recommendations")
    recommended = {(r["date"], r["entity_kind"], r["entity"]) for r in recommendations}
    assert recommended == {(processed, "queue", "payments")}


def test_a_day_without_raw_files_fails_ingest_unless_the_variable_allows_it(
    deployment: Deployment,
) -> None:
    refused = airflow(deployment, "tasks", "test", "flowctl_nightly", "ingest", EMPTY_LOGICAL_DATE)
    assert _task_state(refused) == "up_for_retry", refused.output[-4000:]  # failed, retries left
    assert "Error code is: 2." in refused.output  # the job's exit status for a refusal
    looked_in = f"{deployment.raw}/date={EMPTY_DAY}"
    (line,) = _job_lines(refused.output, "ingest refused: ")
    assert f"no raw files for {EMPTY_DAY} (looked in {looked_in})" in line, line
    assert "--allow-empty-days" in line

    allowed = airflow(
        _with_variable(deployment, "true"),
        "tasks",
        "test",
        "flowctl_nightly",
        "ingest",
        EMPTY_LOGICAL_DATE,
    )
    assert _task_state(allowed) == "success", allowed.output[-4000:]
    (submit,) = _job_lines(allowed.output, "Spark-Submit cmd: ")
    assert f"--date {EMPTY_DAY} --conf {deployment.conf} --allow-empty-days" in submit
    # One line says what happened, naming the day's folder.
    (notice,) = _job_lines(allowed.output, "nothing to ingest (--allow-empty-days)")
    assert looked_in in notice


def _with_variable(deployment: Deployment, allow_empty_days: str) -> Deployment:
    """The deployment with the Variable flowctl_allow_empty_days set in the worker's
    environment (Airflow reads ``AIRFLOW_VAR_<NAME>`` before its database)."""
    env = {**deployment.env, "AIRFLOW_VAR_FLOWCTL_ALLOW_EMPTY_DAYS": allow_empty_days}
    return replace(deployment, env=env)

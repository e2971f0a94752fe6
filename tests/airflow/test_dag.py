"""The nightly DAG loads without import errors and chains the jobs in the pipeline's order."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[2]
DAG_FOLDER = PROJECT_DIR / "airflow_dags"
EXPECTED_ORDER = ["ingest", "episodes", "daily_metrics", "recommend", "maintenance"]

# Run in a child process: AIRFLOW_HOME and the sqlite database are read when airflow is first
# imported, so they must be set before that, in a temporary home, never ~/airflow.
CHECK = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=sys.argv[1])
    dag = bag.dags.get("flowctl_nightly")
    tasks = {}
    if dag is not None:
        for task in dag.tasks:
            tasks[task.task_id] = {
                "downstream": sorted(task.downstream_task_ids),
                "upstream": sorted(task.upstream_task_ids),
                "retries": task.retries,
                "operator": type(task).__name__,
                "application": task.application,
                "application_args": task.application_args,
                "conn_id": task._conn_id,
                "jars": task.jars,
                "packages": task.packages,
            }
    print(json.dumps({
        "import_errors": {k: str(v) for k, v in bag.import_errors.items()},
        "dag_ids": sorted(bag.dag_ids),
        "tasks": tasks,
        "timetable": type(dag.timetable).__name__ if dag else None,
        "max_active_runs": dag.max_active_runs if dag else None,
    }))
    """
)


def _load_dag_folder(tmp_path: Path) -> dict[str, Any]:
    home = tmp_path / "airflow-home"
    home.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FOLDER),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(DAG_FOLDER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dag_folder_loads_and_orders_the_jobs(tmp_path: Path) -> None:
    loaded = _load_dag_folder(tmp_path)
    assert loaded["import_errors"] == {}
    assert loaded["dag_ids"] == ["flowctl_nightly"]
    tasks = loaded["tasks"]
    assert sorted(tasks) == sorted(EXPECTED_ORDER)
    # A straight chain: each job feeds exactly the next one.
    for upstream, downstream in itertools.pairwise(EXPECTED_ORDER):
        assert tasks[upstream]["downstream"] == [downstream]
        assert tasks[downstream]["upstream"] == [upstream]
    assert tasks["ingest"]["upstream"] == [] and tasks["maintenance"]["downstream"] == []
    assert loaded["timetable"] == "CronDataIntervalTimetable"
    assert loaded["max_active_runs"] == 1


def test_every_task_submits_its_job_for_the_data_interval_day(tmp_path: Path) -> None:
    tasks = _load_dag_folder(tmp_path)["tasks"]
    for task_id, task in tasks.items():
        assert task["operator"] == "SparkSubmitOperator"
        assert task["retries"] == 2
        assert task["conn_id"] == "spark_default"  # the Variable's default
        assert task["application"].endswith(f"/jobs/{task_id}.py")
        assert (PROJECT_DIR / "jobs" / f"{task_id}.py").exists()
        args = task["application_args"]
        if task_id == "maintenance":  # the last week: days the other jobs may have rewritten
            assert args[:4] == ["--from", WEEK_START, "--to", "{{ data_interval_start | ds }}"]
            assert loaded_week_start(tmp_path) == "2026-02-24"  # for the run of 2026-03-02
            args = args[2:]
        assert args[:2] == ["--date" if task_id != "maintenance" else "--to", DAY]
        assert args[2] == "--conf"
        # Delta's jars as setup resolved them into .jvm/, never --packages (Ivy at run time).
        assert task["packages"] is None
        default_jars = task["jars"].split("'")[3].split(",")
        manifests = sorted((PROJECT_DIR / ".jvm").glob("delta-spark_*/jars.txt"))
        listed = [m.parent / name for m in manifests for name in m.read_text().split()]
        assert [Path(jar) for jar in default_jars] == listed and listed
        assert "var.value.get('flowctl_spark_jars'" in task["jars"]
    assert "--policy" in tasks["recommend"]["application_args"]


DAY = "{{ data_interval_start | ds }}"
WEEK_START = "{{ macros.ds_add(data_interval_start | ds, -6) }}"

RENDER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    from airflow.sdk.definitions.dag import DAG
    import airflow.sdk.execution_time.macros as macros

    env = DAG("render", schedule=None).get_template_env()
    start = datetime(2026, 3, 2, tzinfo=UTC)
    print(env.from_string(sys.argv[1]).render(data_interval_start=start, macros=macros))
    """
)


def loaded_week_start(tmp_path: Path) -> str:
    """WEEK_START rendered by Airflow's own template environment, for 2026-03-02."""
    home = tmp_path / "render-home"
    home.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__UNIT_TEST_MODE": "True"}
    done = subprocess.run(
        [sys.executable, "-c", RENDER, WEEK_START],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]

"""The nightly DAG loads without import errors and chains the jobs in the pipeline's order; what
its tasks give spark-submit before the driver's JVM starts (tests/airflow/test_dag_run.py runs it).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

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
                "pipeline_conf": task.pipeline_conf,
                "spark_bin": task.spark_bin,
                "allow_empty_days": task.allow_empty_days,
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
        assert task["operator"] == "FlowctlSparkSubmitOperator"
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
    # The conf read for the driver's launch settings is the one the job gets.
    for task in tasks.values():
        conf_arg = task["application_args"][task["application_args"].index("--conf") + 1]
        assert task["pipeline_conf"] == conf_arg
        assert task["spark_bin"] == (
            f"{{{{ var.value.get('flowctl_spark_bin', '{PROJECT_DIR}/.venv/bin') }}}}"
        )
    # Only ingest decides about days without raw files.
    assert tasks["ingest"]["allow_empty_days"] == (
        "{{ var.value.get('flowctl_allow_empty_days', 'false') }}"
    )
    assert all(tasks[t]["allow_empty_days"] is None for t in EXPECTED_ORDER if t != "ingest")


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


# The DAG module's own helpers, imported in a child process for the same reason as above.
HELPERS = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import flowctl_nightly as dag

    tmp, project = Path(sys.argv[2]), sys.argv[3]
    out = {}
    def launch(text, environ=None):
        conf = tmp / "conf.yaml"
        conf.write_text(text)
        return dag.driver_launch_conf(str(conf), project, environ or {})

    out["shipped"] = dag.driver_launch_conf(f"{project}/conf/pipeline.yaml", project, {})
    out["own_options"] = launch(
        "spark: {conf: {spark.driver.extraJavaOptions: -Xss4m, spark.driver.cores: 2}}"
    )
    out["own_log4j"] = launch(
        "spark: {conf: {spark.driver.extraJavaOptions: -Dlog4j2.configurationFile=/etc/l.xml}}"
    )
    (tmp / "sparkconf").mkdir()
    (tmp / "sparkconf" / "log4j2.properties").write_text("rootLogger.level = info")
    out["spark_conf_dir"] = launch("spark: {master: null}", {"SPARK_CONF_DIR": f"{tmp}/sparkconf"})
    out["empty_conf"] = launch("")
    # The class archive of a project that has one (jobs/jvm_class_archive.py writes it), unless
    # the conf's options name one.
    archived = tmp / "archived"
    (archived / ".jvm" / "class-archive").mkdir(parents=True)
    (archived / ".jvm" / "class-archive" / "spark-0123.jsa").write_bytes(b"archive")
    (archived / "conf.yaml").write_text("spark: {conf: {spark.driver.extraJavaOptions: -Xss4m}}")
    out["archived"] = dag.driver_launch_conf(str(archived / "conf.yaml"), str(archived), {})
    (archived / "own.yaml").write_text(
        "spark: {conf: {spark.driver.extraJavaOptions: -XX:SharedArchiveFile=/own.jsa}}"
    )
    out["own_archive"] = dag.driver_launch_conf(str(archived / "own.yaml"), str(archived), {})
    try:
        dag.driver_launch_conf(str(tmp / "missing.yaml"), project, {})
    except FileNotFoundError as error:
        out["missing"] = str(error)

    out["flags"] = [dag.true_or_false(v, "v") for v in ("true", "False", " TRUE ")]
    try:
        dag.true_or_false("1", "flowctl_allow_empty_days")
    except ValueError as error:
        out["unclear"] = str(error)

    before = os.environ["PATH"]
    with dag.spark_submit_first_on_path(f"{project}/.venv/bin"):
        out["path_inside"] = os.environ["PATH"].split(os.pathsep)[0]
    out["path_restored"] = os.environ["PATH"] == before
    try:
        with dag.spark_submit_first_on_path(str(tmp)):
            pass
    except FileNotFoundError as error:
        out["no_spark_submit"] = str(error)
    os.environ["PATH"] = str(tmp)
    try:
        with dag.spark_submit_first_on_path(""):
            pass
    except FileNotFoundError as error:
        out["not_on_path"] = str(error)
    os.environ["PATH"] = before
    print(json.dumps(out))
    """
)


def test_the_driver_gets_the_confs_launch_settings_and_the_jobs_spark_submit(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__UNIT_TEST_MODE": "True"}
    done = subprocess.run(
        [sys.executable, "-c", HELPERS, str(DAG_FOLDER), str(tmp_path), str(PROJECT_DIR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    log4j2 = f'-Dlog4j2.configurationFile="{PROJECT_DIR}/conf/log4j2.properties"'
    java = "spark.driver.extraJavaOptions"
    # This checkout's own class archive, when the test command has written it.
    written = sorted((PROJECT_DIR / ".jvm" / "class-archive").glob("spark-*.jsa"))
    ours = f' -XX:SharedArchiveFile="{written[-1]}"' if written else ""
    confs = yaml.safe_load((PROJECT_DIR / "conf" / "pipeline.yaml").read_text())["spark"]["conf"]
    shipped = f"{confs[java]} {log4j2}{ours}"
    assert out["shipped"] == {"spark.driver.memory": confs["spark.driver.memory"], java: shipped}
    # The conf's own driver options come first; settings Spark reads later stay with the job.
    assert out["own_options"] == {java: f"-Xss4m {log4j2}{ours}"}
    assert out["own_log4j"] == {java: f"-Dlog4j2.configurationFile=/etc/l.xml{ours}"}
    assert out["spark_conf_dir"] == ({java: ours.strip()} if ours else {})
    assert out["empty_conf"] == {java: f"{log4j2}{ours}"}
    archived = tmp_path / "archived"
    archive = archived / ".jvm" / "class-archive" / "spark-0123.jsa"
    log4j2_there = f'-Dlog4j2.configurationFile="{archived}/conf/log4j2.properties"'
    assert out["archived"] == {java: f'-Xss4m {log4j2_there} -XX:SharedArchiveFile="{archive}"'}
    assert out["own_archive"] == {java: f"-XX:SharedArchiveFile=/own.jsa {log4j2_there}"}
    assert "missing.yaml cannot be read on this worker" in out["missing"]
    assert "Variable flowctl_conf" in out["missing"]

    assert out["flags"] == [True, False, True]
    assert out["unclear"] == "Variable flowctl_allow_empty_days must be true or false, not '1'"

    assert out["path_inside"] == f"{PROJECT_DIR}/.venv/bin"
    assert out["path_restored"] is True
    assert f"no spark-submit in {tmp_path} (Variable flowctl_spark_bin)" in out["no_spark_submit"]
    assert "no spark-submit on the worker's PATH" in out["not_on_path"]

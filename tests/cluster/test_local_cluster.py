"""The jobs under spark-submit on a real multi-process Spark: ``--master local-cluster[2,1,2048]``
(a standalone master and two workers in the driver's JVM, each launching an executor JVM of its
own), the cluster story of the README in miniature (issue 22).

What a cluster adds and ``local[2]`` hides: tasks run in other JVMs, so the Delta jars must reach
them (``--jars``), the conf must leave the master to spark-submit (``spark.master: null``),
closures and Python workers must be shipped, and every shuffle and Delta write crosses processes.
The four-day run of tests/test_carried_state.py goes through ingest, episodes and daily_metrics
that way, in one application (``jobs/pipeline.py``: each job's own spark-submit is the DAG's, run
in tests/airflow; three applications here cost two more sets of three cold JVMs, CPU taken from
the suite beside this test); its tables must be the ones derived by hand there, and each
executor's own log must show it ran tasks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.config import PROJECT_ROOT, load_conf
from jobs.delta_io import table_path
from jobs.jvm_class_archive import sharing_option
from tests.conftest import TEST_SPARK_SETTINGS, write_raw
from tests.delta_log import delta_rows
from tests.test_carried_state import COMPARED, DAYS, assert_four_day_run_tables, four_day_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MASTER = "local-cluster[2,1,2048]"
VENV_BIN = PROJECT_ROOT / ".venv" / "bin"


def _classpath() -> str:
    """The Delta jars as spark-submit's ``--jars`` list (jobs/jvm_jars.py)."""
    return subprocess.run(
        [str(VENV_BIN / "python"), "-m", "jobs.jvm_jars", "--classpath"],
        check=True,
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    ).stdout.strip()


def _submit_env(log_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a spark-submit of these tests: this process's without its Spark and
    PySpark variables (each test chooses master and JVM), the venv's spark-submit first on PATH,
    failure traces in ``log_dir``; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    return env | {
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        "FLOWCTL_LOG_DIR": str(log_dir),
        **extra,
    }


def _spark_home(folder: Path) -> Path:
    """pip's Spark (the pyspark package) seen through links from a folder of the test's own: a
    local-cluster worker puts each executor's folder (its logs and a copy of every jar) in
    ``$SPARK_HOME/work``, whatever SPARK_WORKER_DIR says, and that must not grow in the venv."""
    import pyspark

    folder.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        if entry.name != "work":
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("cluster")
    rows = four_day_run()
    for run in ("r1", "r2"):
        write_raw(tmp / "raw", [dict(r) for r in rows if r["run_id"] == run])
    document = yaml.safe_load((PROJECT_ROOT / "conf/pipeline.yaml").read_text())
    document["spark"]["master"] = None  # left to spark-submit, as on a cluster
    document["spark"]["conf"].update(TEST_SPARK_SETTINGS)
    for on_the_command_line in ("spark.driver.memory", "spark.driver.extraJavaOptions"):
        document["spark"]["conf"].pop(on_the_command_line, None)  # given to spark-submit below
    # Each span read again by every write, and queue segments looked up rather than sorted (the
    # paths of large spans): the tables must still be the four-day run's, which
    # tests/test_carried_state.py gets with its spans kept in memory and sorted.
    document["span"] = {"keep_in_memory_max_mb": 0, "sort_queue_segments_max_mb": 0}
    document["paths"] = {
        "raw": str(tmp / "raw"),
        "warehouse": str(tmp / "warehouse"),
        "quality": str(tmp / "quality"),
    }
    conf_path = tmp / "pipeline.yaml"
    conf_path.write_text(yaml.safe_dump(document))
    env = _submit_env(
        tmp / "log",
        SPARK_HOME=str(_spark_home(tmp / "spark-home")),
        # Master, workers, executors and driver talk over loopback only.
        SPARK_LOCAL_IP="127.0.0.1",
    )
    command = [
        "spark-submit",
        "--master",
        MASTER,
        "--driver-memory",
        "1g",
        "--conf",
        "spark.executor.memory=1g",
        # JVMs that live a minute: C1 only (C2 compiling Spark was ~45 % of their CPU,
        # tests/airflow/test_dag_run.py).
        "--conf",
        "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1",
        "--driver-java-options",
        f"-XX:TieredStopAtLevel=1 "
        f"-Dlog4j2.configurationFile={PROJECT_ROOT / 'conf/log4j2.properties'}",
        "--jars",
        _classpath(),
        str(PROJECT_ROOT / "jobs" / "pipeline.py"),
        "--from",
        DAYS[0].isoformat(),
        "--to",
        DAYS[-1].isoformat(),
        "--conf",
        str(conf_path),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
    assert done.returncode == 0, f"pipeline: exit {done.returncode}\n{done.stderr[-4000:]}"
    conf = dataclasses.replace(
        load_conf(conf_path), spark_master="local[2]", warehouse_dir=str(tmp / "warehouse")
    )
    return {"conf": conf, "work": tmp / "spark-home" / "work"}


def test_the_jobs_ran_their_tasks_in_two_executor_jvms(cluster_run):
    (application,) = Path(cluster_run["work"]).glob("app-*")
    executors = sorted(p for p in application.iterdir() if p.is_dir())
    assert len(executors) == 2, application.name
    for executor in executors:
        log = (executor / "stderr").read_text(errors="replace")
        assert "Running task" in log, f"{application.name}/{executor.name} ran no task"


def test_the_tables_are_those_of_the_four_day_run(cluster_run):
    # Read from the Delta logs (tests/delta_log.py): a session here would be one more cold JVM
    # (~30 s of this lane) only to read them.
    conf = cluster_run["conf"]
    tables = {table.name: delta_rows(Path(table_path(conf, table))) for table in COMPARED}
    assert_four_day_run_tables(tables)


# The driver's own script for the test below: the session as a job builds it from a conf whose
# master is null, then where its RPC and block-manager ports listen.
_WHERE_THE_DRIVER_LISTENS = """
import dataclasses, json, sys
from jobs.config import load_conf
from jobs.spark_session import build_spark_session
from tests.test_spark_session import listening_addresses
conf = dataclasses.replace(load_conf(), spark_master=None, warehouse_dir=sys.argv[1])
spark = build_spark_session(conf, app_name="where-the-driver-listens")
ports = {
    "rpc": int(spark.sparkContext.getConf().get("spark.driver.port")),
    "block manager": spark._jsc.sc().env().blockManager().blockManagerId().port(),
}
print(json.dumps({
    "master": spark.sparkContext.master,
    "listens": {name: sorted(map(str, listening_addresses(port))) for name, port in ports.items()},
}))
spark.stop()
"""


def test_a_local_master_from_spark_submit_gets_a_loopback_driver(tmp_path: Path) -> None:
    """A conf that leaves the master to spark-submit (``spark.master: null``, as the DAG's
    connection may choose it) and a local master there: the driver listens on loopback only,
    as with a local master in the conf (jobs/spark_session.py ``submitted_master``); before, it
    listened on the host's address."""
    script = tmp_path / "where_the_driver_listens.py"
    script.write_text(_WHERE_THE_DRIVER_LISTENS)
    env = _submit_env(
        tmp_path / "log", PYTHONPATH=str(PROJECT_ROOT), PYSPARK_PYTHON=str(VENV_BIN / "python")
    )
    command = [
        "spark-submit",
        "--master",
        "local[1]",
        "--driver-java-options",
        # A JVM of seconds (see cluster_run), with the suite's class archive when written (its
        # classes are pip's Spark's, as here; cluster_run's are seen through another folder).
        " ".join(filter(None, ["-XX:TieredStopAtLevel=1", sharing_option()])),
        "--jars",
        _classpath(),
        str(script),
        str(tmp_path / "warehouse"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-4000:]}"
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    seen = json.loads(line)
    assert seen["master"] == "local[1]"
    assert seen["listens"] == {"rpc": ["127.0.0.1"], "block manager": ["127.0.0.1"]}

"""flowctl's nightly DAG: ingest -> episodes -> daily_metrics -> recommend -> maintenance.

Each task is a spark-submit of one job in jobs/ for the UTC day of the run's data interval
(``--date {{ data_interval_start | ds }}``): the run that starts just after midnight processes the
day that has just ended, and clearing a past run reprocesses its day (every job replaces its day,
so a rerun is idempotent). The settings come from Airflow Variables, each with a default that
fits a checkout of this repository next to the Airflow deployment:

=============================  ===================================================================
Variable                       default
=============================  ===================================================================
``flowctl_spark_conn_id``      ``spark_default`` (read when the DAG file is parsed)
``flowctl_project_dir``        the repository this file lives in
``flowctl_conf``               ``<project>/conf/pipeline.yaml``
``flowctl_recommend_policy``   ``<project>/conf/recommend.yaml``
``flowctl_spark_jars``         Delta's jars as ``scripts/setup.sh`` resolved them (``.jvm/``)
``flowctl_py_files``           empty; a zip of ``jobs/`` + ``schemas/`` for cluster deploy mode
=============================  ===================================================================
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Variable

PROJECT_DIR = str(Path(__file__).resolve().parent.parent)


def resolved_jars(project_dir: str) -> str:
    """The Delta jars scripts/setup.sh resolved with Maven into ``<project>/.jvm/`` (each folder's
    ``jars.txt``, jobs/jvm_jars.py), comma-separated for ``spark-submit --jars``: nothing is
    resolved when a task runs (no ``--packages``, no Ivy). Empty before setup has run."""
    jars = [
        str(manifest.parent / name)
        for manifest in sorted(Path(project_dir, ".jvm").glob("delta-spark_*/jars.txt"))
        for name in manifest.read_text().split()
    ]
    return ",".join(jars)


# Templated: resolved when a task runs, so changing a Variable needs no redeploy and parsing the
# DAG costs no Variable look-ups for them.
project_dir = f"{{{{ var.value.get('flowctl_project_dir', '{PROJECT_DIR}') }}}}"
pipeline_conf = f"{{{{ var.value.get('flowctl_conf', '{PROJECT_DIR}/conf/pipeline.yaml') }}}}"
recommend_policy = (
    f"{{{{ var.value.get('flowctl_recommend_policy', '{PROJECT_DIR}/conf/recommend.yaml') }}}}"
)
day = "{{ data_interval_start | ds }}"
# episodes and daily_metrics also rewrite, for runs still going, the days before the one processed
# (back to the start of an episode it touches), leaving small files there after those days' own
# compaction: maintenance compacts the last week (OPTIMIZE leaves a compacted partition alone).
MAINTAINED_DAYS = 7
week_start = f"{{{{ macros.ds_add(data_interval_start | ds, -{MAINTAINED_DAYS - 1}) }}}}"

# SparkSubmitOperator does not template conn_id, so it is read at parse time (with a default, so
# that parsing works before the Variable exists).
SPARK_CONN_ID = Variable.get("flowctl_spark_conn_id", default="spark_default")

default_args = {
    "owner": "flowctl",
    # A job that failed on a flaky executor or a busy cluster usually passes on a second try; a
    # third failure is worth a human.
    "retries": 2,
    "retry_delay": timedelta(minutes=10),
    "retry_exponential_backoff": True,
    "execution_timeout": timedelta(hours=2),
}


def spark_job(
    task_id: str, extra_args: list[str] | None = None, days: list[str] | None = None
) -> SparkSubmitOperator:
    """spark-submit <project>/jobs/<task_id>.py <days> --conf <pipeline conf>; ``days``
    defaults to ``--date <day>``."""
    return SparkSubmitOperator(
        task_id=task_id,
        conn_id=SPARK_CONN_ID,
        application=f"{project_dir}/jobs/{task_id}.py",
        application_args=[*(days or ["--date", day]), "--conf", pipeline_conf, *(extra_args or [])],
        name=f"flowctl-{task_id}-{day}",
        jars=f"{{{{ var.value.get('flowctl_spark_jars', '{resolved_jars(PROJECT_DIR)}') }}}}",
        py_files="{{ var.value.get('flowctl_py_files', '') }}",
        # The jobs import the jobs/ and schemas/ packages of the project (client deploy mode).
        env_vars={"PYTHONPATH": project_dir},
    )


with DAG(
    dag_id="flowctl_nightly",
    description="Broker event log -> bronze/silver/gold Delta -> threshold recommendations",
    # Data intervals of whole UTC days: the run for day D starts at D+1 00:00 UTC.
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    # Days share Delta tables: one run at a time keeps their commits from conflicting.
    max_active_runs=1,
    default_args=default_args,
    tags=["flowctl", "spark", "delta"],
) as dag:
    ingest = spark_job("ingest")
    episodes = spark_job("episodes")
    daily_metrics = spark_job("daily_metrics")
    recommend = spark_job("recommend", ["--policy", recommend_policy])
    maintenance = spark_job("maintenance", days=["--from", week_start, "--to", day])

    ingest >> episodes >> daily_metrics >> recommend >> maintenance

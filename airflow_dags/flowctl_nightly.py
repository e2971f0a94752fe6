"""flowctl's nightly DAG: ingest -> episodes -> daily_metrics -> recommend -> maintenance.

Each task is a spark-submit of one job in jobs/ for the UTC day of the run's data interval
(``--date {{ data_interval_start | ds }}``): the run that starts just after midnight processes the
day that has just ended, so the run of logical date 2026-03-02 processes 2026-03-01; clearing a
past run reprocesses its day (every job replaces its day, so a rerun is idempotent). A day without
raw files fails ingest (the job names the day and the folder it looked in) unless the Variable
``flowctl_allow_empty_days`` is ``true``.

What must be set before the driver's JVM starts cannot come from the conf once the job reads it,
so each task reads the pipeline conf first and gives spark-submit its ``spark.driver.memory``,
``spark.driver.extraJavaOptions`` (with flowctl's quiet ``conf/log4j2.properties`` unless the conf
names a log4j configuration, or ``$SPARK_CONF_DIR`` holds one), ``extraClassPath`` and
``extraLibraryPath``; and it runs the ``spark-submit`` of the jobs' virtualenv, whose ``python3``
then runs the driver. The settings come from Airflow Variables, each with a default that fits a
checkout of this repository next to the Airflow deployment:

=============================  ===================================================================
Variable                       default
=============================  ===================================================================
``flowctl_spark_conn_id``      ``spark_default`` (read when the DAG file is parsed)
``flowctl_project_dir``        the repository this file lives in
``flowctl_conf``               ``<project>/conf/pipeline.yaml``
``flowctl_recommend_policy``   ``<project>/conf/recommend.yaml``
``flowctl_spark_jars``         Delta's jars as ``scripts/setup.sh`` resolved them (``.jvm/``)
``flowctl_py_files``           empty; a zip of ``jobs/`` + ``schemas/`` for cluster deploy mode
``flowctl_spark_bin``          ``<project>/.venv/bin``, put first on the task's PATH; empty: the
                               worker's own PATH (a cluster's Spark, say)
``flowctl_allow_empty_days``   ``false``; ``true`` lets ingest replace a day without raw files
                               with nothing (``--allow-empty-days``)
=============================  ===================================================================
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
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


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: Settings Spark's launcher puts on the driver JVM's command line: set in the session, as the
#: jobs set the rest of the conf, they come too late under spark-submit (the JVM already runs).
DRIVER_LAUNCH_SETTINGS = (
    "spark.driver.memory",
    DRIVER_JAVA_OPTIONS,
    "spark.driver.extraClassPath",
    "spark.driver.extraLibraryPath",
)


#: Where jobs/jvm_class_archive.py writes the class-data-sharing archive of the jobs' JVMs, under
#: the project (its name is a digest of the JDK and jars, which only the jobs' virtualenv knows).
CLASS_ARCHIVE_GLOB = ".jvm/class-archive/spark-*.jsa"
#: The JVM options that write or map such an archive: a JVM takes one (jobs/spark_session.py's
#: ``CLASS_ARCHIVE_OPTIONS``; tests/test_spark_session.py keeps the two equal).
CLASS_ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=")


def class_archive_option(project_dir: str) -> str:
    """The option mapping the project's class archive (the newest, if several), "" when none is
    written: the driver then starts with Spark's and Delta's classes parsed and verified (a
    cold session of the pipeline conf started in ~10 s instead of ~16 s and ran its first jobs
    with 9-24 % less CPU, four alternated pairs). A JVM whose JDK or jars are not the archive's
    says so in one warning line and loads its classes itself."""
    found = sorted(Path(project_dir).glob(CLASS_ARCHIVE_GLOB), key=lambda p: p.stat().st_mtime)
    return f'-XX:SharedArchiveFile="{found[-1]}"' if found else ""


def driver_launch_conf(
    conf_path: str, project_dir: str, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The ``--conf`` settings spark-submit needs for the pipeline conf at ``conf_path``: its
    driver launch settings, and flowctl's log4j2 file among the driver's Java options (the task
    log is the driver's output) unless the conf names a log4j configuration or
    ``$SPARK_CONF_DIR`` has a log4j2.properties (as jobs/spark_session.py decides for a session),
    and the project's class archive (:func:`class_archive_option`) unless they name one.
    """
    try:
        document = yaml.safe_load(Path(conf_path).read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise FileNotFoundError(
            f"pipeline conf {conf_path} cannot be read on this worker ({error.strerror}): set the "
            "Variable flowctl_conf to a path the worker and the driver can read"
        ) from None
    settings = (document.get("spark") or {}).get("conf") or {}
    launch = {
        key: str(settings[key]) for key in DRIVER_LAUNCH_SETTINGS if settings.get(key) is not None
    }
    options = launch.get(DRIVER_JAVA_OPTIONS, "")
    conf_dir = environ.get("SPARK_CONF_DIR")
    if "configurationFile" not in options and not (
        conf_dir and (Path(conf_dir) / "log4j2.properties").is_file()
    ):
        # Quoted: Spark splits these options on blanks, and the checkout's path may hold one.
        ours = f'-Dlog4j2.configurationFile="{project_dir}/conf/log4j2.properties"'
        options = f"{options} {ours}".strip()
    if not any(option in options for option in CLASS_ARCHIVE_OPTIONS):
        options = f"{options} {class_archive_option(project_dir)}".strip()
    if options:
        launch[DRIVER_JAVA_OPTIONS] = options
    return launch


def true_or_false(value: str, variable: str) -> bool:
    """A Variable that is a decision: ``true`` or ``false`` (any case), nothing else."""
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"Variable {variable} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


@contextmanager
def spark_submit_first_on_path(bin_dir: str) -> Iterator[None]:
    """Run with ``bin_dir`` first on PATH, or check the worker's PATH has a spark-submit when it
    is empty. The provider runs ``spark-submit`` by that name only, and pip's pyspark finds its
    Spark home with the ``python3`` of PATH: a PATH where another ``python3`` (Airflow's) comes
    first dies in ``spark-class`` (exit 127), so the jobs' virtualenv must come first as a whole.
    The environment of the task's process is restored afterwards."""
    if not bin_dir:
        if shutil.which("spark-submit") is None:
            raise FileNotFoundError(
                "no spark-submit on the worker's PATH: set the Variable flowctl_spark_bin to the "
                "bin folder of the jobs' virtualenv (<project>/.venv/bin) or put it first on PATH"
            )
        yield
        return
    if not (Path(bin_dir) / "spark-submit").is_file():
        raise FileNotFoundError(
            f"no spark-submit in {bin_dir} (Variable flowctl_spark_bin): run scripts/setup.sh in "
            "the project, or set the Variable to the bin folder of a Spark installation, or to "
            "'' to use the worker's PATH"
        )
    before = os.environ.get("PATH")
    os.environ["PATH"] = os.pathsep.join([bin_dir, *([before] if before else [])])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


class FlowctlSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one flowctl job, with the driver's launch settings of its pipeline conf,
    the jobs' spark-submit first on PATH, and ``--allow-empty-days`` when the run decides so."""

    template_fields = (
        *SparkSubmitOperator.template_fields,
        "pipeline_conf",
        "project_dir",
        "spark_bin",
        "allow_empty_days",
    )

    def __init__(
        self,
        *,
        pipeline_conf: str,
        project_dir: str,
        spark_bin: str,
        allow_empty_days: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline_conf = pipeline_conf
        self.project_dir = project_dir
        self.spark_bin = spark_bin
        self.allow_empty_days = allow_empty_days

    def execute(self, context: Any) -> None:
        # Read when the task runs: a changed conf or Variable needs no redeploy.
        self.conf = {
            **driver_launch_conf(self.pipeline_conf, self.project_dir),
            **(self.conf or {}),
        }
        if self.allow_empty_days is not None and true_or_false(
            self.allow_empty_days, "flowctl_allow_empty_days"
        ):
            self.application_args = [*(self.application_args or []), "--allow-empty-days"]
        with spark_submit_first_on_path(self.spark_bin):
            super().execute(context)


# Templated: resolved when a task runs, so changing a Variable needs no redeploy and parsing the
# DAG costs no Variable look-ups for them.
project_dir = f"{{{{ var.value.get('flowctl_project_dir', '{PROJECT_DIR}') }}}}"
pipeline_conf = f"{{{{ var.value.get('flowctl_conf', '{PROJECT_DIR}/conf/pipeline.yaml') }}}}"
recommend_policy = (
    f"{{{{ var.value.get('flowctl_recommend_policy', '{PROJECT_DIR}/conf/recommend.yaml') }}}}"
)
spark_bin = f"{{{{ var.value.get('flowctl_spark_bin', '{PROJECT_DIR}/.venv/bin') }}}}"
allow_empty_days = "{{ var.value.get('flowctl_allow_empty_days', 'false') }}"
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
    task_id: str,
    extra_args: list[str] | None = None,
    days: list[str] | None = None,
    allow_empty: str | None = None,
) -> FlowctlSparkSubmitOperator:
    """spark-submit <project>/jobs/<task_id>.py <days> --conf <pipeline conf>; ``days``
    defaults to ``--date <day>``."""
    return FlowctlSparkSubmitOperator(
        task_id=task_id,
        conn_id=SPARK_CONN_ID,
        application=f"{project_dir}/jobs/{task_id}.py",
        application_args=[*(days or ["--date", day]), "--conf", pipeline_conf, *(extra_args or [])],
        name=f"flowctl-{task_id}-{day}",
        jars=f"{{{{ var.value.get('flowctl_spark_jars', '{resolved_jars(PROJECT_DIR)}') }}}}",
        py_files="{{ var.value.get('flowctl_py_files', '') }}",
        # The jobs import the jobs/ and schemas/ packages of the project (client deploy mode).
        env_vars={"PYTHONPATH": project_dir},
        pipeline_conf=pipeline_conf,
        project_dir=project_dir,
        spark_bin=spark_bin,
        allow_empty_days=allow_empty,
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
    ingest = spark_job("ingest", allow_empty=allow_empty_days)
    episodes = spark_job("episodes")
    daily_metrics = spark_job("daily_metrics")
    recommend = spark_job("recommend", ["--policy", recommend_policy])
    maintenance = spark_job("maintenance", days=["--from", week_start, "--to", day])

    ingest >> episodes >> daily_metrics >> recommend >> maintenance

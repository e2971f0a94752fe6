"""The one place that builds a SparkSession with Delta Lake.

Every job, the test suite and the benchmark get their session here, so Spark and Delta settings
cannot drift between them. ``python -m jobs.spark_session --fetch-jars`` is the install step that
puts Delta's jars into the local Maven/Ivy caches (scripts/setup.sh runs it), so later sessions
start without network access. Once a Delta table was written and read back with them, it leaves a
stamp, so that running it again for the same versions, Java and conf answers without starting a JVM.

Local sessions log through conf/log4j2.properties (Spark's defaults minus start-up warnings a user
cannot act on). A conf that sets its own ``-Dlog4j2.configurationFile`` in
``spark.driver.extraJavaOptions``, or a non-local master (spark-submit, a cluster), keeps its own.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from jobs.config import PROJECT_ROOT, ConfError, PipelineConf, load_conf

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SCALA_BINARY_VERSION = "2.13"

# Settings that make a session a Delta session; not meant to be overridden from conf.
DELTA_SESSION_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


LOG4J2_CONF = PROJECT_ROOT / "conf" / "log4j2.properties"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def delta_maven_artifact() -> str:
    """Maven coordinates of the Delta jar matching the installed pyspark and delta-spark.

    Mirrors ``delta.configure_spark_with_delta_pip``, which resolves the same coordinates.
    """
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    delta_version = importlib.metadata.version("delta-spark")
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_BINARY_VERSION}:{delta_version}"


def with_local_logging(master: str | None, settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` plus flowctl's log4j2 file for a local[...] master, unless logging is set up.

    Passed as a driver Java option: in local mode the driver JVM is the whole of Spark. Left out
    when the master comes from spark-submit or a cluster, when the driver options already name a
    log4j2 configuration, or when $SPARK_CONF_DIR has a log4j2.properties of its own.
    """
    options = settings.get(DRIVER_JAVA_OPTIONS, "")
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if (
        not (master or "").startswith("local")
        or "configurationFile" in options  # -Dlog4j2.configurationFile or -Dlog4j.configurationFile
        or (conf_dir and (Path(conf_dir) / "log4j2.properties").is_file())
    ):
        return dict(settings)
    # Quoted: Spark splits these options on blanks, and the checkout's path may contain one.
    ours = f'-Dlog4j2.configurationFile="{LOG4J2_CONF}"'
    return {**settings, DRIVER_JAVA_OPTIONS: f"{options} {ours}".strip()}


def build_spark_session(
    conf: PipelineConf | None = None,
    *,
    app_name: str | None = None,
    extra_settings: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or reuse) the SparkSession described by ``conf``, with Delta Lake enabled."""
    from pyspark.sql import SparkSession

    conf = conf or load_conf()
    builder = SparkSession.builder.appName(app_name or conf.app_name)
    if conf.spark_master:  # None leaves the master to spark-submit
        builder = builder.master(conf.spark_master)
    settings = {**conf.spark_settings, **(extra_settings or {}), **DELTA_SESSION_SETTINGS}
    settings = with_local_logging(conf.spark_master, settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if conf.resolve_delta_jars:
        resolved = resolved_delta_jars()
        if resolved:
            # The jars fetch-jars resolved: no Ivy resolution (and its log) at every start-up.
            jars = [settings["spark.jars"]] if settings.get("spark.jars") else []
            builder = builder.config("spark.jars", ",".join(jars + resolved))
        else:
            from delta import configure_spark_with_delta_pip

            builder = configure_spark_with_delta_pip(builder)
    from pyspark.errors import PySparkRuntimeError

    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as error:
        if error.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise ConfError(
            f"pipeline conf {conf.source}: Spark's JVM exited before it started (its message is "
            "above): check the spark.conf settings (a memory size is written 6g, not 6gb)"
        ) from None
    spark.sparkContext.setLogLevel("WARN")
    check_sql_settings(spark, settings, conf.source)
    return spark


def check_sql_settings(spark: SparkSession, settings: Mapping[str, str], source: Path) -> None:
    """Raise :class:`ConfError` naming every Spark SQL setting whose value Spark refuses
    (``spark.sql.shuffle.partitions: four``), after stopping the session.

    Spark checks SQL settings only when a query reads them, and a session holding a bad one never
    reports it: PySpark turns each Java error into a Python one by reading the session's settings,
    which fails again, and so on without end (the job hangs). So each value is set on a fresh
    SQLConf with PySpark's error conversion left out of those few calls."""
    import py4j.java_gateway
    import py4j.protocol

    converting = py4j.java_gateway.get_return_value
    py4j.java_gateway.get_return_value = py4j.protocol.get_return_value
    problems = []
    try:
        fresh = spark.sparkContext._jvm.org.apache.spark.sql.internal.SQLConf()
        for key, value in settings.items():
            try:
                fresh.setConfString(key, value)
            except py4j.protocol.Py4JJavaError as error:
                message = str(error.java_exception.getMessage()).split(" SQLSTATE")[0]
                problems.append(f"spark.conf.{key}: {message}")
    finally:
        py4j.java_gateway.get_return_value = converting
    if problems:
        spark.stop()
        raise ConfError(f"pipeline conf {source}: " + "; ".join(problems))


def _jar_manifest(artifact: str) -> Path:
    """Where fetch-jars records the jars it resolved for ``artifact`` (one file per version)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "flowctl" / f"{artifact.replace(':', '_')}.jars"


def resolved_delta_jars() -> list[str]:
    """The Delta jars (and their dependencies) resolved by fetch-jars, if all are still there."""
    manifest = _jar_manifest(delta_maven_artifact())
    try:
        jars = [line for line in manifest.read_text().splitlines() if line]
    except OSError:
        return []
    if not jars or not all(Path(urlparse(jar).path).is_file() for jar in jars):
        return []
    return jars


def _record_resolved_jars(artifact: str, jars: list[str]) -> None:
    manifest = _jar_manifest(artifact)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text("".join(f"{jar}\n" for jar in jars))


def _verified_stamp(conf: PipelineConf, jars: list[str]) -> Path:
    """Where fetch-jars notes that ``jars`` passed its Delta round trip for this install and conf.

    Named by a digest of what the check depended on: the exact pyspark and delta-spark versions,
    the Python environment, the Java runtime, the conf file's content and the jar list itself, so
    that a change to any of them means another name, hence a new check.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or ""
    try:
        conf_digest = hashlib.sha256(conf.source.read_bytes()).hexdigest()
    except OSError:
        conf_digest = "unreadable"
    parts = [
        f"pyspark {importlib.metadata.version('pyspark')}",
        f"delta-spark {importlib.metadata.version('delta-spark')}",
        f"python {sys.prefix}",
        f"java {os.path.realpath(java) if java else 'none'}",
        f"conf {conf.source} {conf_digest}",
        *jars,
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return _jar_manifest(delta_maven_artifact()).parent / "verified" / digest


def _prefetch_with_maven(artifact: str) -> None:
    """Best effort: Maven is the more reliable fetcher here, and Spark's Ivy also reads ~/.m2.

    An offline check first: when the jars are already cached it answers in seconds, whereas an
    online ``dependency:get`` re-checks remote metadata and can take minutes.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        print("fetch-jars: mvn not found; Spark's Ivy resolver will fetch the jars itself")
        return
    for mode in (["-o"], []):
        command = [mvn, "-q", *mode, "dependency:get", f"-Dartifact={artifact}"]
        try:
            result = subprocess.run(command, check=False, timeout=600, capture_output=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"fetch-jars: {' '.join(command[1:])} failed ({exc})")
            continue
        if result.returncode == 0:
            where = "already in ~/.m2" if mode else "downloaded into ~/.m2"
            print(f"fetch-jars: {artifact} {where}")
            return
    print("fetch-jars: mvn could not fetch the jars; trying Spark's Ivy resolver")


def fetch_jars(conf: PipelineConf, *, recheck: bool = False) -> int:
    """Make the Delta jars available locally; prove that a Delta table can be written and read.

    The first run resolves them (Maven, then Spark's Ivy) and records the resolved jar list, so
    that later sessions and later runs of this step start without any resolution. After a good
    round trip it leaves a stamp: later runs return at once while the stamp, and every jar of the
    list, are still there (``recheck`` starts Spark and checks again anyway).
    """
    artifact = delta_maven_artifact()
    jars = resolved_delta_jars()
    cached = bool(jars)
    stamp = _verified_stamp(conf, jars)
    if cached and not recheck and stamp.is_file():
        print(f"fetch-jars: {artifact} is available (checked before with these versions and conf)")
        return 0
    stamp.unlink(missing_ok=True)
    if not cached:
        _prefetch_with_maven(artifact)
    try:
        spark = build_spark_session(conf, app_name="flowctl-fetch-jars")
        if not cached:
            configured = set(conf.spark_settings.get("spark.jars", "").split(","))
            resolved = spark.sparkContext.getConf().get("spark.jars", "").split(",")
            jars = [jar for jar in resolved if jar and jar not in configured]
            _record_resolved_jars(artifact, jars)
        with tempfile.TemporaryDirectory(prefix="flowctl-delta-check-") as scratch:
            table = f"{scratch}/check"
            spark.range(3).write.format("delta").save(table)
            rows = spark.read.format("delta").load(table).count()
        spark.stop()
    except Exception as exc:  # any failure here means the install is unusable
        if cached:  # a stale jar list: forget it and resolve again, in a fresh JVM
            print(f"fetch-jars: the recorded jar list failed ({type(exc).__name__}); resolving")
            _jar_manifest(artifact).unlink(missing_ok=True)
            command = [sys.executable, "-m", "jobs.spark_session", "--fetch-jars"]
            return subprocess.call([*command, "--conf", str(conf.source)])
        print(
            f"fetch-jars: cannot load Delta Lake's jars ({artifact}) from Maven Central or the "
            f"local caches (~/.m2, ~/.ivy2*): {type(exc).__name__}: {str(exc)[:2000]}",
            file=sys.stderr,
        )
        return 1
    if rows != 3:
        print(f"fetch-jars: Delta round trip returned {rows} rows instead of 3", file=sys.stderr)
        return 1
    verified = resolved_delta_jars()
    if verified:
        stamp = _verified_stamp(conf, verified)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(f"{artifact}\n")
    how = "recorded jar list" if cached else "resolved and recorded"
    print(f"fetch-jars: {artifact} is available ({how}); a Delta table was written and read back")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--conf", help="pipeline YAML (default: $FLOWCTL_CONF or conf/pipeline.yaml)"
    )
    parser.add_argument(
        "--fetch-jars",
        action="store_true",
        help="download Delta's jars into the local caches and check that Delta works (once: "
        "later runs for the same versions and conf only check that the jars are still there)",
    )
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="with --fetch-jars: start Spark and check Delta again even when checked before",
    )
    args = parser.parse_args(argv)
    conf = load_conf(args.conf)
    if args.fetch_jars:
        return fetch_jars(conf, recheck=args.recheck)
    print(f"Delta artifact: {delta_maven_artifact()}")
    print(f"conf: {conf.source}; warehouse: {conf.warehouse_dir}; raw: {conf.raw_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The one place that builds a SparkSession with Delta Lake.

Every job, the test suite and the benchmark get their session here, so Spark and Delta settings
cannot drift between them. Delta's jars are the ones Maven resolved at setup into the project's
``.jvm/`` folder (jobs/jvm_jars.py), named one by one in ``spark.jars``: no session resolves
anything at run time.

Local sessions log through conf/log4j2.properties (Spark's defaults minus start-up warnings a user
cannot act on). A conf that sets its own ``-Dlog4j2.configurationFile`` in
``spark.driver.extraJavaOptions``, or a non-local master (spark-submit, a cluster), keeps its own.
A local session's driver listens on loopback only, unless the conf or $SPARK_LOCAL_IP says where;
so does a driver spark-submit starts with a local master when the conf leaves the master to it.
A local session's JVM maps flowctl's class-data-sharing archive when it is written
(jobs/jvm_class_archive.py): it starts with its classes parsed and verified.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.config import PROJECT_ROOT, ConfError, PipelineConf, load_conf
from jobs.jvm_class_archive import sharing_option
from jobs.jvm_jars import delta_artifact, delta_jar_dir, delta_jars_or_error

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Settings that make a session a Delta session; not meant to be overridden from conf.
DELTA_SESSION_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


LOG4J2_CONF = PROJECT_ROOT / "conf" / "log4j2.properties"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` keeps the driver and its executors on this host (``local[...]``,
    ``local-cluster[...]``); None (spark-submit chooses) and cluster masters do not."""
    return (master or "").startswith("local")


def with_local_logging(master: str | None, settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` plus flowctl's log4j2 file for a local[...] master, unless logging is set up.

    Passed as a driver Java option: in local mode the driver JVM is the whole of Spark. Left out
    when the master comes from spark-submit or a cluster, when the driver options already name a
    log4j2 configuration, or when $SPARK_CONF_DIR has a log4j2.properties of its own.
    """
    options = settings.get(DRIVER_JAVA_OPTIONS, "")
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if (
        not is_local_master(master)
        or "configurationFile" in options  # -Dlog4j2.configurationFile or -Dlog4j.configurationFile
        or (conf_dir and (Path(conf_dir) / "log4j2.properties").is_file())
    ):
        return dict(settings)
    # Quoted: Spark splits these options on blanks, and the checkout's path may contain one.
    ours = f'-Dlog4j2.configurationFile="{LOG4J2_CONF}"'
    return {**settings, DRIVER_JAVA_OPTIONS: f"{options} {ours}".strip()}


#: The JVM options that write or map a class-data-sharing archive: a JVM takes one of them.
CLASS_ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=")


def with_class_archive(
    master: str | None, settings: Mapping[str, str], sharing: str
) -> dict[str, str]:
    """``settings`` plus ``sharing`` (the option mapping jobs/jvm_class_archive.py's archive, ""
    when none is written) among the driver's Java options, for a local[...] master.

    Left out when the master comes from spark-submit or a cluster (the driver JVM starts before
    the session's settings are read: a spark-submit names the archive on its command line), and
    when the options already write or map an archive (the archive's own build, the tests)."""
    options = settings.get(DRIVER_JAVA_OPTIONS, "")
    if (
        not sharing
        or not is_local_master(master)
        or any(o in options for o in CLASS_ARCHIVE_OPTIONS)
    ):
        return dict(settings)
    return {**settings, DRIVER_JAVA_OPTIONS: f"{options} {sharing}".strip()}


LOOPBACK = "127.0.0.1"
DRIVER_ADDRESS_SETTINGS = ("spark.driver.bindAddress", "spark.driver.host")


def with_loopback_driver(master: str | None, settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` plus a driver bound to and named by loopback, for a local[...] master.

    Spark's driver otherwise listens on the address the host name resolves to (its RPC and block
    manager ports open on the host's network), though in local mode nothing outside the JVM ever
    connects. Left out for other masters (executors elsewhere must reach the driver), when either
    setting is given, or when $SPARK_LOCAL_IP chooses the address.
    """
    if (
        not is_local_master(master)
        or any(key in settings for key in DRIVER_ADDRESS_SETTINGS)
        or os.environ.get("SPARK_LOCAL_IP")
    ):
        return dict(settings)
    return {**settings, **dict.fromkeys(DRIVER_ADDRESS_SETTINGS, LOOPBACK)}


def submitted_master() -> str | None:
    """The master spark-submit gave the driver JVM this Python process runs in (the JVM's
    ``spark.master`` property, from ``--master`` or spark-defaults.conf); None outside
    spark-submit. Under spark-submit the JVM is already up and PySpark only connects to it
    (``$PYSPARK_GATEWAY_PORT``), so connecting early changes nothing; elsewhere no JVM is
    started here (the session's settings must reach its launch)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    master = jvm.java.lang.System.getProperty("spark.master")
    return str(master) if master else None


#: The master of a Spark JVM launched with none: spark-submit's default, as PySpark launches it.
DEFAULT_MASTER = "local[*]"


def launched_master(conf_master: str | None) -> str | None:
    """The master of the JVM this process launches: the conf's; with none, Spark's default
    (:data:`DEFAULT_MASTER`) when no spark-submit started the JVM, else None (spark-submit's to
    tell, :func:`submitted_master`). A conf that leaves the master to spark-submit, run as
    ``python -m jobs.<job>``, starts a local[*] driver: it gets what a local one gets (a loopback
    driver among them: before, it listened on the host's address; an audit)."""
    if conf_master:
        return conf_master
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else DEFAULT_MASTER


SQL_WAREHOUSE_DIR = "spark.sql.warehouse.dir"


def with_sql_warehouse(warehouse_dir: str, settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` plus a Spark SQL warehouse inside the Delta warehouse (``_spark_sql``), unless
    one is set. Spark creates that folder as a session starts, by default ``./spark-warehouse``
    wherever the command runs; flowctl's tables are paths and never use it."""
    if SQL_WAREHOUSE_DIR in settings:
        return dict(settings)
    return {**settings, SQL_WAREHOUSE_DIR: f"{warehouse_dir.rstrip('/')}/_spark_sql"}


# Spark's own forms of a master URL (SparkMasterRegex's LOCAL_N, LOCAL_N_FAILURES,
# LOCAL_CLUSTER, SPARK, KUBERNETES; and yarn; Spark 4 has no mesos://) and of a JVM memory size:
# a conf value of another form is the likely reason a JVM does not start, so the error names it.
_MASTER = re.compile(
    r"^(local(\[(\*|\d+)(\s*,\s*\d+)?\])?|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]|"
    r"yarn|(spark|k8s)://.+)$"
)
_MEMORY_SIZE = re.compile(r"^\d+[kmgt]?$", re.IGNORECASE)  # the JVM's -Xmx takes no "gb"
#: Memory settings the launcher hands to the driver JVM's command line (-Xmx).
_MEMORY_SETTINGS = ("spark.driver.memory",)


def start_up_hint(master: str | None, settings: Mapping[str, str]) -> str:
    """ ": spark.master 'lcoal[2]' is not a master URL ..." for a setting that would stop the JVM
    from starting, or "" when none looks wrong (the JVM's own message then says why)."""
    if master is not None and not _MASTER.match(master):
        return (
            f": spark.master {master!r} is not a master URL (local[2], local[*], "
            "spark://host:7077, yarn, k8s://...)"
        )
    for key in _MEMORY_SETTINGS:
        value = settings.get(key)
        if value is not None and not _MEMORY_SIZE.match(value.strip()):
            return f": spark.conf.{key} {value!r} is not a JVM memory size (write 6g, not 6gb)"
    return ""


#: The units of a memory setting the JVM takes (-Xmx), as powers of 1024.
_MEMORY_UNITS = {"k": 1, "m": 2, "g": 3, "t": 4}


def memory_setting_bytes(value: str) -> int | None:
    """Bytes of a memory setting such as ``6g`` or ``512m``; None for a value without a unit (a
    bare number means MiB to Spark but bytes to the JVM's -Xmx, so it has no one reading) or one
    that is no size at all."""
    found = re.fullmatch(r"(\d+)([kmgt])", value.strip(), re.IGNORECASE)
    if not found:
        return None
    return int(found.group(1)) * 1024 ** _MEMORY_UNITS[found.group(2).lower()]


def driver_max_heap_bytes(spark: SparkSession) -> int:
    """The running driver JVM's maximum heap (``Runtime.maxMemory``): what ``spark.driver.memory``
    really gave it, whatever the session's settings say (they are read after the JVM started)."""
    return int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())


#: A heap this far below the conf's spark.driver.memory was not sized by it. The JVM reports less
#: than -Xmx: the parallel collector leaves a survivor space out, 11 % of a 2g heap (1820 MiB
#: reported; at 0.9 that read as a JVM started before the conf, falsely: an audit).
_HEAP_SHORTFALL = 0.8


def driver_memory_report(conf: PipelineConf, max_heap: int) -> tuple[str, bool]:
    """How the driver's heap compares with the conf's ``spark.driver.memory``: the phrase to log,
    and whether the heap falls short of it (the JVM was started before the conf was read, as under
    spark-submit without ``--driver-memory``)."""
    heap = f"driver JVM max heap {max_heap / 2**20:.0f} MiB"
    wanted = conf.spark_settings.get("spark.driver.memory")
    if wanted is None:
        return f"{heap} (the conf sets no spark.driver.memory)", False
    wanted_bytes = memory_setting_bytes(wanted)
    short = wanted_bytes is not None and max_heap < _HEAP_SHORTFALL * wanted_bytes
    return f"{heap} (spark.driver.memory {wanted} in the conf)", short


def use_utc_clock() -> None:
    """Make UTC this process's local time zone (``TZ``), before Spark's JVM starts.

    PySpark hands timestamps back as naive datetimes in the Python process's local zone
    (``TimestampType.fromInternal``), whatever ``spark.sql.session.timeZone`` says: on a host set
    to New York a UTC noon came back as 07:00, so the dashboard drew its intervals five hours
    off (and an hour wrong across a daylight-saving change). A JVM that PySpark starts inherits
    ``TZ``, so its default zone is UTC too; Delta 4.3 checks that zone, and a JVM away from UTC
    costs a state reconstruction per commit (``allFilesInCrc`` verification). A JVM started
    before Python (spark-submit) takes ``-Duser.timezone=UTC`` from the conf's Java options."""
    os.environ["TZ"] = "UTC"
    time.tzset()


def build_spark_session(
    conf: PipelineConf | None = None,
    *,
    app_name: str | None = None,
    extra_settings: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or reuse) the SparkSession described by ``conf``, with Delta Lake enabled."""
    from pyspark.sql import SparkSession

    conf = conf or load_conf()
    use_utc_clock()
    builder = SparkSession.builder.appName(app_name or conf.app_name)
    if conf.spark_master:  # None leaves the master to spark-submit
        builder = builder.master(conf.spark_master)
    launched = launched_master(conf.spark_master)
    settings = {**conf.spark_settings, **(extra_settings or {}), **DELTA_SESSION_SETTINGS}
    settings = with_local_logging(launched, settings)
    settings = with_class_archive(launched, settings, sharing_option())
    # A conf that leaves the master to spark-submit still gets a loopback driver for a local one.
    settings = with_loopback_driver(launched or submitted_master(), settings)
    settings = with_sql_warehouse(conf.warehouse_dir, settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if conf.resolve_delta_jars:
        # Exactly the jars Maven resolved at setup (jobs/jvm_jars.py): nothing resolves at run
        # time, so a session starts offline and never depends on what Ivy can download.
        jars = [settings["spark.jars"]] if settings.get("spark.jars") else []
        jars += [str(jar) for jar in delta_jars_or_error()]
        builder = builder.config("spark.jars", ",".join(jars))
    from pyspark.errors import PySparkRuntimeError

    # A master URL Spark cannot read stops spark-submit with a JVM stack trace: said in one line
    # before any JVM starts (the other hints need the JVM's own word, which the error points to).
    if conf.spark_master and (bad_master := start_up_hint(conf.spark_master, {})):
        raise ConfError(f"pipeline conf {conf.source}{bad_master}")
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as error:
        if error.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise ConfError(
            f"pipeline conf {conf.source}: Spark's JVM exited before it started (its own message "
            f"is above){start_up_hint(conf.spark_master, settings)}"
        ) from None
    spark.sparkContext.setLogLevel("WARN")
    keep_gateway_classes(spark)
    check_sql_settings(spark, settings, conf.source)
    known = registered_settings(spark)
    for problem in unknown_settings(conf.spark_settings, known) if known else ():
        log.warning("pipeline conf %s: %s", conf.source, problem)
    return spark


#: Settings Spark reads by name without declaring them, and families of settings whose names
#: are open-ended (a catalog's, a Hadoop option, an environment variable): never reported.
UNDECLARED_SETTINGS = frozenset(
    {"spark.master", "spark.app.name", "spark.local.dir", "spark.submit.deployMode"}
)
OPEN_SETTING_PREFIXES = (
    "spark.hadoop.",
    "spark.executorEnv.",
    "spark.sql.catalog.",
    "spark.yarn.appMasterEnv.",
    "spark.kubernetes.",
    "spark.metrics.conf.",
)
#: Namespaces whose every setting Spark or Delta declares: a name there that is not declared is
#: a misspelling, close match or not. Elsewhere only a near miss of a declared name is reported
#: (a plugin may read undeclared names of its own).
DECLARED_NAMESPACES = ("spark.sql.", "spark.databricks.delta.")


def unknown_settings(settings: Iterable[str], declared: Collection[str]) -> list[str]:
    """One line per setting that Spark and Delta do not declare and that is not a known open
    family: Spark ignores such a setting without a word (``spark.sql.shuffle.partiton``), so
    the user is told, with the declared name it is closest to."""
    problems = []
    for key in settings:
        if key in declared or key in UNDECLARED_SETTINGS or key.startswith(OPEN_SETTING_PREFIXES):
            continue
        close = difflib.get_close_matches(key, declared, n=1, cutoff=0.85)
        if close:
            problems.append(f"spark.conf.{key} is not a Spark setting (did you mean {close[0]}?)")
        elif key.startswith(DECLARED_NAMESPACES):
            problems.append(f"spark.conf.{key} is not a Spark or Delta setting: Spark ignores it")
    return problems


def registered_settings(spark: SparkSession) -> frozenset[str]:
    """Every setting name Spark and Delta declare (their ``ConfigEntry`` registry), Delta's
    loaded first; empty when this Spark does not let it be read (then nothing is reported)."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.sql.delta.sources.DeltaSQLConf.DELTA_SNAPSHOT_PARTITIONS()
    except Exception:  # Delta not on the classpath (delta.resolve_jars off, say): Spark's only
        log.debug("Delta's settings are not loaded", exc_info=True)
    try:
        # A private registry, read by reflection: it is the one complete list of names.
        registry_class = jvm.java.lang.Class.forName(
            "org.apache.spark.internal.config.ConfigEntry$"
        )
        registry = registry_class.getField("MODULE$").get(None)
        field = registry_class.getDeclaredField("knownConfigs")
        field.setAccessible(True)
        return frozenset(str(key) for key in field.get(registry).keySet().toArray())
    except Exception:
        log.debug("Spark's setting registry could not be read", exc_info=True)
        return frozenset()


#: The JVM classes PySpark reaches through its gateway on every column, function and select
#: (``F.col`` -> ``_jvm.functions``, ``df.select`` -> ``_jvm.PythonUtils``): py4j looks such a name
#: up anew each time, and a short one is first tried as a whole class name, a failed search of
#: every jar on the class path (~300), then under each imported package. A warm ``episodes`` call
#: of the tests' size made ~1,600 such look-ups, 5 once these are kept. Nine warm job calls of
#: tests/test_processing_order.py's days, four rounds each way alternated: 61.5-75.5 s (mean
#: 68.6) without, 55.9-67.6 s (mean 63.3) with, the Python process's CPU 0.6-2.3 s less a round.
GATEWAY_CLASSES = (
    "functions",
    "PythonUtils",
    "PythonSQLUtils",
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.SparkSession",
    "org.apache.spark.sql.expressions.Window",
)


def keep_gateway_classes(spark: SparkSession) -> None:
    """Resolve :data:`GATEWAY_CLASSES` once and keep them on the gateway's JVM view: a Python
    attribute of the view is found before py4j's look-up runs. A class proxy holds its name
    only, and the gateway lives as long as the Python process, while sessions come and go."""
    jvm = spark.sparkContext._jvm
    for name in GATEWAY_CLASSES:
        setattr(jvm, name, getattr(jvm, name))


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--conf", help="pipeline YAML (default: $FLOWCTL_CONF or conf/pipeline.yaml)"
    )
    args = parser.parse_args(argv)
    conf = load_conf(args.conf)
    print(f"Delta artifact: {delta_artifact().coordinates} (jars: {delta_jar_dir()})")
    print(f"conf: {conf.source}; warehouse: {conf.warehouse_dir}; raw: {conf.raw_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

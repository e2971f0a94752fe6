"""The session factory's local choices.

flowctl's log4j2 file is for a local master only, and never over a user's own logging
configuration; a setting that keeps the JVM from starting is named in the error; a driver heap
short of the conf's spark.driver.memory is told apart from one it sized; the JVM classes PySpark
reaches on every column are resolved once; the tests' JVM can map the suite's class archive.
(The Delta jars a session loads:
tests/test_jvm_jars.py; a real driver's heap under spark-submit: tests/airflow/test_dag_run.py.)
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from jobs import spark_session
from jobs.cli import days_text
from jobs.config import load_conf
from jobs.jvm_class_archive import archive_path
from tests.conftest import TEST_SPARK_SETTINGS

JAVA_OPTIONS = spark_session.DRIVER_JAVA_OPTIONS
OUR_LOG4J2 = f'-Dlog4j2.configurationFile="{spark_session.LOG4J2_CONF}"'


@pytest.fixture
def no_spark_conf_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)


def test_a_local_session_logs_through_flowctls_log4j2_file(no_spark_conf_dir: None) -> None:
    assert spark_session.LOG4J2_CONF.is_file()
    settings = spark_session.with_local_logging("local[2]", {"spark.ui.enabled": "false"})
    assert settings == {"spark.ui.enabled": "false", JAVA_OPTIONS: OUR_LOG4J2}


def test_the_log4j2_file_is_added_to_the_drivers_own_options(no_spark_conf_dir: None) -> None:
    settings = spark_session.with_local_logging("local[*]", {JAVA_OPTIONS: "-Xss4m"})
    assert settings[JAVA_OPTIONS] == f"-Xss4m {OUR_LOG4J2}"


@pytest.mark.parametrize("master", [None, "yarn", "spark://head:7077"])
def test_spark_submit_and_clusters_keep_their_logging(
    no_spark_conf_dir: None, master: str | None
) -> None:
    assert spark_session.with_local_logging(master, {"a": "b"}) == {"a": "b"}


@pytest.mark.parametrize("prop", ["log4j2.configurationFile", "log4j.configurationFile"])
def test_a_users_own_log4j2_file_wins(no_spark_conf_dir: None, prop: str) -> None:
    settings = {JAVA_OPTIONS: f"-D{prop}=/etc/spark/log4j2.properties"}
    assert spark_session.with_local_logging("local[2]", settings) == settings


def test_a_log4j2_file_in_spark_conf_dir_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert spark_session.with_local_logging("local[2]", {}) == {}


SHARING = "-XX:SharedArchiveFile=/project/.jvm/class-archive/spark-0123.jsa"


def test_a_local_session_maps_the_class_archive_when_it_is_written() -> None:
    settings = {JAVA_OPTIONS: "-XX:+UseParallelGC", "spark.ui.enabled": "false"}
    assert spark_session.with_class_archive("local[2]", settings, SHARING) == {
        JAVA_OPTIONS: f"-XX:+UseParallelGC {SHARING}",
        "spark.ui.enabled": "false",
    }
    assert spark_session.with_class_archive("local[*]", {}, SHARING) == {JAVA_OPTIONS: SHARING}
    assert spark_session.with_class_archive("local[2]", settings, "") == settings  # none written


@pytest.mark.parametrize(
    "master, options",
    [
        (None, "-XX:+UseParallelGC"),  # spark-submit started the JVM: its command line names it
        ("spark://head:7077", ""),
        ("local[2]", "-XX:SharedArchiveFile=/elsewhere/own.jsa"),  # the tests' own, say
        ("local[2]", "-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit=/tmp/a.jsa"),  # its build
    ],
)
def test_the_class_archive_is_left_out_where_the_jvm_starts_elsewhere_or_names_one(
    master: str | None, options: str
) -> None:
    """A JVM refuses to map one archive and write another, and maps one archive only."""
    settings = {JAVA_OPTIONS: options}
    assert spark_session.with_class_archive(master, settings, SHARING) == settings


def test_the_nightly_dag_finds_and_recognises_the_class_archive_as_the_sessions_do() -> None:
    """airflow_dags/flowctl_nightly.py cannot import jobs/ (Airflow's own virtualenv): its copies
    of the archive's place, of the options that name one and of the setting they go in are kept
    equal here."""
    import ast
    import fnmatch

    from jobs.config import PROJECT_ROOT

    source = (PROJECT_ROOT / "airflow_dags" / "flowctl_nightly.py").read_text()
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
        and (target.id.startswith("CLASS_ARCHIVE_") or target.id == "DRIVER_JAVA_OPTIONS")
    }
    assert constants["CLASS_ARCHIVE_OPTIONS"] == spark_session.CLASS_ARCHIVE_OPTIONS
    assert constants["DRIVER_JAVA_OPTIONS"] == spark_session.DRIVER_JAVA_OPTIONS
    path = archive_path()
    assert path is not None, "no pyspark or java here, yet the suite runs Spark"
    relative = str(path.relative_to(PROJECT_ROOT))
    assert fnmatch.fnmatch(relative, constants["CLASS_ARCHIVE_GLOB"]), relative


@pytest.fixture
def no_spark_local_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)


LOOPBACK_DRIVER = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


def test_a_local_driver_is_bound_to_loopback(no_spark_local_ip: None) -> None:
    settings = spark_session.with_loopback_driver("local[2]", {"spark.ui.enabled": "false"})
    assert settings == {"spark.ui.enabled": "false", **LOOPBACK_DRIVER}


@pytest.mark.parametrize(
    "master, settings",
    [
        (None, {}),  # spark-submit chooses
        ("spark://head:7077", {}),  # executors on other hosts reach the driver
        ("local[2]", {"spark.driver.host": "10.0.0.5"}),
        ("local[2]", {"spark.driver.bindAddress": "0.0.0.0"}),
    ],
)
def test_a_driver_address_chosen_elsewhere_is_kept(
    no_spark_local_ip: None, master: str | None, settings: dict[str, str]
) -> None:
    assert spark_session.with_loopback_driver(master, settings) == settings


def test_a_jvm_launched_without_a_master_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conf that leaves the master to spark-submit, run without one (``python -m
    jobs.ingest``), launches Spark's default local[*] driver: it gets a local driver's settings,
    loopback among them (an audit saw one listen on the host's address); under spark-submit
    the master is spark-submit's to tell."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert spark_session.launched_master(None) == "local[*]"
    assert spark_session.launched_master("yarn") == "yarn"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "12345")
    assert spark_session.launched_master(None) is None
    assert spark_session.launched_master("local[2]") == "local[2]"


@pytest.mark.spark
@pytest.mark.slow
def test_a_conf_without_a_master_run_alone_listens_on_loopback_only(tmp_path: Path) -> None:
    script = (
        "import dataclasses\n"
        "from jobs.config import load_conf\n"
        "from jobs.spark_session import build_spark_session\n"
        "from tests.test_spark_session import listening_addresses\n"
        "conf = dataclasses.replace(load_conf(), spark_master=None,\n"
        f"    warehouse_dir={str(tmp_path)!r})\n"
        "spark = build_spark_session(conf, app_name='no-master')\n"
        "port = int(spark.sparkContext.getConf().get('spark.driver.port'))\n"
        "print(spark.sparkContext.master, sorted(map(str, listening_addresses(port))))\n"
        "spark.stop()\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", "SPARK_LOCAL_IP")
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "local[*] ['127.0.0.1']", done.stdout


def test_spark_local_ip_chooses_the_drivers_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.5")
    assert spark_session.with_loopback_driver("local[2]", {}) == {}


def listening_addresses(port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses this host listens on at ``port`` (/proc/net/tcp and tcp6, state 0A), an
    IPv4 address mapped into IPv6 as the IPv4 one."""
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            hex_address, hex_port = fields[1].rsplit(":", 1)
            if fields[3] != "0A" or int(hex_port, 16) != port:
                continue
            # the kernel prints each 32-bit word of the address in host (little-endian) order
            raw = b"".join(
                bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8)
            )
            address = ipaddress.ip_address(raw)
            mapped = getattr(address, "ipv4_mapped", None)
            found.add(mapped or address)
    return found


@pytest.mark.spark
def test_the_tests_session_listens_on_loopback_only(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    for port_setting in ("spark.driver.port", "spark.driver.blockManager.port"):
        port = conf.get(port_setting)
        if port is None:  # the block manager's port is only in the executor's id
            port = spark._jsc.sc().env().blockManager().blockManagerId().port()
        assert listening_addresses(int(port)) == {ipaddress.ip_address("127.0.0.1")}, port_setting


@pytest.mark.spark
def test_the_tests_jvm_can_map_the_suites_class_archive(spark: Any) -> None:
    """The class archive written for this JDK and these jars (jobs/jvm_class_archive.py) maps
    for the tests' own JVM: a JVM that must map it (``-Xshare:on``) starts with that JVM's class
    path. One that did not match would only cost time, silently; this says so."""
    path = archive_path()
    if f'-XX:SharedArchiveFile="{path}"' not in TEST_SPARK_SETTINGS[JAVA_OPTIONS].split():
        # scripts/test.sh writes it beside the suite: a JVM started before that has none.
        assert path is not None, "no pyspark or java here, yet a Spark session runs"
        pytest.skip(f"no class archive when this JVM started ({path} is written by test.sh)")
    system = spark._jvm.System
    java = Path(system.getProperty("java.home")) / "bin" / "java"
    class_path = system.getProperty("java.class.path")
    mapped = subprocess.run(
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-cp", class_path, "-version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr


@pytest.mark.parametrize(
    "master, settings, named",
    [
        ("lcoal[2]", {}, "spark.master 'lcoal[2]' is not a master URL"),
        ("local[2]", {"spark.driver.memory": "6gb"}, "spark.conf.spark.driver.memory '6gb'"),
        ("local[2]", {"spark.driver.memory": "six"}, "is not a JVM memory size"),
    ],
)
def test_a_setting_that_stops_the_jvm_is_named(
    master: str, settings: dict[str, str], named: str
) -> None:
    assert named in spark_session.start_up_hint(master, settings)


@pytest.mark.parametrize(
    "master",
    [
        None,
        "local",
        "local[*]",
        "local[2]",
        "local[4, 2]",
        "local-cluster[2,1,2048]",
        "spark://head:7077",
        "yarn",
        "k8s://https://api:6443",
    ],
)
def test_good_settings_get_no_hint(master: str | None) -> None:
    for memory in ("6g", "512m", "1024", "2G"):
        assert spark_session.start_up_hint(master, {"spark.driver.memory": memory}) == ""


@pytest.mark.parametrize(
    "value, size",
    [
        ("6g", 6 * 2**30),
        ("512m", 512 * 2**20),
        ("2G", 2 * 2**30),
        (" 1536M ", 1536 * 2**20),
        ("64k", 64 * 2**10),
        ("1t", 2**40),
        ("1024", None),  # MiB to Spark, bytes to -Xmx: no one reading
        ("6gb", None),  # the JVM refuses it (start_up_hint names it)
        ("six", None),
    ],
)
def test_memory_settings_are_read_as_the_jvm_reads_them(value: str, size: int | None) -> None:
    assert spark_session.memory_setting_bytes(value) == size


def _conf_with(tmp_path: Path, settings: str) -> spark_session.PipelineConf:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"spark: {{conf: {settings}}}\n")
    return load_conf(str(path))


def test_a_heap_the_conf_sized_is_reported_as_such(tmp_path: Path) -> None:
    conf = _conf_with(tmp_path, "{spark.driver.memory: 6g}")
    # G1 reports -Xmx itself; the parallel collector up to 11 % less (1820 MiB of 2g: an audit
    # saw that flagged as a heap the conf did not size).
    for heap in (6 * 2**30, int(0.95 * 6 * 2**30), int(1820 / 2048 * 6 * 2**30)):
        phrase, short = spark_session.driver_memory_report(conf, heap)
        assert not short
        assert phrase.endswith("MiB (spark.driver.memory 6g in the conf)")
    assert spark_session.driver_memory_report(conf, 6 * 2**30)[0].startswith(
        "driver JVM max heap 6144 MiB"
    )


def test_a_heap_short_of_the_confs_memory_is_flagged(tmp_path: Path) -> None:
    # spark-submit without --driver-memory: the launcher's 1g, whatever the conf says.
    conf = _conf_with(tmp_path, "{spark.driver.memory: 6g}")
    phrase, short = spark_session.driver_memory_report(conf, 2**30)
    assert short
    assert phrase == "driver JVM max heap 1024 MiB (spark.driver.memory 6g in the conf)"


def test_without_a_readable_memory_setting_nothing_is_flagged(tmp_path: Path) -> None:
    unset = _conf_with(tmp_path, "{spark.ui.enabled: false}")
    assert spark_session.driver_memory_report(unset, 2**30) == (
        "driver JVM max heap 1024 MiB (the conf sets no spark.driver.memory)",
        False,
    )
    bare = _conf_with(tmp_path, "{spark.driver.memory: 4096}")
    assert spark_session.driver_memory_report(bare, 2**30)[1] is False


def test_the_days_a_job_processes_are_named_in_its_log() -> None:
    assert days_text(date(2026, 3, 1), date(2026, 3, 1)) == "2026-03-01"
    assert days_text(date(2026, 2, 23), date(2026, 3, 1)) == "2026-02-23 .. 2026-03-01 (7 days)"


def test_spark_sql_warehouse_goes_inside_the_delta_warehouse_not_the_working_folder() -> None:
    """Found by a fault trial: every Spark command left an empty ``spark-warehouse/`` wherever it
    was run."""
    settings = spark_session.with_sql_warehouse("/data/wh/", {"spark.ui.enabled": "false"})
    assert settings == {
        "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": "/data/wh/_spark_sql",
    }
    chosen = {"spark.sql.warehouse.dir": "s3a://b/sql"}
    assert spark_session.with_sql_warehouse("s3a://b/wh", chosen) == chosen


DECLARED = frozenset(
    {"spark.sql.shuffle.partitions", "spark.driver.memory", "spark.databricks.delta.optimizeWrite"}
)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (
            "spark.sql.shuffle.partiton",
            "spark.conf.spark.sql.shuffle.partiton is not a Spark setting "
            "(did you mean spark.sql.shuffle.partitions?)",
        ),
        (
            "spark.driver.memroy",
            "spark.conf.spark.driver.memroy is not a Spark setting "
            "(did you mean spark.driver.memory?)",
        ),
        (
            "spark.sql.nothing.like.it",
            "spark.conf.spark.sql.nothing.like.it is not a Spark or Delta setting: "
            "Spark ignores it",
        ),
    ],
)
def test_a_misspelt_setting_is_named_with_the_closest_declared_one(key: str, problem: str) -> None:
    """Found by a fault trial: Spark ignores a setting it does not know without a word."""
    assert spark_session.unknown_settings([key], DECLARED) == [problem]


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.shuffle.partitions",  # declared
        "spark.master",  # read by name, never declared
        "spark.local.dir",
        "spark.hadoop.fs.s3a.endpoint",  # open families
        "spark.sql.catalog.lake.uri",
        "spark.myplugin.mode",  # a plugin's own name, far from any declared one
    ],
)
def test_declared_and_open_ended_settings_are_not_reported(key: str) -> None:
    assert spark_session.unknown_settings([key], DECLARED) == []


@pytest.mark.spark
def test_the_registry_holds_spark_and_delta_settings_and_the_default_conf_is_clean(spark) -> None:
    declared = spark_session.registered_settings(spark)
    assert {
        "spark.driver.memory",
        "spark.sql.shuffle.partitions",
        "spark.databricks.delta.snapshotPartitions",
    } <= declared
    assert spark_session.unknown_settings(load_conf().spark_settings, declared) == []
    # ... and so are the tests' own settings (Spark would ignore a misspelt one without a word).
    assert spark_session.unknown_settings(TEST_SPARK_SETTINGS, declared) == []


@pytest.mark.spark
def test_a_select_does_not_look_up_the_gateway_classes_again(spark, monkeypatch) -> None:
    """PySpark reaches ``functions`` and ``PythonUtils`` through py4j's JVM view on every column
    and select; the session keeps them resolved (jobs/spark_session.py GATEWAY_CLASSES)."""
    import py4j.java_gateway
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    looked_up: list[str] = []
    resolve = py4j.java_gateway.JVMView.__getattr__

    def counting(view: Any, name: str) -> Any:
        looked_up.append(name)
        return resolve(view, name)

    monkeypatch.setattr(py4j.java_gateway.JVMView, "__getattr__", counting)
    window = Window.partitionBy("id").orderBy("id")
    rows = (
        spark.range(3)
        .select(F.col("id"), F.lit(2).alias("two"), F.sum("id").over(window).alias("total"))
        .where(F.col("id") > 0)
        .collect()
    )
    assert sorted((r.id, r.two, r.total) for r in rows) == [(1, 2, 1), (2, 2, 2)]
    assert not set(looked_up) & set(spark_session.GATEWAY_CLASSES), looked_up


@pytest.mark.spark
@pytest.mark.parametrize(
    ("message", "printed"),
    [
        # A raw file read only in part: the ingest names it in its own warning line.
        (
            "Skipped the rest of the content in the corrupted file: path: file:///raw/"
            "date=2024-01-01/part-r2-00000.parquet, range: 0-7141, partition values: [19723]",
            False,
        ),
        ("Lost task 0.0 in stage 3.0 (TID 7) (localhost executor driver): boom", False),
        # Other warnings of the same loggers still print.
        ("Skipped missing file: file:///raw/date=2024-01-01/part-r1-00000.parquet", True),
        ("Stage 3 contains a task of very large size (2048 KiB)", True),
    ],
)
def test_the_console_drops_only_the_messages_flowctl_says_itself(
    spark, message: str, printed: bool
) -> None:
    """The filter of conf/log4j2.properties as the tests' own driver JVM applies it."""
    jvm = spark.sparkContext._jvm
    core = jvm.org.apache.logging.log4j.core
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    event = (
        core.impl.Log4jLogEvent.newBuilder()
        .setLoggerName("org.apache.spark.sql.execution.datasources.FileScanRDD")
        .setLevel(jvm.org.apache.logging.log4j.Level.WARN)
        .setMessage(jvm.org.apache.logging.log4j.message.SimpleMessage(message))
        .build()
    )
    result = config.getAppender("console").getFilter().filter(event)
    assert (result.toString() != "DENY") is printed, result.toString()


#: Run in a process of its own whose host zone is New York: what a session hands back.
_ZONE_PROBE = """
import json, sys
from datetime import datetime
from jobs.config import load_conf
from jobs.spark_session import build_spark_session
spark = build_spark_session(load_conf(), app_name="zone-probe",
                            extra_settings={"spark.sql.warehouse.dir": sys.argv[1]})
row = spark.sql("SELECT TIMESTAMP '2024-01-01 12:00:00' AS ts").first()
print(json.dumps({
    "collected": row.ts.isoformat(),
    "jvm_zone": spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID(),
    "python_epoch": datetime.fromtimestamp(0).isoformat(),
}))
"""


@pytest.mark.spark
def test_a_session_hands_back_utc_whatever_the_hosts_zone(tmp_path: Path) -> None:
    """On a host set to New York, PySpark handed a UTC noon back as 07:00 (it converts to the
    Python process's zone) and the JVM ran on New York time; the factory puts both on UTC."""
    import json
    import os
    import subprocess
    import sys

    from jobs.config import PROJECT_ROOT

    env = {**os.environ, "TZ": "America/New_York", "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _ZONE_PROBE, str(tmp_path / "sql")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "collected": "2024-01-01T12:00:00",
        "jvm_zone": "UTC",
        "python_epoch": "1970-01-01T00:00:00",
    }


def test_the_default_conf_starts_every_jvm_on_utc() -> None:
    """A JVM started before Python (spark-submit's driver, a cluster's executors) does not
    inherit the zone the factory sets: the conf gives it, as the Python workers' TZ."""
    settings = load_conf().spark_settings
    for key in (JAVA_OPTIONS, "spark.executor.extraJavaOptions"):
        assert "-Duser.timezone=UTC" in settings[key].split(), key
    assert settings["spark.executorEnv.TZ"] == "UTC"

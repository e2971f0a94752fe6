"""The class-data-sharing archive of flowctl's Spark JVMs: the Spark, Delta and JDK classes a
session loads, parsed and verified once, and mapped by the driver JVMs that start after it is
written: every local session flowctl starts (jobs/spark_session.py ``with_class_archive``: the
jobs run locally, ``flowctl``'s commands, the bench, the tests' workers); a spark-submit names it
in its driver options (``--option`` below), as the tests' spark-submits do.

A Spark JVM spends much of its first minute loading classes. With the archive, a local session
of the pipeline conf started in 8.8-11.8 s instead of 15.4-18.9 s, and its cold round of ingest,
episodes and daily_metrics over 2 million events took 117-156 s and 224-299 CPU-s (five fresh
JVMs) instead of 135-173 s and 257-331 CPU-s (four; alternated, on a machine whose speed moves);
in the tests, a session with a Delta write, read and MERGE took 35-40 CPU-s instead of 49-53.
JDK 17 writes such an archive when a JVM started with ``-XX:ArchiveClassesAtExit`` exits normally
(a "dynamic" archive on top of the JDK's own); a JVM given ``-XX:SharedArchiveFile`` maps it when
its JDK and the jars on its class path are the ones it was written from, and loads every class
itself otherwise (one warning line), so a stale or missing archive costs time, never a result.
The archive is written elsewhere and renamed into place whole: a truncated one would crash the
JVM that maps it.

``python -m jobs.jvm_class_archive`` writes it once per JDK, pyspark and Delta jars (~70 s; the
test command does, beside the suite): the archive's name is a digest of them, under ``.jvm/``;
with ``--option`` it prints the option that maps it ("" when it is not written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobs.config import PROJECT_ROOT

ARCHIVE_DIR = PROJECT_ROOT / ".jvm" / "class-archive"


def _java_binary() -> Path | None:
    """The java PySpark starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    found = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    return Path(found).resolve() if found else None


def _identity() -> str | None:
    """What the archive was written from and must match: the JDK's own library and every jar of
    a session's class path (names, sizes, times); None when pyspark or java is not there."""
    try:
        import pyspark
    except ImportError:
        return None
    java = _java_binary()
    if java is None:
        return None
    parts = [str(java)]
    jdk = java.parent.parent
    parts += [f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jdk.glob("lib/server/*.so")]
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    if not jars:  # a PySpark without its JVM (Airflow's pyspark-client)
        return None
    from jobs.jvm_jars import delta_jar_dir, recorded_jars

    jars += recorded_jars(delta_jar_dir()) or []
    parts += [f"{jar}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}" for jar in jars]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path | None:
    """Where the archive for this JDK and these jars is (or would be) written."""
    identity = _identity()
    return ARCHIVE_DIR / f"spark-{identity}.jsa" if identity else None


def sharing_option() -> str:
    """The JVM option that maps the archive, or "" when it is not written. Quoted: Spark splits
    the driver's Java options on blanks, and the project's path may hold one."""
    path = archive_path()
    return f'-XX:SharedArchiveFile="{path}"' if path and path.is_file() else ""


# The workload whose classes are archived: a session of the pipeline conf (code generation on,
# as the jobs run) and the Delta operations every job uses (a partitioned write, a read with a
# window and an aggregate, a replaceWhere overwrite, a MERGE, a DELETE). The three daily jobs over
# four days as the workload wrote an archive of about the same size (194 MB against 189) in 132 s
# instead of 69.
_WORKLOAD = """
import dataclasses, sys
from jobs.config import load_conf
from jobs.spark_session import build_spark_session

root, dump_option = sys.argv[1], sys.argv[2]
conf = dataclasses.replace(load_conf(), warehouse_dir=root + "/warehouse")
# Naming the option that writes the archive keeps the session from mapping one (a JVM refuses to
# map one archive and write another); a few rows need one shuffle partition.
kept = conf.spark_settings.get("spark.driver.extraJavaOptions", "")
settings = {
    "spark.sql.warehouse.dir": root + "/sql",
    "spark.sql.shuffle.partitions": "1",
    "spark.driver.extraJavaOptions": f"{kept} {dump_option}".strip(),
}
spark = build_spark_session(conf, app_name="flowctl-class-archive", extra_settings=settings)
from delta.tables import DeltaTable
from pyspark.sql import Window, functions as F

table = root + "/warehouse/t"
rows = spark.range(200).selectExpr(
    "id", "id % 7 AS k", "CAST(id AS STRING) AS s", "DATE'2024-01-01' + CAST(id % 3 AS INT) AS date"
)
rows.write.format("delta").partitionBy("date").save(table)
read = spark.read.format("delta").load(table).where("k > 1")
ranked = read.withColumn("n", F.row_number().over(Window.partitionBy("k").orderBy("id")))
ranked.groupBy("date", "k").agg(F.max("n"), F.count("*")).join(rows, "k").collect()
rows.where("date = DATE'2024-01-02'").write.format("delta").mode("overwrite").option(
    "replaceWhere", "date = DATE'2024-01-02'"
).save(table)
target = DeltaTable.forPath(spark, table)
merge = target.alias("a").merge(rows.alias("b"), "a.id = b.id")
merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
target.delete("k = 3")
spark.stop()
# The archive is written as the JVM exits normally: close its stdin (PySpark's gateway exits on
# that) and wait, rather than leave it to be killed with this process.
from pyspark import SparkContext
gateway = SparkContext._gateway
gateway.proc.stdin.close()
sys.exit(gateway.proc.wait(timeout=300))
"""


def build(path: Path) -> None:
    """Write the archive at ``path`` from one run of the workload (the old ones are removed)."""
    with tempfile.TemporaryDirectory(prefix="flowctl-class-archive-") as scratch:
        partial = Path(scratch) / "archive.jsa"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env["PYTHONPATH"] = str(PROJECT_ROOT)
        done = subprocess.run(
            # C1 only: what is archived is the classes loaded, not how they were compiled.
            [
                sys.executable,
                "-c",
                _WORKLOAD,
                scratch,
                f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial}",
            ],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0 or not partial.is_file():
            raise RuntimeError(
                f"the class archive was not written (exit {done.returncode}):\n"
                + done.stderr[-3000:]
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("*.jsa"):
            old.unlink()
        shutil.move(partial, path.with_suffix(".partial"))
        path.with_suffix(".partial").replace(path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.jvm_class_archive",
        description="Write the class-data-sharing archive of flowctl's Spark JVMs once per JDK, "
        "pyspark and Delta jars (~70 s), under .jvm/.",
    )
    parser.add_argument(
        "--option",
        action="store_true",
        help="print the JVM option that maps the archive ('' when it is not written) instead",
    )
    if parser.parse_args(argv).option:  # for a test whose own process has another pyspark
        print(sharing_option())
        return 0
    path = archive_path()
    if path is None:
        print("class archive: no pyspark or java here, none written")
        return 0
    if path.is_file():
        print(f"class archive: {path} (written before)")
        return 0
    started = time.monotonic()
    try:
        build(path)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        # Only time is lost without it: the JVMs load their classes themselves.
        print(f"class archive: not written, Spark's JVMs start without one ({error})")
        return 0
    size_mb = path.stat().st_size / 1e6
    print(f"class archive: {path} written ({size_mb:.0f} MB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

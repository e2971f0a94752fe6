"""The JVM artifacts flowctl loads, resolved with Maven into a folder the project owns (``.jvm/``).

Spark's own Ivy resolver cannot download on the machines flowctl targets, and it mediates versions
differently from Maven, so a jar Maven put into ``~/.m2`` may not be the one Ivy asks for. So
nothing is resolved at run time: ``python -m jobs.jvm_jars`` (run by scripts/setup.sh) copies Delta
Lake and its dependencies with ``mvn dependency:copy-dependencies`` (scripts/jvm/delta-pom.xml),
leaving out every artifact Spark's own jars already provide, and records the list; every session
then starts with ``spark.jars`` naming exactly those files (jobs/spark_session.py). The same Maven
runner fetches the real brokers' distributions (:func:`copy_artifact`).

``--fresh-check`` resolves the same set into an empty, throw-away Maven repository, output folder
and Ivy home and loads it in Spark, so the test command proves the fresh-machine path on every run.
``--classpath`` prints the list for ``spark-submit --jars``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jobs.config import PROJECT_ROOT, ConfError

#: The folder the project owns for JVM artifacts (git ignores it).
JVM_DIR = PROJECT_ROOT / ".jvm"
DELTA_POM = PROJECT_ROOT / "scripts" / "jvm" / "delta-pom.xml"
SCALA_BINARY_VERSION = "2.13"
#: Environment variable naming another local Maven repository than ~/.m2 (an empty one proves
#: that a fresh machine resolves everything from Maven Central).
MAVEN_REPO_ENV_VAR = "FLOWCTL_MAVEN_REPO"
MANIFEST = "jars.txt"
MAVEN_TIMEOUT_S = 900


class JarsError(ConfError):
    """A JVM artifact that cannot be resolved or loaded: the message names it and the fix."""


@dataclass(frozen=True)
class MavenArtifact:
    group_id: str
    artifact_id: str
    version: str

    @property
    def coordinates(self) -> str:
        return f"{self.group_id}:{self.artifact_id}:{self.version}"


def delta_artifact() -> MavenArtifact:
    """The Delta jar matching the installed pyspark and delta-spark (the coordinates
    ``delta.configure_spark_with_delta_pip`` would ask Ivy for)."""
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return MavenArtifact(
        "io.delta",
        f"delta-spark_{spark_minor}_{SCALA_BINARY_VERSION}",
        importlib.metadata.version("delta-spark"),
    )


def delta_jar_dir() -> Path:
    """Where the resolved Delta jars of the installed versions live (one folder per version)."""
    artifact = delta_artifact()
    return JVM_DIR / f"{artifact.artifact_id}-{artifact.version}"


# A jar file name is artifactId-version[-classifier].jar; a version starts with a digit.
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^/]*)\.jar$")


def artifact_id_of(jar_name: str) -> str:
    """``hadoop-client-runtime-3.4.2.jar`` -> ``hadoop-client-runtime``."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


#: Artifacts whose classes a Spark jar of another name already holds: (Spark's, the other one's).
PROVIDED_UNDER_ANOTHER_NAME = (
    ("jcl-over-slf4j", "commons-logging"),  # the org.apache.commons.logging API, over SLF4J
    ("RoaringBitmap", "shims"),  # RoaringBitmap 1.x ships org.roaringbitmap.ArraysShim itself
)


def spark_provided_artifact_ids() -> set[str]:
    """The artifacts of pyspark's own jars folder, and those whose classes one of them holds:
    Spark loads its own first, so a second copy in ``spark.jars`` would be dead weight or clash."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    provided = {artifact_id_of(jar.name) for jar in jars.glob("*.jar")}
    return provided | {other for spark, other in PROVIDED_UNDER_ANOTHER_NAME if spark in provided}


def maven_executable() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(
            "Maven (mvn) is not installed: flowctl resolves its JVM jars with it "
            "(Debian: apt-get install maven; scripts/setup.sh installs it when run as root)"
        )
    return mvn


def run_maven(args: Sequence[str], *, repo: Path | None, what: str) -> None:
    """``mvn -B -q ARGS`` (into ``repo`` instead of ~/.m2 when given); :class:`JarsError` with
    Maven's own error lines when it fails."""
    command = [maven_executable(), "-B", "-q", *args]
    repo = repo or (
        Path(os.environ[MAVEN_REPO_ENV_VAR]) if os.environ.get(MAVEN_REPO_ENV_VAR) else None
    )
    if repo is not None:
        command.append(f"-Dmaven.repo.local={repo}")
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise JarsError(
            f"Maven could not resolve {what} within {MAVEN_TIMEOUT_S} s (no answer from Maven "
            "Central?): run again, or check the network and ~/.m2/settings.xml"
        ) from None
    if result.returncode != 0:
        output = (result.stdout + result.stderr).splitlines()
        errors = [line.removeprefix("[ERROR] ").strip() for line in output if "[ERROR]" in line]
        cause = next((line for line in errors if line), "") or (output[-1] if output else "")
        raise JarsError(f"Maven could not resolve {what}: {cause[:600]}")


def copy_artifact(coordinates: str, into: Path, *, repo: Path | None = None) -> Path:
    """One artifact (``group:artifact:version[:type[:classifier]]``, no dependencies) copied into
    ``into``; its path. Used for the real brokers' distributions."""
    into.mkdir(parents=True, exist_ok=True)
    run_maven(
        ["dependency:copy", f"-Dartifact={coordinates}", f"-DoutputDirectory={into}"],
        repo=repo,
        what=coordinates,
    )
    parts = coordinates.split(":")
    kind = parts[3] if len(parts) > 3 else "jar"
    classifier = f"-{parts[4]}" if len(parts) > 4 else ""
    return into / f"{parts[1]}-{parts[2]}{classifier}.{kind}"


def resolve_delta_jars(into: Path, *, repo: Path | None = None) -> list[Path]:
    """Copy Delta and every dependency Spark does not provide into ``into`` (replaced whole) and
    record the list there; the jars, sorted by name."""
    artifact = delta_artifact()
    staging = Path(tempfile.mkdtemp(prefix=f".{into.name}-", dir=into.parent))
    try:
        run_maven(
            [
                "-f",
                str(DELTA_POM),
                "dependency:copy-dependencies",
                f"-Ddelta.artifactId={artifact.artifact_id}",
                f"-Ddelta.version={artifact.version}",
                f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime",
                "-DexcludeArtifactIds=" + ",".join(sorted(spark_provided_artifact_ids())),
            ],
            repo=repo,
            what=f"{artifact.coordinates} and its dependencies",
        )
        jars = sorted(staging.glob("*.jar"))
        if not any(artifact_id_of(jar.name) == artifact.artifact_id for jar in jars):
            raise JarsError(f"Maven resolved {artifact.coordinates} but copied no jar of it")
        # The manifest is written last: a folder without it is an interrupted resolution.
        (staging / MANIFEST).write_text("".join(f"{jar.name}\n" for jar in jars))
        if into.exists():
            shutil.rmtree(into)
        staging.rename(into)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [into / jar.name for jar in jars]


def recorded_jars(folder: Path) -> list[Path] | None:
    """The jars a finished resolution recorded in ``folder``, if every one is still there."""
    try:
        names = [line for line in (folder / MANIFEST).read_text().splitlines() if line]
    except OSError:
        return None
    jars = [folder / name for name in names]
    return jars if jars and all(jar.is_file() for jar in jars) else None


def delta_jars_or_error() -> list[Path]:
    """The resolved Delta jars for a session's ``spark.jars``; :class:`JarsError` saying how to
    resolve them when they are missing."""
    jars = recorded_jars(delta_jar_dir())
    if jars is None:
        raise JarsError(
            f"Delta Lake's jars ({delta_artifact().coordinates}) are not resolved in "
            f"{delta_jar_dir()}: run `bash scripts/setup.sh` (or `.venv/bin/python -m "
            "jobs.jvm_jars`); on a cluster that has Delta, set delta.resolve_jars: false"
        )
    return jars


def _verified_marker(folder: Path, jars: Sequence[Path]) -> Path:
    """Names what a good round trip depended on: pyspark, the Java runtime and the jar list."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or ""
    parts = [
        f"pyspark {importlib.metadata.version('pyspark')}",
        f"java {os.path.realpath(java) if java else 'none'}",
        *(jar.name for jar in jars),
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return folder / f"verified-{digest}"


def delta_round_trip(jars: Sequence[Path], ivy_home: Path) -> None:
    """Start a bare local Spark with exactly ``jars`` (Ivy pointed at ``ivy_home``), write and read
    a Delta table; :class:`JarsError` when the jars do not load."""
    from pyspark.sql import SparkSession

    from jobs.spark_session import DELTA_SESSION_SETTINGS, LOG4J2_CONF

    builder = (
        SparkSession.builder.master("local[1]")
        .appName("flowctl-jar-check")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.jars.ivy", str(ivy_home))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.databricks.delta.snapshotPartitions", "1")
        .config("spark.driver.extraJavaOptions", f'-Dlog4j2.configurationFile="{LOG4J2_CONF}"')
    )
    for key, value in DELTA_SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
        try:
            with tempfile.TemporaryDirectory(prefix="flowctl-delta-check-") as scratch:
                spark.range(3).write.format("delta").save(f"{scratch}/check")
                rows = spark.read.format("delta").load(f"{scratch}/check").count()
        finally:
            spark.stop()
    except Exception as error:  # any failure here means the jar set is unusable
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise JarsError(
            f"the resolved Delta jars do not load in Spark ({type(error).__name__}: {first[:300]})"
        ) from None
    if rows != 3:
        raise JarsError(f"a Delta round trip with the resolved jars read {rows} rows, not 3")


def ensure_delta_jars(*, recheck: bool = False) -> str:
    """Resolve the Delta jars unless a finished resolution is there, prove once that they load; a
    one-line account of what happened."""
    folder, artifact = delta_jar_dir(), delta_artifact()
    jars = recorded_jars(folder)
    if jars is not None and not recheck and _verified_marker(folder, jars).is_file():
        return (
            f"jars: {artifact.coordinates} resolved before ({len(jars)} jars in "
            f"{_shown(folder)}): nothing to fetch"
        )
    started = time.monotonic()
    fetched = jars is None
    if jars is None:
        JVM_DIR.mkdir(parents=True, exist_ok=True)
        jars = resolve_delta_jars(folder)
    with tempfile.TemporaryDirectory(prefix="flowctl-ivy-") as ivy_home:
        delta_round_trip(jars, Path(ivy_home))
    _verified_marker(folder, jars).write_text(f"{artifact.coordinates}\n")
    how = "resolved with Maven" if fetched else "checked again"
    return (
        f"jars: {artifact.coordinates} {how} ({len(jars)} jars in {_shown(folder)}, "
        f"{time.monotonic() - started:.0f} s); a Delta table was written and read back"
    )


def fresh_check() -> str:
    """Resolve the Delta jars into an empty Maven repository, output folder and Ivy home, load
    them, and compare them with the project's set; a one-line account."""
    artifact = delta_artifact()
    with tempfile.TemporaryDirectory(prefix="flowctl-fresh-jars-") as scratch:
        root = Path(scratch)
        started = time.monotonic()
        jars = resolve_delta_jars(root / "jars", repo=root / "m2")
        resolved_s = time.monotonic() - started
        (root / "ivy").mkdir()
        delta_round_trip(jars, root / "ivy")
        ivy_files = sum(1 for path in (root / "ivy").rglob("*") if path.is_file())
        if ivy_files:
            raise JarsError(
                f"Spark's Ivy wrote {ivy_files} files: something still resolves at run time"
            )
        project = recorded_jars(delta_jar_dir())
        fresh_names = [jar.name for jar in jars]
        if project is not None and [jar.name for jar in project] != fresh_names:
            raise JarsError(
                f"the project's Delta jars in {delta_jar_dir()} differ from a fresh resolution "
                f"({sorted({j.name for j in project} ^ set(fresh_names))}): run "
                "`.venv/bin/python -m jobs.jvm_jars --recheck` after deleting that folder"
            )
    return (
        f"jars: {artifact.coordinates} resolved from an empty Maven repository in "
        f"{resolved_s:.0f} s ({len(jars)} jars, Ivy untouched); a Delta table was written and "
        "read back with them"
    )


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--recheck", action="store_true", help="load the resolved jars in Spark again"
    )
    action.add_argument(
        "--fresh-check",
        action="store_true",
        help="resolve into an empty Maven repository and Ivy home, load, compare",
    )
    action.add_argument(
        "--classpath",
        action="store_true",
        help="print the resolved jars comma-separated (for spark-submit --jars)",
    )
    args = parser.parse_args(argv)
    try:
        if args.classpath:
            print(",".join(str(jar) for jar in delta_jars_or_error()))
        elif args.fresh_check:
            print(fresh_check())
        else:
            print(ensure_delta_jars(recheck=args.recheck))
    except JarsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

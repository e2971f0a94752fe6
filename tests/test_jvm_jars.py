"""The JVM jars a session loads: resolved by Maven into the project's folder, named one by one.

A finished resolution is recognised by its manifest and every jar on disk; a second setup run
starts neither Maven nor Spark; Maven's failures and a missing Maven are one line naming the cause.
(That the real set resolves from an empty Maven repository and loads in Spark is proved on every
run of the test command: scripts/test.sh runs ``python -m jobs.jvm_jars --fresh-check``.)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from jobs import jvm_jars, spark_session
from jobs.config import load_conf


@pytest.fixture
def jar_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "jvm" / "delta"
    monkeypatch.setattr(jvm_jars, "JVM_DIR", tmp_path / "jvm")
    monkeypatch.setattr(jvm_jars, "delta_jar_dir", lambda: folder)
    return folder


def _write_resolution(folder: Path, names: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    (folder / jvm_jars.MANIFEST).write_text("".join(f"{name}\n" for name in names))
    return [folder / name for name in names]


@pytest.mark.parametrize(
    "name, artifact",
    [
        ("hadoop-client-runtime-3.4.2.jar", "hadoop-client-runtime"),
        ("delta-spark_4.1_2.13-4.3.1.jar", "delta-spark_4.1_2.13"),
        ("zstd-jni-1.5.7-6.jar", "zstd-jni"),
        ("RoaringBitmap-1.3.0.jar", "RoaringBitmap"),
        ("jakarta.servlet-api-5.0.0.jar", "jakarta.servlet-api"),
        ("no-version.jar", "no-version"),
    ],
)
def test_artifact_id_of_a_jar_name(name: str, artifact: str) -> None:
    assert jvm_jars.artifact_id_of(name) == artifact


def test_what_spark_provides_includes_classes_under_another_name() -> None:
    provided = jvm_jars.spark_provided_artifact_ids()
    assert {"hadoop-client-runtime", "scala-library", "jcl-over-slf4j"} <= provided
    assert "commons-logging" in provided  # jcl-over-slf4j holds its classes
    assert not any(name.startswith("delta-") for name in provided)


def test_a_folder_without_a_manifest_is_no_resolution(jar_dir: Path) -> None:
    jar_dir.mkdir(parents=True)
    (jar_dir / "delta-spark_4.1_2.13-4.3.1.jar").write_bytes(b"PK")
    assert jvm_jars.recorded_jars(jar_dir) is None


def test_a_finished_resolution_is_every_recorded_jar(jar_dir: Path) -> None:
    jars = _write_resolution(jar_dir, ["a-1.jar", "b-2.jar"])
    assert jvm_jars.recorded_jars(jar_dir) == jars
    jars[1].unlink()
    assert jvm_jars.recorded_jars(jar_dir) is None


def test_a_session_without_resolved_jars_says_how_to_resolve(jar_dir: Path) -> None:
    with pytest.raises(jvm_jars.JarsError, match=r"run `bash scripts/setup.sh`"):
        spark_session.build_spark_session(load_conf())


@pytest.fixture
def calls(jar_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Resolution and the Spark round trip, recorded instead of run."""
    made: list[str] = []

    def resolve(into: Path, *, repo: Path | None = None) -> list[Path]:
        made.append("maven")
        return _write_resolution(
            into, ["delta-spark_4.1_2.13-4.3.1.jar", "delta-storage-4.3.1.jar"]
        )

    monkeypatch.setattr(jvm_jars, "resolve_delta_jars", resolve)
    monkeypatch.setattr(jvm_jars, "delta_round_trip", lambda jars, ivy: made.append("spark"))
    return made


def test_the_second_setup_run_starts_no_resolution_and_says_so(calls: list[str]) -> None:
    first = jvm_jars.ensure_delta_jars()
    assert calls == ["maven", "spark"]
    assert "resolved with Maven (2 jars" in first
    second = jvm_jars.ensure_delta_jars()
    assert calls == ["maven", "spark"]  # nothing started
    assert "resolved before" in second and "nothing to fetch" in second
    assert "\n" not in second


def test_a_missing_jar_means_a_new_resolution(calls: list[str], jar_dir: Path) -> None:
    jvm_jars.ensure_delta_jars()
    (jar_dir / "delta-storage-4.3.1.jar").unlink()
    assert "resolved with Maven" in jvm_jars.ensure_delta_jars()
    assert calls == ["maven", "spark", "maven", "spark"]


def test_recheck_loads_the_jars_again_without_maven(calls: list[str]) -> None:
    jvm_jars.ensure_delta_jars()
    assert "checked again" in jvm_jars.ensure_delta_jars(recheck=True)
    assert calls == ["maven", "spark", "spark"]


def test_jars_that_do_not_load_leave_no_mark(
    calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(jars: list[Path], ivy: Path) -> None:
        raise jvm_jars.JarsError("the resolved Delta jars do not load in Spark (boom)")

    monkeypatch.setattr(jvm_jars, "delta_round_trip", fails)
    with pytest.raises(jvm_jars.JarsError, match="do not load"):
        jvm_jars.ensure_delta_jars()
    monkeypatch.setattr(jvm_jars, "delta_round_trip", lambda jars, ivy: calls.append("spark"))
    assert "checked again" in jvm_jars.ensure_delta_jars()  # the check runs again, Maven does not


def _fake_mvn(folder: Path, script: str) -> None:
    mvn = folder / "mvn"
    mvn.write_text(f"#!/bin/sh\n{script}\n")
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)


def test_a_maven_failure_names_its_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cause = "Failed to execute goal: Could not find artifact io.delta:nope:jar:9"
    _fake_mvn(tmp_path, f'echo "[ERROR] {cause}"; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(jvm_jars.JarsError) as raised:
        jvm_jars.copy_artifact("io.delta:nope:9", tmp_path / "out")
    message = str(raised.value)
    assert message.startswith("Maven could not resolve io.delta:nope:9: Failed to execute goal")
    assert "Could not find artifact io.delta:nope:jar:9" in message
    assert "memory" not in message


def test_a_maven_repository_can_be_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_mvn(tmp_path, f'echo "$@" > {tmp_path}/args')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(jvm_jars.MAVEN_REPO_ENV_VAR, str(tmp_path / "m2"))
    path = jvm_jars.copy_artifact(
        "org.apache.activemq:apache-artemis:2.40.0:tar.gz:bin", tmp_path / "out"
    )
    assert path == tmp_path / "out" / "apache-artemis-2.40.0-bin.tar.gz"
    args = (tmp_path / "args").read_text().split()
    assert f"-Dmaven.repo.local={tmp_path / 'm2'}" in args
    assert "-Dartifact=org.apache.activemq:apache-artemis:2.40.0:tar.gz:bin" in args


def test_without_maven_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_jars.shutil, "which", lambda name: None)
    with pytest.raises(jvm_jars.JarsError, match=r"apt-get install maven"):
        jvm_jars.maven_executable()

"""The session factory's local choices.

The recorded Delta jar list is used only when every jar in it is still on disk; fetch-jars skips
Spark only when a stamp says that list passed its check with the same versions and conf; flowctl's
log4j2 file is for a local master only, and never over a user's own logging configuration.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock
from urllib.parse import urlparse

import pytest

from jobs import spark_session
from jobs.config import DEFAULT_CONF, PipelineConf, load_conf


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_no_recorded_list_means_resolve(cache: Path) -> None:
    assert spark_session.resolved_delta_jars() == []


def test_recorded_jars_are_used_when_all_exist(cache: Path) -> None:
    jars = [cache / "delta-spark.jar", cache / "delta-storage.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    urls = [jar.as_uri() for jar in jars]
    spark_session._record_resolved_jars(spark_session.delta_maven_artifact(), urls)
    assert spark_session.resolved_delta_jars() == urls


def test_a_missing_jar_invalidates_the_list(cache: Path) -> None:
    present = cache / "delta-spark.jar"
    present.write_bytes(b"PK")
    urls = [present.as_uri(), (cache / "gone.jar").as_uri()]
    spark_session._record_resolved_jars(spark_session.delta_maven_artifact(), urls)
    assert spark_session.resolved_delta_jars() == []


def test_the_list_belongs_to_one_delta_version(cache: Path) -> None:
    jar = cache / "delta-spark.jar"
    jar.write_bytes(b"PK")
    spark_session._record_resolved_jars("io.delta:delta-spark_4.1_2.13:0.0.1", [jar.as_uri()])
    assert spark_session.resolved_delta_jars() == []


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


@pytest.fixture
def resolve_again(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """fetch-jars' retries in a fresh JVM: recorded, never run (each one fails)."""
    commands: list[list[str]] = []

    def call(command: list[str]) -> int:
        commands.append(command)
        return 1

    monkeypatch.setattr(subprocess, "call", call)
    return commands


@pytest.fixture
def recorded_jars(cache: Path, resolve_again: list[list[str]]) -> list[str]:
    """Two jar files on disk, recorded as fetch-jars' resolved list."""
    jars = [cache / "delta-spark.jar", cache / "delta-storage.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    urls = [jar.as_uri() for jar in jars]
    spark_session._record_resolved_jars(spark_session.delta_maven_artifact(), urls)
    return urls


@pytest.fixture
def conf_file(cache: Path) -> PipelineConf:
    source = cache / "pipeline.yaml"
    source.write_text(DEFAULT_CONF.read_text())
    return load_conf(source)


def _failing_spark(*args: object, **kwargs: object) -> Any:
    raise RuntimeError("no Delta here")


def test_fetch_jars_stamps_a_good_round_trip_and_then_skips_spark(
    recorded_jars: list[str], conf_file: PipelineConf, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = MagicMock()
    spark.read.format.return_value.load.return_value.count.return_value = 3
    monkeypatch.setattr(spark_session, "build_spark_session", lambda *a, **k: spark)
    assert spark_session.fetch_jars(conf_file) == 0
    assert spark_session._verified_stamp(conf_file, recorded_jars).is_file()

    started = MagicMock(side_effect=_failing_spark)
    monkeypatch.setattr(spark_session, "build_spark_session", started)
    assert spark_session.fetch_jars(conf_file) == 0
    started.assert_not_called()


def test_the_stamp_belongs_to_one_conf_and_one_jar_list(
    recorded_jars: list[str], conf_file: PipelineConf
) -> None:
    stamp = spark_session._verified_stamp(conf_file, recorded_jars)
    assert spark_session._verified_stamp(conf_file, recorded_jars) == stamp
    assert spark_session._verified_stamp(conf_file, recorded_jars[:1]) != stamp
    conf_file.source.write_text(conf_file.source.read_text() + "\n# changed\n")
    assert spark_session._verified_stamp(conf_file, recorded_jars) != stamp


@pytest.mark.parametrize("stamped, recheck", [(False, False), (True, True)])
def test_without_a_stamp_or_with_recheck_fetch_jars_checks_again(
    recorded_jars: list[str],
    conf_file: PipelineConf,
    resolve_again: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    stamped: bool,
    recheck: bool,
) -> None:
    stamp = spark_session._verified_stamp(conf_file, recorded_jars)
    if stamped:
        stamp.parent.mkdir(parents=True)
        stamp.write_text("ok\n")
    monkeypatch.setattr(spark_session, "build_spark_session", _failing_spark)
    assert spark_session.fetch_jars(conf_file, recheck=recheck) == 1
    assert resolve_again  # the recorded list failed: forgotten, resolved again in a fresh JVM
    assert not stamp.exists()
    assert spark_session.resolved_delta_jars() == []


def test_a_stamp_does_not_outlive_a_missing_jar(
    recorded_jars: list[str], conf_file: PipelineConf, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = spark_session._verified_stamp(conf_file, recorded_jars)
    stamp.parent.mkdir(parents=True)
    stamp.write_text("ok\n")
    Path(urlparse(recorded_jars[0]).path).unlink()
    prefetched: list[str] = []
    monkeypatch.setattr(spark_session, "_prefetch_with_maven", prefetched.append)
    monkeypatch.setattr(spark_session, "build_spark_session", _failing_spark)
    assert spark_session.fetch_jars(conf_file) == 1  # resolves afresh (and here Spark fails)
    assert prefetched == [spark_session.delta_maven_artifact()]

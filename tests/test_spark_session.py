"""The session factory's local choices.

The recorded Delta jar list is used only when every jar in it is still on disk; flowctl's log4j2
file only for a local master, and never over a user's own logging configuration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import spark_session


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

"""The session factory's local choices.

flowctl's log4j2 file is for a local master only, and never over a user's own logging
configuration; a setting that keeps the JVM from starting is named in the error. (The Delta jars
a session loads: tests/test_jvm_jars.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import spark_session

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

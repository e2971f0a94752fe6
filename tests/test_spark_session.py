"""The recorded Delta jar list: used only when every jar in it is still on disk."""

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

"""Ingest on damaged or awkwardly placed raw input: every quarantine record says why, and where."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from jobs import ingest
from jobs.delta_io import read_table
from schemas.tables import PIPELINE_TABLES
from tests.conftest import at, event, write_raw

pytestmark = pytest.mark.spark

DAY1 = date(2024, 1, 1)
QUARANTINE = PIPELINE_TABLES["broker_events_quarantine"][1]
BRONZE = PIPELINE_TABLES["broker_events"][1]


def _copy_with_hadoop(spark, source: Path, target: Path) -> None:
    """Write ``source``'s bytes to ``target`` through Hadoop's local file system, which leaves a
    checksum sidecar ``.<name>.crc`` beside it, as any Spark or Hadoop writer on local disk does."""
    jvm, hadoop_conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(hadoop_conf)
    stream = local.create(jvm.org.apache.hadoop.fs.Path(str(target)), True)
    stream.write(bytearray(source.read_bytes()))
    stream.close()


def test_a_stale_checksum_sidecar_is_named_as_the_cause_of_a_partial_read(
    spark, pipeline_conf, tmp_path, caplog
):
    """Spark's local file system verifies ``.<name>.crc`` and fails where it differs: a sidecar
    left from an earlier version of the file makes an intact file unreadable. The quarantine
    record, the report and the warning say so, and how to fix it."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    staging = tmp_path / "staging"
    (first,) = write_raw(staging, [event(1, at(1, 11), "enqueue", run_id="r2", queue="q")])
    target = raw / "date=2024-01-01" / "part-r2-00000.parquet"
    _copy_with_hadoop(spark, first, target)
    sidecar = target.parent / ".part-r2-00000.parquet.crc"
    assert sidecar.exists()
    # A sidecar Hadoop wrote matches: the check reads Hadoop's format right.
    local = pafs.LocalFileSystem()
    assert ingest._stale_checksum_sidecar(local, target.as_posix()) is None
    assert ingest.run_ingest(spark, conf, DAY1, DAY1)["rows_accepted"] == 4

    # The file is replaced by another version (more rows), the sidecar is left behind.
    rows = [event(i, at(1, 11, i), "enqueue", run_id="r2", queue="q") for i in range(1, 40)]
    (second,) = write_raw(staging, rows, part="00001")
    target.write_bytes(second.read_bytes())
    assert ingest._stale_checksum_sidecar(local, target.as_posix()) == sidecar.name

    with caplog.at_level("WARNING", logger="flowctl.ingest"):
        report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["files_partially_read"], report["rows_accepted"], report["balanced"]) == (
        1,
        3,
        True,
    )
    detail = report["partially_read_files"]["date=2024-01-01/part-r2-00000.parquet"]
    assert detail["rows_declared"] == 39 and detail["rows_read"] < 39
    assert detail["cause"].startswith(
        "checksum sidecar .part-r2-00000.parquet.crc does not match the file, which pyarrow "
        "reads whole (39 rows): delete the sidecar if the file is intact"
    )
    (record,) = read_table(spark, conf, QUARANTINE).where("record_kind = 'file'").collect()
    assert (record.reason, record.file_rows) == ("partially_read_file", 39)
    assert json.loads(record.detail) == detail
    (warning,) = [r.getMessage() for r in caplog.records if "only in part" in r.getMessage()]
    assert "part-r2-00000.parquet" in warning and detail["cause"] in warning

    sidecar.unlink()  # what the cause says to do
    report = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert (report["files_partially_read"], report["rows_accepted"]) == (0, 42)

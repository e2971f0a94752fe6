"""Ingest on damaged or awkwardly placed raw input: every quarantine record says why, and where."""

from __future__ import annotations

import dataclasses
import json
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs import ingest, ingest_read, raw_files
from jobs.delta_io import days_predicate, read_table, replace_where_at, table_path
from schemas.tables import PIPELINE_TABLES
from tests.conftest import _lenient_schema, at, event, naive, write_raw

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
    assert raw_files.stale_checksum_sidecar(local, target.as_posix()) is None
    assert ingest.run_ingest(spark, conf, DAY1, DAY1)["rows_accepted"] == 4

    # The file is replaced by another version (more rows), the sidecar is left behind.
    rows = [event(i, at(1, 11, i), "enqueue", run_id="r2", queue="q") for i in range(1, 40)]
    (second,) = write_raw(staging, rows, part="00001")
    target.write_bytes(second.read_bytes())
    assert raw_files.stale_checksum_sidecar(local, target.as_posix()) == sidecar.name

    # Bronze holds rows of the file's earlier version: a rerun that would delete them is refused,
    # naming the file and the cause.
    with pytest.raises(ingest.IngestRefused) as refused:
        ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert "date=2024-01-01/part-r2-00000.parquet (checksum sidecar" in str(refused.value)
    caplog.clear()
    with caplog.at_level("WARNING", logger="flowctl.ingest"):
        report = ingest.run_ingest(spark, conf, DAY1, DAY1, allow_empty_days=True)

    assert (report["files_partially_read"], report["rows_accepted"], report["balanced"]) == (
        1,
        3,
        True,
    )
    # Spark fails on the checksum of the footer's bytes, before any row: pyarrow reads the
    # file's one row group on its own, its rows into the quarantine, counted as read.
    assert (report["rows_quarantined"], report["rows_unreadable"]) == (39, 0)
    detail = report["partially_read_files"]["date=2024-01-01/part-r2-00000.parquet"]
    assert (detail["rows_declared"], detail["rows_read"], detail["rows_recovered"]) == (39, 39, 39)
    assert detail["cause"].startswith(
        "checksum sidecar .part-r2-00000.parquet.crc does not match the file, which pyarrow "
        "reads whole (39 rows): delete the sidecar if the file is intact"
    )
    assert detail["cause"].endswith("; Spark read no row, pyarrow 39 from row group 0")
    (record,) = read_table(spark, conf, QUARANTINE).where("record_kind = 'file'").collect()
    assert (record.reason, record.file_rows) == ("partially_read_file", 39)
    assert json.loads(record.detail) == detail
    (warning,) = [r.getMessage() for r in caplog.records if "only in part" in r.getMessage()]
    assert "part-r2-00000.parquet" in warning and detail["cause"] in warning

    sidecar.unlink()  # what the cause says to do
    report = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert (report["files_partially_read"], report["rows_accepted"]) == (0, 42)


def test_a_quarantined_row_says_where_it_is_in_its_file(spark, pipeline_conf):
    """``source_row_index``: the row's 0-based position in ``source_file``, so that a user can
    find it there (file records have none)."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    rows = [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 8)]
    rows[2] = event(3, at(1, 10, 3), "warp", queue="q")
    rows[5] = {**rows[5], "broker": None}
    (path,) = write_raw(raw, [*rows, dict(rows[0])])  # the copy of seq 1 is the last row
    (raw / "date=2024-01-01" / "part-x-00000.parquet").write_bytes(b"not parquet")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_accepted"], report["rows_quarantined"], report["balanced"]) == (5, 3, True)
    quarantine = read_table(spark, conf, QUARANTINE).collect()
    found = {(r.record_kind, r.seq, r.reason): r.source_row_index for r in quarantine}
    assert found == {
        ("row", 3, "unknown_event_type"): 2,
        ("row", 6, "null_broker"): 5,
        ("row", 1, "duplicate"): 7,
        ("file", None, "unreadable_file:ArrowInvalid: Parquet magic bytes not found in footer. "
         "Either the file is corrupted or this is not a parquet file."): None,
    }  # fmt: skip
    table = pq.read_table(path)
    for r in quarantine:
        if r.record_kind == "row":
            assert table.slice(r.source_row_index, 1).column("seq")[0].as_py() == r.seq


def test_a_quarantine_table_of_the_previous_version_gets_the_row_index_column(spark, pipeline_conf):
    """A warehouse whose quarantine was created without ``source_row_index``: the ingest adds
    the column (null in the rows written before) instead of failing on the write."""
    _, conf = pipeline_conf(validate=False)
    path = table_path(conf, QUARANTINE)
    previous = dataclasses.replace(
        QUARANTINE, columns=tuple(c for c in QUARANTINE.columns if c.name != "source_row_index")
    )
    old_row = {"date": date(2024, 1, 5), "source_file": "date=2024-01-05/old.parquet",
               "record_kind": "row", "reason": "unknown_event_type", "seq": 9}  # fmt: skip
    frame = spark.createDataFrame([old_row], previous.to_spark(list(old_row)))
    frame = frame.select(
        *(F.col(c) if c in old_row else F.lit(None).alias(c) for c in previous.names)
    )
    replace_where_at(
        spark, path, previous, frame, days_predicate("date", date(2024, 1, 5), date(2024, 1, 5))
    )
    assert "source_row_index" not in spark.read.format("delta").load(path).columns

    write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "warp", queue="q"),
                                   event(2, at(1, 11), "enqueue", queue="q")])  # fmt: skip
    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_accepted"], report["rows_quarantined"], report["balanced"]) == (1, 1, True)
    rows = spark.read.format("delta").load(path).orderBy("date").collect()
    assert [(r.date, r.seq, r.source_row_index) for r in rows] == [
        (DAY1, 1, 0),
        (date(2024, 1, 5), 9, None),
    ]


def test_a_raw_root_with_glob_characters_is_read_literally(spark, pipeline_conf, tmp_path):
    """Spark expands the paths it reads as globs: a raw root named ``r\\x[1]{a,b}*?`` would match
    nothing of its own, and here the sibling ``rx1ab`` instead. It is read as named."""
    _, conf = pipeline_conf(validate=False)
    root = tmp_path / "r\\x[1]{a,b}*?" / "raw"
    write_raw(root, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    sibling = tmp_path / "rx1ab" / "raw"  # what the root, taken as a glob, matches
    write_raw(sibling, [event(i, at(1, 11), "enqueue", queue="q") for i in range(100, 110)])

    report = ingest.run_ingest(spark, conf, DAY1, DAY1, raw_dir=str(root))

    assert (report["rows_read"], report["rows_accepted"], report["balanced"]) == (3, 3, True)
    bronze = read_table(spark, conf, BRONZE).collect()
    assert sorted((r.seq, r.source_file) for r in bronze) == [
        (i, "date=2024-01-01/part-r1-00000.parquet") for i in range(1, 4)
    ]


@pytest.mark.parametrize(
    "name", ["part 1.parquet", "part+1.parquet", "part%201.parquet", "pärt-1.parquet"]
)
def test_a_raw_file_name_hadoop_encodes_is_its_source_file(spark, pipeline_conf, tmp_path, name):
    """Hadoop reports file names URI-encoded (a space as %20, '%' as %25; '+' and, here, a
    non-ASCII letter as they are): the counting pass, which groups per file on the name as read,
    and the bronze and quarantine writes all name the file as it is on disk, so it is neither
    taken for a file read only in part nor quarantined under another name."""
    _, conf = pipeline_conf(validate=False)
    root = tmp_path / "raw"
    rows = [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)]
    rows.append({**event(4, at(1, 10, 4), "enqueue", queue="q"), "broker": None})
    (written,) = write_raw(root, rows)
    written.rename(written.with_name(name))

    report = ingest.run_ingest(spark, conf, DAY1, DAY1, raw_dir=str(root))

    relative = f"date=2024-01-01/{name}"
    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (4, 3, 1)
    assert (report["files_partially_read"], report["balanced"]) == (0, True)
    bronze = read_table(spark, conf, BRONZE).collect()
    assert sorted((r.seq, r.source_file) for r in bronze) == [(i, relative) for i in range(1, 4)]
    quarantine = read_table(spark, conf, QUARANTINE).collect()
    assert [(r.seq, r.source_file, r.reason) for r in quarantine] == [(4, relative, "null_broker")]


def _write_raw_table(
    raw: Path,
    name: str,
    rows: list[dict],
    *,
    drop: tuple[str, ...] = (),
    types: dict[str, pa.DataType] | None = None,
    row_group_size: int | None = None,
) -> Path:
    """Write ``rows`` as <raw>/date=2024-01-01/``name``, without the ``drop`` columns and with the
    Arrow ``types`` given for some: a file whose schema breaks the contract."""
    table = pa.Table.from_pylist(rows, schema=_lenient_schema()).drop_columns(list(drop))
    for column, wanted in (types or {}).items():
        index = table.schema.get_field_index(column)
        table = table.set_column(index, column, table.column(column).cast(wanted))
    path = raw / "date=2024-01-01" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _quarantine_and_bronze(spark, conf) -> dict[str, list]:
    return {
        table.name: sorted(map(tuple, read_table(spark, conf, table).collect()), key=repr)
        for table in (BRONZE, QUARANTINE)
    }


def _counts(report: dict) -> dict:
    """The report but bronze's Delta version, which every write moves on."""
    return {name: value for name, value in report.items() if name != "bronze_version"}


def test_rows_of_files_quarantined_for_their_schema_are_quarantined_as_rows(spark, pipeline_conf):
    """DESIGN §5: the quarantine holds every rejected row with its reason. A file missing a
    required column and one with nanosecond timestamps (Spark cannot read them) are quarantined
    whole, and pyarrow reads their rows into the quarantine: each row with the file's problem as
    reason, its position in the file, and the contract columns the file holds in a type that
    reads as the contract's (the others null: the raw file keeps them). A zero-byte file has no
    rows to read: a file record only."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    no_type = [event(i, at(1, 11, i), "enqueue", run_id="r2", queue="q", depth_msgs=i)
               for i in range(1, 6)]  # fmt: skip
    _write_raw_table(raw, "part-r2-00000.parquet", no_type, drop=("event_type",))
    nanos = [event(i, at(1, 12, i), "dequeue", run_id="r3", queue="q") for i in range(1, 5)]
    # Two rows per row group: pyarrow hands them over in several batches.
    _write_raw_table(raw, "part-r3-00000.parquet", nanos,
                     types={"ts": pa.timestamp("ns", tz="UTC")}, row_group_size=2)  # fmt: skip
    (raw / "date=2024-01-01" / "part-r9-00000.parquet").write_bytes(b"")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    no_type_reason = "missing_column:event_type"
    nanos_reason = report["quarantined_files"]["date=2024-01-01/part-r3-00000.parquet"]
    assert nanos_reason.startswith("wrong_type:ts:timestamp[ns, tz=UTC] (Spark cannot read")
    # 3 + 5 + 4 rows read; the 9 of the two files quarantined whole are quarantined as rows, so
    # that rows_read = accepted + quarantined. No row is left unread in a file quarantined whole
    # (rows_in_files_quarantined 0): the zero-byte file has no footer, so no rows declared.
    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (12, 3, 9)
    assert (report["rows_declared"], report["rows_in_files_quarantined"]) == (12, 0)
    assert (report["files_quarantined"], report["files_without_footer"]) == (3, 1)
    assert report["quarantine_reasons"] == {no_type_reason: 5, nanos_reason: 4}
    assert report["balanced"]

    quarantine = read_table(spark, conf, QUARANTINE)
    rows = quarantine.where("record_kind = 'row'").orderBy("source_file", "source_row_index")
    found = [(r.source_file, r.source_row_index, r.reason, r.run_id, r.seq, r.ts, r.event_type,
              r.depth_msgs) for r in rows.collect()]  # fmt: skip
    assert found == [
        *(("date=2024-01-01/part-r2-00000.parquet", i - 1, no_type_reason, "r2", i,
           naive(at(1, 11, i)), None, i) for i in range(1, 6)),
        # The nanosecond ts is null (the contract's type cannot hold it without loss).
        *(("date=2024-01-01/part-r3-00000.parquet", i - 1, nanos_reason, "r3", i, None,
           "dequeue", None) for i in range(1, 5)),
    ]  # fmt: skip
    files = quarantine.where("record_kind = 'file'").orderBy("source_file").collect()
    assert [(r.source_file.split("/")[-1], r.reason.split(":")[0], r.file_rows, r.detail)
            for r in files] == [
        ("part-r2-00000.parquet", "missing_column", 5, None),
        ("part-r3-00000.parquet", "wrong_type", 4, None),
        ("part-r9-00000.parquet", "unreadable_file", None, None),
    ]  # fmt: skip

    # A rerun replaces the days' rows with the same ones.
    before = _quarantine_and_bronze(spark, conf)
    again = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert _counts(again) == _counts(report)
    assert again["bronze_version"] > report["bronze_version"]  # a new commit of the same rows
    assert _quarantine_and_bronze(spark, conf) == before


def _damage_row_group_column(path: Path, row_group: int, column: str) -> None:
    """Overwrite the compressed pages of one column chunk of one row group: the footer and the
    earlier row groups stay readable, decoding that chunk fails."""
    meta = pq.ParquetFile(path).metadata.row_group(row_group)
    (chunk,) = (meta.column(i) for i in range(meta.num_columns)
                if meta.column(i).path_in_schema == column)  # fmt: skip
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 20 : start + chunk.total_compressed_size - 2] = b"\xab" * (
        chunk.total_compressed_size - 22
    )
    path.write_bytes(bytes(data))


def test_a_file_quarantined_whole_whose_rows_pyarrow_fails_on_keeps_its_file_record_only(
    spark, pipeline_conf
):
    """All or nothing: pyarrow reads the first row group of a file missing a required column and
    fails on the second (a damaged page). None of its rows is quarantined as a row; the file
    record says why in ``detail``, and the report counts the footer's rows as
    rows_in_files_quarantined (not read), so the counts still balance."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    rows = [event(i, at(1, 11, 0, 0, i), "enqueue", run_id="r2", queue="q", message_id=1000 + i)
            for i in range(200)]  # fmt: skip
    path = _write_raw_table(raw, "part-r2-00000.parquet", rows, drop=("event_type",),
                            row_group_size=100)  # fmt: skip
    _damage_row_group_column(path, 1, "message_id")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (3, 3, 0)
    assert (report["rows_declared"], report["rows_in_files_quarantined"]) == (203, 200)
    assert report["balanced"]
    (record,) = read_table(spark, conf, QUARANTINE).collect()
    assert (record.record_kind, record.reason, record.file_rows) == (
        "file",
        "missing_column:event_type",
        200,
    )
    detail = json.loads(record.detail)
    assert (detail["rows_declared"], detail["rows_read"]) == (200, 0)
    assert detail["cause"].startswith("OSError: ")


def test_rows_of_a_file_spark_cannot_address_are_quarantined_as_rows(spark, pipeline_conf):
    """A file named with ':' (Hadoop reads a URI scheme) is quarantined whole, asking for a
    rename; pyarrow reads its rows, whole and as they are, into the quarantine. A rerun gives
    identical tables."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(1, at(1, 10), "enqueue", queue="q")])
    rows = [event(i, at(1, 11, i), "enqueue", run_id="r2", queue="q", depth_msgs=i)
            for i in range(1, 4)]  # fmt: skip
    (made,) = write_raw(raw, rows)
    made.rename(made.parent / "r2:colon.parquet")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (4, 1, 3)
    assert (report["rows_declared"], report["rows_in_files_quarantined"]) == (4, 0)
    (reason,) = report["quarantine_reasons"]
    assert reason.startswith("unaddressable_file_name:") and report["balanced"]
    quarantine = read_table(spark, conf, QUARANTINE).orderBy("record_kind", "source_row_index")
    assert [(r.record_kind, r.source_row_index, r.reason == reason, r.seq, r.ts, r.depth_msgs)
            for r in quarantine.collect()] == [
        ("file", None, True, None, None, None),
        *(("row", i - 1, True, i, naive(at(1, 11, i)), i) for i in range(1, 4)),
    ]  # fmt: skip
    assert {r.source_file for r in quarantine.collect()} == {"date=2024-01-01/r2:colon.parquet"}

    before = _quarantine_and_bronze(spark, conf)
    assert _counts(ingest.run_ingest(spark, conf, DAY1, DAY1)) == _counts(report)
    assert _quarantine_and_bronze(spark, conf) == before


def test_files_quarantined_whole_name_every_problem_and_bound_the_rows_read(spark, pipeline_conf):
    """A file's reason names both its bad name and its schema problem (a rename alone would only
    reveal the next one); a contract column held twice is ``duplicate_column`` (Spark refuses such
    a file: it matches names regardless of case), its rows kept with the column of the exact name
    (``queue``, not ``Queue``). The rows
    read this way are bounded per run (the driver holds them until the write): a file past what
    is left of the limit keeps its file record only, saying why, its rows counted as
    rows_in_files_quarantined; smaller files after it are still read."""
    _, conf = pipeline_conf(validate=False)
    conf = dataclasses.replace(conf, max_rows_from_files_quarantined_whole=4)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(1, at(1, 10), "enqueue", queue="q")])
    both = [event(i, at(1, 11, i), "enqueue", run_id="r2", queue="q") for i in (1, 2)]
    _write_raw_table(raw, "r2:both.parquet", both, types={"ts": pa.timestamp("ns", tz="UTC")})
    twice = pa.Table.from_pylist(
        [event(i, at(1, 12, i), "dequeue", run_id="r3", queue="q") for i in (1, 2)],
        schema=_lenient_schema(),
    )
    twice = twice.append_column("Queue", twice.column("queue"))
    (raw / "date=2024-01-01").mkdir(parents=True, exist_ok=True)
    pq.write_table(twice, raw / "date=2024-01-01" / "part-r3-00000.parquet")
    past = [event(i, at(1, 13, i), "enqueue", run_id="r4", queue="q") for i in (1, 2, 3)]
    _write_raw_table(raw, "part-r4-00000.parquet", past, drop=("event_type",))

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    reasons = report["quarantined_files"]
    both_reason = reasons["date=2024-01-01/r2:both.parquet"]
    assert both_reason.startswith("unaddressable_file_name:Spark cannot read a name with ':'")
    assert ";wrong_type:ts:timestamp[ns, tz=UTC]" in both_reason
    assert reasons["date=2024-01-01/part-r3-00000.parquet"] == "duplicate_column:queue"
    assert reasons["date=2024-01-01/part-r4-00000.parquet"] == "missing_column:event_type"
    # Files are taken in name order: r3's 2 rows (2 of 4 left), r4's 3 are past the 2 left and
    # not read, r2's 2 are read (0 left). 1 + 2 + 2 rows read; r4's 3 declared, not read.
    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (5, 1, 4)
    assert (report["rows_declared"], report["rows_in_files_quarantined"]) == (8, 3)
    assert report["balanced"]

    quarantine = read_table(spark, conf, QUARANTINE)
    rows = quarantine.where("record_kind = 'row'").orderBy("source_file", "source_row_index")
    assert [(r.source_file.split("/")[-1], r.source_row_index, r.run_id, r.queue, r.ts is None)
            for r in rows.collect()] == [
        ("part-r3-00000.parquet", 0, "r3", "q", False),
        ("part-r3-00000.parquet", 1, "r3", "q", False),
        ("r2:both.parquet", 0, "r2", "q", True),
        ("r2:both.parquet", 1, "r2", "q", True),
    ]  # fmt: skip
    (past_record,) = quarantine.where("source_file LIKE '%part-r4%'").collect()
    assert (past_record.record_kind, past_record.file_rows) == ("file", 3)
    detail = json.loads(past_record.detail)
    assert (detail["rows_declared"], detail["rows_read"]) == (3, 0)
    assert "max_rows_from_files_quarantined_whole (2 of 4 rows per run)" in detail["cause"]


R2 = "date=2024-01-01/part-r2-00000.parquet"
SNAPPY = "OSError: Corrupt snappy compressed data."


def _ingest_damaged(spark, pipeline_conf, row_group: int, budget: int | None = None):
    """Ingest r1's 3 valid rows and R2: 200 rows in 4 row groups of 50, row i with seq i + 1 and
    message_id 1000 + i, the message_id pages of ``row_group`` (from 0) damaged. Returns the
    conf, the report, the rows of R2 and how many Spark reads of it with ``ignoreCorruptFiles``,
    every column decoded: a measure of the damage independent of the ingest."""
    _, conf = pipeline_conf(validate=False)
    if budget is not None:
        conf = dataclasses.replace(conf, max_rows_from_files_quarantined_whole=budget)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    rows = [event(i + 1, at(1, 11, 0, 0, i), "enqueue", run_id="r2", queue="q",
                  message_id=1000 + i) for i in range(200)]  # fmt: skip
    path = _write_raw_table(raw, "part-r2-00000.parquet", rows, row_group_size=50)
    assert pq.ParquetFile(path).num_row_groups == 4
    _damage_row_group_column(path, row_group, "message_id")
    read = spark.read.option("ignoreCorruptFiles", "true").parquet(str(path)).collect()
    return conf, ingest.run_ingest(spark, conf, DAY1, DAY1), rows, len(read)


def test_the_contract_is_counted_only_when_the_bronze_write_leaves_rows_out(
    spark, pipeline_conf, monkeypatch
):
    """The counting pass reads the keys only. The pass that checks the contract (and decodes every
    column) runs after the bronze write when the write left a row out, and after a write that a
    damaged page in another column failed, committing nothing, before the stages run again."""
    passes: list[bool] = []
    count = ingest_read.file_run_stats

    def recorded(raw, *, check_contract=True):
        passes.append(check_contract)
        return count(raw, check_contract=check_contract)

    monkeypatch.setattr(ingest_read, "file_run_stats", recorded)
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])

    clean = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert passes == [False]
    assert (clean["rows_read"], clean["rows_accepted"], clean["balanced"]) == (3, 3, True)

    passes.clear()
    broken = [
        event(1, at(1, 12), "enqueue", run_id="r3", queue="q", depth_msgs=-1),
        event(2, at(1, 12), "enqueue", run_id="r3", queue="q"),
    ]
    write_raw(raw, broken)
    rejected = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert passes == [False, True]
    assert (rejected["rows_read"], rejected["rows_accepted"], rejected["rows_quarantined"],
            rejected["balanced"]) == (5, 4, 1, True)  # fmt: skip
    assert rejected["quarantine_reasons"] == {"negative_depth_msgs": 1}

    passes.clear()
    rows = [event(i + 1, at(1, 11, 0, 0, i), "enqueue", run_id="r2", queue="q",
                  message_id=1000 + i) for i in range(200)]  # fmt: skip
    path = _write_raw_table(raw, "part-r2-00000.parquet", rows, row_group_size=50)
    # Row group 0 reads whole: a write that skipped the damage would put its rows in bronze.
    _damage_row_group_column(path, 1, "message_id")
    commits = DeltaTable.forPath(spark, table_path(conf, PIPELINE_TABLES["broker_events"][1]))
    before = commits.history(1).first().version

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    # Keys only (every key read); the write failed; every column decoded; the stages again.
    assert passes == [False, True]
    assert report["files_partially_read"] == 1
    assert (report["rows_accepted"], report["balanced"]) == (4, True)
    bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
    assert sorted(r.run_id for r in bronze.collect()) == ["r1", "r1", "r1", "r3"]
    assert commits.history(1).first().version == before + 1  # the failed write committed nothing


def test_a_write_failure_that_is_not_a_damaged_file_is_raised_as_it_is(
    spark, pipeline_conf, monkeypatch
):
    """Only a read failure sends the ingest to the pass that decodes every column: any other
    failure of the writes (a commit conflict, memory) is raised at once, unchanged."""
    passes: list[bool] = []
    count = ingest_read.file_run_stats

    def recorded(raw, *, check_contract=True):
        passes.append(check_contract)
        return count(raw, check_contract=check_contract)

    def conflict(*_args):
        raise RuntimeError("ConcurrentAppendException: files were added to partition [date=D]")

    monkeypatch.setattr(ingest_read, "file_run_stats", recorded)
    monkeypatch.setattr(ingest, "write_tables", conflict)
    _, conf = pipeline_conf(validate=False)
    write_raw(Path(conf.raw_dir), [event(i, at(1, 10, i), "enqueue", queue="q") for i in (1, 2)])
    with pytest.raises(RuntimeError, match=r"^ConcurrentAppendException") as raised:
        ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert passes == [False] and raised.value.__context__ is None


def _quarantined_rows_of_r2(spark, conf) -> list:
    quarantine = read_table(spark, conf, QUARANTINE).where(f"source_file = '{R2}'")
    return quarantine.where("record_kind = 'row'").orderBy("source_row_index").collect()


def test_row_groups_after_a_damaged_one_are_read_by_pyarrow_into_the_quarantine(
    spark, pipeline_conf, caplog
):
    """Spark ends its read of a file at the first damaged page (in row group 1, from 0, of 4):
    it read row group 0 and whatever of 1 precedes the bad page. pyarrow reads row groups 2 and 3
    on their own: their rows are quarantined as rows too, at their true positions, and counted
    as read; only the rest of row group 1 is unreadable."""
    with caplog.at_level("INFO", logger="flowctl.ingest"):
        conf, report, rows, spark_rows = _ingest_damaged(spark, pipeline_conf, 1)

    assert 50 <= spark_rows < 100  # row group 0 whole, row group 1 in part at most
    # Read: r1's 3 (accepted), and of R2 Spark's rows and pyarrow's 100, all quarantined.
    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"],
            report["rows_unreadable"], report["rows_declared"], report["balanced"]) == (
        3 + spark_rows + 100, 3, spark_rows + 100, 100 - spark_rows, 203, True)  # fmt: skip
    assert report["quarantine_reasons"] == {"partially_read_file": spark_rows + 100}
    assert not read_table(spark, conf, BRONZE).where("run_id = 'r2'").count()
    positions = [*range(spark_rows), *range(100, 200)]
    assert [(r.source_row_index, r.reason, r.run_id, r.seq, r.message_id, r.ts)
            for r in _quarantined_rows_of_r2(spark, conf)] == [
        (i, "partially_read_file", "r2", i + 1, 1000 + i, naive(rows[i]["ts"])) for i in positions
    ]  # fmt: skip
    detail = report["partially_read_files"][R2]
    assert detail == {
        "rows_declared": 200, "rows_read": spark_rows + 100, "rows_recovered": 100,
        "row_groups_recovered": [2, 3], "row_groups_unreadable": [1],
        "cause": f"{SNAPPY}; Spark read the first {spark_rows} rows, pyarrow 100 more from row "
        f"groups [2, 3]; {100 - spark_rows} rows of row group 1 could be read by neither",
    }  # fmt: skip
    (record,) = read_table(spark, conf, QUARANTINE).where("record_kind = 'file'").collect()
    assert (record.reason, record.file_rows, json.loads(record.detail)) == (
        "partially_read_file", 200, detail)  # fmt: skip
    (line,) = [r.getMessage() for r in caplog.records if "balanced=" in r.getMessage()]
    assert "partially read 1: pyarrow read 100 of their rows past the damage" in line
    assert f"by footers 203 = read {3 + spark_rows + 100} + unreadable {100 - spark_rows} " in line


def test_row_groups_pyarrow_reads_past_the_row_budget_stay_unreadable(spark, pipeline_conf):
    """The rows pyarrow recovers are held by the driver until the write, as those of files
    quarantined whole: past what is left of the row budget they are not read, and the detail
    says why."""
    conf, report, _, spark_rows = _ingest_damaged(spark, pipeline_conf, 1, budget=99)

    assert (report["rows_read"], report["rows_quarantined"], report["rows_unreadable"],
            report["balanced"]) == (3 + spark_rows, spark_rows, 200 - spark_rows, True)  # fmt: skip
    detail = report["partially_read_files"][R2]
    assert (detail["rows_read"], detail["rows_recovered"], detail["row_groups_recovered"],
            detail["row_groups_unreadable"]) == (spark_rows, 0, [], [1, 2, 3])  # fmt: skip
    assert detail["cause"] == (
        f"{SNAPPY}; Spark read the first {spark_rows} rows; pyarrow reads row groups [2, 3] "
        "(100 rows) but did not: past what is left of ingest.max_rows_from_files_quarantined_whole"
        " (99 of 99 rows per run): fix the file and rerun the day, or raise the limit; "
        f"{200 - spark_rows} rows of row groups [1, 2, 3] could be read by neither"
    )
    quarantined = _quarantined_rows_of_r2(spark, conf)
    assert [r.source_row_index for r in quarantined] == list(range(spark_rows))


def test_a_damaged_last_row_group_leaves_nothing_to_recover(spark, pipeline_conf):
    """The damage is in the last row group: Spark read the row groups before it (and what
    precedes the bad page), pyarrow has no row group after it to read."""
    conf, report, _, spark_rows = _ingest_damaged(spark, pipeline_conf, 3)

    assert 150 <= spark_rows < 200
    assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"],
            report["rows_unreadable"], report["rows_declared"], report["balanced"]) == (
        3 + spark_rows, 3, spark_rows, 200 - spark_rows, 203, True)  # fmt: skip
    quarantined = _quarantined_rows_of_r2(spark, conf)
    assert [r.source_row_index for r in quarantined] == list(range(spark_rows))
    assert report["partially_read_files"][R2] == {
        "rows_declared": 200, "rows_read": spark_rows, "rows_recovered": 0,
        "row_groups_recovered": [], "row_groups_unreadable": [3],
        "cause": f"{SNAPPY}; Spark read the first {spark_rows} rows, pyarrow no row group after "
        f"them; {200 - spark_rows} rows of row group 3 could be read by neither",
    }  # fmt: skip


def test_row_groups_are_recovered_only_after_spark_s_rows_when_they_are_the_first_ones():
    """Which row groups pyarrow adds: those it reads whole starting at or after the rows Spark
    read, when those are the file's first ones; none when Spark's rows are not (a large file read
    in several parts, one of which failed: which row groups Spark read is unknown)."""
    readable = (True, False, True, True)
    groups = tuple(raw_files.RowGroup(i, 10 * i, 10, ok) for i, ok in enumerate(readable))
    # Spark stopped in row group 1 after 4 of its rows.
    read = raw_files.PartialRead(40, 14, True, groups, "OSError: bad page", None)
    assert read.detail() == {
        "rows_declared": 40, "rows_read": 34, "rows_recovered": 20,
        "row_groups_recovered": [2, 3], "row_groups_unreadable": [1],
        "cause": "OSError: bad page; Spark read the first 14 rows, pyarrow 20 more from row "
        "groups [2, 3]; 6 rows of row group 1 could be read by neither",
    }  # fmt: skip
    scattered = dataclasses.replace(read, spark_prefix=False)
    assert (scattered.recoverable, scattered.detail()) == ((), {
        "rows_declared": 40, "rows_read": 14, "rows_recovered": 0, "row_groups_recovered": [],
        "cause": "OSError: bad page; Spark read 14 rows, not the first ones of the file (read "
        "in several parts): no row group is read by pyarrow on its own"})  # fmt: skip


def test_footer_problems_spark_would_hide_are_named_before_it_reads(tmp_path, caplog):
    """What Spark would read as a damaged file (every row lost, the cause only in an executor's
    stack trace) or would match regardless of case is told from the footer: a codec Spark lacks,
    a column typed null (what pa.Table.from_pylist makes of a column of Nones), a column named in
    another case with the wrong type; a column named in another case with the right type is the
    contract's, as Spark reads it."""
    raw = tmp_path / "raw"
    rows = [event(i, at(1, 10, i), "enqueue", queue="q", depth_msgs=i) for i in range(1, 4)]
    _write_raw_table(raw, "good.parquet", rows)
    brotli = pa.Table.from_pylist(rows, schema=_lenient_schema())
    pq.write_table(brotli, raw / "date=2024-01-01" / "brotli.parquet", compression="brotli")
    typeless = pa.Table.from_pylist([{**row, "link": None, "credit": None} for row in rows])
    pq.write_table(typeless, raw / "date=2024-01-01" / "typeless.parquet")
    upper = _write_raw_table(raw, "upper.parquet", rows)
    table = pq.read_table(upper)
    renamed = [name.upper() if name == "seq" else name for name in table.column_names]
    pq.write_table(table.rename_columns(renamed), upper)
    mixed = table.set_column(table.schema.get_field_index("depth_msgs"), "Depth_Msgs",
                             table.column("depth_msgs").cast(pa.string()))  # fmt: skip
    pq.write_table(mixed, raw / "date=2024-01-01" / "mixed.parquet")

    with caplog.at_level("WARNING", logger="flowctl.ingest"):
        problems = {f.relative_path.split("/")[-1]: f.problem
                    for f in raw_files.list_raw_files(str(raw), [DAY1]).files}  # fmt: skip
    # Each file quarantined whole is named on the console with its reason, one line each.
    assert sorted(r.getMessage().split(":")[0] for r in caplog.records) == [
        f"raw file date=2024-01-01/{name} quarantined whole"
        for name in ("brotli.parquet", "mixed.parquet", "typeless.parquet")
    ]

    assert problems["good.parquet"] is None
    assert problems["upper.parquet"] is None  # SEQ is seq to Spark
    assert problems["brotli.parquet"] == (
        "unsupported_compression:BROTLI (Spark here reads SNAPPY, ZSTD, GZIP, LZ4 or "
        "uncompressed: rewrite the file with one of them)"
    )
    assert problems["mixed.parquet"] == "wrong_type:Depth_Msgs:string"
    typeless_problems = (problems["typeless.parquet"] or "").split(";")
    null_columns = [
        n for n in typeless.schema.names if pa.types.is_null(typeless.schema.field(n).type)
    ]
    assert null_columns and len(typeless_problems) == len(null_columns)
    assert typeless_problems[0] == (
        f"wrong_type:{null_columns[0]}:null ({raw_files.NULL_TYPE_HINT})"
    )


def test_rows_without_a_usable_seq_are_quarantined_and_the_day_goes_on(spark, pipeline_conf):
    """An audit: a file whose rows of a run all lack a seq stopped the day's ingest ("'<' not
    supported between 'NoneType' and 'NoneType'"), and a seq of -2^63 (an "unset" some writers
    use) overflowed the counting pass's subtraction under ANSI; neither named a file, and no
    row of the day reached bronze or the quarantine. Each is now a row quarantined for it."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(5)])
    nulls = [event(None, at(1, 11, i), "enqueue", queue="q", run_id="rX") for i in range(3)]
    write_raw(raw, nulls, part="00001")
    lowest = [
        event(seq, at(1, 12, i), "enqueue", queue="q", run_id="r2")
        for i, seq in enumerate([-(2**63), 0, 1])
    ]
    write_raw(raw, lowest, part="00002")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_accepted"], report["rows_quarantined"], report["balanced"]) == (7, 4, True)
    reasons = sorted((r.run_id, r.reason) for r in read_table(spark, conf, QUARANTINE).collect())
    assert reasons == [("r2", "negative_seq"), *[("rX", "null_seq")] * 3]
    accepted = read_table(spark, conf, BRONZE).groupBy("run_id").count().collect()
    assert sorted(map(tuple, accepted)) == [("r1", 5), ("r2", 2)]


def test_a_quarantined_rows_columns_are_kept_whatever_the_case_of_their_names():
    """Spark and the schema check match a column regardless of case (``SEQ`` is ``seq``); the
    quarantine's row records matched names exactly, so a file quarantined whole for a missing
    ``event_type`` kept its ``RUN_ID``, ``SEQ`` and ``TS`` as nulls (an audit)."""
    rows = [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(3)]
    table = pa.Table.from_pylist(rows, schema=_lenient_schema()).drop_columns(["event_type"])
    table = table.rename_columns(
        [name.upper() if name in ("run_id", "seq", "ts") else name for name in table.column_names]
    )
    assert raw_files._schema_problem(table.schema) == "missing_column:event_type"
    kept = raw_files.contract_columns_kept(table.schema)
    assert {kept[name] for name in ("run_id", "seq", "ts")} == {"RUN_ID", "SEQ", "TS"}
    records = raw_files.row_records(table.to_batches()[0], kept, first_index=10)
    assert records.column("seq").to_pylist() == [0, 1, 2]
    assert records.column("run_id").to_pylist() == ["r1"] * 3
    assert records.column("event_type").null_count == 3
    assert records.column(raw_files.ROW_INDEX).to_pylist() == [10, 11, 12]


@pytest.mark.parametrize("statistics", [True, False], ids=["footer_statistics", "none"])
def test_a_millisecond_ts_past_microseconds_quarantines_its_file_and_loses_nothing(
    spark, pipeline_conf, statistics
):
    """An audit: one ``ts`` of a ``timestamp[ms]`` file held a nanosecond count; Spark's read
    failed whole on the overflow, pyarrow's cast of the rows for the quarantine failed as well,
    and the file's rows reached neither table (balanced=False). With footer statistics the file
    is quarantined whole before Spark reads it, for that reason; without, Spark's failed read
    sends it to the partial-read path; either way every row is quarantined, that ts null."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    rows = [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(4)]
    table = pa.Table.from_pylist(rows, schema=_lenient_schema())
    millis = [int(ts.timestamp() * 1000) for ts in table.column("ts").to_pylist()]
    millis[2] *= 1_000_000  # nanoseconds where milliseconds belong
    index = table.schema.get_field_index("ts")
    ts = pa.array(millis, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    path = raw / "date=2024-01-01" / "part-r1-00000.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.set_column(index, "ts", ts), path, write_statistics=statistics)

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_accepted"], report["rows_quarantined"], report["balanced"]) == (0, 4, True)
    quarantined = read_table(spark, conf, QUARANTINE).where("record_kind = 'row'").collect()
    assert sorted(r.seq for r in quarantined) == [0, 1, 2, 3]
    assert [r.seq for r in quarantined if r.ts is None] == [2]
    reasons = {r.reason for r in quarantined}
    assert reasons == (
        {"out_of_range:ts:timestamp[ms] values past what microseconds hold (nanoseconds written "
         "as milliseconds?)"}
        if statistics
        else {"partially_read_file"}
    )  # fmt: skip

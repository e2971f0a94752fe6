"""The jobs end to end on real Delta tables: bad input, and idempotent reruns with late events."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable

from jobs import ingest, raw_files
from jobs.delta_io import read_table, table_path
from jobs.pipeline import daily_metrics_rows, run_pipeline
from schemas.tables import PIPELINE_TABLES
from tests.conftest import at, event, naive, write_raw
from tests.test_jobs_episodes import link_starving_across_midnight, stopped_across_midnight

pytestmark = pytest.mark.spark

DAY1, DAY2 = date(2024, 1, 1), date(2024, 1, 2)


def test_bad_input_is_quarantined_with_reasons_and_nothing_is_lost(
    spark, pipeline_conf, tmp_path, caplog
):
    conf_path, conf = pipeline_conf(validate=True)
    raw = Path(conf.raw_dir)
    good = [event(i, at(1, 10, i), "enqueue", queue="q", depth_msgs=i) for i in range(1, 5)]
    broken = [
        {**event(10, at(1, 11), "enqueue", queue="q"), "run_id": None},
        event(11, at(1, 11), "warp", queue="q"),
        event(12, at(1, 11), "dequeue", queue="q", depth_msgs=-3),
        {**event(13, at(2, 11), "enqueue", queue="q"), "_date": DAY1},  # filed under the wrong day
    ]
    write_raw(raw, [*good, dict(good[0]), *broken])  # good[0] twice: an identical duplicate
    (raw / "date=2024-01-01" / "part-r1-00001.parquet").write_bytes(b"PAR1 not parquet at all")
    wrong_types = pa.table({"run_id": ["r1"], "broker": ["b1"], "seq": ["20"]})
    pq.write_table(wrong_types, raw / "date=2024-01-01" / "part-r1-00002.parquet")

    with caplog.at_level("INFO", logger="flowctl.ingest"):
        assert ingest.main(["--conf", conf_path, "--date", "2024-01-01"]) == 0

    bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
    assert sorted(r.seq for r in bronze.collect()) == [1, 2, 3, 4]
    quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
    rows = {
        (r.record_kind, r.seq, r.source_file.split("/")[-1]): r.reason for r in quarantine.collect()
    }
    assert rows == {
        ("row", 1, "part-r1-00000.parquet"): "duplicate",
        ("row", 10, "part-r1-00000.parquet"): "null_run_id",
        ("row", 11, "part-r1-00000.parquet"): "unknown_event_type",
        ("row", 12, "part-r1-00000.parquet"): "negative_depth_msgs",
        ("row", 13, "part-r1-00000.parquet"): "ts_outside_partition_date",
        ("file", None, "part-r1-00001.parquet"): "unreadable_file:ArrowInvalid: Parquet magic "
        "bytes not found in footer. Either the file is corrupted or this is not a parquet file.",
        ("file", None, "part-r1-00002.parquet"): "wrong_type:seq:string;missing_column:ts;"
        "missing_column:event_type",
        # The file quarantined whole for its schema still has its row read (by pyarrow) into the
        # quarantine, seq null there: a string is not the contract's int64.
        ("row", None, "part-r1-00002.parquet"): "wrong_type:seq:string;missing_column:ts;"
        "missing_column:event_type",
    }
    report = json.loads(
        Path(conf.quality_dir, "broker_events", "2024-01-01_2024-01-01.json").read_text()
    )
    counts = report["counts"]
    # DESIGN.md §5: rows in = rows accepted + rows quarantined; the duplicate is quarantined, and
    # so is the row of the file of the wrong schema (9 rows of part-r1-00000 + 1).
    assert (counts["rows_read"], counts["rows_accepted"], counts["rows_quarantined"]) == (10, 4, 6)
    assert (counts["duplicates_quarantined"], counts["files_quarantined"], counts["balanced"]) == (
        1,
        2,
        True,
    )
    assert report["validation"]["success"] is True
    assert "rows read 10 = accepted 4 + quarantined 6 (of which duplicates 1, " in caplog.text
    # Every reason counted, those the summary has no figure of its own for included.
    (reasons,) = [r.getMessage() for r in caplog.records if "by reason: " in r.getMessage()]
    by_reason = reasons.split("by reason: ")[1].split(")")[0]
    # Each quarantined row's reason once, with its count (the check was a comma's presence).
    counted = [tuple(item.rsplit(" ", 1)) for item in by_reason.split(", ")]
    assert counted == sorted(
        (reason, "1") for (kind, _, _), reason in rows.items() if kind == "row"
    )
    # Every row the footers declare is accounted for: the one of the file rejected whole for its
    # schema was read, so none is left in files quarantined whole unread; the file that is not
    # Parquet declares none (no footer).
    assert (counts["rows_declared"], counts["rows_in_files_quarantined"]) == (10, 0)
    assert (counts["rows_unreadable"], counts["files_without_footer"]) == (0, 1)
    assert (
        "rows declared by footers 10 = read 10 + unreadable 0 + in files quarantined whole unread "
        "0 (and 1 files without a readable footer)" in caplog.text
    )


def test_a_rerun_of_a_day_picks_up_late_events_and_keeps_the_other_days(spark, pipeline_conf):
    """DESIGN §5: "A rerun of a day replaces that day". A late file for day 1 is picked up by a
    rerun of day 1 alone, and day 2's rows stay as they were. (That a rerun with nothing new
    gives every table as it was is tests/test_processing_order.py's "day 2 again".)"""
    conf_path, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    link_events = [{**e, "seq": e["seq"] + 100} for e in link_starving_across_midnight()]
    write_raw(raw, stopped_across_midnight() + link_events)

    first = run_pipeline(conf_path, DAY1, DAY2, spark=spark)
    assert first["ok"] and first["ingest"]["rows_accepted"] == 16
    # The wide bronze table collects data-skipping statistics on the filtered columns only.
    bronze_path = table_path(conf, PIPELINE_TABLES["broker_events"][1])
    properties = DeltaTable.forPath(spark, bronze_path).detail().first().properties
    assert properties["delta.dataSkippingStatsColumns"] == "run_id,seq,ts"

    gold = {
        (r["date"], r["queue"]): r for r in daily_metrics_rows(conf_path, DAY1, DAY2, spark=spark)
    }
    assert gold[(DAY1, "q")]["flow_stopped_count"] == 1
    assert gold[(DAY2, "q")]["time_stopped_s"] == 3600.0

    # A late file for day 1 from another run: rerunning day 1 alone picks it up, day 2 is kept.
    late = [event(1, at(1, 12), "flow_stopped", run_id="r2", queue="q", depth_msgs=9,
                  flow_stop_count=4, flow_stopped_count=1),
            event(2, at(1, 12, 30), "flow_resumed", run_id="r2", queue="q", depth_msgs=1,
                  flow_stopped_count=1)]  # fmt: skip
    write_raw(raw, late, part="00001")
    run_pipeline(conf_path, DAY1, DAY1, spark=spark)
    after = {
        (r["date"], r["run_id"]): r for r in daily_metrics_rows(conf_path, DAY1, DAY2, spark=spark)
    }
    assert after[(DAY1, "r2")]["time_stopped_s"] == 1800.0
    assert after[(DAY1, "r2")]["max_overshoot_msgs"] == 5
    assert after[(DAY2, "r1")] == gold[(DAY2, "q")]


def test_rerun_without_rejects_clears_the_days_quarantine_and_then_skips_it(spark, pipeline_conf):
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    good = [event(i, at(1, 10, i), "enqueue", queue="q", depth_msgs=i) for i in range(1, 4)]
    (path,) = write_raw(raw, [*good, event(9, at(1, 11), "warp", queue="q")])
    quarantine_schema = PIPELINE_TABLES["broker_events_quarantine"][1]
    quarantine_path = table_path(conf, quarantine_schema)

    first = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert first["rows_quarantined"] == 1
    assert first["quarantine_reasons"] == {"unknown_event_type": 1}

    path.unlink()  # the producer fixed its log: the rerun finds nothing to reject
    write_raw(raw, good)
    second = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert (second["rows_read"], second["rows_quarantined"], second["balanced"]) == (3, 0, True)
    assert read_table(spark, conf, quarantine_schema).count() == 0
    version = DeltaTable.forPath(spark, quarantine_path).history(1).first().version

    third = ingest.run_ingest(spark, conf, DAY1, DAY1)  # nothing to replace: no quarantine commit
    assert (third["rows_accepted"], third["rows_quarantined"], third["balanced"]) == (3, 0, True)
    assert DeltaTable.forPath(spark, quarantine_path).history(1).first().version == version


def test_a_day_without_raw_files_is_refused_unless_allowed(spark, pipeline_conf, caplog):
    """A day with no raw files is refused, naming the day and the folder looked in (a wrong day
    or folder must not look like a quiet night); allowed on purpose, it reads 0, accepts 0 (not
    the previous commit's row count), balances and warns."""
    _, conf = pipeline_conf(validate=False)
    write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "enqueue", queue="q", depth_msgs=1)])
    first = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert first["rows_accepted"] == 1
    # bronze_version: the Delta version the write committed (what pipeline state records).
    bronze_path = table_path(conf, PIPELINE_TABLES["broker_events"][1])
    latest = DeltaTable.forPath(spark, bronze_path).history(1).first().version
    assert first["bronze_version"] == latest

    with pytest.raises(ingest.IngestRefused) as refused:
        ingest.run_ingest(spark, conf, DAY2, DAY2)
    assert f"no raw files for {DAY2.isoformat()}" in str(refused.value)
    assert f"{conf.raw_dir}/date={DAY2.isoformat()}" in str(refused.value)
    with caplog.at_level("WARNING", logger="flowctl.ingest"):
        empty = ingest.run_ingest(spark, conf, DAY2, DAY2, allow_empty_days=True)
    assert (empty["files_listed"], empty["rows_read"], empty["rows_accepted"]) == (0, 0, 0)
    assert (empty["rows_quarantined"], empty["balanced"]) == (0, True)
    # Nothing to write and nothing of the day to replace: no commit, no version.
    assert empty["bronze_version"] is None
    assert any("no raw data" in r.getMessage() for r in caplog.records)
    bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
    assert bronze.count() == 1  # day 1 untouched


def _damage_column_pages(path: Path, column: str) -> None:
    """Overwrite the compressed pages of one column chunk: the footer and every other column stay
    readable, decoding that column fails."""
    chunk = pq.ParquetFile(path).metadata.row_group(0)
    columns = [chunk.column(i) for i in range(chunk.num_columns)]
    (meta,) = (c for c in columns if c.path_in_schema == column)
    start = meta.dictionary_page_offset or meta.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 20 : start + meta.total_compressed_size - 2] = b"\xab" * (
        meta.total_compressed_size - 22
    )
    path.write_bytes(bytes(data))


def test_a_damaged_page_in_any_column_quarantines_the_file(spark, pipeline_conf):
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, 0, 0, i), "enqueue", queue="q") for i in range(1, 4)])
    damaged = [
        event(i, at(1, 11, 0, 0, i), "enqueue", run_id="r2", queue="q", message_id=1000 + i)
        for i in range(1, 200)
    ]
    (path,) = write_raw(raw, damaged)
    # message_id is checked by no contract rule: only decoding every column reveals the damage.
    _damage_column_pages(path, "message_id")

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["files_partially_read"], report["rows_unreadable"]) == (1, 199)
    assert (report["rows_read"], report["rows_accepted"], report["balanced"]) == (3, 3, True)
    assert (report["rows_declared"], report["rows_in_files_quarantined"]) == (202, 0)
    quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
    assert [(r.record_kind, r.reason, r.file_rows) for r in quarantine.collect()] == [
        ("file", "partially_read_file", 199)
    ]
    # Why, in the record's detail (JSON) and the report: the error pyarrow meets reading it whole.
    detail = {
        "rows_declared": 199,
        "rows_read": 0,
        "cause": "OSError: Corrupt snappy compressed data.",
    }
    assert json.loads(quarantine.first().detail) == detail
    assert report["partially_read_files"] == {path.relative_to(raw).as_posix(): detail}


def test_days_bronze_holds_are_not_replaced_by_a_raw_folder_without_them(spark, pipeline_conf):
    """A mistyped --raw (or raw files removed by retention) must not empty days already ingested:
    ingest refuses before writing anything, unless the emptying is asked for."""
    _, conf = pipeline_conf(validate=False)
    write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "enqueue", queue="q", depth_msgs=1)])
    assert ingest.run_ingest(spark, conf, DAY1, DAY2)["rows_accepted"] == 1
    bronze_schema = PIPELINE_TABLES["broker_events"][1]
    version = DeltaTable.forPath(spark, table_path(conf, bronze_schema)).history(1).first().version

    elsewhere = Path(conf.raw_dir).parent / "other-raw"
    elsewhere.mkdir()
    with pytest.raises(ingest.IngestRefused, match=f"{DAY1.isoformat()}, which bronze already"):
        ingest.run_ingest(spark, conf, DAY1, DAY2, raw_dir=str(elsewhere))
    with pytest.raises(ingest.IngestRefused, match="does not exist"):
        ingest.run_ingest(spark, conf, DAY1, DAY1, raw_dir=str(elsewhere / "typo"))
    history = DeltaTable.forPath(spark, table_path(conf, bronze_schema)).history(1).first()
    assert history.version == version  # nothing written
    assert read_table(spark, conf, bronze_schema).count() == 1

    emptied = ingest.run_ingest(
        spark, conf, DAY1, DAY2, raw_dir=str(elsewhere), allow_empty_days=True
    )
    assert (emptied["rows_read"], emptied["rows_accepted"], emptied["balanced"]) == (0, 0, True)
    assert read_table(spark, conf, bronze_schema).count() == 0


def test_a_rerun_refuses_to_drop_rows_whose_raw_files_are_gone(spark, pipeline_conf):
    """Retention removed one run's file of a day that still has another run's, a copy in
    progress left it empty, or a writer rewrote it with fewer rows (a valid file of 0 rows): a
    rerun of the day would delete that run's bronze rows. Refused (nothing written), naming the
    file; --allow-empty-days drops them on purpose."""
    _, conf = pipeline_conf()
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(1, at(1, 10), "enqueue", queue="q", depth_msgs=1)])
    (gone,) = write_raw(raw, [event(1, at(1, 11), "enqueue", run_id="r2", queue="q")])
    assert ingest.run_ingest(spark, conf, DAY1, DAY1)["rows_accepted"] == 2
    bronze_schema = PIPELINE_TABLES["broker_events"][1]
    version = DeltaTable.forPath(spark, table_path(conf, bronze_schema)).history(1).first().version
    for damage in ("rewritten", "truncated", "removed"):
        if damage == "rewritten":
            pq.write_table(pq.read_table(gone).slice(0, 0), gone)  # readable, with no rows
            named = re.escape(
                "date=2024-01-01/part-r2-00000.parquet (rewritten: 0 rows where bronze holds 1 "
                "read from it)"
            )
        elif damage == "truncated":
            gone.write_bytes(b"")  # a copy in progress: quarantined whole, its rows unread
            named = re.escape("date=2024-01-01/part-r2-00000.parquet")
        else:
            gone.unlink()
        with pytest.raises(ingest.IngestRefused, match=named):
            ingest.run_ingest(spark, conf, DAY1, DAY1)
        history = DeltaTable.forPath(spark, table_path(conf, bronze_schema)).history(1).first()
        assert history.version == version  # nothing written
    dropped = ingest.run_ingest(spark, conf, DAY1, DAY1, allow_empty_days=True)
    assert (dropped["rows_accepted"], dropped["balanced"]) == (1, True)
    assert [r.run_id for r in read_table(spark, conf, bronze_schema).collect()] == ["r1"]


def test_the_quarantine_table_exists_even_when_nothing_was_rejected(spark, pipeline_conf):
    _, conf = pipeline_conf(validate=False)
    write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "enqueue", queue="q", depth_msgs=1)])
    assert ingest.run_ingest(spark, conf, DAY1, DAY1)["rows_quarantined"] == 0
    quarantine_schema = PIPELINE_TABLES["broker_events_quarantine"][1]
    path = table_path(conf, quarantine_schema)
    assert spark.read.format("delta").load(path).count() == 0


def test_a_key_bronze_holds_on_another_day_is_not_accepted_again(spark, pipeline_conf):
    """DESIGN §5: bronze is deduplicated on (run_id, seq) whatever ranges are ingested. A row of
    day 2 repeating a key bronze holds on day 1 is quarantined; the day-1 row stays. A run whose
    seqs simply continue (the engine's case) is proved clear from the Delta log's file stats."""
    _, conf = pipeline_conf(validate=True)
    # Great Expectations on the ingests of the replayed key only (it costs ~7 s an ingest here).
    unvalidated = dataclasses.replace(conf, validate_with_great_expectations=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    write_raw(raw, [event(i, at(2, 10, i), "enqueue", queue="q") for i in range(4, 7)])
    assert ingest.run_ingest(spark, unvalidated, DAY1, DAY1)["rows_accepted"] == 3
    continued = ingest.run_ingest(spark, unvalidated, DAY2, DAY2)
    assert (continued["rows_accepted"], continued["bronze_files_overlapping"]) == (3, 0)
    assert continued["duplicates_of_other_days"] == 0

    write_raw(raw, [event(100, at(1, 23, 59), "enqueue", run_id="r2", queue="q", depth_msgs=1)])
    assert ingest.run_ingest(spark, unvalidated, DAY1, DAY1)["rows_accepted"] == 4
    write_raw(
        raw,
        [
            event(100, at(2, 0, 0, 1), "enqueue", run_id="r2", queue="q", depth_msgs=7),
            event(101, at(2, 0, 0, 2), "enqueue", run_id="r2", queue="q", depth_msgs=8),
        ],
    )
    # A rerun of day 2 gives the same result (Great Expectations on the first: the rerun's bronze
    # is read back row by row below).
    for rerun in (False, True):
        report = ingest.run_ingest(spark, unvalidated if rerun else conf, DAY2, DAY2)
        assert (report["rows_read"], report["rows_accepted"], report["rows_quarantined"]) == (
            5,
            4,
            1,
        )
        assert report["duplicates_of_other_days"] == 1
        assert report["bronze_files_overlapping"] >= 1
        assert report["quarantine_reasons"] == {"conflicting_duplicate": 1}
        assert report["balanced"]
        assert report.get("great_expectations_success") is (None if rerun else True)
    bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
    keys = sorted((r.run_id, r.seq, r.depth_msgs) for r in bronze.collect())
    assert keys == [("r1", i, None) for i in range(1, 7)] + [("r2", 100, 1), ("r2", 101, 8)]
    quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
    assert [(r.date, r.run_id, r.seq, r.depth_msgs) for r in quarantine.collect()] == [
        (DAY2, "r2", 100, 7)
    ]


def test_a_key_on_two_days_keeps_the_earlier_copy_whatever_order_the_days_come_in(
    spark, pipeline_conf
):
    """DESIGN §5: bronze deduplicated on (run_id, seq), and a rerun of a day idempotent. Run r1
    logs seq 2 on day 1 and replays it, with another ts, on day 2. Day by day, in reverse, in one
    range, or day by day followed by a range rerun: bronze keeps day 1's copy and the quarantine
    day 2's. Ingesting day 1 after day 2 moves day 2's copy from bronze to its day's quarantine
    (a MERGE each), at the position it has in its file, as an ingest of day 2 would put it.

    Each sequence is checked after every step from its second on, so "forward" and "reverse" are
    the first two steps of the longer sequences. Great Expectations runs on the sequence that
    moves a row, from the step that moves it on (the others check the dedup, which it does not
    see)."""
    _, base = pipeline_conf(validate=False)
    raw = Path(base.raw_dir)
    write_raw(
        raw,
        [
            event(1, at(1, 10), "enqueue", queue="q", depth_msgs=1),
            event(2, at(1, 23, 59), "enqueue", queue="q", depth_msgs=2),
        ],
    )
    write_raw(
        raw,
        [
            event(2, at(2, 0, 0, 1), "enqueue", queue="q", depth_msgs=7),
            event(3, at(2, 0, 0, 2), "enqueue", queue="q", depth_msgs=8),
        ],
    )
    sequences = {
        "range": [(DAY1, DAY2)],
        "forward_then_range": [(DAY1, DAY1), (DAY2, DAY2), (DAY1, DAY2)],
        "reverse_then_day2_again": [(DAY2, DAY2), (DAY1, DAY1), (DAY2, DAY2)],
    }
    for name, ranges in sequences.items():
        moves_a_row = name.startswith("reverse")  # day 1 ingested after day 2
        conf = dataclasses.replace(
            base,
            warehouse_dir=str(Path(base.warehouse_dir) / name),
            quality_dir=str(Path(base.quality_dir) / name),
        )
        reports = []
        for step, (first, last) in enumerate(ranges, start=1):
            # Great Expectations from the step that moves the row on (day 2 alone moves none).
            validate = moves_a_row and step > 1
            step_conf = dataclasses.replace(conf, validate_with_great_expectations=validate)
            reports.append(ingest.run_ingest(spark, step_conf, first, last))
            if step == 1 and len(ranges) > 1:
                continue  # one day of two: the key is not on two days yet
            at_step = f"{name} after step {step}"
            assert all(r["balanced"] for r in reports), at_step
            if moves_a_row:
                assert all(r["great_expectations_success"] for r in reports[1:]), at_step
            bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
            assert sorted((r.seq, r.depth_msgs, r.date) for r in bronze.collect()) == [
                (1, 1, DAY1),
                (2, 2, DAY1),
                (3, 8, DAY2),
            ], at_step
            quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
            assert [
                (r.seq, r.depth_msgs, r.date, r.reason, r.source_file, r.source_row_index)
                for r in quarantine.collect()
            ] == [
                (2, 7, DAY2, "conflicting_duplicate", "date=2024-01-02/part-r1-00000.parquet", 0)
            ], at_step
            moved = [r["moved_from_later_days"] for r in reports]
            if moves_a_row:
                assert moved[1] == {"2024-01-02": 1}, at_step
            assert sum(sum(m.values()) for m in moved) == (1 if moves_a_row else 0), at_step


def test_files_spark_cannot_address_are_quarantined_by_name(spark, pipeline_conf):
    """Hadoop reads ':' as a URI scheme and '{}[]*?' as a glob: such a file is quarantined whole,
    with a reason asking for a rename, its row read by pyarrow into the quarantine, and the rest
    of the day is ingested (exit 0)."""
    conf_path, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    write_raw(raw, [event(i, at(1, 10, i), "enqueue", queue="q") for i in range(1, 4)])
    names = ["g11:colon.parquet", "g08{a,b}.parquet", "s03[1].parquet", "g09*.parquet"]
    for i, name in enumerate(names):
        rows = [event(10 + i, at(1, 11, i), "enqueue", run_id=f"x{i}", queue="q")]
        (made,) = write_raw(raw, rows, part="extra")
        made.rename(made.parent / name)

    assert ingest.main(["--conf", conf_path, "--date", "2024-01-01"]) == 0

    bronze = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1])
    assert sorted(r.seq for r in bronze.collect()) == [1, 2, 3]
    quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
    records: dict[str, list] = {}
    for r in quarantine.orderBy("record_kind").collect():
        records.setdefault(r.source_file.split("/")[-1], []).append(
            (r.record_kind, r.seq, r.source_row_index, r.reason)
        )
    assert set(records) == set(names)
    for i, name in enumerate(names):  # a file record, and the file's one row at index 0
        (file_kind, _, _, reason), row = records[name]
        assert file_kind == "file" and reason.startswith("unaddressable_file_name:")
        assert "rename" in reason
        assert row == ("row", 10 + i, 0, reason)


def test_days_bronze_holds_are_not_replaced_by_raw_files_that_cannot_be_read(spark, pipeline_conf):
    """A zero-byte file (a copy in progress) as the only raw file of a day bronze holds: refused
    like a day without files, unless the emptying is asked for."""
    _, conf = pipeline_conf(validate=False)
    (path,) = write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "enqueue", queue="q")])
    assert ingest.run_ingest(spark, conf, DAY1, DAY1)["rows_accepted"] == 1
    path.write_bytes(b"")
    bronze_schema = PIPELINE_TABLES["broker_events"][1]

    with pytest.raises(ingest.IngestRefused, match=r"2024-01-01.*--allow-empty-days"):
        ingest.run_ingest(spark, conf, DAY1, DAY2)
    assert read_table(spark, conf, bronze_schema).count() == 1

    emptied = ingest.run_ingest(spark, conf, DAY1, DAY1, allow_empty_days=True)
    assert (emptied["rows_accepted"], emptied["files_quarantined"]) == (0, 1)
    assert read_table(spark, conf, bronze_schema).count() == 0


def test_files_the_ingest_skips_are_warned_about_and_counted(spark, pipeline_conf, caplog):
    """Only <raw>/date=YYYY-MM-DD/*.parquet is read; anything else that looks like data is listed
    in one warning and counted, while writers' markers (_SUCCESS, .crc, ...) stay quiet."""
    _, conf = pipeline_conf(validate=False)
    raw = Path(conf.raw_dir)
    (path,) = write_raw(raw, [event(1, at(1, 10), "enqueue", queue="q")])
    day = path.parent
    (day / "sub").mkdir()
    skipped = ["sub/f35_nested.parquet", "f36_upper.PARQUET", "f37.parquet.gz"]
    skipped += ["_underscore_good.parquet", ".hidden_good.parquet"]
    for name in skipped:
        (day / name).write_bytes(path.read_bytes())
    for marker in ["_SUCCESS", ".gone.parquet.crc", "_committed_123", "_started_123"]:
        (day / marker).write_bytes(b"")
    for folder in ["date=2024-1-1", "date=2024-13-01", "dt=2024-01-01"]:
        (raw / folder).mkdir()
        (raw / folder / "part-0.parquet").write_bytes(path.read_bytes())
    (raw / "root.parquet").write_bytes(path.read_bytes())  # at the root: no day's
    (raw / "_SUCCESS").write_bytes(b"")

    with caplog.at_level("WARNING", logger="flowctl.ingest"):
        report = ingest.run_ingest(spark, conf, DAY1, DAY1)

    assert (report["rows_accepted"], report["files_listed"], report["files_skipped"]) == (1, 1, 9)
    (warning,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    for name in [*skipped, "date=2024-1-1", "date=2024-13-01", "dt=2024-01-01", "root.parquet"]:
        assert name in warning
    for marker in ["_SUCCESS", ".crc", "_committed_", "_started_"]:
        assert marker not in warning


def test_a_zero_byte_file_is_quarantined_as_such(spark, pipeline_conf):
    _, conf = pipeline_conf(validate=False)
    (path,) = write_raw(Path(conf.raw_dir), [event(1, at(1, 10), "enqueue", queue="q")])
    (path.parent / "part-r9-00000.parquet").write_bytes(b"")
    report = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert report["quarantined_files"] == {
        "date=2024-01-01/part-r9-00000.parquet": "unreadable_file:ArrowInvalid: Parquet file size "
        "is 0 bytes"
    }


def _one_event_file(path: Path, seq: int, types: dict[str, pa.DataType]) -> None:
    """One valid enqueue, written with the given Arrow types for some columns."""
    from schemas.broker_events import BROKER_EVENTS

    values = {"run_id": "r1", "broker": "b1", "seq": seq, "ts": at(1, 12, 0, 0, 123_000),
              "event_type": "enqueue", "queue": "q", "depth_msgs": 5}  # fmt: skip
    arrays = []
    for field in BROKER_EVENTS.to_pyarrow():
        value = values.get(field.name)
        array = pa.array([value], type=field.type)
        wanted = types.get(field.name)
        if wanted is not None and pa.types.is_dictionary(wanted):
            array = array.dictionary_encode()
        elif wanted is not None:
            array = array.cast(wanted)
        arrays.append(array)
    names = [f.name for f in BROKER_EVENTS.to_pyarrow()]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, names=names), path)


def test_types_common_writers_emit_are_read_as_the_contracts(spark, pipeline_conf):
    """DESIGN §3 types are the contract; what Spark reads into them without loss is accepted
    (polars' large strings, dictionary strings, narrower integers signed or not, ms timestamps,
    another time zone);
    nanosecond and naive timestamps are not (Spark cannot read the one; the other is not UTC)."""
    _, conf = pipeline_conf(validate=False)
    folder = Path(conf.raw_dir) / "date=2024-01-01"
    accepted_types = {
        "large_string": {"run_id": pa.large_string(), "queue": pa.large_string()},
        "dictionary": {"event_type": pa.dictionary(pa.int32(), pa.string())},
        "int32": {"seq": pa.int32(), "depth_msgs": pa.int32()},
        # An AMQP serial number is a uint32; small counters may come as uint16 or int16.
        "unsigned": {"seq": pa.uint32(), "depth_msgs": pa.uint16(), "credit": pa.int16()},
        "ms": {"ts": pa.timestamp("ms", tz="UTC")},
        "paris": {"ts": pa.timestamp("us", tz="Europe/Paris")},
    }
    for seq, (name, types) in enumerate(accepted_types.items(), start=1):
        _one_event_file(folder / f"part-{name}.parquet", seq, types)
    _one_event_file(folder / "part-ns.parquet", 10, {"ts": pa.timestamp("ns", tz="UTC")})
    _one_event_file(folder / "part-naive.parquet", 11, {"ts": pa.timestamp("us")})

    # What pandas writes by default (naive nanoseconds), and the deprecated INT96 encoding.
    _one_event_file(folder / "part-pandas.parquet", 12, {"ts": pa.timestamp("ns")})
    int96 = pq.read_table(folder / "part-pandas.parquet")
    pq.write_table(int96, folder / "part-int96.parquet", use_deprecated_int96_timestamps=True)

    report = ingest.run_ingest(spark, conf, DAY1, DAY1)
    assert report["balanced"] and report["rows_accepted"] == len(accepted_types)
    # The reason says what to do (Spark 4 cannot read TIMESTAMP(NANOS) as a timestamp).
    fix = raw_files.TIMESTAMP_HINT
    assert "coerce_timestamps='us'" in fix and ";" not in fix
    naive_tz = "a timestamp without time zone is not UTC by contract"
    nanos = "Spark cannot read nanosecond timestamps"
    assert report["quarantined_files"] == {
        "date=2024-01-01/part-naive.parquet": f"wrong_type:ts:timestamp[us] ({naive_tz}: {fix})",
        "date=2024-01-01/part-ns.parquet": f"wrong_type:ts:timestamp[ns, tz=UTC] ({nanos}: {fix})",
        "date=2024-01-01/part-pandas.parquet": f"wrong_type:ts:timestamp[ns] ({nanos}: {fix})",
        "date=2024-01-01/part-int96.parquet": "wrong_type:ts:INT96 (INT96 is a deprecated "
        f"nanosecond encoding without time zone: {fix})",
    }
    rows = read_table(spark, conf, PIPELINE_TABLES["broker_events"][1]).orderBy("seq").collect()
    assert [(r.run_id, r.seq, r.event_type, r.queue, r.depth_msgs) for r in rows] == [
        ("r1", seq, "enqueue", "q", 5) for seq in range(1, 7)
    ]
    assert {r.ts for r in rows} == {naive(at(1, 12, 0, 0, 123_000))}
    # The rows of the files of the wrong ts type are quarantined as rows, ts null there (it does
    # not convert to the contract's without loss), the other columns as written.
    quarantine = read_table(spark, conf, PIPELINE_TABLES["broker_events_quarantine"][1])
    rejected = quarantine.where("record_kind = 'row'").collect()
    seqs = {"ns": 10, "naive": 11, "pandas": 12, "int96": 12}  # int96: pandas' file rewritten
    expected = {f"date=2024-01-01/part-{name}.parquet": seq for name, seq in seqs.items()}
    assert {
        r.source_file: (r.seq, r.ts, r.event_type, r.depth_msgs, r.reason) for r in rejected
    } == {
        name: (seq, None, "enqueue", 5, report["quarantined_files"][name])
        for name, seq in expected.items()
    }
    assert report["rows_quarantined"] == 4 and report["rows_in_files_quarantined"] == 0


def test_great_expectations_results_go_to_a_uri_quality_folder_through_hadoop(spark, tmp_path):
    """paths.quality may be a URI like the warehouse (s3a://, hdfs://): the result is written
    through Hadoop's FileSystem, not to a local folder named after the scheme."""
    from jobs.quality import store_result

    target = store_result({"success": True}, f"file://{tmp_path}/q", "2024-01-01_2024-01-01", spark)
    assert target == f"file://{tmp_path}/q/broker_events/2024-01-01_2024-01-01.json"
    written = tmp_path / "q" / "broker_events" / "2024-01-01_2024-01-01.json"
    assert json.loads(written.read_text(encoding="utf-8")) == {"success": True}
    assert not Path("file:").exists()


def test_the_pipeline_stops_after_an_ingest_that_failed(spark, pipeline_conf, monkeypatch):
    """As the nightly DAG stops at ingest's exit 1, `flowctl pipeline` computes no episodes or
    metrics from bronze rows whose accounting or validation failed."""
    import jobs.episodes

    conf_path, _ = pipeline_conf()
    unbalanced = {"balanced": False, "great_expectations_success": True}
    monkeypatch.setattr(ingest, "run_ingest", lambda *args, **kwargs: unbalanced)

    def must_not_run(*args, **kwargs):
        raise AssertionError("episodes ran after a failed ingest")

    monkeypatch.setattr(jobs.episodes, "run_episodes", must_not_run)
    outcome = run_pipeline(conf_path, DAY1, DAY1, spark=spark)
    assert outcome["ok"] is False and outcome["ingest"] == unbalanced
    assert "episodes" not in outcome and "daily_metrics" not in outcome

"""The ingest's stages where they decide without Spark: raw-file reasons, partial reads, duplicate
proofs, refusals, what the quarantine re-reads, and the report's accounting (jobs/ingest*.py,
jobs/raw_files.py). The stages end to end: test_jobs_ingest.py and test_ingest_bad_input.py."""

from __future__ import annotations

import json
from datetime import date

import pytest

from jobs.ingest_keys import (
    DuplicatePlan,
    DuplicateSummary,
    run_seq_ranges,
    runs_that_may_repeat_keys,
)
from jobs.ingest_read import (
    FileRunStats,
    IngestScope,
    RawCounts,
    WholeFileRows,
    over_budget,
    partially_read_files,
    rows_per_file,
)
from jobs.ingest_refusals import dropped_files_message, unread_days, why_unusable
from jobs.ingest_report import IngestReport
from jobs.ingest_write import IngestPlan, Written, files_holding_rejects, rejected_files
from jobs.raw_files import RawFile, RawListing, unreadable_reason

DAY1, DAY2, DAY3 = date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)


def raw_file(name: str, rows: int | None = 3, problem: str | None = None, day: date = DAY1):
    relative = f"date={day.isoformat()}/{name}"
    return RawFile(day, relative, f"/raw/{relative}", rows, problem)


def stats(name: str, run: str, rows: int, valid: int | None, seqs: tuple[int, int], offsets=(1, 1)):
    return FileRunStats(f"date=2024-01-01/{name}", run, rows, valid, *seqs, *offsets)


def test_the_reason_of_an_unreadable_file_carries_the_error():
    """A zero-byte file and a file that is not Parquet get reasons that tell them apart."""
    reason = unreadable_reason(OSError("x" * 500), "/a/b", "b")
    assert reason.startswith("unreadable_file:OSError: xxx") and len(reason) == 200
    error = ValueError("/r/date=D/f.parquet is\nbad")
    reason = unreadable_reason(error, "/r/date=D/f.parquet", "date=D/f.parquet")
    assert reason == "unreadable_file:ValueError: date=D/f.parquet is bad"


def test_the_scope_names_its_days_and_label():
    scope = IngestScope(DAY1, DAY3, "/raw")
    assert scope.days == [DAY1, DAY2, DAY3]
    assert scope.label == "2024-01-01_2024-01-03"
    assert scope.days_predicate == "date >= DATE '2024-01-01' AND date <= DATE '2024-01-03'"


def test_a_listing_tells_files_quarantined_whole_and_days_without_files():
    good, bad = raw_file("a.parquet"), raw_file("b.parquet", None, "unreadable_file:x", DAY3)
    listing = RawListing((good, bad))
    assert (listing.good_files, listing.bad_files) == ([good], [bad])
    assert listing.days_without_files([DAY1, DAY2, DAY3]) == [DAY2]


def test_a_file_spark_read_fewer_rows_of_than_its_footer_declares_is_partially_read():
    counted = [stats("a.parquet", "r1", 2, 2, (1, 2)), stats("a.parquet", "r2", 1, 1, (1, 1))]
    counted.append(stats("b.parquet", "r1", 4, 4, (3, 6)))
    per_file = rows_per_file(counted)
    assert per_file == {"date=2024-01-01/a.parquet": 3, "date=2024-01-01/b.parquet": 4}
    files = [raw_file("b.parquet", 5), raw_file("a.parquet", 3), raw_file("c.parquet", 1)]
    # c: not a row read at all (a damaged first page).
    assert partially_read_files(files, per_file) == [
        "date=2024-01-01/b.parquet",
        "date=2024-01-01/c.parquet",
    ]


def test_runs_are_proved_free_of_repeated_keys_by_consecutive_disjoint_seqs():
    consecutive = [stats("a.parquet", "r1", 3, 3, (1, 3)), stats("b.parquet", "r1", 3, 3, (4, 6))]
    overlapping = [stats("a.parquet", "r2", 3, 3, (1, 3)), stats("b.parquet", "r2", 3, 3, (3, 5))]
    out_of_order = [stats("a.parquet", "r3", 3, 3, (1, 5), offsets=(1, 3))]
    all_stats = consecutive + overlapping + out_of_order
    assert runs_that_may_repeat_keys(all_stats, set()) == {"r2", "r3"}
    # A damaged file's rows are all quarantined: they prove and disprove nothing.
    assert runs_that_may_repeat_keys(all_stats, {"date=2024-01-01/b.parquet"}) == {"r3"}
    assert run_seq_ranges(all_stats, set()) == {"r1": (1, 6), "r2": (1, 5), "r3": (1, 5)}


def test_the_lean_pass_proves_keys_over_every_row_and_knows_no_valid_rows():
    """Stats of the keys-only pass (valid_rows None) are over every row: a proof over them holds
    for the valid rows among them, and their ranges hold the valid seqs. The valid rows are not
    known until the bronze write says every row was valid."""
    lean = [
        stats("a.parquet", "r1", 3, None, (1, 3)),
        stats("b.parquet", "r1", 2, None, (4, 5)),
        stats("a.parquet", "r2", 3, None, (1, 5), offsets=(1, 3)),
    ]
    assert runs_that_may_repeat_keys(lean, set()) == {"r2"}
    assert run_seq_ranges(lean, set()) == {"r1": (1, 5), "r2": (1, 5)}
    counts = _counts([raw_file("a.parquet", 6), raw_file("b.parquet", 2)], {}, lean)
    assert not counts.contract_checked
    with pytest.raises(ValueError, match="did not check the contract"):
        _ = counts.valid_rows
    valid = counts.every_row_valid()
    assert valid.contract_checked and valid.valid_rows == counts.rows_read == 8
    assert [s.valid_rows for s in valid.stats] == [3, 2, 3]


def test_rows_of_a_file_quarantined_whole_past_the_budget_are_not_read():
    assert over_budget(raw_file("a.parquet", 10), budget=10, limit=100) is None
    reason = over_budget(raw_file("a.parquet", 11), budget=10, limit=100)
    assert reason is not None
    assert "its 11 rows are past what is left of" in reason
    assert "(10 of 100 rows per run)" in reason


def test_refusing_to_drop_bronze_rows_names_the_first_20_files_and_why():
    gone = [f"date=2024-01-01/f{i:02}.parquet" for i in range(23)]
    why = {gone[0]: "partially read"}
    message = dropped_files_message([DAY1], gone, why, "/raw")
    assert message.startswith("bronze holds rows of 2024-01-01 read from 23 raw files under /raw")
    assert f"{gone[0]} (partially read); {gone[1]} (missing)" in message
    assert gone[19] in message and gone[20] not in message and "; and 3 more." in message
    assert message.endswith("to drop their rows on purpose, pass --allow-empty-days")


def _counts(good: list[RawFile], partial: dict[str, dict], counted=()) -> RawCounts:
    readable = tuple(f for f in good if f.relative_path not in partial)
    return RawCounts(tuple(counted), rows_per_file(list(counted)), partial, readable)


def test_days_whose_files_none_can_be_read_whole_are_unread():
    whole, damaged = raw_file("a.parquet", day=DAY1), raw_file("b.parquet", day=DAY2)
    bad = raw_file("c.parquet", None, "unreadable_file:x", DAY3)
    detail = {"rows_declared": 3, "rows_read": 1, "cause": "a bad page"}
    counts = _counts([whole, damaged], {damaged.relative_path: detail})
    listing = RawListing((whole, damaged, bad))
    assert unread_days(listing, counts) == [DAY2, DAY3]
    assert why_unusable(listing, counts) == {
        bad.relative_path: "unreadable_file:x",
        damaged.relative_path: "a bad page",
    }


def _plan(duplicates: DuplicatePlan | None = None) -> IngestPlan:
    """Day 1: a.parquet (r1, with one invalid row), b.parquet (r2, read in part), c.parquet (r3),
    d.parquet (r4, all valid); e.parquet quarantined whole, its 2 rows read by pyarrow."""
    files = [raw_file(name, 3) for name in ("a.parquet", "b.parquet", "c.parquet", "d.parquet")]
    bad = raw_file("e.parquet", 2, "missing_column:ts")
    counted = [
        stats("a.parquet", "r1", 3, 2, (1, 2)),
        stats("b.parquet", "r2", 1, 1, (1, 1)),
        stats("c.parquet", "r3", 3, 3, (1, 3)),
        stats("d.parquet", "r4", 3, 3, (1, 3)),
    ]
    detail = {"rows_declared": 3, "rows_read": 1, "cause": "a bad page"}
    counts = _counts(files, {"date=2024-01-01/b.parquet": detail}, counted)
    whole = WholeFileRows({bad.relative_path: 2})
    return IngestPlan(
        IngestScope(DAY1, DAY1, "/raw"),
        RawListing((*files, bad)),
        counts,
        duplicates or DuplicatePlan(),
        whole=whole,
    )


def test_only_files_holding_a_rejected_row_are_read_again_for_the_quarantine():
    assert files_holding_rejects(_plan()) == {
        "date=2024-01-01/a.parquet",  # an invalid row
        "date=2024-01-01/b.parquet",  # read in part
    }
    # An identical copy in r3 (searched because r3 was not proved free of them).
    copies = DuplicatePlan(frozenset({"r3"}), None, DuplicateSummary(groups=1, dropped=1))
    assert "date=2024-01-01/c.parquet" in files_holding_rejects(_plan(copies))
    conflicts = DuplicateSummary(groups=1, conflicting_rows=2, conflicting_runs=frozenset({"r4"}))
    held = files_holding_rejects(_plan(DuplicatePlan(frozenset({"r4"}), None, conflicts)))
    assert "date=2024-01-01/d.parquet" in held and "date=2024-01-01/c.parquet" not in held


def test_files_quarantined_whole_and_read_in_part_get_a_record_saying_why():
    plan = _plan()
    unread = json.dumps({"rows_declared": 2, "rows_read": 0, "cause": "gone"})
    plan_unread = IngestPlan(
        plan.scope,
        plan.listing,
        plan.counts,
        whole=WholeFileRows({}, (), {"date=2024-01-01/e.parquet": unread}),
    )
    records = [(f.relative_path, f.problem, f.detail) for f in rejected_files(plan_unread)]
    assert records == [
        ("date=2024-01-01/e.parquet", "missing_column:ts", unread),
        (
            "date=2024-01-01/b.parquet",
            "partially_read_file",
            json.dumps({"rows_declared": 3, "rows_read": 1, "cause": "a bad page"}),
        ),
    ]


#: The keys of the report run_ingest returned before bronze_version (jobs/pipeline.py and
#: flowctl/cli.py read them), Great Expectations' aside.
REPORT_KEYS = [
    "date_from", "date_to", "files_listed", "files_skipped", "files_quarantined",
    "files_partially_read", "rows_read", "rows_accepted", "rows_quarantined",
    "duplicates_quarantined", "duplicates_of_other_days", "moved_from_later_days",
    "bronze_files_overlapping", "rows_unreadable", "rows_in_files_quarantined",
    "files_without_footer", "rows_declared", "quarantine_reasons", "quarantined_files",
    "partially_read_files",
]  # fmt: skip


def test_the_report_balances_when_the_writes_hold_what_the_counts_predict():
    """DESIGN §5: rows read = accepted + quarantined. Read: 3 + 1 + 3 + 3 by Spark, 2 by pyarrow
    (12); valid in files read whole 2 + 3 + 3 = 8 accepted; quarantined 12 - 8 = 4."""
    plan = _plan()
    assert (plan.rows_read, plan.expected_accepted, plan.expected_quarantined) == (12, 8, 4)
    written = Written(
        8, 4, {}, {"missing_column:ts": 2, "null_seq": 1, "partially_read_file": 1}, 7
    )
    report = IngestReport.of(plan, written)
    assert report.balanced
    assert (report.rows_declared, report.rows_unreadable, report.rows_in_files_quarantined) == (
        14,
        2,
        0,
    )
    as_dict = report.as_dict()
    assert list(as_dict) == [*REPORT_KEYS, "bronze_version", "balanced"]
    assert (as_dict["bronze_version"], as_dict["balanced"]) == (7, True)
    assert as_dict["partially_read_files"] == {
        "date=2024-01-01/b.parquet": {"rows_declared": 3, "rows_read": 1, "cause": "a bad page"}
    }
    # A row accepted that the counts put in the quarantine: the sums still match, the
    # prediction does not.
    assert not IngestReport.of(plan, Written(9, 3, {}, {}, 7)).balanced
    # A row lost: rows read != accepted + quarantined.
    assert not IngestReport.of(plan, Written(8, 3, {}, {}, 7)).balanced

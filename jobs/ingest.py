"""ingest: raw Parquet event log -> bronze ``broker_events`` + ``broker_events_quarantine``.

:func:`run_ingest` runs six stages over the days [from, to], each a function returning a small
frozen plan, in its own module:

1. Inspect the raw files (jobs/raw_files.py, pyarrow, no data read): list ``<raw>/date=D/*.parquet``
   and check each file's footer, schema and name. A file that cannot be opened, whose schema
   breaks the contract, or whose name Spark cannot address (':' or glob characters), is
   quarantined whole: one quarantine record (record_kind='file') and none of its rows in bronze;
   pyarrow reads the rows of one whose footer it could open into the quarantine, a row record
   each with the file's problem as reason. Then one counting pass in Spark (jobs/ingest_read.py)
   over the other files, read with ``ignoreCorruptFiles`` so that a damaged page cannot crash the
   job: a file yielding fewer rows than its footer declares is "partially read", every row read
   from it quarantined, and its file record says why in ``detail`` (JSON). pyarrow reads such a
   file one row group at a time: the row groups after the damaged one that it reads whole (Spark
   read the rows before the damage) are quarantined as rows too, within the row budget.
   The counting pass reads the keys only (the lean pass): the bronze write decodes every column
   anyway, and fails on a damaged page before committing anything; then the pass that decodes
   every column finds the file, and stages 2 to 5 run again without it. Which rows break the
   contract the bronze write tells (all or none of them kept); only when some do, the pass that
   checks the contract runs, after the write, for the quarantine's reads and the report.
2. Refuse input that cannot be what was meant (jobs/ingest_refusals.py): replacing days that bronze
   holds with nothing, or dropping rows of raw files now missing or unreadable.
3. Resolve the keys repeated within the days (jobs/ingest_keys.py): an identical copy of an
   accepted (run_id, seq) is quarantined as ``duplicate``, copies that differ as
   ``conflicting_duplicate`` (jobs/transforms/validate.py decides which copy is the event).
4. Resolve the keys bronze holds on other days (jobs/ingest_keys.py): of copies of a key on several
   days the earliest day's is kept: a row whose key bronze holds on an earlier day is quarantined,
   and bronze's copy on a later day moves to that day's quarantine.
5. Write bronze and the quarantine with replaceWhere on the days, so a rerun replaces them
   (jobs/ingest_write.py).
6. Report (jobs/ingest_report.py): the counts and whether they balance, Great Expectations over the
   accepted rows; the result and counts go to <quality>/.

Accounting: rows_read = rows_accepted + rows_quarantined, always (DESIGN.md §5), the rows pyarrow
read from files quarantined whole and of row groups of damaged files included; rows a damaged
file declared but that neither Spark nor pyarrow could read are reported as rows_unreadable, rows
of files quarantined whole that could not be read as rows (pyarrow failed on them) as
rows_in_files_quarantined, so that rows_declared (the footers' total) = rows_read +
rows_unreadable + rows_in_files_quarantined (files_without_footer: files whose row count is
unknown).
Exit status: 0 whatever the input (bad input is quarantined, not fatal); 1 when the Great
Expectations suite fails on accepted rows (a rule bug) or the accounting does not balance; 2 when
the input is refused.
"""

from __future__ import annotations

import logging
import sys
from datetime import date
from typing import Any

from pyspark.sql import SparkSession

from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.config import PipelineConf
from jobs.delta_io import ensure_table, table_path
from jobs.ingest_keys import resolve_duplicates, resolve_held_keys
from jobs.ingest_read import (
    IngestScope,
    RawCounts,
    WholeFileRows,
    count_raw_rows,
    read_rows_of_files_quarantined_whole,
)
from jobs.ingest_refusals import (
    IngestRefused,
    check_raw_root,
    refuse_days_without_files,
    refuse_no_raw_files,
    refuse_unusable_files,
)
from jobs.ingest_report import IngestReport, log_report, validate_with_great_expectations
from jobs.ingest_write import IngestPlan, write_tables
from jobs.pipeline_state import (
    INGEST,
    INGEST_WRITING,
    bronze_version,
    contiguous_ranges,
    days_between,
    days_text,
    read_records,
    record_processed,
    unfinished_ingests,
)
from jobs.quality import import_in_background
from jobs.raw_files import RawListing, list_raw_files, log_skipped_entries
from schemas.tables import BROKER_EVENTS_QUARANTINE, BRONZE_BROKER_EVENTS

__all__ = ["IngestRefused", "ingest_succeeded", "main", "run_ingest"]

log = logging.getLogger("flowctl.ingest")

#: Spark's error class for a file it could not read (a damaged page among the causes): the one
#: failure of the bronze write after the lean counting pass that a damaged file may explain.
READ_FAILURE = "FAILED_READ_FILE"


def run_ingest(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    raw_dir: str | None = None,
    *,
    allow_empty_days: bool = False,
) -> dict[str, Any]:
    """Ingest the raw days [date_from, date_to] (:func:`ingest_days`), after the days an earlier
    ingest started writing and did not finish (killed after its bronze commit, before its
    quarantine and its record: jobs/pipeline_state.py ``unfinished_ingests``), each contiguous
    range of them first, with a warning, from this run's raw folder. The next night went on without
    them: their quarantine never written, their accounting and Great Expectations never run, and
    nothing said so but ``flowctl status`` (a review). Never with ``allow_empty_days``, which is
    for the asked days. The report is the asked days', with ``caught_up`` (the days ingested
    first), ``caught_up_failed`` (those of them that failed their checks: the run fails, as
    for its own days) and ``caught_up_refused`` (those refused, left behind with a warning: a
    day whose raw files are gone does not stop every night after it)."""
    unfinished = [
        day
        for day in unfinished_ingests(read_records(spark, conf))
        if not date_from <= day <= date_to
    ]
    failed, refused = [], []
    for first, last in contiguous_ranges(unfinished):
        log.warning(UNFINISHED_TEXT, date_from, date_to, first, last)
        days = days_text(days_between(first, last))
        try:
            # Never with allow_empty_days: that is for the days asked, and would replace these
            # with nothing if their raw files are gone (a review).
            caught = ingest_days(spark, conf, first, last, raw_dir)
        except IngestRefused as refusal:
            # Left unfinished (status says so, each night tries again), not a night's stop: a
            # day whose raw files are gone would block every night after it (a review).
            log.warning(UNFINISHED_REFUSED_TEXT, first, last, refusal, first, last)
            refused.append(days)
            continue
        if not ingest_succeeded(caught):
            failed.append(days)
    report = ingest_days(
        spark, conf, date_from, date_to, raw_dir, allow_empty_days=allow_empty_days
    )
    if unfinished:
        report["caught_up"] = days_text(unfinished)
    if failed:
        report["caught_up_failed"] = ", ".join(failed)
    if refused:
        report["caught_up_refused"] = ", ".join(refused)
    return report


UNFINISHED_TEXT = (
    "ingest %s..%s: the days %s..%s were started and not finished (killed?); ingesting them "
    "again first"
)
UNFINISHED_REFUSED_TEXT = (
    "ingest %s..%s, unfinished, could not be ingested again and stays behind: %s (to replace "
    "them with what raw holds, nothing if it holds none: flowctl pipeline --from %s --to %s "
    "--allow-empty-days)"
)


def ingest_days(
    spark: SparkSession,
    conf: PipelineConf,
    date_from: date,
    date_to: date,
    raw_dir: str | None = None,
    *,
    allow_empty_days: bool = False,
) -> dict[str, Any]:
    """Ingest the raw days [date_from, date_to]; returns the counts (also logged and stored).

    Raises :class:`IngestRefused`, before writing anything, when the raw folder does not exist,
    or when days that bronze already holds have no raw files (a wrong folder, or raw files
    removed by retention) or only files that cannot be read (all quarantined whole or read only
    in part), or when bronze holds rows of the days read from files that are now missing or
    unreadable: replacing those days would delete their rows. ``allow_empty_days`` replaces them
    all the same.

    Spark jobs: one counting pass over the raw rows' keys (per file and run, aggregated
    map-side); the exact duplicate search (an aggregation over (run_id, seq)) only for runs the
    counts cannot prove duplicate-free; the bronze write (after it, when it left rows out, the
    counting pass that checks the contract); the quarantine write, reading only the files that hold
    rejected rows (skipped when nothing is rejected and the quarantine holds nothing of these
    days), the rows of files quarantined whole for their schema or name, and of row groups of
    damaged files that Spark did not reach, read by pyarrow on the driver; Great Expectations over
    the bronze rows as written. Nothing is cached.
    """
    if conf.validate_with_great_expectations:
        import_in_background()
    scope = IngestScope(date_from, date_to, raw_dir or conf.raw_dir, allow_empty_days)
    # 1 and 2: inspect the raw files, refusing what cannot be meant as soon as it shows.
    check_raw_root(scope.raw_root)
    listing = list_raw_files(scope.raw_root, scope.days)
    refuse_no_raw_files(spark, conf, scope, listing)
    # Both bronze tables exist after an ingest, the quarantine even when nothing was rejected.
    for table in (BRONZE_BROKER_EVENTS, BROKER_EVENTS_QUARANTINE):
        ensure_table(spark, table_path(conf, table), table)
    log_skipped_entries(scope.label, scope.raw_root, listing.skipped)
    refuse_days_without_files(spark, conf, scope, listing)
    counts = count_raw_rows(spark, scope, listing, check_contract=False)
    # 2 to 4: refusals, then one row per (run_id, seq), within the days and against bronze.
    plan = plan_ingest(spark, conf, scope, listing, counts)
    # 5: write, recorded as started first: a kill after the bronze commit and before the
    # quarantine and the record below then leaves the days behind (jobs/pipeline_state.py).
    record_processed(
        spark, conf, INGEST_WRITING, date_from, date_to, bronze_version(spark, conf) + 1
    )
    try:
        plan, written = write_tables(spark, conf, plan)
    except Exception as error:
        if counts.contract_checked or READ_FAILURE not in str(error):
            raise
        # The lean pass read the keys only: a damaged page in another column failed the bronze
        # write, which committed nothing. The pass that decodes every column tells the file.
        checked = count_raw_rows(spark, scope, listing)
        if not checked.partially_read:
            raise
        log.warning(
            "ingest %s: the bronze write met a damaged page of %s; stages 2 to 5 again, without it",
            scope.label,
            ", ".join(checked.partially_read),
        )
        plan.release()
        plan = plan_ingest(spark, conf, scope, listing, checked, plan.whole)
        plan, written = write_tables(spark, conf, plan)
    plan.release()
    # 6: report.
    report = IngestReport.of(plan, written)
    # Recorded before validation: the days are in bronze now, so later jobs are behind on them
    # whatever Great Expectations finds (jobs/pipeline_state.py).
    version = (
        bronze_version(spark, conf) if written.bronze_version is None else written.bronze_version
    )
    record_processed(spark, conf, INGEST, date_from, date_to, version)
    report = validate_with_great_expectations(spark, conf, plan, report)
    scope.describe(spark, None)
    log_report(scope.label, report)
    return report.as_dict()


def plan_ingest(
    spark: SparkSession,
    conf: PipelineConf,
    scope: IngestScope,
    listing: RawListing,
    counts: RawCounts,
    whole: WholeFileRows | None = None,
) -> IngestPlan:
    """Stages 2 to 4 over the files as ``counts`` found them: refuse what cannot be meant, one
    row per (run_id, seq) within the days and against bronze's other days; then the rows of files
    quarantined whole (``whole`` when they were read already)."""
    refuse_unusable_files(spark, conf, scope, listing, counts)
    duplicates = resolve_duplicates(spark, scope, counts)
    held = resolve_held_keys(spark, conf, scope, counts, duplicates)
    if whole is None:
        whole = read_rows_of_files_quarantined_whole(spark, conf, scope, listing)
    return IngestPlan(scope, listing, counts, duplicates, held, whole)


def ingest_succeeded(report: dict[str, Any]) -> bool:
    """Balanced and validated, and so were the unfinished days it ingested first."""
    return (
        bool(report["balanced"])
        and report.get("great_expectations_success", True)
        and not report.get("caught_up_failed")
    )


def main(argv: list[str] | None = None) -> int:
    parser = date_range_parser("Raw event log -> bronze broker_events + quarantine")
    parser.add_argument("--raw", help="raw event log root (default: paths.raw of the conf)")
    parser.add_argument(
        "--allow-empty-days",
        action="store_true",
        help="replace days that bronze holds but that have no (readable) raw files with nothing "
        "(refused by default: it usually means a wrong raw folder or a copy in progress)",
    )
    args = parse_date_range(parser, argv)
    conf, spark = start_job(args, "flowctl-ingest")
    try:
        report = run_ingest(
            spark,
            conf,
            args.date_from,
            args.date_to,
            raw_dir=args.raw,
            allow_empty_days=args.allow_empty_days,
        )
    except IngestRefused as refused:
        log.error("ingest refused: %s", refused)
        return 2
    return 0 if ingest_succeeded(report) else 1


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("ingest", main))

"""Stage 6 of the ingest: its report, the accounting DESIGN.md §5 asks for, logged and stored.

:class:`IngestReport` holds the counts of one run; its ``balanced`` states the accounting: rows
read = rows accepted + rows quarantined (DESIGN §5), the rows pyarrow read from files quarantined
whole, and of row groups of files read only in part that Spark did not reach, included; every row
the footers declare is read, unreadable (in files read only in part: in row groups neither Spark
nor pyarrow read whole) or in files quarantined whole whose rows could not be read; and the Delta
commits hold what the counting pass predicted. :meth:`IngestReport.as_dict` is what
``run_ingest`` returns and the quality folder stores beside the Great Expectations result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from pyspark.sql import SparkSession

from jobs import quality
from jobs.config import PipelineConf
from jobs.delta_io import read_table
from jobs.ingest_write import IngestPlan, Written
from schemas.tables import BRONZE_BROKER_EVENTS

log = logging.getLogger("flowctl.ingest")


@dataclass(frozen=True)
class IngestReport:
    """The counts of one run of the ingest over [date_from, date_to] (see :meth:`as_dict`)."""

    date_from: str
    date_to: str
    files_listed: int
    # Entries not read although they may hold data (nested, other suffixes, hidden names,
    # malformed date= folders at the root): see the warning.
    files_skipped: int
    files_quarantined: int
    files_partially_read: int
    rows_read: int
    rows_accepted: int
    rows_quarantined: int
    # Identical copies of accepted rows: part of rows_quarantined (reason "duplicate").
    duplicates_quarantined: int
    # Rows repeating a key bronze holds on an earlier day: part of rows_quarantined.
    duplicates_of_other_days: int
    # Per later day, bronze rows repeating a key these days hold: moved from bronze to that
    # day's quarantine (not rows of these days: outside the balance).
    moved_from_later_days: Mapping[str, int]
    # Bronze files of other days whose statistics could not rule out such a key.
    bronze_files_overlapping: int
    rows_unreadable: int
    # Rows the footers of files quarantined whole declare whose rows could not be read (not in
    # rows_read; the rows of those quarantined for their schema or name are, as rows).
    rows_in_files_quarantined: int
    # Files quarantined whole whose footer could not be read: their rows are unknown.
    files_without_footer: int
    # Every row the readable footers declare: rows_read + rows_unreadable +
    # rows_in_files_quarantined.
    rows_declared: int
    quarantine_reasons: Mapping[str, int]
    quarantined_files: Mapping[str, str | None]
    # Files read only in part: why (the detail of their quarantine record, as JSON).
    partially_read_files: Mapping[str, dict[str, Any]]
    # Bronze's Delta version after the write; None when the run committed nothing to bronze.
    bronze_version: int | None
    # What the counting pass predicts the writes hold (not in as_dict: part of ``balanced``).
    expected_accepted: int
    expected_quarantined: int
    # Of rows_read, those pyarrow read of row groups of files read only in part that Spark did
    # not reach (logged; per file in partially_read_files).
    rows_recovered: int = 0
    # Set by the Great Expectations stage when it runs: the suite's verdict, where it is stored.
    great_expectations_success: bool | None = None
    great_expectations_result: str | None = None

    @classmethod
    def of(cls, plan: IngestPlan, written: Written) -> IngestReport:
        listing, counts, whole = plan.listing, plan.counts, plan.whole
        bad_files = listing.bad_files
        damaged = [f for f in listing.good_files if f.relative_path in counts.damaged]
        recovered = plan.recovered.rows_per_file
        return cls(
            date_from=plan.scope.date_from.isoformat(),
            date_to=plan.scope.date_to.isoformat(),
            files_listed=len(listing.files),
            files_skipped=len(listing.skipped),
            files_quarantined=len(bad_files),
            files_partially_read=len(counts.partially_read),
            rows_read=plan.rows_read,
            rows_accepted=written.rows_accepted,
            rows_quarantined=written.rows_quarantined,
            duplicates_quarantined=plan.duplicates.summary.dropped,
            duplicates_of_other_days=plan.held.earlier_day_copies,
            moved_from_later_days=written.moved_from_later_days,
            bronze_files_overlapping=len(plan.held.overlapping),
            rows_unreadable=sum(
                (f.footer_rows or 0)
                - counts.rows_per_file.get(f.relative_path, 0)
                - recovered.get(f.relative_path, 0)
                for f in damaged
            ),
            rows_in_files_quarantined=sum(
                f.footer_rows or 0 for f in bad_files if f.relative_path not in whole.rows_per_file
            ),
            files_without_footer=sum(f.footer_rows is None for f in bad_files),
            rows_declared=sum(f.footer_rows or 0 for f in listing.files),
            quarantine_reasons=written.quarantine_reasons,
            quarantined_files={f.relative_path: f.problem for f in bad_files},
            partially_read_files=dict(plan.recovered.details),
            bronze_version=written.bronze_version,
            expected_accepted=plan.expected_accepted,
            expected_quarantined=plan.expected_quarantined,
            rows_recovered=sum(recovered.values()),
        )

    @property
    def balanced(self) -> bool:
        """DESIGN §5's rows in = rows accepted + rows quarantined; every row the footers declare
        accounted for; and the Delta commits holding what the counting pass predicted."""
        return (
            self.rows_read == self.rows_accepted + self.rows_quarantined
            and self.rows_declared
            == self.rows_read + self.rows_unreadable + self.rows_in_files_quarantined
            and self.rows_accepted == self.expected_accepted
            and self.rows_quarantined == self.expected_quarantined
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as ``run_ingest`` returns it: the counts, ``balanced``, and the Great
        Expectations keys once that stage has run."""
        hidden = {"expected_accepted", "expected_quarantined", "rows_recovered"}
        great_expectations = {"great_expectations_success", "great_expectations_result"}
        report = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in hidden | great_expectations
        }
        report["moved_from_later_days"] = dict(self.moved_from_later_days)
        report["quarantine_reasons"] = dict(self.quarantine_reasons)
        report["quarantined_files"] = dict(self.quarantined_files)
        report["partially_read_files"] = dict(self.partially_read_files)
        report["balanced"] = self.balanced
        for name in ("great_expectations_success", "great_expectations_result"):
            if getattr(self, name) is not None:
                report[name] = getattr(self, name)
        return report


def validate_with_great_expectations(
    spark: SparkSession, conf: PipelineConf, plan: IngestPlan, report: IngestReport
) -> IngestReport:
    """Run the Great Expectations suite over the days' bronze rows as written (when the conf
    asks for it) and store its result with the counts in the quality folder."""
    if not conf.validate_with_great_expectations:
        return report
    scope = plan.scope
    scope.describe(spark, "Great Expectations over bronze")
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(scope.days_predicate)
    validation = quality.validate_accepted_events(bronze, scope.label)
    report = replace(report, great_expectations_success=validation["success"])
    stored = quality.store_result(
        {"counts": report.as_dict(), "validation": validation}, conf.quality_dir, scope.label, spark
    )
    return replace(report, great_expectations_result=stored)


def log_report(label: str, report: IngestReport) -> None:
    log.info(
        "ingest %s: files %d (quarantined %d, partially read %d: pyarrow read %d of their rows "
        "past the damage); rows declared by footers %d = read %d + unreadable %d + in files "
        "quarantined whole unread %d (and %d files without a readable footer); rows read %d = "
        "accepted %d + quarantined %d (of which duplicates %d, keys held on other days %d; by "
        "reason: %s); balanced=%s",
        label,
        report.files_listed,
        report.files_quarantined,
        report.files_partially_read,
        report.rows_recovered,
        report.rows_declared,
        report.rows_read,
        report.rows_unreadable,
        report.rows_in_files_quarantined,
        report.files_without_footer,
        report.rows_read,
        report.rows_accepted,
        report.rows_quarantined,
        report.duplicates_quarantined,
        report.duplicates_of_other_days,
        ", ".join(f"{reason} {n}" for reason, n in sorted(report.quarantine_reasons.items()))
        or "none",
        report.balanced,
    )

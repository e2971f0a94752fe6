"""Stage 5 of the ingest: writing bronze and the quarantine from the plans of stages 1 to 4.

Bronze ``broker_events`` and ``broker_events_quarantine`` are written with replaceWhere on the
days, so a rerun replaces them. Bronze gets the accepted rows of the files read whole; copies that
later days' bronze holds of the days' keys move to those days' quarantine; the quarantine gets a
record per file quarantined whole or read only in part, the rows pyarrow read of files
quarantined whole and of the row groups of files read in part that Spark did not reach
(:class:`RecoveredRows`), and the rejected rows, read again from the files that hold any
(:func:`files_holding_rejects`) only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import (
    conform,
    has_files_matching,
    latest_commit,
    read_table,
    replace_where,
    table_path,
)
from jobs.ingest_keys import (
    BROADCAST_DUPLICATE_GROUPS,
    DuplicatePlan,
    HeldKeysPlan,
    move_later_copies_to_quarantine,
)
from jobs.ingest_read import (
    POSITION,
    IngestScope,
    RawCounts,
    WholeFileRows,
    count_raw_rows,
    file_records,
    read_raw_events,
    recovered_row_records,
)
from jobs.raw_files import ROW_INDEX, RawFile, RawListing, RowGroup
from jobs.transforms.validate import ACCEPTED, QUARANTINED, classify_events
from schemas.tables import BROKER_EVENTS_QUARANTINE, BRONZE_BROKER_EVENTS, RECORD_KIND_ROW

log = logging.getLogger("flowctl.ingest")


@dataclass(frozen=True)
class RecoveredRows:
    """The row groups of files Spark read only in part that pyarrow reads whole and Spark did not
    read (:attr:`jobs.raw_files.PartialRead.recoverable`), within the run's row budget: their
    rows go to the quarantine as rows (``partially_read_file``) and count as read."""

    #: Files -> their row groups recovered.
    row_groups: Mapping[str, tuple[RowGroup, ...]] = field(default_factory=dict)
    #: Files read only in part -> the detail of their file record (JSON), what was recovered said.
    details: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rows_per_file(self) -> dict[str, int]:
        return {name: sum(g.rows for g in groups) for name, groups in self.row_groups.items()}

    @property
    def rows_read(self) -> int:
        return sum(self.rows_per_file.values())


def recover_within_budget(counts: RawCounts, whole: WholeFileRows) -> RecoveredRows:
    """The row groups pyarrow recovers of the files read only in part, in name order, all of a
    file's or none: they take what the files quarantined whole left of
    ``ingest.max_rows_from_files_quarantined_whole``, since the driver holds their rows too until
    the write. A file past it keeps Spark's rows only, and its detail and a warning say why."""
    left, row_groups, details = whole.budget_left, {}, dict(counts.partial_details)
    for name, read in sorted(counts.partial_reads.items()):
        groups = read.recoverable
        rows = sum(g.rows for g in groups)
        if groups and left is not None and rows > left:
            details[name] = read.detail(
                f"past what is left of ingest.max_rows_from_files_quarantined_whole ({left} of "
                f"{whole.budget} rows per run): fix the file and rerun the day, or raise the limit"
            )
            log.warning("raw file %s (partially read): %s", name, details[name]["cause"])
        elif groups:
            row_groups[name] = groups
            left = None if left is None else left - rows
    return RecoveredRows(row_groups, details)


@dataclass(frozen=True, eq=False)
class IngestPlan:
    """Everything stages 1 to 4 decided: what stage 5 writes and the report counts."""

    scope: IngestScope
    listing: RawListing
    counts: RawCounts
    duplicates: DuplicatePlan = field(default_factory=DuplicatePlan)
    held: HeldKeysPlan = field(default_factory=HeldKeysPlan)
    whole: WholeFileRows = field(default_factory=WholeFileRows)

    @cached_property
    def recovered(self) -> RecoveredRows:
        """What pyarrow recovers of the files read only in part (decided once)."""
        return recover_within_budget(self.counts, self.whole)

    @property
    def rows_read(self) -> int:
        """Rows Spark read of the files it was given, and pyarrow of files quarantined whole and
        of row groups of files read in part that Spark did not reach."""
        return self.counts.rows_read + self.whole.rows_read + self.recovered.rows_read

    @property
    def rows_removed(self) -> int:
        """Valid rows quarantined all the same: repeated keys, of these days or of bronze's."""
        summary = self.duplicates.summary
        return summary.conflicting_rows + summary.dropped + self.held.earlier_day_copies

    @property
    def expected_accepted(self) -> int:
        """What the bronze write must hold, as the counting pass predicts it (the lean pass
        cannot: then it is what the write held if every row was valid,
        :func:`with_valid_rows_known`)."""
        return self.counts.valid_rows - self.rows_removed

    @property
    def expected_quarantined(self) -> int:
        """What the quarantine write must hold in rows, as the counting pass predicts it."""
        return self.rows_read - self.counts.valid_rows + self.rows_removed

    def release(self) -> None:
        """Unpersist what the duplicate and held-key searches kept for the writes."""
        self.duplicates.release()
        self.held.release()


def files_holding_rejects(plan: IngestPlan) -> set[str]:
    """The files read whole or in part holding a rejected row, the only ones read again for the
    quarantine: invalid rows, damaged files, conflicts, identical copies, keys of other days."""
    stats, duplicates = plan.counts.stats, plan.duplicates
    holding = {s.source_file for s in stats if s.rows > s.valid_rows} | plan.counts.damaged
    holding |= plan.counts.files_of_runs(duplicates.summary.conflicting_runs)
    if duplicates.summary.dropped:  # the runs whose identical copies go to quarantine too
        holding |= plan.counts.files_of_runs(duplicates.suspicious)
    if plan.held.held is not None:  # the runs repeating keys of other days
        holding |= plan.counts.files_of_runs(plan.held.runs)
    return holding


def rejected_files(plan: IngestPlan) -> list[RawFile]:
    """The files that get a quarantine record: those quarantined whole (with, when pyarrow failed
    on their rows, the detail of why), then those read only in part (``partially_read_file``,
    and the detail of what was read and why not all)."""
    damaged = [f for f in plan.listing.good_files if f.relative_path in plan.counts.damaged]
    unread = plan.whole.unread_details
    return [
        *(replace(f, detail=unread.get(f.relative_path, f.detail)) for f in plan.listing.bad_files),
        *(
            replace(
                f,
                problem="partially_read_file",
                detail=json.dumps(plan.recovered.details[f.relative_path], ensure_ascii=False),
            )
            for f in damaged
        ),
    ]


def recovered_records(spark: SparkSession, plan: IngestPlan) -> list[DataFrame]:
    """The rows pyarrow recovers of files read only in part, as quarantine records. A file that no
    more reads as in the counting pass (it changed meanwhile) is logged, and the report does not
    balance: its rows were counted as read."""
    by_path = {f.relative_path: f for f in plan.listing.good_files}
    found = []
    for name, groups in plan.recovered.row_groups.items():
        plan.scope.describe(spark, f"rows pyarrow recovers of {name}, read in part")
        records, error = recovered_row_records(spark, plan.scope.raw_root, by_path[name], groups)
        if error is not None:
            log.error(
                "raw file %s changed during the ingest: the rows of its row groups %s, counted as "
                "read, could not be quarantined (%s)",
                name,
                [g.index for g in groups],
                error,
            )
        elif records is not None:
            found.append(records)
    return found


def classify_rows(
    spark: SparkSession, plan: IngestPlan, files: list[RawFile], *, skip_damaged: bool = True
) -> DataFrame:
    """The rows of ``files`` with their ``status`` and ``reason`` (jobs/transforms/validate.py),
    the duplicate and held-key searches' results joined in; ``skip_damaged``: see
    :func:`~jobs.ingest_read.read_raw_rows`."""
    names = {f.relative_path for f in files}
    duplicates, held = plan.duplicates, plan.held
    return classify_events(
        read_raw_events(spark, files, skip_damaged=skip_damaged),
        [name for name in plan.counts.partially_read if name in names],
        position=POSITION,
        duplicates=duplicates.groups,
        no_duplicates=duplicates.groups is None,
        broadcast_duplicates=duplicates.summary.groups <= BROADCAST_DUPLICATE_GROUPS,
        held=held.held,
        broadcast_held=held.keys <= BROADCAST_DUPLICATE_GROUPS,
    )


def write_bronze(spark: SparkSession, conf: PipelineConf, plan: IngestPlan) -> int:
    """Replace the days of bronze with the accepted rows; returns the rows written. A damaged
    page in a file read whole (one the lean counting pass could not see, or a file changed since)
    fails the write, and nothing is committed: the files read whole are read whole, or not at
    all."""
    plan.scope.describe(spark, "write bronze broker_events")
    accepted = classify_rows(spark, plan, list(plan.counts.readable), skip_damaged=False)
    accepted = accepted.where(F.col("status") == ACCEPTED)
    return replace_where(spark, conf, BRONZE_BROKER_EVENTS, accepted, plan.scope.days_predicate)


def with_valid_rows_known(spark: SparkSession, plan: IngestPlan, rows_accepted: int) -> IngestPlan:
    """The plan with counts that know which rows keep the contract, once bronze is written.

    After the lean counting pass they are not known: bronze accepting every row read but the
    repeated keys (:attr:`IngestPlan.rows_removed`, all of valid rows) says every row is valid
    (the rows that break a rule are the only others it leaves out); else the counting pass that
    checks the contract runs now, for which files hold rejected rows (the quarantine reads those
    again) and how many rows are valid (the report's expected counts)."""
    counts = plan.counts
    if counts.contract_checked:
        return plan
    if rows_accepted == counts.rows_read - plan.rows_removed:
        return replace(plan, counts=counts.every_row_valid())
    checked = count_raw_rows(spark, plan.scope, plan.listing)
    if checked.partially_read:
        log.error(
            "raw files %s were read whole by the bronze write and only in part by the count "
            "after it: they changed during the ingest, and the counts will not balance",
            checked.partially_read,
        )
    return replace(plan, counts=checked)


def move_later_copies(spark: SparkSession, conf: PipelineConf, plan: IngestPlan) -> dict[str, int]:
    """Move later days' bronze copies of the days' keys to their quarantine (logged); returns the
    rows moved per day."""
    scope, later_copies = plan.scope, plan.held.later_copies
    if later_copies is None:
        return {}
    scope.describe(spark, "move later days' copies of its keys to quarantine")
    moved = move_later_copies_to_quarantine(spark, conf, later_copies, scope.raw_root)
    later_copies.unpersist()
    log.warning(
        "ingest %s: bronze held %d keys of these days' events on later days (%s); those "
        "copies were moved to the quarantine of their days as conflicting_duplicate: the "
        "earliest day's copy of a key is the event. episodes and daily_metrics over %s "
        "recompute the runs' later days too",
        scope.label,
        sum(moved.values()),
        ", ".join(f"{day}: {n}" for day, n in sorted(moved.items())),
        scope.label,
    )
    return moved


def write_quarantine(spark: SparkSession, conf: PipelineConf, plan: IngestPlan) -> int:
    """Replace the days of the quarantine; returns the row records written (file records aside).
    Nothing rejected and nothing of these days to replace: no write (no commit)."""
    files = rejected_files(plan)
    records = conform(file_records(spark, files), BROKER_EVENTS_QUARANTINE)
    recovered = recovered_records(spark, plan)
    quarantine = reduce(DataFrame.unionByName, [*plan.whole.records, *recovered], records)
    holding = files_holding_rejects(plan)
    rereads = [f for f in plan.listing.good_files if f.relative_path in holding]
    if rereads:
        rejected_rows = (
            classify_rows(spark, plan, rereads)
            .where(F.col("status") == QUARANTINED)
            .withColumns(
                {
                    "record_kind": F.lit(RECORD_KIND_ROW),
                    "file_rows": F.lit(None).cast("long"),
                    ROW_INDEX: F.col(POSITION),
                }
            )
        )
        quarantine = conform(rejected_rows, BROKER_EVENTS_QUARANTINE).unionByName(quarantine)
    days = plan.scope.days_predicate
    if not (rereads or files or has_files_matching(spark, conf, BROKER_EVENTS_QUARANTINE, days)):
        return 0
    plan.scope.describe(spark, "write broker_events_quarantine")
    written = replace_where(spark, conf, BROKER_EVENTS_QUARANTINE, quarantine, days)
    return written - len(files)


def quarantine_reasons(
    spark: SparkSession, conf: PipelineConf, scope: IngestScope
) -> dict[str, int]:
    """Rows of the days' quarantine per reason (as written: the Delta table is read)."""
    scope.describe(spark, "quarantine reasons")
    rows = (
        read_table(spark, conf, BROKER_EVENTS_QUARANTINE)
        .where(scope.days_predicate)
        .where(F.col("record_kind") == RECORD_KIND_ROW)
        .groupBy("reason")
        .count()
        .collect()
    )
    return dict(sorted((r.reason, r["count"]) for r in rows))


@dataclass(frozen=True)
class Written:
    """What stage 5 wrote, as the Delta commits say."""

    rows_accepted: int
    rows_quarantined: int
    #: Per later day, bronze rows repeating a key these days hold, moved to that day's quarantine.
    moved_from_later_days: Mapping[str, int]
    quarantine_reasons: Mapping[str, int]
    #: Bronze's Delta version after the writes, None when they committed nothing to bronze.
    bronze_version: int | None


def write_tables(
    spark: SparkSession, conf: PipelineConf, plan: IngestPlan
) -> tuple[IngestPlan, Written]:
    """Stage 5: bronze, the moves from later days, the quarantine, then the reasons written.
    Returns the plan with the valid rows known (:func:`with_valid_rows_known`) and what was
    written."""
    bronze_path = table_path(conf, BRONZE_BROKER_EVENTS)
    version_before, _ = latest_commit(spark, bronze_path)
    rows_accepted = write_bronze(spark, conf, plan)
    plan = with_valid_rows_known(spark, plan, rows_accepted)
    moved = move_later_copies(spark, conf, plan)
    rows_quarantined = write_quarantine(spark, conf, plan)
    reasons = quarantine_reasons(spark, conf, plan.scope) if rows_quarantined else {}
    version_after, _ = latest_commit(spark, bronze_path)
    return plan, Written(
        rows_accepted,
        rows_quarantined,
        dict(sorted(moved.items())),
        reasons,
        version_after if version_after != version_before else None,
    )

"""Stages 3 and 4 of the ingest: one row per (run_id, seq) (DESIGN §5), within the days ingested
and against bronze's other days.

3. Duplicates within the days (:func:`resolve_duplicates`): the counting pass proves most runs free
   of them (:func:`runs_that_may_repeat_keys`); the others are searched exactly, by one
   aggregation over (run_id, seq) (jobs/transforms/validate.py decides which copy is kept).
4. Keys bronze holds on other days (:func:`resolve_held_keys`): the Delta log's per-file
   statistics rule out most runs (:func:`bronze_files_overlapping`); for the rest, a row whose
   key bronze holds on an earlier day is quarantined, and bronze's copy on a later day is moved
   to that day's quarantine (:func:`move_later_copies_to_quarantine`): the earliest day's copy of
   a key is the event, whichever day was ingested first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date
from itertools import pairwise

from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import conform, read_table, sql_string, table_path
from jobs.ingest_read import POSITION, FileRunStats, IngestScope, RawCounts, read_raw_events
from jobs.raw_files import ROW_INDEX, inspect_raw_files
from jobs.transforms.validate import (
    CONFLICTING_DUPLICATE_REASON,
    contract_ok,
    contract_violations,
    duplicate_groups,
    held_keys,
)
from schemas.tables import BROKER_EVENTS_QUARANTINE, BRONZE_BROKER_EVENTS, RECORD_KIND_ROW

#: Up to this many duplicate keys are broadcast to the rows; more are joined by a shuffle.
BROADCAST_DUPLICATE_GROUPS = 2_000_000


def runs_that_may_repeat_keys(
    stats: Iterable[FileRunStats], excluded_files: Collection[str]
) -> set[str]:
    """Runs whose valid rows are not proved to have distinct seqs.

    Proof, per run: within each file the valid seqs are consecutive in file order (so distinct),
    and the files' seq ranges do not overlap. The engine's sink writes exactly that; anything else
    (a file ingested twice, rows out of order) sends the run to the exact duplicate search. Stats
    of the lean pass are over every row (:attr:`FileRunStats.proved_rows`): proved distinct, the
    valid seqs among them are too.
    """
    by_run: dict[str, list[FileRunStats]] = {}
    for s in _with_seqs(stats, excluded_files):
        by_run.setdefault(s.run_id, []).append(s)
    suspicious = set()
    for run_id, groups in by_run.items():
        groups.sort(key=lambda s: s.min_seq)
        if any(s.min_offset != s.max_offset for s in groups) or any(
            later.min_seq <= earlier.max_seq for earlier, later in pairwise(groups)
        ):
            suspicious.add(run_id)
    return suspicious


def run_seq_ranges(
    stats: Iterable[FileRunStats], excluded_files: Collection[str]
) -> dict[str, tuple[int, int]]:
    """Per run, the [min, max] of the seqs of its valid rows (files of ``excluded_files`` aside),
    or of every row in stats of the lean pass: a range around the valid ones."""
    ranges: dict[str, tuple[int, int]] = {}
    for s in _with_seqs(stats, excluded_files):
        low, high = ranges.get(s.run_id, (s.min_seq, s.max_seq))
        ranges[s.run_id] = (min(low, s.min_seq), max(high, s.max_seq))
    return ranges


@dataclass(frozen=True)
class _RunSeqs:
    """A (file, run) group's stats with a run and seqs: the rows a proof or a range is over."""

    source_file: str
    run_id: str
    min_seq: int
    max_seq: int
    min_offset: int | None
    max_offset: int | None


def _with_seqs(stats: Iterable[FileRunStats], excluded_files: Collection[str]) -> list[_RunSeqs]:
    """The groups of ``stats`` that have proved rows with seqs, files of ``excluded_files``
    aside; a group whose rows have none (no seq, or none valid) has nothing to prove or range."""
    return [
        _RunSeqs(s.source_file, s.run_id, s.min_seq, s.max_seq, s.min_offset, s.max_offset)
        for s in stats
        if s.proved_rows
        and s.source_file not in excluded_files
        and s.run_id is not None
        and s.min_seq is not None
        and s.max_seq is not None
    ]


def _any(conditions: list[Column]) -> Column:
    """The OR of ``conditions`` as a balanced tree (thousands of runs stay a shallow expression)."""
    if len(conditions) == 1:
        return conditions[0]
    middle = len(conditions) // 2
    return _any(conditions[:middle]) | _any(conditions[middle:])


def keys_elsewhere_predicate(
    ranges: dict[str, tuple[int, int]], date_from: date, date_to: date
) -> Column:
    """Bronze rows outside [date_from, date_to] whose key may be one of the runs' seq ranges."""
    outside = (F.col("date") < F.lit(date_from)) | (F.col("date") > F.lit(date_to))
    runs = [
        (F.col("run_id") == F.lit(run_id)) & (F.col("seq") >= low) & (F.col("seq") <= high)
        for run_id, (low, high) in sorted(ranges.items())
    ]
    return outside & _any(runs)


def bronze_files_overlapping(
    spark: SparkSession,
    conf: PipelineConf,
    ranges: dict[str, tuple[int, int]],
    date_from: date,
    date_to: date,
) -> list[str]:
    """Bronze files of days outside [date_from, date_to] that may hold a key of the runs' seq
    ranges: the Delta log's partition values and per-file min/max statistics of run_id and seq
    (``delta.dataSkippingStatsColumns``) answer it, so no data file is read. Delta keeps a file
    without statistics (it may hold anything)."""
    if not ranges:
        return []
    predicate = keys_elsewhere_predicate(ranges, date_from, date_to)
    return sorted(read_table(spark, conf, BRONZE_BROKER_EVENTS).where(predicate).inputFiles())


@dataclass(frozen=True)
class DuplicateSummary:
    groups: int = 0  # keys claimed by more than one valid row
    dropped: int = 0  # identical copies beyond the one kept
    conflicting_rows: int = 0  # copies of other days, or of a day whose copies differ
    conflicting_runs: frozenset[str] = frozenset()

    @classmethod
    def of(cls, groups: DataFrame) -> DuplicateSummary:
        """From :func:`duplicate_groups`: per key, one copy kept (if any) of ``kept_copies``
        identical ones on its day; every copy of another day is conflicting."""
        kept_copies = F.coalesce(F.col("kept_copies"), F.lit(0))
        conflicting = F.col("copies") - kept_copies
        totals = groups.agg(
            F.count(F.lit(1)).alias("keys"),
            F.coalesce(F.sum(F.greatest(kept_copies - 1, F.lit(0))), F.lit(0)).alias("dropped"),
            F.coalesce(F.sum(conflicting), F.lit(0)).alias("conflicting_rows"),
            F.collect_set(F.when(conflicting > 0, F.col("run_id"))).alias("conflicting_runs"),
        ).first()
        return cls(
            groups=totals.keys,
            dropped=totals.dropped,
            conflicting_rows=totals.conflicting_rows,
            conflicting_runs=frozenset(totals.conflicting_runs),
        )


@dataclass(frozen=True, eq=False)
class DuplicatePlan:
    """Stage 3: the keys repeated within the days ingested (:func:`resolve_duplicates`)."""

    #: Runs the counting pass could not prove free of repeated keys: searched exactly.
    suspicious: frozenset[str] = frozenset()
    #: :func:`duplicate_groups` of those runs (persisted until :meth:`release`), None if none.
    groups: DataFrame | None = None
    summary: DuplicateSummary = DuplicateSummary()

    def release(self) -> None:
        if self.groups is not None:
            self.groups.unpersist()


def resolve_duplicates(spark: SparkSession, scope: IngestScope, counts: RawCounts) -> DuplicatePlan:
    """Search the keys repeated within the days, exactly (one aggregation), in the runs not proved
    free of them (:func:`runs_that_may_repeat_keys`) only."""
    suspicious = runs_that_may_repeat_keys(counts.stats, counts.damaged)
    if not suspicious:
        return DuplicatePlan()
    scope.describe(spark, f"duplicate (run_id, seq) in {len(suspicious)} runs")
    holding = counts.files_of_runs(suspicious)
    suspects = read_raw_events(
        spark, [f for f in counts.readable if f.relative_path in holding]
    ).where(F.col("run_id").isin(*sorted(suspicious)))
    groups = duplicate_groups(contract_violations(suspects), POSITION).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    return DuplicatePlan(frozenset(suspicious), groups, DuplicateSummary.of(groups))


@dataclass(frozen=True, eq=False)
class HeldKeysPlan:
    """Stage 4: keys of these days that bronze holds on other days (:func:`resolve_held_keys`)."""

    #: Bronze files of other days whose statistics could not rule out such a key.
    overlapping: tuple[str, ...] = ()
    #: :func:`held_keys` of those files (persisted until :meth:`release`): None unless some row
    #: of these days repeats a key of an earlier day.
    held: DataFrame | None = None
    keys: int = 0  # keys in ``held``
    runs: frozenset[str] = frozenset()  # the runs of those keys
    #: Valid rows of these days repeating a key bronze holds on an earlier day: quarantined.
    earlier_day_copies: int = 0
    #: Keys these days keep that later days' bronze repeats (run_id, seq, kept_date; persisted),
    #: whose bronze copies move to the quarantine (:func:`move_later_copies_to_quarantine`).
    later_copies: DataFrame | None = None

    def release(self) -> None:
        if self.held is not None:
            self.held.unpersist()


def resolve_held_keys(
    spark: SparkSession,
    conf: PipelineConf,
    scope: IngestScope,
    counts: RawCounts,
    duplicates: DuplicatePlan,
) -> HeldKeysPlan:
    """Keys bronze already holds on other days take precedence (DESIGN §5: one row per key). The
    Delta log's file statistics prove most runs clear; the rest are checked exactly."""
    scope.describe(spark, "seq ranges against bronze's other days")
    ranges = run_seq_ranges(counts.stats, counts.damaged)
    overlapping = bronze_files_overlapping(spark, conf, ranges, scope.date_from, scope.date_to)
    if not overlapping:
        return HeldKeysPlan()
    scope.describe(spark, "keys bronze holds on other days")
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS)
    held = held_keys(
        bronze.where(keys_elsewhere_predicate(ranges, scope.date_from, scope.date_to))
    ).persist(StorageLevel.MEMORY_AND_DISK)
    found = held.agg(F.count(F.lit(1)).alias("keys"), F.collect_set("run_id").alias("runs"))
    summary = found.first()
    runs = frozenset(summary.runs)
    earlier, later_copies = 0, None
    if runs:
        earlier, later_copies = _match_held_keys(spark, counts, duplicates, held, runs)
    if not earlier:
        held.unpersist()
    return HeldKeysPlan(
        tuple(overlapping),
        held if earlier else None,
        summary.keys,
        runs,
        earlier,
        later_copies,
    )


def _match_held_keys(
    spark: SparkSession,
    counts: RawCounts,
    duplicates: DuplicatePlan,
    held: DataFrame,
    runs: frozenset[str],
) -> tuple[int, DataFrame | None]:
    """(valid rows of these days whose key bronze holds on an earlier day, the keys they keep
    that bronze repeats on later days, persisted, or None)."""
    holding = counts.files_of_runs(runs)
    candidates = contract_violations(
        read_raw_events(spark, [f for f in counts.readable if f.relative_path in holding]).where(
            F.col("run_id").isin(*sorted(runs))
        )
    ).where(F.col("reason").isNull())
    if duplicates.groups is not None:  # of a key repeated within these days, the copy kept only
        kept = duplicates.groups.select("run_id", "seq", "kept_copy", F.lit(True).alias("_grouped"))
        candidates = candidates.join(kept, ["run_id", "seq"], "left").where(
            F.col("_grouped").isNull()
            | (F.struct(F.col("source_file"), F.col(POSITION)) == F.col("kept_copy"))
        )
    matched = (
        candidates.select("run_id", "seq", "date")
        .join(held.select("run_id", "seq", "held_date"), ["run_id", "seq"])
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    found = matched.agg(
        F.count(F.when(F.col("held_date") < F.col("date"), 1)).alias("earlier"),
        F.count(F.when(F.col("held_date") > F.col("date"), 1)).alias("later"),
    ).first()
    later_copies = None
    if found.later:
        later_copies = (
            matched.where(F.col("held_date") > F.col("date"))
            .select("run_id", "seq", F.col("date").alias("kept_date"))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        later_copies.count()
    matched.unpersist()
    return found.earlier, later_copies


def move_later_copies_to_quarantine(
    spark: SparkSession, conf: PipelineConf, later_copies: DataFrame, raw_root: str
) -> dict[str, int]:
    """Move the bronze rows of days after ``kept_date`` repeating a key (``later_copies``: run_id,
    seq, kept_date) into the quarantine of their own day, as ``conflicting_duplicate``: the copy
    on the earliest day is the event (jobs/transforms/validate.py), so the outcome does not
    depend on which day was ingested first. Returns the rows moved per day.

    Two Delta MERGEs, pruned to the days and runs concerned: insert into the quarantine (a row
    already there is not inserted again, so a rerun after a failure between the two adds
    nothing), then delete from bronze. Bronze does not keep a row's position in its raw file:
    ``source_row_index`` is read from the file again (the first valid row with the key: later
    identical copies of it were quarantined as ``duplicate``), null if the file is gone.
    """
    runs = sorted({r.run_id for r in later_copies.select("run_id").distinct().collect()})
    earliest_kept = later_copies.agg(F.min("kept_date")).first()[0]
    copies = (
        read_table(spark, conf, BRONZE_BROKER_EVENTS)
        # Partition pruning and the run_id statistics keep the scan to the runs' later days.
        .where((F.col("date") > F.lit(earliest_kept)) & F.col("run_id").isin(*runs))
        .alias("b")
        .join(
            later_copies.alias("k"),
            (F.col("b.run_id") == F.col("k.run_id"))
            & (F.col("b.seq") == F.col("k.seq"))
            & (F.col("b.date") > F.col("k.kept_date")),
        )
        .select("b.*")
    )
    per_day = {r.date.isoformat(): r["count"] for r in copies.groupBy("date").count().collect()}
    if not per_day:
        return {}
    days = [date.fromisoformat(d) for d in sorted(per_day)]
    copies = _with_raw_positions(spark, copies, raw_root, days, runs)
    # Literal partition and run filters let Delta prune the files each MERGE reads.
    pruning = (
        f"t.date IN ({', '.join(f'DATE {sql_string(d)}' for d in sorted(per_day))}) "
        f"AND t.run_id IN ({', '.join(sql_string(r) for r in runs)})"
    )
    _merge_moves(spark, conf, copies, later_copies, pruning)
    return per_day


def _with_raw_positions(
    spark: SparkSession, copies: DataFrame, raw_root: str, days: list[date], runs: list[str]
) -> DataFrame:
    """``copies`` (bronze rows of ``days``) with ``source_row_index``: their position in their raw
    file, read again, null where the file is gone or now quarantined whole."""
    sources = {r.source_file for r in copies.select("source_file").distinct().collect()}
    raw_files = [
        f for f in inspect_raw_files(raw_root, days) if f.relative_path in sources and not f.problem
    ]
    if not raw_files:
        return copies.withColumn(ROW_INDEX, F.lit(None).cast("long"))
    positions = (
        read_raw_events(spark, raw_files)
        .where(contract_ok() & F.col("run_id").isin(*runs))
        .groupBy("source_file", "run_id", "seq")
        .agg(F.min(POSITION).alias(ROW_INDEX))
    )
    return copies.join(positions, ["source_file", "run_id", "seq"], "left")


def _merge_moves(
    spark: SparkSession,
    conf: PipelineConf,
    copies: DataFrame,
    later_copies: DataFrame,
    pruning: str,
) -> None:
    """Insert ``copies`` into the quarantine as ``conflicting_duplicate`` (unless there), then
    delete them from bronze; ``pruning`` limits both MERGEs to the days and runs concerned."""
    rows = conform(
        copies.withColumns(
            {
                "record_kind": F.lit(RECORD_KIND_ROW),
                "reason": F.lit(CONFLICTING_DUPLICATE_REASON),
                "file_rows": F.lit(None).cast("long"),
            }
        ),
        BROKER_EVENTS_QUARANTINE,
    )
    quarantine_path = table_path(conf, BROKER_EVENTS_QUARANTINE)
    (
        DeltaTable.forPath(spark, quarantine_path)
        .alias("t")
        .merge(
            rows.alias("s"),
            f"{pruning} AND t.date = s.date AND t.run_id = s.run_id AND t.seq = s.seq "
            f"AND t.record_kind = '{RECORD_KIND_ROW}' AND t.reason = s.reason "
            "AND t.source_file = s.source_file",
        )
        .whenNotMatchedInsertAll()
        .execute()
    )
    (
        DeltaTable.forPath(spark, table_path(conf, BRONZE_BROKER_EVENTS))
        .alias("t")
        .merge(
            later_copies.alias("k"),
            f"{pruning} AND t.run_id = k.run_id AND t.seq = k.seq AND t.date > k.kept_date",
        )
        .whenMatchedDelete()
        .execute()
    )

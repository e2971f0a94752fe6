"""The ingest's reads of raw files into Spark, and what one run covers (:class:`IngestScope`).

- :func:`read_raw_events`: the rows of raw files, with their day, file and position in the file
  (:func:`read_raw_rows`: the file's name as read, for passes that group per file);
- :func:`count_raw_rows` (the second half of stage 1, inspecting the raw files): one counting pass
  per (file, run), which tells the files Spark could read only in part -> :class:`RawCounts`;
  first a lean one (keys only), then, when it is needed, the pass that checks the contract and
  decodes every column (see :func:`file_run_stats`);
- :func:`read_rows_of_files_quarantined_whole`: the rows of files quarantined whole for their
  schema or name, read by pyarrow within the run's row budget -> :class:`WholeFileRows`;
- :func:`recovered_row_records`: the rows of row groups pyarrow reads of a file Spark read only
  in part, after the damaged one;
- :func:`file_records`: the quarantine records of whole files.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import date
from functools import reduce
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StructField, StructType

from jobs.config import PipelineConf
from jobs.delta_io import conform, days_predicate, rows_frame
from jobs.pipeline_state import days_between
from jobs.raw_files import (
    ROW_INDEX,
    PartialRead,
    RawFile,
    RawListing,
    RowGroup,
    contract_columns_kept,
    error_text,
    partial_read,
    raw_filesystem,
    row_records,
    rows_are_readable,
)
from jobs.transforms.validate import contract_ok
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import BROKER_EVENTS_QUARANTINE, RECORD_KIND_FILE, RECORD_KIND_ROW

log = logging.getLogger("flowctl.ingest")


@dataclass(frozen=True)
class IngestScope:
    """What one run of the ingest covers: the days [date_from, date_to] under ``raw_root``."""

    date_from: date
    date_to: date
    raw_root: str
    allow_empty_days: bool = False

    @property
    def label(self) -> str:
        return f"{self.date_from.isoformat()}_{self.date_to.isoformat()}"

    @property
    def days(self) -> list[date]:
        return days_between(self.date_from, self.date_to)

    @property
    def days_predicate(self) -> str:
        """The days as a replaceWhere predicate on ``date``."""
        return days_predicate("date", self.date_from, self.date_to)

    def describe(self, spark: SparkSession, what: str | None) -> None:
        """Name the Spark jobs that follow in the Spark UI (None: stop naming them)."""
        text = None if what is None else f"ingest {self.label}: {what}"
        spark.sparkContext.setJobDescription(text)  # type: ignore[arg-type]


#: Parquet's index of a row within its file: with source_file, the identity of a raw row.
POSITION = "_row_index"

#: Hadoop's glob characters (GlobPattern): a backslash before one makes it literal.
GLOB_CHARACTERS = re.compile(r"([\\{}\[\]*?])")


def literal_path(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped, so that Spark reads that file and no other.

    Spark expands every path it is given to read as a glob: a raw root such as ``/data/x[1]/raw``
    would match nothing (``[1]`` is a class matching "1"), and ``/data/x?/raw`` other folders as
    well. Escaped, the glob matches the path itself only. (Names of raw files with such
    characters are quarantined before, as ``unaddressable_file_name``; ``basePath`` is not a
    glob and takes the root as it is.)
    """
    return GLOB_CHARACTERS.sub(r"\\\1", path)


#: A raw row's file name as Hadoop reports it (URI-encoded): :func:`source_file_of` makes it the
#: row's ``source_file``.
ENCODED_FILE_NAME = "_encoded_file_name"


def source_file_of(day: Column, encoded_name: Column) -> Column:
    """A raw file's path relative to the raw root, ``date=YYYY-MM-DD/name``, from its ``date=``
    day and its name as Hadoop reports it, URI-encoded ('+' is literal in a URI): the rare names
    that need it are decoded, the common case stays a plain string."""
    name = F.when(
        encoded_name.contains("%"), F.url_decode(F.regexp_replace(encoded_name, r"\+", "%2B"))
    ).otherwise(encoded_name)
    return F.concat(F.lit("date="), day.cast("string"), F.lit("/"), name)


def read_raw_rows(
    spark: SparkSession, files: list[RawFile], *, skip_damaged: bool = True
) -> DataFrame:
    """The rows of the readable files, with ``date`` (the raw ``date=`` folder), the file's name
    as Hadoop reports it (:data:`ENCODED_FILE_NAME`; :func:`source_file_of` makes the
    ``source_file``) and the row's index within its file (``_row_index``; pruned from the scan
    when unused).

    ``skip_damaged``: a damaged page ends the read of its file, silently (Spark's
    ``ignoreCorruptFiles``: the counting passes tell such files by their missing rows); else it
    fails the query, as the bronze write wants: no rows of a damaged file may reach bronze.

    One scan over all the days' files, ``date`` being their partition value (a constant per file,
    filled in by the reader), so that each Spark job over the rows compiles and runs one code path
    rather than one per day.
    """
    raw_schema = BROKER_EVENTS.to_spark()
    if not files:
        return rows_frame(spark, BROKER_EVENTS).withColumns(
            {
                ENCODED_FILE_NAME: F.lit(None).cast("string"),
                POSITION: F.lit(None).cast("long"),
                "date": F.lit(None).cast("date"),
            }
        )
    # Every path ends with its relative_path (date=YYYY-MM-DD/name): what precedes is the root.
    roots = {f.path[: len(f.path) - len(f.relative_path)] for f in files}
    if len(roots) != 1:
        raise ValueError(f"raw files under more than one root: {sorted(roots)}")
    (root,) = roots
    return (
        spark.read.schema(StructType([*raw_schema.fields, StructField("date", DateType(), False)]))
        .option("ignoreCorruptFiles", str(skip_damaged).lower())
        .option("basePath", root.rstrip("/") or "/")
        .parquet(*(literal_path(f.path) for f in files))
        .select(
            *raw_schema.names,
            F.col("_metadata.file_name").alias(ENCODED_FILE_NAME),
            F.col("_metadata.row_index").alias(POSITION),
            "date",
        )
    )


def read_raw_events(
    spark: SparkSession, files: list[RawFile], *, skip_damaged: bool = True
) -> DataFrame:
    """The rows of the readable files (:func:`read_raw_rows`) with their ``source_file``."""
    rows = read_raw_rows(spark, files, skip_damaged=skip_damaged)
    return rows.select(
        *BROKER_EVENTS.names,
        source_file_of(F.col("date"), F.col(ENCODED_FILE_NAME)).alias("source_file"),
        POSITION,
        "date",
    )


@dataclass(frozen=True)
class FileRunStats:
    """What the counting pass learns about the rows of one run in one raw file."""

    source_file: str
    run_id: str | None
    rows: int
    #: Rows that keep the contract (partially read files aside); None when the pass did not check
    #: it (the lean pass, :func:`file_run_stats`): then the seqs and offsets below are over every
    #: row with a seq of 0 or more (no other can be valid), among the :attr:`proved_rows`.
    valid_rows: int | None
    min_seq: int | None  # over the proved rows
    max_seq: int | None
    # min and max of seq - row index over the proved rows: equal when their seqs are consecutive
    # in file order, which proves them distinct.
    min_offset: int | None
    max_offset: int | None
    #: The largest row index: with ``rows``, tells whether they are the file's first rows.
    max_row_index: int | None = None

    @property
    def proved_rows(self) -> int:
        """The rows the seqs and offsets are over: the valid ones, or every one when the contract
        was not checked. A proof over every row holds for the valid ones among them."""
        return self.rows if self.valid_rows is None else self.valid_rows


def file_run_stats(raw: DataFrame, *, check_contract: bool = True) -> list[FileRunStats]:
    """One pass over the raw rows (:func:`read_raw_rows`) aggregated per (file, run): a few rows
    for the driver, no shuffle of the events. Grouped by the file's day and name as read, its
    ``source_file`` made of the groups (not built for every row: that took half the grouping's
    time).

    ``check_contract``: every column decoded (so a damaged page shows as missing rows) and the
    contract's rules evaluated, for ``valid_rows`` and seqs over the valid rows. Without it (the
    lean pass) only the keys are read, ``valid_rows`` is None and the seqs are over every row:
    on 10 million events 1.4 s against 6.6-8.3 s warm, and the bronze write, which decodes every
    column and fails on a damaged page, is then the check (jobs/ingest.py)."""
    seq = F.col("seq")
    # Null past the long's range (a seq of -2^63, an "unset" some writers use): under ANSI the
    # subtraction failed the whole ingest (an audit); such a row is no valid one anyway.
    offset = F.try_subtract(seq, F.col(POSITION))
    # The lean pass checks no contract, but a row without a seq, or a negative one, can never be
    # valid: leaving them in gave a run of such rows no seq range at all, and the proofs below
    # failed on it (an audit: a file of null seqs stopped the ingest of the day).
    ok = contract_ok() if check_contract else seq.isNotNull() & (seq >= 0)
    checked = (
        # Always null, but it keeps every column in the scan, so every column is decoded and a
        # damaged page in any of them shows; nothing is hashed (the row index is never negative,
        # which Spark cannot know). It must stay in the collected result: Spark prunes an
        # aggregate nothing reads, and with it the scan of the columns only it reads.
        [F.max(F.when(F.col(POSITION) < 0, F.xxhash64(*BROKER_EVENTS.names))).alias("_decoded")]
        if check_contract
        else []
    )
    rows = (
        raw.groupBy("date", ENCODED_FILE_NAME, "run_id")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            (F.count(F.when(ok, 1)) if check_contract else F.lit(None).cast("long")).alias(
                "valid_rows"
            ),
            F.min(F.when(ok, seq)).alias("min_seq"),
            F.max(F.when(ok, seq)).alias("max_seq"),
            F.min(F.when(ok, offset)).alias("min_offset"),
            F.max(F.when(ok, offset)).alias("max_offset"),
            F.max(POSITION).alias("max_row_index"),
            *checked,
        )
        .select(
            source_file_of(F.col("date"), F.col(ENCODED_FILE_NAME)).alias("source_file"),
            *(f.name for f in fields(FileRunStats) if f.name != "source_file"),
            *(["_decoded"] if check_contract else []),
        )
        .collect()
    )
    return [
        FileRunStats(**{k: v for k, v in row.asDict().items() if k != "_decoded"}) for row in rows
    ]


def rows_per_file(stats: list[FileRunStats]) -> dict[str, int]:
    """The rows Spark read of each file (the sum over its runs)."""
    rows: dict[str, int] = {}
    for s in stats:
        rows[s.source_file] = rows.get(s.source_file, 0) + s.rows
    return rows


def read_from_first_row(stats: list[FileRunStats], name: str) -> bool:
    """Whether the rows Spark read of the file ``name`` are its first ones, [0, rows): their row
    indices are distinct, so they are iff their largest is rows - 1 (or none was read)."""
    of_file = [s for s in stats if s.source_file == name]
    last = max((s.max_row_index for s in of_file if s.max_row_index is not None), default=-1)
    return sum(s.rows for s in of_file) == last + 1


def partially_read_files(files: list[RawFile], rows_read: Mapping[str, int]) -> list[str]:
    """The files (relative paths, sorted) of which Spark read fewer rows than their footers
    declare: ``ignoreCorruptFiles`` skipped a damaged part."""
    return sorted(
        f.relative_path for f in files if rows_read.get(f.relative_path, 0) < (f.footer_rows or 0)
    )


@dataclass(frozen=True)
class RawCounts:
    """What the counting pass learns of the files whose footers passed (:func:`count_raw_rows`)."""

    stats: tuple[FileRunStats, ...]
    rows_per_file: Mapping[str, int]
    #: Files read only in part (relative path, sorted) -> the detail of their quarantine record.
    partial_details: Mapping[str, dict[str, Any]]
    #: The files read whole: the rows that can be accepted come from these only.
    readable: tuple[RawFile, ...]
    #: Files read only in part -> what pyarrow reads of them one row group at a time.
    partial_reads: Mapping[str, PartialRead] = field(default_factory=dict)

    @property
    def partially_read(self) -> list[str]:
        return list(self.partial_details)

    @property
    def damaged(self) -> frozenset[str]:
        return frozenset(self.partial_details)

    @property
    def rows_read(self) -> int:
        return sum(self.rows_per_file.values())

    @property
    def contract_checked(self) -> bool:
        """Whether the pass checked the contract: else (the lean pass) which rows keep it is not
        known until the bronze write (:meth:`every_row_valid`, jobs/ingest_write.py)."""
        return all(s.valid_rows is not None for s in self.stats)

    @property
    def valid_rows(self) -> int:
        """Rows that keep the contract in the files read whole."""
        if not self.contract_checked:
            raise ValueError("the lean counting pass did not check the contract: no valid rows")
        return sum(s.valid_rows or 0 for s in self.stats if s.source_file not in self.damaged)

    def every_row_valid(self) -> RawCounts:
        """The lean pass's counts once every row is known to keep the contract: its seqs over
        every row are then over the valid ones."""
        return replace(self, stats=tuple(replace(s, valid_rows=s.rows) for s in self.stats))

    def files_of_runs(self, runs: set[str] | frozenset[str]) -> set[str]:
        """The files holding rows of ``runs``."""
        return {s.source_file for s in self.stats if s.run_id in runs}


def count_raw_rows(
    spark: SparkSession, scope: IngestScope, listing: RawListing, *, check_contract: bool = True
) -> RawCounts:
    """One counting pass over the rows of the files whose footers passed (per file and run,
    aggregated map-side); a file yielding fewer rows than its footer declares is partially read:
    why, and which of its row groups pyarrow reads on its own, is found out
    (:func:`partial_read`) and logged.

    ``check_contract`` False: the lean pass (:func:`file_run_stats`), unless it finds a file read
    in part: then the pass that decodes every column runs, since it reads as far as the
    quarantine's reads of such files do, and its counts are returned."""
    good = listing.good_files
    scope.describe(spark, "count rows per file and run" + ("" if check_contract else ", keys only"))
    stats = (
        file_run_stats(read_raw_rows(spark, good), check_contract=check_contract) if good else []
    )
    per_file = rows_per_file(stats)
    if not check_contract and partially_read_files(good, per_file):
        return count_raw_rows(spark, scope, listing)
    by_path = {f.relative_path: f for f in good}
    # Spark reads a small file as one split and ends it at the first damaged page: its rows are
    # the file's first ones, and pyarrow may read the row groups after the damaged one. A large
    # file split in several parts may have lost a middle part instead: which row groups Spark
    # read is not known then, and its unread rows stay unreadable, as before (PartialRead).
    reads = {
        name: partial_read(
            scope.raw_root, by_path[name], per_file.get(name, 0), read_from_first_row(stats, name)
        )
        for name in partially_read_files(good, per_file)
    }
    details = {name: read.detail() for name, read in reads.items()}
    for name, detail in details.items():
        log.warning(
            "raw file %s could be read only in part (Spark read %d of the %d rows its footer "
            "declares); its rows are quarantined: %s",
            name,
            per_file.get(name, 0),
            detail["rows_declared"],
            detail["cause"],
        )
    readable = tuple(f for f in good if f.relative_path not in details)
    return RawCounts(tuple(stats), per_file, details, readable, reads)


#: Rows of a file quarantined whole that pyarrow reads, converts and hands to Spark at a time.
ROW_RECORDS_BATCH = 65_536


def _row_record_parts(
    spark: SparkSession, parquet: pq.ParquetFile, row_groups: tuple[RowGroup, ...] | None
) -> tuple[list[DataFrame], list[int]]:
    """The rows of ``parquet`` (of ``row_groups`` only, when given) as row records
    (:func:`row_records`: the contract columns the file holds, :func:`contract_columns_kept`, and
    each row's position in the file); and the rows read (of each of the ``row_groups``).

    pyarrow reads :data:`ROW_RECORDS_BATCH` rows at a time and each batch goes to Spark as its own
    DataFrame (held by the driver's JVM as Arrow until written), so Python never holds the file.
    """
    kept = contract_columns_kept(parquet.schema_arrow)
    spans = [(None, 0)] if row_groups is None else [([g.index], g.first_row) for g in row_groups]
    parts: list[DataFrame] = []
    rows: list[int] = []
    for groups, first in spans:
        read = 0
        batches = parquet.iter_batches(
            ROW_RECORDS_BATCH, row_groups=groups, columns=list(kept.values())
        )
        for batch in batches:
            parts.append(spark.createDataFrame(row_records(batch, kept, first + read)))
            read += batch.num_rows
        rows.append(read)
    return parts, rows


def _quarantine_rows(parts: list[DataFrame], file: RawFile, reason: str | None) -> DataFrame:
    """Row records (:func:`_row_record_parts`) of ``file`` as quarantine rows with ``reason``."""
    records = reduce(DataFrame.unionByName, parts).withColumns(
        {
            "date": F.lit(file.day),
            "source_file": F.lit(file.relative_path),
            "record_kind": F.lit(RECORD_KIND_ROW),
            "reason": F.lit(reason),
            "file_rows": F.lit(None).cast("long"),
        }
    )
    return conform(records, BROKER_EVENTS_QUARANTINE)


def quarantined_file_rows(
    spark: SparkSession, raw_dir: str, file: RawFile
) -> tuple[DataFrame | None, int, str | None]:
    """The rows of ``file``, quarantined whole for a problem that leaves them readable
    (:func:`rows_are_readable`), as quarantine records: record_kind='row', the file's problem as
    reason, ``source_row_index``, and the contract columns the file holds in a type that reads as
    the contract's (:func:`contract_columns_kept`). Returns (records, rows, None), records None
    for a file without rows; or (None, 0, error) when pyarrow cannot read the file whole: then no
    row of it is quarantined as a row (all or nothing, so that the file record alone accounts
    for its rows, as rows_in_files_quarantined). Spark itself cannot read these files
    (nanosecond timestamps, names it takes as globs): pyarrow does (:func:`_row_record_parts`).
    """
    filesystem, root, _ = raw_filesystem(raw_dir)
    path = f"{root}/{file.relative_path}"
    try:
        with filesystem.open_input_file(path) as handle:
            parts, (rows,) = _row_record_parts(spark, pq.ParquetFile(handle), None)
    except Exception as exc:  # a damaged page, a cast that overflows, the file gone meanwhile
        return None, 0, error_text(exc, path, file.relative_path)
    if rows != file.footer_rows:  # the file changed since its footer was read
        return None, 0, f"pyarrow read {rows} rows, the footer declares {file.footer_rows}"
    if not parts:
        return None, 0, None
    return _quarantine_rows(parts, file, file.problem), rows, None


def recovered_row_records(
    spark: SparkSession, raw_dir: str, file: RawFile, row_groups: tuple[RowGroup, ...]
) -> tuple[DataFrame | None, str | None]:
    """The rows of ``row_groups`` of ``file``, a file Spark read only in part, that pyarrow reads
    whole (:attr:`PartialRead.recoverable`), as quarantine records (``partially_read_file``, the
    row's position in the file, the contract columns): (records, None), records None when the
    row groups hold no row; or (None, error) when they no more read as in the counting pass."""
    filesystem, root, _ = raw_filesystem(raw_dir)
    path = f"{root}/{file.relative_path}"
    try:
        with filesystem.open_input_file(path) as handle:
            parts, rows = _row_record_parts(spark, pq.ParquetFile(handle), row_groups)
    except Exception as exc:  # the file changed or went since the counting pass
        return None, error_text(exc, path, file.relative_path)
    if rows != [g.rows for g in row_groups]:
        return None, f"pyarrow read {sum(rows)} rows, {sum(g.rows for g in row_groups)} before"
    return (_quarantine_rows(parts, file, "partially_read_file") if parts else None), None


@dataclass(frozen=True)
class WholeFileRows:
    """The rows of files quarantined whole for their schema or name, read by pyarrow into the
    quarantine (DESIGN §5: every rejected row with its reason)."""

    #: Files whose rows are quarantined as rows -> their rows.
    rows_per_file: Mapping[str, int] = field(default_factory=dict)
    records: tuple[DataFrame, ...] = ()
    #: Files whose rows could not be read -> the detail (JSON) of their file record.
    unread_details: Mapping[str, str] = field(default_factory=dict)
    #: ``ingest.max_rows_from_files_quarantined_whole``, of which the rows pyarrow recovers of
    #: files read in part take what these files leave (jobs/ingest_write.py); None: no limit.
    budget: int | None = None

    @property
    def rows_read(self) -> int:
        return sum(self.rows_per_file.values())

    @property
    def budget_left(self) -> int | None:
        """What these files' rows leave of :attr:`budget` (None: no limit)."""
        return None if self.budget is None else self.budget - self.rows_read


def over_budget(file: RawFile, budget: int, limit: int) -> str | None:
    """Why the rows of ``file`` are not read into the quarantine when ``budget`` rows are left of
    the run's ``limit`` (the driver would hold them all until the write), or None."""
    if (file.footer_rows or 0) <= budget:
        return None
    return (
        f"its {file.footer_rows} rows are past what is left of "
        f"ingest.max_rows_from_files_quarantined_whole ({budget} of {limit} rows per run): fix "
        "the file and rerun the day, or raise the limit"
    )


def read_rows_of_files_quarantined_whole(
    spark: SparkSession, conf: PipelineConf, scope: IngestScope, listing: RawListing
) -> WholeFileRows:
    """The rows of the files quarantined whole whose rows are readable (:func:`rows_are_readable`),
    up to ``ingest.max_rows_from_files_quarantined_whole`` per run; a file whose rows cannot be
    read (or are past the budget) is logged, and its file record says why."""
    rows_per_file: dict[str, int] = {}
    records: list[DataFrame] = []
    unread_details: dict[str, str] = {}
    limit = conf.max_rows_from_files_quarantined_whole
    budget = limit
    for f in listing.bad_files:
        if not rows_are_readable(f):
            continue
        error = over_budget(f, budget, limit)
        found, rows = None, 0
        if error is None:
            scope.describe(spark, f"rows of {f.relative_path}, quarantined whole")
            found, rows, error = quarantined_file_rows(spark, scope.raw_root, f)
        if error is not None:
            log.warning(
                "raw file %s is quarantined whole (%s) and its rows could not be read into the "
                "quarantine: %s",
                f.relative_path,
                f.problem,
                error,
            )
            detail = {"rows_declared": f.footer_rows, "rows_read": 0, "cause": error}
            unread_details[f.relative_path] = json.dumps(detail, ensure_ascii=False)
            continue
        rows_per_file[f.relative_path] = rows
        budget -= rows
        if found is not None:
            records.append(found)
    return WholeFileRows(rows_per_file, tuple(records), unread_details, limit)


def file_records(spark: SparkSession, files: list[RawFile]) -> DataFrame:
    """Quarantine records (record_kind='file') of ``files``: their problem as reason, the rows
    their footers declare, their detail; the event columns null."""
    rows = [
        {
            "date": f.day,
            "source_file": f.relative_path,
            "record_kind": RECORD_KIND_FILE,
            "reason": f.problem,
            "file_rows": f.footer_rows,
            "detail": f.detail,
        }
        for f in files
    ]
    schema = BROKER_EVENTS_QUARANTINE.to_spark()
    empty_events = {
        c: F.lit(None).cast(schema[c].dataType)
        for c in [*BROKER_EVENTS.names, ROW_INDEX]
        if c != "detail"
    }
    columns = ("date", "source_file", "record_kind", "reason", "file_rows", "detail")
    frame = spark.createDataFrame(rows, StructType([schema[c] for c in columns]))
    return frame.withColumns(empty_events)

"""ingest: raw Parquet event log -> bronze ``broker_events`` + ``broker_events_quarantine``.

Per run of the job over [from, to]:

1. List ``<raw>/date=D/*.parquet`` for each day and check each file's footer and schema with pyarrow
   (cheap: no data is read). A file that cannot be opened, whose schema breaks the contract, or
   whose name Spark cannot address (':' or glob characters), is quarantined whole: one quarantine
   record (record_kind='file') and none of its rows in bronze. Spark does not read it; pyarrow
   reads the rows of one whose footer it could open (a schema or name problem) into the
   quarantine, a row record each with the file's problem as reason (:func:`quarantined_file_rows`).
2. Spark reads the remaining files with ``ignoreCorruptFiles``, so a damaged page cannot crash the
   job; a file yielding fewer rows than its footer declares is "partially read" and every row read
   from it is quarantined. Its file record says why in ``detail`` (JSON): rows declared and read,
   and the cause (the error pyarrow meets reading it, or a stale ``.<name>.crc`` checksum sidecar,
   which Spark's local file system verifies). Paths are escaped for Hadoop's glob, so a raw root
   with glob characters is read as named.
3. Rows are classified (jobs/transforms/validate.py): accepted, or quarantined with reasons and
   their position in their file (``source_row_index``); an identical copy of an accepted
   (run_id, seq) is quarantined with the reason ``duplicate``. Of copies of a key on several
   days the earliest day's is kept (jobs/transforms/validate.py), bronze's other days included:
   a row whose key bronze holds on an earlier day is quarantined, and bronze's copy on a later
   day is moved to that day's quarantine (:func:`move_later_copies_to_quarantine`). Runs whose
   seq range the Delta log's per-file statistics of those days rule out (the engine's seqs grow
   across days) cost no read.
4. Bronze and quarantine are written with replaceWhere on the days, so a rerun replaces them, and
   Great Expectations validates the accepted rows; the result and counts go to <quality>/.

Accounting: rows_read = rows_accepted + rows_quarantined, always (DESIGN.md §5), the rows pyarrow
read from files quarantined whole included; rows a damaged file declared but that could not be
read are reported as rows_unreadable, rows of files quarantined whole that could not be read as
rows (pyarrow failed on them) as rows_in_files_quarantined, so that rows_declared (the footers'
total) = rows_read + rows_unreadable + rows_in_files_quarantined (files_without_footer: files
whose row count is unknown).
Exit status: 0 whatever the input (bad input is quarantined, not fatal); 1 when the Great
Expectations suite fails on accepted rows (a rule bug) or the accounting does not balance.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import zlib
from dataclasses import dataclass, replace
from datetime import date, timedelta
from functools import reduce
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StructField, StructType

from jobs import quality
from jobs.cli import date_range_parser, parse_date_range, start_job
from jobs.config import PipelineConf
from jobs.delta_io import (
    conform,
    days_predicate,
    ensure_table,
    files_matching,
    has_files_matching,
    read_table,
    replace_where,
    sql_string,
    table_path,
)
from jobs.transforms.validate import (
    ACCEPTED,
    QUARANTINED,
    classify_events,
    contract_ok,
    contract_violations,
    duplicate_groups,
    held_keys,
)
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import BROKER_EVENTS_QUARANTINE, BRONZE_BROKER_EVENTS

log = logging.getLogger("flowctl.ingest")


@dataclass(frozen=True)
class RawFile:
    day: date
    relative_path: str  # date=YYYY-MM-DD/part-....parquet: stable lineage, whatever the raw root
    path: str  # as the filesystem and Spark address it
    footer_rows: int | None
    problem: str | None  # why the file is quarantined whole, or None
    detail: str | None = None  # JSON: what else the quarantine record says (partially read files)


def days_between(date_from: date, date_to: date) -> list[date]:
    return [date_from + timedelta(days=i) for i in range((date_to - date_from).days + 1)]


class IngestRefused(RuntimeError):
    """The input cannot be what was meant (a raw folder that does not exist, or that has nothing
    readable for days bronze already holds): ingesting it would replace good rows with nothing."""


def _raw_filesystem(raw_dir: str) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, root path within it, raw_dir as given or made absolute)."""
    if "://" not in raw_dir:  # a local path, possibly relative (--raw)
        raw_dir = Path(raw_dir).resolve().as_posix()
    filesystem, root = pafs.FileSystem.from_uri(
        raw_dir if "://" in raw_dir else Path(raw_dir).as_uri()
    )
    return filesystem, root, raw_dir


def check_raw_root(raw_dir: str) -> None:
    """Refuse a raw folder that does not exist: most likely a mistyped --raw or paths.raw."""
    filesystem, root, shown = _raw_filesystem(raw_dir)
    if filesystem.get_file_info(root).type == pafs.FileType.NotFound:
        raise IngestRefused(f"raw folder {shown} does not exist (check --raw or paths.raw)")


def bronze_days(spark: SparkSession, conf: PipelineConf, days: list[date]) -> list[date]:
    """Those of ``days`` for which bronze holds data files (from the Delta log: no data read)."""
    predicate = days_predicate("date", days[0], days[-1])
    files = files_matching(spark, conf, BRONZE_BROKER_EVENTS, predicate)
    held = {day for day in days for f in files if f"/date={day.isoformat()}/" in f}
    return sorted(held)


def _refuse_dropping_held_files(
    spark: SparkSession,
    conf: PipelineConf,
    days: list[date],
    readable: list[RawFile],
    why_unusable: dict[str, str],
    raw_root: str,
) -> None:
    """Raise :class:`IngestRefused` when bronze holds rows of ``days`` read from raw files that
    are now missing or cannot be read whole (``why_unusable``: relative path -> why): the rerun
    would delete those rows (retention removed some of a day's files, a copy in progress, a file
    replaced under a stale checksum). Bronze's ``source_file`` column is read only for days it
    holds (the Delta log says which)."""
    held_days = bronze_days(spark, conf, days)
    if not held_days:
        return
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(
        days_predicate("date", held_days[0], held_days[-1])
    )
    held = {r.source_file for r in bronze.select("source_file").distinct().collect()}
    gone = sorted(held - {f.relative_path for f in readable})
    if gone:
        named = [f"{name} ({why_unusable.get(name, 'missing')})" for name in gone[:20]]
        shown = "; ".join(named) + (f"; and {len(gone) - 20} more" if len(gone) > 20 else "")
        raise IngestRefused(
            f"bronze holds rows of {', '.join(d.isoformat() for d in held_days)} read from "
            f"{len(gone)} raw files under {raw_root} that are missing or cannot be read whole: "
            f"{shown}. Ingesting would delete those rows: restore or repair the files (or wait "
            "for a copy to finish); to drop their rows on purpose, pass --allow-empty-days"
        )


def _refuse_emptying_held_days(
    spark: SparkSession, conf: PipelineConf, days: list[date], problem: str, raw_root: str
) -> None:
    """Raise :class:`IngestRefused` when bronze holds any of ``days``, which an ingest would
    replace with nothing; ``problem`` names them as ``{days}`` and the raw folder as ``{root}``."""
    held = bronze_days(spark, conf, days)
    if held:
        shown = ", ".join(d.isoformat() for d in held)
        raise IngestRefused(
            problem.format(root=raw_root, days=shown)
            + "; to empty the days on purpose, pass --allow-empty-days"
        )


def reads_as(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Whether Spark reads a Parquet column written as ``actual`` into the contract's
    ``expected`` type without losing anything: the type itself, or what common writers emit for
    it (polars' large strings, dictionary-encoded strings, int32 for int64, timestamps in s or ms,
    or in another time zone, which Parquet stores as the same UTC instant). Nanosecond timestamps
    (Spark cannot read them) and naive ones (not UTC by contract: DESIGN §3 "timestamp (us, UTC)")
    stay wrong."""
    if actual.equals(expected):
        return True
    if pa.types.is_dictionary(actual):
        return reads_as(actual.value_type, expected)
    if pa.types.is_string(expected):
        return pa.types.is_large_string(actual)
    if pa.types.is_int64(expected):
        return pa.types.is_int32(actual)
    if pa.types.is_timestamp(expected):
        return (
            pa.types.is_timestamp(actual) and actual.unit in ("s", "ms", "us") and bool(actual.tz)
        )
    return False


#: What to do about a timestamp Spark cannot read as the contract's (no ';': it ends a reason).
TIMESTAMP_HINT = (
    "write microseconds with time zone UTC (DESIGN §3), e.g. pandas ts.dt.tz_localize('UTC') and "
    "pyarrow.parquet.write_table(..., coerce_timestamps='us', allow_truncated_timestamps=True)"
)


def _wrong_type(name: str, actual: pa.DataType, physical_type: str | None = None) -> str:
    """``wrong_type:<column>:<type as written>``, with what to do when it is a timestamp: Spark 4
    cannot read TIMESTAMP(NANOS) as a timestamp at all (it fails, or reads a bigint with
    spark.sql.legacy.parquet.nanosAsLong); INT96 is a deprecated encoding without time zone; a
    timestamp without time zone is not UTC by contract."""
    if not pa.types.is_timestamp(actual):
        return f"wrong_type:{name}:{actual}"
    if physical_type == "INT96":
        why = "INT96 is a deprecated nanosecond encoding without time zone"
        return f"wrong_type:{name}:INT96 ({why}: {TIMESTAMP_HINT})"
    if actual.unit == "ns":
        why = "Spark cannot read nanosecond timestamps"
    else:
        why = "a timestamp without time zone is not UTC by contract"
    return f"wrong_type:{name}:{actual} ({why}: {TIMESTAMP_HINT})"


def _schema_problem(schema: pa.Schema, physical_types: dict[str, str] | None = None) -> str | None:
    """Why a file's schema breaks the contract, or None. Extra columns are allowed (DESIGN §3),
    and types Spark reads losslessly as the contract's (:func:`reads_as`). ``physical_types``:
    the Parquet physical type of each column (tells INT96 timestamps, which Arrow shows as
    nanoseconds, from others)."""
    expected = BROKER_EVENTS.to_pyarrow()
    problems = []
    names = [name.lower() for name in schema.names]
    for field in expected:
        index = schema.get_field_index(field.name)
        # Spark matches column names regardless of case and refuses a file holding one twice.
        if names.count(field.name.lower()) > 1:
            problems.append(f"duplicate_column:{field.name}")
        elif index < 0:
            if not field.nullable:
                problems.append(f"missing_column:{field.name}")
        elif not reads_as(schema.field(index).type, field.type):
            physical = (physical_types or {}).get(field.name)
            problems.append(_wrong_type(field.name, schema.field(index).type, physical))
    return ";".join(problems) or None


#: Characters Spark cannot take literally in a file name: Hadoop reads ':' as a URI scheme and
#: the others as a glob (which may match nothing, or other files).
UNADDRESSABLE_CHARACTERS = ":{}[]*?\\"


def _name_problem(name: str) -> str | None:
    """Why Spark cannot be given the file ``name`` to read, or None."""
    found = "".join(sorted({c for c in name if c in UNADDRESSABLE_CHARACTERS}))
    if not found:
        return None
    return f"unaddressable_file_name:Spark cannot read a name with {found!r} (rename the file)"


#: Longest reason recorded for an unreadable file (the full error goes to the log).
MAX_REASON_CHARS = 200


def _error_text(exc: Exception, path: str, relative: str) -> str:
    """``<error type>: <message>``, one line, the file named by its relative path, cut to
    :data:`MAX_REASON_CHARS`."""
    message = " ".join(str(exc).replace(path, relative).split())
    text = f"{type(exc).__name__}: {message}".rstrip(": ")
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def _unreadable_reason(exc: Exception, path: str, relative: str) -> str:
    """``unreadable_file:<error type>: <message>``, one line, the file named by its relative path,
    cut to :data:`MAX_REASON_CHARS`: tells a zero-byte file from one that is not Parquet."""
    reason = "unreadable_file:" + _error_text(exc, path, relative)
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."


def _stale_checksum_sidecar(filesystem: pafs.FileSystem, path: str) -> str | None:
    """The name of the Hadoop checksum sidecar (``.<name>.crc``) beside the local file ``path``
    when it does not match the file's bytes, else None (no sidecar, or one that matches).

    Spark's local file system verifies such a sidecar on every read and fails with a
    ChecksumException where it differs, so a sidecar left over from an earlier version of the file
    makes an intact file look damaged. Hadoop's format: ``crc\\0``, the bytes per checksum (int32,
    big-endian), then the CRC-32 of each chunk (uint32, big-endian); a sidecar without that header
    is ignored by Hadoop, and so here.
    """
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return None  # only Hadoop's local (checksummed) file system reads sidecars
    folder, _, name = path.rpartition("/")
    sidecar = f"{folder}/.{name}.crc"
    if filesystem.get_file_info(sidecar).type != pafs.FileType.File:
        return None
    with filesystem.open_input_file(sidecar) as handle:
        sums = handle.read()
    chunk = int.from_bytes(sums[4:8], "big", signed=True) if len(sums) >= 8 else 0
    if sums[:4] != b"crc\0" or chunk <= 0:
        return None
    with filesystem.open_input_file(path) as handle:
        for offset in range(8, 8 + 4 * (handle.size() // chunk + 1), 4):
            data = handle.read(chunk)
            if not data:
                break
            expected = sums[offset : offset + 4]
            if len(expected) < 4 or int.from_bytes(expected, "big") != zlib.crc32(data):
                return f".{name}.crc"
    return None


def partial_read_detail(raw_dir: str, file: RawFile, rows_read: int) -> dict[str, Any]:
    """The ``detail`` (as JSON) of the quarantine record of a file Spark could read only in part:
    ``rows_declared`` (its footer), ``rows_read`` and ``cause``, one line for the user: a stale
    Hadoop checksum sidecar beside the file (:func:`_stale_checksum_sidecar`), or the error
    pyarrow meets reading the file whole. Only damaged files are re-read, so the cost is theirs."""
    filesystem, root, _ = _raw_filesystem(raw_dir)
    path = f"{root}/{file.relative_path}"
    read_whole, error = 0, None
    try:
        with filesystem.open_input_file(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches():  # a batch at a time in memory
                read_whole += batch.num_rows
    except Exception as exc:  # the damage itself: a bad page, a truncated column chunk, ...
        error = _error_text(exc, path, file.relative_path)
    try:
        sidecar = _stale_checksum_sidecar(filesystem, path)
    except OSError:
        sidecar = None
    if sidecar and error is None:
        cause = (
            f"checksum sidecar {sidecar} does not match the file, which pyarrow reads whole "
            f"({read_whole} rows): delete the sidecar if the file is intact, and rerun the day"
        )
    elif sidecar:
        cause = f"{error}; its checksum sidecar {sidecar} does not match it either"
    elif error:
        cause = error
    else:
        cause = (
            f"pyarrow reads the file whole ({read_whole} rows) but Spark could not: see the "
            "executor log for the error"
        )
    return {"rows_declared": file.footer_rows, "rows_read": rows_read, "cause": cause}


def inspect_raw_files(raw_dir: str, days: list[date]) -> list[RawFile]:
    """List the raw files of the days and check their footers, without reading any data."""
    filesystem, root, raw_dir = _raw_filesystem(raw_dir)
    files = []
    for day in days:
        selector = pafs.FileSelector(f"{root}/date={day.isoformat()}", allow_not_found=True)
        for info in sorted(filesystem.get_file_info(selector), key=lambda i: i.path):
            name = info.base_name
            if info.type != pafs.FileType.File or name.startswith(("_", ".")):
                continue
            if not name.endswith(".parquet"):
                continue
            relative = f"date={day.isoformat()}/{name}"
            address = info.path if "://" not in raw_dir else f"{raw_dir}/{relative}"
            try:
                with filesystem.open_input_file(info.path) as handle:
                    parquet = pq.ParquetFile(handle)
                    rows = parquet.metadata.num_rows
                    physical = {c.path: c.physical_type for c in parquet.schema}
                    # Both, so that renaming the file does not merely reveal the next problem.
                    problems = (
                        _name_problem(name),
                        _schema_problem(parquet.schema_arrow, physical),
                    )
                    problem = ";".join(p for p in problems if p) or None
            except Exception as exc:  # any unreadable footer: truncated, not Parquet, ...
                rows, problem = None, _unreadable_reason(exc, info.path, relative)
                log.warning("unreadable raw file %s: %s", relative, exc)
            files.append(RawFile(day, relative, address, rows, problem))
    return files


#: Files writers leave next to their data (commit markers, checksums, summaries): never data.
KNOWN_MARKERS = re.compile(
    r"^(_SUCCESS|_committed_.*|_started_.*|_metadata|_common_metadata|\..*\.crc|\.DS_Store)$"
)
DATE_FOLDER = re.compile(r"^date=\d{4}-\d{2}-\d{2}$")


def _is_date_folder(name: str) -> bool:
    if not DATE_FOLDER.match(name):
        return False
    try:
        date.fromisoformat(name.removeprefix("date="))
    except ValueError:
        return False
    return True


def skipped_raw_entries(raw_dir: str, days: list[date]) -> list[str]:
    """What the ingest does not read although it may hold data, relative to the raw root: files
    under the days' folders other than ``date=D/*.parquet`` (nested, other suffixes, hidden
    names), and ``date=`` folders at the root whose date is malformed. Writers' markers
    (:data:`KNOWN_MARKERS`) are left out. Listing only: nothing is opened."""
    filesystem, root, _ = _raw_filesystem(raw_dir)
    skipped = []
    for info in filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        name = info.base_name
        folder = info.type == pafs.FileType.Directory and name.startswith("date=")
        if folder and not _is_date_folder(name):
            skipped.append(name)
    for day in days:
        folder = f"{root}/date={day.isoformat()}"
        selector = pafs.FileSelector(folder, allow_not_found=True, recursive=True)
        for info in filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File or KNOWN_MARKERS.match(info.base_name):
                continue
            inner = info.path[len(folder) + 1 :]
            direct = "/" not in inner
            if direct and inner.endswith(".parquet") and not inner.startswith(("_", ".")):
                continue  # read by inspect_raw_files
            skipped.append(f"date={day.isoformat()}/{inner}")
    return sorted(skipped)


#: Parquet's index of a row within its file: with source_file, the identity of a raw row.
POSITION = "_row_index"
#: The quarantine's column for it: where to find a rejected row in its file.
ROW_INDEX = "source_row_index"

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


def read_raw_events(spark: SparkSession, files: list[RawFile]) -> DataFrame:
    """The rows of the readable files, with ``date`` (the raw ``date=`` folder), ``source_file``
    and the row's index within its file (``_row_index``; pruned from the scan when unused).

    One scan over all the days' files, ``date`` being their partition value (a constant per file,
    filled in by the reader), so that each Spark job over the rows compiles and runs one code path
    rather than one per day.
    """
    raw_schema = BROKER_EVENTS.to_spark()
    if not files:
        return spark.createDataFrame([], raw_schema).withColumns(
            {
                "source_file": F.lit(None).cast("string"),
                POSITION: F.lit(None).cast("long"),
                "date": F.lit(None).cast("date"),
            }
        )
    # Hadoop reports file names URI-encoded ('+' is literal in a URI): decode the rare ones that
    # need it, leaving the common case a plain string.
    encoded = F.col("_metadata.file_name")
    name = F.when(
        encoded.contains("%"), F.url_decode(F.regexp_replace(encoded, r"\+", "%2B"))
    ).otherwise(encoded)
    # Every path ends with its relative_path (date=YYYY-MM-DD/name): what precedes is the root.
    roots = {f.path[: len(f.path) - len(f.relative_path)] for f in files}
    if len(roots) != 1:
        raise ValueError(f"raw files under more than one root: {sorted(roots)}")
    (root,) = roots
    return (
        spark.read.schema(StructType([*raw_schema.fields, StructField("date", DateType(), False)]))
        .option("ignoreCorruptFiles", "true")
        .option("basePath", root.rstrip("/") or "/")
        .parquet(*(literal_path(f.path) for f in files))
        .select(
            *raw_schema.names,
            F.concat(F.lit("date="), F.col("date").cast("string"), F.lit("/"), name).alias(
                "source_file"
            ),
            F.col("_metadata.row_index").alias(POSITION),
            "date",
        )
    )


@dataclass(frozen=True)
class FileRunStats:
    """What the counting pass learns about the rows of one run in one raw file."""

    source_file: str
    run_id: str | None
    rows: int
    valid_rows: int  # rows that keep the contract (partially read files aside)
    min_seq: int | None  # over the valid rows
    max_seq: int | None
    # min and max of seq - row index over the valid rows: equal when their seqs are consecutive in
    # file order, which proves them distinct.
    min_offset: int | None
    max_offset: int | None


def file_run_stats(raw: DataFrame) -> list[FileRunStats]:
    """One pass over the raw rows, every column decoded (so a damaged page shows as missing rows),
    aggregated per (file, run): a few rows for the driver, no shuffle of the events."""
    ok, seq = contract_ok(), F.col("seq")
    offset = seq - F.col(POSITION)
    rows = (
        raw.groupBy("source_file", "run_id")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(ok, 1)).alias("valid_rows"),
            F.min(F.when(ok, seq)).alias("min_seq"),
            F.max(F.when(ok, seq)).alias("max_seq"),
            F.min(F.when(ok, offset)).alias("min_offset"),
            F.max(F.when(ok, offset)).alias("max_offset"),
            # Always null, but it keeps every column in the scan, so every column is decoded and
            # a damaged page in any of them shows; nothing is hashed (the row index is never
            # negative, which Spark cannot know). It must stay in the collected result: Spark
            # prunes an aggregate nothing reads, and with it the scan of the columns only it reads.
            F.max(F.when(F.col(POSITION) < 0, F.xxhash64(*BROKER_EVENTS.names))).alias("_decoded"),
        )
        .collect()
    )
    return [
        FileRunStats(**{k: v for k, v in row.asDict().items() if k != "_decoded"}) for row in rows
    ]


def runs_that_may_repeat_keys(stats: list[FileRunStats], excluded_files: set[str]) -> set[str]:
    """Runs whose valid rows are not proved to have distinct seqs.

    Proof, per run: within each file the valid seqs are consecutive in file order (so distinct),
    and the files' seq ranges do not overlap. The engine's sink writes exactly that; anything else
    (a file ingested twice, rows out of order) sends the run to the exact duplicate search.
    """
    by_run: dict[str, list[FileRunStats]] = {}
    for s in stats:
        if s.valid_rows and s.source_file not in excluded_files and s.run_id is not None:
            by_run.setdefault(s.run_id, []).append(s)
    suspicious = set()
    for run_id, groups in by_run.items():
        groups.sort(key=lambda s: s.min_seq)
        if any(s.min_offset != s.max_offset for s in groups) or any(
            later.min_seq <= earlier.max_seq for earlier, later in pairwise(groups)
        ):
            suspicious.add(run_id)
    return suspicious


#: Up to this many duplicate keys are broadcast to the rows; more are joined by a shuffle.
BROADCAST_DUPLICATE_GROUPS = 2_000_000


def run_seq_ranges(
    stats: list[FileRunStats], excluded_files: set[str]
) -> dict[str, tuple[int, int]]:
    """Per run, the [min, max] of the seqs of its valid rows (files of ``excluded_files`` aside)."""
    ranges: dict[str, tuple[int, int]] = {}
    for s in stats:
        if s.valid_rows and s.source_file not in excluded_files and s.run_id is not None:
            low, high = ranges.get(s.run_id, (s.min_seq, s.max_seq))
            ranges[s.run_id] = (min(low, s.min_seq), max(high, s.max_seq))
    return ranges


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
    sources = {r.source_file for r in copies.select("source_file").distinct().collect()}
    raw_files = [
        f
        for f in inspect_raw_files(raw_root, [date.fromisoformat(d) for d in sorted(per_day)])
        if f.relative_path in sources and not f.problem
    ]
    if raw_files:
        positions = (
            read_raw_events(spark, raw_files)
            .where(contract_ok() & F.col("run_id").isin(*runs))
            .groupBy("source_file", "run_id", "seq")
            .agg(F.min(POSITION).alias(ROW_INDEX))
        )
        copies = copies.join(positions, ["source_file", "run_id", "seq"], "left")
    else:
        copies = copies.withColumn(ROW_INDEX, F.lit(None).cast("long"))
    # Literal partition and run filters let Delta prune the files each MERGE reads.
    pruning = (
        f"t.date IN ({', '.join(f'DATE {sql_string(d)}' for d in sorted(per_day))}) "
        f"AND t.run_id IN ({', '.join(sql_string(r) for r in runs)})"
    )
    rows = conform(
        copies.withColumns(
            {
                "record_kind": F.lit("row"),
                "reason": F.lit("conflicting_duplicate"),
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
            "AND t.record_kind = 'row' AND t.reason = s.reason "
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
    return per_day


def rows_are_readable(file: RawFile) -> bool:
    """Whether the rows of a file quarantined whole can be read: its footer opened and the
    problem is its schema or its name, which pyarrow does not mind (an ``unreadable_file`` has
    no footer: its rows are unknown)."""
    return file.problem is not None and not file.problem.startswith("unreadable_file:")


def _contract_columns_kept(schema: pa.Schema) -> list[str]:
    """The contract's columns that a file holds in a type read losslessly as the contract's
    (:func:`reads_as`): its rows' quarantine records keep them; the others are null there (the raw
    file still holds them)."""
    kept = []
    for field in BROKER_EVENTS.to_pyarrow():
        index = schema.get_field_index(field.name)  # -1 when missing, or the name is repeated
        if index >= 0 and reads_as(schema.field(index).type, field.type):
            kept.append(field.name)
    return kept


def _row_records(batch: pa.RecordBatch, kept: list[str], first_index: int) -> pa.Table:
    """The event columns of a batch of rows as the contract types them (the ``kept`` ones cast,
    the others null), and each row's position in its file (``first_index`` is the batch's)."""
    columns = {
        field.name: batch.column(field.name).cast(field.type)
        if field.name in kept
        else pa.nulls(batch.num_rows, field.type)
        for field in BROKER_EVENTS.to_pyarrow()
    }
    positions = range(first_index, first_index + batch.num_rows)
    return pa.table({**columns, ROW_INDEX: pa.array(positions, pa.int64())})


#: Rows of a file quarantined whole that pyarrow reads, converts and hands to Spark at a time.
ROW_RECORDS_BATCH = 65_536


def quarantined_file_rows(
    spark: SparkSession, raw_dir: str, file: RawFile
) -> tuple[DataFrame | None, int, str | None]:
    """The rows of ``file``, quarantined whole for a problem that leaves them readable
    (:func:`rows_are_readable`), as quarantine records: record_kind='row', the file's problem as
    reason, ``source_row_index``, and the contract columns the file holds in a type that reads as
    the contract's (:func:`_contract_columns_kept`). Returns (records, rows, None), records None
    for a file without rows; or (None, 0, error) when pyarrow cannot read the file whole: then no
    row of it is quarantined as a row (all or nothing, so that the file record alone accounts
    for its rows, as rows_in_files_quarantined).

    pyarrow reads :data:`ROW_RECORDS_BATCH` rows at a time and each batch goes to Spark as its own
    DataFrame (held by the driver's JVM as Arrow until written), so Python never holds the whole
    file; Spark itself cannot read these files (nanosecond timestamps, names it takes as globs).
    """
    filesystem, root, _ = _raw_filesystem(raw_dir)
    path = f"{root}/{file.relative_path}"
    parts: list[DataFrame] = []
    rows = 0
    try:
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            kept = _contract_columns_kept(parquet.schema_arrow)
            for batch in parquet.iter_batches(batch_size=ROW_RECORDS_BATCH, columns=kept):
                parts.append(spark.createDataFrame(_row_records(batch, kept, rows)))
                rows += batch.num_rows
    except Exception as exc:  # a damaged page, a cast that overflows, the file gone meanwhile
        return None, 0, _error_text(exc, path, file.relative_path)
    if rows != file.footer_rows:  # the file changed since its footer was read
        return None, 0, f"pyarrow read {rows} rows, the footer declares {file.footer_rows}"
    if not parts:
        return None, 0, None
    records = reduce(DataFrame.unionByName, parts).withColumns(
        {
            "date": F.lit(file.day),
            "source_file": F.lit(file.relative_path),
            "record_kind": F.lit("row"),
            "reason": F.lit(file.problem),
            "file_rows": F.lit(None).cast("long"),
        }
    )
    return conform(records, BROKER_EVENTS_QUARANTINE), rows, None


def _quarantined_files(spark: SparkSession, files: list[RawFile]) -> DataFrame:
    rows = [
        {
            "date": f.day,
            "source_file": f.relative_path,
            "record_kind": "file",
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
    frame = spark.createDataFrame(
        rows,
        "date date, source_file string, record_kind string, reason string, file_rows bigint, "
        "detail string",
    )
    return frame.withColumns(empty_events)


def _days_text(days: list[date]) -> str:
    return days[0].isoformat() if len(days) == 1 else f"{days[0]} .. {days[-1]}"


def run_ingest(
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

    Spark jobs: one counting pass over the raw rows (per file and run, aggregated map-side); the
    exact duplicate search (an aggregation over (run_id, seq)) only for runs the counts cannot
    prove duplicate-free; the bronze write; the quarantine write, reading only the files that hold
    rejected rows (skipped when nothing is rejected and the quarantine holds nothing of these
    days), the rows of files quarantined whole for their schema or name read by pyarrow on the
    driver; Great Expectations over the bronze rows as written. Nothing is cached.
    """
    raw_root = raw_dir or conf.raw_dir
    label = f"{date_from.isoformat()}_{date_to.isoformat()}"
    sc = spark.sparkContext
    check_raw_root(raw_root)
    all_days = days_between(date_from, date_to)
    files = inspect_raw_files(raw_root, all_days)
    if not files:
        # Nothing at all to ingest is a decision, not a quiet night: usually a wrong day (an
        # Airflow logical date is the end of its data interval) or a wrong folder.
        where = f"{raw_root}/date={date_from.isoformat()}" + (
            "" if date_from == date_to else f" .. date={date_to.isoformat()}"
        )
        if not allow_empty_days:
            _refuse_emptying_held_days(  # the sharper reason first, when bronze holds the days
                spark,
                conf,
                all_days,
                "no raw files under {root} for {days}, which bronze already holds: ingesting "
                "would delete those rows. Check --raw / paths.raw",
                raw_root,
            )
            raise IngestRefused(
                f"no raw files for {_days_text(all_days)} (looked in {where}): a wrong day or "
                "--raw / paths.raw? --allow-empty-days ingests nothing on purpose"
            )
        log.warning(
            "ingest %s: no raw data in %s; nothing to ingest (--allow-empty-days)", label, where
        )
    # Both bronze tables exist after an ingest, the quarantine even when nothing was rejected.
    for table in (BRONZE_BROKER_EVENTS, BROKER_EVENTS_QUARANTINE):
        ensure_table(spark, table_path(conf, table), table)
    skipped = skipped_raw_entries(raw_root, all_days)
    if skipped:
        shown = ", ".join(skipped[:50]) + (
            f" and {len(skipped) - 50} more" if len(skipped) > 50 else ""
        )
        log.warning(
            "ingest %s: skipped %d entries under %s that are not <raw>/date=YYYY-MM-DD/*.parquet "
            "(rename or move them to have them ingested): %s",
            label,
            len(skipped),
            raw_root,
            shown,
        )
    empty_days = sorted(set(all_days) - {f.day for f in files})
    if empty_days:
        log.warning(
            "ingest %s: no raw files under %s for %s",
            label,
            raw_root,
            ", ".join(d.isoformat() for d in empty_days),
        )
        if not allow_empty_days:
            _refuse_emptying_held_days(
                spark,
                conf,
                empty_days,
                "no raw files under {root} for {days}, which bronze already holds: ingesting "
                "would delete those rows. Check --raw / paths.raw",
                raw_root,
            )
    bad_files = [f for f in files if f.problem]
    good_files = [f for f in files if not f.problem]

    sc.setJobDescription(f"ingest {label}: count rows per file and run")
    stats = file_run_stats(read_raw_events(spark, good_files)) if good_files else []
    rows_per_file: dict[str, int] = {}
    for s in stats:
        rows_per_file[s.source_file] = rows_per_file.get(s.source_file, 0) + s.rows
    partially_read = sorted(
        f.relative_path for f in good_files if rows_per_file.get(f.relative_path, 0) < f.footer_rows
    )
    damaged = set(partially_read)
    partial_details = {
        f.relative_path: partial_read_detail(raw_root, f, rows_per_file.get(f.relative_path, 0))
        for f in good_files
        if f.relative_path in damaged
    }
    for name in partially_read:
        detail = partial_details[name]
        log.warning(
            "raw file %s could be read only in part (%d of the %d rows its footer declares); "
            "its rows are quarantined: %s",
            name,
            detail["rows_read"],
            detail["rows_declared"],
            detail["cause"],
        )
    readable = [f for f in good_files if f.relative_path not in damaged]
    # Days with raw files none of which can be read (a copy in progress, a wrong folder): as
    # dangerous as days without files when bronze holds them.
    unread_days = sorted({f.day for f in files} - {f.day for f in readable})
    if unread_days and not allow_empty_days:
        _refuse_emptying_held_days(
            spark,
            conf,
            unread_days,
            "no raw file under {root} for {days} can be ingested (all quarantined whole or read "
            "only in part), and bronze already holds those days: ingesting would delete their "
            "rows. Check the files (a copy in progress?)",
            raw_root,
        )

    if not allow_empty_days:
        why_unusable = {f.relative_path: f.problem or "" for f in bad_files}
        why_unusable |= {name: partial_details[name]["cause"] for name in partially_read}
        _refuse_dropping_held_files(spark, conf, all_days, readable, why_unusable, raw_root)

    # Duplicates: searched exactly (one aggregation) only in the runs not proved free of them.
    suspicious = runs_that_may_repeat_keys(stats, damaged)
    groups, duplicates = None, DuplicateSummary()
    if suspicious:
        sc.setJobDescription(f"ingest {label}: duplicate (run_id, seq) in {len(suspicious)} runs")
        holding = {s.source_file for s in stats if s.run_id in suspicious}
        suspects = read_raw_events(
            spark, [f for f in readable if f.relative_path in holding]
        ).where(F.col("run_id").isin(*sorted(suspicious)))
        groups = duplicate_groups(contract_violations(suspects), POSITION).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        duplicates = DuplicateSummary.of(groups)

    # Keys bronze already holds on other days take precedence (DESIGN §5: one row per key). The
    # Delta log's file statistics prove most runs clear; the rest are checked exactly.
    sc.setJobDescription(f"ingest {label}: seq ranges against bronze's other days")
    ranges = run_seq_ranges(stats, damaged)
    overlapping = bronze_files_overlapping(spark, conf, ranges, date_from, date_to)
    held, held_keys_count, elsewhere, held_runs = None, 0, 0, set()
    later_copies: DataFrame | None = None  # keys these days keep that later days' bronze repeats
    if overlapping:
        sc.setJobDescription(f"ingest {label}: keys bronze holds on other days")
        bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS)
        held = held_keys(
            bronze.where(keys_elsewhere_predicate(ranges, date_from, date_to))
        ).persist(StorageLevel.MEMORY_AND_DISK)
        found = held.agg(F.count(F.lit(1)).alias("keys"), F.collect_set("run_id").alias("runs"))
        summary = found.first()
        held_keys_count, held_runs = summary.keys, set(summary.runs)
        if held_runs:
            holding = {s.source_file for s in stats if s.run_id in held_runs}
            candidates = contract_violations(
                read_raw_events(spark, [f for f in readable if f.relative_path in holding]).where(
                    F.col("run_id").isin(*sorted(held_runs))
                )
            ).where(F.col("reason").isNull())
            if groups is not None:  # of a key repeated within these days, the copy kept only
                kept = groups.select("run_id", "seq", "kept_copy", F.lit(True).alias("_grouped"))
                candidates = candidates.join(kept, ["run_id", "seq"], "left").where(
                    F.col("_grouped").isNull()
                    | (F.struct(F.col("source_file"), F.col(POSITION)) == F.col("kept_copy"))
                )
            matched = (
                candidates.select("run_id", "seq", "date")
                .join(held.select("run_id", "seq", "held_date"), ["run_id", "seq"])
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            counts = matched.agg(
                F.count(F.when(F.col("held_date") < F.col("date"), 1)).alias("earlier"),
                F.count(F.when(F.col("held_date") > F.col("date"), 1)).alias("later"),
            ).first()
            elsewhere = counts.earlier
            if counts.later:
                later_copies = (
                    matched.where(F.col("held_date") > F.col("date"))
                    .select("run_id", "seq", F.col("date").alias("kept_date"))
                    .persist(StorageLevel.MEMORY_AND_DISK)
                )
                later_copies.count()
            matched.unpersist()
        if not elsewhere:
            held.unpersist()
            held = None
    # The rows of files quarantined whole for their schema or name are rejected rows: pyarrow
    # reads them into the quarantine (DESIGN §5: every rejected row with its reason).
    rows_of_files_quarantined: dict[str, int] = {}  # files whose rows are quarantined as rows
    records_of_files_quarantined: list[DataFrame] = []
    unread_details: dict[str, str] = {}  # files whose rows pyarrow failed on: their record's detail
    row_budget = conf.max_rows_from_files_quarantined_whole
    for f in bad_files:
        if not rows_are_readable(f):
            continue
        if (f.footer_rows or 0) > row_budget:  # the driver would hold them all until the write
            error = (
                f"its {f.footer_rows} rows are past what is left of "
                f"ingest.max_rows_from_files_quarantined_whole ({row_budget} of "
                f"{conf.max_rows_from_files_quarantined_whole} rows per run): fix the file and "
                "rerun the day, or raise the limit"
            )
            records, rows = None, 0
        else:
            sc.setJobDescription(f"ingest {label}: rows of {f.relative_path}, quarantined whole")
            records, rows, error = quarantined_file_rows(spark, raw_root, f)
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
        rows_of_files_quarantined[f.relative_path] = rows
        row_budget -= rows
        if records is not None:
            records_of_files_quarantined.append(records)
    rows_read = sum(rows_per_file.values()) + sum(rows_of_files_quarantined.values())

    valid_rows = sum(s.valid_rows for s in stats if s.source_file not in damaged)
    removed = duplicates.conflicting_rows + duplicates.dropped + elsewhere
    expected_accepted = valid_rows - removed
    expected_quarantined = rows_read - valid_rows + removed

    def classified(subset: list[RawFile]) -> DataFrame:
        return classify_events(
            read_raw_events(spark, subset),
            [name for name in partially_read if name in {f.relative_path for f in subset}],
            position=POSITION,
            duplicates=groups,
            no_duplicates=groups is None,
            broadcast_duplicates=duplicates.groups <= BROADCAST_DUPLICATE_GROUPS,
            held=held,
            broadcast_held=held_keys_count <= BROADCAST_DUPLICATE_GROUPS,
        )

    days = days_predicate("date", date_from, date_to)
    sc.setJobDescription(f"ingest {label}: write bronze broker_events")
    accepted = classified(readable).where(F.col("status") == ACCEPTED)
    rows_accepted = replace_where(spark, conf, BRONZE_BROKER_EVENTS, accepted, days)
    moved_from_later_days: dict[str, int] = {}
    if later_copies is not None:
        sc.setJobDescription(f"ingest {label}: move later days' copies of its keys to quarantine")
        moved_from_later_days = move_later_copies_to_quarantine(spark, conf, later_copies, raw_root)
        later_copies.unpersist()
        log.warning(
            "ingest %s: bronze held %d keys of these days' events on later days (%s); those "
            "copies were moved to the quarantine of their days as conflicting_duplicate: the "
            "earliest day's copy of a key is the event. episodes and daily_metrics over %s "
            "recompute the runs' later days too",
            label,
            sum(moved_from_later_days.values()),
            ", ".join(f"{day}: {n}" for day, n in sorted(moved_from_later_days.items())),
            label,
        )

    # Only files holding a rejected row are read again: invalid rows, damaged files, conflicts.
    holding_rejects = {s.source_file for s in stats if s.rows > s.valid_rows} | damaged
    holding_rejects |= {s.source_file for s in stats if s.run_id in duplicates.conflicting_runs}
    if duplicates.dropped:  # the runs whose identical copies go to quarantine too
        holding_rejects |= {s.source_file for s in stats if s.run_id in suspicious}
    if held is not None:  # the runs repeating keys of other days
        holding_rejects |= {s.source_file for s in stats if s.run_id in held_runs}
    rejected_files = [*bad_files, *(f for f in good_files if f.relative_path in damaged)]
    file_records = conform(
        _quarantined_files(
            spark,
            [
                # A file read only in part gets its reason here; one quarantined whole whose rows
                # pyarrow failed on, the detail of why.
                replace(f, detail=unread_details.get(f.relative_path, f.detail))
                if f.problem
                else replace(
                    f,
                    problem="partially_read_file",
                    detail=json.dumps(partial_details[f.relative_path], ensure_ascii=False),
                )
                for f in rejected_files
            ],
        ),
        BROKER_EVENTS_QUARANTINE,
    )
    quarantine = reduce(DataFrame.unionByName, records_of_files_quarantined, file_records)
    rereads = [f for f in good_files if f.relative_path in holding_rejects]
    if rereads:
        rejected_rows = (
            classified(rereads)
            .where(F.col("status") == QUARANTINED)
            .withColumns(
                {
                    "record_kind": F.lit("row"),
                    "file_rows": F.lit(None).cast("long"),
                    ROW_INDEX: F.col(POSITION),
                }
            )
        )
        quarantine = conform(rejected_rows, BROKER_EVENTS_QUARANTINE).unionByName(quarantine)
    rows_quarantined = 0
    # Nothing rejected and nothing of these days to replace: no quarantine write (no commit).
    if rereads or rejected_files or has_files_matching(spark, conf, BROKER_EVENTS_QUARANTINE, days):
        sc.setJobDescription(f"ingest {label}: write broker_events_quarantine")
        written = replace_where(spark, conf, BROKER_EVENTS_QUARANTINE, quarantine, days)
        rows_quarantined = written - len(rejected_files)
    reasons = {}
    if rows_quarantined:
        sc.setJobDescription(f"ingest {label}: quarantine reasons")
        reasons = {
            r.reason: r["count"]
            for r in read_table(spark, conf, BROKER_EVENTS_QUARANTINE)
            .where(days)
            .where(F.col("record_kind") == "row")
            .groupBy("reason")
            .count()
            .collect()
        }
    if groups is not None:
        groups.unpersist()
    if held is not None:
        held.unpersist()

    report: dict[str, Any] = {
        "date_from": date_from.isoformat(),
        "date_to": date_to.isoformat(),
        "files_listed": len(files),
        # Entries not read although they may hold data (nested, other suffixes, hidden names,
        # malformed date= folders at the root): see the warning.
        "files_skipped": len(skipped),
        "files_quarantined": len(bad_files),
        "files_partially_read": len(partially_read),
        "rows_read": rows_read,
        "rows_accepted": rows_accepted,
        "rows_quarantined": rows_quarantined,
        # Identical copies of accepted rows: part of rows_quarantined (reason "duplicate").
        "duplicates_quarantined": duplicates.dropped,
        # Rows repeating a key bronze holds on an earlier day: part of rows_quarantined.
        "duplicates_of_other_days": elsewhere,
        # Per later day, bronze rows repeating a key these days hold: moved from bronze to that
        # day's quarantine (not rows of these days: outside the balance below).
        "moved_from_later_days": dict(sorted(moved_from_later_days.items())),
        # Bronze files of other days whose statistics could not rule out such a key.
        "bronze_files_overlapping": len(overlapping),
        "rows_unreadable": sum(
            f.footer_rows - rows_per_file.get(f.relative_path, 0)
            for f in good_files
            if f.relative_path in damaged
        ),
        # Rows the footers of files quarantined whole declare whose rows could not be read (not
        # in rows_read; the rows of those quarantined for their schema or name are, as rows).
        "rows_in_files_quarantined": sum(
            f.footer_rows or 0
            for f in bad_files
            if f.relative_path not in rows_of_files_quarantined
        ),
        # Files quarantined whole whose footer could not be read: their rows are unknown.
        "files_without_footer": sum(f.footer_rows is None for f in bad_files),
        # Every row the readable footers declare: rows_read + rows_unreadable +
        # rows_in_files_quarantined.
        "rows_declared": sum(f.footer_rows or 0 for f in files),
        "quarantine_reasons": dict(sorted(reasons.items())),
        "quarantined_files": {f.relative_path: f.problem for f in bad_files},
        # Files read only in part: why (the detail of their quarantine record, as JSON).
        "partially_read_files": {name: partial_details[name] for name in partially_read},
    }
    # The counting pass predicts what the writes must hold; the Delta commits say what they hold.
    report["balanced"] = (
        report["rows_read"] == report["rows_accepted"] + report["rows_quarantined"]
        and report["rows_declared"]
        == report["rows_read"] + report["rows_unreadable"] + report["rows_in_files_quarantined"]
        and rows_accepted == expected_accepted
        and rows_quarantined == expected_quarantined
    )
    if conf.validate_with_great_expectations:
        sc.setJobDescription(f"ingest {label}: Great Expectations over bronze")
        bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(days)
        validation = quality.validate_accepted_events(bronze, label)
        report["great_expectations_success"] = validation["success"]
        report["great_expectations_result"] = quality.store_result(
            {"counts": report, "validation": validation}, conf.quality_dir, label, spark
        )
    sc.setJobDescription(None)
    log.info(
        "ingest %s: files %d (quarantined %d, partially read %d); rows declared by footers %d = "
        "read %d + unreadable %d + in files quarantined whole unread %d (and %d files without a "
        "readable footer); rows read %d = accepted %d + quarantined %d (of which duplicates %d, "
        "keys held on other days %d); balanced=%s",
        label,
        report["files_listed"],
        report["files_quarantined"],
        report["files_partially_read"],
        report["rows_declared"],
        report["rows_read"],
        report["rows_unreadable"],
        report["rows_in_files_quarantined"],
        report["files_without_footer"],
        report["rows_read"],
        report["rows_accepted"],
        report["rows_quarantined"],
        report["duplicates_quarantined"],
        report["duplicates_of_other_days"],
        report["balanced"],
    )
    return report


def ingest_succeeded(report: dict[str, Any]) -> bool:
    return bool(report["balanced"]) and report.get("great_expectations_success", True)


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
    from jobs.failures import run_entry_point

    sys.exit(run_entry_point("ingest", main))

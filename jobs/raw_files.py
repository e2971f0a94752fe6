"""Raw files of the event log, checked before any row is read: listing, footers and schemas.

What the ingest learns of ``<raw>/date=D/*.parquet`` with pyarrow alone (no Spark, no data read
except where said): which files exist (:func:`inspect_raw_files`) and which entries it skips
(:func:`skipped_raw_entries`); why a file is quarantined whole (a footer that cannot be read, a
schema that breaks the contract, a name Spark cannot address); why a file Spark read only in part
was damaged and which of its row groups pyarrow reads on their own (:func:`partial_read`); and
the rows of a file quarantined whole, or of such row groups, as the contract types them
(:func:`row_records`). The reasons written here are the quarantine's.
"""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from flowctl_core.sink import unaddressable_characters
from flowctl_core.wording import counted
from schemas.broker_events import BROKER_EVENTS
from schemas.model import US_PER_SECOND

log = logging.getLogger("flowctl.ingest")

#: The quarantine's column for a row's index within its raw file: where to find a rejected row.
ROW_INDEX = "source_row_index"


@dataclass(frozen=True)
class RawFile:
    """One raw Parquet file of a day, as its footer describes it."""

    day: date
    relative_path: str  # date=YYYY-MM-DD/part-....parquet: stable lineage, whatever the raw root
    path: str  # as the filesystem and Spark address it
    footer_rows: int | None
    problem: str | None  # why the file is quarantined whole, or None
    detail: str | None = None  # JSON: what else the quarantine record says (partially read files)


def raw_filesystem(raw_dir: str) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, root path within it, raw_dir as given or made absolute)."""
    if "://" not in raw_dir:  # a local path, possibly relative (--raw)
        raw_dir = Path(raw_dir).resolve().as_posix()
    filesystem, root = pafs.FileSystem.from_uri(
        raw_dir if "://" in raw_dir else Path(raw_dir).as_uri()
    )
    return filesystem, root, raw_dir


def reads_as(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Whether Spark reads a Parquet column written as ``actual`` into the contract's
    ``expected`` type without losing anything: the type itself, or what common writers emit for
    it (polars' large strings, dictionary-encoded strings, narrower integers signed or not for
    int64 (Spark reads a uint32 as a long), timestamps in s or ms,
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
        # Every narrower integer, signed or not (an AMQP serial number is a uint32).
        return (pa.types.is_integer(actual) and actual.bit_width < 64) or pa.types.is_int64(actual)
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


#: What to do about a column written with Arrow's null type (no ';': it ends a reason).
NULL_TYPE_HINT = (
    "an all-null column written without a type, which Spark cannot read as the contract's: give "
    "the writer the contract's schema, e.g. pyarrow.Table.from_pylist(rows, schema=...), or leave "
    "the column out"
)


def _wrong_type(name: str, actual: pa.DataType, physical_type: str | None = None) -> str:
    """``wrong_type:<column>:<type as written>``, with what to do when it is a timestamp: Spark 4
    cannot read TIMESTAMP(NANOS) as a timestamp at all (it fails, or reads a bigint with
    spark.sql.legacy.parquet.nanosAsLong); INT96 is a deprecated encoding without time zone; a
    timestamp without time zone is not UTC by contract. A null-typed column (what
    ``pa.Table.from_pylist`` makes of a column of Nones) says so too."""
    if pa.types.is_null(actual):
        return f"wrong_type:{name}:null ({NULL_TYPE_HINT})"
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
        # Spark matches column names regardless of case (``SEQ`` is ``seq``) and refuses a file
        # holding one twice.
        matches = names.count(field.name.lower())
        if matches > 1:
            problems.append(f"duplicate_column:{field.name}")
        elif matches == 0:
            if not field.nullable:
                problems.append(f"missing_column:{field.name}")
        else:
            written = schema.field(names.index(field.name.lower()))
            if not reads_as(written.type, field.type):
                physical = (physical_types or {}).get(written.name)
                problems.append(_wrong_type(written.name, written.type, physical))
    return ";".join(problems) or None


#: The Parquet codecs Spark reads here (BROTLI and LZO need codecs it does not bundle).
SPARK_CODECS = frozenset({"UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD", "LZ4", "LZ4_RAW"})


def _codec_problem(metadata: pq.FileMetaData) -> str | None:
    """Why Spark cannot decompress a file's column chunks, or None: without this the file reads
    as damaged (every row lost to an error only the executor's log names)."""
    codecs = {
        metadata.row_group(group).column(column).compression
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    }
    unsupported = sorted(codecs - SPARK_CODECS)
    if not unsupported:
        return None
    return (
        f"unsupported_compression:{','.join(unsupported)} (Spark here reads SNAPPY, ZSTD, GZIP, "
        "LZ4 or uncompressed: rewrite the file with one of them)"
    )


def _name_problem(name: str) -> str | None:
    """Why Spark cannot be given the file ``name`` to read, or None."""
    found = unaddressable_characters(name)
    if not found:
        return None
    return f"unaddressable_file_name:Spark cannot read a name with {found!r} (rename the file)"


#: Longest reason recorded for an unreadable file (the full error goes to the log).
MAX_REASON_CHARS = 200


def error_text(exc: Exception, path: str, relative: str) -> str:
    """``<error type>: <message>``, one line, the file named by its relative path, cut to
    :data:`MAX_REASON_CHARS`."""
    message = " ".join(str(exc).replace(path, relative).split())
    text = f"{type(exc).__name__}: {message}".rstrip(": ")
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def unreadable_reason(exc: Exception, path: str, relative: str) -> str:
    """``unreadable_file:<error type>: <message>``, one line, the file named by its relative path,
    cut to :data:`MAX_REASON_CHARS`: tells a zero-byte file from one that is not Parquet."""
    reason = "unreadable_file:" + error_text(exc, path, relative)
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."


def stale_checksum_sidecar(filesystem: pafs.FileSystem, path: str) -> str | None:
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


@dataclass(frozen=True)
class RowGroup:
    """One row group of a raw file: its index (from 0, as pyarrow.parquet.ParquetFile numbers
    them), the index of its first row in the file, its rows, and whether pyarrow reads it whole."""

    index: int
    first_row: int
    rows: int
    readable: bool


def scan_row_groups(
    filesystem: pafs.FileSystem, path: str, relative: str
) -> tuple[tuple[RowGroup, ...], str | None]:
    """pyarrow reads the file one row group at a time (a batch at a time in memory, every column
    decoded, nothing kept): the row groups, and the first error met (None when it reads all)."""
    groups: list[RowGroup] = []
    error = None
    try:
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            first = 0
            for index in range(parquet.num_row_groups):
                rows = parquet.metadata.row_group(index).num_rows
                try:
                    read = sum(b.num_rows for b in parquet.iter_batches(row_groups=[index]))
                except Exception as exc:  # the damage itself: a bad page, a truncated chunk, ...
                    read, error = -1, error or error_text(exc, path, relative)
                groups.append(RowGroup(index, first, rows, read == rows))
                first += rows
    except Exception as exc:  # the footer itself, no more readable: the file changed meanwhile
        error = error or error_text(exc, path, relative)
    return tuple(groups), error


def _numbers(indices: list[int]) -> str:
    return f"row group {indices[0]}" if len(indices) == 1 else f"row groups {indices}"


@dataclass(frozen=True)
class PartialRead:
    """A file Spark read only in part (``ignoreCorruptFiles`` ended its read at a damaged page),
    and what pyarrow reads of it one row group at a time (:func:`partial_read`)."""

    rows_declared: int | None  # its footer
    spark_rows: int
    #: Spark's rows are the file's first ones, [0, spark_rows): it read the file as one split
    #: and stopped at the damage. Else (a large file split in several parts, one of which
    #: failed) which row groups Spark read is unknown, and none is recovered.
    spark_prefix: bool
    row_groups: tuple[RowGroup, ...]
    error: str | None  # the first error pyarrow met
    sidecar: str | None  # a stale checksum sidecar beside the file

    @property
    def recoverable(self) -> tuple[RowGroup, ...]:
        """The row groups pyarrow reads whole of which Spark read no row: those starting at or
        after Spark's prefix. The one Spark stopped in stays partly read (its rows before the
        bad page by Spark, the rest unreadable)."""
        if not self.spark_prefix:
            return ()
        return tuple(g for g in self.row_groups if g.readable and g.first_row >= self.spark_rows)

    def detail(self, not_recovered: str | None = None) -> dict[str, Any]:
        """The ``detail`` (as JSON) of the file's quarantine record: ``rows_declared``,
        ``rows_read`` (by Spark, and by pyarrow of :attr:`recoverable`), then, for a file of
        several row groups or one whose rows pyarrow recovered, ``rows_recovered`` (pyarrow's),
        ``row_groups_recovered`` and ``row_groups_unreadable`` (of which neither read every row;
        left out when Spark's rows are no prefix), and ``cause``, one line for the user.
        ``not_recovered``: why the recoverable row groups are not read all the same."""
        groups = self.recoverable if not_recovered is None else ()
        recovered = sum(g.rows for g in groups)
        detail: dict[str, Any] = {
            "rows_declared": self.rows_declared,
            "rows_read": self.spark_rows + recovered,
        }
        if len(self.row_groups) > 1 or recovered:
            detail["rows_recovered"] = recovered
            detail["row_groups_recovered"] = [g.index for g in groups]
            if self.spark_prefix:
                detail["row_groups_unreadable"] = [
                    g.index
                    for g in self.row_groups
                    if g.first_row + g.rows > self.spark_rows and g not in groups
                ]
        cause = self._damage()
        if "rows_recovered" in detail:
            cause += "; " + self._recovery(detail, not_recovered)
        detail["cause"] = cause
        return detail

    def _damage(self) -> str:
        """What damaged the file: a stale Hadoop checksum sidecar beside it
        (:func:`stale_checksum_sidecar`), or the first error pyarrow meets reading it."""
        whole = sum(g.rows for g in self.row_groups)
        if self.sidecar and self.error is None:
            return (
                f"checksum sidecar {self.sidecar} does not match the file, which pyarrow reads "
                f"whole ({whole} rows): delete the sidecar if the file is intact, and rerun the day"
            )
        if self.sidecar:
            return f"{self.error}; its checksum sidecar {self.sidecar} does not match it either"
        if self.error:
            return self.error
        return (
            f"pyarrow reads the file whole ({whole} rows) but Spark could not: see the executor "
            "log for the error"
        )

    def _recovery(self, detail: dict[str, Any], not_recovered: str | None) -> str:
        """What pyarrow added to Spark's rows, reading row groups on their own."""
        if not self.spark_prefix:
            return (
                f"Spark read {self.spark_rows} rows, not the first ones of the file (read in "
                "several parts): no row group is read by pyarrow on its own"
            )
        first = self.spark_rows
        said = f"Spark read the first {first} rows" if first else "Spark read no row"
        if not_recovered is not None:
            groups = _numbers([g.index for g in self.recoverable])
            rows = sum(g.rows for g in self.recoverable)
            said += f"; pyarrow reads {groups} ({rows} rows) but did not: {not_recovered}"
        elif detail["row_groups_recovered"]:
            groups = _numbers(detail["row_groups_recovered"])
            said += f", pyarrow {detail['rows_recovered']}{' more' if first else ''} from {groups}"
        else:
            said += f", pyarrow no row group{' after them' if first else ''}"
        if detail["row_groups_unreadable"]:
            unread = (self.rows_declared or 0) - detail["rows_read"]
            groups = _numbers(detail["row_groups_unreadable"])
            said += f"; {unread} rows of {groups} could be read by neither"
        return said


def partial_read(raw_dir: str, file: RawFile, spark_rows: int, spark_prefix: bool) -> PartialRead:
    """What pyarrow learns of a file Spark could read only in part (``spark_rows`` rows, the
    file's first ones when ``spark_prefix``): each row group read on its own
    (:func:`scan_row_groups`), and whether a stale checksum sidecar explains the damage. Only
    damaged files are re-read, so the cost is theirs."""
    filesystem, root, _ = raw_filesystem(raw_dir)
    path = f"{root}/{file.relative_path}"
    row_groups, error = scan_row_groups(filesystem, path, file.relative_path)
    try:
        sidecar = stale_checksum_sidecar(filesystem, path)
    except OSError:
        sidecar = None
    return PartialRead(file.footer_rows, spark_rows, spark_prefix, row_groups, error, sidecar)


def _day_files(filesystem: pafs.FileSystem, root: str, day: date) -> list[pafs.FileInfo]:
    """The files the ingest reads of ``day`` (``date=D/*.parquet``, not hidden), by path."""
    selector = pafs.FileSelector(f"{root}/date={day.isoformat()}", allow_not_found=True)
    return [
        info
        for info in sorted(filesystem.get_file_info(selector), key=lambda i: i.path)
        if info.type == pafs.FileType.File
        and not info.base_name.startswith(("_", "."))
        and info.base_name.endswith(".parquet")
    ]


def days_with_raw_files(raw_dir: str, days: list[date]) -> list[date]:
    """The days that have raw files to ingest (listing only, nothing opened): an empty answer is
    the ingest's refusal, told before Spark starts (jobs/ingest_refusals.py)."""
    filesystem, root, _ = raw_filesystem(raw_dir)
    return [day for day in days if _day_files(filesystem, root, day)]


def inspect_raw_files(raw_dir: str, days: list[date]) -> list[RawFile]:
    """List the raw files of the days and check their footers, without reading any data."""
    filesystem, root, raw_dir = raw_filesystem(raw_dir)
    files = []
    for day in days:
        for info in _day_files(filesystem, root, day):
            name = info.base_name
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
                        _codec_problem(parquet.metadata),
                        _range_problem(parquet),
                    )
                    problem = ";".join(p for p in problems if p) or None
            except Exception as exc:  # any unreadable footer: truncated, not Parquet, ...
                rows, problem = None, unreadable_reason(exc, info.path, relative)
                log.warning("unreadable raw file %s: %s", relative, exc)
            files.append(RawFile(day, relative, address, rows, problem))
    return files


def _range_problem(parquet: pq.ParquetFile) -> str | None:
    """A contract timestamp written in seconds or milliseconds whose footer statistics pass what
    microseconds hold (a nanosecond count written as milliseconds), or None. Spark's read of such
    a file fails whole on the overflow; quarantined here, its rows are read by pyarrow, that
    value null (:func:`_cast_in_range`). A file without statistics is caught by the read."""
    schema = parquet.schema_arrow
    problems = []
    # The contract's columns as the file names them (contract_columns_kept's match).
    for written in contract_columns_kept(schema).values():
        index = schema.get_field_index(written)
        most = _most_in_micros(schema.field(index).type)
        if most is None:
            continue
        for group in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(group).column(index).statistics
            if (
                stats is not None
                and stats.has_min_max
                and not (-most <= stats.min_raw and stats.max_raw <= most)
            ):
                problems.append(
                    f"out_of_range:{written}:timestamp[{schema.field(index).type.unit}] "
                    "values past what microseconds hold (nanoseconds written as milliseconds?)"
                )
                break
    return ";".join(problems) or None


#: Files writers leave next to their data (commit markers, checksums, summaries, a collector's
#: lock: ``collectors.session.raw_lock_name``, a test keeps them matched): never data.
KNOWN_MARKERS = re.compile(
    r"^(_SUCCESS|_committed_.*|_started_.*|_metadata|_common_metadata|\..*\.crc|\.DS_Store"
    r"|\.collect-.*\.lock)$",
    re.DOTALL,  # a broker's name in a collector's lock may hold any character (a review)
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
    names), files at the root itself, and folders at the root that are no day's (``dt=D``, a
    malformed date). Writers' markers
    (:data:`KNOWN_MARKERS`) are left out. Listing only: nothing is opened."""
    filesystem, root, _ = raw_filesystem(raw_dir)
    skipped = []
    for info in filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.Directory:
            if not _is_date_folder(name):  # dt=..., date=2024-1-1: not a day's folder
                skipped.append(name)
        elif not KNOWN_MARKERS.match(name):  # a file at the root belongs to no day
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


def rows_are_readable(file: RawFile) -> bool:
    """Whether the rows of a file quarantined whole can be read: its footer opened and the
    problem is its schema or its name, which pyarrow does not mind (an ``unreadable_file`` has
    no footer: its rows are unknown)."""
    return file.problem is not None and not file.problem.startswith("unreadable_file:")


def contract_columns_kept(schema: pa.Schema) -> dict[str, str]:
    """The contract's columns that a file holds in a type read losslessly as the contract's
    (:func:`reads_as`), each to its name as written: matched regardless of case, as Spark and
    :func:`_schema_problem` match them (``SEQ`` is ``seq``; an audit found a file's ``RUN_ID``,
    ``SEQ`` and ``TS`` null in its rows' records); held twice in two cases (``queue`` and
    ``Queue``, which Spark refuses), the column of the exact name. Its rows' quarantine records
    keep them; the others are null there (the raw file still holds them)."""
    names = [name.lower() for name in schema.names]
    kept = {}
    for field in BROKER_EVENTS.to_pyarrow():
        index = schema.get_field_index(field.name)  # -1 when missing, or the name is repeated
        if index < 0 and names.count(field.name.lower()) == 1:
            index = names.index(field.name.lower())
        if index >= 0 and reads_as(schema.field(index).type, field.type):
            kept[field.name] = schema.field(index).name
    return kept


def row_records(batch: pa.RecordBatch, kept: dict[str, str], first_index: int) -> pa.Table:
    """The event columns of a batch of rows as the contract types them (the ``kept`` ones read
    under their written names and cast, the others null), and each row's position in its file
    (``first_index`` is the batch's)."""
    columns = {
        field.name: _cast_in_range(batch.column(kept[field.name]), field.type)
        if field.name in kept
        else pa.nulls(batch.num_rows, field.type)
        for field in BROKER_EVENTS.to_pyarrow()
    }
    positions = range(first_index, first_index + batch.num_rows)
    return pa.table({**columns, ROW_INDEX: pa.array(positions, pa.int64())})


#: Microseconds in one unit of a timestamp coarser than the contract's.
_MICROS_PER_UNIT = {"s": US_PER_SECOND, "ms": 1_000}


def _most_in_micros(written: pa.DataType) -> int | None:
    """For a timestamp in seconds or milliseconds, the largest count (and, negated, the least)
    that microseconds in an int64 hold; None for any other type (it converts without overflow)."""
    if not pa.types.is_timestamp(written) or written.unit not in _MICROS_PER_UNIT:
        return None
    return (2**63 - 1) // _MICROS_PER_UNIT[written.unit]


def _cast_in_range(values: pa.Array, to: pa.DataType) -> pa.Array:
    """``values`` cast to ``to``; a timestamp in seconds or milliseconds that microseconds cannot
    hold (a nanosecond count written as milliseconds) null, not the whole batch refused: its row
    is quarantined whatever it holds, and one such value lost every row of its file to neither
    bronze nor the quarantine (an audit)."""
    most = _most_in_micros(values.type)
    if most is None:
        return values.cast(to)
    counts = values.cast(pa.int64())
    outside = pc.or_(pc.less(counts, -most), pc.greater(counts, most))
    return pc.if_else(outside, pa.scalar(None, values.type), values).cast(to)


@dataclass(frozen=True)
class RawListing:
    """The raw files of the days, their footers checked (:func:`inspect_raw_files`), and the
    entries the ingest skips (:func:`skipped_raw_entries`): stage 1 of the ingest, no data read."""

    files: tuple[RawFile, ...]
    skipped: tuple[str, ...] = ()

    @property
    def bad_files(self) -> list[RawFile]:
        """Files quarantined whole (their problem says why): Spark does not read them."""
        return [f for f in self.files if f.problem]

    @property
    def good_files(self) -> list[RawFile]:
        return [f for f in self.files if not f.problem]

    def days_without_files(self, days: list[date]) -> list[date]:
        return sorted(set(days) - {f.day for f in self.files})


def list_raw_files(raw_dir: str, days: list[date]) -> RawListing:
    """The :class:`RawListing` of ``days`` under ``raw_dir``; each file quarantined whole for its
    schema, codec or name named in a warning (here, not in :func:`inspect_raw_files`, which other
    stages call again; an unreadable footer is warned about where it is read)."""
    files = tuple(inspect_raw_files(raw_dir, days))
    for file in files:
        if rows_are_readable(file):
            log.warning("raw file %s quarantined whole: %s", file.relative_path, file.problem)
    return RawListing(files, tuple(skipped_raw_entries(raw_dir, days)))


def log_skipped_entries(label: str, raw_dir: str, skipped: tuple[str, ...]) -> None:
    """Warn about what the ingest does not read although it may hold data (the first 50 named)."""
    if not skipped:
        return
    shown = ", ".join(skipped[:50]) + (
        f" and {len(skipped) - 50} more" if len(skipped) > 50 else ""
    )
    log.warning(
        "ingest %s: skipped %s under %s that are not <raw>/date=YYYY-MM-DD/*.parquet "
        "(rename or move them to have them ingested): %s",
        label,
        counted(len(skipped), "entry", "entries"),
        raw_dir,
        shown,
    )

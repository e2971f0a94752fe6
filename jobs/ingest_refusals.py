"""Stage 2 of the ingest: refusing input that cannot be what was meant, before anything is written.

A raw folder that does not exist; a range without any raw file; days that bronze holds but that
have no raw files, or only files that cannot be read whole; rows bronze holds that were read from
files now missing or unreadable. Replacing those days would delete good rows with nothing, so the
ingest raises :class:`IngestRefused` unless ``--allow-empty-days`` says it is meant. Bronze is
asked through the Delta log (which days it holds) and, for those days only, its ``source_file``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import date

import pyarrow.fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flowctl_core.errors import PipelineError
from flowctl_core.wording import counted
from jobs.config import PipelineConf
from jobs.delta_io import days_predicate, files_matching, read_table
from jobs.ingest_read import IngestScope, RawCounts
from jobs.pipeline_state import days_between
from jobs.raw_files import RawFile, RawListing, raw_filesystem
from schemas.tables import BRONZE_BROKER_EVENTS

log = logging.getLogger("flowctl.ingest")


class IngestRefused(PipelineError):
    """The input cannot be what was meant (a raw folder that does not exist, or that has nothing
    readable for days bronze already holds): ingesting it would replace good rows with nothing."""


def check_raw_root(raw_dir: str) -> None:
    """Refuse a raw folder that does not exist: most likely a mistyped --raw or paths.raw."""
    filesystem, root, shown = raw_filesystem(raw_dir)
    if filesystem.get_file_info(root).type == pafs.FileType.NotFound:
        raise IngestRefused(f"raw folder {shown} does not exist (check --raw or paths.raw)")


def bronze_days(spark: SparkSession, conf: PipelineConf, days: list[date]) -> list[date]:
    """Those of ``days`` for which bronze holds data files (from the Delta log: no data read)."""
    predicate = days_predicate("date", days[0], days[-1])
    files = files_matching(spark, conf, BRONZE_BROKER_EVENTS, predicate)
    held = {day for day in days for f in files if f"/date={day.isoformat()}/" in f}
    return sorted(held)


def days_text(days: list[date]) -> str:
    return days[0].isoformat() if len(days) == 1 else f"{days[0]} .. {days[-1]}"


#: Why days without raw files that bronze holds are refused ({root}, {days}: see below).
NO_RAW_FILES_FOR_HELD_DAYS = (
    "no raw files under {root} for {days}, which bronze already holds: ingesting would delete "
    "those rows. Check --raw / paths.raw"
)


def refuse_emptying_held_days(
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


def looked_in(raw_root: str, date_from: date, date_to: date) -> str:
    return f"{raw_root}/date={date_from.isoformat()}" + (
        "" if date_from == date_to else f" .. date={date_to.isoformat()}"
    )


def no_raw_files_text(raw_root: str, date_from: date, date_to: date) -> str:
    """The refusal of days none of which has a raw file, bronze holding none of them (``flowctl
    pipeline`` says it before Spark starts, from the listing and bronze's folders)."""
    where = looked_in(raw_root, date_from, date_to)
    return (
        f"no raw files for {days_text(days_between(date_from, date_to))} (looked in {where}): a "
        "wrong day or --raw / paths.raw? --allow-empty-days ingests nothing on purpose"
    )


def refuse_no_raw_files(
    spark: SparkSession, conf: PipelineConf, scope: IngestScope, listing: RawListing
) -> None:
    """Nothing at all to ingest is a decision, not a quiet night: usually a wrong day (an Airflow
    logical date is the end of its data interval) or a wrong folder. Refused (the sharper reason
    first, when bronze holds the days) unless empty days are allowed, then only warned about."""
    if listing.files:
        return
    where = looked_in(scope.raw_root, scope.date_from, scope.date_to)
    if not scope.allow_empty_days:
        refuse_emptying_held_days(
            spark, conf, scope.days, NO_RAW_FILES_FOR_HELD_DAYS, scope.raw_root
        )
        raise IngestRefused(no_raw_files_text(scope.raw_root, scope.date_from, scope.date_to))
    log.warning(
        "ingest %s: no raw data in %s; nothing to ingest (--allow-empty-days)", scope.label, where
    )


def refuse_days_without_files(
    spark: SparkSession, conf: PipelineConf, scope: IngestScope, listing: RawListing
) -> None:
    """Warn about the days without raw files; refuse them when bronze holds any (unless allowed)."""
    empty_days = listing.days_without_files(scope.days)
    if not empty_days:
        return
    log.warning(
        "ingest %s: no raw files under %s for %s",
        scope.label,
        scope.raw_root,
        ", ".join(d.isoformat() for d in empty_days),
    )
    if not scope.allow_empty_days:
        refuse_emptying_held_days(
            spark, conf, empty_days, NO_RAW_FILES_FOR_HELD_DAYS, scope.raw_root
        )


def unread_days(listing: RawListing, counts: RawCounts) -> list[date]:
    """Days with raw files none of which can be read whole (a copy in progress, a wrong folder):
    as dangerous as days without files when bronze holds them."""
    return sorted({f.day for f in listing.files} - {f.day for f in counts.readable})


def why_unusable(listing: RawListing, counts: RawCounts) -> dict[str, str]:
    """Files that cannot be read whole (relative path) -> why: quarantined whole, read in part."""
    why = {f.relative_path: f.problem or "" for f in listing.bad_files}
    return why | {name: counts.partial_details[name]["cause"] for name in counts.partially_read}


def refuse_unusable_files(
    spark: SparkSession,
    conf: PipelineConf,
    scope: IngestScope,
    listing: RawListing,
    counts: RawCounts,
) -> None:
    """After the counting pass (unless empty days are allowed): refuse days bronze holds whose
    raw files can none be read whole, then rows bronze holds from files missing or unreadable."""
    if scope.allow_empty_days:
        return
    unread = unread_days(listing, counts)
    if unread:
        refuse_emptying_held_days(
            spark,
            conf,
            unread,
            "no raw file under {root} for {days} can be ingested (all quarantined whole or read "
            "only in part), and bronze already holds those days: ingesting would delete their "
            "rows. Check the files (a copy in progress?)",
            scope.raw_root,
        )
    refuse_dropping_held_files(
        spark, conf, scope, list(counts.readable), why_unusable(listing, counts)
    )


def dropped_files_message(
    held_days: list[date], gone: list[str], why: Mapping[str, str], raw_root: str
) -> str:
    """The refusal of an ingest that would delete bronze's rows of the files ``gone`` (the first
    20 named, each with why it cannot be used: ``why``, or missing)."""
    named = [f"{name} ({why.get(name, 'missing')})" for name in gone[:20]]
    shown = "; ".join(named) + (f"; and {len(gone) - 20} more" if len(gone) > 20 else "")
    return (
        f"bronze holds rows of {', '.join(d.isoformat() for d in held_days)} read from "
        f"{counted(len(gone), 'raw file')} under {raw_root} that are missing, cannot be read "
        "whole or hold fewer rows now: "
        f"{shown}. Ingesting would delete those rows: restore or repair the files (or wait "
        "for a copy to finish); to drop their rows on purpose, pass --allow-empty-days"
    )


def refuse_dropping_held_files(
    spark: SparkSession,
    conf: PipelineConf,
    scope: IngestScope,
    readable: list[RawFile],
    why: Mapping[str, str],
) -> None:
    """Raise :class:`IngestRefused` when bronze holds rows of the days read from raw files that
    are now missing or cannot be read whole (``why``: relative path -> why), or that declare
    fewer rows than bronze holds from them: the rerun would delete those rows (retention removed
    some of a day's files, a copy in progress, a file replaced under a stale checksum, or
    rewritten with fewer rows). Bronze's ``source_file`` column is read only for days it holds
    (the Delta log says which)."""
    held_days = bronze_days(spark, conf, scope.days)
    if not held_days:
        return
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(
        days_predicate("date", held_days[0], held_days[-1])
    )
    # Rows per file (one row per file to the driver): a file bronze holds more rows of than its
    # footer declares was rewritten with fewer (DESIGN §3: runs never rewrite files), and
    # re-reading it would delete the difference as surely as a missing file.
    held = {
        r.source_file: r.rows
        for r in bronze.groupBy("source_file").agg(F.count(F.lit(1)).alias("rows")).collect()
    }
    declared = {f.relative_path: f.footer_rows for f in readable}
    gone = sorted(set(held) - set(declared))
    shrunk = {
        name: f"rewritten: {declared[name]} rows where bronze holds {rows} read from it"
        for name, rows in held.items()
        if declared.get(name) is not None and rows > (declared[name] or 0)
    }
    if gone or shrunk:
        message = dropped_files_message(
            held_days, sorted([*gone, *shrunk]), {**why, **shrunk}, scope.raw_root
        )
        raise IngestRefused(message)

"""What each job has processed, and so which days are behind bronze (table ``pipeline_state``).

Every run of ingest, episodes and daily_metrics records, per day it processed, the Delta version of
bronze that its rows of the day reflect: ingest the version it wrote, the later jobs the version
they read (taken before reading, so an ingest that commits meanwhile leaves the day behind rather
than recorded as done). A day is *behind* for a job when ingest wrote it at a newer version than
the job's, or when ingest has it and the job never processed it: a crash between two jobs leaves
exactly that.

Ingest also records, before it writes, that it is writing the days (:data:`INGEST_WRITING`, at the
version its write will make): a kill between its bronze commit and its own record (the quarantine
not written yet) would otherwise leave bronze changed under records that say nothing happened. A
day whose latest such start is newer than ingest's latest finish did not finish: ingest is behind
on it until it is rerun, and the later jobs are behind on it unless they read bronze at or past
the version that write would make.

Daily metrics carry state over midnight (a stopped queue is stopped from 00:00, counters come from
earlier days), so a job never computes days on top of an earlier day that is behind:
:func:`run_recorded` processes those earlier days first (and logs it), and refuses with one line
(:class:`StaleInputError`) when a job it reads from is behind on a day it would compute. The
nightly DAG's tasks and ``flowctl pipeline`` run the same functions; ``flowctl status`` prints
:func:`pipeline_status`. Days that bronze held before this table existed have no record: they are
listed as unrecorded, never caught up on their own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from flowctl_core.errors import PipelineError
from schemas.tables import BRONZE_BROKER_EVENTS, PIPELINE_STATE

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConf

log = logging.getLogger("flowctl.pipeline_state")

INGEST = "ingest"
#: What ingest records, in the ``job`` column, before it writes the days: it is writing them.
INGEST_WRITING = "ingest: writing"
#: The recorded jobs in pipeline order, each with the recorded jobs whose output it reads besides
#: bronze (bronze itself is what ingest's records stand for).
READS: dict[str, tuple[str, ...]] = {
    INGEST: (),
    "episodes": (),
    "daily_metrics": ("episodes",),
}
JOBS = tuple(READS)


class StaleInputError(PipelineError):
    """A job would compute days from another job's output that is behind bronze."""


@dataclass(frozen=True)
class DayRecord:
    """One row of ``pipeline_state``: ``job`` processed ``day`` from bronze ``bronze_version``,
    recorded at ``processed_at`` (None: not known, as in tests of the versions alone)."""

    job: str
    day: date
    bronze_version: int
    processed_at: datetime | None = None


def days_between(date_from: date, date_to: date) -> list[date]:
    return [date_from + timedelta(days=n) for n in range((date_to - date_from).days + 1)]


def unfinished_ingests(records: Iterable[DayRecord]) -> dict[date, DayRecord]:
    """The days ingest started writing (:data:`INGEST_WRITING`) and has not finished since: no
    ingest record of the day, or an older one. Each with its start record."""
    started: dict[date, DayRecord] = {}
    finished: dict[date, DayRecord] = {}
    for record in records:
        if record.job == INGEST_WRITING:
            started[record.day] = record
        elif record.job == INGEST:
            finished[record.day] = record
    return {
        day: start
        for day, start in sorted(started.items())
        if day not in finished or _is_later(start, finished[day])
    }


def _is_later(start: DayRecord, finish: DayRecord) -> bool:
    if start.processed_at is None or finish.processed_at is None:
        return False
    return start.processed_at > finish.processed_at


def unfinished_text(start: DayRecord) -> str:
    when = "" if start.processed_at is None else f" at {start.processed_at:%Y-%m-%d %H:%M:%S} UTC"
    return f"started writing it{when} and did not finish (killed?): rerun ingest for the day"


def behind_days(records: Iterable[DayRecord], job: str) -> dict[date, str]:
    """The days ingest has that ``job`` has not processed since ingest last wrote them, each with
    why (``never processed`` or ``bronze v<ingest's> is newer than v<the job's>``). A day ingest
    did not finish writing counts as ingested at the version its write would make."""
    records = list(records)
    ingested: dict[date, int] = {}
    processed: dict[date, int] = {}
    for record in records:
        if record.job == INGEST:
            ingested[record.day] = record.bronze_version
        elif record.job == job:
            processed[record.day] = record.bronze_version
    for day, start in unfinished_ingests(records).items():
        ingested[day] = max(ingested.get(day, start.bronze_version), start.bronze_version)
    behind = {}
    for day in sorted(ingested):
        if day not in processed:
            behind[day] = "never processed"
        elif processed[day] < ingested[day]:
            behind[day] = f"bronze v{ingested[day]} is newer than v{processed[day]}"
    return behind


def contiguous_ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """Sorted days as inclusive (first, last) ranges of consecutive days."""
    ranges: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if ranges and day == ranges[-1][1] + timedelta(days=1):
            ranges[-1] = (ranges[-1][0], day)
        else:
            ranges.append((day, day))
    return ranges


def days_text(days: Iterable[date]) -> str:
    """``2026-03-02, 2026-03-04..2026-03-06``: days as a short list of ranges."""
    return ", ".join(
        first.isoformat() if first == last else f"{first}..{last}"
        for first, last in contiguous_ranges(days)
    )


def stale_inputs(records: Iterable[DayRecord], job: str, days: Iterable[date]) -> str | None:
    """Why ``job`` must not compute ``days`` (the jobs it reads from and their days behind, one
    line), or None. What to do is :data:`jobs.failures.FAILURE_RULES`' advice."""
    records = list(records)
    wanted = set(days)
    problems = []
    for upstream in READS[job]:
        behind = sorted(set(behind_days(records, upstream)) & wanted)
        if behind:
            problems.append(f"{upstream} is behind bronze on {days_text(behind)}")
    return "; ".join(problems) or None


def earlier_days_behind(records: Iterable[DayRecord], job: str, date_from: date) -> list[date]:
    """The days before ``date_from`` that ``job`` must process before computing on top of them."""
    return [day for day in behind_days(records, job) if day < date_from]


# --- Delta I/O -----------------------------------------------------------------------------------


def read_records(spark: SparkSession, conf: PipelineConf) -> list[DayRecord]:
    """Every row of ``pipeline_state`` (a few rows per day: collected whole); none, and no table
    created, where it does not exist yet."""
    from jobs.delta_io import local_table_missing, read_table, table_path

    if local_table_missing(table_path(conf, PIPELINE_STATE)):
        return []
    rows = read_table(spark, conf, PIPELINE_STATE).select(
        "job", "date", "bronze_version", "processed_at"
    )
    return [DayRecord(r.job, r.date, int(r.bronze_version), r.processed_at) for r in rows.collect()]


def bronze_version(spark: SparkSession, conf: PipelineConf) -> int:
    """The latest Delta version of bronze (created empty if absent, as every job reads it)."""
    from jobs.delta_io import ensure_table, latest_commit, table_path

    path = table_path(conf, BRONZE_BROKER_EVENTS)
    ensure_table(spark, path, BRONZE_BROKER_EVENTS)
    return latest_commit(spark, path)[0]


def record_processed(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    date_from: date,
    date_to: date,
    version: int,
) -> None:
    """Record that ``job`` processed the days [date_from, date_to] from bronze ``version``,
    replacing what it recorded for them before."""
    from jobs.delta_io import days_predicate, replace_where, rows_frame, sql_string

    if job not in READS and job != INGEST_WRITING:
        raise ValueError(f"{job!r} is not a recorded job ({', '.join(JOBS)})")
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [(job, day, version, now) for day in days_between(date_from, date_to)]
    frame = rows_frame(spark, PIPELINE_STATE, rows)
    predicate = f"job = {sql_string(job)} AND {days_predicate('date', date_from, date_to)}"
    replace_where(spark, conf, PIPELINE_STATE, frame, predicate)


def bronze_days(spark: SparkSession, conf: PipelineConf) -> set[date]:
    """The days bronze holds, from its Delta log's file list (no data is read)."""
    from jobs.delta_io import files_matching

    found = set()
    for path in files_matching(spark, conf, BRONZE_BROKER_EVENTS, "true"):
        match = re.search(r"date=(\d{4}-\d{2}-\d{2})", path)
        if match:
            found.add(date.fromisoformat(match.group(1)))
    return found


Process = Callable[["SparkSession", "PipelineConf", date, date], dict[str, Any]]


def run_recorded(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    process: Process,
    date_from: date,
    date_to: date,
) -> dict[str, Any]:
    """``process`` over [date_from, date_to], after the earlier days behind for ``job`` (each
    contiguous range of them first, oldest first), every range recorded once processed.

    Raises :class:`StaleInputError` before processing anything when a job that ``job`` reads from
    is behind on one of those days. The report is ``process``'s for the asked range, with
    ``caught_up`` (the earlier days processed first, as text) when there were any."""
    records = read_records(spark, conf)
    earlier = earlier_days_behind(records, job, date_from)
    refusal = stale_inputs(records, job, [*earlier, *days_between(date_from, date_to)])
    if refusal:
        raise StaleInputError(refusal)
    for first, last in contiguous_ranges(earlier):
        log.warning(
            "%s %s..%s: the earlier days %s..%s are behind bronze; processing them first",
            job,
            date_from,
            date_to,
            first,
            last,
        )
        _process_and_record(spark, conf, job, process, first, last)
    report = _process_and_record(spark, conf, job, process, date_from, date_to)
    if earlier:
        report["caught_up"] = days_text(earlier)
    return report


def _process_and_record(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    process: Process,
    first: date,
    last: date,
) -> dict[str, Any]:
    version = bronze_version(spark, conf)  # before reading: a later ingest leaves the days behind
    report = process(spark, conf, first, last)
    record_processed(spark, conf, job, first, last, version)
    return report


# --- status --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStatus:
    job: str
    days: int
    first: date | None
    last: date | None
    behind: dict[date, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineStatus:
    """What ``flowctl status`` shows: per job its recorded days and the days behind, and the
    bronze days nothing recorded (ingested before the state table existed, or by hand)."""

    jobs: tuple[JobStatus, ...]
    unrecorded_bronze_days: tuple[date, ...]

    @property
    def up_to_date(self) -> bool:
        return not any(status.behind for status in self.jobs)


def pipeline_status(records: Iterable[DayRecord], in_bronze: Iterable[date]) -> PipelineStatus:
    """Ingest is behind on the days it did not finish writing (:func:`unfinished_ingests`)."""
    records = list(records)
    unfinished = unfinished_ingests(records)
    jobs = []
    for job in JOBS:
        days = sorted(r.day for r in records if r.job == job)
        if job == INGEST:
            behind = {day: unfinished_text(start) for day, start in unfinished.items()}
        else:
            behind = behind_days(records, job)
        jobs.append(
            JobStatus(job, len(days), days[0] if days else None, days[-1] if days else None, behind)
        )
    ingested = {r.day for r in records if r.job in (INGEST, INGEST_WRITING)}
    return PipelineStatus(tuple(jobs), tuple(sorted(set(in_bronze) - ingested)))


def read_status(spark: SparkSession, conf: PipelineConf) -> PipelineStatus:
    return pipeline_status(read_records(spark, conf), bronze_days(spark, conf))

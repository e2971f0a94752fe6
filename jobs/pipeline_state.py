"""What each job has processed, and so which days are behind bronze (table ``pipeline_state``).

Every run of ingest, episodes, daily_metrics and recommend records, per day it processed, the
Delta version of bronze that its rows of the day reflect: ingest the version it wrote, the later
jobs the version they read (taken before reading, so an ingest that commits meanwhile leaves the
day behind rather than recorded as done). A day is *behind* for a job when ingest wrote it at a
newer version than the job's, or when ingest has it and the job never processed it: a crash
between two jobs leaves exactly that.

Ingest also records, before it writes, that it is writing the days (:data:`INGEST_WRITING`, at the
version its write will make): a kill between its bronze commit and its own record (the quarantine
not written yet) would otherwise leave bronze changed under records that say nothing happened. A
day whose latest such start is newer than ingest's latest finish did not finish: ingest is behind
on it until it is rerun, and the later jobs are behind on it unless they read bronze at or past
the version that write would make.

A recommendation as of a day reads its look-back window, so it is behind when a day of the window
changed in bronze since (:func:`recommend_behind`); the next recommend run redoes it first.

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
DAILY_METRICS = "daily_metrics"
RECOMMEND = "recommend"
#: What ingest records, in the ``job`` column, before it writes the days: it is writing them.
INGEST_WRITING = "ingest: writing"
#: What daily_metrics records for the days after its range whose rows it recomputed for the runs
#: concerned (its scope's later days in bronze: a day processed out of order changes the state
#: they start from), at the version of the range's bronze change (:func:`later_days_version`).
#: Recommendations read those rows (:func:`recommend_behind`).
DAILY_METRICS_LATER_DAYS = "daily_metrics: later days"
#: What recommend records, in the ``job`` column, before it computes the days: it started them.
#: A first night killed in recommend left no recommend record at all, which read as a warehouse
#: that does without recommendations: the day was never caught up (a review).
RECOMMEND_STARTED = "recommend: started"
#: The recorded jobs in pipeline order, each with the recorded jobs whose output it reads besides
#: bronze (bronze itself is what ingest's records stand for).
READS: dict[str, tuple[str, ...]] = {
    INGEST: (),
    "episodes": (),
    DAILY_METRICS: ("episodes",),
    RECOMMEND: ("episodes", DAILY_METRICS),
}
JOBS = tuple(READS)
#: Why a day is behind for a job that never processed it.
NEVER_PROCESSED = "never processed"
#: What a job records besides its own name: markers the rules read, not jobs.
MARKERS = (INGEST_WRITING, DAILY_METRICS_LATER_DAYS, RECOMMEND_STARTED)


class StaleInputError(PipelineError):
    """A job would compute days from another job's output that is behind bronze."""


@dataclass(frozen=True)
class DayRecord:
    """One row of ``pipeline_state``: ``job`` processed ``day`` from bronze ``bronze_version``,
    recorded at ``processed_at`` (None: not known, as in tests of the versions alone), reading
    the days from ``evidence_from`` to ``day`` (recommend's look-back window; None: the day)."""

    job: str
    day: date
    bronze_version: int
    processed_at: datetime | None = None
    evidence_from: date | None = None


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


def ingested_versions(records: Iterable[DayRecord]) -> dict[date, int]:
    """Per day ingest has, the bronze version of its rows of the day: the version ingest last
    wrote it at, or for a day it did not finish writing the version that write would make."""
    records = list(records)
    ingested = {r.day: r.bronze_version for r in records if r.job == INGEST}
    for day, start in unfinished_ingests(records).items():
        ingested[day] = max(ingested.get(day, start.bronze_version), start.bronze_version)
    return ingested


def behind_days(records: Iterable[DayRecord], job: str) -> dict[date, str]:
    """The days ingest has that ``job`` has not processed since ingest last wrote them, each with
    why (``never processed`` or ``bronze v<ingest's> is newer than v<the job's>``). A day ingest
    did not finish writing counts as ingested at the version its write would make. Recommend's
    days follow their own rule (:func:`recommend_behind`)."""
    records = list(records)
    if job == RECOMMEND:
        return recommend_behind(records)
    ingested = ingested_versions(records)
    processed = {r.day: r.bronze_version for r in records if r.job == job}
    behind = {}
    for day in sorted(ingested):
        if day not in processed:
            behind[day] = NEVER_PROCESSED
        elif processed[day] < ingested[day]:
            behind[day] = f"bronze v{ingested[day]} is newer than v{processed[day]}"
    return behind


def recommend_behind(records: Iterable[DayRecord]) -> dict[date, str]:
    """The days whose recommendations are behind bronze, each with why.

    A recommendation as of D reads the evidence of its look-back window, the days
    [``evidence_from``, D] (bronze, their episodes and daily metrics). It is behind when one of
    those days was rewritten at a newer bronze version than the one it read: by ingest (a day
    processed out of order, a raw file added to it) or by daily_metrics recomputing it as a later
    day of an earlier day's runs (:data:`DAILY_METRICS_LATER_DAYS`: the state that day carries
    in). Rewrites that no bronze change of the window caused (a later day closing an episode the
    window holds, a run's watermark moving on) leave it as it is: advice as of D, from what
    bronze held of D's window. Recommendations are optional (``flowctl pipeline
    --no-recommend``, a run of one day of the past), so the days ingest has and recommend never
    processed count only after the latest day it processed (``never processed``: a night killed
    before recommend), not in a gap between days it did, and the days it started
    (:data:`RECOMMEND_STARTED`) and never processed (a night killed in recommend, the first one
    included).
    """
    records = list(records)
    processed = {r.day: r for r in records if r.job == RECOMMEND}
    ingested = ingested_versions(records)
    started = {r.day for r in records if r.job == RECOMMEND_STARTED and r.day in ingested} - set(
        processed
    )
    if not processed:
        return dict.fromkeys(sorted(started), NEVER_PROCESSED)
    rewritten = dict(ingested)
    for record in records:
        if record.job == DAILY_METRICS_LATER_DAYS:
            rewritten[record.day] = max(rewritten.get(record.day, -1), record.bronze_version)
    latest = max(processed)
    behind = {}
    for day in sorted({*processed, *started, *(d for d in ingested if d > latest)}):
        record = processed.get(day)
        if record is None:
            behind[day] = NEVER_PROCESSED
            continue
        window = days_between(record.evidence_from or day, day)
        newer = [(d, rewritten[d]) for d in window if rewritten.get(d, -1) > record.bronze_version]
        if newer:
            # The newest version; of a write that rewrote several days, the first of them.
            when, version = max(newer, key=lambda found: (found[1], -found[0].toordinal()))
            behind[day] = (
                f"bronze v{version} of {when} (in its look-back from {window[0]}) is newer "
                f"than v{record.bronze_version}"
            )
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
    line), or None. Recommend reads each day's look-back window and the daily metrics' state
    carried into it, so for it every day up to the last counts. What to do is
    :data:`jobs.failures.FAILURE_RULES`' advice."""
    records = list(records)
    wanted = set(days)
    if job == RECOMMEND and wanted:
        last = max(wanted)
        wanted = {r.day for r in records if r.day <= last} | wanted
    problems = []
    for upstream in READS[job]:
        behind = sorted(set(behind_days(records, upstream)) & wanted)
        if behind:
            problems.append(f"{upstream} is behind bronze on {days_text(behind)}")
    return "; ".join(problems) or None


def earlier_days_behind(records: Iterable[DayRecord], job: str, date_from: date) -> list[date]:
    """The days before ``date_from`` that ``job`` must process before computing on top of them."""
    return [day for day in behind_days(records, job) if day < date_from]


def later_days_to_redo(records: Iterable[DayRecord], job: str, date_to: date) -> list[date]:
    """The days after ``date_to`` that a run of ``job`` redoes after its range: for recommend,
    those it processed whose look-back window was rewritten since (a backfill of an earlier day
    makes the next days' advice stale; days it never processed are left to their own runs). The
    other jobs' later days are part of their scope (jobs/scope.py)."""
    if job != RECOMMEND:
        return []
    behind = behind_days(records, job)
    return [day for day, why in behind.items() if day > date_to and why != NEVER_PROCESSED]


# --- Delta I/O -----------------------------------------------------------------------------------


def read_records(spark: SparkSession, conf: PipelineConf) -> list[DayRecord]:
    """Every row of ``pipeline_state`` (a few rows per day: collected whole); none, and no table
    created, where it does not exist yet."""
    from jobs.delta_io import local_table_missing, read_table, table_path

    if local_table_missing(table_path(conf, PIPELINE_STATE)):
        return []
    rows = read_table(spark, conf, PIPELINE_STATE).select(
        "job", "date", "bronze_version", "processed_at", "evidence_from"
    )
    return [
        DayRecord(r.job, r.date, int(r.bronze_version), r.processed_at, r.evidence_from)
        for r in rows.collect()
    ]


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
    evidence_from: Callable[[date], date] | None = None,
) -> None:
    """Record that ``job`` processed the days [date_from, date_to] from bronze ``version``,
    replacing what it recorded for them before; ``evidence_from(day)``: the first day it read
    for the day (recommend's look-back window), if not the day alone."""
    if job not in READS and job not in MARKERS:
        raise ValueError(f"{job!r} is not a recorded job ({', '.join(JOBS)})")
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [
        (job, day, version, now, evidence_from(day) if evidence_from else None)
        for day in days_between(date_from, date_to)
    ]
    _replace_records(spark, conf, job, date_from, date_to, rows)


def forget_recorded(
    spark: SparkSession, conf: PipelineConf, job: str, date_from: date, date_to: date
) -> None:
    """Delete what ``job`` recorded for the days [date_from, date_to]."""
    _replace_records(spark, conf, job, date_from, date_to, [])


def _replace_records(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    date_from: date,
    date_to: date,
    rows: list[tuple[Any, ...]],
) -> None:
    """``job``'s records of the days [date_from, date_to] replaced by ``rows`` (none: deleted)."""
    from jobs.delta_io import days_predicate, replace_where, rows_frame, sql_string

    frame = rows_frame(spark, PIPELINE_STATE, rows)
    predicate = f"job = {sql_string(job)} AND {days_predicate('date', date_from, date_to)}"
    replace_where(spark, conf, PIPELINE_STATE, frame, predicate)


def _forget_started(spark: SparkSession, conf: PipelineConf, first: date, last: date) -> None:
    """:func:`forget_recorded` of recommend's started marker, on the way out of a failure: its
    own failure (Spark gone with the job) is logged, not raised over the job's."""
    try:
        forget_recorded(spark, conf, RECOMMEND_STARTED, first, last)
    except Exception as error:
        log.warning("recommend %s..%s: its started mark stays: %s", first, last, error)


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
    evidence_from: Callable[[date], date] | None = None,
) -> dict[str, Any]:
    """``process`` over [date_from, date_to], after the earlier days behind for ``job`` (each
    contiguous range of them first, oldest first) and before the later days it redoes
    (:func:`later_days_to_redo`), every range recorded once processed (with ``evidence_from`` as
    :func:`record_processed`'s).

    Raises :class:`StaleInputError` before processing anything when a job that ``job`` reads from
    is behind on one of those days. The report is ``process``'s for the asked range, with
    ``caught_up`` (the earlier days processed first, as text) and ``redone`` (the later days)
    when there were any. A report's ``span_to`` (daily_metrics: the last day it recomputed rows
    of) past the range is recorded as :data:`DAILY_METRICS_LATER_DAYS` and left out of the
    report."""
    records = read_records(spark, conf)
    earlier = earlier_days_behind(records, job, date_from)
    later = later_days_to_redo(records, job, date_to)
    refusal = stale_inputs(records, job, [*earlier, *days_between(date_from, date_to), *later])
    if refusal:
        raise StaleInputError(refusal)
    asked = f"{job} {date_from}..{date_to}"
    _process_ranges(spark, conf, job, process, earlier, evidence_from, asked, EARLIER_TEXT)
    report = _process_and_record(spark, conf, job, process, date_from, date_to, evidence_from)
    _process_ranges(spark, conf, job, process, later, evidence_from, asked, LATER_TEXT)
    if earlier:
        report["caught_up"] = days_text(earlier)
    if later:
        report["redone"] = days_text(later)
    return report


EARLIER_TEXT = "%s: the earlier days %s..%s are behind bronze; processing them first"
LATER_TEXT = "%s: the later days %s..%s read days rewritten since; processing them again"


def _process_ranges(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    process: Process,
    days: list[date],
    evidence_from: Callable[[date], date] | None,
    asked: str,
    why: str,
) -> None:
    """Process and record ``days`` besides the asked range, each contiguous range at once, with a
    warning naming the asked range and ``why``."""
    for first, last in contiguous_ranges(days):
        log.warning(why, asked, first, last)
        _process_and_record(spark, conf, job, process, first, last, evidence_from)


def _process_and_record(
    spark: SparkSession,
    conf: PipelineConf,
    job: str,
    process: Process,
    first: date,
    last: date,
    evidence_from: Callable[[date], date] | None,
) -> dict[str, Any]:
    version = bronze_version(spark, conf)  # before reading: a later ingest leaves the days behind
    if job == RECOMMEND:
        record_processed(spark, conf, RECOMMEND_STARTED, first, last, version)
    try:
        report = process(spark, conf, first, last)
    except Exception:
        if job == RECOMMEND:
            # Failed, not killed: left started, the days would be redone first by every later
            # run, which the same failure would stop each time (a review). A kill
            # (KeyboardInterrupt, SIGKILL) leaves them started, to be caught up.
            _forget_started(spark, conf, first, last)
        raise
    span_to: date | None = report.pop("span_to", None)
    if job == DAILY_METRICS and span_to is not None and span_to > last:
        # Before the job's own record: a kill between the two leaves the days behind for
        # daily_metrics (recommend refused until it reruns), never the later days unmarked.
        changed = later_days_version(read_records(spark, conf), first, last, version)
        if changed is not None:
            later = DAILY_METRICS_LATER_DAYS
            record_processed(spark, conf, later, last + timedelta(days=1), span_to, changed)
    record_processed(spark, conf, job, first, last, version, evidence_from)
    return report


def later_days_version(
    records: Iterable[DayRecord], first: date, last: date, version_read: int
) -> int | None:
    """The bronze version to record for the later days daily_metrics recomputed from the days
    [first, last]: the newest version ingest wrote those days at (the change that makes the later
    days' rows differ), at most the version it read; None when ingest has none of them. A rerun
    on the same bronze thus marks nothing newer than the advice already read."""
    ingested = ingested_versions(records)
    versions = [ingested[day] for day in days_between(first, last) if day in ingested]
    return min(max(versions), version_read) if versions else None


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

"""The events the episodes and daily_metrics jobs read for a :class:`~jobs.scope.Scope`, and
the silver ``carried_events`` they start from (jobs/transforms/carry.py).

A scope's span is computed from the rows carried to the day before it plus the bronze days of the
span, so a nightly run costs what its days hold, not what the run has logged since it began
(issue 22). Whole runs are read instead when a run of the scope has days processed before this
table existed (gold rows before the span and nothing carried), when a run's clock stepped back
over the midnight before the span (an event dated before it logged after one dated in it: the
carried rows are then not the run's state at the span's start, :func:`runs_stepping_back_into`:
the span then starts on the run's first day, and only that run is read whole), and, for the
depth timeline, when a run's bucket width changed (it grows until the run has lasted a day,
jobs/transforms/depth_timeline.py): its earlier buckets must be cut again.

A small span, local and within the conf's ``span.keep_in_memory_max_mb``, is read once and kept
in memory for all the writes of a job (:func:`kept_in_memory`); a larger one is read by each write.

The carried rows at a span's start are final: every earlier bronze day of a run was processed
before the span (the pipeline state, jobs/pipeline_state.py, processes earlier days behind bronze
first), and a rerun of an earlier day makes that day, and so the carried rows from it on, part of
the next span.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from datetime import date, timedelta
from functools import reduce
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import days_predicate, read_table, replace_where, sql_string
from jobs.scope import Scope, processing_scope, runs_in
from jobs.transforms.carry import carried_events
from jobs.transforms.timeutil import micros, utc_date
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import (
    BRONZE_BROKER_EVENTS,
    CARRIED_EVENTS,
)

log = logging.getLogger("flowctl.span_events")

#: What the jobs read of bronze: the event columns and the day.
EVENT_COLUMNS = (*BROKER_EVENTS.names, "date")


@dataclass(frozen=True)
class SpanEvents:
    """The events of a scope's runs: ``events`` (:data:`EVENT_COLUMNS`) and how they were read.

    ``carried``: the rows carried to the day before ``span_from`` plus bronze of the span (events
    dated before the span are there only as carried state); else every event of the runs.
    ``history``: the runs whose carried rows were read (those with events before the span), and
    ``state`` those rows.
    """

    events: DataFrame
    carried: bool
    span_from: date
    span_to: date
    runs: tuple[str, ...]
    history: tuple[str, ...] = ()
    state: DataFrame | None = None

    def describe(self) -> str:
        read = "carried state + span" if self.carried else "whole runs"
        return f"{read} ({self.span_from.isoformat()}..{self.span_to.isoformat()})"


@dataclass(frozen=True)
class CarriedDays:
    """What a run's rows carried to days before a span say (:func:`carried_days`)."""

    #: The latest day before the span carried rows were written for.
    latest: date
    #: The latest seq among those rows of events dated before the span (None: none is).
    latest_seq: int | None
    #: The run's first day: the earliest date among its carried rows (each day it has events
    #: on is carried its latest event dated up to it, jobs/transforms/carry.py ``run_last``).
    first: date


def carried_days(
    spark: SparkSession, conf: PipelineConf, runs: tuple[str, ...], span_from: date
) -> dict[str, CarriedDays]:
    """Per run with rows carried to days before ``span_from``, what they say
    (:class:`CarriedDays`; the run's latest event dated before ``span_from`` is always
    carried, jobs/transforms/carry.py ``run_last``): one Spark job over the small table."""
    before = F.lit(span_from)
    latest = F.struct("carried_to", F.when(F.col("date") < before, F.col("seq")).alias("seq"))
    rows = (
        read_table(spark, conf, CARRIED_EVENTS)
        .where(f"{runs_in(runs)} AND carried_to < DATE '{span_from.isoformat()}'")
        .groupBy("run_id")
        # The latest day, then its latest seq; and the earliest date carried.
        .agg(F.max(latest).alias("latest"), F.min("date").alias("first"))
        .collect()
    )
    return {r.run_id: CarriedDays(r.latest.carried_to, r.latest.seq, r.first) for r in rows}


def whole_runs(spark: SparkSession, conf: PipelineConf, scope: Scope) -> SpanEvents:
    """Every bronze event of the scope's runs (their history was processed without carried
    rows)."""
    runs = scope.runs
    events = read_table(spark, conf, BRONZE_BROKER_EVENTS).where(F.col("run_id").isin(*runs))
    return SpanEvents(events.select(*EVENT_COLUMNS), False, scope.span_from, scope.span_to, runs)


def scope_and_span(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> tuple[Scope, SpanEvents]:
    """The :class:`~jobs.scope.Scope` of a run of the episodes or daily_metrics job over the days
    and the events of its span (:func:`span_events`), the scope reaching back as far as the read
    did: both jobs recompute the same rows."""
    scope = processing_scope(spark, conf, date_from, date_to)
    read = span_events(spark, conf, scope)
    return scope.reaching_back_to(read.span_from), read


def span_events(spark: SparkSession, conf: PipelineConf, scope: Scope) -> SpanEvents:
    """The events to compute the scope's span of its runs from: carried state plus the span's
    bronze days when every run with history before the span (``scope.with_history``: gold rows
    before ``span_from``) has carried rows, else whole runs.

    A run whose clock stepped back over the midnight before the span
    (:func:`runs_stepping_back_into`) is read whole, the span then starting on its first day:
    after a jump forward over several midnights and a step back, rows of days before the span
    (an episode's end, a day's observed seconds up to the watermark) depend on events logged
    later, which no rule of the scope reaches back for. The other runs are read from their rows
    carried to the day before that one, as for any span (and checked again for a step back)."""
    runs, span_from, span_to = scope.runs, scope.span_from, scope.span_to
    if not runs:
        return whole_runs(spark, conf, scope)
    carried = carried_days(spark, conf, runs, span_from)
    uncarried = sorted(set(scope.with_history) - set(carried))
    if uncarried:
        log.info("whole runs read: %s processed before carried state was kept", uncarried)
        return whole_runs(spark, conf, scope)
    bronze = (
        read_table(spark, conf, BRONZE_BROKER_EVENTS)
        .where(days_predicate("date", span_from, span_to))
        .where(F.col("run_id").isin(*runs))
        .select(*EVENT_COLUMNS)
    )
    if not carried:
        return SpanEvents(bronze, True, span_from, span_to, runs)
    stepped_back = runs_stepping_back_into(
        bronze, {run: c.latest_seq for run, c in carried.items() if c.latest_seq is not None}
    )
    if stepped_back:
        first = min(carried[run].first for run in stepped_back)
        log.info(
            "days recomputed from %s: %s logged events dated before %s after some dated in it "
            "(a clock stepping back over midnight): the carried rows are not their state at its "
            "start, and their rows before it may depend on later events",
            first.isoformat(),
            stepped_back,
            span_from.isoformat(),
        )
        # Read again from their first day: they have no carried rows before it, so all their
        # events are read; the scope's other runs start from the rows carried to the day
        # before, not from their own first events (a run of weeks is not read whole because
        # another run's clock stepped), unless one has gold rows before it and no carried ones.
        return span_events(spark, conf, scope.reaching_back_to(first))
    at_start = " OR ".join(
        f"(run_id = {sql_string(run)} AND carried_to = DATE '{c.latest.isoformat()}')"
        for run, c in sorted(carried.items())
    )
    state = read_table(spark, conf, CARRIED_EVENTS).where(at_start).select(*EVENT_COLUMNS)
    return SpanEvents(
        state.unionByName(bronze), True, span_from, span_to, runs, tuple(sorted(carried)), state
    )


def runs_stepping_back_into(bronze: DataFrame, latest_before: dict[str, int]) -> list[str]:
    """The runs of ``latest_before`` (the latest seq of a run's events dated before the span,
    :func:`carried_days`) with an event of the span's ``bronze`` days below it: a clock that
    stepped back over the midnight before the span. The carried rows are the latest of each
    kind among the events dated before the span, which is the run's state at the span's start
    only while those events all come before the span's in seq order. One Spark job, a filter on
    ``run_id`` and ``seq`` that bronze's file statistics and Parquet's row groups answer mostly
    without reading rows."""
    if not latest_before:
        return []
    below = reduce(
        lambda either, other: either | other,
        ((F.col("run_id") == run) & (F.col("seq") < seq) for run, seq in latest_before.items()),
    )
    return sorted(row.run_id for row in bronze.where(below).select("run_id").distinct().collect())


def write_carried_events(spark: SparkSession, conf: PipelineConf, read: SpanEvents) -> int:
    """Replace the runs' carried rows of the span's days by those of ``read``."""
    if not read.runs:
        return 0
    predicate = (
        f"{runs_in(read.runs)} AND {days_predicate('carried_to', read.span_from, read.span_to)}"
    )
    rows = carried_events(read.events, read.span_from, read.span_to)
    return replace_where(spark, conf, CARRIED_EVENTS, rows, predicate)


def earlier_enqueues(spark: SparkSession, conf: PipelineConf, read: SpanEvents) -> DataFrame | None:
    """The enqueues before the span whose transfers complete, held, within it: a held
    transfer's enqueue is no earlier than its completion less its delay (the delay runs from
    the send), so only the days back to the earliest such send are read. None when whole runs
    were read (they hold every enqueue), no run has events before the span, or no held
    transfer reaches back before it."""
    if not read.carried or not read.history:
        return None
    sent = F.timestamp_micros(micros("ts") - F.col("latency_us"))
    held = read.events.where(
        (F.col("event_type") == "transfer_completed")
        & (F.col("latency_us") > 0)
        & (F.col("date") >= F.lit(read.span_from))
    )
    earliest = held.select(F.min(utc_date(sent)).alias("day")).first()
    if earliest is None or earliest.day is None or earliest.day >= read.span_from:
        return None
    before = read.span_from - timedelta(days=1)
    return (
        read_table(spark, conf, BRONZE_BROKER_EVENTS)
        .where(days_predicate("date", earliest.day, before))
        .where(F.col("run_id").isin(*read.history) & (F.col("event_type") == "enqueue"))
        .select(*EVENT_COLUMNS)
    )


def local_files_within(df: DataFrame, max_bytes: int) -> bool:
    """Whether the files ``df`` reads (one Delta file listing per table it scans) are local and
    hold at most ``max_bytes`` together; a file on another file system answers no (its size is
    the cluster's to tell)."""
    total = 0
    for uri in df.inputFiles():
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return False
        total += os.path.getsize(unquote(parsed.path))
        if total > max_bytes:
            return False
    return True


def kept_in_memory(read: SpanEvents, conf: PipelineConf) -> SpanEvents:
    """``read`` with its events cached (memory, then disk) when they are of some runs and their
    files are local and within ``span.keep_in_memory_max_mb`` (:func:`local_files_within`),
    else as it is; the caller unpersists them once its writes are done (:func:`released`).

    Each write of the episodes and daily_metrics jobs otherwise plans and reads the span again,
    Delta listing its tables' files each time: on a few rows that is a third of a write or more
    (a warm episodes call on tests/test_processing_order.py's days 6.9-7.3 -> 5.7-5.8 s,
    daily_metrics 5.0 -> 4.6 s)."""
    if not read.runs or not local_files_within(read.events, conf.span_in_memory_max_bytes):
        return read
    return dataclasses.replace(read, events=read.events.cache())


def released(read: SpanEvents) -> None:
    """Drop the cache :func:`kept_in_memory` may have made (nothing when it made none)."""
    if read.events.is_cached:
        read.events.unpersist()

"""What a run of the episodes and daily_metrics jobs over a range of days recomputes: the runs
concerned and the span of days around the range (:class:`Scope`), read from bronze and the silver
and gold tables by :func:`processing_scope`, and the predicates of the rows they replace.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import date
from functools import reduce

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from jobs.config import PipelineConf
from jobs.delta_io import days_predicate, read_table, sql_string
from jobs.transforms.episodes import overlap_predicate
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)

#: The silver tables of episodes and the gold tables of days: what a run's scope is read from.
EPISODE_TABLES = (QUEUE_FLOW_EPISODES, LINK_STARVATION_EPISODES, BLOCKING_EPISODES)
DAILY_TABLES = (QUEUE_FLOW_DAILY, LINK_STARVATION_DAILY, BLOCKING_DAILY)


#: The bronze sources of :func:`_scope_sources` (a gold or silver source is named by its table).
BRONZE_IN_DAYS = "bronze in the days"
BRONZE_LATER = "bronze after the days"


@dataclass(frozen=True)
class Scope:
    """What a run of the episodes and daily_metrics jobs over [date_from, date_to] recomputes.

    A day's rows are final only once its runs are complete: they depend on the run's watermark
    (an open interval is clipped there, observed seconds end there), on episodes that began
    earlier and may peak later, and on the state carried in from earlier days. So for the runs
    concerned the jobs also recompute, back to ``span_from``, the days whose rows were computed
    against an earlier watermark (the runs' latest gold day before the range) or that hold the
    start of an episode the range touches or of one still open, and forward to ``span_to``, the
    runs' later days in
    bronze (whose state at 00:00 the range may change, e.g. days processed out of order). Other
    runs' rows of those extra days are left alone. The nightly run of the latest day thus also
    refreshes the day before for runs still going, and processing days in any order, or a range
    at once, gives the same tables.
    """

    date_from: date
    date_to: date
    runs: tuple[str, ...]
    span_from: date
    span_to: date
    #: Per run with gold rows before the range, the first day of them, sorted by run.
    gold_from: tuple[tuple[str, date], ...] = ()

    @property
    def with_history(self) -> tuple[str, ...]:
        """The runs with gold rows before ``span_from`` (history processed before the span):
        the span starts from the state carried into it, or from whole runs when one of them has
        none (jobs/span_events.py)."""
        return tuple(run for run, first in self.gold_from if first < self.span_from)

    @property
    def extended(self) -> bool:
        return bool(self.runs) and (self.span_from < self.date_from or self.span_to > self.date_to)

    def reaching_back_to(self, day: date) -> Scope:
        """This scope with its span starting no later than ``day``: its runs' rows and episodes
        from ``day`` on are recomputed too (a clock that stepped back over several midnights,
        jobs/span_events.py)."""
        return dataclasses.replace(self, span_from=min(self.span_from, day))

    def episode_predicate(self) -> str:
        """Silver episodes replaced: those overlapping the range, and the runs' episodes
        overlapping the span, that start within the span (also the filter of what is written).

        Every episode the range can change starts within the span (``span_from`` is the
        earliest start among them); one that began before it ended before the range, and its
        events before the span are not read (only the state carried into it)."""
        predicate = overlap_predicate(self.date_from, self.date_to)
        if self.extended:
            span = overlap_predicate(self.span_from, self.span_to)
            predicate = f"({predicate}) OR ({runs_in(self.runs)} AND {span})"
        return f"({predicate}) AND start_date >= DATE '{self.span_from.isoformat()}'"

    def day_predicate(self) -> str:
        """Gold rows replaced: every row of the range's days, and the runs' rows of the span."""
        predicate = days_predicate("date", self.date_from, self.date_to)
        if not self.extended:
            return predicate
        span = days_predicate("date", self.span_from, self.span_to)
        return f"({predicate}) OR ({runs_in(self.runs)} AND {span})"


def processing_scope(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> Scope:
    """The :class:`Scope` of a run over [date_from, date_to]: the runs concerned and their span.

    The runs concerned: those with bronze events in the days, owning a silver episode
    overlapping them, or spanning them (events before and after, none within: a quiet stretch is
    still observed, and its links still attached, so a day's rows do not depend on the range it
    was processed in). A run that ended stopped or starved before the days is not among them:
    its open episode ends at its watermark, and nothing of it can change until it has new events.
    Their span: back to their latest gold day before the range and the earliest start of their
    episodes the new events may change (those overlapping the range, and the open ones, computed
    against an earlier watermark), forward to their latest bronze day after it.

    One Spark job (:func:`_scope_sources`) reads the small tables and, of bronze, the days and the
    partitions after them (none in the nightly run of the latest day); a second, over bronze
    before the days, only when some run with later events has none in the range."""
    found = _scope_sources(spark, conf, date_from, date_to)
    runs = {r.run_id for r in found if r.in_range}
    later = {r.run_id for r in found if r.source == BRONZE_LATER}
    if later - runs:
        spanning = (
            read_table(spark, conf, BRONZE_BROKER_EVENTS)
            .where(F.col("date") < F.lit(date_from))
            .where(F.col("run_id").isin(*sorted(later - runs)))
            .select("run_id")
            .distinct()
            .collect()
        )
        runs |= {r.run_id for r in spanning}
    if not runs:
        return Scope(date_from, date_to, (), date_from, date_to)
    of_runs = [r for r in found if r.run_id in runs]
    gold = [r for r in of_runs if r.source in {t.name for t in DAILY_TABLES}]
    earlier = [r.last for r in gold]
    earlier += [r.first for r in of_runs if r.source in {t.name for t in EPISODE_TABLES}]
    after = [r.last for r in of_runs if r.source == BRONZE_LATER]
    span_from = min([date_from, *earlier])
    # Gold days are read back to the first before the range, and the span starts no later.
    gold_from: dict[str, date] = {}
    for r in gold:
        gold_from[r.run_id] = min(r.first, gold_from.get(r.run_id, r.first))
    return Scope(
        date_from,
        date_to,
        tuple(sorted(runs)),
        span_from,
        max([date_to, *after]),
        tuple(sorted(gold_from.items())),
    )


def _scope_sources(
    spark: SparkSession, conf: PipelineConf, date_from: date, date_to: date
) -> list[Row]:
    """Per source and run, what the scope of a run over the days is read from, in one Spark job
    over the small gold and silver tables and bronze's partitions of the days and after them:
    rows of ``source``, ``run_id``, ``first`` and ``last`` day, ``in_range`` (the run has events
    or episodes in the days).

    The sources: bronze's days (the runs with events in them), bronze after them (the runs that
    go on, and how far), a gold table's days before the range (the latest is the day the run's
    rows were last computed against a watermark), an episode table's changeable episodes, those
    overlapping the range or still open (the earliest start; overlapping ones put the run in
    range)."""
    bronze = read_table(spark, conf, BRONZE_BROKER_EVENTS)

    def rows(source: str, df: DataFrame, day: str, in_range: Column) -> DataFrame:
        return df.select(
            F.lit(source).alias("source"),
            "run_id",
            F.col(day).alias("day"),
            in_range.alias("in_range"),
        )

    # Bronze's days and the days after them in one scan (a Delta scan's file listing is a Spark
    # job of its own): the source is told by the day.
    in_days = F.col("date") <= F.lit(date_to)
    from_the_days = bronze.where(F.col("date") >= F.lit(date_from))
    sources = [
        from_the_days.select(
            F.when(in_days, F.lit(BRONZE_IN_DAYS)).otherwise(F.lit(BRONZE_LATER)).alias("source"),
            "run_id",
            F.col("date").alias("day"),
            in_days.alias("in_range"),
        )
    ]
    sources += [
        rows(
            table.name,
            read_table(spark, conf, table).where(F.col("date") < F.lit(date_from)),
            "date",
            F.lit(False),
        )
        for table in DAILY_TABLES
    ]
    overlaps = overlap_predicate(date_from, date_to)
    sources += [
        rows(
            table.name,
            read_table(spark, conf, table).where(f"({overlaps}) OR end_ts IS NULL"),
            "start_date",
            F.expr(overlaps),
        )
        for table in EPISODE_TABLES
    ]
    return (
        reduce(DataFrame.unionByName, sources)
        .groupBy("source", "run_id")
        .agg(
            F.min("day").alias("first"),
            F.max("day").alias("last"),
            F.max("in_range").alias("in_range"),
        )
        .collect()
    )


def runs_in(runs: tuple[str, ...]) -> str:
    """The predicate ``run_id IN (...)`` of ``runs`` (SQL string literals)."""
    return f"run_id IN ({', '.join(sql_string(r) for r in runs)})"

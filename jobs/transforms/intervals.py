"""Intervals from per-event states, and their split into UTC days.

Both flow-stopped episodes and credit starvations are "gaps and islands": each event of an entity
(ordered by ``seq``) leaves it in a state that is true or false, and an interval runs from an event
that makes the state true to the next event that makes it false, or stays open.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.timeutil import micros, seconds_between
from schemas.model import US_PER_DAY

DAY_INDEX_EPOCH = date(1970, 1, 1)


def true_intervals(
    rows: DataFrame, keys: Sequence[str], state: str, carry: Sequence[str] = ()
) -> DataFrame:
    """One row per maximal run of events whose ``state`` is true, per ``keys``.

    ``rows`` has ``keys``, ``seq``, ``ts``, ``event_type`` and the boolean ``state`` (null counts as
    false). Returns ``keys``, ``start_seq``, ``start_ts``, the ``carry`` columns as they were at the
    start, and ``end_seq``, ``end_ts``, ``end_event_type`` of the event that made the state false
    (all null while the interval is open).
    """
    in_order = Window.partitionBy(*keys).orderBy("seq")
    is_true = F.coalesce(F.col(state), F.lit(False))
    was_true = F.lag(is_true, 1, False).over(in_order)
    # Only the events where the state flips matter; they alternate start, end, start, end, ...
    flips = (
        rows.withColumn("_is_true", is_true)
        .withColumn("_was_true", was_true)
        .where(F.col("_is_true") != F.col("_was_true"))
    )
    return (
        flips.select(
            *keys,
            F.col("seq").alias("start_seq"),
            F.col("ts").alias("start_ts"),
            *carry,
            F.lead("seq").over(in_order).alias("end_seq"),
            F.lead("ts").over(in_order).alias("end_ts"),
            F.lead("event_type").over(in_order).alias("end_event_type"),
            "_is_true",
        )
        .where("_is_true")
        .drop("_is_true", "_was_true")
    )


def split_by_day(
    intervals: DataFrame, start_ts: Column, end_ts: Column, date_from: date, date_to: date
) -> DataFrame:
    """Cut each interval [start_ts, end_ts) at UTC midnights, keeping the days in [from, to].

    Adds ``date``, ``day_start_us`` and ``clipped_s`` (the interval's seconds within that day); an
    interval spanning several days yields one row per day. Zero-length intervals yield one row with
    0 seconds on their day, so they can still be counted.
    """
    first_day = (date_from - DAY_INDEX_EPOCH).days
    last_day = (date_to - DAY_INDEX_EPOCH).days
    start_us, end_us = micros(start_ts), micros(end_ts)
    # Day indexes (days since the epoch) of the first and last day the interval touches; an
    # interval ending exactly at midnight does not touch the next day.
    start_day = F.floor(start_us / F.lit(US_PER_DAY))
    end_day = F.greatest(start_day, F.floor((end_us - 1) / F.lit(US_PER_DAY)))
    lo = F.greatest(start_day, F.lit(first_day)).cast("int")
    hi = F.least(end_day, F.lit(last_day)).cast("int")
    with_days = (
        intervals.withColumn("_start_us", start_us)
        .withColumn("_end_us", end_us)
        .where(lo <= hi)
        .withColumn("_day", F.explode(F.sequence(lo, hi)))
    )
    day_start = F.col("_day").cast("long") * US_PER_DAY
    clipped = F.least(F.col("_end_us"), day_start + US_PER_DAY) - F.greatest(
        F.col("_start_us"), day_start
    )
    return (
        with_days.withColumn("date", F.date_from_unix_date("_day"))
        .withColumn("day_start_us", day_start)
        .withColumn("clipped_s", seconds_between(F.lit(0), F.greatest(clipped, F.lit(0))))
        .drop("_day", "_start_us", "_end_us")
    )

"""Time arithmetic in integer microseconds since the epoch.

Days are cut in microseconds rather than with ``to_date``/``date_trunc``, which follow the
session time zone: a metric must not change with ``spark.sql.session.timeZone``.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from schemas.model import US_PER_DAY, US_PER_SECOND


def micros(ts: str | Column) -> Column:
    """Microseconds since the epoch of a timestamp column."""
    return F.unix_micros(F.col(ts) if isinstance(ts, str) else ts)


def utc_date(ts: str | Column) -> Column:
    """The UTC calendar day of a timestamp column, whatever the session time zone."""
    return F.date_from_unix_date(F.floor(micros(ts) / F.lit(US_PER_DAY)).cast("int"))


def seconds_between(start_us: Column, end_us: Column) -> Column:
    return (end_us - start_us) / F.lit(float(US_PER_SECOND))


def summed_seconds(seconds: str | Column) -> Column:
    """The sum of a column of seconds that are whole microseconds (the event log's resolution),
    added up as whole microseconds: exact, so the same bits whatever the order of the rows. A sum
    of doubles depends on that order, which a query plan does not fix (two plans of one query
    gave sums differing in the 14th digit)."""
    column = F.col(seconds) if isinstance(seconds, str) else seconds
    return seconds_between(F.lit(0), F.sum(F.round(column * US_PER_SECOND).cast("long")))

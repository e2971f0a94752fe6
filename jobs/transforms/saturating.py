"""Arithmetic on logged longs that holds at a long's largest instead of failing the job.

Under ANSI SQL an overflowing sum or product fails the whole recommend job, every broker's
advice with it (an audit: max-size-bytes near 2^63, 2^40 credits of a 2 GiB message; a review:
two producers logging a capacity of 2^62). A log is not trusted to keep its sizes small, so the
advice's sums and products of logged values go through these: past 2^63 - 1 they read as
2^63 - 1 (the largest max-size-bytes or reject threshold Artemis takes), and an unknown term
keeps the result unknown.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

LONG_MAX = 2**63 - 1

# 20 digits hold a long's sum or a sum of up to ~10^18 longs; a product of two longs needs 38,
# which decimal arithmetic widens to itself.
_WIDE = "decimal(20,0)"


def _wide(column: Column) -> Column:
    return column.cast(_WIDE)


def _saturated(wide: Column) -> Column:
    """A decimal as a long, held at :data:`LONG_MAX` (and at its negative)."""
    # Not F.least: it skips a null, which would read an unknown product as LONG_MAX.
    top = F.lit(LONG_MAX).cast(_WIDE)
    return F.when(wide > top, top).when(wide < -top, -top).otherwise(wide).cast("long")


def saturating_add(left: Column, right: Column) -> Column:
    """``left + right`` of two longs, held at :data:`LONG_MAX` (and at its negative)."""
    return _saturated(_wide(left) + _wide(right))


def saturating_multiply(left: Column, right: Column) -> Column:
    """``left x right`` of two non-negative longs, held at :data:`LONG_MAX`."""
    return _saturated(_wide(left) * _wide(right))


def saturating_sum(column: Column) -> Column:
    """The aggregate sum of a long column, held at :data:`LONG_MAX` (null over no values)."""
    # Spark widens a decimal sum by 10 digits, so the sum itself cannot overflow.
    return _saturated(F.sum(_wide(column)))

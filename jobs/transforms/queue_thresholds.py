"""One threshold dimension of a queue (messages or bytes): the room its stop threshold needs below
the limit, the stop threshold that leaves it, and the decisions taken on it (DESIGN.md §4
"recommendation"; the queue's verdict is decided in recommend_queues.py).

Every function builds Columns over the per-queue evidence (recommend_evidence.py); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.verdict_rules import staged


@dataclass(frozen=True)
class Dimension:
    """One threshold dimension (messages or bytes) and the decisions taken on it."""

    unit: str
    limit: Column
    stop: Column
    resume: Column
    headroom: Column
    worst_overshoot: Column
    target_stop: Column
    flow_off_under_limit: Column
    exceeds_limit: Column
    lower: Column
    raise_: Column
    # The overshoot to allow for does not fit below the limit at all: no stop threshold helps.
    no_room: Column
    # The overshoot to allow for is unknown: a producer without a window (unbounded), or no
    # evidence at all (no producer seen, no overshoot measured). No stop threshold is computed.
    unknown_allowance: Column

    @property
    def at_risk(self) -> Column:
        return self.flow_off_under_limit | self.exceeds_limit

    @property
    def changes_stop(self) -> Column:
        return (self.at_risk | self.lower | self.raise_) & self.target_stop.isNotNull()


def dimension(
    unit: str,
    limit: str,
    stop: str,
    resume: str,
    observed_overshoot: str,
    bound: Column,
    unbounded: Column,
    policy: RecommendPolicy,
    reachable: Column | None = None,
    episodes_at_stop: str | None = None,
) -> Dimension:
    """The decisions on one dimension, from the named evidence columns (the queue's limit, its
    stop and resume thresholds, the worst overshoot observed), Qpid's overshoot ``bound`` and
    whether a producer without a window leaves the overshoot ``unbounded``; ``reachable``: whether
    the queue can reach the limit at all (false: another limit always stops it first), so that
    flow control off under it is no risk; ``episodes_at_stop``: the episodes in which this
    dimension reached its stop threshold (none: the other dimension stopped the queue, and
    raising this one changes nothing)."""
    limit_col = F.coalesce(F.col(limit), F.lit(0))
    stop_col = F.coalesce(F.col(stop), F.lit(0))
    # A resume of 0 under a non-zero stop means "resume at the stop value" (DESIGN.md §2).
    resume_col = F.when(F.coalesce(F.col(resume), F.lit(0)) == 0, stop_col).otherwise(F.col(resume))
    # greatest() skips nulls: an unknown bound falls back on what was observed, and vice versa.
    worst = F.coalesce(F.greatest(F.col(observed_overshoot), bound), F.lit(0))
    limited = limit_col > 0
    headroom = F.when(limited, F.ceil(worst * (1 + policy.safety_margin)).cast("long"))
    # When the producers can overshoot by the whole limit or more, a stop threshold of 1 would
    # only stop the queue sooner without keeping it under the limit: keep the thresholds and
    # say so (the fix is smaller capacity windows or a larger limit).
    no_room = limited & (headroom >= limit_col)
    unknown = unbounded | (F.col(observed_overshoot).isNull() & bound.isNull())
    target = F.when(limited & ~no_room & ~unknown, limit_col - headroom)
    flow_on = stop_col > 0
    # Stop + overshoot past the limit, written without the sum: a bound near a long overflowed
    # it, and ANSI SQL failed the whole job (a review).
    exceeds = limited & flow_on & (worst > limit_col - stop_col)
    stopped_at_all = F.coalesce(F.col("episodes"), F.lit(0)) > 0
    if episodes_at_stop is not None:
        stopped_at_all = stopped_at_all & (F.coalesce(F.col(episodes_at_stop), F.lit(0)) > 0)
    return Dimension(
        unit=unit,
        limit=limit_col,
        stop=stop_col,
        resume=resume_col,
        headroom=headroom,
        worst_overshoot=worst,
        target_stop=target,
        flow_off_under_limit=limited
        & ~flow_on
        & (F.lit(True) if reachable is None else F.coalesce(reachable, F.lit(True))),
        exceeds_limit=exceeds,
        lower=F.coalesce(limited & flow_on & ~exceeds & (stop_col > target), F.lit(False)),
        # Raising only pays off on a queue this dimension stopped: elsewhere it changes nothing.
        raise_=F.coalesce(
            limited
            & flow_on
            & stopped_at_all
            & (target - stop_col > F.lit(policy.keep_band_share) * limit_col),
            F.lit(False),
        ),
        no_room=no_room,
        unknown_allowance=limited & unknown,
    )


def dwell_gap(drain_rate: str, policy: RecommendPolicy) -> Column:
    """The resume gap that makes an episode last ``min_dwell_s`` at the drain rate in column
    ``drain_rate`` (0 without one)."""
    return F.ceil(F.coalesce(F.col(drain_rate), F.lit(0.0)) * policy.min_dwell_s)


def recommended_pair(
    dim: Dimension, drain_rate: str, flapping: Column, policy: RecommendPolicy
) -> tuple[Column, Column]:
    """(stop, resume) to recommend on one dimension: the current pair unless something changes.

    The resume gap is the larger of the current gap and the gap that makes an episode last
    min_dwell_s at the observed drain rate (at least min_hysteresis_share of the stop value).
    """
    stop = F.when(dim.changes_stop, dim.target_stop).otherwise(dim.stop)
    gap_for_dwell = F.greatest(
        dwell_gap(drain_rate, policy), F.ceil(stop * policy.min_hysteresis_share)
    ).cast("long")
    gap = F.greatest(dim.stop - dim.resume, gap_for_dwell)
    resume = (
        F.when(stop == 0, F.lit(0))
        .when(dim.changes_stop | flapping, F.greatest(stop - gap, F.lit(1)))
        .otherwise(dim.resume)
    )
    return stop.cast("long"), resume.cast("long")


def change(unit: str, before: Column, after: Column) -> Column:
    return F.when(before != after, F.format_string(f"{unit} %,d -> %,d", before, after))


def staged_dimension(frame: DataFrame, dim: Dimension) -> tuple[DataFrame, Dimension]:
    """``frame`` with the decisions of ``dim`` computed once (see
    :func:`~jobs.transforms.verdict_rules.staged`), and the dimension over those columns."""
    decisions = {f.name: getattr(dim, f.name) for f in fields(dim) if f.name != "unit"}
    frame, columns = staged(frame, {f"_{dim.unit}_{name}": c for name, c in decisions.items()})
    return frame, Dimension(
        unit=dim.unit, **{name: columns[f"_{dim.unit}_{name}"] for name in decisions}
    )

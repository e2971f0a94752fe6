"""Qpid queue recommendations (DESIGN.md §4 "recommendation"): flow thresholds per Qpid queue
(knob ``qpid.flow_stop_count``, with the resume count and the byte pair beside it).

The stop threshold leaves room below the queue limit for the worst overshoot, the larger of the
worst one observed and Qpid's bound (seed 001: a queue passes its stop threshold by at most the
sum of its producers' capacities; in bytes, that many of the largest message seen), times
``1 + safety_margin``. When that allowance is the whole limit or more, no stop threshold keeps the
queue under its limit: the thresholds are kept and the rationale names the fix (smaller capacity
windows or a larger limit). Ring queues evict at their limit and are kept as they are. The resume
threshold sits far enough below the stop threshold that an episode lasts at least ``min_dwell_s``
at the observed drain rate.

The verdict is the first rule of :data:`QUEUE_RULES` that holds; its rationale quotes every
finding of :data:`QUEUE_FINDINGS` that holds (or, when none does, what was weighed), then the
changes. DataFrame -> DataFrame without I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.queue_thresholds import (
    Dimension,
    change,
    dimension,
    dwell_gap,
    recommended_pair,
    staged_dimension,
)
from jobs.transforms.recommend_evidence import QUEUE, entity_columns
from jobs.transforms.verdict_rules import (
    Decision,
    Facts,
    Finding,
    Rule,
    always,
    counted,
    decide,
    staged,
    stated,
)
from schemas.broker_events import BROKER_QPID
from schemas.recommendations import (
    ENTITY_QUEUE,
    KNOB_QPID_FLOW_STOP_COUNT,
    UNIT_MESSAGES,
    VERDICT_AT_RISK,
    VERDICT_FLAPPING,
    VERDICT_KEEP,
    VERDICT_LOWER,
    VERDICT_RAISE,
)

# -- the facts a queue's rules read -----------------------------------------------------------


def _each_dimension(*findings: Finding) -> tuple[Finding, ...]:
    """``findings`` on messages, then the same on bytes: each reads the queue's facts with the
    dimension as ``dim``."""

    def on(unit: str, part: Callable[[Facts], Column]) -> Callable[[Facts], Column]:
        return lambda q: part(q.but(dim=q.msgs if unit == q.msgs.unit else q.size))

    return tuple(
        Finding(f"{finding.name} ({unit})", on(unit, finding.predicate), on(unit, finding.text))
        for unit in ("msgs", "bytes")
        for finding in findings
    )


def _margin_pct(q: Facts) -> Column:
    return F.lit(q.policy.safety_margin * 100)


def _flapping_unchanged(q: Facts) -> Column:
    """Flapping, yet no resume threshold changes."""
    return q.flapping & (q.resume_msgs == q.msgs.resume) & (q.resume_size == q.size.resume)


def _gap_short_by(dim: Dimension, drain_rate: str, q: Facts) -> Column:
    """Whether the dimension's stop is on and its resume gap is short of the gap
    ``drain_rate`` needs for an episode of ``min_dwell_s`` (``dwell_gap``)."""
    short = (dim.stop > 0) & (dim.stop - dim.resume < dwell_gap(drain_rate, q.policy))
    return F.coalesce(short, F.lit(False))


def _gap_short(q: Facts) -> Column:
    """A dimension in force whose resume gap is short of the drain rate's need (the resume
    cannot go lower: :func:`~jobs.transforms.queue_thresholds.recommended_pair` keeps it >= 1)."""
    return _gap_short_by(q.msgs, "drain_rate_msgs_s", q) | _gap_short_by(
        q.size, "drain_rate_bytes_s", q
    )


def _gap_needed_text(q: Facts) -> Column:
    """The gap each short dimension has and needs, for :func:`_gap_short`'s finding."""

    def one(dim: Dimension, drain_rate: str, unit: str) -> Column:
        return F.when(
            _gap_short_by(dim, drain_rate, q),
            F.format_string(
                f"stop %,d, gap %,d {unit}, %,d needed",
                dim.stop,
                dim.stop - dim.resume,
                dwell_gap(drain_rate, q.policy),
            ),
        )

    return F.concat_ws(
        "; ",
        one(q.msgs, "drain_rate_msgs_s", "msgs"),
        one(q.size, "drain_rate_bytes_s", "bytes"),
    )


def _no_drain_rate() -> Column:
    return F.col("drain_rate_msgs_s").isNull() & F.col("drain_rate_bytes_s").isNull()


#: The evidence a queue's rationale quotes: every finding that holds, in this order.
QUEUE_FINDINGS: tuple[Finding, ...] = (
    Finding(
        "rejections",
        lambda q: q.rejected > 0,
        lambda q: F.format_string("%s rejected at the limit", counted(q.rejected, "message")),
    ),
    Finding(
        "producers without a capacity window",
        lambda q: q.unbounded,
        lambda q: F.format_string(
            "%s without a capacity window: overshoot unbounded", counted(q.uncapped, "producer")
        ),
    ),
    Finding(
        "bytes bound past a long",
        lambda q: q.bound_overflows,
        lambda q: F.format_string(
            "the producers' capacity windows (%,d messages) x the largest message (%,d bytes) "
            "pass 2^63 bytes: overshoot in bytes unbounded",
            F.col("producer_capacity_sum"),
            F.col("max_message_bytes"),
        ),
    ),
    *_each_dimension(
        Finding(
            "flow control off under a limit",
            lambda o: o.dim.flow_off_under_limit,
            lambda o: F.format_string(
                f"flow control off under a limit of %,d {o.dim.unit}", o.dim.limit
            ),
        )
    ),
    *_each_dimension(
        Finding(
            "no overshoot allowance known",
            lambda o: (
                o.dim.unknown_allowance
                & (o.uncapped == 0)
                & ~o.bound_overflows  # said by its own finding
                & (o.dim.at_risk | (o.dim.stop > 0))
            ),
            lambda o: F.lit(
                f"no producer capacity or overshoot seen for {o.dim.unit}: no stop threshold "
                "computed"
            ),
        )
    ),
    *_each_dimension(
        Finding(
            "no room below the limit",
            lambda o: o.dim.no_room,
            # Only the margin may not fit: a stop under limit - overshoot still keeps the queue
            # under the limit (seed 001's bound), and the text must not say none does.
            # The overshoot as the evidence shows it (the bound), then with the margin: the
            # margin's figure alone read as contradicting the bound beside it (a review).
            lambda o: F.concat(
                F.format_string(
                    f"producers can overshoot by %,d {o.dim.unit} (worst seen or bounded by their "
                    "capacity windows), %,d with the %.0f%% margin, the whole limit of %,d",
                    o.dim.worst_overshoot,
                    o.dim.headroom,
                    _margin_pct(o),
                    o.dim.limit,
                ),
                F.when(
                    o.dim.worst_overshoot < o.dim.limit,
                    F.format_string(
                        ": a stop threshold of at most %,d keeps the queue under the limit but "
                        "leaves no room for the margin",
                        o.dim.limit - o.dim.worst_overshoot,
                    ),
                ).otherwise(F.lit(" or more: no stop threshold keeps the queue under it")),
                F.lit("; reduce the windows or raise the limit"),
            ),
        ),
        Finding(
            "stop plus overshoot passes the limit",
            lambda o: o.dim.exceeds_limit & ~o.dim.no_room,
            lambda o: F.format_string(
                f"stop %,d + overshoot allowance %,d {o.dim.unit} (worst seen or bounded by the "
                "producers' capacity windows) passes the limit %,d",
                o.dim.stop,
                o.dim.worst_overshoot,
                o.dim.limit,
            ),
        ),
    ),
    Finding(
        "short episodes",
        lambda q: q.flapping,
        lambda q: F.format_string(
            "%,d of %,d episodes shorter than %.1fs (median %.2fs)",
            q.short,
            F.col("closed_episodes"),
            F.lit(q.policy.min_dwell_s),
            F.col("median_episode_s"),
        ),
    ),
    # Flapping, yet nothing to change: say why rather than leave a verdict without a change.
    Finding(
        "flapping without a drain rate",
        lambda q: _flapping_unchanged(q) & _no_drain_rate(),
        lambda q: F.lit(
            "no drain rate measured (no episode with a duration): the resume gap "
            "cannot be sized, thresholds kept"
        ),
    ),
    # The resume cannot go below 1: a stop too low for the gap the drain rate needs keeps it
    # there, and the gap does not cover the dwell time (an audit: stop 10, resume 1, 590
    # messages needed, was told the gap already covers it).
    Finding(
        "flapping under a stop too low for the resume gap",
        lambda q: _flapping_unchanged(q) & ~_no_drain_rate() & _gap_short(q),
        lambda q: F.format_string(
            "the resume gap the drain rate needs for %.1fs episodes does not fit under the stop "
            "(%s): resume is at its lowest, 1; a higher stop, where the limit leaves room for "
            "it, would widen the gap",
            F.lit(q.policy.min_dwell_s),
            _gap_needed_text(q),
        ),
    ),
    Finding(
        "flapping with a wide enough resume gap",
        lambda q: _flapping_unchanged(q) & ~_no_drain_rate() & ~_gap_short(q),
        lambda q: F.lit(
            "the current resume gap already covers the dwell time at the measured "
            "drain rate: the episodes are short for another reason (bursty consumers?)"
        ),
    ),
    *_each_dimension(
        Finding(
            "too little room below the limit",
            lambda o: o.dim.lower,
            lambda o: F.format_string(
                f"stop %,d leaves %,d {o.dim.unit} below the limit, %,d needed",
                o.dim.stop,
                o.dim.limit - o.dim.stop,
                o.dim.headroom,
            ),
        )
    ),
    *_each_dimension(
        Finding(
            "stopped with room to spare",
            lambda o: o.dim.raise_ & ~o.dim.lower,
            lambda o: F.format_string(
                f"stopped %,.0fs with %,d {o.dim.unit} of room where %,d suffice",
                F.coalesce(F.col("time_stopped_s"), F.lit(0.0)),
                o.dim.limit - o.dim.stop,
                o.dim.headroom,
            ),
        )
    ),
)


def _weighed(q: Facts) -> Column:
    """What was weighed, for a queue no finding is stated for: the episodes and the room the
    stop threshold needs (and, with byte thresholds in force, the room in bytes)."""
    msgs, size = q.msgs, q.size
    # qpid.max_count 0: no count limit, so no room to leave under one (an audit: "0 of room
    # needed below the limit" named a limit the queue does not have).
    room = F.when(
        msgs.limit > 0,
        F.format_string(
            "%,d of room needed below the limit (incl. %.0f%% margin)",
            F.coalesce(msgs.headroom, F.lit(0)),
            _margin_pct(q),
        ),
    ).otherwise(F.lit("no count limit to leave room under"))
    weighed_msgs = F.format_string(
        "%s; overshoot allowance %,d msgs (worst seen or bounded by the producers' "
        "capacity windows), %s",
        counted(F.coalesce(F.col("episodes"), F.lit(0)), "episode"),
        msgs.worst_overshoot,
        room,
    )
    weighed_bytes = F.when(
        size.stop > 0,
        F.when(
            size.limit > 0,
            F.format_string(
                "; bytes: overshoot allowance %,d bytes (worst seen or bounded by the producers' "
                "capacity windows x the largest message), stop %,d leaves %,d bytes below the "
                "limit of %,d, %,d needed (incl. %.0f%% margin)",
                size.worst_overshoot,
                size.stop,
                size.limit - size.stop,
                size.limit,
                size.headroom,
                _margin_pct(q),
            ),
        ).otherwise(
            F.format_string(
                "; bytes: stop %,d bytes kept, no byte limit to leave room under", size.stop
            )
        ),
    ).otherwise(F.lit(""))
    return F.concat(weighed_msgs, weighed_bytes)


def _findings(q: Facts) -> Column:
    """The findings that hold, or what was weighed when none does."""
    return F.when(q.stated == "", _weighed(q)).otherwise(q.stated)


RING_EXEMPT = (
    "ring queue without flow thresholds: it evicts its oldest messages at the limit, and "
    "flow control is not applied to it by default"
)

#: A queue's verdict: the first rule that holds.
QUEUE_RULES: tuple[Rule, ...] = (
    # Ring queues make room by evicting their oldest messages: flow control does not apply to
    # them (seed 001), so they keep whatever they have.
    Rule("ring queue", lambda q: q.ring, VERDICT_KEEP, lambda q: F.lit(RING_EXEMPT)),
    Rule("overflow possible", lambda q: q.at_risk, VERDICT_AT_RISK, _findings),
    # A lowered stop outranks flapping: the change is then protective (what `flowctl whatif`
    # judges it by), with the resume gap widened too.
    Rule("margin eaten", lambda q: q.msgs.lower | q.size.lower, VERDICT_LOWER, _findings),
    Rule("flapping", lambda q: q.flapping, VERDICT_FLAPPING, _findings),
    Rule("room to spare", lambda q: q.msgs.raise_ | q.size.raise_, VERDICT_RAISE, _findings),
    Rule("thresholds fit", always, VERDICT_KEEP, _findings),
)


# -- the recommendation -----------------------------------------------------------------------


def _bytes_bound() -> Column:
    """The overshoot bound in bytes: the producers' capacity x the largest message; null past a
    long (ANSI SQL failed the whole job on it, every broker's advice with it: an audit)."""
    return F.try_multiply(F.col("producer_capacity_sum"), F.col("max_message_bytes"))


def _bytes_bound_overflows() -> Column:
    """Both factors logged and their product past a long: no byte count bounds the overshoot."""
    return (
        F.col("producer_capacity_sum").isNotNull()
        & F.col("max_message_bytes").isNotNull()
        & _bytes_bound().isNull()
    )


def _dimensions(
    joined: DataFrame, policy: RecommendPolicy
) -> tuple[DataFrame, Dimension, Dimension]:
    """``joined`` with the decisions on messages and on bytes staged, and the two dimensions."""
    uncapped = F.coalesce(F.col("uncapped_producers"), F.lit(0))
    msgs = dimension(
        "msgs",
        "max_count",
        "flow_stop_count",
        "flow_resume_count",
        "max_overshoot_msgs",
        F.col("producer_capacity_sum"),
        uncapped > 0,
        policy,
        episodes_at_stop="episodes_at_stop_msgs",
    )
    size = dimension(
        "bytes",
        "max_size",
        "flow_stop_size",
        "flow_resume_size",
        "max_overshoot_bytes",
        _bytes_bound(),
        (uncapped > 0) | _bytes_bound_overflows(),
        policy,
        # Under a count limit, the bytes can reach max_size only if that many of the largest
        # messages seen exceed it (seed 001's queue of 200 x 512 B never nears the 100 MiB default).
        # Past a long (null), they do.
        reachable=(F.coalesce(F.col("max_count"), F.lit(0)) == 0)
        | (F.try_multiply(F.col("max_count"), F.col("max_message_bytes")) > F.col("max_size")),
        episodes_at_stop="episodes_at_stop_bytes",
    )
    joined, msgs = staged_dimension(joined, msgs)
    joined, size = staged_dimension(joined, size)
    return joined, msgs, size


def _named(columns: dict[str, Column]) -> dict[str, Column]:
    """Staged columns by the names of the facts they are ("_short" is ``short``)."""
    return {name.lstrip("_"): column for name, column in columns.items()}


def _queue_facts(joined: DataFrame, policy: RecommendPolicy) -> tuple[DataFrame, Facts]:
    """``joined`` with a queue's decisions staged, and the facts :data:`QUEUE_RULES` and
    :data:`QUEUE_FINDINGS` read: ``policy``; ``msgs`` and ``size``, the two dimensions; the
    counts ``short`` (episodes), ``rejected`` (messages) and ``uncapped`` (producers without a
    window); ``unbounded`` (such producers on a queue with a limit), ``bound_overflows`` (the
    bytes bound past a long, on a queue with a byte limit), ``flapping``, ``at_risk``,
    ``ring`` (exempt); and the thresholds to recommend, ``stop_msgs``, ``resume_msgs``,
    ``stop_size``, ``resume_size``. What the findings state comes later (``stated``)."""
    joined, msgs, size = _dimensions(joined, policy)
    joined, counts = staged(
        joined,
        {
            f"_{name}": F.coalesce(F.col(column), F.lit(0))
            for name, column in (
                ("short", "short_episodes"),
                ("rejected", "rejected_msgs"),
                ("uncapped", "uncapped_producers"),
            )
        },
    )
    short, rejected, uncapped = counts["_short"], counts["_rejected"], counts["_uncapped"]
    unbounded = ((msgs.limit > 0) | (size.limit > 0)) & (uncapped > 0)
    bound_overflows = (size.limit > 0) & F.coalesce(_bytes_bound_overflows(), F.lit(False))
    # Ring queues make room by evicting; exempt only while their flow control is off: explicit
    # thresholds on a ring queue do apply (the engine honours them), and passing the limit then
    # evicts, i.e. loses, messages.
    policy_name = F.coalesce(F.col("limit_policy"), F.lit(""))
    is_ring = policy_name.isin("ring", "ring-strict") | (
        (policy_name == "") & F.coalesce(F.col("_evicts"), F.lit(False))
    )
    joined, decided = staged(
        joined,
        {
            "_unbounded": unbounded,
            "_bound_overflows": bound_overflows,
            "_flapping": (short >= policy.flapping_min_short_episodes)
            & (short >= F.col("closed_episodes") * policy.flapping_short_share),
            "_at_risk": (rejected > 0) | unbounded | bound_overflows | msgs.at_risk | size.at_risk,
            "_ring": is_ring & (msgs.stop == 0) & (size.stop == 0),
        },
    )
    ring, flapping = decided["_ring"], decided["_flapping"]
    joined, thresholds = staged(
        joined,
        {
            name: F.when(ring, current).otherwise(recommended).cast("long")
            for name, current, recommended in zip(
                ("_stop_msgs", "_resume_msgs", "_stop_size", "_resume_size"),
                (msgs.stop, msgs.resume, size.stop, size.resume),
                (
                    *recommended_pair(msgs, "drain_rate_msgs_s", flapping, policy),
                    *recommended_pair(size, "drain_rate_bytes_s", flapping, policy),
                ),
                strict=True,
            )
        },
    )
    facts = {**_named(counts), **_named(decided), **_named(thresholds)}
    return joined, Facts(policy=policy, msgs=msgs, size=size, **facts)


def recommend_queues(
    settings: DataFrame,
    producers: DataFrame,
    episode_evidence: DataFrame,
    daily_evidence: DataFrame,
    policy: RecommendPolicy,
) -> DataFrame:
    """One recommendation per queue, with verdict, evidence and rationale (columns of the schema
    that concern queues; the caller adds the date columns)."""
    joined = (
        settings.join(producers, list(QUEUE), "left")
        .join(episode_evidence, list(QUEUE), "left")
        .join(daily_evidence, list(QUEUE), "left")
    )
    joined, facts = _queue_facts(joined, policy)
    changes = F.concat_ws(
        ", ",
        change("stop msgs", facts.msgs.stop, facts.stop_msgs),
        change("resume msgs", facts.msgs.resume, facts.resume_msgs),
        change("stop bytes", facts.size.stop, facts.stop_size),
        change("resume bytes", facts.size.resume, facts.resume_size),
    )
    joined, said = staged(joined, {"_reasons": stated(QUEUE_FINDINGS, facts), "_changes": changes})
    facts = facts.but(stated=said["_reasons"])
    changed = said["_changes"]
    decision = decide(
        QUEUE_RULES,
        facts,
        notes=F.when(changed != "", F.concat(F.lit(" => "), changed)).otherwise(F.lit("")),
    )
    return _queue_rows(joined, facts, decision)


def _queue_rows(joined: DataFrame, q: Facts, decision: Decision) -> DataFrame:
    """The schema's queue columns; the knob columns name the stop count (the first threshold of
    the four, which the other threshold columns complete)."""
    observed = F.col("_observed_s")
    return joined.select(
        *entity_columns(ENTITY_QUEUE, "queue"),
        decision.verdict.alias("verdict"),
        decision.rationale.alias("rationale"),
        F.lit(BROKER_QPID).alias("broker_kind"),
        F.lit(KNOB_QPID_FLOW_STOP_COUNT).alias("knob"),
        q.msgs.stop.alias("current_value"),
        q.stop_msgs.alias("recommended_value"),
        F.lit(UNIT_MESSAGES).alias("unit"),
        decision.rule.alias("rule"),
        "max_count",
        "max_size",
        q.msgs.stop.alias("current_flow_stop_count"),
        q.msgs.resume.alias("current_flow_resume_count"),
        q.size.stop.alias("current_flow_stop_size"),
        q.size.resume.alias("current_flow_resume_size"),
        q.stop_msgs.alias("recommended_flow_stop_count"),
        q.resume_msgs.alias("recommended_flow_resume_count"),
        q.stop_size.alias("recommended_flow_stop_size"),
        q.resume_size.alias("recommended_flow_resume_size"),
        F.coalesce(F.col("episodes"), F.lit(0)).alias("episodes"),
        F.coalesce(F.col("short_episodes"), F.lit(0)).alias("short_episodes"),
        "median_episode_s",
        F.coalesce(F.col("time_stopped_s"), F.lit(0.0)).alias("time_stopped_s"),
        F.when(observed > 0, F.col("time_stopped_s") / observed).alias("stopped_share"),
        F.col("rejected_msgs"),
        "peak_depth_msgs",
        "peak_depth_bytes",
        "max_overshoot_msgs",
        "max_overshoot_bytes",
        "producer_capacity_sum",
        F.coalesce(F.col("uncapped_producers"), F.lit(0)).alias("uncapped_producers"),
        "max_message_bytes",
        q.msgs.headroom.alias("headroom_msgs"),
        q.size.headroom.alias("headroom_bytes"),
        "drain_rate_msgs_s",
        "drain_rate_bytes_s",
    )

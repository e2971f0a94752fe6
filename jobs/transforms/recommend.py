"""Recommendations (DESIGN.md §4 "recommendation"): gold ``threshold_recommendations`` rows.

Queues: the stop threshold leaves room below the queue limit for the worst overshoot, the larger of
the worst one observed and Qpid's bound (seed 001: a queue passes its stop threshold by at most the
sum of its producers' capacities; in bytes, that many of the largest message seen), times
``1 + safety_margin``. When that allowance is the whole limit or more, no stop threshold keeps the
queue under its limit: the thresholds are kept and the rationale names the fix (smaller capacity
windows or a larger limit). Ring queues evict at their limit and are kept as they are. The resume
threshold sits far enough below the stop threshold that an episode
lasts at least ``min_dwell_s`` at the observed drain rate. Consumer links: credit >= consumption
rate x round trip + top-up batch (Kung & Morris, "Credit-based flow control for ATM networks"),
the rate being the one the link runs at while it has traffic to carry (deliveries per second of
its backlogged time, per attached second when the log gives none), in the link's credit unit
(messages, or bytes for Artemis CORE consumers: rate x mean message size); a starved link that
already had that much credit is kept, its consumer replenishing late.

Every function is DataFrame -> DataFrame without I/O; the inputs are the bronze, silver and gold
rows of the evidence window, and the output has the schema's columns in order. The policy is read
and checked in jobs/recommend_policy.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.timeutil import micros, seconds_between, utc_date
from schemas.recommendations import (
    ENTITY_CONSUMER_LINK,
    ENTITY_QUEUE,
    THRESHOLD_RECOMMENDATIONS,
    VERDICT_AT_RISK,
    VERDICT_FLAPPING,
    VERDICT_KEEP,
    VERDICT_LOWER,
    VERDICT_RAISE,
)

QUEUE = ("broker", "queue")
LINK = ("broker", "link")


def _latest(column: str) -> Column:
    """The column's value at the latest event (by ts, then seq) where it is not null."""
    order = F.when(F.col(column).isNotNull(), F.struct("ts", "seq"))
    return F.max_by(column, order).alias(column)


def _is(event_type: str) -> Column:
    return F.col("event_type") == event_type


# -- queue evidence ---------------------------------------------------------------------------


def queue_settings(events: DataFrame) -> DataFrame:
    """Per queue: the limits and thresholds in force at its latest event, runs, rejections and the
    largest message enqueued (the bytes bound is capacity x that size)."""
    return (
        events.where(F.col("queue").isNotNull())
        .groupBy(*QUEUE)
        .agg(
            *(
                _latest(c)
                for c in (
                    "max_count",
                    "max_size",
                    "flow_stop_count",
                    "flow_resume_count",
                    "flow_stop_size",
                    "flow_resume_size",
                )
            ),
            # The limit policy a queue was declared with (the engine logs it in the detail).
            F.max_by(
                F.get_json_object("detail", "$.policy"),
                F.when(_is("queue_declared") & F.col("detail").isNotNull(), F.struct("ts", "seq")),
            ).alias("limit_policy"),
            # A ring queue also shows by its evictions, when its declaration is older than the
            # look-back (a long collector session).
            F.max(_is("ring_evicted")).alias("_evicts"),
            F.countDistinct("run_id").alias("runs"),
            F.count(F.when(_is("message_rejected"), 1)).alias("rejected_msgs"),
            F.max(F.when(_is("enqueue"), F.col("size_bytes"))).alias("max_message_bytes"),
        )
    )


def queue_producers(events: DataFrame) -> DataFrame:
    """Per queue: the overshoot bound from its producers' capacities (DESIGN §2: "at most the sum
    of its producers' capacities") and how many producers had no window at all.

    Producers of different runs never send at the same time (a run is one timeline), so the bound
    is the largest per-run sum, not the sum over the look-back: seven nightly collector sessions
    of one producer bound the overshoot by its one window, not seven. Within a run each producer
    counts once, at the largest window it had.
    """
    per_producer = (
        events.where(_is("enqueue") & F.col("queue").isNotNull() & F.col("link").isNotNull())
        .groupBy(*QUEUE, "run_id", "link")
        .agg(F.max("capacity").alias("capacity"))
    )
    per_run = per_producer.groupBy(*QUEUE, "run_id").agg(
        F.sum("capacity").alias("producer_capacity_sum"),
        F.count(F.when(F.col("capacity").isNull(), 1)).alias("uncapped_producers"),
    )
    return per_run.groupBy(*QUEUE).agg(
        F.max("producer_capacity_sum").alias("producer_capacity_sum"),
        F.max("uncapped_producers").alias("uncapped_producers"),
    )


def queue_episode_evidence(episodes: DataFrame, policy: RecommendPolicy) -> DataFrame:
    """Per queue, from silver episodes: counts, short episodes, worst overshoot and drain rates.

    The net drain rate of a closed episode is (peak depth - resume threshold) / duration: how fast
    the queue fell from its peak to where flow resumed, producers' in-flight windows included.
    """
    closed = ~F.col("is_open") & F.col("duration_s").isNotNull()
    timed = closed & (F.col("duration_s") > 0)

    def drain(peak: str, stop: str, resume: str) -> Column:
        # A resume of 0 under a non-zero stop resumes at the stop value (DESIGN.md §2).
        effective = F.when(F.coalesce(F.col(resume), F.lit(0)) == 0, F.col(stop)).otherwise(
            F.col(resume)
        )
        return F.when(
            timed & (effective > 0),
            F.greatest(F.col(peak) - effective, F.lit(0)) / F.col("duration_s"),
        )

    quantile = policy.drain_rate_quantile
    return episodes.groupBy(*QUEUE).agg(
        F.count(F.lit(1)).alias("episodes"),
        F.count(F.when(closed, 1)).alias("closed_episodes"),
        F.count(F.when(closed & (F.col("duration_s") < policy.min_dwell_s), 1)).alias(
            "short_episodes"
        ),
        F.percentile(F.when(closed, F.col("duration_s")), 0.5).alias("median_episode_s"),
        F.max("overshoot_msgs").alias("max_overshoot_msgs"),
        F.max("overshoot_bytes").alias("max_overshoot_bytes"),
        F.percentile(
            drain("peak_depth_msgs", "flow_stop_count", "flow_resume_count"), quantile
        ).alias("drain_rate_msgs_s"),
        F.percentile(
            drain("peak_depth_bytes", "flow_stop_size", "flow_resume_size"), quantile
        ).alias("drain_rate_bytes_s"),
    )


def queue_daily_evidence(queue_daily: DataFrame) -> DataFrame:
    """Per queue, from gold daily rows (summed over days and runs): time stopped and peak depth."""
    return queue_daily.groupBy(*QUEUE).agg(
        F.sum("time_stopped_s").alias("time_stopped_s"),
        F.sum("observed_s").alias("_observed_s"),
        F.max("max_depth_msgs").alias("peak_depth_msgs"),
        F.max("max_depth_bytes").alias("peak_depth_bytes"),
    )


# -- queue policy -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dimension:
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


def _dimension(
    unit: str,
    limit: str,
    stop: str,
    resume: str,
    observed_overshoot: str,
    bound: Column,
    unbounded: Column,
    policy: RecommendPolicy,
) -> _Dimension:
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
    exceeds = limited & flow_on & (stop_col + worst > limit_col)
    stopped_at_all = F.coalesce(F.col("episodes"), F.lit(0)) > 0
    return _Dimension(
        unit=unit,
        limit=limit_col,
        stop=stop_col,
        resume=resume_col,
        headroom=headroom,
        worst_overshoot=worst,
        target_stop=target,
        flow_off_under_limit=limited & ~flow_on,
        exceeds_limit=exceeds,
        lower=F.coalesce(limited & flow_on & ~exceeds & (stop_col > target), F.lit(False)),
        # Raising only pays off on a queue that actually stopped: elsewhere it changes nothing.
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


def _recommended_pair(
    dim: _Dimension, drain_rate: str, flapping: Column, policy: RecommendPolicy
) -> tuple[Column, Column]:
    """(stop, resume) to recommend on one dimension: the current pair unless something changes.

    The resume gap is the larger of the current gap and the gap that makes an episode last
    min_dwell_s at the observed drain rate (at least min_hysteresis_share of the stop value).
    """
    stop = F.when(dim.changes_stop, dim.target_stop).otherwise(dim.stop)
    gap_for_dwell = F.greatest(
        F.ceil(F.coalesce(F.col(drain_rate), F.lit(0.0)) * policy.min_dwell_s),
        F.ceil(stop * policy.min_hysteresis_share),
    ).cast("long")
    gap = F.greatest(dim.stop - dim.resume, gap_for_dwell)
    resume = (
        F.when(stop == 0, F.lit(0))
        .when(dim.changes_stop | flapping, F.greatest(stop - gap, F.lit(1)))
        .otherwise(dim.resume)
    )
    return stop.cast("long"), resume.cast("long")


def _change(unit: str, before: Column, after: Column) -> Column:
    return F.when(before != after, F.format_string(f"{unit} %d -> %d", before, after))


def _staged(frame: DataFrame, columns: Mapping[str, Column]) -> tuple[DataFrame, dict[str, Column]]:
    """``frame`` with ``columns`` computed once, and references to them.

    A Column is an expression tree that Spark copies into every expression built on it; the
    verdict, the recommended thresholds and the rationale each build on the same decisions, so
    unstaged they made a plan of hundreds of kilobytes that took Spark longer to optimise (again
    after each stage of adaptive execution) than the data took to process. Spark does not merge a
    staged expression back into the several expressions that use it.
    """
    return frame.withColumns(dict(columns)), {name: F.col(name) for name in columns}


def _staged_dimension(frame: DataFrame, dim: _Dimension) -> tuple[DataFrame, _Dimension]:
    """``frame`` with the decisions of ``dim`` computed once (see :func:`_staged`), and the
    dimension over those columns."""
    decisions = {f.name: getattr(dim, f.name) for f in fields(dim) if f.name != "unit"}
    frame, staged = _staged(frame, {f"_{dim.unit}_{name}": c for name, c in decisions.items()})
    return frame, _Dimension(
        unit=dim.unit, **{name: staged[f"_{dim.unit}_{name}"] for name in decisions}
    )


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
    bytes_bound = F.col("producer_capacity_sum") * F.col("max_message_bytes")
    uncapped = F.coalesce(F.col("uncapped_producers"), F.lit(0))
    msgs = _dimension(
        "msgs",
        "max_count",
        "flow_stop_count",
        "flow_resume_count",
        "max_overshoot_msgs",
        F.col("producer_capacity_sum"),
        uncapped > 0,
        policy,
    )
    size = _dimension(
        "bytes",
        "max_size",
        "flow_stop_size",
        "flow_resume_size",
        "max_overshoot_bytes",
        bytes_bound,
        uncapped > 0,
        policy,
    )
    joined, msgs = _staged_dimension(joined, msgs)
    joined, size = _staged_dimension(joined, size)
    short = F.coalesce(F.col("short_episodes"), F.lit(0))
    rejected = F.coalesce(F.col("rejected_msgs"), F.lit(0))
    limited = (msgs.limit > 0) | (size.limit > 0)
    joined, staged = _staged(
        joined,
        {
            "_flapping": (short >= policy.flapping_min_short_episodes)
            & (short >= F.col("closed_episodes") * policy.flapping_short_share),
            "_at_risk": (rejected > 0) | (limited & (uncapped > 0)) | msgs.at_risk | size.at_risk,
        },
    )
    flapping, at_risk = staged["_flapping"], staged["_at_risk"]
    # Ring queues make room by evicting their oldest messages: flow control does not apply to
    # them (seed 001), so they keep whatever they have.
    policy_name = F.coalesce(F.col("limit_policy"), F.lit(""))
    is_ring = policy_name.isin("ring", "ring-strict") | (
        (policy_name == "") & F.coalesce(F.col("_evicts"), F.lit(False))
    )
    # Exempt only while its flow control is off: explicit thresholds on a ring queue do apply
    # (the engine honours them), and passing the limit then evicts, i.e. loses, messages.
    joined, staged = _staged(joined, {"_ring": is_ring & (msgs.stop == 0) & (size.stop == 0)})
    ring = staged["_ring"]
    recommended_thresholds = {
        name: F.when(ring, current).otherwise(recommended).cast("long")
        for name, current, recommended in zip(
            ("_stop_msgs", "_resume_msgs", "_stop_size", "_resume_size"),
            (msgs.stop, msgs.resume, size.stop, size.resume),
            (
                *_recommended_pair(msgs, "drain_rate_msgs_s", flapping, policy),
                *_recommended_pair(size, "drain_rate_bytes_s", flapping, policy),
            ),
            strict=True,
        )
    }
    joined, staged = _staged(
        joined,
        {
            "_verdict": F.when(ring, VERDICT_KEEP)
            .when(at_risk, VERDICT_AT_RISK)
            # A lowered stop outranks flapping: the change is then protective (what `flowctl
            # whatif` judges it by), with the resume gap widened too.
            .when(msgs.lower | size.lower, VERDICT_LOWER)
            .when(flapping, VERDICT_FLAPPING)
            .when(msgs.raise_ | size.raise_, VERDICT_RAISE)
            .otherwise(VERDICT_KEEP),
            **recommended_thresholds,
        },
    )
    verdict = staged["_verdict"]
    stop_msgs, resume_msgs, stop_size, resume_size = (
        staged[name] for name in recommended_thresholds
    )
    margin_pct = F.lit(policy.safety_margin * 100)
    reasons = F.concat_ws(
        "; ",
        F.when(rejected > 0, F.format_string("%d messages rejected at the limit", rejected)),
        F.when(
            limited & (uncapped > 0),
            F.format_string("%d producers have no capacity window: overshoot unbounded", uncapped),
        ),
        *(
            F.when(
                d.flow_off_under_limit,
                F.format_string(f"flow control off under a limit of %d {d.unit}", d.limit),
            )
            for d in (msgs, size)
        ),
        *(
            F.when(
                d.unknown_allowance & (uncapped == 0) & (d.at_risk | (d.stop > 0)),
                F.lit(
                    f"no producer capacity or overshoot seen for {d.unit}: no stop threshold "
                    "computed"
                ),
            )
            for d in (msgs, size)
        ),
        *(
            F.when(
                d.no_room,
                F.format_string(
                    f"producers can overshoot by %d {d.unit} (worst seen or bounded by their "
                    "capacity windows, plus margin), the whole limit of %d: no stop threshold "
                    "keeps the queue under it; reduce the windows or raise the limit",
                    d.headroom,
                    d.limit,
                ),
            ).when(
                d.exceeds_limit,
                F.format_string(
                    f"stop %d + overshoot allowance %d {d.unit} (worst seen or bounded by the "
                    "producers' capacity windows) passes the limit %d",
                    d.stop,
                    d.worst_overshoot,
                    d.limit,
                ),
            )
            for d in (msgs, size)
        ),
        F.when(
            flapping,
            F.format_string(
                "%d of %d episodes shorter than %.1fs (median %.2fs)",
                short,
                F.col("closed_episodes"),
                F.lit(policy.min_dwell_s),
                F.col("median_episode_s"),
            ),
        ),
        # Flapping, yet nothing to change: say why rather than leave a verdict without a change.
        F.when(
            flapping & (resume_msgs == msgs.resume) & (resume_size == size.resume),
            F.when(
                F.col("drain_rate_msgs_s").isNull() & F.col("drain_rate_bytes_s").isNull(),
                F.lit(
                    "no drain rate measured (no episode with a duration): the resume gap "
                    "cannot be sized, thresholds kept"
                ),
            ).otherwise(
                F.lit(
                    "the current resume gap already covers the dwell time at the measured "
                    "drain rate: the episodes are short for another reason (bursty consumers?)"
                )
            ),
        ),
        *(
            F.when(
                d.lower,
                F.format_string(
                    f"stop %d leaves %d {d.unit} below the limit, %d needed",
                    d.stop,
                    d.limit - d.stop,
                    d.headroom,
                ),
            )
            for d in (msgs, size)
        ),
        *(
            F.when(
                d.raise_ & ~d.lower,
                F.format_string(
                    f"stopped %.0fs with %d {d.unit} of room where %d suffice",
                    F.coalesce(F.col("time_stopped_s"), F.lit(0.0)),
                    d.limit - d.stop,
                    d.headroom,
                ),
            )
            for d in (msgs, size)
        ),
    )
    changes = F.concat_ws(
        ", ",
        _change("stop msgs", msgs.stop, stop_msgs),
        _change("resume msgs", msgs.resume, resume_msgs),
        _change("stop bytes", size.stop, stop_size),
        _change("resume bytes", size.resume, resume_size),
    )
    keep_reason = F.format_string(
        "%d episodes; overshoot allowance %d msgs (worst seen or bounded by the producers' "
        "capacity windows), %d of room needed below the limit (incl. %.0f%% margin)",
        F.coalesce(F.col("episodes"), F.lit(0)),
        msgs.worst_overshoot,
        F.coalesce(msgs.headroom, F.lit(0)),
        margin_pct,
    )
    # With byte thresholds in force, why the byte stop is kept too: the room it leaves in bytes.
    keep_bytes = F.when(
        size.stop > 0,
        F.when(
            size.limit > 0,
            F.format_string(
                "; bytes: overshoot allowance %d bytes (worst seen or bounded by the producers' "
                "capacity windows x the largest message), stop %d leaves %d bytes below the "
                "limit of %d, %d needed (incl. %.0f%% margin)",
                size.worst_overshoot,
                size.stop,
                size.limit - size.stop,
                size.limit,
                size.headroom,
                margin_pct,
            ),
        ).otherwise(
            F.format_string(
                "; bytes: stop %d bytes kept, no byte limit to leave room under", size.stop
            )
        ),
    ).otherwise(F.lit(""))
    ring_reason = F.lit(
        "ring queue without flow thresholds: it evicts its oldest messages at the limit, and "
        "flow control is not applied to it by default"
    )
    joined, staged = _staged(joined, {"_reasons": reasons, "_changes": changes})
    reasons, changes = staged["_reasons"], staged["_changes"]
    rationale = F.concat(
        verdict,
        F.lit(": "),
        F.when(ring, ring_reason)
        .when(reasons == "", F.concat(keep_reason, keep_bytes))
        .otherwise(reasons),
        F.when(changes != "", F.concat(F.lit(" => "), changes)).otherwise(F.lit("")),
    )
    observed = F.col("_observed_s")
    return joined.select(
        "broker",
        F.lit(ENTITY_QUEUE).alias("entity_kind"),
        F.col("queue").alias("entity"),
        "queue",
        "runs",
        verdict.alias("verdict"),
        rationale.alias("rationale"),
        "max_count",
        "max_size",
        msgs.stop.alias("current_flow_stop_count"),
        msgs.resume.alias("current_flow_resume_count"),
        size.stop.alias("current_flow_stop_size"),
        size.resume.alias("current_flow_resume_size"),
        stop_msgs.alias("recommended_flow_stop_count"),
        resume_msgs.alias("recommended_flow_resume_count"),
        stop_size.alias("recommended_flow_stop_size"),
        resume_size.alias("recommended_flow_resume_size"),
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
        msgs.headroom.alias("headroom_msgs"),
        size.headroom.alias("headroom_bytes"),
        "drain_rate_msgs_s",
        "drain_rate_bytes_s",
    )


# -- consumer links ---------------------------------------------------------------------------


def consumer_link_evidence(
    events: DataFrame, link_daily: DataFrame, starvations: DataFrame
) -> DataFrame:
    """Per consumer link: deliveries, its current credit, the median top-up, attached and
    starved time, the median starvation (a credit round trip as the receiver sees it), whether
    the credit is counted in bytes (``detail.credit_unit``), the mean size of the messages
    delivered (from the delivery events' ``size_bytes``, when logged), the most credit the
    link's queue sees at a time (``detail.max_queue_credit``, RabbitMQ AMQP 1.0 links; the largest
    logged when runs differ), and its backlogged time and the deliveries made in it.

    The current credit is the credit the receiver grants now: the largest credit of the link's
    grants on the latest day (UTC date of ``ts``) of the window on which it logged one. A grant
    is a ``flow`` event carrying a credit, except those the sending end logs of itself
    (``detail.origin`` ``sender``: messages available, a drain done), which like deliveries
    carry the credit left. So a link that ran its credit down on its latest day without a grant
    (the receiver replenishing late) is judged at the window its last grant set, not at what was
    left; a receiver that granted 0 (a flow setting the credit to 0) holds 0; and a lowered
    credit is judged at its new size, not at an earlier day's it no longer holds. A link with no
    grant in the window (its credit known only from attaches, deliveries or the sender's flows)
    falls back on the largest credit of the latest day on which any of its events carried one.

    A link is backlogged while the sending side has messages for it and credit to send them:
    while its state (DESIGN §4, as for starvation: the credit and ``available`` of its latest
    event carrying a credit, by ``seq``, that event's own ``available``) has ``available > 0``
    and ``credit > 0``; a ``link_detached`` ends it. Starved time (no credit) is left out: there
    the link runs at the pace its credit allows, about credit / round trip, which would size the
    credit by itself.
    Each stretch between two of the link's events takes the state the earlier one left, and the
    stretch after its last event runs to the run's watermark as the window sees it (its last
    event by ``seq``); a clock stepping back makes a stretch 0 s. A delivery is made in backlog
    when the state just before it was backlogged, and counts only when that backlog (the
    stretches from the event that made the link backlogged to the one that ended it) lasted:
    a backlog drained in the instant it appeared gives deliveries and no time. The window's
    events are all there is:
    a link backlogged before the window's first day counts from its first event in the window.
    """
    link_events = events.where(F.col("link").isNotNull())
    # The run's watermark as the window sees it: the ts of its last event by seq (few runs).
    watermarks = events.groupBy("run_id").agg(F.max_by("ts", "seq").alias("_watermark_ts"))
    in_order = Window.partitionBy("run_id", *LINK).orderBy("seq")
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    # The state an event leaves: backlogged or not when it carries a credit (a credit logged
    # without an available is not known to be backlogged), not when it detaches the link.
    leaves = F.when(_is("link_detached"), F.lit(False)).when(
        F.col("credit").isNotNull(),
        (F.col("credit") > 0) & (F.coalesce(F.col("available"), F.lit(0)) > 0),
    )
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    stepped = (
        link_events.join(F.broadcast(watermarks), "run_id")
        .withColumn("_prev_credit", F.last("credit", ignorenulls=True).over(before))
        .withColumn(
            "_backlogged_before",
            F.coalesce(F.last(leaves, ignorenulls=True).over(before), F.lit(False)),
        )
        .withColumn("_backlogged_after", F.coalesce(leaves, F.col("_backlogged_before")))
        .withColumn("_until_ts", F.coalesce(F.lead("ts").over(in_order), F.col("_watermark_ts")))
        # Backlogs numbered by the events that leave the link not backlogged up to here: the
        # events of one backlog, and the event that ends it, share the number of its first.
        .withColumn(
            "_backlog",
            F.sum(F.when(~F.col("_backlogged_after"), 1).otherwise(0)).over(upto_here),
        )
    )
    backlogged_after = F.col("_backlogged_after")
    # In whole microseconds, summed before they become seconds: the sum is exact.
    stretch_us = F.greatest(micros("_until_ts") - micros("ts"), F.lit(0))  # greatest skips a null
    top_up = F.col("credit") - F.col("_prev_credit")
    # The backlog a delivery is made in: the one the event before it left (an event that ends a
    # backlog has already counted itself among the events that leave the link not backlogged).
    delivery_backlog = F.col("_backlog") - F.when(backlogged_after, 0).otherwise(1)
    # A backlog drained in the instant it appeared (deliveries stamped with the ts the messages
    # became available at, as a consumer that keeps up is logged) has no time to divide by; its
    # deliveries would inflate the rate of the link's real backlogs, so they do not count.
    timed_backlogs = (
        stepped.where(backlogged_after)
        .groupBy("run_id", *LINK, "_backlog")
        .agg(F.sum(stretch_us).alias("_backlog_us"))
        .where(F.col("_backlog_us") > 0)
        .select("run_id", *LINK, "_backlog", F.lit(True).alias("_timed"))
    )
    stepped = stepped.withColumn("_delivery_backlog", delivery_backlog).join(
        timed_backlogs.withColumnRenamed("_backlog", "_delivery_backlog"),
        ["run_id", *LINK, "_delivery_backlog"],
        "left",
    )
    in_backlog = F.col("_backlogged_before") & F.coalesce(F.col("_timed"), F.lit(False))

    def deliveries(where: Column) -> Column:
        # A delivery is logged as a dequeue by some front ends and as a transfer by others.
        return F.greatest(
            F.count(F.when(where & _is("dequeue"), 1)), F.count(F.when(where & _is("transfer"), 1))
        )

    day_credit = F.struct(utc_date("ts").alias("day"), "credit")
    # A grant: a flow event carrying a credit that the sending end did not log of itself (its
    # flows report messages available or a drain done, with the credit left, DESIGN §3).
    granted = (
        _is("flow")
        & F.col("credit").isNotNull()
        & ~F.coalesce(F.get_json_object("detail", "$.origin") == "sender", F.lit(False))
    )
    per_link = stepped.groupBy(*LINK).agg(
        _latest("link_role"),
        # Artemis CORE consumers count credit in bytes and say so in every event's detail.
        F.max(F.get_json_object("detail", "$.credit_unit") == "bytes").alias("_credit_in_bytes"),
        F.avg(F.when(_is("dequeue") | _is("transfer"), F.col("size_bytes"))).alias(
            "_mean_message_bytes"
        ),
        # RabbitMQ's AMQP 1.0 consumer links log the credit its queue sees per consumer.
        F.max(F.get_json_object("detail", "$.max_queue_credit").cast("long")).alias(
            "_max_queue_credit"
        ),
        F.max_by("queue", F.when(_is("dequeue"), F.struct("ts", "seq"))).alias("queue"),
        F.countDistinct("run_id").alias("runs"),
        deliveries(F.lit(True)).alias("deliveries"),
        # The credit in force now: the largest grant of the latest day with a grant, else the
        # largest credit of the latest day with any credit. Structs compare field by field, so
        # each max is that day's largest; the window's largest would judge a link whose credit
        # was lowered against credit it no longer holds, and a delivery's credit is what is left.
        F.coalesce(
            F.max(F.when(granted, day_credit))["credit"],
            F.max(F.when(F.col("credit").isNotNull(), day_credit))["credit"],
        ).alias("current_credit"),
        # A top-up: a flow event's credit above the link's previous credit.
        F.percentile(F.when(_is("flow") & (top_up > 0), top_up), 0.5).alias("_median_top_up"),
        seconds_between(F.lit(0), F.sum(F.when(backlogged_after, stretch_us))).alias(
            "_backlogged_s"
        ),
        deliveries(in_backlog).alias("_backlogged_deliveries"),
    )
    daily = link_daily.groupBy(*LINK).agg(
        F.sum("starved_s").alias("starved_s"),
        F.sum("attached_s").alias("attached_s"),
        F.sum("episodes").alias("episodes"),
    )
    round_trips = (
        starvations.where(~F.col("is_open") & (F.col("duration_s") > 0))
        .groupBy(*LINK)
        .agg(F.percentile("duration_s", 0.5).alias("_observed_round_trip_s"))
    )
    # Links that never carried a credit (AMQP 0-10 consumers) have no credit to recommend.
    return (
        per_link.where((F.col("link_role") == "consumer") & F.col("current_credit").isNotNull())
        .join(daily, list(LINK), "left")
        .join(round_trips, list(LINK), "left")
    )


#: Why a link starves although its credit is large enough.
REPLENISHES_LATE = "the consumer replenishes late (grants credit only as it processes messages)"


def recommend_consumer_links(evidence: DataFrame, policy: RecommendPolicy) -> DataFrame:
    """One credit recommendation per consumer link (Kung & Morris).

    Credit is counted in the link's own unit: messages, or bytes for links whose events say
    ``credit_unit: bytes`` (Artemis CORE consumers). In bytes the need is rate x mean message
    size x round trip + top-up (bytes); without logged message sizes a byte link is not assessed.
    A median starvation under ``min_round_trip_s`` is no evidence of a round trip: a starved link
    with one is not assessed (credit came back within moments, so its size is not what starves the
    link), a link that did not starve falls back on the policy round trip. A starved link that
    already had the credit the formula needs is kept: the shortage is not the credit size.

    The rate is the one the link runs at while it has traffic to carry: the deliveries made in its
    backlogged time (see :func:`consumer_link_evidence`) per backlogged second, not per attached
    second, which would give a consumer idle half the time for want of messages half the credit
    it needs. When the log gives no backlogged time (no ``available`` logged at all, or only
    instants with some) it falls back on the deliveries per attached second; the rationale says
    which rate was used (the schema has no column for it).

    RabbitMQ's cap on the credit a queue sees per consumer (DESIGN §2, 256 by default; its AMQP 1.0
    consumer links log it as ``detail.max_queue_credit``) does not cap the recommendation: seed
    004, "Once these 256 messages have been sent out by the server session process, the server
    session process will grant the next batch of 256 credits to the queue". The cap bounds what
    the session buffers, not what the link delivers per round trip, so credit above it still
    covers the client's round trip (the engine delivers 4x as much with 1024 credits as with 256
    under the cap, and the same with any cap). A need above the cap is said in the rationale.
    """
    attached = F.col("attached_s")
    backlogged = F.col("_backlogged_s")
    # Kung & Morris size credit for the rate the link runs at while it has traffic to carry:
    # deliveries per backlogged second, or per attached second when the log gives no backlog.
    per_backlogged = F.coalesce(backlogged > 0, F.lit(False))
    rate = F.when(per_backlogged, F.col("_backlogged_deliveries") / backlogged).when(
        attached > 0, F.col("deliveries") / attached
    )
    in_bytes = F.coalesce(F.col("_credit_in_bytes"), F.lit(False))
    message_bytes = F.col("_mean_message_bytes")
    sizes_unknown = in_bytes & ~F.coalesce(message_bytes > 0, F.lit(False))
    # Credit units per message: 1 for message credit, the mean message size for byte credit.
    per_message = F.when(in_bytes, message_bytes).otherwise(F.lit(1.0))
    observed = F.col("_observed_round_trip_s")
    too_short = F.coalesce(observed < policy.min_round_trip_s, F.lit(False))
    starved_share = F.when(attached > 0, F.coalesce(F.col("starved_s"), F.lit(0.0)) / attached)
    starved = F.coalesce(starved_share, F.lit(0.0)) > policy.starved_share_tolerance
    no_round_trip = too_short & starved
    observed_ok = observed.isNotNull() & ~too_short
    round_trip = F.when(
        ~no_round_trip,
        F.coalesce(F.when(observed_ok, observed), F.lit(policy.default_round_trip_s)),
    )
    round_trip_source = F.when(
        ~no_round_trip, F.when(observed_ok, F.lit("observed")).otherwise(F.lit("policy"))
    )
    batch = F.coalesce(
        F.ceil(F.col("_median_top_up")).cast("long"),
        F.ceil(F.lit(policy.default_top_up_batch) * per_message).cast("long"),
    )
    assessed = ~sizes_unknown & ~no_round_trip
    # The decisions every later expression builds on, computed once (see _staged).
    evidence, staged = _staged(
        evidence,
        {
            "_rate": rate,
            "_round_trip": round_trip,
            "_batch": batch,
            "_starved_share": starved_share,
            "_starved": starved,
            "_assessed": assessed,
        },
    )
    rate, round_trip, batch = staged["_rate"], staged["_round_trip"], staged["_batch"]
    starved_share, starved, assessed = (
        staged["_starved_share"],
        staged["_starved"],
        staged["_assessed"],
    )
    need = (F.ceil(rate * per_message * round_trip) + batch).cast("long")
    evidence, staged = _staged(evidence, {"_needed": F.when(assessed, need)})
    needed = staged["_needed"]
    current = F.col("current_credit")
    held = F.coalesce(current, F.lit(0))
    raise_ = assessed & starved & (held < needed)
    # Starved although it already had what it needs: more credit would not help.
    not_the_size = assessed & starved & (held >= needed)
    lower = assessed & ~starved & (current > needed * policy.over_provision_factor)
    evidence, staged = _staged(
        evidence, {"_raise": raise_, "_not_the_size": not_the_size, "_lower": lower}
    )
    raise_, not_the_size, lower = staged["_raise"], staged["_not_the_size"], staged["_lower"]
    verdict = F.when(raise_, VERDICT_RAISE).when(lower, VERDICT_LOWER).otherwise(VERDICT_KEEP)
    recommended = F.when(raise_ | lower, needed).otherwise(current)
    unit = F.when(in_bytes, F.lit("bytes of credit")).otherwise(F.lit("credits"))
    formula = F.when(
        in_bytes,
        F.format_string(
            "needs %.1f msgs/s x %.0f bytes/msg x %.3fs round trip + %d bytes top-up "
            "= %d bytes of credit",
            F.coalesce(rate, F.lit(0.0)),
            message_bytes,
            round_trip,
            batch,
            F.coalesce(needed, F.lit(0)),
        ),
    ).otherwise(
        F.format_string(
            "needs %.1f msgs/s x %.3fs round trip + %d top-up = %d credits",
            F.coalesce(rate, F.lit(0.0)),
            round_trip,
            batch,
            F.coalesce(needed, F.lit(0)),
        )
    )
    starved_with = F.format_string(
        "starved %.1f%% of its attached time with %d %s",
        F.coalesce(starved_share * 100, F.lit(0.0)),
        held,
        unit,
    )
    situation = (
        F.when(
            sizes_unknown,
            F.format_string(
                "credit is counted in bytes (%d in force) and the link logged no message "
                "sizes: credit not assessed",
                held,
            ),
        )
        .when(
            no_round_trip,
            F.concat(
                starved_with,
                F.format_string(
                    "; its median starvation of %.6fs is under %.3fs and no evidence of a credit "
                    "round trip: credit need not assessed; credit came back within moments of "
                    "running out, so the starvation is not caused by the credit size: "
                    + REPLENISHES_LATE,
                    observed,
                    F.lit(policy.min_round_trip_s),
                ),
            ),
        )
        .when(raise_, starved_with)
        .when(
            not_the_size,
            F.concat(
                starved_with,
                F.format_string(
                    "; starvation is not caused by the credit size: it already had %d >= needed "
                    "%d %s; " + REPLENISHES_LATE,
                    held,
                    needed,
                    unit,
                ),
            ),
        )
        .when(
            lower & (F.coalesce(starved_share, F.lit(0.0)) > 0),
            F.format_string(
                "starved only %.2f%% of its attached time (up to %.2f%% is tolerated) with %d %s, "
                "over %.0fx what it needs",
                starved_share * 100,
                F.lit(policy.starved_share_tolerance * 100),
                current,
                unit,
                F.lit(policy.over_provision_factor),
            ),
        )
        .when(
            lower,
            F.format_string(
                "never starved with %d %s, over %.0fx what it needs",
                current,
                unit,
                F.lit(policy.over_provision_factor),
            ),
        )
        .when(rate.isNull(), F.lit("no attached time observed"))
        .otherwise(starved_with)
    )
    # The policy round trip stood in for an observed one too short to be evidence.
    round_trip_note = F.when(
        too_short & ~no_round_trip,
        F.format_string(
            "; its median starvation of %.6fs is under %.3fs and no evidence of a round trip: "
            "the policy round trip is used",
            observed,
            F.lit(policy.min_round_trip_s),
        ),
    )
    # Which rate the formula used, and its evidence (the schema has no column for it).
    rate_note = F.when(
        per_backlogged,
        F.format_string(
            "; the rate is per backlogged second: %d deliveries in %.1fs with messages available "
            "and credit, of %.1fs attached",
            F.col("_backlogged_deliveries"),
            backlogged,
            F.coalesce(attached, F.lit(0.0)),
        ),
    ).otherwise(
        F.format_string(
            "; the rate is per attached second: %d deliveries in %.1fs attached (the log gives no "
            "time with messages available)",
            F.col("deliveries"),
            F.coalesce(attached, F.lit(0.0)),
        )
    )
    # RabbitMQ: a need above the credit the queue sees per consumer is not capped (see above).
    queue_cap = F.col("_max_queue_credit")
    cap_note = F.when(
        assessed & (needed > queue_cap),
        F.format_string(
            "; %d credits is above the %d the queue sees per consumer at a time "
            "(max_queue_credit): not capped, as the session grants the queue its next batch once "
            "it has sent the last one out, so credit above the cap still covers the round trip "
            "(the cap bounds what the session buffers, not what the link delivers)",
            needed,
            queue_cap,
        ),
    )
    rationale = F.concat(
        verdict,
        F.lit(": "),
        situation,
        F.when(assessed, F.concat(F.lit("; "), formula, rate_note)).otherwise(F.lit("")),
        F.coalesce(cap_note, F.lit("")),
        F.coalesce(round_trip_note, F.lit("")),
    )
    return evidence.select(
        "broker",
        F.lit(ENTITY_CONSUMER_LINK).alias("entity_kind"),
        F.col("link").alias("entity"),
        "queue",
        "runs",
        verdict.alias("verdict"),
        rationale.alias("rationale"),
        F.coalesce(F.col("episodes"), F.lit(0)).alias("episodes"),
        current.alias("current_credit"),
        recommended.alias("recommended_credit"),
        rate.alias("consumption_rate_msgs_s"),
        round_trip.alias("round_trip_s"),
        round_trip_source.alias("round_trip_source"),
        batch.alias("top_up_batch"),
        F.coalesce(F.col("starved_s"), F.lit(0.0)).alias("starved_s"),
        starved_share.alias("starved_share"),
    )


# -- the table --------------------------------------------------------------------------------


def _between(column: str, first: date, last: date) -> Column:
    return F.col(column).between(F.lit(first), F.lit(last))


def threshold_recommendations(
    events: DataFrame,
    queue_episodes: DataFrame,
    queue_daily: DataFrame,
    link_starvations: DataFrame,
    link_daily: DataFrame,
    policy: RecommendPolicy,
    as_of: date,
) -> DataFrame:
    """Rows of ``threshold_recommendations`` as of ``as_of``, from the evidence window's rows.

    Each input may hold more days than the window (bronze ``events`` by ``date``, silver rows by
    ``start_date``, gold rows by ``date``); only the window's days are used.
    """
    first = policy.window_from(as_of)
    window_events = events.where(_between("date", first, as_of))
    window_episodes = queue_episodes.where(_between("start_date", first, as_of))
    queues = recommend_queues(
        queue_settings(window_events),
        queue_producers(window_events),
        queue_episode_evidence(window_episodes, policy),
        queue_daily_evidence(queue_daily.where(_between("date", first, as_of))),
        policy,
    )
    links = recommend_consumer_links(
        consumer_link_evidence(
            window_events,
            link_daily.where(_between("date", first, as_of)),
            link_starvations.where(_between("start_date", first, as_of)),
        ),
        policy,
    )
    rows = (
        queues.unionByName(links, allowMissingColumns=True)
        .withColumn("date", F.lit(as_of))
        .withColumn("window_from", F.lit(first))
        .withColumn("safety_margin", F.lit(policy.safety_margin))
        .withColumn("min_dwell_s", F.lit(policy.min_dwell_s))
    )
    spark_schema = THRESHOLD_RECOMMENDATIONS.to_spark()
    return rows.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in spark_schema.fields))

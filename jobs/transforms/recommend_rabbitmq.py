"""RabbitMQ queue recommendations (DESIGN.md §4 "recommendation", seed 004) in RabbitMQ's own knob:
the queue length limit ``x-max-length`` (overflow ``reject-publish``), :data:`RABBITMQ_QUEUE_RULES`.
RabbitMQ's consumers (link credit, prefetch) are recommend_links.py's.

A queue that grows without bound (it gained messages over the window and ended at its peak) gets a
limit of the messages it takes in ``max_backlog_s`` at its intake rate: past it, publishes are
refused at once instead of the queue falling further behind, and its credit flow no longer blocks
a whole 0.9.1 connection for it (seed 004: one slow queue blocks the connection; the evidence is
silver ``blocking_episodes`` of kind ``connection`` whose reason is ``credit_flow:<queue>``).
DataFrame -> DataFrame without I/O.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from flowctl_core.events import PREFILL_LINK
from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.message_log import recorded_sum
from jobs.transforms.recommend_evidence import QUEUE, entity_columns
from jobs.transforms.recommend_rollup import latest
from jobs.transforms.timeutil import micros, summed_seconds
from jobs.transforms.verdict_rules import Facts, Rule, always, decide, staged
from schemas.broker_events import BROKER_RABBITMQ
from schemas.model import US_PER_SECOND
from schemas.recommendations import (
    ENTITY_QUEUE,
    KNOB_MAX_LENGTH,
    UNIT_MESSAGES,
    VERDICT_AT_RISK,
    VERDICT_KEEP,
)

CREDIT_FLOW_REASON = "credit_flow:"


def _is(event_type: str) -> Column:
    return F.col("event_type") == event_type


def alarm_spans(blocking_episodes: DataFrame) -> DataFrame:
    """Per run, the stretches an alarm was set (silver ``blocking_episodes`` of kind ``alarm``;
    one still open to the run's watermark), overlapping alarms merged into one: (broker,
    run_id, start_us, end_us)."""
    alarms = blocking_episodes.where(F.col("kind") == "alarm").select(
        "broker",
        "run_id",
        micros("start_ts").alias("start_us"),
        micros(F.coalesce("end_ts", "run_watermark_ts")).alias("end_us"),
    )
    run = ("broker", "run_id")
    # Gaps and islands: an alarm that starts after every earlier one ended begins a stretch.
    earlier = Window.partitionBy(*run).orderBy("start_us", "end_us")
    latest_end = F.max("end_us").over(earlier.rowsBetween(Window.unboundedPreceding, -1))
    return (
        alarms.withColumn("_begins", F.coalesce(F.col("start_us") > latest_end, F.lit(True)))
        .withColumn("_stretch", F.sum(F.col("_begins").cast("int")).over(earlier))
        .groupBy(*run, "_stretch")
        .agg(F.min("start_us").alias("start_us"), F.max("end_us").alias("end_us"))
        .drop("_stretch")
    )


def queue_growth(rollup: DataFrame, alarms: DataFrame | None = None) -> DataFrame:
    """Per queue, from the window's day rollup (recommend_rollup.py): messages enqueued and
    dequeued (deliveries to 0.9.1 and 1.0 consumers alike), its depth at its latest event, and
    its intake rate: enqueues per second between its first and its last enqueue of a run (the
    fastest run), less the time an alarm held every publisher then (``alarms``:
    :func:`alarm_spans`; ``intake_alarm_s`` that run's): a queue whose publishers were blocked
    3 s of 6 read at half its intake, and a limit of a second of it held half a second (a
    review). The engine's ``prefill`` writer's enqueues (the messages on the queue before the
    run, all at its start) are no intake: counted, they made a backlog of 20,000 read as 20,994
    msgs/s (an audit)."""
    queue_rows = rollup.where(F.col("queue").isNotNull())
    runs = (
        queue_rows.where((F.col("enqueues") > 0) & ~F.col("link").eqNullSafe(PREFILL_LINK))
        .groupBy(*QUEUE, "run_id")
        .agg(
            F.sum("enqueues").alias("_enqueues"),
            F.min("first_enqueue_us").alias("_first_us"),
            F.max("last_enqueue_us").alias("_last_us"),
        )
    )
    if alarms is None:
        runs = runs.withColumn("_alarm_us", F.lit(0).cast("long"))
    else:
        overlap = F.greatest(
            F.least("_last_us", "end_us") - F.greatest("_first_us", "start_us"), F.lit(0)
        )
        held = (
            runs.join(alarms, ["broker", "run_id"])
            .groupBy(*QUEUE, "run_id")
            .agg(F.sum(overlap).alias("_alarm_us"))
        )
        runs = runs.join(held, [*QUEUE, "run_id"], "left").withColumn(
            "_alarm_us", F.coalesce("_alarm_us", F.lit(0).cast("long"))
        )
    open_us = F.col("_last_us") - F.col("_first_us") - F.col("_alarm_us")
    rate = F.when(open_us > 0, F.col("_enqueues") / open_us * float(US_PER_SECOND))
    # The fastest run; one without a rate too (its alarm seconds say why, when an alarm held
    # every enqueue), and of equal ones the least held, then by run: the same row every time.
    fastest = F.struct(F.coalesce(rate, F.lit(-1.0)), -F.col("_alarm_us"), F.col("run_id"))
    per_run = runs.groupBy(*QUEUE).agg(
        F.max_by(
            F.struct(
                rate.alias("rate"), (F.col("_alarm_us") / float(US_PER_SECOND)).alias("alarm_s")
            ),
            fastest,
        ).alias("_fastest")
    )
    per_run = per_run.select(
        *QUEUE,
        F.col("_fastest.rate").alias("intake_rate_msgs_s"),
        F.col("_fastest.alarm_s").alias("intake_alarm_s"),
    )
    counts = queue_rows.groupBy(*QUEUE).agg(
        # Null for a queue only a collector logged (it sees no message), not 0.
        recorded_sum("enqueues").alias("enqueued"),
        recorded_sum("dequeues").alias("dequeued"),
        latest("depth_msgs").alias("last_depth_msgs"),
    )
    return counts.join(per_run, list(QUEUE), "left")


def connection_blocking(blocking_episodes: DataFrame) -> DataFrame:
    """Per queue: the seconds and episodes of 0.9.1 connections blocked by its credit flow (an
    open episode counts to its run's watermark), and the connections."""
    reason = F.coalesce(F.col("reason"), F.lit(""))
    seconds = F.coalesce(
        F.col("duration_s"),
        (micros("run_watermark_ts") - micros("start_ts")) / float(US_PER_SECOND),
    )
    return (
        blocking_episodes.where(
            (F.col("kind") == "connection") & reason.startswith(CREDIT_FLOW_REASON)
        )
        .withColumn("queue", F.expr(f"substring(reason, {len(CREDIT_FLOW_REASON) + 1})"))
        .groupBy(*QUEUE)
        .agg(
            summed_seconds(seconds).alias("connection_blocked_s"),
            F.count(F.lit(1)).alias("connection_blocks"),
            F.concat_ws(", ", F.sort_array(F.collect_set("entity"))).alias("_connections"),
        )
    )


def _count(column: str) -> Column:
    """A count column, 0 where the log gave none."""
    return F.coalesce(F.col(column), F.lit(0))


def _queue_facts(joined: DataFrame, policy: RecommendPolicy) -> tuple[DataFrame, Facts]:
    """``joined`` with a queue's decisions staged, and the facts its rules read: ``policy``,
    ``limit`` (x-max-length now, 0 none), ``byte_limit`` (x-max-length-bytes now, 0 none),
    ``growing`` (gained messages and ended at its peak),
    ``blocked_s`` (its connections' credit-flow blocking), ``blocked_share`` (of the queue's
    observed time) and ``length`` (the limit to recommend)."""

    peak = F.greatest(_count("peak_depth_msgs"), _count("last_depth_msgs"))
    # Without message counts (a collector's queue) its depths alone say whether it grew.
    gained = F.coalesce(F.col("enqueued") > F.col("dequeued"), F.col("enqueued").isNull())
    growing = gained & (_count("last_depth_msgs") >= peak * (1 - policy.keep_band_share))
    observed = F.col("_observed_s")
    joined, facts = staged(
        joined,
        {
            "_limit": _count("max_count"),
            "_byte_limit": _count("max_size"),
            "_growing": growing & (_count("last_depth_msgs") > 0),
            "_blocked_s": F.coalesce(F.col("connection_blocked_s"), F.lit(0.0)),
            "_length": F.greatest(
                F.ceil(F.col("intake_rate_msgs_s") * policy.max_backlog_s), F.lit(1)
            ).cast("long"),
        },
    )
    named = {name.lstrip("_"): column for name, column in facts.items()}
    return joined, Facts(
        policy=policy,
        peak=peak,
        blocked_share=F.when(observed > 0, named["blocked_s"] / observed),
        **named,
    )


def _below_peak(q: Facts) -> Column:
    """Its last depth is known and below its peak."""
    return F.col("last_depth_msgs").isNotNull() & (q.peak > F.col("last_depth_msgs"))


def _growth(q: Facts) -> Column:
    # A window shorter than max_backlog_s of intake never reaches the limit: say so, since a
    # replay of it (flowctl whatif) cannot show the limit acting.
    beyond_peak = F.when(
        q.length > q.peak,  # at the peak the run reaches the limit: it acts (flowctl whatif)
        F.format_string(
            "; the window's peak of %,d stays under it: it bounds the growth to come, not what "
            "the window saw",
            q.peak,
        ),
    ).otherwise(F.lit(""))
    return F.concat(
        F.format_string(
            "grew to %,d messages (%,d enqueued, %,d delivered) with no length limit; at %,.0f "
            "msgs/s intake%s, x-max-length %,d holds %.1fs of it and refuses the rest at once "
            "(overflow reject-publish)",
            q.peak,
            _count("enqueued"),
            _count("dequeued"),
            F.col("intake_rate_msgs_s"),
            F.when(
                F.col("intake_alarm_s") > 0,
                F.format_string(
                    " (outside the %.1fs an alarm held its publishers)", F.col("intake_alarm_s")
                ),
            ).otherwise(F.lit("")),
            q.length,
            F.lit(q.policy.max_backlog_s),
        ),
        beyond_peak,
    )


#: A RabbitMQ queue's verdict: the first rule that holds (all act on x-max-length).
RABBITMQ_QUEUE_RULES: tuple[Rule, ...] = (
    # A limit in messages or in bytes (x-max-length-bytes, logged as max_size): either bounds
    # the queue, so neither is "no length limit" (an audit: a byte-limited queue was told it
    # had none, and given an x-max-length).
    Rule(
        "length limit in force",
        lambda q: (q.limit > 0) | (q.byte_limit > 0),
        VERDICT_KEEP,
        lambda q: F.format_string(
            "%s in force (peak %,d, %s)",
            F.concat_ws(
                " and ",
                F.when(q.limit > 0, F.format_string("x-max-length %,d", q.limit)),
                F.when(q.byte_limit > 0, F.format_string("x-max-length-bytes %,d", q.byte_limit)),
            ),
            q.peak,
            F.when(
                F.col("rejected_msgs").isNotNull(),
                F.format_string("%,d rejected", F.col("rejected_msgs")),
            )
            .when(
                (q.limit > 0) & (q.peak >= q.limit),
                F.lit(
                    "at the limit, where the queue drops or refuses messages; a collector sees "
                    "no message, so how many is not in the log"
                ),
            )
            .otherwise(F.lit("what it dropped or refused is not in the log: a collector's")),
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.when(q.limit > 0, q.limit),
    ),
    Rule(
        "blocks its connection and grows",
        lambda q: q.growing & (q.blocked_s > 0) & F.col("intake_rate_msgs_s").isNotNull(),
        VERDICT_AT_RISK,
        lambda q: F.concat(
            F.format_string(
                "its credit flow blocked 0.9.1 connection %s for %.2fs (%.0f%% of the time), "
                "publishes to every other queue included; it ",
                F.col("_connections"),
                q.blocked_s,
                F.coalesce(q.blocked_share, F.lit(0.0)) * 100,
            ),
            _growth(q),
        ),
        KNOB_MAX_LENGTH,
        lambda q: q.length,
    ),
    Rule(
        "grows without bound",
        lambda q: q.growing & F.col("intake_rate_msgs_s").isNotNull(),
        VERDICT_AT_RISK,
        lambda q: F.concat(F.lit("it "), _growth(q)),
        KNOB_MAX_LENGTH,
        lambda q: q.length,
    ),
    Rule(
        "blocks its connection, drains",
        lambda q: q.blocked_s > 0,
        VERDICT_KEEP,
        lambda q: F.format_string(
            "its credit flow blocked 0.9.1 connection %s for %.2fs, but it drains (ends at %,d of "
            "a peak of %,d): it is slow, not long, and a length limit would not unblock it; "
            "publish to it on a connection of its own (seed 004) or use AMQP 1.0",
            F.col("_connections"),
            q.blocked_s,
            _count("last_depth_msgs"),
            q.peak,
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.lit(None),
    ),
    # Grown, but no two enqueues apart in time (a burst at one instant, or a collector's queue,
    # which logs no enqueue): no intake rate to size a limit by. "It does not grow" said
    # otherwise of such a queue (an audit).
    Rule(
        "grows, intake rate unknown",
        lambda q: q.growing,
        VERDICT_KEEP,
        lambda q: F.format_string(
            "no length limit; it gained messages (peak %,d, ends at %,d), but the log gives no "
            "intake rate to size a limit by (%s)",
            q.peak,
            _count("last_depth_msgs"),
            F.when(F.col("enqueued").isNull(), F.lit("a collector sees no message"))
            .when(
                F.col("intake_alarm_s") > 0,
                F.lit("it took its messages only while an alarm held its publishers"),
            )
            .otherwise(F.lit("no two enqueues apart in time")),
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.lit(None),
    ),
    # Below its peak at the end: "it does not grow" read oddly beside a large peak (an audit).
    # Drained: it delivered at least what it took in over the window; else it gained messages
    # on the whole but was not growing at its end (a review: 132,739 of a 150,000 peak left).
    Rule(
        "drains",
        lambda q: _below_peak(q) & F.coalesce(F.col("dequeued") >= F.col("enqueued"), F.lit(False)),
        VERDICT_KEEP,
        lambda q: F.format_string(
            "no length limit; it peaked at %,d and ends at %,d, having delivered at least what it "
            "took in (%,d in, %,d out): it does not grow without bound",
            q.peak,
            F.col("last_depth_msgs"),
            _count("enqueued"),
            _count("dequeued"),
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.lit(None),
    ),
    Rule(
        "below its peak at the end",
        _below_peak,
        VERDICT_KEEP,
        lambda q: F.format_string(
            "no length limit; %s but ends at %,d, below its peak of %,d: not growing at the end of "
            "the window, so no limit is sized from it",
            F.when(
                F.col("enqueued").isNotNull(),
                F.format_string(
                    "it gained messages (%,d in, %,d out)", F.col("enqueued"), _count("dequeued")
                ),
            ).otherwise(F.lit("its messages in and out are not in the log (a collector's)")),
            F.col("last_depth_msgs"),
            q.peak,
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.lit(None),
    ),
    Rule(
        "does not grow",
        always,
        VERDICT_KEEP,
        lambda q: F.format_string(
            "no length limit; peak %,d, ends at %,d: it does not grow",
            q.peak,
            _count("last_depth_msgs"),
        ),
        KNOB_MAX_LENGTH,
        lambda q: F.lit(None),
    ),
)


def recommend_rabbitmq_queues(
    settings: DataFrame,
    growth: DataFrame,
    blocking: DataFrame,
    daily_evidence: DataFrame,
    policy: RecommendPolicy,
) -> DataFrame:
    """One x-max-length recommendation per RabbitMQ queue (``settings``: queue_settings of the
    RabbitMQ queues; the caller adds the date columns)."""
    joined = (
        settings.join(growth, list(QUEUE), "left")
        .join(blocking, list(QUEUE), "left")
        .join(daily_evidence, list(QUEUE), "left")
    )
    joined, facts = _queue_facts(joined, policy)
    decision = decide(RABBITMQ_QUEUE_RULES, facts)
    current = F.when(facts.limit > 0, facts.limit)
    return joined.select(
        *entity_columns(ENTITY_QUEUE, "queue"),
        decision.verdict.alias("verdict"),
        decision.rationale.alias("rationale"),
        F.lit(BROKER_RABBITMQ).alias("broker_kind"),
        decision.knob.alias("knob"),
        current.alias("current_value"),
        F.coalesce(decision.value, current).alias("recommended_value"),
        F.lit(UNIT_MESSAGES).alias("unit"),
        decision.rule.alias("rule"),
        "max_count",
        "max_size",
        F.col("rejected_msgs"),
        facts.peak.alias("peak_depth_msgs"),
        "peak_depth_bytes",
    )

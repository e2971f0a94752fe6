"""The evidence of a recommendation (DESIGN.md §4 "recommendation"), aggregated per queue and per
consumer link from the bronze, silver and gold rows of the evidence window.

Queues: the limits and thresholds in force, the overshoot bound from the producers' capacities,
episode counts, worst overshoot and drain rates, time stopped and peak depth. Consumer links:
deliveries, the credit in force, top-ups, attached, starved and backlogged time, the credit unit.
Every function is DataFrame -> DataFrame without I/O; the verdicts are decided elsewhere
(recommend_queues.py, recommend_links.py).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from flowctl_core.events import PREFILL_LINK
from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.detail import detail_field, detail_whole_number
from jobs.transforms.message_log import recorded_sum
from jobs.transforms.recommend_rollup import latest
from jobs.transforms.saturating import saturating_sum
from jobs.transforms.timeutil import micros, seconds_between, summed_seconds, utc_date
from schemas.tables import QUEUE_SETTINGS

QUEUE = ("broker", "queue")
LINK = ("broker", "link")


def entity_columns(kind: str, entity: str) -> list[Column]:
    """The first columns of a recommendation row: its broker, entity (``kind`` and the name in
    column ``entity``), the queue it concerns and the runs its evidence comes from."""
    return [
        F.col("broker"),
        F.lit(kind).alias("entity_kind"),
        F.col(entity).alias("entity"),
        F.col("queue"),
        F.col("runs"),
    ]


def _latest(column: str) -> Column:
    """The column's value at the latest event (by ts, then seq) where it is not null."""
    order = F.when(F.col(column).isNotNull(), F.struct("ts", "seq"))
    return F.max_by(column, order).alias(column)


def mean_delivery_bytes() -> Column:
    """An aggregate over a link's events: the mean bytes of its deliveries as its credit counts
    them, for a link whose credit is in bytes (an Artemis CORE consumer's): the mean body of its
    transfers and dequeues (``size_bytes``) plus the overhead its attach logs in
    ``detail.delivery_overhead_bytes`` (the engine's ``core_delivery_overhead_bytes``; 0 in a
    log without it, whose credits counted bodies). Other links log no overhead: their mean body."""
    overhead = detail_whole_number("delivery_overhead_bytes")
    return F.avg(F.when(_is("dequeue") | _is("transfer"), F.col("size_bytes"))) + F.coalesce(
        F.max(F.when(_is("link_attached"), overhead)), F.lit(0)
    )


def _is(event_type: str) -> Column:
    return F.col("event_type") == event_type


# -- queue evidence ---------------------------------------------------------------------------


def queue_settings(rollup: DataFrame) -> DataFrame:
    """Per queue, from the window's day rollup (recommend_rollup.py): the limits and thresholds
    in force at its latest event, runs, rejections and the largest message enqueued (the bytes
    bound is capacity x that size)."""
    return (
        rollup.where(F.col("queue").isNotNull())
        .groupBy(*QUEUE)
        .agg(
            *(latest(column) for column in QUEUE_SETTINGS),
            # The limit policy a queue was declared with (the engine logs it in the detail).
            latest("limit_policy"),
            # A ring queue also shows by its evictions, when its declaration is older than the
            # look-back (a long collector session).
            F.max("evicts").alias("_evicts"),
            F.countDistinct("run_id").alias("runs"),
            # Null where only a collector or a client logged the queue: they see no message.
            recorded_sum("rejections").alias("rejected_msgs"),
            F.max("max_enqueue_bytes").alias("max_message_bytes"),
        )
    )


def queue_producers(rollup: DataFrame) -> DataFrame:
    """Per queue, from the window's day rollup: the overshoot bound from its producers'
    capacities (DESIGN §2: "at most the sum of its producers' capacities") and how many
    producers had no window at all.

    Producers of different runs never send at the same time (a run is one timeline), so the bound
    is the largest per-run sum, not the sum over the look-back: seven nightly collector sessions
    of one producer bound the overshoot by its one window, not seven. Within a run each producer
    counts once, at the largest window it had. The engine's ``prefill`` writer (messages on the
    queue before the run; it logs capacity 0) is no producer: a queue only prefilled has no
    bound, as one with no enqueues, not a bound of 0 (which would put the stop at the limit).
    """
    per_producer = (
        rollup.where(
            (F.col("enqueues") > 0)
            & F.col("queue").isNotNull()
            & F.col("link").isNotNull()
            & (F.col("link") != PREFILL_LINK)
        )
        .groupBy(*QUEUE, "run_id", "link")
        .agg(F.max("enqueue_capacity").alias("capacity"))
    )
    per_run = per_producer.groupBy(*QUEUE, "run_id").agg(
        saturating_sum(F.col("capacity")).alias("producer_capacity_sum"),
        F.count(F.when(F.col("capacity").isNull(), 1)).alias("uncapped_producers"),
    )
    return per_run.groupBy(*QUEUE).agg(
        F.max("producer_capacity_sum").alias("producer_capacity_sum"),
        F.max("uncapped_producers").alias("uncapped_producers"),
    )


def queue_episode_evidence(episodes: DataFrame, policy: RecommendPolicy) -> DataFrame:
    """Per queue, from silver episodes: counts (all, and those that reached each dimension's stop
    threshold), short episodes, worst overshoot and drain rates.

    The drain rate of a closed episode is what the consumers took while the queue was stopped
    (its ``dequeued_msgs`` / ``dequeued_bytes``) per second of it: the pace at which the queue
    falls once the producers are held, which is what a resume gap is sized by. Not (peak -
    resume) / duration, the net fall over the whole episode: its seconds include the rise to the
    peak, so on short episodes it reads low and a gap sized by it still flaps (an audit: a 1000 /
    999 queue drained at 100 msgs/s was read at about 40, and one step left every episode under
    5 s). An episode whose log has fewer dequeues than that fall (a log without dequeue events)
    counts the fall.
    """
    closed = ~F.col("is_open") & F.col("duration_s").isNotNull()
    timed = closed & (F.col("duration_s") > 0)

    def drain(peak: str, stop: str, resume: str, dequeued: str) -> Column:
        # A resume of 0 under a non-zero stop resumes at the stop value (DESIGN.md §2).
        effective = F.when(F.coalesce(F.col(resume), F.lit(0)) == 0, F.col(stop)).otherwise(
            F.col(resume)
        )
        fell = F.greatest(F.col(peak) - effective, F.lit(0))
        drained = F.greatest(F.coalesce(F.col(dequeued), F.lit(0)), fell)
        return F.when(timed & (effective > 0), drained / F.col("duration_s"))

    def reached(peak: str, stop: str) -> Column:
        # The dimension was at its stop threshold in the episode (the one that stops the flow
        # is); an unknown peak may have been.
        return (F.coalesce(F.col(stop), F.lit(0)) > 0) & (
            F.col(peak).isNull() | (F.col(peak) >= F.col(stop))
        )

    quantile = policy.drain_rate_quantile
    return episodes.groupBy(*QUEUE).agg(
        F.count(F.lit(1)).alias("episodes"),
        F.count(F.when(reached("peak_depth_msgs", "flow_stop_count"), 1)).alias(
            "episodes_at_stop_msgs"
        ),
        F.count(F.when(reached("peak_depth_bytes", "flow_stop_size"), 1)).alias(
            "episodes_at_stop_bytes"
        ),
        F.count(F.when(closed, 1)).alias("closed_episodes"),
        F.count(F.when(closed & (F.col("duration_s") < policy.min_dwell_s), 1)).alias(
            "short_episodes"
        ),
        F.percentile(F.when(closed, F.col("duration_s")), 0.5).alias("median_episode_s"),
        F.max("overshoot_msgs").alias("max_overshoot_msgs"),
        F.max("overshoot_bytes").alias("max_overshoot_bytes"),
        F.percentile(
            drain("peak_depth_msgs", "flow_stop_count", "flow_resume_count", "dequeued_msgs"),
            quantile,
        ).alias("drain_rate_msgs_s"),
        F.percentile(
            drain("peak_depth_bytes", "flow_stop_size", "flow_resume_size", "dequeued_bytes"),
            quantile,
        ).alias("drain_rate_bytes_s"),
    )


def queue_daily_evidence(queue_daily: DataFrame) -> DataFrame:
    """Per queue, from gold daily rows (summed over days and runs): time stopped and peak depth."""
    return queue_daily.groupBy(*QUEUE).agg(
        summed_seconds("time_stopped_s").alias("time_stopped_s"),
        summed_seconds("observed_s").alias("_observed_s"),
        F.max("max_depth_msgs").alias("peak_depth_msgs"),
        F.max("max_depth_bytes").alias("peak_depth_bytes"),
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
    logged when runs differ), its backlogged time and the deliveries made in it (see
    :func:`_link_steps`), and the most messages ready for it at once while it had credit
    (``_most_ready``: the largest ``available`` of its events with a credit above 0).

    The current credit is the credit the receiver grants now: the largest credit of the link's
    grants on the latest day (UTC date of ``ts``) of the window on which it logged one, as the
    receiver keeps it (``detail.credit_window``: what it sets is that less the messages it holds)
    or set it (``detail.link_credit``) where logged. A grant
    is a ``flow`` event carrying a credit, except those the sending end logs of itself
    (``detail.origin`` ``sender``: messages available, a drain done), which like deliveries
    carry the credit left. So a link that ran its credit down on its latest day without a grant
    (the receiver replenishing late) is judged at the window its last grant set, not at what was
    left; a receiver that granted 0 (a flow setting the credit to 0) holds 0; and a lowered
    credit is judged at its new size, not at an earlier day's it no longer holds. A link with no
    grant in the window (its credit known only from attaches, deliveries or the sender's flows)
    falls back on the largest credit of the latest day on which any of its events carried one.
    The median top-up leaves out the link's first grant after an attach: the credit it starts
    with, not a batch it used.
    """
    daily = link_daily.groupBy(*LINK).agg(
        summed_seconds("starved_s").alias("starved_s"),
        summed_seconds("attached_s").alias("attached_s"),
        F.sum("episodes").alias("episodes"),
    )
    round_trips = (
        starvations.where(~F.col("is_open") & (F.col("duration_s") > 0))
        .groupBy(*LINK)
        .agg(F.percentile("duration_s", 0.5).alias("_observed_round_trip_s"))
    )
    return (
        _per_link(_link_steps(events, _consumer_links_with_credit(events)))
        .join(daily, list(LINK), "left")
        .join(round_trips, list(LINK), "left")
    )


def _consumer_links_with_credit(events: DataFrame) -> DataFrame:
    """(broker, link) of the links :func:`consumer_link_evidence` is about: a consumer (its latest
    role) whose events carry a credit. Links that never carried one (AMQP 0-10 consumers) have
    no credit to recommend (their current credit would be null). Found by one aggregation
    before the links' window, so that only their events are put in order: a window over every
    link's events, filtered after, sorted the producers' enqueues too, most of a log (the demo's
    1.65 of 2.57 million link events)."""
    return (
        events.where(F.col("link").isNotNull())
        .groupBy(*LINK)
        .agg(_latest("link_role"), F.max(F.col("credit").isNotNull()).alias("_credit_logged"))
        .where((F.col("link_role") == "consumer") & F.col("_credit_logged"))
        .select(*LINK)
    )


def _stretch_us() -> Column:
    """The microseconds from an event to the link's next one (or the watermark), 0 when the clock
    stepped back; in whole microseconds, summed before they become seconds: the sum is exact."""
    return F.greatest(micros("_until_ts") - micros("ts"), F.lit(0))  # greatest skips a null


def _link_steps(events: DataFrame, links: DataFrame) -> DataFrame:
    """The events of each of ``links`` (broker, link) in ``seq`` order, each with the link's
    previous credit, whether the link was backlogged before and after it, when the stretch it
    starts ends, and whether a delivery it makes counts in a timed backlog (``_timed``).

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
    link_events = events.where(F.col("link").isNotNull()).join(links, list(LINK), "left_semi")
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
    attach_or_grant = F.when(_is("link_attached"), F.lit("attach")).when(_granted(), F.lit("grant"))
    stepped = (
        link_events.join(F.broadcast(watermarks), "run_id")
        .withColumn("_prev_credit", F.last("credit", ignorenulls=True).over(before))
        .withColumn(
            "_backlogged_before",
            F.coalesce(F.last(leaves, ignorenulls=True).over(before), F.lit(False)),
        )
        .withColumn("_backlogged_after", F.coalesce(leaves, F.col("_backlogged_before")))
        .withColumn("_until_ts", F.coalesce(F.lead("ts").over(in_order), F.col("_watermark_ts")))
        # A grant whose latest attach or grant before it is the attach, the link holding no
        # credit: the link's first grant.
        .withColumn(
            "_initial_grant",
            _granted()
            & (
                F.coalesce(F.last(attach_or_grant, ignorenulls=True).over(before), F.lit(""))
                == "attach"
            )
            # Only where the link held no credit since: after an attach that carried the credit
            # (a client's recorder logs it so), the next grant is a top-up (a review).
            & (F.coalesce(F.col("_prev_credit"), F.lit(0)) == 0),
        )
        # Backlogs numbered by the events that leave the link not backlogged up to here: the
        # events of one backlog, and the event that ends it, share the number of its first.
        .withColumn(
            "_backlog",
            F.sum(F.when(~F.col("_backlogged_after"), 1).otherwise(0)).over(upto_here),
        )
    )
    backlogged_after = F.col("_backlogged_after")
    # The backlog a delivery is made in: the one the event before it left (an event that ends a
    # backlog has already counted itself among the events that leave the link not backlogged).
    delivery_backlog = F.col("_backlog") - F.when(backlogged_after, 0).otherwise(1)
    # A backlog drained in the instant it appeared (deliveries stamped with the ts the messages
    # became available at, as a consumer that keeps up is logged) has no time to divide by; its
    # deliveries would inflate the rate of the link's real backlogs, so they do not count.
    timed_backlogs = (
        stepped.where(backlogged_after)
        .groupBy("run_id", *LINK, "_backlog")
        .agg(F.sum(_stretch_us()).alias("_backlog_us"))
        .where(F.col("_backlog_us") > 0)
        .select("run_id", *LINK, "_backlog", F.lit(True).alias("_timed"))
    )
    return stepped.withColumn("_delivery_backlog", delivery_backlog).join(
        timed_backlogs.withColumnRenamed("_backlog", "_delivery_backlog"),
        ["run_id", *LINK, "_delivery_backlog"],
        "left",
    )


def _deliveries(where: Column) -> Column:
    # A delivery is logged as a dequeue by some front ends and as a transfer by others.
    return F.greatest(
        F.count(F.when(where & _is("dequeue"), 1)), F.count(F.when(where & _is("transfer"), 1))
    )


def _granted() -> Column:
    """A grant: a flow event carrying a credit that the sending end did not log of itself (its
    flows report messages available or a drain done, with the credit left, DESIGN §3)."""
    return (
        _is("flow")
        & F.col("credit").isNotNull()
        & ~F.coalesce(detail_field("origin") == "sender", F.lit(False))
    )


def _per_link(stepped: DataFrame) -> DataFrame:
    """Per link, from :func:`_link_steps`: the columns :func:`consumer_link_evidence` names,
    before the gold and silver ones are joined."""
    top_up = F.col("credit") - F.col("_prev_credit")
    from_empty = _is("flow") & (top_up > 0) & (F.col("_prev_credit") == 0)
    in_backlog = F.col("_backlogged_before") & F.coalesce(F.col("_timed"), F.lit(False))
    day_credit = F.struct(utc_date("ts").alias("day"), "credit")
    granted = _granted()
    # The credit the receiver keeps (detail.credit_window: a receiver that counts the messages
    # it holds against its credit sets only the rest at each top-up, an audit's 21 of 40),
    # else what it set (detail.link_credit), else the credit logged: past the first grant the
    # sender's credit is that less what is in flight.
    day_grant = F.struct(
        utc_date("ts").alias("day"),
        F.coalesce(
            detail_whole_number("credit_window"),
            detail_whole_number("link_credit"),
            F.col("credit"),
        ).alias("credit"),
    )
    # The first grant after an attach is the credit the link starts with, not a top-up: taken
    # as one, a link never topped up had the whole credit for its batch (an audit: needs 1005
    # of the 1000 it held, "credit suffices"; logged on the attach instead, lowered to 90).
    topped_up = _is("flow") & (top_up > 0) & ~F.col("_initial_grant")
    return stepped.groupBy(*LINK).agg(
        _latest("link_role"),
        # The credit a consumer attaches with: a 0.9.1 consumer's prefetch (basic.consume).
        F.max(F.when(_is("link_attached"), F.col("credit"))).alias("_attached_credit"),
        # Artemis CORE consumers count credit in bytes and say so in every event's detail.
        F.max(detail_field("credit_unit") == "bytes").alias("_credit_in_bytes"),
        mean_delivery_bytes().alias("_mean_message_bytes"),
        # RabbitMQ's AMQP 1.0 consumer links log the credit its queue sees per consumer.
        F.max(detail_whole_number("max_queue_credit")).alias("_max_queue_credit"),
        F.max_by("queue", F.when(_is("dequeue"), F.struct("ts", "seq"))).alias("queue"),
        F.countDistinct("run_id").alias("runs"),
        _deliveries(F.lit(True)).alias("deliveries"),
        # The credit in force now: the largest grant of the latest day with a grant, else the
        # largest credit of the latest day with any credit. Structs compare field by field, so
        # each max is that day's largest; the window's largest would judge a link whose credit
        # was lowered against credit it no longer holds, and a delivery's credit is what is left.
        F.coalesce(
            F.max(F.when(granted, day_grant))["credit"],
            F.max(F.when(F.col("credit").isNotNull(), day_credit))["credit"],
        ).alias("current_credit"),
        # A top-up: a flow event's credit above the link's previous credit.
        F.percentile(F.when(topped_up, top_up), 0.5).alias("_median_top_up"),
        # How many top-ups there were, and how many came once the credit had run out (from 0).
        F.count(F.when(_is("flow") & (top_up > 0), 1)).alias("_top_ups"),
        F.count(F.when(from_empty, 1)).alias("_top_ups_from_empty"),
        # A receiver that refills at empty restores its whole credit (it has received all it
        # granted); one topping up earlier whose grant reached the sender at 0 (the round trip
        # outlasted what was left) restores less, what it granted less what was on the wire:
        # the least credit a top-up from empty left, and the largest grant.
        F.min(F.when(from_empty, F.col("credit"))).alias("_least_refill"),
        F.max(F.when(granted, F.col("credit"))).alias("_largest_grant"),
        seconds_between(F.lit(0), F.sum(F.when(F.col("_backlogged_after"), _stretch_us()))).alias(
            "_backlogged_s"
        ),
        _deliveries(in_backlog).alias("_backlogged_deliveries"),
        # The most messages the sending side had ready for it at once while it had credit: a
        # burst a smaller credit would have held back.
        F.max(F.when(F.col("credit") > 0, F.col("available"))).alias("_most_ready"),
    )

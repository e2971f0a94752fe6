"""Artemis recommendations (DESIGN.md §4 "recommendation", seed 003) in Artemis's own knobs: per
address ``max-size-bytes``, ``max-size-bytes-reject-threshold`` or the producers'
``producerWindowSize`` (:data:`ARTEMIS_ADDRESS_RULES`); per CORE consumer ``consumerWindowSize``
(:data:`ARTEMIS_CONSUMER_RULES`: 0 for a slow consumer that hogs its buffer, else the Kung & Morris
window of recommend_links.py).

Evidence, from the address state the engine (and a collector) writes in the detail of every
enqueue, rejection and flow event of an address: its policy, ``max_size_bytes``, ``address_size``
(the broker's memory estimate), rejections by ``outcome`` (``dropped``, ``failed``, ``rejected``
with the ``reject_threshold``), ``paged`` enqueues, and the producers' windows
(``producer.window`` in bytes for CORE, ``producer.credit`` in messages for AMQP). A message's
memory estimate is its body plus the address's per-message overhead: the smallest
``address_size - size_bytes`` of an enqueue (the address holding that message alone).
DataFrame -> DataFrame without I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from flowctl_core.events import PREFILL_LINK
from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.detail import detail_field, detail_whole_number
from jobs.transforms.message_log import recorded_sum
from jobs.transforms.recommend_evidence import entity_columns, mean_delivery_bytes
from jobs.transforms.recommend_rollup import latest
from jobs.transforms.saturating import (
    LONG_MAX,
    saturating_add,
    saturating_multiply,
    saturating_sum,
)
from jobs.transforms.verdict_rules import Facts, Rule, always, counted, decide, staged
from schemas.broker_events import BROKER_ARTEMIS
from schemas.model import US_PER_SECOND
from schemas.recommendations import (
    ENTITY_ADDRESS,
    KNOB_CONSUMER_WINDOW,
    KNOB_HIGHEST,
    KNOB_MAX_SIZE_BYTES,
    KNOB_PRODUCER_WINDOW,
    KNOB_REJECT_THRESHOLD,
    UNIT_BYTES,
    VERDICT_AT_RISK,
    VERDICT_KEEP,
    VERDICT_LOWER,
    VERDICT_RAISE,
)

ADDRESS = ("broker", "address")


def _is(event_type: str) -> Column:
    return F.col("event_type") == event_type


# -- evidence ---------------------------------------------------------------------------------


def address_evidence(rollup: DataFrame) -> DataFrame:
    """Per Artemis address (``detail.address``), from the window's day rollup
    (recommend_rollup.py): its settings at the latest event, peak size, messages dropped,
    failed, rejected and paged, episodes blocked, and the largest message and the per-message
    overhead of the memory estimate (without enqueues, the most bytes a message took in the
    address's samples, overhead included)."""
    settings_at = F.struct("max_size_bytes__ts", "max_size_bytes__seq")
    return (
        rollup.where(F.col("address").isNotNull())
        .groupBy(*ADDRESS)
        .agg(
            latest("last_queue").alias("queue"),
            F.countDistinct("run_id").alias("runs"),
            latest("address_policy"),
            latest("max_size_bytes"),
            # As of the latest event that logs the address's settings: a threshold removed (a
            # later run without one; the detail leaves it out) is no longer in force, and the
            # latest non-null one said it was (an audit).
            F.max_by(
                "reject_threshold", F.when(F.col("max_size_bytes__seq").isNotNull(), settings_at)
            ).alias("reject_threshold"),
            F.max("peak_address_bytes").alias("peak_address_bytes"),
            recorded_sum("dropped_msgs").alias("dropped_msgs"),
            recorded_sum("failed_msgs").alias("failed_msgs"),
            recorded_sum("rejected_msgs").alias("rejected_msgs"),
            recorded_sum("paged_msgs").alias("paged_msgs"),
            F.sum("flow_stops").alias("episodes"),
            # Without enqueues (a collector's samples), the most bytes a message took in the
            # address: its size over its messages in a sample, the overhead included.
            F.coalesce(F.max("max_enqueue_bytes"), F.max("max_sampled_message_bytes")).alias(
                "max_message_bytes"
            ),
            F.min("min_message_overhead_bytes").alias("_message_overhead_bytes"),
        )
    )


def address_producers(rollup: DataFrame) -> DataFrame:
    """Per address, from the window's day rollup: the overshoot bound of BLOCK (seed 003: about
    producers x window) as the largest over one run of its producers' windows, CORE windows in
    bytes and AMQP credits in messages apart; the CORE producers and the largest CORE window. An
    AMQP enqueue logs the credit left after it, so a producer's credit window is the largest
    logged + 1; an AMQP publisher a client recorded counts with the most credit it was granted."""
    logged = (
        rollup.where(
            (F.col("enqueues") > 0)
            & F.col("address").isNotNull()
            & F.col("link").isNotNull()
            & (F.col("link") != PREFILL_LINK)
        )
        .groupBy(*ADDRESS, "run_id", "link")
        .agg(
            F.max("producer_window").alias("window"),
            saturating_add(F.max("producer_credit"), F.lit(1)).alias("amqp_credit"),
            F.max("enqueue_capacity").alias("capacity"),
        )
    )
    # A real broker's AMQP publishers are in the log only as their clients recorded their links
    # (collectors/proton_links.py: the address in ``queue``, the credit the broker granted):
    # left out, an address they overshot was told to lower CORE windows it had none of (a
    # real-broker walk-through). Their credit is the most the broker granted at once. A link to
    # a fully qualified queue name counts on its address (recommend_rollup.py).
    recorded = (
        rollup.where(F.col("publisher_address").isNotNull())
        .groupBy("broker", F.col("publisher_address").alias("address"), "run_id", "link")
        .agg(
            F.lit(None).cast("long").alias("window"),
            F.coalesce(F.max("max_credit"), F.lit(0)).alias("amqp_credit"),
            F.lit(None).cast("long").alias("capacity"),
        )
    )
    per_producer = (
        logged.unionByName(recorded)
        # The least credit one message of the producer can take (its encoded size): a window of
        # W bytes covers capacity = (W - 1) // encoded messages or so (flowctl_core
        # ProducerCredits.capacity_msgs), so the encoded size is above (W - 1) / (capacity + 1).
        .withColumn(
            "_message_credit",
            F.when(
                (F.col("window") > 0) & (F.col("capacity") > 0),
                F.floor((F.col("window") - 1) / saturating_add(F.col("capacity"), F.lit(1))) + 1,
            ),
        )
    )
    core = F.col("window").isNotNull()
    bounded = core & (F.col("window") > 0)
    per_run = per_producer.groupBy(*ADDRESS, "run_id").agg(
        F.count(F.when(core, 1)).alias("core_producers"),
        saturating_sum(F.when(bounded, F.col("window"))).alias("core_window_bytes"),
        # The messages the bounded windows cover (a CORE enqueue's capacity, spent on encoded
        # sizes): unknown unless every such producer logged one.
        F.when(
            F.count(F.when(bounded & F.col("capacity").isNull(), 1)) == 0,
            saturating_sum(F.when(bounded, F.col("capacity"))),
        ).alias("core_window_msgs"),
        F.min("_message_credit").alias("core_message_credit"),
        F.count(F.when(F.col("window") < 0, 1)).alias("unbounded_windows"),
        F.max("window").alias("producer_window"),
        F.count(F.when(F.col("amqp_credit").isNotNull(), 1)).alias("amqp_producers"),
        saturating_sum(F.col("amqp_credit")).alias("amqp_credits"),
    )
    return per_run.groupBy(*ADDRESS).agg(
        *(
            F.max(column).alias(column)
            for column in (
                "core_producers",
                "core_window_bytes",
                "core_window_msgs",
                "unbounded_windows",
                "producer_window",
                "amqp_producers",
                "amqp_credits",
            )
        ),
        F.min("core_message_credit").alias("core_message_credit"),
    )


def artemis_consumer_evidence(events: DataFrame) -> DataFrame:
    """Per Artemis CORE consumer: its ``consumerWindowSize`` (``detail.window`` of its attach; -1
    unbounded, 0 no buffer), its queue, and the rate at which it takes messages: the window credit
    its client returns as its application takes them (``flow`` events of origin ``client``), in
    messages of the mean size it received, per second from its first such return to its last
    (in each run the link has, the runs' credit and seconds summed). The credit of that first
    return is left out: it is for messages taken before the span begins (a window returned in
    two half-window batches read twice its rate). A bounded window's first
    flow is its grant at the attach, not a return. A window-0 consumer asks for each message with
    1 byte and, as it takes it, returns its size less that byte: its takes are its flows of more
    than 1 byte, each worth a message. A message's bytes are its delivery's, as the credit counts
    them (:func:`~jobs.transforms.recommend_evidence.mean_delivery_bytes`). Null without two
    returns (an unbounded window returns nothing)."""
    consumer_events = events.where(
        (F.col("link_role") == "consumer") & (detail_field("credit_unit") == "bytes")
    )
    # The window of the consumer's attach: per run for its returns, per link for the advice.
    attached_window = F.max(F.when(_is("link_attached"), detail_whole_number("window")))
    link_run = Window.partitionBy("broker", "run_id", "link")
    no_buffer = F.coalesce(F.col("_window") == 0, F.lit(False))
    credits = detail_whole_number("credits")
    takes = (
        consumer_events.withColumn("_window", attached_window.over(link_run))
        .where(_is("flow") & (detail_field("origin") == "client") & ~(no_buffer & (credits == 1)))
        .withColumn("_taken_bytes", saturating_add(credits, F.when(no_buffer, 1).otherwise(0)))
        # The takes numbered from 1: a bounded window's attach grant is number 0.
        .withColumn(
            "_nth",
            F.row_number().over(link_run.orderBy("seq")) - F.when(no_buffer, 0).otherwise(1),
        )
    )
    # Per run, then summed: a link that recurs in several runs (a scenario run each day, a
    # collector's sessions) takes its messages only within each run's span of returns, not
    # across the time between runs (nor twice over runs that share their clock times).
    returned = (
        takes.where(F.col("_nth") >= 1)
        .groupBy("broker", "run_id", "link")
        .agg(
            saturating_sum(F.when(F.col("_nth") > 1, F.col("_taken_bytes"))).alias(
                "_returned_bytes"
            ),
            (F.max(F.unix_micros("ts")) - F.min(F.unix_micros("ts"))).alias("_return_span_us"),
        )
        .groupBy("broker", "link")
        .agg(
            saturating_sum(F.col("_returned_bytes")).alias("_returned_bytes"),
            F.sum("_return_span_us").alias("_return_span_us"),
        )
    )
    per_consumer = consumer_events.groupBy("broker", "link").agg(
        attached_window.alias("consumer_window"),
        mean_delivery_bytes().alias("_received_mean_bytes"),
        F.max_by("queue", F.when(F.col("queue").isNotNull(), F.col("seq"))).alias("_queue"),
    )
    # No rate without a span of returns or a size to count them in (empty bodies: a collector's
    # log may have them; ANSI SQL fails the whole job on a division by 0).
    rate = F.when(
        (F.col("_return_span_us") > 0) & (F.col("_received_mean_bytes") > 0),
        F.col("_returned_bytes")
        / F.col("_received_mean_bytes")
        / F.col("_return_span_us")
        * float(US_PER_SECOND),
    )
    siblings = Window.partitionBy("broker", "_queue")
    return (
        per_consumer.join(returned, ["broker", "link"], "left")
        .withColumn("processing_rate_msgs_s", rate)
        .withColumn("_fastest_sibling_rate", F.max("processing_rate_msgs_s").over(siblings))
        .withColumn("_consumers_on_queue", F.count(F.lit(1)).over(siblings))
        .select(
            "broker",
            "link",
            "consumer_window",
            "processing_rate_msgs_s",
            "_fastest_sibling_rate",
            "_consumers_on_queue",
        )
    )


# -- addresses --------------------------------------------------------------------------------


def _address_facts(joined: DataFrame, policy: RecommendPolicy) -> tuple[DataFrame, Facts]:
    """``joined`` with an address's decisions staged, and the facts its rules read: ``policy``;
    ``max_size`` (-1: no limit), ``peak``, ``overshoot`` (peak past max-size-bytes, floored at
    0) and ``tolerated`` (policy.max_overshoot_share of it), ``memory`` (one message's
    estimate); ``dropped``, ``failed``, ``rejected``, ``paged`` (messages); the BLOCK bound of
    the producers' windows ``bound`` (CORE windows + AMQP credits x memory) and its CORE part
    ``core_bound`` (the messages the windows cover x memory where their capacity is logged, never
    below the windows' bytes, ``core_window_bytes``), ``message_credit`` (the credit one message
    takes, memory where unknown); ``reject_threshold`` (null when not logged); ``core_producers``,
    ``amqp_producers``, ``unbounded`` (CORE producers with window -1), ``window`` (the largest CORE
    window, -1 when any is unbounded), ``blocks`` (policy BLOCK); whether the CORE windows
    ``core_can_overshoot`` (their bound with margin, or an unbounded one, passes the tolerated
    overshoot); and the values to recommend: ``limit_for_dropped`` (room for the peak and every
    dropped message, with margin), ``hard_limit`` (max-size-bytes + the bound with margin;
    ``limit_and_bound`` without it), ``one_message_windows`` (a message's memory per CORE
    producer),
    ``bounded_window`` (the CORE window at which producers x window, with margin, fits in what
    of the tolerated overshoot the AMQP credits leave; at least one message), ``window_fits``
    (that window does keep it there: not when floored at one message) and
    ``smaller_window`` (the smaller of that and the window that scales the observed overshoot,
    with margin, into the tolerated one: room for the worst overshoot seen or bounded)."""
    margin = 1 + policy.safety_margin

    def count(column: str) -> Column:
        return F.coalesce(F.col(column), F.lit(0))

    # Sums and products of logged sizes are held at a long (saturating_add, _multiply).
    memory = saturating_add(
        F.col("max_message_bytes"), F.coalesce(F.col("_message_overhead_bytes"), F.lit(0))
    )
    max_size = F.coalesce(F.col("max_size_bytes"), F.lit(-1))
    overshoot = F.greatest(saturating_add(F.col("peak_address_bytes"), -max_size), F.lit(0))
    # The CORE windows' bound in the address's bytes: a window of credit is spent on encoded
    # sizes, smaller than the memory estimate a message takes in the address, so the messages
    # it covers (its producers' logged capacity) x the estimate, where logged; never below the
    # windows' own bytes (an audit: 4 x 64 KiB windows of 1 KiB messages, a bound of 262144,
    # took the engine 340512 bytes past the limit, 188 messages x 2092).
    windows = count("core_window_bytes")
    core_bound = F.greatest(
        windows, F.coalesce(saturating_multiply(F.col("core_window_msgs"), memory), F.lit(0))
    )
    bound = saturating_add(core_bound, saturating_multiply(count("amqp_credits"), memory))
    tolerated = F.floor(max_size * policy.max_overshoot_share)
    joined, facts = staged(
        joined,
        {
            "_memory": memory,
            "_max_size": max_size,
            "_overshoot": F.when(max_size >= 0, overshoot),
            "_tolerated": tolerated,
            "_bound": bound,
            "_core_bound": core_bound,
            "_dropped": count("dropped_msgs"),
            "_failed": count("failed_msgs"),
            "_rejected": count("rejected_msgs"),
            "_paged": count("paged_msgs"),
            # Only a collector's rows (they see no message): what was lost is not in the log.
            "_losses_unseen": F.col("dropped_msgs").isNull(),
        },
    )
    f = {name.lstrip("_"): column for name, column in facts.items()}
    core_producers, unbounded = count("core_producers"), count("unbounded_windows")
    window = F.when(unbounded > 0, F.lit(-1)).otherwise(F.col("producer_window"))
    core_bound = f["core_bound"]
    # One message's credit (the least a producer's logged window and capacity allow); where the
    # log has no capacity, its memory estimate, and windows are sized in the address's bytes.
    logged_credit = F.col("core_message_credit")
    message_credit = F.coalesce(logged_credit, f["memory"])
    # What of the tolerated overshoot the AMQP credits leave the CORE windows, shared among them.
    core_room = f["tolerated"] / margin - saturating_multiply(count("amqp_credits"), f["memory"])
    # (Guarded divisions: ANSI SQL fails the whole job on a division by 0.)
    room_per_producer = F.floor(F.when(core_producers > 0, core_room / core_producers))
    # At most what producerWindowSize takes, a Java int (an audit: a 32 GiB address gave one
    # producer 2,863,311,530 bytes): a smaller window still keeps producers x window in the room.
    most, _ = KNOB_HIGHEST[KNOB_PRODUCER_WINDOW]
    # With the credit a message takes known: the window that covers the n messages whose
    # estimates fit in the room, (n + 1) x that credit less a byte covering at most n (at least
    # one message's credit).
    fitting = F.floor(F.when(f["memory"] > 0, room_per_producer / f["memory"]))
    by_messages = saturating_multiply(fitting + 1, logged_credit) - 1
    bounded_window = F.least(
        F.greatest(F.coalesce(by_messages, room_per_producer), message_credit), F.lit(most)
    )
    scaled_window = F.floor(
        F.when(
            (window > 0) & (f["overshoot"] > 0),
            window.cast("double") * f["tolerated"] / (f["overshoot"] * margin),
        )
    )
    # Staged once: each saturating sum is a few decimal CASEs, and inlined in every rule that
    # reads it they grew the address rows' generated code past the JVM's 64 KB per method.
    joined, held = staged(
        joined,
        {
            "_bounded_window": bounded_window,
            "_reject_gap": F.greatest(
                saturating_add(F.col("reject_threshold"), -f["max_size"]), F.lit(1)
            ),
            "_limit_for_dropped": F.ceil(
                saturating_add(
                    F.col("peak_address_bytes"), saturating_multiply(f["dropped"], f["memory"])
                )
                * margin
            ),
            "_hard_limit": saturating_add(f["max_size"], F.ceil(f["bound"] * margin)),
            "_limit_and_bound": saturating_add(f["max_size"], f["bound"]),
            "_one_message_windows": saturating_multiply(f["memory"], core_producers),
        },
    )
    h = {name.lstrip("_"): column for name, column in held.items()}
    return joined, Facts(
        policy=policy,
        peak=F.col("peak_address_bytes"),
        reject_threshold=F.col("reject_threshold"),
        core_producers=core_producers,
        amqp_producers=count("amqp_producers"),
        unbounded=unbounded,
        core_window_bytes=windows,
        message_credit=message_credit,
        core_can_overshoot=(unbounded > 0) | (core_bound * margin > f["tolerated"]),
        bounded_window=h["bounded_window"],
        # Whether bounded_window keeps producers x window within the tolerated overshoot: not
        # when it is floored at one message (too many producers, or too little room).
        window_fits=F.coalesce(room_per_producer >= f["memory"], F.lit(False)),
        window=window,
        blocks=F.coalesce(F.col("address_policy"), F.lit("")) == "BLOCK",
        reject_gap=h["reject_gap"],
        limit_for_dropped=h["limit_for_dropped"],
        hard_limit=h["hard_limit"],
        limit_and_bound=h["limit_and_bound"],
        one_message_windows=h["one_message_windows"],
        smaller_window=F.greatest(F.least(scaled_window, h["bounded_window"]), message_credit),
        **f,
    )


def _bytes(text: str, *columns: Column) -> Column:
    return F.format_string(text, *columns)


def _bounded_window_text(a: Facts, keeps: str) -> Column:
    """What ``bounded_window`` does, said truly: ``keeps`` (a phrase with the window's ``%,d``)
    "within the tolerated overshoot" when it fits; floored at one message it does not, and the
    text says by how much producers x window still passes the limit."""
    fits = _bytes(
        keeps + " within the %,d tolerated (%.0f%%) with %.0f%% margin",
        a.bounded_window,
        a.tolerated,
        F.lit(a.policy.max_overshoot_share * 100),
        F.lit(a.policy.safety_margin * 100),
    )
    floored = _bytes(
        "even windows of one message (%,d bytes, the smallest) let %s pass "
        "max-size-bytes by about %,d bytes, over the %,d tolerated (%.0f%%): fewer producers on "
        "the address, or a larger max-size-bytes",
        a.bounded_window,
        counted(a.core_producers, "producer"),
        a.one_message_windows,
        a.tolerated,
        F.lit(a.policy.max_overshoot_share * 100),
    )
    return F.when(a.window_fits, fits).otherwise(floored)


def _moved_threshold_text(a: Facts) -> Column:
    """What becomes of a reject threshold the raised limit reaches. Artemis takes none at or
    below max-size-bytes (the engine refuses one too), so it moves up with the limit by the gap
    it had, held at a long's largest, and goes off above a limit of that: as the what-if applies
    the new limit (flowctl_core/whatif_knobs.py ``_max_size``; a test keeps the two equal)."""
    limit = a.limit_for_dropped
    moved = saturating_add(limit, a.reject_gap)
    # None in force (null) is not reached: a null condition would fall through to the moves.
    reached = F.coalesce((a.reject_threshold >= 0) & (a.reject_threshold <= limit), F.lit(False))
    return (
        F.when(~reached, F.lit(""))
        .when(
            limit >= F.lit(LONG_MAX),
            _bytes(
                "; and max-size-bytes-reject-threshold %,d off (-1): none is above a limit of "
                "a long's largest, and Artemis takes none at or below the limit",
                a.reject_threshold,
            ),
        )
        .when(
            moved - limit < a.reject_gap,
            _bytes(
                "; and max-size-bytes-reject-threshold from %,d to %,d, a long's largest, %,d "
                "bytes above it (Artemis takes none at or below the limit)",
                a.reject_threshold,
                moved,
                moved - limit,
            ),
        )
        .otherwise(
            _bytes(
                "; and max-size-bytes-reject-threshold from %,d to %,d, the same %,d bytes "
                "above it (Artemis takes none at or below the limit)",
                a.reject_threshold,
                moved,
                a.reject_gap,
            )
        )
    )


#: An address's verdict, the knob it acts on and the value it recommends: the first rule that
#: holds.
ARTEMIS_ADDRESS_RULES: tuple[Rule, ...] = (
    Rule(
        "no address limit",
        lambda a: a.max_size < 0,
        VERDICT_KEEP,
        lambda a: F.lit("max-size-bytes -1: the address has no limit of its own to advise on"),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
    Rule(
        "messages dropped at the limit",
        lambda a: a.dropped > 0,
        VERDICT_RAISE,
        lambda a: F.concat(
            _bytes(
                "%s dropped at max-size-bytes %,d (DROP); room for the peak %,d bytes and "
                "every dropped message (~%,d bytes each) with %.0f%% margin; if the consumers "
                "cannot keep up for good, BLOCK or PAGE instead",
                counted(a.dropped, "message"),
                a.max_size,
                a.peak,
                a.memory,
                F.lit(a.policy.safety_margin * 100),
            ),
            # Artemis takes no reject threshold at or below max-size-bytes (the engine refuses
            # one too), so a threshold the new limit reaches moves up with it, by the gap it had:
            # as the what-if applies the new limit (flowctl_core/whatif_knobs.py _max_size).
            _moved_threshold_text(a),
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.limit_for_dropped,
    ),
    # FAIL throws ActiveMQAddressFullException at the producer, which stops sending: what it
    # would have sent after is not in the log, so no limit can be sized from it.
    Rule(
        "producers failed at the limit",
        lambda a: a.failed > 0,
        VERDICT_AT_RISK,
        lambda a: _bytes(
            "%s failed at max-size-bytes %,d (FAIL) and the producers stopped: how much they "
            "would have sent is not in the log, so no limit is sized; BLOCK holds them back "
            "instead of failing them",
            counted(a.failed, "send"),
            a.max_size,
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
    Rule(
        "AMQP rejections inside the credit overshoot",
        lambda a: (a.rejected > 0) & (a.reject_threshold < a.limit_and_bound),
        VERDICT_RAISE,
        lambda a: _bytes(
            "%s rejected above the reject threshold %,d, inside the overshoot "
            "BLOCK allows the producers' credits (%,d bytes past max-size-bytes %,d): well-behaved "
            "producers are refused; the hard limit goes above it with %.0f%% margin",
            counted(a.rejected, "AMQP message"),
            a.reject_threshold,
            a.bound,
            a.max_size,
            F.lit(a.policy.safety_margin * 100),
        ),
        KNOB_REJECT_THRESHOLD,
        lambda a: a.hard_limit,
    ),
    # Only where the CORE windows cannot account for the overshoot: where they can, lowering
    # them is the advice (a reject threshold applies to AMQP messages alone).
    Rule(
        "AMQP overshoot without a hard limit",
        lambda a: (
            a.blocks
            & (a.amqp_producers > 0)
            & (a.overshoot > a.tolerated)
            & a.reject_threshold.isNull()
            & ~((a.core_producers > 0) & a.core_can_overshoot)
        ),
        VERDICT_AT_RISK,
        lambda a: _bytes(
            "AMQP producers passed max-size-bytes %,d by %,d bytes (their credits allow %,d) and "
            "no reject threshold is in force: a client that ignores credit is not stopped; set the "
            "hard limit above the credit overshoot with %.0f%% margin",
            a.max_size,
            a.overshoot,
            a.bound - a.core_bound,
            F.lit(a.policy.safety_margin * 100),
        ),
        KNOB_REJECT_THRESHOLD,
        lambda a: a.hard_limit,
    ),
    # producerWindowSize -1 is no producer flow control: BLOCK cannot hold such a producer back.
    Rule(
        "CORE windows unbounded",
        lambda a: a.blocks & (a.unbounded > 0),
        VERDICT_AT_RISK,
        lambda a: F.concat(
            _bytes(
                "producerWindowSize -1 (no producer flow control) on %,d of %s: BLOCK cannot "
                "hold such a producer back, so nothing bounds how far it passes "
                "max-size-bytes %,d (peak %,d bytes); ",
                a.unbounded,
                counted(a.core_producers, "CORE producer"),
                a.max_size,
                a.peak,
            ),
            _bounded_window_text(a, "a window of %,d bytes each keeps producers x window"),
        ),
        KNOB_PRODUCER_WINDOW,
        lambda a: a.bounded_window,
    ),
    # A window no larger than one message cannot shrink: each send still takes that message's
    # credit (an audit: "lower" recommended 1024 -> 2092 bytes, one message's estimate). Ahead of
    # both rules that would otherwise shrink it: the overshoot seen, and the one producers x window
    # could make.
    Rule(
        "CORE windows already at one message",
        lambda a: (
            a.blocks
            & (a.core_producers > 0)
            & (a.window > 0)
            & (a.window <= a.message_credit)
            & (((a.overshoot > a.tolerated) & (a.amqp_producers == 0)) | a.core_can_overshoot)
        ),
        VERDICT_AT_RISK,
        lambda a: _bytes(
            "%s with windows of at most %,d bytes, no larger than one message "
            "(~%,d bytes, what a send takes whatever the window); past max-size-bytes %,d the "
            "overshoot seen was %,d bytes and producers x window is %,d, against the %,d tolerated "
            "(%.0f%%): "
            "a smaller window bounds nothing more; fewer producers on the address, or a larger "
            "max-size-bytes",
            counted(a.core_producers, "CORE producer"),
            a.window,
            a.message_credit,
            a.max_size,
            F.coalesce(a.overshoot, F.lit(0)),
            a.core_bound,
            a.tolerated,
            F.lit(a.policy.max_overshoot_share * 100),
        ),
        KNOB_PRODUCER_WINDOW,
        lambda a: a.window,
    ),
    # Lowering CORE windows helps only where they can account for the overshoot: not where AMQP
    # credits made it and the windows are too small to (that is the next rule's).
    Rule(
        "CORE windows overshoot the address",
        lambda a: (
            a.blocks
            & (a.core_producers > 0)
            & (a.overshoot > a.tolerated)
            & (a.core_can_overshoot | (a.amqp_producers == 0))
        ),
        VERDICT_LOWER,
        lambda a: _bytes(
            "BLOCK let %s with %,d-byte windows (%,d bytes in all) pass "
            "max-size-bytes %,d by %,d bytes, over the %,d tolerated (%.0f%%): overshoot is about "
            "producers x window (seed 003), so the windows shrink to leave room for the worst "
            "overshoot seen or bounded, with %.0f%% margin",
            counted(a.core_producers, "CORE producer"),
            a.window,
            a.core_window_bytes,
            a.max_size,
            a.overshoot,
            a.tolerated,
            F.lit(a.policy.max_overshoot_share * 100),
            F.lit(a.policy.safety_margin * 100),
        ),
        KNOB_PRODUCER_WINDOW,
        lambda a: a.smaller_window,
    ),
    # Artemis grants AMQP producers credit in messages (100 at a time, seed 003), not a knob of
    # the address; the reject threshold in force (the earlier rule took an address without one)
    # is what bounds their overshoot.
    Rule(
        "AMQP credits overshoot the address",
        lambda a: a.blocks & (a.amqp_producers > 0) & (a.overshoot > a.tolerated),
        VERDICT_KEEP,
        lambda a: _bytes(
            "AMQP producers' credits (%,d messages, ~%,d bytes) passed max-size-bytes %,d by %,d "
            "bytes, over the %,d tolerated; the CORE windows (%,d bytes in all) cannot account for "
            "it; the reject threshold %,d in force is the hard limit that bounds it",
            F.col("amqp_credits"),
            a.bound - a.core_bound,
            a.max_size,
            a.overshoot,
            a.tolerated,
            a.core_bound,
            a.reject_threshold,
        ),
        KNOB_REJECT_THRESHOLD,
        lambda a: a.reject_threshold,
    ),
    # Seed 003's bound, before it is seen: producers x window past the limit.
    Rule(
        "CORE windows could overshoot the address",
        lambda a: a.blocks & (a.core_producers > 0) & a.core_can_overshoot,
        VERDICT_AT_RISK,
        lambda a: F.concat(
            _bytes(
                "%s with %,d-byte windows may pass max-size-bytes %,d by about %,d "
                "bytes (producers x window, seed 003), over the %,d tolerated (%.0f%%), although "
                "the overshoot seen was %,d: ",
                counted(a.core_producers, "CORE producer"),
                a.window,
                a.max_size,
                a.core_bound,
                a.tolerated,
                F.lit(a.policy.max_overshoot_share * 100),
                F.coalesce(a.overshoot, F.lit(0)),
            ),
            _bounded_window_text(a, "windows of %,d bytes keep it"),
        ),
        KNOB_PRODUCER_WINDOW,
        lambda a: a.bounded_window,
    ),
    # A collector's log (DESIGN §6) has the address's size but no message, so no producer: the
    # overshoot is seen, its cause (producers x window) is not, and "within" would be false.
    Rule(
        "overshoot by producers not in the log",
        lambda a: (
            a.blocks
            & (a.core_producers == 0)
            & (a.amqp_producers == 0)
            & (a.overshoot > a.tolerated)
        ),
        VERDICT_AT_RISK,
        lambda a: _bytes(
            "BLOCK let the address pass max-size-bytes %,d by %,d bytes (peak %,d), over the %,d "
            "tolerated (%.0f%%), and the log names none of its producers (a collector sees no "
            "messages): overshoot is about producers x window (seed 003), so lower the CORE "
            "producers' producerWindowSize, or bound it with a reject threshold",
            a.max_size,
            a.overshoot,
            a.peak,
            a.tolerated,
            F.lit(a.policy.max_overshoot_share * 100),
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
    # A collector sees the address's size, not its messages: at the limit DROP drops and FAIL
    # refuses (and a reject threshold refuses AMQP messages) without a row in the log, so "within
    # its limit, nothing lost" would be a guess (an audit: said of addresses that had lost some).
    Rule(
        "losses not in the log",
        lambda a: (
            a.losses_unseen
            & (a.max_size >= 0)
            & (
                (F.col("address_policy").isin("DROP", "FAIL") & (a.peak >= a.max_size))
                | (a.reject_threshold.isNotNull() & (a.peak >= a.reject_threshold))
            )
        ),
        VERDICT_AT_RISK,
        lambda a: _bytes(
            "the address reached %s (peak %,d bytes), where Artemis %s; a collector sees no "
            "messages, so how many is not in the log: if the consumers cannot keep up for good, "
            "raise max-size-bytes, or BLOCK or PAGE instead",
            F.when(
                a.reject_threshold.isNotNull() & (a.peak >= a.reject_threshold),
                F.format_string("its reject threshold %,d", a.reject_threshold),
            ).otherwise(
                F.format_string("max-size-bytes %,d (%s)", a.max_size, F.col("address_policy"))
            ),
            a.peak,
            F.when(
                a.reject_threshold.isNotNull() & (a.peak >= a.reject_threshold),
                F.lit("refuses AMQP messages"),
            )
            .when(F.col("address_policy") == "DROP", F.lit("drops messages"))
            .otherwise(F.lit("fails sends")),
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
    Rule(
        "paging",
        lambda a: a.paged > 0,
        VERDICT_KEEP,
        lambda a: _bytes(
            "%s paged to disk at max-size-bytes %,d: PAGE works as configured (raise "
            "the limit to page less)",
            counted(a.paged, "message"),
            a.max_size,
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
    Rule(
        "within its limit",
        always,
        VERDICT_KEEP,
        lambda a: _bytes(
            "peak %,d bytes against max-size-bytes %,d (%s): overshoot %,d within the %,d "
            "tolerated, %s",
            a.peak,
            a.max_size,
            F.coalesce(F.col("address_policy"), F.lit("?")),
            F.coalesce(a.overshoot, F.lit(0)),
            a.tolerated,
            F.when(
                a.losses_unseen,
                F.lit(
                    "and no sample showed it at a limit where it loses messages (a collector sees "
                    "no message, nor a peak between its samples)"
                ),
            ).otherwise(F.lit("nothing lost or rejected")),
        ),
        KNOB_MAX_SIZE_BYTES,
        lambda a: a.max_size,
    ),
)

#: Each knob's value now, for the knob the winning rule acts on.
_CURRENT_ADDRESS_VALUE: dict[str, Callable[[Facts], Column]] = {
    KNOB_MAX_SIZE_BYTES: lambda a: a.max_size,
    KNOB_REJECT_THRESHOLD: lambda a: a.reject_threshold,
    KNOB_PRODUCER_WINDOW: lambda a: a.window,
}


def current_value(knob: Column, values: dict[str, Callable[[Facts], Column]], f: Facts) -> Column:
    """The value now of whichever of ``values``' knobs ``knob`` names."""
    chosen = F.lit(None).cast("long")
    for name, value in values.items():
        chosen = F.when(knob == name, value(f).cast("long")).otherwise(chosen)
    return chosen


def recommend_addresses(
    evidence: DataFrame,
    producers: DataFrame,
    daily_evidence: DataFrame,
    policy: RecommendPolicy,
) -> DataFrame:
    """One recommendation per Artemis address (the schema's columns that concern it; the caller
    adds the date columns). ``daily_evidence`` is recommend_evidence.queue_daily_evidence: an
    address writes its flow events under its name in ``queue``."""
    daily = daily_evidence.withColumnRenamed("queue", "address")
    joined = evidence.join(producers, list(ADDRESS), "left").join(daily, list(ADDRESS), "left")
    joined, facts = _address_facts(joined, policy)
    decision = decide(ARTEMIS_ADDRESS_RULES, facts)
    joined, decided = staged(joined, {"_knob": decision.knob, "_value": decision.value})
    observed = F.col("_observed_s")
    return joined.select(
        *entity_columns(ENTITY_ADDRESS, "address"),
        decision.verdict.alias("verdict"),
        decision.rationale.alias("rationale"),
        F.lit(BROKER_ARTEMIS).alias("broker_kind"),
        decided["_knob"].alias("knob"),
        current_value(decided["_knob"], _CURRENT_ADDRESS_VALUE, facts).alias("current_value"),
        decided["_value"].alias("recommended_value"),
        F.lit(UNIT_BYTES).alias("unit"),
        decision.rule.alias("rule"),
        F.col("episodes"),
        F.coalesce(F.col("time_stopped_s"), F.lit(0.0)).alias("time_stopped_s"),
        F.when(observed > 0, F.col("time_stopped_s") / observed).alias("stopped_share"),
        F.col("rejected_msgs"),
        F.col("max_size_bytes").alias("max_size"),
        F.col("peak_address_bytes").alias("peak_depth_bytes"),
        facts.overshoot.alias("max_overshoot_bytes"),
        "max_message_bytes",
    )


# -- consumers --------------------------------------------------------------------------------


def is_slow(k: Facts) -> Column:
    """A CORE consumer that shares its queue and processes at less than ``slow_consumer_share``
    of the fastest consumer's rate (seed 003, "slow consumers"); false when a rate is unknown."""
    return F.coalesce(
        (F.col("_consumers_on_queue") >= 2)
        & (
            F.col("processing_rate_msgs_s")
            < F.col("_fastest_sibling_rate") * k.policy.slow_consumer_share
        ),
        F.lit(False),
    )


def hogs_its_buffer(k: Facts) -> Column:
    """A slow CORE consumer (:func:`is_slow`) with a buffer (window not 0)."""
    return (F.coalesce(F.col("consumer_window"), F.lit(0)) != 0) & is_slow(k)


#: The rules an Artemis CORE consumer's window is judged by before Kung & Morris's (the consumer
#: rules of recommend_links.py follow them: ARTEMIS_CONSUMER_RULES there).
SLOW_CONSUMER_RULE = Rule(
    "slow consumer hogs its buffer",
    lambda k: F.coalesce(hogs_its_buffer(k), F.lit(False)),
    VERDICT_LOWER,
    lambda k: F.format_string(
        "processes %,.1f msgs/s, under %.0f%% of the %,.1f msgs/s of the fastest consumer on its "
        "queue, with a %,d-byte window: the messages in its buffer wait for it while the others "
        "idle (seed 003: slow consumers take consumerWindowSize 0)",
        F.col("processing_rate_msgs_s"),
        F.lit(k.policy.slow_consumer_share * 100),
        F.col("_fastest_sibling_rate"),
        F.col("consumer_window"),
    ),
    KNOB_CONSUMER_WINDOW,
    lambda k: F.lit(0),
)

#: A slow consumer already without a buffer: window 0 is what seed 003 advises for it, whatever
#: its starvation (it asks for one message at a time, so it is starved between every two), and
#: Kung & Morris's window would give it the buffer the rule above takes away.
SLOW_CONSUMER_WITHOUT_BUFFER_RULE = Rule(
    "slow consumer without a buffer",
    lambda k: (F.coalesce(F.col("consumer_window"), F.lit(-1)) == 0) & is_slow(k),
    VERDICT_KEEP,
    lambda k: F.format_string(
        "processes %,.1f msgs/s, under %.0f%% of the %,.1f msgs/s of the fastest consumer on its "
        "queue, with consumerWindowSize 0: no buffer, so the others take the messages it is not "
        "ready for (seed 003: slow consumers take 0)",
        F.col("processing_rate_msgs_s"),
        F.lit(k.policy.slow_consumer_share * 100),
        F.col("_fastest_sibling_rate"),
    ),
    KNOB_CONSUMER_WINDOW,
    lambda k: F.lit(0),
)

#: An unbounded window on a queue shared with other consumers, its pace not in the log: the
#: broker sends it every message it has without waiting for credit, so its deliveries are the
#: broker's pushes (artemis-slow-fast-consumers: 200 each to a fast and a very slow consumer, in
#: one instant) and it returns no credit to measure a pace by. Kung & Morris's window from those
#: deliveries would bound it alone, handing its share to the unbounded buffers beside it: right
#: for the slow one, wrong for the fast one (the what-if: its queue processes 349 -> 235), and
#: the log does not say which it is.
UNBOUNDED_SHARED_RULE = Rule(
    "unbounded window on a shared queue, pace unknown",
    lambda k: (
        (F.coalesce(F.col("consumer_window"), F.lit(0)) < 0)
        & (F.coalesce(F.col("_consumers_on_queue"), F.lit(1)) >= 2)
        & F.col("processing_rate_msgs_s").isNull()
    ),
    VERDICT_KEEP,
    lambda k: F.format_string(
        "consumerWindowSize -1 on a queue it shares with %s: the broker sends it every message "
        "it has without waiting for credit, so its %,d deliveries are the broker's pushes, not "
        "its pace, and it returns no credit that would give one; the log cannot tell whether it "
        "is the slow one: window not assessed (seed 003: a consumer much slower than the others "
        "on its queue takes 0, the others a bounded window)",
        F.when(F.col("_consumers_on_queue") == 2, F.lit("another consumer")).otherwise(
            F.format_string("%,d other consumers", F.col("_consumers_on_queue") - 1)
        ),
        F.coalesce(F.col("deliveries"), F.lit(0)),
    ),
    KNOB_CONSUMER_WINDOW,
    lambda k: F.col("consumer_window"),
)

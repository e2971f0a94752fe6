"""Gold ``threshold_recommendations`` v1 (DESIGN.md §4, §5), written by jobs/recommend.py.

One row per (date, broker, entity_kind, entity), in the knob of the entity's own broker
(``broker_kind``, ``knob``, ``current_value`` -> ``recommended_value``, ``unit``, and the ``rule``
whose verdict won):

- ``'queue'``: a Qpid queue (knob ``qpid.flow_stop_count``, with the four flow threshold columns)
  or a RabbitMQ queue (``x-max-length``);
- ``'address'``: an Artemis address (``max-size-bytes``, ``max-size-bytes-reject-threshold`` or
  ``producerWindowSize``, the producers on the address);
- ``'consumer_link'``: an AMQP 1.0 consumer link (``link credit``, Kung & Morris);
- ``'consumer'``: an AMQP 0.9.1 consumer (``prefetch``, basic.qos) or an Artemis CORE consumer
  (``consumerWindowSize``, in bytes).

``date`` is the day the recommendation is made *as of*; its evidence covers ``window_from`` ..
``date`` (the policy's look-back). Columns of one kind of entity are null on the others. When the
verdict is ``keep`` the recommended values equal the current ones, so applying every row of the
table is always safe.
"""

from __future__ import annotations

from dataclasses import replace

from schemas.model import Column, TableSchema
from schemas.tables import SAMPLED

SCHEMA_VERSION = 1

ENTITY_QUEUE = "queue"
ENTITY_CONSUMER_LINK = "consumer_link"
ENTITY_ADDRESS = "address"
ENTITY_CONSUMER = "consumer"


# The knobs, as each broker's configuration spells them.
KNOB_QPID_FLOW_STOP_COUNT = "qpid.flow_stop_count"
KNOB_MAX_SIZE_BYTES = "max-size-bytes"
KNOB_REJECT_THRESHOLD = "max-size-bytes-reject-threshold"
KNOB_PRODUCER_WINDOW = "producerWindowSize"
KNOB_CONSUMER_WINDOW = "consumerWindowSize"
KNOB_LINK_CREDIT = "link credit"
KNOB_PREFETCH = "prefetch"
KNOB_MAX_LENGTH = "x-max-length"

#: What a consumer link's rationale says when its receiver refilled only at empty and its credit is
#: sized as if it topped up at half (jobs/transforms/recommend_links.py): the what-if replays the
#: credit topped up at half then (flowctl_core/whatif_knobs.py), as the advice prescribes.
TOP_UP_AT_HALF_ADVICE = "top up before the credit runs out"

#: Java's int, the type of Artemis's windows and rates; its long, of its address sizes.
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1

#: The largest value each broker takes for a knob, and why: a recommendation, a sweep or a scenario
#: past it would be refused by the broker (jobs/transforms/recommend_links.py caps at it,
#: flowctl_core/sweep.py refuses past it, flowctl_core/scenario.py refuses past it).
KNOB_HIGHEST: dict[str, tuple[int, str]] = {
    KNOB_MAX_SIZE_BYTES: (JAVA_LONG_MAX, "max-size-bytes is a Java long"),
    KNOB_REJECT_THRESHOLD: (JAVA_LONG_MAX, "max-size-bytes-reject-threshold is a Java long"),
    KNOB_PRODUCER_WINDOW: (JAVA_INT_MAX, "producerWindowSize is a Java int"),
    KNOB_CONSUMER_WINDOW: (JAVA_INT_MAX, "consumerWindowSize is a Java int"),
    KNOB_LINK_CREDIT: (2**32 - 1, "AMQP 1.0 link credit is a uint"),
    KNOB_PREFETCH: (65_535, "basic.qos prefetch-count is a short"),
}

#: Where an operator sets each knob: a broker's setting, a queue's argument, or the clients'
#: own (an Artemis window is the client's connection URL or factory, not the address's: a
#: review of the advice found rows on an address that did not say so).
KNOB_SET_IN: dict[str, str] = {
    KNOB_QPID_FLOW_STOP_COUNT: "the queue's qpid.flow_* arguments",
    KNOB_MAX_SIZE_BYTES: "broker.xml's address-settings",
    KNOB_REJECT_THRESHOLD: "broker.xml's address-settings",
    KNOB_PRODUCER_WINDOW: "the CORE producers' URL or connection factory",
    KNOB_CONSUMER_WINDOW: "the CORE consumer's URL or connection factory",
    KNOB_LINK_CREDIT: "the AMQP 1.0 receiver's client (the credit it grants)",
    KNOB_PREFETCH: "the consumer's basic.qos",
    KNOB_MAX_LENGTH: "a policy's max-length or the queue's x-max-length argument",
}

UNIT_MESSAGES = "messages"
UNIT_BYTES = "bytes"
UNIT_CREDITS = "credits"

# The verdicts a row can carry. Which one is the first rule of its table that holds (the rule
# tables in jobs/transforms/recommend_*.py order them), not the order here.
VERDICT_AT_RISK = "at_risk_of_overflow"
VERDICT_FLAPPING = "flapping"
VERDICT_LOWER = "lower"
VERDICT_RAISE = "raise"
VERDICT_KEEP = "keep"
VERDICTS: tuple[str, ...] = (
    VERDICT_AT_RISK,
    VERDICT_FLAPPING,
    VERDICT_LOWER,
    VERDICT_RAISE,
    VERDICT_KEEP,
)

THRESHOLD_RECOMMENDATIONS = TableSchema(
    name="threshold_recommendations",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "Recommended queue flow thresholds and consumer link credit, with verdict, evidence and "
        "a one-line rationale; one row per (date, broker, entity_kind, entity)."
    ),
    columns=(
        Column("date", "date", nullable=False, doc="as-of UTC day (partition)"),
        Column("window_from", "date", nullable=False, doc="first day of the evidence"),
        Column("broker", "string", nullable=False),
        Column(
            "entity_kind",
            "string",
            nullable=False,
            doc="'queue', 'address', 'consumer_link' or 'consumer' (see the module docstring)",
        ),
        Column("entity", "string", nullable=False, doc="queue, address, link or consumer name"),
        Column("queue", "string", doc="the queue (for a link: the queue it consumes from)"),
        Column("runs", "int64", nullable=False, doc="runs that contributed evidence"),
        Column("verdict", "string", nullable=False, doc="one of VERDICTS"),
        Column("rationale", "string", nullable=False, doc="one line, for an operator"),
        # -- queue: limits and thresholds, current and recommended (0 = off, as in the log) --------
        Column("max_count", "int64", doc="queue limit in messages (0 = none)"),
        Column("max_size", "int64", doc="queue limit in bytes (0 = none)"),
        Column("current_flow_stop_count", "int64"),
        Column("current_flow_resume_count", "int64"),
        Column("current_flow_stop_size", "int64"),
        Column("current_flow_resume_size", "int64"),
        Column("recommended_flow_stop_count", "int64"),
        Column("recommended_flow_resume_count", "int64"),
        Column("recommended_flow_stop_size", "int64"),
        Column("recommended_flow_resume_size", "int64"),
        # -- queue evidence ------------------------------------------------------------------------
        Column("episodes", "int64", doc="stopped episodes (queue) or starvations (link)"),
        Column("short_episodes", "int64", doc="closed stopped episodes shorter than min dwell"),
        Column("median_episode_s", "float64", doc="median duration of closed stopped episodes"),
        Column("time_stopped_s", "float64", doc="summed over days and runs"),
        Column("stopped_share", "float64", doc="time_stopped_s / observed seconds"),
        Column(
            "rejected_msgs",
            "int64",
            doc="message_rejected events of the queue; of an Artemis address, the AMQP messages "
            "refused above its reject threshold (its DROP and FAIL losses are in the rationale)",
        ),
        Column("peak_depth_msgs", "int64"),
        Column("peak_depth_bytes", "int64"),
        Column("max_overshoot_msgs", "int64", doc="worst overshoot of an episode"),
        Column("max_overshoot_bytes", "int64", doc="worst overshoot of an episode"),
        Column(
            "producer_capacity_sum",
            "int64",
            doc="overshoot bound: the largest sum over one run of its producers' capacities",
        ),
        Column(
            "uncapped_producers",
            "int64",
            doc="producers without a window in one run, at most (no bound)",
        ),
        Column("max_message_bytes", "int64", doc="largest enqueued message, for the bytes bound"),
        Column("headroom_msgs", "int64", doc="room kept below max_count"),
        Column("headroom_bytes", "int64", doc="room kept below max_size"),
        Column(
            "drain_rate_msgs_s",
            "float64",
            doc="messages dequeued per second while stopped (quantile over episodes)",
        ),
        Column(
            "drain_rate_bytes_s",
            "float64",
            doc="bytes dequeued per second while stopped (quantile over episodes)",
        ),
        # -- consumer link: Kung & Morris credit ---------------------------------------------------
        Column(
            "current_credit",
            "int64",
            doc="credit the receiver grants now: the largest granted (a flow event not logged "
            "by the sender) on the link's latest day (UTC) in the window with a grant; without "
            "any grant, the largest credit of its latest day with one (bytes for byte links)",
        ),
        Column(
            "recommended_credit",
            "int64",
            doc="ceil(rate x RTT) + top-up batch; x mean message size for byte-credit links",
        ),
        Column(
            "consumption_rate_msgs_s",
            "float64",
            doc="deliveries per backlogged second (messages available and credit); per attached "
            "second when the log gives no backlogged time (the rationale says which); an Artemis "
            "consumer judged slow: its pace from its window's returns, which the rule compares",
        ),
        Column("round_trip_s", "float64", doc="credit round trip used in the formula"),
        Column(
            "round_trip_source",
            "string",
            doc="'observed' (starvations), 'policy', or null when no round trip could be told",
        ),
        Column(
            "top_up_batch", "int64", doc="credit added per top-up (bytes for byte-credit links)"
        ),
        Column("starved_s", "float64"),
        Column("starved_share", "float64", doc="starved_s / attached_s"),
        # -- every broker in its own knobs (DESIGN §4): the setting the verdict is about ----------
        Column("broker_kind", "string", doc="'qpid', 'artemis' or 'rabbitmq'"),
        Column(
            "knob",
            "string",
            doc="the broker's own setting the verdict changes or keeps, as its config names it "
            "(qpid.flow_stop_count, max-size-bytes, producerWindowSize, prefetch, x-max-length, "
            "...)",
        ),
        Column("current_value", "int64", doc="the knob's value now (null when not logged)"),
        Column("recommended_value", "int64", doc="equal to current_value when the verdict keeps"),
        Column("unit", "string", doc="'messages', 'bytes' or 'credits'"),
        Column("rule", "string", doc="the name of the rule whose verdict won"),
        # -- the policy the row was computed with --------------------------------------------------
        Column("safety_margin", "float64", nullable=False),
        Column("min_dwell_s", "float64", nullable=False),
        # -- DESIGN §6: advice on sampled evidence is marked, never silently exact -----------------
        replace(
            SAMPLED,
            doc="a queue's or address's: the longest detail.sample_interval_ms of its collector "
            "samples in the window (depths and peaks read that often: approximate, a peak may "
            "be missed); null: its evidence is events only",
        ),
    ),
)

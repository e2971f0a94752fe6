"""``broker_events`` v1: the event log written by the engine and read by the jobs (DESIGN.md §3)."""

from __future__ import annotations

from schemas.model import Column, TableSchema

SCHEMA_VERSION = 1

EVENT_TYPES: tuple[str, ...] = (
    "queue_declared",
    "thresholds_changed",
    "enqueue",
    "dequeue",
    "flow_stopped",
    "flow_resumed",
    "transfer_completed",
    "message_rejected",
    "ring_evicted",
    "link_attached",
    "link_detached",
    "flow",
    "transfer",
    "session_window",
    "connection_blocked",
    "connection_unblocked",
    "alarm_raised",
    "alarm_cleared",
)

#: The ``protocol`` column's values, named once for every layer that writes or reads them.
AMQP_0_10 = "amqp-0-10"  # Qpid's
AMQP_1_0 = "amqp-1.0"
AMQP_0_9_1 = "amqp-0-9-1"
ARTEMIS_CORE = "artemis-core"
PROTOCOLS: tuple[str, ...] = (AMQP_0_10, AMQP_1_0, AMQP_0_9_1, ARTEMIS_CORE)
LINK_ROLES: tuple[str, ...] = ("publisher", "consumer")

#: ``detail.outcome`` of an Artemis ``message_rejected``: what its address did with the message
#: (a Qpid reject logs none, and reads as rejected). DROP discards it and the producer never hears
#: of it; FAIL answers the producer with an error; the AMQP reject threshold rejects it.
OUTCOME_DROPPED = "dropped"
OUTCOME_FAILED = "failed"
OUTCOME_REJECTED = "rejected"
REFUSAL_OUTCOMES: tuple[str, ...] = (OUTCOME_DROPPED, OUTCOME_FAILED, OUTCOME_REJECTED)

BROKER_EVENTS = TableSchema(
    name="broker_events",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc="One row per broker event; Hive-partitioned by date=YYYY-MM-DD (UTC date of ts).",
    columns=(
        Column("run_id", "string", nullable=False, doc="one engine run or collector session"),
        Column("broker", "string", nullable=False, doc="broker instance"),
        Column("seq", "int64", nullable=False, doc="strictly increasing within a run"),
        Column("ts", "timestamp", nullable=False, doc="event time, UTC, microseconds"),
        Column("event_type", "string", nullable=False, doc="one of EVENT_TYPES"),
        Column("queue", "string"),
        Column("link", "string"),
        Column("session", "string"),
        Column("connection", "string"),
        Column("protocol", "string", doc="one of PROTOCOLS"),
        Column("link_role", "string", doc="publisher (into the broker) or consumer (out of it)"),
        Column("message_id", "int64"),
        Column("size_bytes", "int64"),
        Column("depth_msgs", "int64", doc="queue depth in messages after the event"),
        Column("depth_bytes", "int64", doc="queue depth in bytes after the event"),
        Column("flow_stopped", "bool", doc="queue flow state after the event"),
        Column("flow_stopped_count", "int64", doc="cumulative flowStoppedCount after the event"),
        Column("flow_stop_count", "int64", doc="threshold in force, 0 = off"),
        Column("flow_resume_count", "int64", doc="threshold in force, 0 = off"),
        Column("flow_stop_size", "int64", doc="threshold in force, 0 = off"),
        Column("flow_resume_size", "int64", doc="threshold in force, 0 = off"),
        Column("max_count", "int64", doc="queue limit, 0 = none"),
        Column("max_size", "int64", doc="queue limit, 0 = none"),
        Column("credit", "int64", doc="link credit after the event"),
        Column("delivery_count", "int64", doc="link delivery-count after the event"),
        Column("available", "int64", doc="sender's available after the event"),
        Column("outstanding", "int64", doc="producer's uncompleted transfers"),
        Column("capacity", "int64", doc="producer's window of uncompleted transfers"),
        Column("latency_us", "int64", doc="transfer_completed: receipt to completion"),
        Column("detail", "string", doc="JSON: anything else (reason codes)"),
    ),
)

#: The partition column added by the sink; derived from ``ts``, not stored in the row itself.
PARTITION_COLUMN = "date"

#: ``detail.origin`` of a collector's rows (DESIGN §6: a sampled row says so): where in a real
#: broker the row was read. The engine writes none of these (its own ``origin: sender`` marks the
#: flow a sender logs of itself).
ORIGIN_ARTEMIS_LOG = "artemis-log"
ORIGIN_JOLOKIA = "jolokia"
ORIGIN_RABBITMQ_LOG = "rabbitmq-log"
ORIGIN_RABBITMQ_MANAGEMENT = "rabbitmq-management"
#: ``detail.recorded_by`` of the rows a client records of its own AMQP 1.0 links
#: (collectors/proton_links.py); their ``detail.origin`` is the engine's: which end sent a flow.
RECORDED_BY_CLIENT_LINKS = "client-links"
#: The kinds of broker the engine models and the recommendations advise (``broker_kind``), and
#: the ``says_<kind>`` columns of the broker-kind rollup (schemas/tables.py).
BROKER_QPID, BROKER_ARTEMIS, BROKER_RABBITMQ = "qpid", "artemis", "rabbitmq"
BROKER_KINDS: tuple[str, ...] = (BROKER_ARTEMIS, BROKER_QPID, BROKER_RABBITMQ)
#: ``detail.broker_product``: the product a client says its broker is (an AMQP 1.0 link does not
#: say it; jobs/transforms/recommend_brokers.py reads it).
BROKER_PRODUCT_ARTEMIS = BROKER_ARTEMIS
#: Artemis's fully qualified queue name, ``ADDRESS::QUEUE``: a client link to one has the queue in
#: ``queue`` and the whole name in ``detail.amqp_address`` (collectors/proton_links.py), and its
#: messages count on ADDRESS's size (jobs/transforms/recommend_artemis.py).
ARTEMIS_FQQN_SEPARATOR = "::"
BROKER_PRODUCTS: tuple[str, ...] = (BROKER_PRODUCT_ARTEMIS, BROKER_RABBITMQ)
#: Every collector's origins: a collector reads a broker from outside (log lines, samples) and
#: sees none of its messages, so a run of these rows has no message counts (null, not 0).
COLLECTOR_ORIGINS: tuple[str, ...] = (
    ORIGIN_ARTEMIS_LOG,
    ORIGIN_JOLOKIA,
    ORIGIN_RABBITMQ_LOG,
    ORIGIN_RABBITMQ_MANAGEMENT,
)
#: The origins that say the broker is a RabbitMQ (an alarm or a queue sample has no protocol).
RABBITMQ_ORIGINS: tuple[str, ...] = (ORIGIN_RABBITMQ_LOG, ORIGIN_RABBITMQ_MANAGEMENT)

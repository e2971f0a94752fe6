"""The pipeline's Delta tables (DESIGN.md §5): bronze, quarantine, silver and gold, schema v1.

Each table is one :class:`TableSchema`; the jobs create the Delta table from ``to_spark()`` and cast
what they write to it, so a column can only change here. ``threshold_recommendations`` belongs to
the recommendation job and is defined with it.
"""

from __future__ import annotations

from dataclasses import replace

from schemas.broker_events import BROKER_EVENTS, BROKER_KINDS, REFUSAL_OUTCOMES
from schemas.model import Column, LogicalType, TableSchema
from schemas.timelines import QUEUE_DEPTH_TIMELINE

SCHEMA_VERSION = 1

BRONZE, SILVER, GOLD, STATE = "bronze", "silver", "gold", "state"

_DATE = Column("date", "date", nullable=False, doc="UTC calendar day (partition)")

BRONZE_BROKER_EVENTS = TableSchema(
    name="broker_events",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc="Validated events, one per (run_id, seq); DESIGN.md §3 columns plus lineage.",
    columns=(
        *BROKER_EVENTS.columns,
        replace(_DATE, doc="UTC date of ts, equal to the raw date= partition (partition)"),
        Column("source_file", "string", nullable=False, doc="raw file, relative to the raw root"),
    ),
)

#: ``record_kind`` of a quarantine record: a raw row, or a raw file quarantined whole or in part.
RECORD_KIND_ROW, RECORD_KIND_FILE = "row", "file"

BROKER_EVENTS_QUARANTINE = TableSchema(
    name="broker_events_quarantine",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "Every rejected raw row (record_kind='row': its columns as read, all nullable, and its "
        "position in its file; the rows of a file quarantined whole for its schema or name too, "
        "a column null where the file lacks it or holds a type that does not convert to the "
        "contract's without loss) and every raw file quarantined whole or read only in part "
        "(record_kind='file': event columns null but detail, JSON of why a file was read only in "
        "part or its rows could not be read), with the reason."
    ),
    columns=(
        *(replace(c, nullable=True) for c in BROKER_EVENTS.columns),
        replace(_DATE, doc="the raw date= partition the row or file came from (partition)"),
        Column("source_file", "string", nullable=False, doc="raw file, relative to the raw root"),
        Column("record_kind", "string", nullable=False, doc="'row' or 'file'"),
        Column("reason", "string", nullable=False, doc="';'-separated rule names that failed"),
        Column("file_rows", "int64", doc="record_kind='file': rows the file's footer declares"),
        Column(
            "source_row_index",
            "int64",
            doc="record_kind='row': the row's 0-based position in source_file (Parquet row index)",
        ),
    ),
)

#: DESIGN §6: "metrics built on samples are marked approximate, never silently exact".
SAMPLED = Column(
    "sample_interval_ms",
    "int64",
    doc="set when the figures rest on a collector's samples (detail.sample_interval_ms, DESIGN "
    "§6): approximate, read that often; null: from events, exact",
)

#: The episode tables' watermark column: where an open episode ends for now; null once it
#: closed, so that a closed episode is the same row whichever night wrote it last.
OPEN_EPISODE_WATERMARK = Column(
    "run_watermark_ts",
    "timestamp",
    doc="while open: the run's last event ts, where the episode ends for now; null once closed "
    "(a later night would otherwise have to rewrite every closed episode)",
)

QUEUE_FLOW_EPISODES = TableSchema(
    name="queue_flow_episodes",
    version=SCHEMA_VERSION,
    partition_by=("start_date",),
    doc="One row per stopped episode: a flow_stopped to the next flow_resumed (same queue, run).",
    columns=(
        Column("run_id", "string", nullable=False),
        Column("broker", "string", nullable=False),
        Column("queue", "string", nullable=False),
        Column("start_seq", "int64", nullable=False, doc="seq of the flow_stopped event"),
        Column("start_ts", "timestamp", nullable=False),
        Column("start_date", "date", nullable=False, doc="UTC date of start_ts (partition)"),
        Column("end_seq", "int64", doc="seq of the flow_resumed event; null while open"),
        Column("end_ts", "timestamp", doc="null while open"),
        Column("is_open", "bool", nullable=False, doc="no flow_resumed up to the run's watermark"),
        Column("duration_s", "float64", doc="end_ts - start_ts; null while open"),
        OPEN_EPISODE_WATERMARK,
        Column("flow_stopped_count", "int64", doc="the queue's cumulative counter at the start"),
        Column("peak_depth_msgs", "int64", doc="max depth_msgs from the triggering enqueue on"),
        Column("peak_depth_bytes", "int64", doc="max depth_bytes from the triggering enqueue on"),
        Column("flow_stop_count", "int64", doc="threshold in force at the start, 0 = off"),
        Column("flow_resume_count", "int64", doc="threshold in force at the start, 0 = off"),
        Column("flow_stop_size", "int64", doc="threshold in force at the start, 0 = off"),
        Column("flow_resume_size", "int64", doc="threshold in force at the start, 0 = off"),
        Column(
            "overshoot_msgs",
            "int64",
            doc="max(0, peak - stop count); null if that is off or the peak unknown",
        ),
        Column(
            "overshoot_bytes",
            "int64",
            doc="max(0, peak - stop size); null if that is off or the peak unknown",
        ),
        Column("producers", "int64", nullable=False, doc="distinct producers that enqueued"),
        Column(
            "overshoot_bound_msgs",
            "int64",
            doc="sum of those producers' capacities; null if any has none (no window) or none "
            "enqueued",
        ),
        Column(
            "overshoot_ratio",
            "float64",
            doc="overshoot_msgs / overshoot_bound_msgs; null if either is null or the bound 0",
        ),
        SAMPLED,  # a collector's sample among its events: its peak may be a sample's
        Column(
            "dequeued_msgs",
            "int64",
            doc="dequeue events from the flow_stopped up to the flow_resumed (so far while open): "
            "what the consumers took while the queue was stopped",
        ),
        Column(
            "dequeued_bytes",
            "int64",
            doc="their size_bytes summed; null if a dequeue among them logs no size",
        ),
    ),
)

LINK_STARVATION_EPISODES = TableSchema(
    name="link_starvation_episodes",
    version=SCHEMA_VERSION,
    partition_by=("start_date",),
    doc="One row per credit starvation: credit == 0 while available > 0, until that ends.",
    columns=(
        Column("run_id", "string", nullable=False),
        Column("broker", "string", nullable=False),
        Column("link", "string", nullable=False),
        Column("link_role", "string"),
        Column("start_seq", "int64", nullable=False, doc="seq of the event that starved the link"),
        Column("start_ts", "timestamp", nullable=False),
        Column("start_date", "date", nullable=False, doc="UTC date of start_ts (partition)"),
        Column("end_seq", "int64", doc="seq of the event that ended it; null while open"),
        Column("end_ts", "timestamp", doc="null while open"),
        Column("end_reason", "string", doc="'credit' (credit or available changed), 'detached'"),
        Column("is_open", "bool", nullable=False, doc="still starved at the run's watermark"),
        Column("duration_s", "float64", doc="end_ts - start_ts; null while open"),
        OPEN_EPISODE_WATERMARK,
        Column("available_at_start", "int64", doc="the sender's available when it starved"),
    ),
)

QUEUE_FLOW_DAILY = TableSchema(
    name="queue_flow_daily",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc="Flow-control metrics of DESIGN.md §4, one row per (date, broker, run_id, queue): every "
    "day from the queue's declaration through its run's watermark day, idle days included.",
    columns=(
        _DATE,
        Column("broker", "string", nullable=False),
        Column("run_id", "string", nullable=False),
        Column("queue", "string", nullable=False),
        Column("flow_stopped_count", "int64", nullable=False, doc="flow_stopped events this day"),
        Column(
            "flow_stopped_counter_delta",
            "int64",
            doc="change of cumulative counter this day; null if none logged",
        ),
        Column("counter_check_ok", "bool", doc="flow_stopped_count == flow_stopped_counter_delta"),
        Column("stopped_at_day_start", "bool", nullable=False, doc="stopped at 00:00 (carry-over)"),
        Column("time_stopped_s", "float64", nullable=False, doc="stopped time clipped to the day"),
        Column("observed_s", "float64", nullable=False, doc="day ∩ [run's first event, watermark]"),
        Column("stopped_share", "float64", doc="time_stopped_s / observed_s; null if 0 observed"),
        Column("episodes", "int64", nullable=False, doc="stopped episodes starting this day"),
        Column("max_depth_msgs", "int64", doc="max depth_msgs of the queue's events this day"),
        Column("max_depth_bytes", "int64", doc="max depth_bytes of the queue's events this day"),
        Column("max_overshoot_msgs", "int64", doc="over the episodes starting this day"),
        Column("p95_overshoot_msgs", "float64", doc="exact, linear interpolation"),
        Column("max_overshoot_bytes", "int64", doc="over the episodes starting this day"),
        Column("p95_overshoot_bytes", "float64", doc="exact, linear interpolation"),
        Column(
            "max_overshoot_ratio",
            "float64",
            doc="max overshoot / bound of those episodes that have a bound",
        ),
        SAMPLED,  # depths from samples: a sampled depth is a value the queue had, not its peak
        # What flow control costs the producers (DESIGN §4): throughput and loss beside the
        # time stopped (jobs/transforms/queue_costs.py). The six counts are null on a day whose
        # events of the queue are all a collector's or a client's: they log no message.
        Column("enqueued", "int64", doc="enqueue events this day (paged ones included)"),
        Column("dequeued", "int64", doc="dequeue events this day"),
        Column(
            "rejected",
            "int64",
            doc="message_rejected this day, refused with an answer (reject, FAIL, threshold)",
        ),
        Column("dropped", "int64", doc="message_rejected with detail.outcome 'dropped' (DROP)"),
        Column("paged", "int64", doc="enqueues with detail.paged true (Artemis PAGE)"),
        Column("evicted", "int64", doc="ring_evicted events this day"),
        Column(
            "held_completions",
            "int64",
            doc="transfer_completed this day with latency_us > 0 of messages enqueued here",
        ),
        Column("completion_p50_us", "float64", doc="of those latencies; exact, linear"),
        Column("completion_p95_us", "float64", doc="of those latencies; exact, linear"),
        Column("completion_p99_us", "float64", doc="of those latencies; exact, linear"),
        Column("completion_max_us", "int64", doc="of those latencies"),
    ),
)

LINK_STARVATION_DAILY = TableSchema(
    name="link_starvation_daily",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc="Credit starvation per (date, broker, run_id, link), DESIGN.md §4.",
    columns=(
        _DATE,
        Column("broker", "string", nullable=False),
        Column("run_id", "string", nullable=False),
        Column("link", "string", nullable=False),
        Column("link_role", "string"),
        Column("starved_s", "float64", nullable=False, doc="starved time clipped to the day"),
        Column("episodes", "int64", nullable=False, doc="starvations starting this day"),
        Column("attached_s", "float64", nullable=False, doc="attached time clipped to the day"),
        Column("starved_share", "float64", doc="starved_s / attached_s; null if never attached"),
    ),
)

BLOCKING_EPISODES = TableSchema(
    name="blocking_episodes",
    version=SCHEMA_VERSION,
    partition_by=("start_date",),
    doc=(
        "One row per blocking episode of every kind other than queue flow and link credit "
        "(DESIGN.md §4): a blocked AMQP 0.9.1 connection, a raised alarm, a session window closed "
        "to publishers, a producer whose capacity window is full; jobs/transforms/blocking.py."
    ),
    columns=(
        Column("run_id", "string", nullable=False),
        Column("broker", "string", nullable=False),
        Column(
            "kind",
            "string",
            nullable=False,
            doc="'connection', 'alarm', 'session_window' or 'producer_window'",
        ),
        Column(
            "entity",
            "string",
            nullable=False,
            doc="the connection, the alarm's resource, the session or the producer link",
        ),
        Column("protocol", "string", doc="the protocol of the event that began it"),
        Column("reason", "string", doc="why it began, as the event says (detail.reason)"),
        Column("start_seq", "int64", nullable=False, doc="seq of the event that blocked it"),
        Column("start_ts", "timestamp", nullable=False),
        Column("start_date", "date", nullable=False, doc="UTC date of start_ts (partition)"),
        Column("end_seq", "int64", doc="seq of the event that ended it; null while open"),
        Column("end_ts", "timestamp", doc="null while open"),
        Column("is_open", "bool", nullable=False, doc="still blocked at the run's watermark"),
        Column("duration_s", "float64", doc="end_ts - start_ts; null while open"),
        OPEN_EPISODE_WATERMARK,
        SAMPLED,
    ),
)

CARRIED_EVENTS = TableSchema(
    name="carried_events",
    version=SCHEMA_VERSION,
    partition_by=("carried_to",),
    doc=(
        "Per run and day, the bronze events that carry the run's state over that day's end "
        "(jobs/transforms/carry.py): the latest event of each kind per queue, link and blocking "
        "entity, and the run's first event. The episodes and daily_metrics jobs start a span "
        "from the day before's rows instead of reading every earlier day of the run."
    ),
    columns=(
        *BROKER_EVENTS.columns,
        replace(_DATE, doc="UTC date of the event's ts, as in broker_events"),
        Column(
            "carried_to",
            "date",
            nullable=False,
            doc="the day at whose end this event is part of the run's state (partition)",
        ),
    ),
)

BLOCKING_DAILY = TableSchema(
    name="blocking_daily",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "Blocked time per (date, broker, run_id, kind, entity) for the days an entity was "
        "blocked, DESIGN.md §4: clipped to the day, carried over midnight, open ones closed at the "
        "watermark; episodes count on the day they start."
    ),
    columns=(
        _DATE,
        Column("broker", "string", nullable=False),
        Column("run_id", "string", nullable=False),
        Column("kind", "string", nullable=False, doc="as in blocking_episodes"),
        Column("entity", "string", nullable=False),
        Column("protocol", "string"),
        Column("blocked_s", "float64", nullable=False, doc="blocked time clipped to the day"),
        Column("episodes", "int64", nullable=False, doc="blocking episodes starting this day"),
        Column("observed_s", "float64", nullable=False, doc="day ∩ [run's first event, watermark]"),
        Column("blocked_share", "float64", doc="blocked_s / observed_s; null if 0 observed"),
        SAMPLED,
    ),
)

PIPELINE_STATE = TableSchema(
    name="pipeline_state",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "What each job processed: one row per (job, date) with the bronze version its rows of "
        "that day reflect (ingest: the version it wrote; the later jobs: the version they read). "
        "A later job's day is behind when ingest's version of it is newer (jobs/pipeline_state.py)."
    ),
    columns=(
        Column(
            "job",
            "string",
            nullable=False,
            doc=(
                "ingest, episodes, daily_metrics or recommend; 'ingest: writing' before ingest "
                "writes a day; 'daily_metrics: later days' for the days after its range whose "
                "rows daily_metrics recomputed"
            ),
        ),
        replace(_DATE, doc="the day processed (partition)"),
        Column("bronze_version", "int64", nullable=False, doc="Delta version of broker_events"),
        Column(
            "processed_at",
            "timestamp",
            nullable=False,
            doc="when the job finished the day ('ingest: writing': when it started writing it)",
        ),
        Column(
            "evidence_from",
            "date",
            nullable=True,
            doc=(
                "recommend: the first day of the look-back window it read for the day (its "
                "evidence is evidence_from..date); null for the other jobs (the day alone)"
            ),
        ),
    ),
)


#: A queue's limits and flow thresholds, as the event log's columns name them.
QUEUE_SETTINGS = (
    "max_count",
    "max_size",
    "flow_stop_count",
    "flow_resume_count",
    "flow_stop_size",
    "flow_resume_size",
)


def _latest_of(
    name: str, kind: LogicalType, what: str, order: tuple[str, ...] = ("ts", "seq")
) -> tuple[Column, ...]:
    """A fact read at the latest event that logs it, with that event's order fields."""
    types: dict[str, LogicalType] = {"ts": "timestamp", "seq": "int64"}
    return (
        Column(name, kind, doc=f"{what} at the latest such event of the group"),
        *(
            Column(f"{name}__{field}", types[field], doc=f"the {field} of that event (null: none)")
            for field in order
        ),
    )


RECOMMEND_DAY_ROLLUP = TableSchema(
    name="recommend_day_rollup",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "Per (date, broker, run_id, queue, link, address, publisher_address) of bronze: the facts "
        "recommend's queue, address and link evidence reads, each of which merges exactly over "
        "days (jobs/transforms/"
        "recommend_rollup.py). Kept by recommend for the days of its look-back windows, each day "
        "with the bronze files it was computed from (a day whose files changed is computed again)."
    ),
    columns=(
        _DATE,
        Column("broker", "string", nullable=False),
        Column("run_id", "string", nullable=False),
        Column("queue", "string"),
        Column("link", "string"),
        Column("address", "string", doc="an Artemis address's events: detail.address"),
        Column(
            "publisher_address",
            "string",
            doc="a client-recorded AMQP 1.0 publisher's events: the address it sends to",
        ),
        *(
            Column(f"says_{kind}", "bool", doc=f"an event says the broker is {kind}'s")
            for kind in BROKER_KINDS
        ),
        Column("qpid_thresholds", "bool", doc="an event logs a flow threshold in force"),
        Column("rabbitmq_for_certain", "bool", doc="an event could only be RabbitMQ's"),
        Column("carries_credit", "bool", doc="an event logs a link credit"),
        *_latest_of("protocol", "string", "the protocol logged", ("seq",)),
        Column("queue__seq", "int64", doc="the latest seq of an event naming a queue"),
        *(
            column
            for name in QUEUE_SETTINGS
            for column in _latest_of(name, "int64", f"{name} logged")
        ),
        *_latest_of("limit_policy", "string", "the limit policy of a queue_declared's detail"),
        Column("evicts", "bool", doc="a ring_evicted event"),
        Column("messages_recorded", "bool", doc="an event is the broker's own (messages logged)"),
        Column("rejections", "int64", nullable=False, doc="message_rejected events"),
        Column("enqueues", "int64", nullable=False, doc="enqueue events"),
        Column("dequeues", "int64", nullable=False, doc="dequeue events"),
        Column("max_enqueue_bytes", "int64", doc="the largest size_bytes enqueued"),
        Column("enqueue_capacity", "int64", doc="the largest capacity an enqueue logs"),
        Column("first_enqueue_us", "int64", doc="the first enqueue's ts, microseconds"),
        Column("last_enqueue_us", "int64", doc="the last enqueue's ts, microseconds"),
        *_latest_of("depth_msgs", "int64", "depth_msgs logged"),
        *_latest_of("last_queue", "string", "the queue (null too) of any event"),
        *_latest_of("address_policy", "string", "detail.policy logged"),
        *_latest_of("max_size_bytes", "int64", "detail.max_size_bytes logged"),
        Column(
            "reject_threshold",
            "int64",
            doc="detail.reject_threshold at the latest event logging max_size_bytes",
        ),
        Column("peak_address_bytes", "int64", doc="the largest detail.address_size"),
        *(
            Column(f"{kind}_msgs", "int64", nullable=False, doc=f"messages {kind} (detail.outcome)")
            for kind in REFUSAL_OUTCOMES
        ),
        Column("paged_msgs", "int64", nullable=False, doc="enqueues paged (detail.paged)"),
        Column("flow_stops", "int64", nullable=False, doc="flow_stopped events"),
        Column(
            "max_sampled_message_bytes",
            "int64",
            doc="the largest detail.address_size / depth_msgs, rounded up",
        ),
        Column(
            "min_message_overhead_bytes",
            "int64",
            doc="the least detail.address_size - size_bytes of an enqueue",
        ),
        Column("producer_window", "int64", doc="the largest detail.producer.window enqueued"),
        Column("producer_credit", "int64", doc="the largest detail.producer.credit enqueued"),
        Column("max_credit", "int64", doc="the largest credit logged"),
        Column("sample_interval_ms", "int64", doc="the longest queue sample interval"),
        Column(
            "bronze_files",
            "string",
            nullable=False,
            doc="digest of the names of the day's bronze files this day's rows were computed from",
        ),
    ),
)

#: Every pipeline table with its layer; the table lives at <warehouse>/<layer>/<name>.
PIPELINE_TABLES: dict[str, tuple[str, TableSchema]] = {
    t.name: (layer, t)
    for layer, t in (
        (BRONZE, BRONZE_BROKER_EVENTS),
        (BRONZE, BROKER_EVENTS_QUARANTINE),
        (SILVER, QUEUE_FLOW_EPISODES),
        (SILVER, LINK_STARVATION_EPISODES),
        (SILVER, BLOCKING_EPISODES),
        (SILVER, QUEUE_DEPTH_TIMELINE),
        (SILVER, CARRIED_EVENTS),
        (SILVER, RECOMMEND_DAY_ROLLUP),
        (GOLD, QUEUE_FLOW_DAILY),
        (GOLD, LINK_STARVATION_DAILY),
        (GOLD, BLOCKING_DAILY),
        (STATE, PIPELINE_STATE),
    )
}

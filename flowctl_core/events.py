"""Event emission: the engine's only output.

An event is an :data:`EventRow`, a tuple laid out as :data:`ROW_LAYOUT`: the ``broker_events``
columns in schema order, nulls as ``None``, except that three groups of columns that change
rarely (the link's identity, the queue's flow state, the link's state) are nested tuples. The
engine keeps those groups cached, so an event costs one 13-item tuple, and the Parquet sink
converts each distinct group once per batch instead of once per event. :func:`flatten` gives
the plain 30-column row and :func:`as_dict` the row keyed by column name.

Events are built in two ways:

* :meth:`EventBus.emit` takes a mapping of column name -> value (absent keys are null): the
  general path, used by every rare event.
* :meth:`EventBus.emit_payload` takes the row after its stamp, already laid out: the hot path of
  the queues and clients (enqueue, dequeue, completions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flowctl_core.clock import Scheduler
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES

EventRow = tuple[Any, ...]
Event = dict[str, Any]
Subscriber = Callable[[EventRow], None]

COLUMNS: tuple[str, ...] = tuple(BROKER_EVENTS.names)

# The bus stamps the first five columns of every event; the emitter supplies the rest.
STAMP_COLUMNS: tuple[str, ...] = ("run_id", "broker", "seq", "ts", "event_type")
LINK_IDENTITY_COLUMNS = ("link", "session", "connection", "protocol", "link_role")
FLOW_STATE_COLUMNS = (
    "flow_stopped",
    "flow_stopped_count",
    "flow_stop_count",
    "flow_resume_count",
    "flow_stop_size",
    "flow_resume_size",
    "max_count",
    "max_size",
)
LINK_STATE_COLUMNS = (
    "credit",
    "delivery_count",
    "available",
    "outstanding",
    "capacity",
    "latency_us",
    "detail",
)
PAYLOAD_LAYOUT: tuple[str | tuple[str, ...], ...] = (
    "queue",
    LINK_IDENTITY_COLUMNS,
    "message_id",
    "size_bytes",
    "depth_msgs",
    "depth_bytes",
    FLOW_STATE_COLUMNS,
    LINK_STATE_COLUMNS,
)
ROW_LAYOUT: tuple[str | tuple[str, ...], ...] = STAMP_COLUMNS + PAYLOAD_LAYOUT


def _flat(layout: tuple[str | tuple[str, ...], ...]) -> tuple[str, ...]:
    return tuple(c for entry in layout for c in ((entry,) if isinstance(entry, str) else entry))


if _flat(ROW_LAYOUT) != COLUMNS:
    # Rows are laid out by hand on the hot path; a schema change must be mirrored here.
    raise ImportError("broker_events column order no longer matches flowctl_core.events layout")

RUN_ID_AT, BROKER_AT, SEQ_AT, TS_AT, EVENT_TYPE_AT, QUEUE_AT = range(6)

NO_LINK_IDENTITY: tuple[None, ...] = (None,) * len(LINK_IDENTITY_COLUMNS)
NO_LINK_STATE: tuple[None, ...] = (None,) * len(LINK_STATE_COLUMNS)
NO_FLOW_STATE: tuple[None, ...] = (None,) * len(FLOW_STATE_COLUMNS)
# What a queue's message events carry about the client: (link identity, link state) groups.
LinkColumns = tuple[EventRow, EventRow]
NO_LINK: LinkColumns = (NO_LINK_IDENTITY, NO_LINK_STATE)

_EVENT_TYPES = frozenset(EVENT_TYPES)
_COLUMN_SET = frozenset(COLUMNS)


def flatten(row: EventRow) -> EventRow:
    """The plain row: every ``broker_events`` column in schema order."""
    (run_id, broker, seq, ts, event_type, queue, identity, message_id, size, msgs, size_total,
     flow_state, link_state) = row  # fmt: skip
    return (
        *(run_id, broker, seq, ts, event_type, queue),
        *identity,
        *(message_id, size, msgs, size_total),
        *flow_state,
        *link_state,
    )


def as_dict(row: EventRow) -> Event:
    """The row keyed by column name (every column present, nulls as None)."""
    return dict(zip(COLUMNS, flatten(row), strict=True))


def link_columns(fields: Mapping[str, Any] | None) -> LinkColumns:
    """(link identity, link state) column groups of a client's fields mapping; absent -> null."""
    if not fields:
        return NO_LINK
    get = fields.get
    return tuple(map(get, LINK_IDENTITY_COLUMNS)), tuple(map(get, LINK_STATE_COLUMNS))


def link_fields(link: LinkColumns) -> Event:
    """The inverse of :func:`link_columns`: the client's columns keyed by name."""
    identity, state = link
    fields = dict(zip(LINK_IDENTITY_COLUMNS, identity, strict=True))
    fields.update(zip(LINK_STATE_COLUMNS, state, strict=True))
    return fields


def link_identity(
    link: str,
    link_role: str,
    protocol: str | None = None,
    connection: str | None = None,
    session: str | None = None,
) -> EventRow:
    """The link identity column group, in schema order."""
    return (link, session, connection, protocol, link_role)


def _payload_of(fields: Mapping[str, Any]) -> EventRow:
    get = fields.get
    return tuple(
        get(entry) if isinstance(entry, str) else tuple(map(get, entry)) for entry in PAYLOAD_LAYOUT
    )


class EventBus:
    """Stamps events with run, broker, sequence number and virtual time, and fans them out."""

    def __init__(self, run_id: str, scheduler: Scheduler, *, validate: bool = False) -> None:
        self.run_id = run_id
        self.scheduler = scheduler
        self.seq = 0
        self._subscribers: list[Subscriber] = []
        # Validation costs a set lookup per field; tests switch it on, benchmarks leave it off.
        self._validate = validate

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def emit(self, broker: str, event_type: str, fields: Mapping[str, Any]) -> EventRow:
        """Emit an event given as column name -> value (absent columns are null)."""
        if self._validate:
            unknown = fields.keys() - _COLUMN_SET
            if unknown:
                raise ValueError(f"{event_type}: unknown columns {sorted(unknown)}")
        return self.emit_payload(broker, event_type, _payload_of(fields))

    def emit_payload(self, broker: str, event_type: str, payload: EventRow) -> EventRow:
        """Emit an event whose non-stamp columns are laid out as :data:`PAYLOAD_LAYOUT`."""
        if self._validate:
            self._check(event_type, payload)
        self.seq += 1
        row = (self.run_id, broker, self.seq, self.scheduler.now_us, event_type, *payload)
        for subscriber in self._subscribers:
            subscriber(row)
        return row

    def emit_message(
        self,
        broker: str,
        event_type: str,
        queue: str | None,
        identity: EventRow,
        message_id: int,
        size_bytes: int,
        depth_msgs: int | None,
        depth_bytes: int | None,
        flow_state: EventRow,
        link_state: EventRow,
    ) -> None:
        """:meth:`emit_payload` with the payload's items as arguments: the engine's hottest call.

        Enqueues and dequeues are most of the log; building the row in one tuple here, rather than
        a payload tuple and then the row, is a measurable share of the engine's time.
        """
        if self._validate:
            self._check(
                event_type,
                (queue, identity, message_id, size_bytes, depth_msgs, depth_bytes, flow_state,
                 link_state),
            )  # fmt: skip
        self.seq += 1
        row = (
            self.run_id, broker, self.seq, self.scheduler.now_us, event_type, queue, identity,
            message_id, size_bytes, depth_msgs, depth_bytes, flow_state, link_state,
        )  # fmt: skip
        for subscriber in self._subscribers:
            subscriber(row)

    @staticmethod
    def _check(event_type: str, payload: EventRow) -> None:
        if event_type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        # Groups must be tuples: the sink converts each group object once per chunk, so a list
        # changed after the event would be written with its last value.
        if len(payload) != len(PAYLOAD_LAYOUT) or any(
            not isinstance(entry, str) and (type(value) is not tuple or len(value) != len(entry))
            for entry, value in zip(PAYLOAD_LAYOUT, payload, strict=True)
        ):
            raise ValueError(f"{event_type}: the payload is not laid out as PAYLOAD_LAYOUT")


class EventCollector:
    """Keeps every event in memory, keyed by column name: for tests and small runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, row: EventRow) -> None:
        self.events.append(as_dict(row))

    def of_type(self, *event_types: str) -> list[Event]:
        wanted = set(event_types)
        return [e for e in self.events if e["event_type"] in wanted]

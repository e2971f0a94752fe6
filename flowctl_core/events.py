"""Event emission: the engine's only output.

An event is an :data:`EventRow`: a tuple of the ``broker_events`` columns in schema order, nulls
as ``None``. A row is the cheapest record CPython builds (one tuple, no keys) and the Parquet sink
turns a batch of rows into columns without touching a Python object per cell twice. Code that
prefers names reads a row through :func:`as_dict` or the ``*_AT`` column positions.

Events are built in two ways:

* :meth:`EventBus.emit` takes a mapping of column name -> value (absent keys are null): the
  general path, used by every rare event.
* :meth:`EventBus.emit_payload` takes the 25 columns after the stamp, already in order: the hot
  path of the queues and clients (enqueue, dequeue, completions), built from cached tuples.
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
if COLUMNS[: len(STAMP_COLUMNS)] != STAMP_COLUMNS:
    raise ImportError(f"broker_events must start with {STAMP_COLUMNS}, not {COLUMNS[:5]}")
PAYLOAD_COLUMNS: tuple[str, ...] = COLUMNS[len(STAMP_COLUMNS) :]

# The payload, cut into the groups that the engine keeps cached (see queue.py and clients.py).
QUEUE_COLUMNS = ("queue",)
LINK_IDENTITY_COLUMNS = ("link", "session", "connection", "protocol", "link_role")
MESSAGE_COLUMNS = ("message_id", "size_bytes", "depth_msgs", "depth_bytes")
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
_GROUPS = (
    QUEUE_COLUMNS
    + LINK_IDENTITY_COLUMNS
    + MESSAGE_COLUMNS
    + FLOW_STATE_COLUMNS
    + LINK_STATE_COLUMNS
)
if _GROUPS != PAYLOAD_COLUMNS:
    # The hot path concatenates these groups; a schema change must be mirrored here.
    raise ImportError("broker_events column order no longer matches flowctl_core.events groups")

RUN_ID_AT, BROKER_AT, SEQ_AT, TS_AT, EVENT_TYPE_AT = range(5)
QUEUE_AT = COLUMNS.index("queue")
DETAIL_AT = COLUMNS.index("detail")

NO_LINK_IDENTITY: tuple[None, ...] = (None,) * len(LINK_IDENTITY_COLUMNS)
NO_LINK_STATE: tuple[None, ...] = (None,) * len(LINK_STATE_COLUMNS)
NO_FLOW_STATE: tuple[None, ...] = (None,) * len(FLOW_STATE_COLUMNS)
# What a queue's message events carry about the client: (link identity, link state) groups.
LinkColumns = tuple[EventRow, EventRow]
NO_LINK: LinkColumns = (NO_LINK_IDENTITY, NO_LINK_STATE)

_EVENT_TYPES = frozenset(EVENT_TYPES)
_COLUMN_SET = frozenset(COLUMNS)


def as_dict(row: EventRow) -> Event:
    """The row keyed by column name (every column present, nulls as None)."""
    return dict(zip(COLUMNS, row, strict=True))


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
        return self.emit_payload(broker, event_type, tuple(map(fields.get, PAYLOAD_COLUMNS)))

    def emit_payload(self, broker: str, event_type: str, payload: EventRow) -> EventRow:
        """Emit an event whose non-stamp columns are given in schema order; returns the row."""
        if self._validate:
            self._check(event_type, payload)
        self.seq += 1
        row = (self.run_id, broker, self.seq, self.scheduler.now_us, event_type, *payload)
        for subscriber in self._subscribers:
            subscriber(row)
        return row

    @staticmethod
    def _check(event_type: str, payload: EventRow) -> None:
        if event_type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        if len(payload) != len(PAYLOAD_COLUMNS):
            raise ValueError(
                f"{event_type}: {len(payload)} payload columns, expected {len(PAYLOAD_COLUMNS)}"
            )


class EventCollector:
    """Keeps every event in memory, keyed by column name: for tests and small runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, row: EventRow) -> None:
        self.events.append(as_dict(row))

    def of_type(self, *event_types: str) -> list[Event]:
        wanted = set(event_types)
        return [e for e in self.events if e["event_type"] in wanted]

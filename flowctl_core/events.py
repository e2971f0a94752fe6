"""Event emission: the engine's only output.

An event is an :data:`EventRow`, a tuple laid out as :data:`ROW_LAYOUT`: the six columns that
change with every event (seq, ts, message id, size, depths) and two nested tuples that change
rarely and that the engine keeps cached, so that events share them:

* the *context* (:data:`CONTEXT_COLUMNS`): run, broker, event type, queue and the queue's flow
  state; a queue holds one per event type, refreshed on flow transitions and reconfiguration;
* the *link* (:data:`LINK_COLUMNS`): the client's identity and its credit/window state; a producer
  holds one per outstanding-transfer count, a consumer one for its life.

An event so costs one 8-item tuple, and the Parquet sink converts each distinct group once per
batch instead of once per event. :func:`flatten` gives the plain row in schema order and
:func:`as_dict` the row keyed by column name.

Events are built in two ways:

* :meth:`EventBus.emit` takes a mapping of column name -> value (absent keys are null): the
  general path, used by every rare event.
* :meth:`EventBus.emit_row` takes the groups and the per-event values: the hot path of the queues
  and clients (enqueue, dequeue, completions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast, runtime_checkable

from flowctl_core.clock import Scheduler
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES

EventRow = tuple[Any, ...]
Event = dict[str, Any]
Subscriber = Callable[[EventRow], None]
BatchCallback = Callable[[list[EventRow]], None]


@runtime_checkable
class BatchSubscriber(Protocol):
    """A subscriber that takes events in batches (the Parquet sink): see
    :meth:`EventBus.subscribe_batch`."""

    def write_rows(self, rows: list[EventRow]) -> None: ...


# Rows a bus buffers for its batch subscribers before handing them over: the Parquet sink's
# conversion chunk, so that each batch is one chunk and still in the CPU cache when converted.
BATCH_ROWS = 16_384

COLUMNS: tuple[str, ...] = tuple(BROKER_EVENTS.names)

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
CONTEXT_COLUMNS: tuple[str, ...] = ("run_id", "broker", "event_type", "queue", *FLOW_STATE_COLUMNS)
LINK_COLUMNS: tuple[str, ...] = (*LINK_IDENTITY_COLUMNS, *LINK_STATE_COLUMNS)
ROW_LAYOUT: tuple[str | tuple[str, ...], ...] = (
    "seq",
    "ts",
    "message_id",
    "size_bytes",
    "depth_msgs",
    "depth_bytes",
    CONTEXT_COLUMNS,
    LINK_COLUMNS,
)
TS_AT, CONTEXT_AT, LINK_AT = 1, 6, 7
# Positions inside the context group and the link group.
RUN_ID_IN, EVENT_TYPE_IN, QUEUE_IN = 0, 2, 3
LINK_IN, CAPACITY_IN = LINK_COLUMNS.index("link"), LINK_COLUMNS.index("capacity")
CONNECTION_IN, DETAIL_IN = LINK_COLUMNS.index("connection"), LINK_COLUMNS.index("detail")


def _places(layout: tuple[str | tuple[str, ...], ...]) -> dict[str, tuple[int, int | None]]:
    """Column -> (position in the row, position in its group or None)."""
    places: dict[str, tuple[int, int | None]] = {}
    for at, entry in enumerate(layout):
        if isinstance(entry, str):
            places[entry] = (at, None)
        else:
            places.update((name, (at, inner)) for inner, name in enumerate(entry))
    return places


def _is_schema_slice(names: tuple[str, ...]) -> bool:
    start = COLUMNS.index(names[0]) if names[0] in COLUMNS else -1
    return start >= 0 and COLUMNS[start : start + len(names)] == names


_PLACES = _places(ROW_LAYOUT)
# Queues and clients lay the groups' tuples out by hand, in the order of the *_COLUMNS names above;
# those names must be the schema's own runs of columns, or values would land in wrong columns.
_LAYOUT_NAMES = [n for entry in ROW_LAYOUT for n in ((entry,) if isinstance(entry, str) else entry)]
if (
    sorted(_LAYOUT_NAMES) != sorted(COLUMNS)  # each column exactly once
    or not all(
        map(_is_schema_slice, (LINK_IDENTITY_COLUMNS, FLOW_STATE_COLUMNS, LINK_STATE_COLUMNS))
    )
    or (ROW_LAYOUT[TS_AT], ROW_LAYOUT[CONTEXT_AT], ROW_LAYOUT[LINK_AT])
    != ("ts", CONTEXT_COLUMNS, LINK_COLUMNS)
):
    raise ImportError("broker_events columns no longer match flowctl_core.events.ROW_LAYOUT")
_FLAT_PLACES = tuple(_PLACES[name] for name in COLUMNS)

NO_LINK_STATE: tuple[None, ...] = (None,) * len(LINK_STATE_COLUMNS)
NO_FLOW_STATE: tuple[None, ...] = (None,) * len(FLOW_STATE_COLUMNS)
# What a message event carries about the client: its identity then its state, LINK_COLUMNS.
LinkColumns = tuple[Any, ...]
NO_LINK: LinkColumns = (None,) * len(LINK_COLUMNS)

_EVENT_TYPES = frozenset(EVENT_TYPES)
_COLUMN_SET = frozenset(COLUMNS)


def flatten(row: EventRow) -> EventRow:
    """The plain row: every ``broker_events`` column in schema order."""
    return tuple(row[at] if inner is None else row[at][inner] for at, inner in _FLAT_PLACES)


def as_dict(row: EventRow) -> Event:
    """The row keyed by column name (every column present, nulls as None)."""
    return dict(zip(COLUMNS, flatten(row), strict=True))


def event_type_of(row: EventRow) -> str:
    return cast(str, row[CONTEXT_AT][EVENT_TYPE_IN])


def queue_of(row: EventRow) -> str | None:
    return cast(str | None, row[CONTEXT_AT][QUEUE_IN])


def link_of(row: EventRow) -> str | None:
    return cast(str | None, row[LINK_AT][LINK_IN])


def capacity_of(row: EventRow) -> int | None:
    return cast(int | None, row[LINK_AT][CAPACITY_IN])


def connection_of(row: EventRow) -> str | None:
    return cast(str | None, row[LINK_AT][CONNECTION_IN])


def detail_of(row: EventRow) -> str | None:
    return cast(str | None, row[LINK_AT][DETAIL_IN])


def link_columns(fields: Mapping[str, Any] | None) -> LinkColumns:
    """The link column group of a client's fields mapping; absent -> null."""
    if not fields:
        return NO_LINK
    return tuple(map(fields.get, LINK_COLUMNS))


#: The producer named on the enqueues of messages put in a queue before the run starts (a
#: scenario's ``prefill``), a reserved client name (scenario validation refuses it for a client).
#: DESIGN.md §3 wants every enqueue to name its producer and carry its capacity and outstanding:
#: these messages were written before the run, by nobody the run knows, and no transfer of theirs
#: awaits completion, so outstanding is 0; and their writer has no window the run can fill, so
#: capacity is 0, which adds nothing to DESIGN §4's overshoot bound (sum of the capacities of the
#: producers that enqueued during an episode) or to the producers' capacity sum of a queue. A
#: prefill never starts an episode: a scenario whose prefill would pass a stop threshold is
#: refused, so the prefill's enqueues all come before any flow_stopped. ``detail`` says
#: ``prefill``; no link event ever names this producer (it has no link state).
PREFILL_LINK = "prefill"
PREFILL_FIELDS: dict[str, Any] = {
    "link": PREFILL_LINK,
    "link_role": "publisher",
    "outstanding": 0,
    "capacity": 0,
}
PREFILL_DETAIL = {"prefill": True}


def prefill_link() -> LinkColumns:
    """The link columns of a prefilled message's enqueue (:data:`PREFILL_LINK`)."""
    return link_columns(
        dict(PREFILL_FIELDS, detail=json.dumps(PREFILL_DETAIL, separators=(",", ":")))
    )


def link_fields(link: LinkColumns) -> Event:
    """The inverse of :func:`link_columns`: the client's columns keyed by name."""
    return dict(zip(LINK_COLUMNS, link, strict=True))


def link_identity(
    link: str,
    link_role: str,
    protocol: str | None = None,
    connection: str | None = None,
    session: str | None = None,
) -> EventRow:
    """The link identity columns, in :data:`LINK_COLUMNS` order (the link state follows them)."""
    return (link, session, connection, protocol, link_role)


class EventBus:
    """Stamps events with sequence number and virtual time, and fans them out."""

    def __init__(self, run_id: str, scheduler: Scheduler, *, validate: bool = False) -> None:
        self.run_id = run_id
        self.scheduler = scheduler
        self.seq = 0
        self._subscribers: list[Subscriber] = []
        self._batch_subscribers: list[BatchCallback] = []
        # Rows not yet handed to the batch subscribers; None while there are none (no buffering).
        self._batch: list[EventRow] | None = None
        # Validation costs a set lookup per field; tests switch it on, benchmarks leave it off.
        self._validate = validate

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call ``subscriber`` with each row as it is emitted."""
        self._subscribers.append(subscriber)

    def subscribe_batch(self, subscriber: BatchCallback) -> None:
        """Call ``subscriber`` with the rows in emission order, :data:`BATCH_ROWS` at a time,
        and with the rest on :meth:`flush`. The list is shared by the batch subscribers and
        dropped by the bus after the call: read it, do not change it."""
        self._batch_subscribers.append(subscriber)
        if self._batch is None:
            self._batch = []

    def flush(self) -> None:
        """Hand the buffered rows to the batch subscribers (none are buffered without them)."""
        rows = self._batch
        if not rows:
            return
        self._batch = []
        for subscriber in self._batch_subscribers:
            subscriber(rows)

    def context(
        self,
        broker: str,
        event_type: str,
        queue: str | None = None,
        flow_state: EventRow = NO_FLOW_STATE,
    ) -> EventRow:
        """The context group of this run's events of ``event_type``; callers cache it."""
        return (self.run_id, broker, event_type, queue, *flow_state)

    def emit(self, broker: str, event_type: str, fields: Mapping[str, Any]) -> EventRow:
        """Emit an event given as column name -> value (absent columns are null)."""
        if self._validate:
            unknown = fields.keys() - _COLUMN_SET
            if unknown:
                raise ValueError(f"{event_type}: unknown columns {sorted(unknown)}")
        get = fields.get
        context = self.context(
            broker, event_type, get("queue"), tuple(map(get, FLOW_STATE_COLUMNS))
        )
        return self.emit_row(
            context,
            link_columns(fields),
            get("message_id"),
            get("size_bytes"),
            get("depth_msgs"),
            get("depth_bytes"),
        )

    def emit_row(
        self,
        context: EventRow,
        link: LinkColumns,
        message_id: int | None,
        size_bytes: int | None,
        depth_msgs: int | None,
        depth_bytes: int | None,
    ) -> EventRow:
        """Emit an event from its two groups and its per-event columns: the engine's hot path."""
        if self._validate:
            self._check(context, link)
        self.seq += 1
        row = (
            self.seq, self.scheduler.now_us, message_id, size_bytes, depth_msgs, depth_bytes,
            context, link,
        )  # fmt: skip
        batch = self._batch
        if batch is not None:
            batch.append(row)
            if len(batch) >= BATCH_ROWS:
                self.flush()
        for subscriber in self._subscribers:
            subscriber(row)
        return row

    def _check(self, context: EventRow, link: LinkColumns) -> None:
        # Groups must be tuples: the sink converts each group object once per chunk, so a list
        # changed after the event would be written with its last value.
        for name, group, columns in (
            ("context", context, CONTEXT_COLUMNS),
            ("link", link, LINK_COLUMNS),
        ):
            if type(group) is not tuple or len(group) != len(columns):
                raise ValueError(
                    f"the {name} group is not a tuple laid out as {name.upper()}_COLUMNS"
                )
        if context[RUN_ID_IN] != self.run_id:
            raise ValueError(
                f"context of run {context[RUN_ID_IN]!r} emitted on run {self.run_id!r}"
            )
        if context[EVENT_TYPE_IN] not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {context[EVENT_TYPE_IN]!r}")


class EventCollector:
    """Keeps every event in memory, keyed by column name: for tests and small runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, row: EventRow) -> None:
        self.events.append(as_dict(row))

    def of_type(self, *event_types: str) -> list[Event]:
        wanted = set(event_types)
        return [e for e in self.events if e["event_type"] in wanted]

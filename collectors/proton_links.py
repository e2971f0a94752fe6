"""A client's own AMQP 1.0 links as ``broker_events``: the link credit a python-qpid-proton
application sees, recorded from inside it (DESIGN §6: "a client's own link frames").

A broker's log and its management API say when an address or a connection blocks; neither says
how much credit a link had, or how long a publisher waited for it: only an end of the link
knows. :class:`LinkRecorder` joins an application's handler (``recorder.attach(handler)``) and
writes, for every link of the connections that handler serves, the events the engine writes for
its own links (flowctl_core/protocols/rabbitmq_amqp10.py), each with the link's ``credit`` (as
the broker end sees it) and ``available`` after it:

* ``link_attached`` when the broker answers the attach, ``link_detached`` when either end
  detaches it (``detail.condition``: the broker's error) or its connection goes
  (``detail.reason``);
* ``flow``: the broker's flow frames (``detail.origin`` "receiver" on a publisher link: its
  credit; "sender" on a consumer link: a drain answered), the credit the application grants on a
  consumer link ("receiver": proton's prefetch window topping it up, ``Receiver.flow``) and a
  publisher's backlog changing ("sender", ``detail.reason`` "available"), as the engine names a
  flow's origin;
* ``transfer`` for each message a consumer link receives (``size_bytes``: its encoded size) and
  each one a publisher link puts on the wire (proton does not say which: no size).

``available`` is the sending end's. On a publisher link it is the application's backlog: what
it sent that proton holds for want of credit and what it offered beside them
(``Sender.offered``); so a publisher the broker leaves without credit while it has messages
to send is a link starvation (DESIGN §4), as Artemis's BLOCK address withholds AMQP credit. On a
consumer link it is null: proton does not pass on the ``available`` of the broker's flow frames,
so a consumer's starvation cannot be told from here (its credit and deliveries are logged).
``delivery_count`` is null: proton does not expose it. Every row's ``detail.recorded_by`` is
"client-links", and ``detail.broker_product`` the broker's product when the recorder is told it
(an AMQP 1.0 link does not say whether its broker is an Artemis or a RabbitMQ, and advice is
given in its broker's knobs).

The recorder reads a link twice per event, before the application's handlers (what the frame
that arrived did: a transfer, the broker's flow) and after them (what the application did in
answer: the credit it granted, the messages it sent), so each change is logged at the event that
made it. A change made outside the handler's events (a timer of another handler, a thread) is
logged at the next event of this handler. proton's ``MessagingHandler`` takes each message as
it arrives; a handler that leaves a delivery unread past its event shows that delivery's credit
as granted again.

The recorder is one run per process (``run_id`` "client-BROKER-<start>-<pid>"): a restarted
client starts a new run, as its links are new links. Rows are committed as the collectors commit
theirs (collectors/session.py: a batch per file, never across two UTC days, written whole or not
at all) every ``flush_interval_s`` or :data:`~collectors.base.FLUSH_ROWS` rows, and by
:meth:`LinkRecorder.close`; a client killed without ``close`` loses the rows since the last
commit, never a file. Everything runs on proton's event thread.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import pyarrow.parquet as pq

from collectors.base import DEFAULT_FLUSH_INTERVAL_S, FLUSH_ROWS, SessionState
from collectors.session import SessionWriter
from schemas.broker_events import BROKER_PRODUCTS, RECORDED_BY_CLIENT_LINKS

PROTOCOL = "amqp-1.0"


class ProtonLink(Protocol):
    """What the recorder reads of a proton ``Link`` (``proton.Sender`` / ``proton.Receiver``)."""

    name: str
    credit: int
    available: int
    queued: int
    drain_mode: bool
    is_sender: bool
    session: Any
    connection: Any
    source: Any
    target: Any
    remote_source: Any
    remote_target: Any
    remote_condition: Any


class ProtonHandler(Protocol):
    """A proton handler with child handlers (``proton.handlers.MessagingHandler``)."""

    handlers: Any  # proton types it as a list or its lazily made one


HandlerT = TypeVar("HandlerT", bound=ProtonHandler)


@dataclass
class LinkState:
    """What the run last logged of one link, and the link itself (read again at every event)."""

    link: ProtonLink
    name: str
    role: str
    queue: str | None
    session: str
    connection: str
    credit: int = 0  # as logged last (link_credit)
    available: int | None = None  # as logged last: a publisher's backlog; None on a consumer
    raw_credit: int = 0  # proton's credit and queue when last read (a publisher's sends)
    queued: int = 0


def _address(terminus: Any) -> str | None:
    address = getattr(terminus, "address", None)
    return str(address) if address else None


def backlog(link: ProtonLink) -> int:
    """A publisher link's ``available``: the messages proton holds for want of credit (sent by
    the application, not yet on the wire) and what the application offered beside them."""
    return int(link.queued) + int(link.available)


def link_credit(link: ProtonLink) -> int:
    """The link's credit as its broker end sees it, between events. A sender's proton credit is
    charged for each message the application sends, on the wire or still waiting in proton
    (``queued``, and then it reads negative): the broker's is that plus what waits. A
    receiver's is charged as the application takes a message (proton's ``on_delivery`` reads
    it before: :meth:`LinkRecorder.received`)."""
    if link.is_sender:
        return max(int(link.credit) + int(link.queued), 0)
    return max(int(link.credit), 0)


def new_client_run_id(broker: str, now: datetime) -> str:
    """``client-BROKER-<UTC start to the microsecond>-<pid>``: never a broker collector's
    ``collect-`` run (whose lost state is found again by that prefix)."""
    return f"client-{broker}-{now.astimezone(UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


# proton wraps its C objects anew at every event (a new Python object each time) but keeps the
# attributes set on them: the recorder names links, sessions and connections by one of those.
_KEY = "flowctl_key"


def _key_of(endpoint: Any) -> int | None:
    key = getattr(endpoint, _KEY, None)
    return key if isinstance(key, int) else None


class LinkRecorder:
    """Records the links of the connections an application's proton handler serves (see the
    module). ``clock`` gives the time of an event (the wall clock, UTC)."""

    def __init__(
        self,
        raw_dir: Path,
        broker: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        product: str | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not broker.strip():
            raise ValueError("a link recorder needs the broker's name (the broker column)")
        if product is not None and product not in BROKER_PRODUCTS:
            raise ValueError(f"product {product!r}: one of {', '.join(BROKER_PRODUCTS)} (or none)")
        # Every row says who recorded it and, when told, which broker product it talks to
        # (an AMQP 1.0 link says nothing of it: jobs/transforms/recommend_brokers.py).
        self._marks: dict[str, Any] = {"recorded_by": RECORDED_BY_CLIENT_LINKS}
        if product is not None:
            self._marks["broker_product"] = product
        # No state file: a client run is never gone on with (see the module).
        self.writer = SessionWriter(raw_dir, raw_dir / ".unused-client-state")
        self.clock = clock
        self.flush_interval_s = flush_interval_s
        self.state = SessionState(run_id=new_client_run_id(broker, clock()), broker=broker)
        self.links: dict[int, LinkState] = {}  # attached links, by key
        self._names: dict[int, str] = {}  # connections' and sessions' names, by key
        self._next_key = 0
        self._pending: list[dict[str, Any]] = []
        self._pending_since = time.monotonic()
        self._now: datetime | None = None
        self.closed = False

    # -- joining a handler ----------------------------------------------------------------------
    def attach(self, handler: HandlerT) -> HandlerT:
        """Join ``handler``: a reader before its own child handlers and one after them."""
        handler.handlers.insert(0, _Before(self))
        handler.handlers.append(_After(self))
        return handler

    # -- what the handlers call -----------------------------------------------------------------
    def begin_event(self) -> None:
        self._now = self.clock()

    def end_event(self) -> None:
        """After the application's handlers: the changes they made, then a commit when due."""
        self.note_changes()
        self._now = None
        if self._pending and time.monotonic() - self._pending_since >= self.flush_interval_s:
            self.commit()

    def opened(self, link: ProtonLink) -> None:
        """The broker answered the attach."""
        if self._state(link) is not None:
            return
        key = self._key(link)
        sender = bool(link.is_sender)
        state = LinkState(
            link=link,
            name=str(link.name),
            role="publisher" if sender else "consumer",
            queue=_address(link.target if sender else link.source)
            or _address(link.remote_target if sender else link.remote_source),
            session=self._session_name(link),
            connection=self._connection_name(link.connection),
        )
        self.links[key] = state
        self._row(state, "link_attached", link_credit(link), backlog(link) if sender else None)
        state.raw_credit, state.queued = int(link.credit), int(link.queued)

    def broker_flow(self, link: ProtonLink) -> None:
        """A flow frame from the broker (proton's ``on_link_flow``), read before the
        application answers it. On a publisher link proton has sent at once what waited for
        the credit it brings: the broker's credit is logged, then those transfers."""
        state = self._state(link)
        if state is None:
            return
        # The broker is the link's other end: its flow is the receiver's on a publisher link
        # (credit), the sender's on a consumer link (a drain answered), as the engine names a
        # flow's origin (DESIGN §3).
        detail = {"drain": bool(link.drain_mode)}
        if state.role == "consumer":
            self._row(state, "flow", link_credit(link), None, {"origin": "sender", **detail})
            return
        sent = max(state.queued - int(link.queued), 0)  # no send of the application since
        granted = link_credit(link) + sent
        if granted != state.credit or link.drain_mode:
            self._row(state, "flow", granted, state.available, {"origin": "receiver", **detail})
        self._transfers(state, link, sent)

    def received(self, link: ProtonLink, delivery: Any) -> None:
        """A message arrived whole on a consumer link (read before the application takes it)."""
        state = self._state(link)
        if state is None or state.role != "consumer":
            return
        if delivery.partial or not delivery.readable or _key_of(delivery) is not None:
            return
        setattr(delivery, _KEY, 1)  # logged once: a delivery is seen again as it settles
        before = link_credit(link)
        if before > state.credit:
            # Credit granted outside the handler's events (see the module): logged now.
            self._row(state, "flow", before, None, {"origin": "receiver"})
        self._row(state, "transfer", max(before - 1, 0), None, size_bytes=int(delivery.pending))

    def detached(self, link: ProtonLink, reason: str | None = None) -> None:
        state = self._state(link)
        if state is None:
            return
        detail: dict[str, Any] = {}
        condition = link.remote_condition
        if condition is not None:
            detail["condition"] = str(condition.name)
        if reason is not None:
            detail["reason"] = reason
        available = backlog(link) if state.role == "publisher" else None
        self._row(state, "link_detached", link_credit(link), available, detail)
        del self.links[self._key(link)]

    def connection_gone(self, connection: Any, reason: str) -> None:
        """Every link of ``connection`` still attached is detached with it, in its last state."""
        name = self._names.get(_key_of(connection) or -1)
        for key, state in list(self.links.items()):
            if state.connection == name:
                self._row(state, "link_detached", state.credit, state.available, {"reason": reason})
                del self.links[key]

    def note_changes(self) -> None:
        """What the application did to its links since they were last read: credit granted on
        a consumer link; messages sent and the backlog on a publisher link."""
        for state in list(self.links.values()):
            link = state.link
            if state.role == "consumer":
                if link_credit(link) != state.credit:
                    self._row(state, "flow", link_credit(link), None, {"origin": "receiver"})
                continue
            # Each send takes one from proton's credit and adds one to its queue until it is
            # on the wire: what left the queue went out.
            advanced = state.raw_credit - int(link.credit)
            self._transfers(state, link, max(state.queued + advanced - int(link.queued), 0))
            if backlog(link) != state.available:
                self._row(
                    state,
                    "flow",
                    link_credit(link),
                    backlog(link),
                    {"origin": "sender", "reason": "available"},
                )

    def _transfers(self, state: LinkState, link: ProtonLink, sent: int) -> None:
        """``sent`` transfers of a publisher link, down to its credit and backlog now."""
        credit, available = link_credit(link), backlog(link)
        for left in range(sent - 1, -1, -1):
            self._row(state, "transfer", credit + left, available + left)
        state.raw_credit, state.queued = int(link.credit), int(link.queued)

    # -- rows -----------------------------------------------------------------------------------
    def _state(self, link: ProtonLink) -> LinkState | None:
        key = _key_of(link)
        return None if key is None else self.links.get(key)

    def _key(self, endpoint: Any) -> int:
        key = _key_of(endpoint)
        if key is None:
            self._next_key += 1
            key = self._next_key
            setattr(endpoint, _KEY, key)
        return key

    def _row(
        self,
        state: LinkState,
        event_type: str,
        credit: int,
        available: int | None,
        detail: dict[str, Any] | None = None,
        **columns: Any,
    ) -> None:
        stamped = self.state.stamp(self._now or self.clock())
        if self._pending and self._pending[-1]["ts"].date() != stamped.date():
            self.commit()
        row = self.state.new_row(
            stamped,
            event_type,
            queue=state.queue,
            link=state.name,
            session=state.session,
            connection=state.connection,
            protocol=PROTOCOL,
            link_role=state.role,
            credit=credit,
            available=available,
            detail=json.dumps({**self._marks, **(detail or {})}, sort_keys=True),
            **columns,
        )
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(row)
        state.credit, state.available = credit, available
        if len(self._pending) >= FLUSH_ROWS:
            self.commit()

    def commit(self) -> None:
        """Commit the pending rows as one file (collectors/session.py)."""
        if self._pending:
            self.writer.commit(self._pending, self.state.to_json({}), state_file=False)
            self._pending = []

    def written_rows(self) -> list[dict[str, Any]]:
        """This run's committed rows, in ``seq`` order (read back from its files)."""
        rows = [
            row
            for path in self.writer.raw_dir.glob(f"date=*/part-{self.state.run_id}-*.parquet")
            for row in pq.read_table(path).to_pylist()
        ]
        return sorted(rows, key=lambda row: row["seq"])

    def close(self) -> None:
        """Commit what is pending (call it when the container has stopped)."""
        if not self.closed:
            self.commit()
            self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # -- names ----------------------------------------------------------------------------------
    def _connection_name(self, connection: Any) -> str:
        key = self._key(connection)
        if key not in self._names:
            container = getattr(connection, "container", None) or "client"
            count = sum(1 for name in self._names.values() if "/" not in name)
            self._names[key] = f"{container}#{count + 1}"
        return self._names[key]

    def _session_name(self, link: ProtonLink) -> str:
        connection = self._connection_name(link.connection)
        key = self._key(link.session)
        if key not in self._names:
            count = sum(1 for name in self._names.values() if name.startswith(f"{connection}/"))
            self._names[key] = f"{connection}/s{count + 1}"
        return self._names[key]


class _Before:
    """The recorder's reader before the application's handlers: what the frame did."""

    def __init__(self, recorder: LinkRecorder) -> None:
        self.recorder = recorder

    def on_unhandled(self, method: str, *args: Any) -> None:
        self.recorder.begin_event()

    def on_link_remote_open(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.opened(event.link)

    def on_link_flow(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.broker_flow(event.link)

    def on_delivery(self, event: Any) -> None:
        self.recorder.begin_event()
        if event.link is not None and event.link.is_receiver:
            self.recorder.received(event.link, event.delivery)

    def on_link_remote_close(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.detached(event.link)

    def on_link_local_close(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.detached(event.link, "closed by the client")

    def on_connection_local_close(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.connection_gone(event.connection, "connection closed by the client")


class _After:
    """The recorder's reader after the application's handlers: what the application did."""

    def __init__(self, recorder: LinkRecorder) -> None:
        self.recorder = recorder

    def on_connection_remote_close(self, event: Any) -> None:
        self.recorder.connection_gone(event.connection, "connection closed by the broker")
        self.recorder.end_event()

    def on_transport_closed(self, event: Any) -> None:
        self.recorder.connection_gone(event.connection, "connection lost")
        self.recorder.end_event()

    def on_unhandled(self, method: str, *args: Any) -> None:
        self.recorder.end_event()

"""A client's own AMQP 1.0 links as ``broker_events``: the link credit a python-qpid-proton
application sees, recorded from inside it (DESIGN §6: "a client's own link frames").

A broker's log and its management API say when an address or a connection blocks; neither says
how much credit a link had, or how long a publisher waited for it: only an end of the link
knows. :class:`LinkRecorder` wraps an application's handler (``recorder.attach(handler)``
returns the handler to give proton) and writes, for every link of the connections it serves,
the events the engine writes for its own links (flowctl_core/protocols/rabbitmq_amqp10.py),
each with the link's ``credit`` (as the broker end sees it) and ``available`` after it:

* ``link_attached`` when the broker answers the attach (again after a reconnect),
  ``link_detached`` when either end closes or detaches it (``detail.condition``: the broker's
  error) or its connection goes (``detail.reason``);
* ``flow``: the broker's flow frames (``detail.origin`` "receiver" on a publisher link: its
  credit; "sender" on a consumer link: a drain answered; ``detail.drain``), the credit the
  application grants on a consumer link ("receiver": proton's prefetch window topping it up,
  ``Receiver.flow``, ``Receiver.drain``) and a publisher's backlog changing or a drain it
  answered ("sender", ``detail.reason`` "available" / "drained"), as the engine names a flow's
  origin;
* ``transfer`` for each message a consumer link receives (``size_bytes``: its encoded size;
  ``detail.aborted`` and no size for one the broker aborted) and each one a publisher link puts
  on the wire (proton does not say which: no size).

The link column is the link's AMQP name, unique in the run: proton names a sender and a
receiver to one address alike, so a second link of a name is ``NAME#2`` (its AMQP name in
``detail.link_name``).

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

The recorder reads the links twice per event, before anything of the application's (proton
runs a handler's own methods, then its child handlers: the recorder's handler holds the
application between two of its own) and after it: what the frame that arrived did (a transfer,
the broker's flow, messages proton wrote since), then what the application did in answer (the
credit it granted, the messages it sent), so each change is logged at the event that made it. A
change made outside the handler's events (another handler's timer) is logged at the next event
of this one; a publisher's sends outside them that meet a credit grant of the broker's before
the next event are not told apart from it (proton is not thread-safe, so a send is always some
handler's). proton's ``MessagingHandler`` takes each message as it arrives; a handler that
leaves a delivery unread past its event shows that delivery's credit as granted again.

The recorder is one run per process (``run_id`` "client-BROKER-<start>-<pid>"): a restarted
client starts a new run, as its links are new links. Rows are committed as the collectors commit
theirs (collectors/session.py: a batch per file, never across two UTC days, written whole or not
at all) at the first event ``flush_interval_s`` after the oldest pending row, at
:data:`~collectors.base.FLUSH_ROWS` rows, and by :meth:`LinkRecorder.close`; a client killed
without ``close`` loses the rows since the last commit, never a file. A commit that fails in the
event loop (a full disk) is logged and tried again a flush interval later, its rows kept: the
application goes on. Everything runs on proton's event thread.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import pyarrow.parquet as pq

from collectors.base import DEFAULT_FLUSH_INTERVAL_S, FLUSH_ROWS, SessionState
from collectors.rabbitmq import DEFAULT_VHOST
from collectors.rabbitmq import queue_name as rabbitmq_queue_name
from collectors.session import SessionWriter, check_broker_name
from flowctl_core.errors import ConfigurationError
from schemas.broker_events import (
    AMQP_1_0,
    ARTEMIS_FQQN_SEPARATOR,
    BROKER_PRODUCT_ARTEMIS,
    BROKER_PRODUCTS,
    RECORDED_BY_CLIENT_LINKS,
)

log = logging.getLogger("flowctl.collect")


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


@dataclass
class LinkState:
    """What the run last logged of one link, and the link itself (read again at every event)."""

    link: ProtonLink
    name: str  # the link column: unique in the run
    amqp_name: str
    role: str
    queue: str | None
    address: str | None  # the AMQP address, kept in the detail where it is not the queue's name
    session: str
    connection: str
    credit: int = 0  # as logged last (link_credit)
    available: int | None = None  # as logged last: a publisher's backlog; None on a consumer
    raw_credit: int = 0  # proton's credit and queue when last read (a publisher's sends)
    queued: int = 0
    drain: bool = False  # the link's drain mode when last read

    @property
    def renamed(self) -> dict[str, str]:
        """``detail.link_name``: the AMQP name of a link whose name in the run differs;
        ``detail.amqp_address``: the address of a link whose ``queue`` is not that address
        (not ``detail.address``: the advice reads that as an Artemis address's)."""
        names = {} if self.name == self.amqp_name else {"link_name": self.amqp_name}
        if self.address is not None and self.address != self.queue:
            names["amqp_address"] = self.address
        return names


def _address(terminus: Any) -> str | None:
    address = getattr(terminus, "address", None)
    return str(address) if address else None


#: RabbitMQ's AMQP 1.0 addresses of one queue (its docs, "Addresses"): v2 (4.x) percent-encodes
#: the name (RFC 3986); v1 (3.x) escapes only a '/' in it, as ``%2F``.
_RABBITMQ_QUEUE_V2 = "/queues/"
_RABBITMQ_QUEUE_V1 = ("/amq/queue/", "/queue/")


def _rabbitmq_queue(address: str) -> str | None:
    """The queue a RabbitMQ address names as RabbitMQ itself reads it, or None for one that
    names none: an exchange (``/exchanges/...``, v1's ``/exchange/...`` and ``/topic/...``), or
    a form the broker refuses."""
    if address.startswith(_RABBITMQ_QUEUE_V2):
        name = address[len(_RABBITMQ_QUEUE_V2) :]
        return urllib.parse.unquote(name) if name and "/" not in name else None
    for prefix in _RABBITMQ_QUEUE_V1:
        if address.startswith(prefix):
            name = address[len(prefix) :]
            return name.replace("%2F", "/") if name and "/" not in name else None
    if "/" in address:
        return None
    return address.replace("%2F", "/")  # v1: a bare name is the queue of that name


def _rabbitmq_vhost(connection: Any, default_vhost: str) -> str:
    """The vhost of an AMQP 1.0 connection to RabbitMQ: ``vhost:NAME`` in its open frame's
    hostname, else ``default_vhost``, the broker's (RabbitMQ's ``default_vhost``; its AMQP 1.0
    plugin's ``amqp1_0.default_vhost`` in 3.x)."""
    hostname = str(getattr(connection, "hostname", None) or "")
    return hostname.removeprefix("vhost:") if hostname.startswith("vhost:") else default_vhost


def check_vhost(vhost: str, product: str | None, name: str = "vhost") -> None:
    """Refuse an empty RabbitMQ vhost, or one other than ``/`` given for Artemis, which has
    none: ValueError naming it, as ``name`` (the argument or option that gave it)."""
    if not vhost:
        raise ValueError(f"{name} '': a RabbitMQ virtual host's name, not empty")
    if product == BROKER_PRODUCT_ARTEMIS and vhost != DEFAULT_VHOST:
        raise ValueError(f"{name} {vhost!r}: a RabbitMQ virtual host; Artemis has none")


def queue_of_address(
    address: str | None, product: str | None, vhost: str = DEFAULT_VHOST
) -> str | None:
    """The ``queue`` column of a link to ``address``: the name the broker's own collector gives
    that queue, so that a link's rows and the queue's samples are one entity (a RabbitMQ
    ``/amq/queue/slow10`` was a queue of its own beside ``slow10``). RabbitMQ's forms (all
    beginning with '/') name a queue as :func:`collectors.rabbitmq.queue_name` does, with the
    connection's vhost; an exchange is none. An Artemis address is its name (the Artemis
    collector's entity), a fully qualified queue name ``ADDRESS::QUEUE`` names that queue. A
    link whose broker is untold reads RabbitMQ's forms (an Artemis address seldom begins with
    '/'), and an FQQN as Artemis's (a RabbitMQ queue seldom holds '::'), unless its ``vhost`` is
    not ``/``: a vhost is RabbitMQ's."""
    if address is None:
        return None
    rabbitmq = product is not None or address.startswith("/") or vhost != DEFAULT_VHOST
    if product != BROKER_PRODUCT_ARTEMIS and rabbitmq:
        name = _rabbitmq_queue(address)
        return None if name is None else rabbitmq_queue_name(vhost, name)
    _, fqqn, queue = address.partition(ARTEMIS_FQQN_SEPARATOR)
    return queue if fqqn and queue else address


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
    module). ``clock`` gives the time of an event (the wall clock, UTC). ``default_vhost`` is
    the RabbitMQ vhost of a connection whose open frame names none (no ``vhost:NAME`` hostname):
    the broker's default, ``/`` unless its configuration says otherwise."""

    def __init__(
        self,
        raw_dir: Path,
        broker: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        product: str | None = None,
        default_vhost: str = DEFAULT_VHOST,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        check_broker_name(broker)
        if product is not None and product not in BROKER_PRODUCTS:
            raise ValueError(f"product {product!r}: one of {', '.join(BROKER_PRODUCTS)} (or none)")
        check_vhost(default_vhost, product, "default_vhost")
        self.default_vhost = default_vhost
        # Every row says who recorded it and, when told, which broker product it talks to
        # (an AMQP 1.0 link says nothing of it: jobs/transforms/recommend_brokers.py).
        self._marks: dict[str, Any] = {"recorded_by": RECORDED_BY_CLIENT_LINKS}
        if product is not None:
            self._marks["broker_product"] = product
        self.product = product
        try:
            raw_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigurationError(
                f"{raw_dir}: not a folder rows can be written to ({error})"
            ) from None
        # No state file: a client run is never gone on with (see the module).
        self.writer = SessionWriter(raw_dir, raw_dir / ".unused-client-state")
        # A run killed in a commit left its hidden file; each run is new, so none would go on
        # with it and remove it (an audit): those untouched for an hour go at a start.
        self.writer.remove_leftovers(None)
        self.clock = clock
        self.flush_interval_s = flush_interval_s
        self.state = SessionState(run_id=new_client_run_id(broker, clock()), broker=broker)
        self.links: dict[int, LinkState] = {}  # attached links, by key
        self._connection_names: dict[int, str] = {}  # by key
        self._session_names: dict[int, str] = {}  # by key
        self._sessions_of: Counter[str] = Counter()  # sessions named per connection
        self._link_names: dict[str, int] = {}  # the link column's names, to the link's key
        self._next_key = 0
        self._pending: list[dict[str, Any]] = []
        self._pending_since = time.monotonic()
        self._now: datetime | None = None
        self.closed = False

    # -- joining a handler ----------------------------------------------------------------------
    def attach(self, handler: Any) -> RecordedHandler:
        """``handler`` with the recorder around it: give proton what this returns wherever it
        would take ``handler`` (``Container(...)``, ``connect(handler=...)``)."""
        return RecordedHandler(_Before(self), handler, _After(self))

    # -- what the handlers call -----------------------------------------------------------------
    def begin_event(self) -> None:
        """Before the application's handlers: the time of the event, and the messages that went
        on the wire since the last one (proton writes between events)."""
        self._now = self.clock()
        for state in list(self.links.values()):
            if state.role == "publisher":
                self._sync_publisher(state)

    def end_event(self) -> None:
        """After the application's handlers: the changes they made, then a commit when due."""
        self.note_changes()
        self._now = None
        if self._pending and time.monotonic() - self._pending_since >= self.flush_interval_s:
            self._commit_in_event()

    def opened(self, link: ProtonLink) -> None:
        """The broker answered the attach (again, after a reconnect: a new attach)."""
        if self._state(link) is not None:
            return
        key = self._key(link)
        sender = bool(link.is_sender)
        address = _address(link.target if sender else link.source) or _address(
            link.remote_target if sender else link.remote_source
        )
        state = LinkState(
            link=link,
            name=self._link_name(str(link.name), key),
            amqp_name=str(link.name),
            role="publisher" if sender else "consumer",
            queue=queue_of_address(
                address, self.product, _rabbitmq_vhost(link.connection, self.default_vhost)
            ),
            address=address,
            session=self._session_name(link),
            connection=self._connection_name(link.connection),
        )
        self.links[key] = state
        self._row(state, "link_attached", link_credit(link), backlog(link) if sender else None)
        state.raw_credit, state.queued = int(link.credit), int(link.queued)
        state.drain = bool(link.drain_mode)

    def broker_flow(self, link: ProtonLink) -> None:
        """A flow frame from the broker (proton's ``on_link_flow``), read before the
        application answers it."""
        state = self._state(link)
        if state is None:
            return
        # The broker is the link's other end: its flow is the receiver's on a publisher link
        # (credit), the sender's on a consumer link (a drain answered), as the engine names a
        # flow's origin (DESIGN §3).
        drain = bool(link.drain_mode)
        if state.role == "consumer":
            self._row(state, "flow", link_credit(link), None, {"origin": "sender", "drain": drain})
        elif link_credit(link) != state.credit or drain:
            detail = {"origin": "receiver", "drain": drain}
            self._row(state, "flow", link_credit(link), state.available, detail)
        state.drain = drain  # a publisher's proton credit was read by begin_event's sync

    def received(self, link: ProtonLink, delivery: Any) -> None:
        """A message arrived whole on a consumer link (read before the application takes it):
        it used one of the credit last logged (proton's own credit may already count a drain
        answered in the same read)."""
        state = self._state(link)
        if state is None or state.role != "consumer":
            return
        if delivery.partial or not delivery.readable or _key_of(delivery) is not None:
            return
        setattr(delivery, _KEY, 1)  # logged once: a delivery is seen again as it settles
        if link_credit(link) > state.credit:
            # Credit granted outside the handler's events (see the module): logged now.
            self._row(state, "flow", link_credit(link), None, {"origin": "receiver"})
        if getattr(delivery, "aborted", False):
            columns: dict[str, Any] = {"detail": {"aborted": True}}
        else:
            columns = {"size_bytes": int(delivery.pending)}
        self._row(state, "transfer", max(state.credit - 1, 0), None, **columns)

    def detached(self, link: ProtonLink, reason: str | None = None) -> None:
        state = self._state(link)
        if state is None:
            return
        if state.role == "publisher":
            self._sync_publisher(state)
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
        name = self._connection_names.get(_key_of(connection) or -1)
        for key, state in list(self.links.items()):
            if state.connection == name:
                self._row(state, "link_detached", state.credit, state.available, {"reason": reason})
                del self.links[key]

    def note_changes(self) -> None:
        """What the application did to its links in the event: credit granted (or a drain
        asked) on a consumer link; messages sent, the backlog, credit drained on a publisher."""
        for state in list(self.links.values()):
            link = state.link
            drain = bool(link.drain_mode)
            if state.role == "consumer":
                # Only a grant raises a receiver's credit; it falls by transfers (logged as they
                # arrive) and by a drain answered (the broker's flow).
                if link_credit(link) > state.credit or (drain and not state.drain):
                    grant = {"origin": "receiver", "drain": drain}
                    self._row(state, "flow", max(link_credit(link), state.credit), None, grant)
                state.drain = drain
                continue
            self._sync_publisher(state)

    def _sync_publisher(self, state: LinkState) -> None:
        """What a publisher link did since it was last read (at every event, before and after
        the application's handlers). A send takes one from proton's credit and adds one to its
        queue, which a write to the wire empties: a fall in credit is messages sent, unless the
        broker asked a drain and the application answered it (``Sender.drained``: credit 0,
        nothing sent); what the queue lost of them went out, a ``transfer`` each. Then the
        application's backlog, when it changed (a sender's ``flow``)."""
        link = state.link
        queued, fall = int(link.queued), state.raw_credit - int(link.credit)
        drained = state.drain and int(link.credit) == 0 and fall > 0 and queued <= state.queued
        sent = 0 if drained else max(fall, 0)
        transmitted = state.queued + sent - queued
        available = backlog(link)
        for left in range(transmitted - 1, -1, -1):
            self._row(state, "transfer", max(state.credit - 1, 0), available + left)
        if drained or available != state.available:
            said: dict[str, Any] = {"origin": "sender", "reason": "available"}
            if drained:
                said.update(reason="drained", drain=True)
            self._row(state, "flow", link_credit(link), available, said)
        state.raw_credit, state.queued = int(link.credit), queued
        state.drain = bool(link.drain_mode)

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
            # In proton's event loop: a failure is said and the rows kept, a file per day when
            # the commit succeeds (an audit: a full disk at midnight stopped the application).
            self._commit_in_event()
        row = self.state.new_row(
            stamped,
            event_type,
            queue=state.queue,
            link=state.name,
            session=state.session,
            connection=state.connection,
            protocol=AMQP_1_0,
            link_role=state.role,
            credit=credit,
            available=available,
            detail=json.dumps({**self._marks, **state.renamed, **(detail or {})}, sort_keys=True),
            **columns,
        )
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(row)
        state.credit, state.available = credit, available
        if len(self._pending) >= FLUSH_ROWS:
            self._commit_in_event()

    def commit(self) -> None:
        """Commit the pending rows, one file per UTC day of them (collectors/session.py): rows
        kept by a failed commit at midnight are of two days. The rows of a day committed stay
        committed when a later day's commit fails."""
        while self._pending:
            day = self._pending[0]["ts"].date()
            ends = next(
                (i for i, row in enumerate(self._pending) if row["ts"].date() != day),
                len(self._pending),
            )
            self.writer.commit(self._pending[:ends], self.state.to_json({}), state_file=False)
            self._pending = self._pending[ends:]

    def _commit_in_event(self) -> None:
        """A commit inside proton's event loop: one that fails (a full disk) is said and tried
        again a flush interval later, its rows kept; the application goes on."""
        try:
            self.commit()
        except OSError as error:
            self._pending_since = time.monotonic()
            log.warning(
                "client links: %d rows not committed to %s yet (%s); trying again in %.0f s",
                len(self._pending),
                self.writer.raw_dir,
                error,
                self.flush_interval_s,
            )

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
    def _link_name(self, amqp_name: str, key: int) -> str:
        """The link's name in the run: its AMQP name, unless another link of the run has it
        (proton names a sender and a receiver to one address alike): then ``NAME#2``, ..."""
        name, count = amqp_name, 1
        while self._link_names.setdefault(name, key) != key:
            count += 1
            name = f"{amqp_name}#{count}"
        return name

    def _connection_name(self, connection: Any) -> str:
        """``CONTAINER#n``: the run's n-th connection."""
        key = self._key(connection)
        if key not in self._connection_names:
            container = getattr(connection, "container", None) or "client"
            self._connection_names[key] = f"{container}#{len(self._connection_names) + 1}"
        return self._connection_names[key]

    def _session_name(self, link: ProtonLink) -> str:
        """``CONNECTION/sN``: its connection's n-th session."""
        connection = self._connection_name(link.connection)
        key = self._key(link.session)
        if key not in self._session_names:
            self._sessions_of[connection] += 1
            self._session_names[key] = f"{connection}/s{self._sessions_of[connection]}"
        return self._session_names[key]


class RecordedHandler:
    """An application's handler with a link recorder around it (:meth:`LinkRecorder.attach`):
    proton dispatches an event to a handler's own method first and then to its child
    handlers, in order, so the recorder reads the links before anything of the application's
    (its own methods and children) and after all of it."""

    def __init__(self, before: Any, application: Any, after: Any) -> None:
        self.application = application
        self.handlers = [before, application, after]


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

    def on_link_remote_detach(self, event: Any) -> None:  # detached, not closed (durable)
        self.recorder.begin_event()
        self.recorder.detached(event.link, "detached by the broker")

    def on_link_local_detach(self, event: Any) -> None:
        self.recorder.begin_event()
        self.recorder.detached(event.link, "detached by the client")

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

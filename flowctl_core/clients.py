"""AMQP 0-10 style clients: producers with a capacity window and rate- or step-driven consumers."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from flowctl_core.events import NO_LINK_STATE, LinkColumns, link_identity
from flowctl_core.queue import Queue, Transfer
from schemas.broker_events import AMQP_0_10
from schemas.model import US_PER_SECOND

if TYPE_CHECKING:
    from flowctl_core.broker import Broker


class Producer:
    """Sends transfers while fewer than ``capacity`` are uncompleted (seed 001: the "capacity").

    A full window blocks the head of the backlog: nothing behind it is sent either, whatever its
    destination (seed 000: head-of-line blocking, no skipping). ``capacity=None`` is a client
    without flow control: it never waits.
    """

    def __init__(
        self,
        broker: Broker,
        name: str,
        *,
        capacity: int | None,
        exchange: str = "",
        routing_key: str = "",
        protocol: str = AMQP_0_10,
        connection: str | None = None,
        session: str | None = None,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"producer {name!r}: capacity must be >= 1 (or None for no window)")
        broker.exchange(exchange)
        self.broker = broker
        self.name = name
        self.capacity = capacity
        self.exchange = exchange
        self.routing_key = routing_key
        self.protocol = protocol
        self.connection = connection
        self.session = session
        self.outstanding = 0
        self.sent = 0
        self.completed = 0
        self.backlog: deque[tuple[int, str]] = deque()
        self._pump_scheduled = False
        self._identity = link_identity(name, "publisher", protocol, connection, session)
        self._links: dict[int, LinkColumns] = {}
        self._completed_context = broker.bus.context(broker.name, "transfer_completed")
        # No window is the same as an infinite one.
        self._window: float = capacity if capacity is not None else float("inf")

    @property
    def blocked(self) -> bool:
        return self.capacity is not None and self.outstanding >= self.capacity

    def _link_columns(self, latency_us: int | None = None) -> LinkColumns:
        """The producer's columns on its events: identity, window capacity and outstanding."""
        return (
            *self._identity,
            *(None, None, None, self.outstanding, self.capacity, latency_us, None),
        )

    def _new_link(self) -> LinkColumns:
        """The link columns for the current outstanding count, cached when the window bounds it."""
        # One shared tuple per outstanding value: the sink converts each distinct one once.
        link = self._link_columns()
        if self.capacity is not None:
            self._links[self.outstanding] = link
        return link

    def _current_link(self) -> LinkColumns:
        return self._links.get(self.outstanding) or self._new_link()

    def send(self, size: int, count: int = 1, routing_key: str | None = None) -> None:
        """Queue ``count`` messages for sending; as many go out now as the window allows."""
        if size < 0:
            raise ValueError(f"producer {self.name!r}: message size must be >= 0")
        key = self.routing_key if routing_key is None else routing_key
        self.backlog.extend([(size, key)] * count)
        self.pump()

    def send_one(self, size: int) -> None:
        """One message to the default routing key: ``send(size)`` without the backlog round trip."""
        if self.backlog or self.outstanding >= self._window:
            self.send(size)
        elif size < 0:
            raise ValueError(f"producer {self.name!r}: message size must be >= 0")
        else:
            self._transmit(size, self.routing_key)

    def pump(self) -> None:
        self._pump_scheduled = False
        backlog = self.backlog
        window = self._window
        while backlog and self.outstanding < window:
            self._transmit(*backlog.popleft())

    def _transmit(self, size: int, routing_key: str) -> None:
        broker = self.broker
        self.outstanding += 1
        self.sent += 1
        transfer = Transfer(
            broker.next_message_id(),
            size,
            self.name,
            self.capacity,
            broker.scheduler.now_us,
            self._on_complete,
            self._current_link,
        )
        broker.publish(transfer, broker.route(self.exchange, routing_key), self._current_link())

    def _on_complete(self, transfer: Transfer) -> None:
        # A completion that reopens a full window is logged even when immediate: the enqueue that
        # filled the window shows outstanding == capacity, and without this event the log would
        # keep the producer blocked until its next event (DESIGN §4's producer window).
        reopens = self.outstanding >= self._window
        self.outstanding -= 1
        self.completed += 1
        broker = self.broker
        latency_us = broker.scheduler.now_us - transfer.received_us
        logged = transfer.completion_logged(latency_us, broker.config.log_immediate_completions)
        if logged or reopens:
            broker.bus.emit_row(
                self._completed_context,
                self._link_columns(latency_us),
                transfer.message_id,
                transfer.size,
                None,
                None,
            )
        # Completions arrive while a queue is releasing held messages: send on the next tick of the
        # same instant, never re-entering the queue mid-release.
        if self.backlog and not self._pump_scheduled:
            self._pump_scheduled = True
            broker.scheduler.call_soon(self.pump)


class Consumer:
    """Dequeues from one queue, at ``rate`` messages per second or by explicit steps."""

    def __init__(
        self,
        broker: Broker,
        name: str,
        queue: Queue,
        *,
        rate: float | None = None,
        protocol: str = AMQP_0_10,
        connection: str | None = None,
        session: str | None = None,
    ) -> None:
        if rate is not None and rate <= 0:
            raise ValueError(f"consumer {name!r}: rate must be > 0 messages/s")
        self.broker = broker
        self.name = name
        self.queue = queue
        self.rate = rate
        self.interval_us = round(US_PER_SECOND / rate) if rate else 0
        self.consumed = 0
        self._link: LinkColumns = (
            *link_identity(name, "consumer", protocol, connection, session),
            *NO_LINK_STATE,
        )
        self._running = False
        self._parked = False
        self._next_allowed_us = 0
        self._stop_at_us: int | None = None
        queue.on_message.append(self._on_message)

    def consume(self, count: int) -> int:
        """Dequeue up to ``count`` messages now; returns how many there were."""
        taken = 0
        while taken < count and self.queue.dequeue(self._link) is not None:
            taken += 1
        self.consumed += taken
        return taken

    def start(self, stop_at_us: int | None = None) -> None:
        if self.rate is None:
            raise ValueError(f"consumer {self.name!r} has no rate; use consume(n)")
        self._running = True
        self._stop_at_us = stop_at_us
        self.broker.scheduler.call_soon(self._tick)

    def stop(self) -> None:
        self._running = False

    def _tick(self) -> None:
        if not self._running:
            return
        scheduler = self.broker.scheduler
        if self._stop_at_us is not None and scheduler.now_us >= self._stop_at_us:
            self._running = False
            return
        if self.queue.dequeue(self._link) is None:
            self._parked = True  # woken by the next enqueue, not by polling
            return
        self.consumed += 1
        self._next_allowed_us = scheduler.now_us + self.interval_us
        scheduler.call_at(self._next_allowed_us, self._tick)

    def _on_message(self, _queue: Queue) -> None:
        if self._parked and self._running:
            self._parked = False
            scheduler = self.broker.scheduler
            scheduler.call_at(max(scheduler.now_us, self._next_allowed_us), self._tick)

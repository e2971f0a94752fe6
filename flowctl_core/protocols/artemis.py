"""Apache ActiveMQ Artemis flow control on the virtual clock (seed 003).

One :class:`ArtemisServer` holds the addresses (``max-size-bytes``, ``address-full-policy``, the
AMQP reject threshold), the queues bound to them (engine :class:`~flowctl_core.queue.Queue`s,
without Qpid thresholds), and one connection per client:

- CORE producers (protocol ``artemis-core``) with a byte window: credits requested from the
  server, which under BLOCK grants a request whole while the address is not full and withholds
  requests while it is full, granting them in arrival order once it is not (DESIGN §2;
  :class:`CoreProducer`);
- AMQP producers (protocol ``amqp-1.0``) on an AMQP 1.0 link: the server grants 100 credits and
  refreshes them when the link credit has fallen to 30, stops refreshing while a BLOCK address is
  full, and rejects messages above ``max-size-bytes-reject-threshold`` (:class:`AmqpProducer`);
- CORE consumers with a byte window (-1 / 0 / > 0), a processing time and an optional
  ``consumerMaxRate``; queues hand messages round-robin to the consumers that have credit
  (:class:`CoreConsumer`, :class:`QueueDispatcher`).

Packets between a client and the server take the connection's one-way latency, in order
(:class:`Pipe`). Events (DESIGN.md §3): producer links are logged from the client (the sending
end: a CORE producer's ``credit`` is its byte balance, ``detail.credit_unit`` says so), consumer
links from the server (the sending end: ``credit`` is the consumer's byte credit on the server,
floored at 0; either end logs ``UNBOUNDED_CREDIT`` (2**31 - 1, ``detail.unbounded``) when its
window is -1, which never runs out; a CORE producer whose balance does not cover
its next message logs 0, the balance being in ``detail.balance``); ``available`` is what the
sender has ready: 1 for a producer that publishes flat out, the messages left for one with a
count, and the ready messages of the queue for a consumer. Enqueues name the producer, carry
its window as ``capacity`` and ``outstanding`` in messages (CORE: the message count of the byte
window, :meth:`CoreProducer.window_columns`, null without one; AMQP: the 100 credits of a grant
less the credit left) and the address state in ``detail`` (the producer's own figures in
``detail.producer``); refused messages are ``message_rejected`` with the policy in ``detail``.

It stays one module although over 500 lines: it is one broker's flow-control state machine,
both ends of it (the server's addresses, dispatchers and client endpoints, and the clients that
request, grant and spend credit across the :class:`Pipe`), so every transition and the packet that
answers it read in one place, as h11 keeps its connection states in one ``_state.py``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowctl_core.events import PREFILL_DETAIL, PREFILL_FIELDS, link_columns
from flowctl_core.protocols.amqp10 import LinkFlow, ProtocolError, ReceiverLink, SenderLink
from flowctl_core.protocols.artemis_flow import (
    DEFAULT_AMQP_MESSAGE_OVERHEAD,
    DEFAULT_CONSUMER_WINDOW,
    DEFAULT_CORE_DELIVERY_OVERHEAD,
    DEFAULT_CORE_ENCODE_OVERHEAD,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    DEFAULT_PRODUCER_WINDOW,
    DEFAULT_QUEUE_REFERENCE_OVERHEAD,
    RESOURCE_LIMIT_EXCEEDED,
    UNBOUNDED,
    UNBOUNDED_CREDIT,
    AddressSettings,
    AddressState,
    ArtemisConfigError,
    ConsumerWindow,
    Outcome,
    ProducerCredits,
    RateLimiter,
    rate_limiter,
)
from flowctl_core.protocols.endpoints import LinkIdentity
from flowctl_core.queue import Message, Queue
from schemas.broker_events import AMQP_1_0, ARTEMIS_CORE

if TYPE_CHECKING:
    from flowctl_core.broker import Broker
    from flowctl_core.clock import Scheduler

CORE = "core"
AMQP = "amqp"
CLIENT_PROTOCOLS: tuple[str, ...] = (CORE, AMQP)
ADDRESS_FULL = "address-full"


# -- configuration -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AddressConfig:
    """An address, its settings and the queues bound to it (default: one queue of its name)."""

    name: str
    settings: AddressSettings = field(default_factory=AddressSettings)
    queues: tuple[str, ...] = ()
    prefill_count: int = 0  # messages already in the address when the run starts
    prefill_size: int = 1024

    @property
    def queue_names(self) -> tuple[str, ...]:
        return self.queues or (self.name,)


@dataclass(frozen=True)
class ArtemisProducerConfig:
    """A producing application: ``count`` messages (None: flat out), one per ``send_cost_us``.

    ``window`` is ``producerWindowSize`` in bytes (CORE only; -1: no producer flow control);
    ``max_rate`` is ``producerMaxRate`` in messages per second (-1: off).
    """

    name: str
    address: str
    protocol: str = CORE
    window: int = DEFAULT_PRODUCER_WINDOW
    size: int = 1024
    count: int | None = None
    send_cost_us: int = 10
    max_rate: int = UNBOUNDED
    start_us: int = 0
    latency_us: int | None = None

    def __post_init__(self) -> None:
        if self.protocol not in CLIENT_PROTOCOLS:
            raise ArtemisConfigError(
                f"producer {self.name!r}: protocol must be one of {CLIENT_PROTOCOLS}"
            )
        if self.window < UNBOUNDED:
            raise ArtemisConfigError(f"producer {self.name!r}: window must be -1 or >= 0")
        if self.size < 0 or (self.count is not None and self.count < 1):
            raise ArtemisConfigError(f"producer {self.name!r}: size >= 0 and count >= 1")
        if self.send_cost_us < 1:
            raise ArtemisConfigError(f"producer {self.name!r}: send_cost_us must be >= 1")
        rate_limiter(self.max_rate)  # validates


@dataclass(frozen=True)
class ArtemisConsumerConfig:
    """A consuming application: ``consumerWindowSize`` ``window`` in bytes (-1 / 0 / > 0), one
    message processed per ``process_us``, at most ``max_rate`` per second (``consumerMaxRate``).
    """

    name: str
    queue: str
    window: int = DEFAULT_CONSUMER_WINDOW
    process_us: int = 100
    max_rate: int = UNBOUNDED
    start_us: int = 0
    latency_us: int | None = None

    def __post_init__(self) -> None:
        if self.window < UNBOUNDED:
            raise ArtemisConfigError(f"consumer {self.name!r}: window must be -1, 0 or > 0")
        if self.process_us < 0:
            raise ArtemisConfigError(f"consumer {self.name!r}: process_us must be >= 0")
        rate_limiter(self.max_rate)


@dataclass(frozen=True)
class ArtemisConfig:
    addresses: tuple[AddressConfig, ...] = ()
    producers: tuple[ArtemisProducerConfig, ...] = ()
    consumers: tuple[ArtemisConsumerConfig, ...] = ()
    latency_us: int = 100  # one way, every client connection unless it sets its own
    #: What the broker's memory estimate of a message adds to its body, per protocol (DESIGN §2:
    #: the address size counts the estimate; measured on Artemis 2.40, see the defaults).
    core_message_overhead_bytes: int = DEFAULT_CORE_MESSAGE_OVERHEAD
    amqp_message_overhead_bytes: int = DEFAULT_AMQP_MESSAGE_OVERHEAD
    #: What each queue of an address after the first adds to a message's memory estimate (a
    #: real broker counts a reference per extra queue; measured on Artemis 2.40, see the default).
    queue_reference_overhead_bytes: int = DEFAULT_QUEUE_REFERENCE_OVERHEAD
    #: What a CORE message's encoded size adds to its body: producer credits are spent on it.
    core_encode_overhead_bytes: int = DEFAULT_CORE_ENCODE_OVERHEAD
    #: What a CORE message's delivery packet adds to its body: consumer credits are spent on it.
    core_delivery_overhead_bytes: int = DEFAULT_CORE_DELIVERY_OVERHEAD

    def __post_init__(self) -> None:
        if self.latency_us < 0:
            raise ArtemisConfigError("latency_us must be >= 0")
        for name in (
            "core_message_overhead_bytes",
            "amqp_message_overhead_bytes",
            "queue_reference_overhead_bytes",
            "core_encode_overhead_bytes",
            "core_delivery_overhead_bytes",
        ):
            if getattr(self, name) < 0:
                raise ArtemisConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        addresses = [a.name for a in self.addresses]
        queues = [q for a in self.addresses for q in a.queue_names]
        clients = [p.name for p in self.producers] + [c.name for c in self.consumers]
        for kind, names in (("address", addresses), ("queue", queues), ("client", clients)):
            duplicated = sorted({n for n in names if names.count(n) > 1})
            if duplicated:
                raise ArtemisConfigError(f"duplicated {kind} names: {duplicated}")
        for producer in self.producers:
            if producer.address not in addresses:
                raise ArtemisConfigError(
                    f"producer {producer.name!r} sends to unknown address {producer.address!r}"
                )
        for consumer in self.consumers:
            if consumer.queue not in queues:
                raise ArtemisConfigError(
                    f"consumer {consumer.name!r} reads unknown queue {consumer.queue!r}"
                )


# -- transport ---------------------------------------------------------------------------------
class Pipe:
    """One direction of a client connection: each packet is a call made ``latency_us`` later.

    Packets with the same latency arrive in the order they were sent (the scheduler runs
    callbacks due at one instant in scheduling order), as on a TCP connection.
    """

    __slots__ = ("latency_us", "scheduler")

    def __init__(self, scheduler: Scheduler, latency_us: int) -> None:
        if latency_us < 0:
            raise ValueError(f"latency_us must be >= 0, got {latency_us}")
        self.scheduler = scheduler
        self.latency_us = latency_us

    def send(self, handler: Callable[..., None], *args: Any) -> None:
        self.scheduler.call_later(self.latency_us, handler, *args)


class LinkLog(LinkIdentity):
    """An Artemis link's columns: one session per connection, as the CORE client opens it."""

    __slots__ = ()

    def __init__(
        self, broker: Broker, *, link: str, role: str, protocol: str, connection: str, queue: str
    ) -> None:
        super().__init__(
            broker,
            link=link,
            role=role,
            protocol=protocol,
            session=f"{connection}/session-1",
            connection=connection,
            queue=queue,
        )


# -- server: addresses and queues --------------------------------------------------------------
class _Ref:
    __slots__ = ("paged", "refs", "size")

    def __init__(self, size: int, refs: int, paged: bool) -> None:
        self.size = size
        self.refs = refs
        self.paged = paged


class _Owed:
    __slots__ = ("owed", "producer")

    def __init__(self, producer: ServerCoreProducer, owed: int) -> None:
        self.producer = producer
        self.owed = owed


class ServerAddress:
    """An address on the server: its :class:`AddressState`, its queues and the credits it owes."""

    def __init__(self, server: ArtemisServer, config: AddressConfig) -> None:
        self.server = server
        self.broker = server.broker
        self.config = config
        self.name = config.name
        self.state = AddressState(config.name, config.settings)
        self.queues: list[Queue] = []
        self._refs: dict[int, _Ref] = {}
        # CORE credit requests the address could not cover yet, in arrival order.
        self.pending_core: deque[_Owed] = deque()
        # AMQP links whose credit refresh waits for memory ("checkMemory" runnables).
        self.pending_amqp: dict[str, ServerAmqpProducer] = {}
        self.max_over_bytes = 0  # peak size above max-size-bytes
        # BLOCK as flow control: whether the address blocks now, and how often it has started to.
        self.blocked = False
        self.blocked_count = 0
        # The broker's memory estimate of a message: its body plus this (DESIGN §2).
        self.overhead_core = server.config.core_message_overhead_bytes
        self.overhead_amqp = server.config.amqp_message_overhead_bytes
        # DESIGN §2 counts a message's body plus a per-protocol overhead; a real broker also
        # counts a reference per queue after the first (Artemis 2.40's PagingStore.refUp: 72 B a
        # queue, measured), each released as its own reference is acknowledged (refDown).
        self.reference_overhead = server.config.queue_reference_overhead_bytes

    def memory_size(self) -> int:
        """The address size: the memory estimate of the messages it holds (DESIGN §2)."""
        return self.state.size

    def detail(self, **extra: Any) -> str:
        state = self.state
        info: dict[str, Any] = {
            "address": self.name,
            "address_size": state.size,
            "max_size_bytes": state.settings.max_size_bytes,
            "policy": state.policy,
        }
        if state.settings.max_size_bytes_reject_threshold != UNBOUNDED:
            # In force whether or not it rejects: without it a recommender cannot tell an address
            # with a hard limit that was never reached from one without any.
            info["reject_threshold"] = state.settings.max_size_bytes_reject_threshold
        if state.paging or state.paged_msgs:
            info["paged_msgs"] = state.paged_msgs
        info.update(extra)
        return json.dumps(info, sort_keys=True)

    # -- arrivals ------------------------------------------------------------------------------
    def route(self, message_id: int, size: int, fields: dict[str, Any], *, amqp: bool) -> str:
        """One message from a producer: admit it by policy and enqueue it on every queue.

        ``fields`` are the producer's columns (its capacity and outstanding count at the send
        included); a ``detail`` among them is a dict about the producer, logged as
        ``detail.producer`` next to the address state.
        """
        state = self.state
        producer = fields.get("detail")
        extra_detail: dict[str, Any] = {} if producer is None else {"producer": producer}
        extra_references = max(0, len(self.queues) - 1)
        memory = (
            size
            + (self.overhead_amqp if amqp else self.overhead_core)
            + extra_references * self.reference_overhead
        )
        outcome = state.admit(memory, amqp=amqp)
        if outcome in (Outcome.ACCEPTED, Outcome.PAGED):
            paged = outcome == Outcome.PAGED
            self._refs[message_id] = _Ref(memory, len(self.queues), paged)
            limit = state.settings.max_size_bytes
            if limit != UNBOUNDED and state.size - limit > self.max_over_bytes:
                self.max_over_bytes = state.size - limit
            enqueue_fields = dict(fields)
            enqueue_fields["detail"] = self.detail(paged=paged, **extra_detail)
            link = link_columns(enqueue_fields)
            for queue in self.queues:
                queue.enqueue(Message(message_id, size, None), link)
            return outcome
        if outcome == Outcome.REJECTED:
            extra: dict[str, Any] = {
                "reason": "reject-threshold",
                "error": RESOURCE_LIMIT_EXCEEDED,
                "reject_threshold": state.settings.max_size_bytes_reject_threshold,
            }
        elif outcome == Outcome.DROPPED:
            extra = {"reason": ADDRESS_FULL, "silent": True}
        elif amqp:
            # FAIL: an AMQP message is rejected with the AMQP condition (Artemis: address full
            # -> amqp:resource-limit-exceeded).
            extra = {"reason": ADDRESS_FULL, "error": RESOURCE_LIMIT_EXCEEDED}
        else:
            # FAIL, CORE: a non-durable send has no answer, so the message is discarded without
            # a word; the producer learns it when it next asks for credit (request_credits), as
            # a real Artemis 2.40 shows (AMQ219058 on the send after the refused request).
            extra = {"reason": ADDRESS_FULL, "silent": True}
        rejected = dict(fields)
        rejected.update(
            queue=self.name,
            message_id=message_id,
            size_bytes=size,
            detail=self.detail(outcome=outcome, **extra, **extra_detail),
        )
        self.broker.emit("message_rejected", rejected)
        return outcome

    # -- acknowledgements ----------------------------------------------------------------------
    def on_ack(self, message_id: int) -> None:
        """One queue's acknowledgement of a message: the address size gives back what the
        message's references counted in it. A paged message counted nothing, read back to be
        delivered or not (Artemis 2.40 adds a message's estimate in ``QueueImpl.refUp``, which
        routing to memory calls and reading back from a page does not; its acknowledgement
        releases nothing either): a real 2.40's AddressSize stayed at or under its level when
        it began paging while 275 paged messages were delivered and unacknowledged. It leaves
        the page store at its last acknowledgement."""
        ref = self._refs.get(message_id)
        if ref is None:
            return
        ref.refs -= 1
        if ref.paged:
            if not ref.refs:
                del self._refs[message_id]
                self.state.unpage()
            return
        if ref.refs:
            # refDown: a reference before the last takes its own estimate back with its ack.
            released = self.reference_overhead
            ref.size -= released
        else:
            del self._refs[message_id]
            released = ref.size
        if not released:
            return
        self.state.release(released)
        self.note_fullness()
        self.memory_released()

    def memory_released(self) -> None:
        """``checkReleasedMemory``: once the address is not full, every withheld CORE request is
        granted whole, in arrival order, then the withheld AMQP refreshes."""
        state = self.state
        if self.pending_core and not state.withholds_core_credit:
            waiting, self.pending_core = self.pending_core, deque()
            for entry in waiting:
                entry.producer.grant(entry.owed)
        if self.pending_amqp and state.amqp_credit_allowed:
            waiting_links, self.pending_amqp = self.pending_amqp, {}
            for link in waiting_links.values():
                link.flow()

    # -- CORE producer credits -----------------------------------------------------------------
    def request_credits(self, producer: ServerCoreProducer, requested: int) -> None:
        """Granted whole now, or (BLOCK, full) withheld whole until memory is released, or
        (FAIL, full) refused with the address-full error."""
        state = self.state
        if state.withholds_core_credit:
            self.pending_core.append(_Owed(producer, requested))
            self.check_memory()
        elif state.policy == "FAIL" and state.full:
            producer.refuse_credit()
        else:
            producer.grant(requested)

    # -- BLOCK as flow control -----------------------------------------------------------------
    def note_fullness(self) -> None:
        """After a release: a BLOCK address that held a producer back and is no longer full
        unblocks (``checkReleasedMemory`` logs AMQ221046 only when it had logged a block). An
        arrival only grows the size, so it never unblocks one."""
        if self.blocked and not self.state.full:
            self._log_block(blocked=False)

    def check_memory(self) -> None:
        """Artemis 2.40's ``PagingStoreImpl.checkMemory``: under BLOCK, while the address is full,
        the first check since it last unblocked blocks it (logs AMQ222183). The server checks
        where a producer's credit is decided: at each CORE credit request (the block comes with
        the first request withheld, not when the size reaches the limit) and after AMQP messages
        received. A real Artemis 2.40 logged the block of a 100 KiB address at the AMQP message
        that filled it (the 42nd of 2 KiB, its sender's credit not yet spent) or, under load,
        after the batch of messages it read (the 100th), and under CORE producers at the request
        after the fill (52, 70 and 92 messages with one producer's 16, 64 and 256 KiB windows,
        where the 48th had filled it). Here AMQP is checked after each message: the earliest."""
        if self.state.policy == "BLOCK" and self.state.full and not self.blocked:
            self._log_block(blocked=True)

    def _log_block(self, *, blocked: bool) -> None:
        """``flow_stopped`` / ``flow_resumed`` of the address (DESIGN §2, as the broker logs
        AMQ222183 / AMQ221046), with the address size (the memory estimate) in ``depth_bytes``
        and max-size-bytes as its stop and resume size."""
        state = self.state
        self.blocked = blocked
        if blocked:
            self.blocked_count += 1
        for queue in self.queues:
            if queue.name == self.name:  # the address's own queue: its events carry the state
                queue.show_flow_state(self.blocked, self.blocked_count)
        limit = state.settings.max_size_bytes
        self.broker.emit(
            "flow_stopped" if self.blocked else "flow_resumed",
            {
                "queue": self.name,
                "depth_msgs": len(self._refs),
                "depth_bytes": state.size,
                "flow_stopped": self.blocked,
                "flow_stopped_count": self.blocked_count,
                "flow_stop_count": 0,
                "flow_resume_count": 0,
                "flow_stop_size": limit,
                "flow_resume_size": limit,
                "max_count": 0,
                "max_size": 0,
                "detail": self.detail(kind="address"),
            },
        )


class QueueDispatcher:
    """Hands a queue's messages round-robin to the consumers that have credit (seed 003: "Messages
    are delivered in a round robin fashion to both consumers"), and logs each consumer link's
    state whenever its credit or ``available`` (the queue's ready messages) changes."""

    def __init__(self, server: ArtemisServer, queue: Queue, address: ServerAddress) -> None:
        self.server = server
        self.queue = queue
        self.address = address
        self.consumers: list[ServerConsumer] = []
        self._turn = 0
        self._scheduled = False
        queue.on_message.append(self._on_message)

    def _on_message(self, _queue: Queue) -> None:
        self.schedule()

    def schedule(self) -> None:
        # Next tick of the same instant: never dequeue from inside the queue's own enqueue.
        if not self._scheduled:
            self._scheduled = True
            self.server.scheduler.call_soon(self.dispatch)

    def dispatch(self) -> None:
        self._scheduled = False
        queue, consumers = self.queue, self.consumers
        count = len(consumers)
        while queue.depth_msgs and count:
            chosen: ServerConsumer | None = None
            for offset in range(count):
                index = (self._turn + offset) % count
                if consumers[index].ready:
                    chosen = consumers[index]
                    self._turn = index + 1
                    break
            if chosen is None:
                break
            message = queue.dequeue(link_columns(chosen.consumer_fields))
            if message is None:
                break
            chosen.deliver(message)
        for consumer in consumers:
            consumer.report()


# -- server: client endpoints ------------------------------------------------------------------
class ServerCoreProducer:
    """The server end of a CORE producer: answers credit requests, routes its messages."""

    def __init__(self, address: ServerAddress, client: CoreProducer) -> None:
        self.address = address
        self.client = client
        self.granted = 0

    def on_request(self, requested: int) -> None:
        self.address.request_credits(self, requested)

    def grant(self, credits: int) -> None:
        if credits <= 0:
            return
        self.granted += credits
        self.client.to_client.send(self.client.on_credits, credits)

    def refuse_credit(self) -> None:
        """FAIL, full: "an error to the producer", on its credit request (seed 003)."""
        self.client.to_client.send(self.client.on_credit_refused)

    def on_message(self, message_id: int, size: int, fields: dict[str, Any]) -> None:
        # FAIL and DROP discard a CORE message without an answer (a non-durable send has none).
        self.address.route(message_id, size, fields, amqp=False)


class ServerAmqpProducer:
    """The server end of an AMQP producer link: 100 credits, refreshed at 30 (seed 003)."""

    def __init__(self, address: ServerAddress, client: AmqpProducer) -> None:
        self.address = address
        self.client = client
        settings = address.state.settings
        self.credits = settings.amqp_credits
        self.low = settings.amqp_low_credits
        self.link = ReceiverLink(client.config.name, initial_delivery_count=0)
        self.received = 0
        self.detached: str | None = None
        # Messages received when each refresh was granted (0: at attach).
        self.grants: list[int] = []

    def attach(self) -> None:
        self.flow()

    def flow(self) -> None:
        """``createCreditRunnable``: top the link up to 100 once its credit is at or below 30,
        unless the address is full under BLOCK or FAIL; then wait for memory to be released."""
        credit = self.link.credit
        if self.detached is not None or credit > self.low or credit >= self.credits:
            return
        if not self.address.state.amqp_credit_allowed:
            self.address.pending_amqp[self.client.config.name] = self
            self.address.check_memory()
            return
        flow = self.link.grant(self.credits)
        self.grants.append(self.received)
        self.client.to_client.send(self.client.on_flow, flow, self.received)

    def on_message(self, message_id: int, size: int, fields: dict[str, Any]) -> None:
        if self.detached is not None:
            return
        try:
            self.link.on_transfer()
        except ProtocolError as error:
            self.detached = error.condition
            # A link event carries the link's state (DESIGN §3): the server's end of it.
            link = self.link
            self.address.broker.emit(
                "link_detached",
                dict(
                    self.client.log.fields,
                    credit=link.credit,
                    delivery_count=link.delivery_count,
                    available=link.available,
                    detail=json.dumps({"error": error.condition}),
                ),
            )
            return
        self.received += 1
        outcome = self.address.route(message_id, size, fields, amqp=True)
        if outcome in (Outcome.REJECTED, Outcome.FAILED):
            self.client.to_client.send(self.client.on_rejected, message_id, outcome)
        self.address.check_memory()
        self.flow()


class ServerConsumer:
    """The server end of a CORE consumer: byte credits, logged as the consumer link's state."""

    def __init__(self, dispatcher: QueueDispatcher, client: CoreConsumer) -> None:
        self.dispatcher = dispatcher
        self.client = client
        # Unbounded windows have no credit count (logged as UNBOUNDED_CREDIT); others start at 0
        # until the client sends its window.
        self.credits: int | None = None if client.window.unbounded else 0
        self.delivery_overhead = dispatcher.server.config.core_delivery_overhead_bytes
        self.delivered = 0
        self.log = LinkLog(
            dispatcher.server.broker,
            link=client.config.name,
            role="consumer",
            protocol=ARTEMIS_CORE,
            connection=client.connection,
            queue=dispatcher.queue.name,
        )
        self.consumer_fields = {
            key: self.log.fields[key]
            for key in ("link", "link_role", "protocol", "session", "connection")
        }
        self._reported: tuple[int, int] | None = None

    @property
    def ready(self) -> bool:
        # ServerConsumerImpl: busy once the credits are used up; a message may take them below
        # zero (window 0 asks for one byte to get one whole message).
        return self.credits is None or self.credits > 0

    @property
    def logged_credit(self) -> int:
        """The byte credit floored at 0; an unbounded window (-1) never runs out and logs
        :data:`UNBOUNDED_CREDIT`."""
        return UNBOUNDED_CREDIT if self.credits is None else max(0, self.credits)

    def attach(self) -> None:
        self.dispatcher.consumers.append(self)
        # The delivery overhead with the window: the credit a consumer returns counts in
        # packets, which a reader of the log turns into messages (jobs/transforms/
        # recommend_artemis.py, the processing rate).
        self._log(
            "link_attached",
            {
                "window": self.client.config.window,
                "delivery_overhead_bytes": self.delivery_overhead,
            },
        )
        self.dispatcher.schedule()

    def on_credits(self, credits: int) -> None:
        if self.credits is not None:
            self.credits += credits
        self._log("flow", {"origin": "client", "credits": credits, "credit_unit": "bytes"})
        self.dispatcher.schedule()

    def on_ack(self, message_id: int) -> None:
        self.dispatcher.address.on_ack(message_id)

    def deliver(self, message: Message) -> None:
        # Credits are spent on the delivery packet, not the body (Artemis 2.40, measured: see
        # DEFAULT_CORE_DELIVERY_OVERHEAD); the client buffers and gives back the same size.
        packet = message.size + self.delivery_overhead
        if self.credits is not None:
            self.credits -= packet
        self.delivered += 1
        self._log("transfer", None, message_id=message.message_id, size_bytes=message.size)
        self.client.to_client.send(self.client.on_message, message.message_id, packet)

    def report(self) -> None:
        """Log the link's state if someone else's enqueue or dequeue changed it."""
        if (self.logged_credit, self.dispatcher.queue.depth_msgs) != self._reported:
            self._log("flow", {"origin": "sender", "reason": "available"})

    def _log(self, event_type: str, detail: dict[str, Any] | None, **extra: Any) -> None:
        credit, available = self.logged_credit, self.dispatcher.queue.depth_msgs
        self._reported = (credit, available)
        detail = dict(detail or {}, credit_unit="bytes")
        if self.credits is None:
            detail["unbounded"] = True
        self.log.emit(event_type, credit=credit, available=available, detail=detail, **extra)


# -- clients -----------------------------------------------------------------------------------
class _Client:
    """A client application with its own connection to the server."""

    def __init__(self, server: ArtemisServer, name: str, latency_us: int | None) -> None:
        self.server = server
        self.broker = server.broker
        self.scheduler = server.scheduler
        self.connection = name
        latency = server.config.latency_us if latency_us is None else latency_us
        self.to_server = Pipe(self.scheduler, latency)
        self.to_client = Pipe(self.scheduler, latency)


class _Producer(_Client):
    """What CORE and AMQP producers share: the application, the rate limiter, blocked time."""

    protocol = ARTEMIS_CORE

    def __init__(self, server: ArtemisServer, config: ArtemisProducerConfig) -> None:
        super().__init__(server, config.name, config.latency_us)
        self.config = config
        self.address = server.addresses[config.address]
        self.limiter: RateLimiter | None = rate_limiter(config.max_rate)
        self.remaining = config.count
        self.sent = 0
        self.refused = 0  # FAIL errors and AMQP rejections the client was told about
        self.blocked_us = 0  # time spent with a message in hand and no credit
        self._blocked_since: int | None = None
        # The next message waits for the rate limiter, not for credit (see :meth:`available`).
        self._rate_held = False
        self._step_scheduled = False
        self._free_at_us = 0
        self.log = LinkLog(
            server.broker,
            link=config.name,
            role="publisher",
            protocol=self.protocol,
            connection=self.connection,
            queue=config.address,
        )
        self.enqueue_fields: dict[str, Any] = {
            key: self.log.fields[key]
            for key in ("link", "link_role", "protocol", "session", "connection")
        }

    @property
    def available(self) -> int:
        """Messages awaiting credit (AMQP 1.0's ``available``): none while the next one waits for
        ``producerMaxRate``'s permit, which the client takes before it asks for credit
        (``ClientProducerImpl`` limits, then acquires credits), so that a rate-limited producer
        with too little credit left for its next message is not logged as starved of credit
        while it waits for its own limiter (DESIGN §4's blocked producer has work and may not
        send for want of credit)."""
        if self._rate_held:
            return 0
        if self.remaining is None:
            return 1  # a flat-out application always has its next message in hand
        return self.remaining

    def has_message(self) -> bool:
        return self.remaining is None or self.remaining > 0

    def wake(self) -> None:
        if not self._step_scheduled and self.has_message():
            self._step_scheduled = True
            scheduler = self.scheduler
            scheduler.call_at(max(scheduler.now_us, self._free_at_us), self._step)

    def _step(self) -> None:
        self._step_scheduled = False
        if not self.has_message():
            return
        limiter, now = self.limiter, self.scheduler.now_us
        if limiter is not None and not limiter.allows(now):
            # producerMaxRate: wait until the sliding second has room (not blocked on credit).
            if self._blocked_since is not None and self._has_credit():
                self._unblock()
            self._hold_for_rate(True)
            self._step_scheduled = True
            self.scheduler.call_at(limiter.retry_at_us(), self._step)
            return
        self._hold_for_rate(False)
        if not self._take_credit():
            self._block()
            return
        self._unblock()
        if limiter is not None:
            # The permit is taken at the send, so the sends themselves keep to the rate: a
            # producer stalled on credit holds no permit to spend late.
            limiter.record(now)
        if self.remaining is not None:
            self.remaining -= 1
        self.sent += 1
        self._free_at_us = now + self.config.send_cost_us
        # Whether the next message will wait for the limiter is known at this send (its permit
        # is refused until the sliding second has room), so the transfer's link state says so.
        self._rate_held = (
            limiter is not None and self.has_message() and not limiter.allows(self._free_at_us)
        )
        self._send(self.broker.next_message_id(), self.config.size)
        self.wake()

    def _hold_for_rate(self, held: bool) -> None:
        """Enter or leave the wait for ``producerMaxRate``'s permit. The change of ``available``
        is a link event (``flow`` from the client, as an AMQP sender advertises its available):
        on entering; on leaving only when the producer then waits for credit (with credit in
        hand, the transfer follows at once and carries the state)."""
        if held == self._rate_held:
            return
        self._rate_held = held
        if held:
            self._emit("flow", {"origin": "client", "waiting_for": "producerMaxRate"})
        elif not self._has_credit():
            self._emit("flow", {"origin": "client", "permit": "producerMaxRate"})

    def _block(self) -> None:
        if self._blocked_since is None:
            self._blocked_since = self.scheduler.now_us

    def _unblock(self) -> None:
        if self._blocked_since is not None:
            self.blocked_us += self.scheduler.now_us - self._blocked_since
            self._blocked_since = None

    def blocked_total_us(self) -> int:
        """Blocked time so far, an interval still open included."""
        if self._blocked_since is None:
            return self.blocked_us
        return self.blocked_us + self.scheduler.now_us - self._blocked_since

    def _fields_for_enqueue(self) -> dict[str, Any]:
        return dict(self.enqueue_fields)

    # -- protocol specific ---------------------------------------------------------------------
    def _emit(self, event_type: str, detail: dict[str, Any] | None = None, **extra: Any) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def _take_credit(self) -> bool:
        raise NotImplementedError

    def _has_credit(self) -> bool:
        """Whether :meth:`_take_credit` would succeed now (nothing taken or requested)."""
        raise NotImplementedError

    def _send(self, message_id: int, size: int) -> None:
        raise NotImplementedError


class CoreProducer(_Producer):
    """A CORE producer (Artemis core / JMS client) with ``producerWindowSize`` in bytes."""

    protocol = ARTEMIS_CORE

    def __init__(self, server: ArtemisServer, config: ArtemisProducerConfig) -> None:
        super().__init__(server, config)
        self.credits = None if config.window == UNBOUNDED else ProducerCredits(config.window)
        # Credits are spent on a message's encoded size (seed 003: "given by the size of the
        # message"; Artemis counts its encoding, headers and properties included, never 0).
        self.credit_size = config.size + server.config.core_encode_overhead_bytes
        self.server_end = ServerCoreProducer(self.address, self)
        self._checked = False  # checkCredits ran for the message in hand

    @property
    def credit(self) -> int:
        """The logged credit: the byte balance while it covers the next message, else 0; an
        unbounded window (-1) never runs out and logs :data:`UNBOUNDED_CREDIT` (DESIGN §3: link
        events carry the link's credit), as an unbounded consumer window does.

        A balance too small for the message in hand cannot be used (the producer blocks), so it
        is logged as no credit and the starvation metric sees the producer starved; the exact
        balance is in ``detail.balance``. Messages that cost no credit (an empty body with
        ``core_encode_overhead_bytes`` 0) never wait for any: such a producer logs
        :data:`UNBOUNDED_CREDIT` too, not a balance of 0 read as starved while it sends (an
        audit), as :meth:`window_columns` gives it no capacity.
        """
        credits = self.credits
        if credits is None or self.credit_size == 0:
            return UNBOUNDED_CREDIT
        return credits.balance if credits.balance >= self.credit_size else 0

    def _emit(self, event_type: str, detail: dict[str, Any] | None = None, **extra: Any) -> None:
        info: dict[str, Any] = {"credit_unit": "bytes", "window": self.config.window}
        if self.credits is None:
            info["unbounded"] = True
        else:
            info["balance"] = self.credits.balance
            info["arriving"] = self.credits.arriving
        if detail:
            info.update(detail)
        self.log.emit(
            event_type, credit=self.credit, available=self.available, detail=info, **extra
        )

    def start(self) -> None:
        self._emit("link_attached")
        if self.credits is not None:
            self._request(self.credits.initial_request())
        self.wake()

    def _request(self, requested: int) -> None:
        if requested > 0:
            self.to_server.send(self.server_end.on_request, requested)
            self._emit("flow", {"origin": "client", "requested": requested})

    def _take_credit(self) -> bool:
        credits = self.credits
        if credits is None:
            return True  # window -1: no producer flow control
        size = self.credit_size
        if not self._checked:
            self._checked = True
            self._request(credits.check(size))
        if not credits.can_acquire(size):
            return False
        credits.acquire(size)
        self._checked = False
        return True

    def _has_credit(self) -> bool:
        return self.credits is None or self.credits.can_acquire(self.credit_size)

    def window_columns(self) -> tuple[int | None, int | None, dict[str, Any]]:
        """(capacity, outstanding, detail) of the message just sent, in messages.

        The window is bytes of credit (seed 003: "The amount of credits required to send a
        message is given by the size of the message"); its message count is what the credit the
        producer holds or awaits can ever cover, ``ProducerCredits.capacity_msgs`` (the client
        asks for credit half a window at a time, so it never holds a whole window: 63 messages of
        1 KiB for 64 KiB). Outstanding is the part of that window not covered by credit in hand
        after the send (spent, or asked for and not yet granted): ``capacity - balance // size``,
        within 1..capacity, and capacity exactly when the send left less than one message of
        credit, so that the producer waits for a grant (as a Qpid producer with a full window
        waits for completions). So ``capacity - outstanding`` is what the producer can still send
        without the server. It starts near half the window (the client asks for half at first)
        and stays at 2 or more in a steady flow (the next half is asked at the send that needs
        it). The byte figures (window, balance, arriving) are in ``detail``. A producer with no
        window (-1), or whose messages cost no credit, is never held back by credit: it has no
        capacity, so both columns are null (DESIGN §4: "When any of those producers has no
        capacity (no window), the bound and the ratio are null"). A Qpid producer without a
        window has no capacity either, but logs its outstanding: its uncompleted transfers are
        counted without a window, where a CORE producer's outstanding is a part of its window.
        """
        credits, size = self.credits, self.credit_size
        detail: dict[str, Any] = {"credit_unit": "bytes", "window": self.config.window}
        if credits is None or size == 0:
            return None, None, detail
        capacity = credits.capacity_msgs(size)
        detail.update(balance=credits.balance, arriving=credits.arriving)
        return capacity, capacity - credits.balance // size, detail

    def _send(self, message_id: int, size: int) -> None:
        self._emit("transfer", message_id=message_id, size_bytes=size)
        fields = self._fields_for_enqueue()
        fields["capacity"], fields["outstanding"], fields["detail"] = self.window_columns()
        self.to_server.send(self.server_end.on_message, message_id, size, fields)

    def on_credits(self, credits: int) -> None:
        assert self.credits is not None
        self.credits.receive(credits)
        self._emit("flow", {"origin": "server", "granted": credits})
        self.wake()

    def on_credit_refused(self) -> None:
        """The address-full error reaches the application (ActiveMQAddressFullException): its
        session fails and it sends nothing more, as ``artemis producer`` stops there."""
        self.refused += 1
        self.remaining = 0
        self._unblock()
        self._emit(
            "link_detached",
            {"error": "ActiveMQAddressFullException", "reason": "credit request refused"},
        )


class AmqpProducer(_Producer):
    """An AMQP 1.0 producer on Artemis: link credit in messages, granted by the server."""

    protocol = AMQP_1_0

    def __init__(self, server: ArtemisServer, config: ArtemisProducerConfig) -> None:
        super().__init__(server, config)
        self.link = SenderLink(config.name)
        self.link.available = self.available
        self.server_end = ServerAmqpProducer(self.address, self)

    def _emit(self, event_type: str, detail: dict[str, Any] | None = None, **extra: Any) -> None:
        link = self.link
        link.available = self.available
        self.log.emit(
            event_type,
            credit=link.credit,
            available=link.available,
            delivery_count=link.delivery_count,
            detail=detail,
            **extra,
        )

    def start(self) -> None:
        self._emit("link_attached")
        self.to_server.send(self.server_end.attach)
        self.wake()

    def _take_credit(self) -> bool:
        if not self.link.credit:
            return False
        self.link.send_transfer()
        return True

    def _has_credit(self) -> bool:
        return self.link.credit > 0

    def _send(self, message_id: int, size: int) -> None:
        self._emit("transfer", message_id=message_id, size_bytes=size)
        fields = self._fields_for_enqueue()
        # The window is the credit of one grant (seed 003: "Artemis will issue 100 credits to a
        # client at a time"). A grant *sets* the link credit counted from the last transfer the
        # server received, so the sender never holds more than 100; outstanding is the part of
        # the window spent and not yet given back by a grant: 100 - the credit left after this
        # transfer, 1..100, 100 exactly when this transfer took the last credit.
        capacity = self.address.state.settings.amqp_credits
        credit = self.link.credit
        fields["capacity"] = capacity
        fields["outstanding"] = capacity - credit
        fields["detail"] = {"credit_unit": "messages", "credit": credit}
        self.to_server.send(self.server_end.on_message, message_id, size, fields)

    def on_flow(self, flow: LinkFlow, received: int) -> None:
        self.link.on_flow(flow)
        self._emit(
            "flow",
            {"origin": "receiver", "link_credit": flow.link_credit, "server_received": received},
        )
        self.wake()

    def on_rejected(self, _message_id: int, _outcome: str) -> None:
        self.refused += 1


class CoreConsumer(_Client):
    """A CORE consumer: a client buffer bounded by ``consumerWindowSize`` and an application
    that takes one message at a time, at most ``consumerMaxRate`` per second."""

    def __init__(
        self, server: ArtemisServer, config: ArtemisConsumerConfig, dispatcher: QueueDispatcher
    ) -> None:
        super().__init__(server, config.name, config.latency_us)
        self.config = config
        self.window = ConsumerWindow(config.window)
        self.limiter = rate_limiter(config.max_rate)
        self.server_end = ServerConsumer(dispatcher, self)
        self.buffer: deque[tuple[int, int]] = deque()
        self.buffered_bytes = 0
        self.peak_buffered_bytes = 0
        self.peak_buffered_msgs = 0
        self.received = 0
        self.processed = 0
        self.processed_at_us: list[int] = []
        self._busy = False
        self._asked = False  # window 0: a one-byte request is on its way or being served
        self._step_scheduled = False

    def start(self) -> None:
        self.to_server.send(self.server_end.attach)
        credits = self.window.initial_credits()
        if credits:
            self.to_server.send(self.server_end.on_credits, credits)
        if self.window.slow_consumer:
            self._ask()

    def _ask(self) -> None:
        """Window 0: ask for exactly one message when ready to process it."""
        if not self._asked:
            self._asked = True
            self.to_server.send(self.server_end.on_credits, 1)

    def on_message(self, message_id: int, packet_bytes: int) -> None:
        """A message delivered into the buffer; ``packet_bytes``: its delivery's size, which
        the window counts (the body + the delivery overhead)."""
        self._asked = False
        self.received += 1
        self.buffer.append((message_id, packet_bytes))
        self.buffered_bytes += packet_bytes
        self.peak_buffered_bytes = max(self.peak_buffered_bytes, self.buffered_bytes)
        self.peak_buffered_msgs = max(self.peak_buffered_msgs, len(self.buffer))
        self._wake()

    def _wake(self) -> None:
        if not self._step_scheduled and not self._busy and self.buffer:
            self._step_scheduled = True
            self.scheduler.call_soon(self._step)

    def _step(self) -> None:
        self._step_scheduled = False
        if self._busy or not self.buffer:
            return
        limiter = self.limiter
        if limiter is not None and not limiter.try_acquire(self.scheduler.now_us):
            # consumerMaxRate limits consumption, not buffering: the buffer keeps filling.
            self._step_scheduled = True
            self.scheduler.call_at(limiter.retry_at_us(), self._step)
            return
        message_id, size = self.buffer.popleft()
        self.buffered_bytes -= size
        credits = self.window.on_take(size)
        if credits:
            self.to_server.send(self.server_end.on_credits, credits)
        self._busy = True
        self.scheduler.call_later(self.config.process_us, self._done, message_id)

    def _done(self, message_id: int) -> None:
        self._busy = False
        self.processed += 1
        self.processed_at_us.append(self.scheduler.now_us)
        self.to_server.send(self.server_end.on_ack, message_id)
        if self.window.slow_consumer and not self.buffer:
            self._ask()
        self._wake()


Producer = CoreProducer | AmqpProducer


class ArtemisServer:
    """An Artemis broker front end on the engine: addresses, queues, clients."""

    def __init__(self, broker: Broker, config: ArtemisConfig) -> None:
        self.broker = broker
        self.scheduler = broker.scheduler
        self.config = config
        self.addresses: dict[str, ServerAddress] = {}
        self.dispatchers: dict[str, QueueDispatcher] = {}
        for address_config in config.addresses:
            address = ServerAddress(self, address_config)
            self.addresses[address.name] = address
            for queue_name in address_config.queue_names:
                # An Artemis queue: no Qpid limits or thresholds, the address limits it.
                queue = broker.declare_queue(queue_name, {"qpid.max_count": 0, "qpid.max_size": 0})
                address.queues.append(queue)
                if queue_name == address.name and address.state.policy == "BLOCK":
                    queue.log_depth_bytes_as(address.memory_size)
                self.dispatchers[queue_name] = QueueDispatcher(self, queue, address)
        self.producers: dict[str, Producer] = {}
        for producer_config in config.producers:
            producer: Producer
            if producer_config.protocol == AMQP:
                producer = AmqpProducer(self, producer_config)
            else:
                producer = CoreProducer(self, producer_config)
            self.producers[producer_config.name] = producer
        self.consumers: dict[str, CoreConsumer] = {
            c.name: CoreConsumer(self, c, self.dispatchers[c.queue]) for c in config.consumers
        }

    def start(self) -> None:
        """Prefill the addresses, then start every client at its own start time."""
        for address in self.addresses.values():
            config = address.config
            # Written before the run: enqueues of the reserved producer "prefill", capacity
            # and outstanding 0 (events.PREFILL_LINK). Artemis queues have no flow thresholds,
            # so no episode can hold them.
            prefill = dict(PREFILL_FIELDS, detail=PREFILL_DETAIL)
            for _ in range(config.prefill_count):
                address.route(
                    self.broker.next_message_id(), config.prefill_size, prefill, amqp=False
                )
        now = self.scheduler.now_us
        for producer in self.producers.values():
            self.scheduler.call_at(now + producer.config.start_us, producer.start)
        for consumer in self.consumers.values():
            self.scheduler.call_at(now + consumer.config.start_us, consumer.start)

    def producers_on(self, address: str) -> list[Producer]:
        return [p for p in self.producers.values() if p.config.address == address]

    def overshoot_bound_bytes(self, address: str) -> int:
        """How far CORE producers can take a BLOCK address above max-size-bytes.

        Seed 003: "approximately: total number of producers on address * producer window size".
        Exactly: a producer asks for credit only when what it holds and awaits is below
        ``max(size, window / 2)``, so it never holds or awaits credit for more than its window's
        message count (:meth:`ProducerCredits.capacity_msgs`); add the messages still on the wire
        when the address fills (none when the latency is below the send cost, else at most
        ``latency // send_cost``). Requests are granted whole until the address is full and
        nothing after (DESIGN §2), so every producer can spend all of that once it is full, each
        message counting its memory estimate (body plus the CORE overhead, plus a reference per
        queue of the address after the first).
        """
        settings = self.config
        extra_references = max(0, len(self.addresses[address].queues) - 1)
        memory_overhead = (
            settings.core_message_overhead_bytes
            + extra_references * settings.queue_reference_overhead_bytes
        )
        return sum(
            core_producer_bound_bytes(
                p.config,
                p.to_server.latency_us,
                memory_overhead=memory_overhead,
                encode_overhead=settings.core_encode_overhead_bytes,
            )
            for p in self.producers_on(address)
            if isinstance(p, CoreProducer) and p.config.window != UNBOUNDED
        )


def core_producer_bound_bytes(
    config: ArtemisProducerConfig, latency_us: int, *, memory_overhead: int, encode_overhead: int
) -> int:
    """One CORE producer's share of :meth:`ArtemisServer.overshoot_bound_bytes`: the messages
    its credit can cover (spent on encoded sizes) plus those on the wire, at their memory
    estimate. A producer whose messages encode to 0 bytes is not bounded (0 is returned)."""
    encoded = config.size + encode_overhead
    if not encoded:
        return 0  # messages that take no credit: nothing bounds them
    in_flight = latency_us // config.send_cost_us if latency_us >= config.send_cost_us else 0
    on_credit = ProducerCredits(config.window).capacity_msgs(encoded)
    return (on_credit + in_flight) * (config.size + memory_overhead)

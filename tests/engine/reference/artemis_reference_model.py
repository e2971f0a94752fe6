"""A plain discrete-event reference model of ActiveMQ Artemis flow control (seed 003).

Written from DESIGN.md §2 (its "Decided readings", Artemis bullet), seed 003 and README.md
("Where DESIGN.md leaves room"; where README predates DESIGN §2's decided readings, DESIGN wins)
only, without reading the engine's Artemis modules for its rules (the same-instant ordering of
A1b and the paging start of A7, which the documents leave open, follow the engine; the encoded
size CORE credits are spent on follows the measurement on Artemis 2.40 stated below). One
address with one or more queues (at most one consumer each), CORE and AMQP producers and CORE
consumers, on a virtual clock in microseconds with a one-way latency on every connection.

Documented rules modelled (quotes from seed 003 unless DESIGN §2 or README is named):
- Address size: a message counts once for all the address's queues, from its arrival until its
  last ack ("the total memory for all queues bound to that address will not exceed
  max-size-bytes"), at "the broker's memory estimate of a message: its body plus a per-protocol
  overhead (a setting)" (DESIGN §2): ``core_overhead`` for a CORE message, ``amqp_overhead`` for
  an AMQP one, plus ``reference_overhead`` per queue after the first (a setting: Artemis 2.40
  counts a reference per extra queue, 72 B measured), each given back as its own queue acks the
  message, the rest at the last ack. Full: "while its size >= max-size-bytes" (DESIGN §2); -1:
  no limit; default 10 MiB.
- BLOCK, CORE: "a CORE credit request is granted whole while the address is not full and
  withheld while it is full; withheld requests are granted in arrival order once it is not full
  again" (DESIGN §2): every withheld request, whole, in the order the server received them. So
  the overshoot is about producers x window ("total number of producers on address * producer
  window size").
- BLOCK, AMQP: "issue 100 credits to a client at a time and refresh them when the clients
  credits reaches 30" (at or below the low mark); "The broker will stop issuing credits once an
  address is full" (README: also under FAIL).
- BLOCK as flow control (DESIGN §2: "An address that blocks or unblocks writes `flow_stopped` /
  `flow_resumed` for the address, as the real broker logs AMQ222183 / AMQ221046"): ``stops``
  counts the address blocking, at the first memory check that finds it full (Artemis 2.40's
  ``checkMemory`` logs AMQ222183 there): a CORE credit request withheld, an AMQP message
  received (a real broker logged it at the AMQP message that filled the address, and under CORE
  producers at a request after the fill); ``resumes`` it becoming not full again after that,
  under BLOCK only.
- FAIL refuses: an AMQP producer is told of each message (rejected); a CORE message, sent
  without an answer (non-durable), is discarded silently, and the CORE producer is told when its
  next credit request reaches a full FAIL address (a real Artemis 2.40: AMQ219058 on the send
  after the refused request), after which it sends nothing more. DROP discards silently, PAGE
  accepts to storage without adding to the memory size.
- max-size-bytes-reject-threshold: an AMQP message is rejected "when the address size is >
  max-size-bytes-reject-threshold (strict)" (DESIGN §2).
- CORE producer window: credit requested half a window at a time, as Artemis's client does
  (README): before each message, needed = max(encoded, window // 2); if balance + arriving <
  needed, request needed - arriving; the message goes out once the balance covers ``encoded``,
  which it then takes. Credits are spent on the message's encoded size, ``encoded = size +
  encode_overhead`` ("The amount of credits required to send a message is given by the size of
  the message": the size Artemis encodes, headers and properties included, measured on Artemis
  2.40 as the body + 333 B + 4 B per character of the address name; ``encode_overhead`` is a
  setting, as the memory overheads are), not its body. The address still counts the memory
  estimate (body + ``core_overhead``), consumers a delivery's size (below).
- Consumer window in bytes: -1 unbounded, 0 no buffer (the client asks for one message when it
  wants one), N: the server sends while its byte credit is > 0 (README), so a buffer holds at most
  window + delivery size - 1 bytes; the client returns credit as it takes messages, in batches
  of half the window (Artemis's client window). Buffers and consumer credits count deliveries
  (body + ``delivery_overhead``, below).
- producerMaxRate / consumerMaxRate: at most ``rate`` sends / takes in any sliding second from
  t = 0 (README).

Assumptions where the documents are silent (A1, A2, ...):
- A1 (timing): every client connection has a one-way latency L; frames on one connection
  arrive in the order sent. Events at the same instant run in the order they were scheduled.
- A1b (steps within an instant; the documents leave this open, so the model follows the
  engine's evident ordering, flowctl_core/protocols/artemis.py: `_Producer.wake`,
  `QueueDispatcher.schedule`, `CoreConsumer._wake`): a producer's application, a queue's
  dispatch and a consumer's application each act in a step of their own, scheduled when they
  are woken and so run after everything already due in that instant. A producer is woken at its
  start, after each send (for send_cost_us later) and by every grant that lands, whether or not
  it covers the message (so of two producers whose grants land in one instant, the one woken
  first sends first, even if its credit sufficed only with a later grant of that instant); a
  queue by an enqueue, an attach or returned credit; a consumer by a delivery and when it has
  processed a message (so a delivery landing in the instant processing ends is buffered before
  the next take, and counts in the peak buffer).
- A2 (producer pacing): a producer attempts its first message at start_us and its next one
  send_cost_us after a send; a message waiting for credit (or a rate permit) goes out in the
  step its grant (or the permit's instant) wakes. The rate permit is waited for first, then the
  credit check (and request) happens once per message, before waiting for credit (Artemis's
  ClientProducerImpl: rateLimiter.limit(), then checkCredits before acquire).
- A3 (CORE producer start): the producer asks for window // 2 at start (window >= 0); a -1
  window asks for nothing and never waits for credit; a message whose encoded size is 0 (a
  0-byte body with ``encode_overhead`` 0) takes no credit, while a 0-byte body with an encode
  overhead takes that overhead, like any other message.
- A4 (withheld grants): a request BLOCK withholds is granted, whole, when an ack leaves the
  address not full (every withheld request then, in the order withheld; each exactly once).
  Withheld CORE credit is served before withheld AMQP top-ups (as the engine's
  `ServerAddress.memory_released`).
- A5 (AMQP): the server grants the link ``amqp_credits`` when it sees the attach (start + L),
  unless a BLOCK/FAIL address with a limit is full; after each message it receives, if the
  credit it believes is left is <= the low mark it tops the link up to ``amqp_credits`` (again
  not while full); a withheld grant or top-up is issued when an ack leaves the address not
  full, in the order the grants were withheld (after withheld CORE credit, A4).
  A message refused or rejected has still used its credit.
- A6 (outcome order): on arrival, a FAIL address that is full fails the message; else an AMQP
  message on an address above the reject threshold is rejected; else a full DROP address
  drops it; else a PAGE address that is paging (A7) pages it; else it is accepted.
  The generator uses the reject threshold under BLOCK and FAIL only (where the order between
  the threshold and DROP / PAGE would matter, the documents do not say).
- A7 (paging): a PAGE address starts paging when an accepted message makes it full and keeps
  paging while its page store is non-empty. The documents do not say when paging starts; this
  is how Artemis does it (its size metric's "over" callback, run after the size is added, starts
  paging) and the engine's documented reading (``AddressState``), adopted when the generator found
  the one case it differs from "pages while full": an address full while empty (max-size-bytes
  0), whose first message is accepted. The model covers PAGE without
  consumers only (when paged messages are read back into memory is not documented).
- A8 (consumers): a consumer client starts at start_us; its attach, with its whole window as
  credit (window 0: one byte, the ask for one message), reaches the server L later. A delivered
  message reaches the client L later and goes to its buffer; the client takes one message at a
  time when idle (and the rate allows), in a step of its own (A1b: after every delivery already
  due in that instant, so a batch that lands together is in the buffer at once), which is when
  its credit is returned: window 0 returns size - 1 (cancelling the overdraft) and asks for its
  next message with 1 byte when done; window N accumulates and returns once it has taken
  >= N // 2 bytes. Processing takes process_us; the ack leaves when done and releases the
  message's memory L later, once every queue acked it.
- A9a (refusals): a producer counts a refusal when the error reaches it, L after the arrival.
- A9 (buffer): the consumer's buffer holds messages received and not yet taken.
- Consumer credit: "The total maximum size of messages (in bytes) that will be buffered on each
  consumer is determined by the consumerWindowSize parameter", the size being a delivery's: its
  body + ``delivery_overhead`` (a setting; Artemis 2.40 spends a consumer's credit on the
  delivery packet, measured: a 64 KiB window took 48 messages of 1,024 B, not 64).
- A10 (prefill): messages in the address before the run count the CORE overhead (they are
  written by the server, not by an AMQP client).
- A11 (block / unblock instants): the address blocks at the first memory check that finds it
  full since it last unblocked (a CORE request withheld, an AMQP top-up withheld, an AMQP
  arrival), and unblocks at the first release that leaves it not full while blocking; one ack
  resumes it at most once.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

# The overheads' defaults are settings (DESIGN §2: "a setting; measured on a real broker"), not
# rules: the model takes the engine's configured defaults as its own defaults, never its logic.
from flowctl_core.protocols.artemis_flow import (
    DEFAULT_AMQP_MESSAGE_OVERHEAD,
    DEFAULT_CORE_DELIVERY_OVERHEAD,
    DEFAULT_CORE_ENCODE_OVERHEAD,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    DEFAULT_QUEUE_REFERENCE_OVERHEAD,
)

UNBOUNDED = -1
SECOND = 1_000_000
DEFAULT_MAX_SIZE_BYTES = 10 * 1024 * 1024
DEFAULT_PRODUCER_WINDOW = 64 * 1024
DEFAULT_CONSUMER_WINDOW = 1024 * 1024
AMQP_CREDITS = 100
AMQP_LOW_CREDITS = 30


@dataclass(frozen=True)
class MAddress:
    max_size: int = DEFAULT_MAX_SIZE_BYTES
    policy: str = "BLOCK"
    threshold: int = UNBOUNDED
    queues: tuple[str, ...] = ("q",)
    amqp_credits: int = AMQP_CREDITS
    amqp_low: int = AMQP_LOW_CREDITS


@dataclass(frozen=True)
class MProducer:
    name: str
    protocol: str = "core"
    window: int = DEFAULT_PRODUCER_WINDOW
    size: int = 1024
    count: int | None = None
    send_cost_us: int = 10
    max_rate: int = UNBOUNDED
    start_us: int = 0


@dataclass(frozen=True)
class MConsumer:
    name: str
    queue: str
    window: int = DEFAULT_CONSUMER_WINDOW
    process_us: int = 100
    max_rate: int = UNBOUNDED
    start_us: int = 0


class SlidingRate:
    """At most ``rate`` permits in any half-open second [t, t + 1 s)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.times: deque[int] = deque()

    def next_allowed(self, now: int) -> int:
        while self.times and self.times[0] + SECOND <= now:
            self.times.popleft()
        if len(self.times) < self.rate:
            return now
        return self.times[-self.rate] + SECOND

    def take(self, now: int) -> None:
        self.times.append(now)


@dataclass
class _Prod:
    cfg: MProducer
    sent: int = 0
    refused: int = 0
    balance: int = 0
    arriving: int = 0
    credit: int = 0  # AMQP: messages
    waiting: bool = False  # the message in hand waits for credit (a grant wakes it)
    checked: bool = False  # the message in hand's credit check is done
    step_scheduled: bool = False  # a step is due (A1b)
    free_at: int = 0  # the application's next message is ready then (send_cost_us)
    failed_app: bool = False  # told the FAIL address is full: it sends nothing more
    blocked_ever: bool = False
    rate: SlidingRate | None = None
    send_times: list[int] = field(default_factory=list)
    # server side (AMQP)
    received: int = 0
    granted_upto: int = 0
    wants_grant: bool = False
    grants: list[int] = field(default_factory=list)


@dataclass
class _Cons:
    cfg: MConsumer
    credits: int = 0  # server side
    buffer: deque[tuple[int, int]] = field(default_factory=deque)
    buffered_bytes: int = 0
    peak_buffered_bytes: int = 0
    busy: bool = False
    taken_bytes: int = 0
    received: int = 0
    processed: int = 0
    processed_at: list[int] = field(default_factory=list)
    rate: SlidingRate | None = None
    step_scheduled: bool = False  # a take is due (A1b)
    attached: bool = False


class Model:
    def __init__(
        self,
        address: MAddress,
        producers: tuple[MProducer, ...] = (),
        consumers: tuple[MConsumer, ...] = (),
        latency_us: int = 100,
        prefill: tuple[int, int] = (0, 0),
        *,
        core_overhead: int = DEFAULT_CORE_MESSAGE_OVERHEAD,
        amqp_overhead: int = DEFAULT_AMQP_MESSAGE_OVERHEAD,
        encode_overhead: int = DEFAULT_CORE_ENCODE_OVERHEAD,
        delivery_overhead: int = DEFAULT_CORE_DELIVERY_OVERHEAD,
        reference_overhead: int = DEFAULT_QUEUE_REFERENCE_OVERHEAD,
    ) -> None:
        self.a = address
        self.lat = latency_us
        self.core_overhead = core_overhead
        self.amqp_overhead = amqp_overhead
        self.encode_overhead = encode_overhead
        self.delivery_overhead = delivery_overhead
        self.reference_overhead = reference_overhead
        self.now = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.size = 0
        self.peak = 0
        self.accepted = self.failed = self.dropped = self.paged = self.rejected = 0
        self.paged_store = 0
        self.paging = False  # A7
        # BLOCK as flow control (DESIGN §2): whether the address is blocking now, and how often
        # it started and stopped blocking.
        self.blocking = False
        self.stops = self.resumes = 0
        self.queues: dict[str, deque[tuple[int, int]]] = {q: deque() for q in address.queues}
        self._dispatch_due: set[str] = set()  # queues with a dispatch step scheduled (A1b)
        self.refs: dict[int, list[int]] = {}  # id -> [size, refs]
        self.next_id = 0
        self.waiters: list[list] = []  # [producer, requested bytes] (CORE) in withholding order
        self.amqp_waiters: list[_Prod] = []  # AMQP links whose top-up is withheld, in order
        self.producers = {p.name: _Prod(p) for p in producers}
        self.consumers = {c.name: _Cons(c) for c in consumers}
        for p in self.producers.values():
            if p.cfg.max_rate != UNBOUNDED:
                p.rate = SlidingRate(p.cfg.max_rate)
        for c in self.consumers.values():
            if c.cfg.max_rate != UNBOUNDED:
                c.rate = SlidingRate(c.cfg.max_rate)
        count, psize = prefill
        for _ in range(count):
            self._arrive(None, psize)
        for p in self.producers.values():
            self._at(p.cfg.start_us, lambda p=p: self._producer_start(p))
        for c in self.consumers.values():
            self._at(c.cfg.start_us, lambda c=c: self._consumer_start(c))

    # -- clock ---------------------------------------------------------------------------------
    def _at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def run_until(self, t: int) -> Model:
        while self._heap and self._heap[0][0] <= t:
            when, _, fn = heapq.heappop(self._heap)
            self.now = when
            fn()
        self.now = t
        return self

    # -- address -------------------------------------------------------------------------------
    @property
    def full(self) -> bool:
        # DESIGN §2: "an address is full while its size >= max-size-bytes".
        return self.a.max_size != UNBOUNDED and self.size >= self.a.max_size

    def _withholds_core(self) -> bool:
        # DESIGN §2: under BLOCK a request is "withheld while it is full", granted whole otherwise.
        return self.a.policy == "BLOCK" and self.full

    def _note_fullness(self) -> None:
        # A11: a blocking address unblocks at the first release that leaves it not full.
        if self.blocking and not self.full:
            self.blocking = False
            self.resumes += 1

    def _check_memory(self) -> None:
        # A11: the first memory check that finds a BLOCK address full blocks it.
        if self.a.policy == "BLOCK" and self.full and not self.blocking:
            self.blocking = True
            self.stops += 1

    def _amqp_credit_allowed(self) -> bool:
        return not (self.a.policy in ("BLOCK", "FAIL") and self.full)

    def _arrive(self, p: _Prod | None, size: int) -> str:
        amqp = p is not None and p.cfg.protocol == "amqp"
        # DESIGN §2: the body plus the protocol's overhead (A10: prefill counts as CORE).
        memory = size + (self.amqp_overhead if amqp else self.core_overhead)
        memory += (len(self.a.queues) - 1) * self.reference_overhead
        a = self.a
        if a.policy == "FAIL" and self.full:
            self.failed += 1
            outcome = "failed"
        elif amqp and a.threshold != UNBOUNDED and self.size > a.threshold:
            self.rejected += 1
            outcome = "rejected"
        elif a.policy == "DROP" and self.full:
            self.dropped += 1
            outcome = "dropped"
        elif a.policy == "PAGE" and self.paging:
            self.paged += 1
            self.paged_store += 1
            outcome = "paged"
            self._route(size, 0)
        else:
            self.accepted += 1
            self.size += memory
            self.peak = max(self.peak, self.size)
            outcome = "accepted"
            self._route(size, memory)
            if a.policy == "PAGE" and self.full:
                self.paging = True  # A7
        if p is not None and (outcome == "rejected" or (outcome == "failed" and amqp)):
            self._at(self.now + self.lat, lambda: self._refused(p))
        return outcome

    @staticmethod
    def _refused(p: _Prod) -> None:
        p.refused += 1

    def _route(self, size: int, memory: int) -> None:
        # ``size`` (the body) travels to consumers; ``memory`` (0: paged) is what the address
        # releases at the last ack.
        self.next_id += 1
        mid = self.next_id
        self.refs[mid] = [memory, len(self.a.queues)]
        for q in self.a.queues:
            self.queues[q].append((mid, size))
            self._schedule_dispatch(q)

    def _release(self, mid: int) -> None:
        ref = self.refs[mid]
        ref[1] -= 1
        if ref[1]:
            # An earlier queue's ack gives back its own reference (none for a paged message,
            # which the address never counted).
            released = self.reference_overhead if ref[0] else 0
            ref[0] -= released
        else:
            del self.refs[mid]
            released = ref[0]
        if released:
            self.size -= released
            self._note_fullness()
            self._memory_released()

    def _memory_released(self) -> None:
        # A4/A5: once the address is not full, every withheld CORE request whole, in the order
        # withheld, then the withheld AMQP top-ups in the order withheld.
        if self.waiters and not self._withholds_core():
            waiting, self.waiters = self.waiters, []
            for p, requested in waiting:
                self._grant_core(p, requested)
        if self.amqp_waiters and self._amqp_credit_allowed():
            waiting, self.amqp_waiters = self.amqp_waiters, []
            for p in waiting:
                p.wants_grant = False
                self._grant_amqp(p)

    # -- producers (A2) ------------------------------------------------------------------------
    def _producer_start(self, p: _Prod) -> None:
        if p.cfg.protocol == "amqp":
            self._at(self.now + self.lat, lambda: self._amqp_attach(p))
        elif p.cfg.window != UNBOUNDED:
            half = p.cfg.window // 2
            if half > 0:
                p.arriving += half
                self._send_request(p, half)
        self._wake_producer(p)

    def _wake_producer(self, p: _Prod) -> None:
        # A1b: the application acts in a step of its own, at the instant its next message is
        # ready (or now, if later), after whatever is already due then.
        if p.step_scheduled or self._done(p):
            return
        p.step_scheduled = True
        self._at(max(self.now, p.free_at), lambda: self._producer_step(p))

    def _send_request(self, p: _Prod, amount: int) -> None:
        self._at(self.now + self.lat, lambda: self._on_request(p, amount))

    def _on_request(self, p: _Prod, amount: int) -> None:
        if self._withholds_core():
            self.waiters.append([p, amount])
            self._check_memory()
        elif self.a.policy == "FAIL" and self.full:
            self._at(self.now + self.lat, lambda: self._told_full(p))
        else:
            self._grant_core(p, amount)

    @staticmethod
    def _told_full(p: _Prod) -> None:
        """The CORE producer's application gets the address-full error and stops sending."""
        p.refused += 1
        p.failed_app = True

    def _grant_core(self, p: _Prod, g: int) -> None:
        def land() -> None:
            p.balance += g
            p.arriving -= g
            self._wake_producer(p)

        self._at(self.now + self.lat, land)

    def _done(self, p: _Prod) -> bool:
        return p.failed_app or (p.cfg.count is not None and p.sent >= p.cfg.count)

    def encoded(self, p: _Prod) -> int:
        """What a CORE message of ``p`` costs in producer credit: its encoded size."""
        return p.cfg.size + self.encode_overhead

    def _check_credits(self, p: _Prod) -> None:
        # Once per message, when the rate allows it (A2): make balance + arriving cover
        # max(encoded, window // 2).
        cfg = p.cfg
        if cfg.protocol == "core" and cfg.window != UNBOUNDED and not p.checked:
            p.checked = True
            needed = max(self.encoded(p), cfg.window // 2)
            if p.balance + p.arriving < needed:
                req = needed - p.arriving
                p.arriving += req
                self._send_request(p, req)

    def _has_credit(self, p: _Prod) -> bool:
        cfg = p.cfg
        if cfg.protocol == "amqp":
            return p.credit > 0
        if cfg.window == UNBOUNDED or self.encoded(p) == 0:
            return True
        return p.balance >= self.encoded(p)

    def _producer_step(self, p: _Prod) -> None:
        p.step_scheduled = False
        if self._done(p):
            return
        if p.rate is not None:
            t = p.rate.next_allowed(self.now)
            if t > self.now:
                p.step_scheduled = True
                self._at(t, lambda: self._producer_step(p))
                return
        self._check_credits(p)
        if not self._has_credit(p):
            p.waiting = p.blocked_ever = True
            return
        if p.rate is not None:
            p.rate.take(self.now)
        p.waiting = p.checked = False
        cfg = p.cfg
        if cfg.protocol == "amqp":
            p.credit -= 1
        elif cfg.window != UNBOUNDED:
            p.balance -= self.encoded(p)
        p.sent += 1
        p.send_times.append(self.now)
        self._at(self.now + self.lat, lambda: self._server_message(p))
        p.free_at = self.now + cfg.send_cost_us
        self._wake_producer(p)

    def _server_message(self, p: _Prod) -> None:
        self._arrive(p, p.cfg.size)
        if p.cfg.protocol == "amqp":
            p.received += 1
            self._check_memory()
            if p.granted_upto - p.received <= self.a.amqp_low and not p.wants_grant:
                if self._amqp_credit_allowed():
                    self._grant_amqp(p)
                else:
                    self._withhold_amqp(p)

    def _withhold_amqp(self, p: _Prod) -> None:
        p.wants_grant = True
        self.amqp_waiters.append(p)
        self._check_memory()

    # -- AMQP producers ------------------------------------------------------------------------
    def _amqp_attach(self, p: _Prod) -> None:
        if self._amqp_credit_allowed():
            self._grant_amqp(p)
        else:
            self._withhold_amqp(p)

    def _grant_amqp(self, p: _Prod) -> None:
        p.grants.append(p.received)
        upto = p.received + self.a.amqp_credits
        p.granted_upto = upto

        def land() -> None:
            p.credit = upto - p.sent
            self._wake_producer(p)

        self._at(self.now + self.lat, land)

    # -- consumers -----------------------------------------------------------------------------
    def _consumer_start(self, c: _Cons) -> None:
        self._at(self.now + self.lat, lambda: self._consumer_attach(c))

    def _consumer_attach(self, c: _Cons) -> None:
        c.attached = True
        w = c.cfg.window
        c.credits = 1 if w == 0 else w
        self._schedule_dispatch(c.cfg.queue)

    def _ready(self, c: _Cons) -> bool:
        return c.attached and (c.cfg.window == UNBOUNDED or c.credits > 0)

    def _schedule_dispatch(self, q: str) -> None:
        # A1b: a queue hands out messages in a step of its own, after what is already due.
        if q not in self._dispatch_due:
            self._dispatch_due.add(q)
            self._at(self.now, lambda: self._dispatch(q))

    def _dispatch(self, q: str) -> None:
        self._dispatch_due.discard(q)
        consumers = [c for c in self.consumers.values() if c.cfg.queue == q]
        if not consumers:
            return
        c = consumers[0]
        queue = self.queues[q]
        while queue and self._ready(c):
            mid, size = queue.popleft()
            packet = size + self.delivery_overhead  # what the consumer's credit counts
            if c.cfg.window != UNBOUNDED:
                c.credits -= packet
            self._at(
                self.now + self.lat,
                lambda c=c, mid=mid, packet=packet: self._deliver(c, mid, packet),
            )

    def _deliver(self, c: _Cons, mid: int, size: int) -> None:
        c.received += 1
        c.buffer.append((mid, size))
        c.buffered_bytes += size
        c.peak_buffered_bytes = max(c.peak_buffered_bytes, c.buffered_bytes)
        self._wake_consumer(c)

    def _wake_consumer(self, c: _Cons) -> None:
        # A1b: the client takes in a step of its own, after what is already due now (so a batch
        # of deliveries landing in one instant is in the buffer at once).
        if not c.step_scheduled and not c.busy and c.buffer:
            c.step_scheduled = True
            self._at(self.now, lambda: self._take(c))

    def _take(self, c: _Cons) -> None:
        c.step_scheduled = False
        if c.busy or not c.buffer:
            return
        if c.rate is not None:
            t = c.rate.next_allowed(self.now)
            if t > self.now:
                c.step_scheduled = True
                self._at(t, lambda: self._take(c))
                return
            c.rate.take(self.now)
        mid, size = c.buffer.popleft()
        c.buffered_bytes -= size
        c.busy = True
        w = c.cfg.window
        if w == 0:
            if size - 1:
                self._return_credit(c, size - 1)
        elif w > 0:
            c.taken_bytes += size
            if c.taken_bytes >= w // 2:
                amount, c.taken_bytes = c.taken_bytes, 0
                self._return_credit(c, amount)
        self._at(self.now + c.cfg.process_us, lambda: self._processed(c, mid))

    def _return_credit(self, c: _Cons, amount: int) -> None:
        def land() -> None:
            c.credits += amount
            self._schedule_dispatch(c.cfg.queue)

        self._at(self.now + self.lat, land)

    def _processed(self, c: _Cons, mid: int) -> None:
        c.busy = False
        c.processed += 1
        c.processed_at.append(self.now)
        self._at(self.now + self.lat, lambda: self._release(mid))
        if c.cfg.window == 0:
            self._return_credit(c, 1)
        self._wake_consumer(c)

    # -- observables ---------------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        return {
            "accepted": self.accepted,
            "failed": self.failed,
            "dropped": self.dropped,
            "paged": self.paged,
            "rejected": self.rejected,
            "size": self.size,
            "peak_size": self.peak,
            "address_stops": self.stops,
            "address_resumes": self.resumes,
            "producers": {n: (p.sent, p.refused) for n, p in sorted(self.producers.items())},
            "consumers": {
                n: (c.received, c.processed, c.peak_buffered_bytes)
                for n, c in sorted(self.consumers.items())
            },
        }


def max_in_any_second(timestamps: list[int]) -> int:
    ordered = sorted(timestamps)
    best, j = 0, 0
    for i, t in enumerate(ordered):
        while j < len(ordered) and ordered[j] < t + SECOND:
            j += 1
        best = max(best, j - i)
    return best

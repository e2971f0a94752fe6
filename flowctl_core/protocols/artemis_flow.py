"""Apache ActiveMQ Artemis flow control as pure state machines (seed 003).

Nothing here knows about clocks, queues or events; :mod:`flowctl_core.protocols.artemis` wires
these pieces to the broker engine, the virtual clock and the event log. Each class follows the
Artemis code path the seed describes:

- :class:`AddressState`: an address's memory size against ``max-size-bytes`` and its
  ``address-full-policy`` (BLOCK / FAIL / DROP / PAGE), the AMQP
  ``max-size-bytes-reject-threshold``, and whether CORE credit requests wait (BLOCK, while full:
  a request is otherwise granted whole, DESIGN §2).
- :class:`ProducerCredits`: the CORE client's producer window (``ClientProducerCreditsImpl``):
  credits are bytes, requested in halves of ``producerWindowSize``.
- :class:`ConsumerWindow`: the CORE client's ``consumerWindowSize`` (-1 unbounded, 0 no buffer,
  > 0 a buffer of that many bytes) and the credits it returns to the server.
- :class:`RateLimiter`: ``producerMaxRate`` / ``consumerMaxRate``, over a sliding second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

from flowctl_core.errors import ConfigurationError
from schemas.broker_events import OUTCOME_DROPPED, OUTCOME_FAILED, OUTCOME_REJECTED
from schemas.model import US_PER_SECOND

UNBOUNDED = -1
#: Seed 003: "in the default configuration all addresses are set to block producers after 10 MiB".
DEFAULT_MAX_SIZE_BYTES = 10 * 1024 * 1024
DEFAULT_PRODUCER_WINDOW = 64 * 1024  # producerWindowSize default
#: Seed 003: "By default, the consumerWindowSize is set to 1 MiB (1024 * 1024 bytes)".
DEFAULT_CONSUMER_WINDOW = 1024 * 1024
#: The credit logged for a consumer whose window is -1 (unbounded): the largest byte window a
#: 32-bit ``consumerWindowSize`` can express. Such a window never runs out, so its logged credit
#: never changes and is never 0 (DESIGN.md §4 reads credit 0 with messages available as
#: starvation); ``detail.unbounded`` marks it.
UNBOUNDED_CREDIT = 2**31 - 1
#: The broker's memory estimate of a message beyond its body, which the address size counts
#: (DESIGN §2). Measured on Artemis 2.40 with no consumer, reading AddressSize over Jolokia after
#: 200-1,000 non-durable messages of 256 B to 4 KiB: exactly 440 B for an AMQP 1.0 message
#: (python-qpid-proton, one data section) whatever the body; 1,032 B + 6 B per character of the
#: address name for a CORE message of ``artemis producer`` (its properties repeat the name), so
#: 1,068 B for a 6-character name such as "orders" (conformance/: the real-broker suite).
DEFAULT_CORE_MESSAGE_OVERHEAD = 1068
DEFAULT_AMQP_MESSAGE_OVERHEAD = 440
#: What each queue of an address beyond the first adds to a message's memory estimate: Artemis
#: 2.40's ``PagingStore.refUp`` adds a message reference's estimate (``MessageReferenceImpl``) for
#: every reference after the first, and ``refDown`` takes it back as that reference is
#: acknowledged. Measured on Artemis 2.40 with 1 KiB CORE messages: 2,092 / 2,164 / 2,236 /
#: 2,380 B a message in the AddressSize of a multicast address of 1 / 2 / 3 / 5 queues (72 B a
#: queue after the first), and 2,236 -> 2,164 -> 2,092 B as two of three queues were drained.
DEFAULT_QUEUE_REFERENCE_OVERHEAD = 72
#: What a CORE message's encoded size, which its producer's byte credits are spent on, adds to
#: its body: Artemis 2.40 reports "Message encode size = 1357B" for a 1,024-byte body to a
#: 4-character address, and its queues' PersistentSize grows by body + 333 B + 4 B per character
#: of the address name; 357 B for a 6-character name (conformance/: the real-broker suite).
DEFAULT_CORE_ENCODE_OVERHEAD = 357
#: What a CORE message's delivery to a consumer adds to its body: the consumer's byte credits
#: (``consumerWindowSize``) are spent on the delivery packet (the message's encoding with its
#: frame, consumer id and delivery count), not on the body. Measured on Artemis 2.40: a consumer
#: that took one message and then slept had been sent 48 messages of 1,024 B with a 64 KiB
#: window, 15 of 4,096 B, 141 of 100 B, and 12 of 1,024 B with 16 KiB (body alone: 64, 16,
#: all 200 and 16); one credit per message of body + 365-368 B fits all four, for a
#: 6-character address name.
DEFAULT_CORE_DELIVERY_OVERHEAD = 366
#: Seed 003: "Artemis will issue 100 credits to a client at a time and refresh them when the
#: clients credits reaches 30."
AMQP_CREDITS = 100
AMQP_LOW_CREDITS = 30
RATE_WINDOW_US = US_PER_SECOND  # max rates are "in units of messages per second"

AddressFullPolicy = Literal["BLOCK", "FAIL", "DROP", "PAGE"]
ADDRESS_FULL_POLICIES: tuple[str, ...] = ("BLOCK", "FAIL", "DROP", "PAGE")
#: The AMQP error condition of a message refused above the reject threshold.
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"


class ArtemisConfigError(ConfigurationError):
    """An Artemis setting out of range; the message names the setting."""


class Outcome:
    """What an address does with one arriving message."""

    ACCEPTED = "accepted"  # into memory
    PAGED = "paged"  # PAGE policy: accepted, written to the page store
    DROPPED = OUTCOME_DROPPED  # DROP policy: discarded silently
    FAILED = OUTCOME_FAILED  # FAIL policy: an error goes back to the producer
    REJECTED = OUTCOME_REJECTED  # AMQP above max-size-bytes-reject-threshold


@dataclass(frozen=True)
class AddressSettings:
    """One ``<address-setting>``: limits and policies of an address (seed 003)."""

    max_size_bytes: int = DEFAULT_MAX_SIZE_BYTES
    address_full_policy: AddressFullPolicy = "BLOCK"
    max_size_bytes_reject_threshold: int = UNBOUNDED
    amqp_credits: int = AMQP_CREDITS
    amqp_low_credits: int = AMQP_LOW_CREDITS

    def __post_init__(self) -> None:
        if self.max_size_bytes < UNBOUNDED:
            raise ArtemisConfigError(
                f"max-size-bytes must be -1 (no limit) or >= 0, got {self.max_size_bytes}"
            )
        if self.address_full_policy not in ADDRESS_FULL_POLICIES:
            raise ArtemisConfigError(
                f"address-full-policy must be one of {', '.join(ADDRESS_FULL_POLICIES)}, "
                f"got {self.address_full_policy!r}"
            )
        threshold = self.max_size_bytes_reject_threshold
        # Seed 003: "an additional parameter ... that specifies an upper bound on an address
        # size", a hard limit above the soft max-size-bytes limit.
        if threshold != UNBOUNDED and (
            self.max_size_bytes == UNBOUNDED or threshold <= self.max_size_bytes
        ):
            raise ArtemisConfigError(
                "max-size-bytes-reject-threshold must be -1 or above max-size-bytes "
                f"({self.max_size_bytes}), got {threshold}"
            )
        if self.amqp_credits < 1:
            raise ArtemisConfigError(f"amqp credits must be >= 1, got {self.amqp_credits}")
        # Artemis tops a link up when its credit is at or below the low mark, by the difference
        # to amqpCredits, so a low mark equal to amqpCredits (amqpMinCredits=1 with
        # amqpCredits=1 in its AmqpFlowControlTest) is valid: a top-up after every message.
        if not 0 <= self.amqp_low_credits <= self.amqp_credits:
            raise ArtemisConfigError(
                f"amqp low credits must be within 0..{self.amqp_credits}, "
                f"got {self.amqp_low_credits}"
            )


class AddressState:
    """Memory size, paging and policy decisions of one address.

    The size counts each message once, however many queues it was routed to, from its arrival
    until its last reference is acknowledged ("the total memory for all queues bound to that
    address will not exceed max-size-bytes"), at the broker's memory estimate of the message (its
    body plus a per-protocol overhead, and a reference's estimate per queue after the first, which
    the caller adds and releases reference by reference). As in Artemis 2.40
    (``SizeAwareMetric``, DESIGN §2) the address is *full* while its size is at or above
    max-size-bytes; FAIL and DROP refuse a message that arrives while the address is full, so the
    message that fills it is still accepted. AMQP messages are rejected while the size is above
    ``max-size-bytes-reject-threshold`` (strict ``>``). PAGE pages every message from the moment
    an accepted message makes the address full until the page store is empty again.
    """

    __slots__ = (
        "accepted",
        "dropped",
        "failed",
        "name",
        "paged",
        "paged_msgs",
        "paging",
        "peak_size",
        "rejected",
        "settings",
        "size",
    )

    def __init__(self, name: str, settings: AddressSettings) -> None:
        self.name = name
        self.settings = settings
        self.size = 0  # bytes in memory
        self.peak_size = 0
        self.paging = False
        self.paged_msgs = 0  # in the page store now: paged and not acknowledged everywhere
        # Cumulative outcomes.
        self.accepted = 0
        self.paged = 0
        self.dropped = 0
        self.failed = 0
        self.rejected = 0

    @property
    def policy(self) -> str:
        return self.settings.address_full_policy

    @property
    def full(self) -> bool:
        """``size >= max-size-bytes`` (DESIGN §2: Artemis 2.40's ``SizeAwareMetric`` is over its
        limit once the size reaches it)."""
        limit = self.settings.max_size_bytes
        return limit != UNBOUNDED and self.size >= limit

    @property
    def rejecting(self) -> bool:
        """BLOCK, a threshold set, and the size above it (AMQP only; DESIGN §2: strict ``>``, as
        Artemis 2.40 checks ``size > maxSizeBytesRejectThreshold`` before an AMQP message)."""
        threshold = self.settings.max_size_bytes_reject_threshold
        return self.policy == "BLOCK" and threshold != UNBOUNDED and self.size > threshold

    def admit(self, size: int, *, amqp: bool) -> str:
        """Decide the fate of one arriving message of ``size`` bytes and account for it."""
        if amqp and self.rejecting:
            self.rejected += 1
            return Outcome.REJECTED
        policy = self.policy
        if policy == "FAIL" and self.full:
            self.failed += 1
            return Outcome.FAILED
        if policy == "DROP" and self.full:
            self.dropped += 1
            return Outcome.DROPPED
        if policy == "PAGE" and self.paging:
            self.paged += 1
            self.paged_msgs += 1
            return Outcome.PAGED
        self._add(size)
        self.accepted += 1
        if policy == "PAGE" and self.full:
            self.paging = True  # addSize -> startPaging once the address is full
        return Outcome.ACCEPTED

    def _add(self, size: int) -> None:
        self.size += size
        if self.size > self.peak_size:
            self.peak_size = self.size

    def unpage(self) -> None:
        """A paged message acknowledged by every queue leaves the page store, which the address
        size never counted it in; the address pages until its store is empty (a real 2.40 kept
        ``Paging`` true until the last paged message was acknowledged, long after it had been
        delivered)."""
        self.paged_msgs -= 1
        if self.paged_msgs == 0:
            self.paging = False

    def release(self, size: int) -> None:
        """Memory freed: a message's last reference acknowledged (its whole estimate), or an
        earlier reference (that reference's own estimate)."""
        self.size -= size
        if self.size < 0:
            raise AssertionError(f"address {self.name!r}: negative size {self.size}")

    @property
    def withholds_core_credit(self) -> bool:
        """Whether a CORE credit request waits: only under BLOCK, only while the address is full.

        DESIGN §2: a request is granted whole while the address is not full (Artemis 2.40's
        ``PagingStoreImpl`` runs the grant at once unless the store is full; it does not cap it
        at the room left), so every producer can hold a whole window when the address fills and
        the overshoot is about producers x window, seed 003's bound. Other policies never
        withhold.
        """
        return self.policy == "BLOCK" and self.full

    @property
    def amqp_credit_allowed(self) -> bool:
        """AMQP top-ups: "The broker will stop issuing credits once an address is full" (BLOCK).

        FAIL withholds them too while the address is full (Artemis checks the address's memory
        before every AMQP top-up and holds it back under BLOCK and FAIL alike; its
        AmqpFlowControlFailTest expects no credit once the address is full), so an AMQP producer
        is refused only the messages its credit already covered. DROP and PAGE never withhold.
        """
        return not (self.policy in ("BLOCK", "FAIL") and self.full)


class ProducerCredits:
    """A CORE producer's byte credits (``ClientProducerCreditsImpl``, seed 003 §4.1).

    The client keeps ``balance`` (credits received and not used) and ``arriving`` (requested and
    not yet received). It works with half the window: the first request is ``window / 2``, and
    before each send it makes sure that ``balance + arriving`` covers ``max(size, window / 2)``,
    requesting the difference. So a producer never holds more than about one window of credit
    (received, arriving or spent on messages still in flight); a message larger than half the
    window makes it request that message's size instead.
    """

    __slots__ = ("arriving", "balance", "half", "requested", "window")

    def __init__(self, window: int) -> None:
        if window < 0:
            raise ArtemisConfigError(f"producer window must be >= 0 here, got {window}")
        self.window = window
        self.half = window // 2
        self.balance = 0
        self.arriving = 0
        self.requested = 0  # cumulative

    def capacity_msgs(self, size: int) -> int:
        """How many messages of ``size`` (> 0) bytes the credit the producer holds or awaits can
        ever cover: ``(2 x max(size, window // 2) - 1) // size``, the message count of the window.

        A request is made only when ``balance + arriving < needed`` (``needed = max(size,
        window // 2)``) and brings ``arriving`` up to ``needed``, so it leaves at most
        ``needed - 1 + needed`` bytes held or awaited; grants only move credit from ``arriving``
        to ``balance`` and sends take it away. So the balance never covers more than this many
        messages, and a producer can send at most this many on credit it already has once the
        server stops granting (seed 003: "producers will block on the client side"). A full
        window is never held: with 64 KiB and 1 KiB messages it is 63, not 64.
        """
        if size <= 0:
            raise ArtemisConfigError(f"a message size must be > 0 here, got {size}")
        return (2 * max(size, self.half) - 1) // size

    def initial_request(self) -> int:
        """Credits to request when the producer is created (0: none)."""
        return self.check(self.half)

    def check(self, size: int) -> int:
        """``checkCredits``: bytes to request before sending ``size`` bytes (0: none)."""
        needed = max(size, self.half)
        if self.balance + self.arriving >= needed:
            return 0
        request = needed - self.arriving
        self.arriving += request
        self.requested += request
        return request

    def can_acquire(self, size: int) -> bool:
        return self.balance >= size

    def acquire(self, size: int) -> None:
        if self.balance < size:
            raise ArtemisConfigError(f"acquire {size} with a balance of {self.balance}")
        self.balance -= size

    def receive(self, credits: int) -> None:
        if credits < 0 or credits > self.arriving:
            raise ArtemisConfigError(f"received {credits} credits with {self.arriving} arriving")
        self.arriving -= credits
        self.balance += credits


def client_window_size(window: int) -> int:
    """``ClientSessionImpl.calcWindowSize``: the client returns credits every half window."""
    if window < UNBOUNDED:
        raise ArtemisConfigError(f"consumer window must be -1, 0 or > 0, got {window}")
    if window <= 1:
        return window
    return window >> 1


class ConsumerWindow:
    """A CORE consumer's window (seed 003 §2): server credits and the client's buffer.

    ``window`` -1: the server sends without limit. ``0``: no buffer; the client asks for one
    message (one byte of credit) when it is ready to process it, so messages "remain on the
    server side ready to be consumed by other consumers". ``> 0``: the server starts with
    ``window`` bytes of credit and sends while it has any; the client gives the credit of the
    messages it takes out of its buffer back in batches of half a window.

    The seed's "total maximum size of messages (in bytes) that will be buffered on each consumer
    is determined by the consumerWindowSize parameter" is read as Artemis's server applies it:
    the credit is checked before a send (> 0), not after, so the last message may take it below
    zero. With deliveries of at most S bytes a buffer holds at most ``window + S - 1`` bytes
    (exactly ``window`` when the window is a multiple of a uniform delivery size); window 0
    holds the one message the client asked for. Sizes here are a delivery's (the body and the
    delivery overhead, ``ArtemisConfig.core_delivery_overhead_bytes``), as Artemis counts them.
    """

    __slots__ = ("client_window", "to_send", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.client_window = client_window_size(window)
        self.to_send = 0

    @property
    def unbounded(self) -> bool:
        return self.window == UNBOUNDED

    @property
    def slow_consumer(self) -> bool:
        return self.window == 0

    def initial_credits(self) -> int | None:
        """Server credits at attach; None: no limit."""
        if self.unbounded:
            return None
        return self.window

    def on_take(self, size: int) -> int:
        """The application takes a message of ``size`` bytes: credits to send back now (0: none).

        ``flowControl``: credits accumulate until they reach the client window. With no buffer
        the one byte requested to start the delivery is discounted, so the server's credit goes
        back to zero and nothing more comes until the client asks again.
        """
        if self.unbounded:
            return 0
        self.to_send += size
        if self.to_send < self.client_window:
            return 0
        credits = self.to_send - 1 if self.slow_consumer else self.to_send
        self.to_send = 0
        return max(0, credits)


class RateLimiter:
    """``producerMaxRate`` / ``consumerMaxRate``: at most ``rate`` permits in any sliding second.

    Seed 003: "Apache ActiveMQ Artemis will ensure that producer never produces messages at a
    rate higher than that specified" (and a consumer "never consumes messages at a rate faster
    than the rate specified"). So a permit at ``t`` needs fewer than ``rate`` permits in
    ``(t - 1 s, t]``: any half-open second ``[a, a + 1 s)`` holds at most ``rate`` permits, and
    the first ``rate`` permits are there from the first attempt. Artemis's
    ``TokenBucketLimiterImpl`` differs at both ends: its tokens start at 0 and are set to
    ``rate`` once a second has passed since the last refill, so it hands out nothing in its
    first second (a run of N seconds sends ``rate`` x floor(N) where this sends ``rate`` x
    ceil(N): looser here), and it can let almost 2 x ``rate`` through in a second that
    straddles two refills (stricter here; tests/engine/test_artemis_implementation_cases.py
    pins the first difference). A refused caller retries at :meth:`retry_at_us`, when the
    oldest of the last ``rate`` permits leaves the window.
    """

    __slots__ = ("granted", "rate", "window_us")

    def __init__(self, rate: int, window_us: int = RATE_WINDOW_US) -> None:
        if rate < 1:
            raise ArtemisConfigError(f"a max rate must be a positive integer, got {rate}")
        self.rate = rate
        self.window_us = window_us
        self.granted: deque[int] = deque()  # the times of the last `rate` permits, oldest first

    def allows(self, now_us: int) -> bool:
        """Whether a permit at ``now_us`` keeps the sliding second within the rate."""
        granted = self.granted
        return len(granted) < self.rate or now_us - granted[0] >= self.window_us

    def record(self, now_us: int) -> None:
        """Take the permit :meth:`allows` said was there (at the moment of the send)."""
        granted = self.granted
        if len(granted) == self.rate:
            granted.popleft()
        granted.append(now_us)

    def try_acquire(self, now_us: int) -> bool:
        if not self.allows(now_us):
            return False
        self.record(now_us)
        return True

    def retry_at_us(self) -> int:
        """The first instant a refused caller can get a permit."""
        return self.granted[0] + self.window_us


def rate_limiter(max_rate: int) -> RateLimiter | None:
    """A limiter for ``producerMaxRate`` / ``consumerMaxRate``; -1 disables rate limiting."""
    if max_rate == UNBOUNDED:
        return None
    if max_rate < 1:
        raise ArtemisConfigError(f"a max rate must be -1 or a positive integer, got {max_rate}")
    return RateLimiter(max_rate)

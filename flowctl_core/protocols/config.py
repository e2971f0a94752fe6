"""Configuration of protocol clients and of RabbitMQ's flow-control policies (seed 004)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.broker_events import AMQP_0_9_1, AMQP_1_0

#: RabbitMQ's declare argument for a queue's type, and the types the engine models: a classic
#: queue, and a quorum queue, whose channel also holds back credit past a soft limit
#: (``RabbitPolicy.quorum_commands_soft_limit``).
QUEUE_TYPE_ARGUMENT = "x-queue-type"
CLASSIC_QUEUE = "classic"
QUORUM_QUEUE = "quorum"
QUEUE_TYPES = (CLASSIC_QUEUE, QUORUM_QUEUE)


@dataclass(frozen=True)
class RabbitPolicy:
    """RabbitMQ's internal limits; seed 004 names each as configurable in advanced.config."""

    max_link_credit: int = 170  # rabbit.max_link_credit: credit granted to a publisher link
    max_incoming_window: int = 400  # rabbit.max_incoming_window: session window, in frames
    max_queue_credit: int = 256  # rabbit.max_queue_credit: credit a queue sees per consumer
    # AMQP 0.9.1 internal credit flow between a connection and a queue: a sender starts with 400
    # credits and the queue grants 200 more after processing 200 messages.
    credit_flow_initial: int = 400
    credit_flow_more: int = 200
    # rabbit.quorum_commands_soft_limit: a quorum queue's commands the channel has sent and the
    # queue not yet applied, past which the channel blocks itself, and credit flow holds back the
    # credit it owes the connection's reader until the queue is below the limit again.
    quorum_commands_soft_limit: int = 32
    # Where the broker's AMQP 1.0 consumer links start their delivery-count and its sessions
    # their transfer-ids: 0, as RabbitMQ from 4.2; 4.0 and 4.1 started them at 2**32 - 5 and
    # 2**32 - 4, to cross the RFC-1982 wrap early (seed 004: the delivery-count "wraps").
    initial_delivery_count: int = 0
    initial_outgoing_id: int = 0

    def __post_init__(self) -> None:
        for name in (
            "max_link_credit",
            "max_incoming_window",
            "max_queue_credit",
            "credit_flow_initial",
            "credit_flow_more",
            "quorum_commands_soft_limit",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"RabbitMQ policy {name} must be >= 1")
        if self.credit_flow_more > self.credit_flow_initial:
            raise ValueError("credit_flow_more must not exceed credit_flow_initial")
        for name in ("initial_delivery_count", "initial_outgoing_id"):
            if not 0 <= getattr(self, name) < 2**32:
                raise ValueError(f"RabbitMQ policy {name} must be a uint (0 .. 2**32 - 1)")


def publisher_credit_due(credit: int, unconfirmed: int, max_link_credit: int) -> bool:
    """Seed 004: grant 170 again "when the remaining link credit falls below half (i.e. 85) and
    the number of unconfirmed messages is less than 170"."""
    return credit <= max_link_credit // 2 and unconfirmed < max_link_credit


def publisher_unconfirmed_bound(max_link_credit: int) -> int:
    """The most messages a RabbitMQ AMQP 1.0 publisher link can have unconfirmed at once: the
    ``capacity`` its enqueues log.

    Seed 004: the session "grants again 170 link credits when the remaining link credit falls
    below half (i.e. 85) **and** the number of unconfirmed messages is less than 170". A grant
    *sets* the link credit to 170 (DESIGN.md §2: "link credit is set, not added"), counted from
    the last delivery the session received, so the link can deliver at most 170 more messages
    before the next grant; and a grant comes only while at most 169 are unconfirmed. So up to
    169 + 170 = 339 (``2 x max_link_credit - 1``) are unconfirmed, reached when the queue
    confirms nothing while the publisher spends the whole grant (tests/engine/test_rabbitmq.py).
    """
    return 2 * max_link_credit - 1


def incoming_window_due(incoming_window: int, max_incoming_window: int) -> bool:
    """Seed 004: "Whenever the RabbitMQ session process has processed half of that number (200
    transfer frames), RabbitMQ expands this window ... incoming_window = 400"."""
    return incoming_window <= max_incoming_window // 2


@dataclass(frozen=True)
class PublisherConfig:
    """A publishing application on one link (1.0) or channel (0.9.1), to one queue.

    ``batch`` None publishes as fast as the link allows (seed 004's two_senders); a batch of N
    publishes N messages and waits until all N are confirmed before the next batch
    (one_sender_one_receiver: "batches of 10,000 messages").
    """

    name: str
    queue: str
    size_bytes: int = 1024
    batch: int | None = None
    initial_delivery_count: int = 0
    #: AMQP 1.0: whether the sender tells the receiver what it has ready (``available``, DESIGN
    #: §2: "set by the sender"); False advertises 0, as a client whose application never says.
    reports_available: bool = True

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError(f"publisher {self.name!r}: size_bytes must be >= 0")
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"publisher {self.name!r}: batch must be >= 1")


@dataclass(frozen=True)
class ConsumerConfig:
    """A consuming application that acknowledges every message.

    AMQP 1.0: grants ``credit`` and grants it again whenever the remaining credit falls below
    ``top_up_below`` (seed 004's suggestion: 200 / 100). AMQP 0.9.1: ``credit`` is the prefetch.
    """

    name: str
    queue: str
    credit: int = 200
    top_up_below: int = 100
    #: AMQP 1.0: every grant asks the sender to drain (use the credit or give it back at once),
    #: as a client receiving with a timeout does; after a drain that leaves it without credit,
    #: the consumer grants again ``drain_poll_us`` later.
    drain: bool = False
    drain_poll_us: int = 10_000
    #: AMQP 1.0: every grant asks the sender for a flow reply with its link state.
    echo: bool = False
    #: AMQP 1.0: (microseconds after the attach, credit): the consumer sets its link credit to
    #: that value then, and tops up to it from then on; 0 stops the queue sending to it (seed
    #: 004: "Grant a link-credit of 0 (causing the queue to stop sending)"). In time order.
    credit_changes: tuple[tuple[int, int], ...] = ()
    #: The application's time per message: it takes the delivered messages one at a time and
    #: acknowledges each once processed (flowctl_core/protocols/consuming_app.py); 0: as they
    #: arrive. A 1.0 consumer then counts the messages waiting in its buffer against its credit.
    process_us: int = 0

    def __post_init__(self) -> None:
        if self.process_us < 0:
            raise ValueError(f"consumer {self.name!r}: process_us must be >= 0")
        if self.credit < 1:
            raise ValueError(f"consumer {self.name!r}: credit must be >= 1")
        if not 0 <= self.top_up_below <= self.credit:
            raise ValueError(f"consumer {self.name!r}: top_up_below must be within 0..credit")
        if self.drain_poll_us < 1:
            raise ValueError(f"consumer {self.name!r}: drain_poll_us must be >= 1")
        times = [at_us for at_us, _ in self.credit_changes]
        if times != sorted(times) or any(at_us < 0 for at_us in times):
            raise ValueError(f"consumer {self.name!r}: credit_changes must be in time order")
        if any(credit < 0 for _, credit in self.credit_changes):
            raise ValueError(f"consumer {self.name!r}: a credit change must be >= 0")

    def top_up_due(self, remaining_credit: int, credit: int) -> bool:
        """Whether to grant again: the credit left (with the messages waiting in the buffer,
        unprocessed) is below ``top_up_below``, or below the credit the consumer grants now
        (``credit``) when a credit change set that lower."""
        return remaining_credit < min(self.top_up_below, credit)


@dataclass(frozen=True)
class ConnectionConfig:
    """One client connection (with one session / channel) and the links on it."""

    name: str
    protocol: str
    publishers: tuple[PublisherConfig, ...] = ()
    consumers: tuple[ConsumerConfig, ...] = ()
    latency_us: int = 100  # one way, both directions
    frame_cost_us: int = 10  # the client's cost of writing one frame
    socket_buffer_frames: int = 200  # unread client->broker frames before the client waits
    max_frame_size: int = 131_072
    client_incoming_window: int = 5_000  # the client session's window, reopened at half

    def __post_init__(self) -> None:
        if self.protocol not in (AMQP_1_0, AMQP_0_9_1):
            raise ValueError(
                f"connection {self.name!r}: protocol must be {AMQP_1_0} or {AMQP_0_9_1}"
            )
        names = [p.name for p in self.publishers] + [c.name for c in self.consumers]
        if len(set(names)) != len(names):
            raise ValueError(f"connection {self.name!r}: link names must be unique")
        if self.client_incoming_window < 1:
            raise ValueError(f"connection {self.name!r}: client_incoming_window must be >= 1")

    @property
    def session(self) -> str:
        return f"{self.name}/session-1" if self.protocol == AMQP_1_0 else f"{self.name}/channel-1"


class PublisherApp:
    """What the application has ready to send; ``available`` is what the link reports."""

    __slots__ = ("batch_left", "config", "sent", "unconfirmed_in_batch")

    def __init__(self, config: PublisherConfig) -> None:
        self.config = config
        self.sent = 0
        self.batch_left = config.batch or 0
        self.unconfirmed_in_batch = 0

    @property
    def available(self) -> int:
        # A flat-out publisher always has its next message in hand: one.
        return 1 if self.config.batch is None else self.batch_left

    def has_message(self) -> bool:
        return self.config.batch is None or self.batch_left > 0

    def take(self) -> int:
        """The size of the next message, now sent."""
        self.sent += 1
        if self.config.batch is not None:
            self.batch_left -= 1
            self.unconfirmed_in_batch += 1
        return self.config.size_bytes

    def on_confirm(self) -> bool:
        """Count one confirm; True when it completes a batch and the next one starts."""
        if self.config.batch is None:
            return False
        self.unconfirmed_in_batch -= 1
        if self.batch_left == 0 and self.unconfirmed_in_batch == 0:
            self.batch_left = self.config.batch
            return True
        return False

    @property
    def wants_confirms(self) -> bool:
        return self.config.batch is not None

"""RabbitMQ's AMQP 0.9.1 front end and an AMQP 0.9.1 client, on the virtual clock (seed 004).

There is no link credit in 0.9.1. Publishing is throttled by RabbitMQ's internal credit flow:
each queue a connection publishes to grants the connection 400 credits and 200 more per 200
messages it has processed; when a queue's credit runs out the connection's reader is blocked, so
nothing more is read from the socket: not the publishes to other queues and not the consumer's
acknowledgements either (seed 004, benefits #3 and #4). Consumers are limited by their prefetch:
the logged credit of a 0.9.1 consumer is ``prefetch - unacknowledged``. A publisher's window
(400 unprocessed messages, or its confirm batch if smaller) is the ``capacity`` of its enqueues
and the credit of its ``link_attached``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flowctl_core.events import link_columns
from flowctl_core.protocols.config import (
    QUORUM_QUEUE,
    ConnectionConfig,
    ConsumerConfig,
    PublisherApp,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.consuming_app import ConsumingApp, TakesFromApp
from flowctl_core.protocols.endpoints import LinkIdentity, QueueFedSender, log_confirm
from flowctl_core.protocols.wire import (
    AckFrame,
    ConfirmFrame,
    ControlFrames,
    Frame,
    FrameWriter,
    TransferFrame,
    Wire,
)
from flowctl_core.queue import Message, Queue, Transfer
from schemas.broker_events import AMQP_0_9_1

if TYPE_CHECKING:
    from flowctl_core.broker import Broker

ALARM_REASON = "alarm"


class CreditFlow:
    """RabbitMQ's credit flow from one connection to one queue ({initial, more} = {400, 200}).

    For a quorum queue (``soft_limit``: ``quorum_commands_soft_limit``) the credit due is held
    back while more than that many of the connection's messages wait for the queue: the channel
    blocks itself when the queue's client has that many commands pending, and a blocked process
    defers the credit it owes (RabbitMQ's credit_flow). So the reader, and the acks behind the
    publishes in its socket, wait until the queue has nearly caught up, not only for the next
    200 processed: a real 3.10's one-sender-one-receiver consumer (seed 004) took 4.5 thousand
    messages beside 40 thousand published to a quorum queue confirming 3.3 thousand a second;
    the engine given that rate and the client's pace, 10.8 thousand without the limit and 3.1
    with it (README, seed 004's second benchmark).
    """

    __slots__ = ("credit", "held_back", "more", "processed_since_grant", "soft_limit", "waiting")

    def __init__(self, initial: int, more: int, soft_limit: int | None = None) -> None:
        self.credit = initial
        self.more = more
        self.soft_limit = soft_limit
        self.processed_since_grant = 0
        self.waiting = 0  # sent, not yet processed by the queue
        self.held_back = 0  # credit due, not yet granted

    @property
    def blocked(self) -> bool:
        return self.credit <= 0

    def on_send(self) -> None:
        self.credit -= 1
        self.waiting += 1

    def on_processed(self) -> bool:
        """Count one processed message; True when credit is granted: ``more`` per ``more``
        processed, held back while a quorum queue has more than its soft limit waiting."""
        self.waiting -= 1
        self.processed_since_grant += 1
        if self.processed_since_grant == self.more:
            self.processed_since_grant = 0
            self.held_back += self.more
        if not self.held_back or (self.soft_limit is not None and self.waiting > self.soft_limit):
            return False
        self.credit += self.held_back
        self.held_back = 0
        return True


class ClientPublisher:
    """A publishing application on the connection's channel: a frame source for the writer."""

    def __init__(self, connection: Amqp091Connection, config: PublisherConfig) -> None:
        self.connection = connection
        self.config = config
        self.app = PublisherApp(config)

    def next_frame(self) -> Frame | None:
        if not self.app.has_message():
            return None
        size = self.app.take()
        return TransferFrame(self.config.name, self.connection.broker.next_message_id(), size)

    def on_confirm(self) -> None:
        if self.app.on_confirm():
            self.connection.writer.wake()


class ClientConsumer(TakesFromApp):
    """A consuming application: acknowledges each delivery on the same connection once it has
    processed it (``process_us``), so its prefetch bounds the messages it holds unprocessed."""

    def __init__(self, connection: Amqp091Connection, config: ConsumerConfig) -> None:
        self.connection = connection
        self.config = config
        self.app = ConsumingApp(connection.broker.scheduler, config.process_us, self._acknowledge)

    def on_delivery(self) -> None:
        self.app.on_delivery()

    def _acknowledge(self) -> None:
        self.connection.client_control.push(AckFrame(self.config.name))
        self.connection.writer.wake()


class BrokerConsumer(QueueFedSender):
    """basic.consume with a prefetch: at most ``prefetch`` unacknowledged deliveries."""

    def __init__(self, connection: BrokerConnection, config: ConsumerConfig, queue: Queue) -> None:
        identity = LinkIdentity(
            connection.broker,
            link=config.name,
            role="consumer",
            protocol=AMQP_0_9_1,
            session=connection.channel,
            connection=connection.name,
            queue=queue.name,
        )
        super().__init__(identity, queue)
        self.connection = connection
        self.prefetch = config.credit
        self.unacked = 0

    def link_state(self) -> tuple[int, int | None]:
        return self.prefetch - self.unacked, None

    def emit_attached(self) -> None:
        """basic.consume: the consumer's attach, with its whole prefetch as credit. Nothing like
        a flow frame is sent, so it is a ``link_attached`` event, not a ``flow``."""
        credit, _ = self.link_state()
        self.reported_available = self.queue.depth_msgs
        self.identity.emit(
            "link_attached",
            credit=credit,
            available=self.reported_available,
            detail={"frame": "basic.consume"},
        )

    def may_take(self) -> bool:
        return self.unacked < self.prefetch

    def deliver(self, message: Message) -> None:
        self.unacked += 1
        self.connection.to_client.write(
            TransferFrame(self.identity.name, message.message_id, message.size)
        )
        self.emit_transfer(message)

    def on_ack(self, count: int) -> None:
        self.unacked -= count
        self.emit_flow({"origin": "receiver", "frame": "basic.ack", "count": count})
        self.pump()


class BrokerConnection:
    """The broker's side of one 0.9.1 connection: its reader, credit flows and consumers."""

    def __init__(
        self,
        broker: Broker,
        config: ConnectionConfig,
        policy: RabbitPolicy,
        from_client: Wire,
        to_client: Wire,
    ) -> None:
        self.broker = broker
        self.config = config
        self.policy = policy
        self.name = config.name
        self.channel = config.session
        self.from_client = from_client
        self.to_client = to_client
        self.block_reasons: set[str] = set()
        self.blocked_count = 0
        self.consumers: dict[str, BrokerConsumer] = {}
        self.publishers = {p.name: p for p in config.publishers}
        self.accepted: dict[str, int] = dict.fromkeys(self.publishers, 0)
        self.credit_flows = {
            p.queue: CreditFlow(
                policy.credit_flow_initial,
                policy.credit_flow_more,
                policy.quorum_commands_soft_limit
                if broker.queue_type(p.queue) == QUORUM_QUEUE
                else None,
            )
            for p in config.publishers
        }
        # Each publisher's messages not yet processed by their queue (the transfer completes).
        self.outstanding: dict[str, int] = dict.fromkeys(self.publishers, 0)
        self._publisher_fields: dict[str, dict[str, Any]] = {
            p.name: {
                "link": p.name,
                "link_role": "publisher",
                "protocol": AMQP_0_9_1,
                "session": self.channel,
                "connection": self.name,
                "capacity": self.publisher_window(p),
            }
            for p in config.publishers
        }
        self._destinations = {p.name: broker.route("", p.queue) for p in config.publishers}
        if config.publishers:
            # Only publishing connections are blocked by an alarm (seed 004: "AMQP 0.9.1
            # clients must use separate connections for publishing and consuming").
            broker.alarm_listeners.append(self._on_alarm)
            if broker.alarmed:
                # Opened during an alarm: RabbitMQ registers the connection with the alarms in
                # force and blocks it as it does when one is raised (rabbitmq-java-client
                # BlockedConnection.initialBlock: connection.blocked, then unblocked on clear).
                self._on_alarm(True)

    def publisher_window(self, publisher: PublisherConfig) -> int:
        """The most messages of ``publisher`` that can be unprocessed at once (its ``capacity``).

        0.9.1 has no link credit, but RabbitMQ's credit flow bounds what a connection has sent a
        queue and the queue has not processed: credit starts at ``credit_flow_initial`` and grows
        by ``more`` only per ``more`` processed, and the connection stops reading when it runs
        out. So no publisher has more than ``credit_flow_initial`` unprocessed messages (several
        publishers to one queue on one connection share that window). A publisher that waits
        for its batch to be confirmed before the next (confirms come as the queue processes a
        message) never has more than its batch unprocessed.
        """
        window = self.policy.credit_flow_initial
        return window if publisher.batch is None else min(window, publisher.batch)

    def read(self, frame: Frame) -> None:
        if isinstance(frame, TransferFrame):
            self._on_publish(frame)
        elif isinstance(frame, AckFrame):
            self.consumers[frame.link].on_ack(frame.count)

    def _on_publish(self, frame: TransferFrame) -> None:
        publisher = self.publishers[frame.link]
        self.accepted[frame.link] += 1
        self.outstanding[frame.link] += 1
        fields = dict(self._publisher_fields[frame.link])
        fields["outstanding"] = self.outstanding[frame.link]
        transfer = Transfer(
            frame.message_id,
            frame.size_bytes,
            frame.link,
            fields["capacity"],
            self.broker.scheduler.now_us,
            self._on_processed,
        )
        destinations = self._destinations[frame.link]
        self.broker.publish(transfer, destinations, link_columns(fields))
        credit_flow = self.credit_flows[publisher.queue]
        credit_flow.on_send()
        if credit_flow.blocked:
            self.block(f"credit_flow:{publisher.queue}")

    def _on_processed(self, transfer: Transfer) -> None:
        assert transfer.sender is not None
        publisher = self.publishers[transfer.sender]
        self.outstanding[publisher.name] -= 1
        if publisher.batch is not None:
            self.to_client.write(ConfirmFrame(publisher.name, transfer.message_id))
            fields = self._publisher_fields[publisher.name]
            log_confirm(
                self.broker, transfer, dict(fields, outstanding=self.outstanding[publisher.name])
            )
        credit_flow = self.credit_flows[publisher.queue]
        if credit_flow.on_processed() and not credit_flow.blocked:
            self.unblock(f"credit_flow:{publisher.queue}")

    def emit_publisher_attached(self, name: str, available: int) -> None:
        """A publisher on the channel, logged as its link's attach (DESIGN.md §3: link events
        carry the link's ``credit`` and ``available``).

        AMQP 0.9.1 has no link credit to run down: what bounds a publisher is its window, the
        ``capacity`` its enqueues log (:meth:`publisher_window`), and it is throttled by blocking
        the whole connection (``connection_blocked``). So the attach logs that window as the
        credit: what the publisher may send before it must wait, all of it at the attach (no
        message outstanding yet). It is a constant (> 0), so a 0.9.1 publisher is never read as
        starved by link credit; its stalls are the connection's blocked intervals.
        ``available`` is what the application has ready, as for an AMQP 1.0 publisher: 1 for one
        publishing flat out, its batch for one publishing in batches. 0.9.1 sends no flow
        frames, so the attach is the publisher's only link event (a batch publisher's later
        ``available`` is not logged).
        """
        fields = dict(self._publisher_fields[name])
        fields["queue"] = self.publishers[name].queue
        fields["credit"] = fields["capacity"]
        fields["available"] = available
        fields["detail"] = json.dumps({"credit_source": "credit-flow window"})
        self.broker.emit("link_attached", fields)

    def block(self, reason: str) -> None:
        """Stop reading the socket: the whole connection stalls, whatever the frame is for.

        ``connection_blocked`` is logged when the connection starts to stall, and again when an
        alarm joins a stall credit flow began: RabbitMQ tells the client of an alarm
        (``connection.blocked``) whether or not credit flow already holds the connection, as a
        real RabbitMQ 3.10 shows. The blocked interval (DESIGN §4) still runs from the first."""
        if reason in self.block_reasons:
            return
        self.block_reasons.add(reason)
        if len(self.block_reasons) == 1:
            self.blocked_count += 1
            self.from_client.pause()
            self._emit("connection_blocked", reason)
        elif reason == ALARM_REASON:
            self._emit("connection_blocked", reason)

    def unblock(self, reason: str) -> None:
        if reason not in self.block_reasons:
            return
        self.block_reasons.discard(reason)
        if not self.block_reasons:
            self.from_client.resume()
            self._emit("connection_unblocked", reason)

    def _emit(self, event_type: str, reason: str) -> None:
        fields: dict[str, Any] = {
            "connection": self.name,
            "session": self.channel,
            "protocol": AMQP_0_9_1,
            "detail": json.dumps({"reason": reason, "blocked_count": self.blocked_count}),
        }
        if reason.startswith("credit_flow:"):
            fields["queue"] = reason.removeprefix("credit_flow:")
        self.broker.emit(event_type, fields)

    def _on_alarm(self, alarmed: bool) -> None:
        if alarmed:
            self.block(ALARM_REASON)
        else:
            self.unblock(ALARM_REASON)


class Amqp091Connection:
    """A client with one AMQP 0.9.1 connection and channel, and the broker side serving it."""

    def __init__(
        self, broker: Broker, config: ConnectionConfig, policy: RabbitPolicy | None = None
    ) -> None:
        if config.protocol != AMQP_0_9_1:
            raise ValueError(f"connection {config.name!r} is not {AMQP_0_9_1}")
        self.broker = broker
        self.config = config
        self.policy = policy or RabbitPolicy()
        scheduler = broker.scheduler
        self.to_broker = Wire(scheduler, config.latency_us, config.socket_buffer_frames)
        self.to_client = Wire(scheduler, config.latency_us)
        self.writer = FrameWriter(scheduler, self.to_broker, config.frame_cost_us)
        self.client_control = ControlFrames()
        self.server = BrokerConnection(broker, config, self.policy, self.to_broker, self.to_client)
        self.publishers = {p.name: ClientPublisher(self, p) for p in config.publishers}
        self.consumers = {c.name: ClientConsumer(self, c) for c in config.consumers}
        self.to_broker.reader = self.server.read
        self.to_client.reader = self._client_read

    def start(self) -> None:
        """basic.consume every consumer; the publishers start publishing."""
        for name, publisher in self.publishers.items():
            self.server.emit_publisher_attached(name, publisher.app.available)
        for name, consumer in self.consumers.items():
            queue = self.broker.queue(consumer.config.queue)
            broker_consumer = BrokerConsumer(self.server, consumer.config, queue)
            self.server.consumers[name] = broker_consumer
            broker_consumer.emit_attached()
            broker_consumer.schedule_pump()
        # Acks share the socket with publishes, in the order the client writes them.
        self.writer.add_source(self.client_control)
        for publisher in self.publishers.values():
            self.writer.add_source(publisher)

    def _client_read(self, frame: Frame) -> None:
        if isinstance(frame, TransferFrame):
            self.consumers[frame.link].on_delivery()
        elif isinstance(frame, ConfirmFrame):
            self.publishers[frame.link].on_confirm()

    @property
    def blocked_count(self) -> int:
        return self.server.blocked_count

    def sent(self) -> dict[str, int]:
        return {name: p.app.sent for name, p in self.publishers.items()}

    def received(self) -> dict[str, int]:
        return {name: c.received for name, c in self.consumers.items()}

    def last_received_us(self) -> dict[str, int | None]:
        return {name: c.last_received_us for name, c in self.consumers.items()}

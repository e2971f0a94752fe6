"""Pieces shared by the protocol front ends: link event fields and queue-fed broker senders."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flowctl_core.events import link_columns
from flowctl_core.queue import Message, Queue, Transfer

if TYPE_CHECKING:
    from flowctl_core.broker import Broker


class LinkIdentity:
    """The columns every event of one link carries (DESIGN.md §3)."""

    __slots__ = ("broker", "fields", "name")

    def __init__(
        self,
        broker: Broker,
        *,
        link: str,
        role: str,
        protocol: str,
        session: str | None,
        connection: str,
        queue: str | None,
    ) -> None:
        self.broker = broker
        self.name = link
        self.fields: dict[str, Any] = {
            "link": link,
            "link_role": role,
            "protocol": protocol,
            "session": session,
            "connection": connection,
            "queue": queue,
        }

    def emit(
        self,
        event_type: str,
        *,
        credit: int | None,
        available: int,
        delivery_count: int | None = None,
        detail: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        """A link event with the link's state *after* the event."""
        fields = dict(self.fields)
        fields["credit"] = credit
        fields["delivery_count"] = delivery_count
        fields["available"] = available
        if detail is not None:
            fields["detail"] = json.dumps(detail, sort_keys=True)
        if extra:
            fields.update(extra)
        self.broker.emit(event_type, fields)


class QueueFedSender:
    """The broker end of a consumer link or 0.9.1 consumer: takes messages from one queue.

    ``available`` is the number of ready messages in the queue (seed 004: "the queue length
    excluding messages that are checked out to consumers"). A link event is emitted whenever the
    link's credit or available changes: deliveries log a ``transfer`` carrying both, and a change
    of the queue made by someone else logs a ``flow`` (the sender's state, as RabbitMQ reports it
    in flow frames).
    """

    def __init__(self, identity: LinkIdentity, queue: Queue) -> None:
        self.identity = identity
        self.queue = queue
        self.delivered = 0
        self.reported_available = queue.depth_msgs
        self._taking = False  # our own dequeues are logged by the transfer, not as a change
        self._pump_scheduled = False
        self._consumer_fields = {
            key: identity.fields[key]
            for key in ("link", "link_role", "protocol", "session", "connection")
        }
        queue.on_message.append(self._on_queue_change)
        queue.on_space.append(self._on_queue_change)

    # -- subclasses say how much they may take and how a message leaves ------------------------
    def may_take(self) -> bool:
        raise NotImplementedError

    def deliver(self, message: Message) -> None:
        raise NotImplementedError

    def link_state(self) -> tuple[int, int | None]:
        """(credit, delivery_count) as logged."""
        raise NotImplementedError

    # -- shared mechanics ----------------------------------------------------------------------
    def take(self) -> Message | None:
        """Dequeue one message for this link (logged as the queue's dequeue)."""
        self._taking = True
        try:
            message = self.queue.dequeue(link_columns(self._consumer_fields))
        finally:
            self._taking = False
        return message

    def pump(self) -> None:
        self._pump_scheduled = False
        queue = self.queue
        while queue.depth_msgs and self.may_take():
            message = self.take()
            if message is None:
                break
            self.delivered += 1
            self.deliver(message)
        if queue.depth_msgs != self.reported_available:
            self.emit_flow({"origin": "sender", "reason": "available"})

    def schedule_pump(self) -> None:
        # Deferred to the next tick: a dequeue inside the queue's own enqueue could complete a
        # held transfer twice (once on release, once by the publish that is still running).
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self.queue.broker.scheduler.call_soon(self.pump)

    def emit_transfer(self, message: Message, **extra: Any) -> None:
        credit, delivery_count = self.link_state()
        self.reported_available = self.queue.depth_msgs
        self.identity.emit(
            "transfer",
            credit=credit,
            delivery_count=delivery_count,
            available=self.reported_available,
            message_id=message.message_id,
            size_bytes=message.size,
            **extra,
        )

    def emit_flow(self, detail: dict[str, Any]) -> None:
        credit, delivery_count = self.link_state()
        self.reported_available = self.queue.depth_msgs
        self.identity.emit(
            "flow",
            credit=credit,
            delivery_count=delivery_count,
            available=self.reported_available,
            detail=detail,
        )

    def _on_queue_change(self, _queue: Queue) -> None:
        if self._taking:
            return
        if self.may_take():
            # The pump logs the new state at this same instant (and usually takes the message,
            # leaving available unchanged): one event instead of two.
            self.schedule_pump()
        elif self.queue.depth_msgs != self.reported_available:
            self.emit_flow({"origin": "sender", "reason": "available"})


def log_confirm(broker: Broker, transfer: Transfer, fields: dict[str, Any]) -> None:
    """A RabbitMQ publisher confirm (an AMQP 1.0 disposition, a 0.9.1 ``basic.ack``) is a
    completion: ``transfer_completed`` with its delay, under :meth:`Transfer.completion_logged`'s
    rule. ``fields`` are the publisher's columns after the confirm."""
    latency_us = broker.scheduler.now_us - transfer.received_us
    if transfer.completion_logged(latency_us, broker.config.log_immediate_completions):
        fields.update(
            message_id=transfer.message_id, size_bytes=transfer.size, latency_us=latency_us
        )
        broker.emit("transfer_completed", fields)

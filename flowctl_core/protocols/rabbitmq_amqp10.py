"""RabbitMQ's AMQP 1.0 front end and an AMQP 1.0 client, on the virtual clock (seed 004).

One :class:`Amqp10Connection` is a client connection with one session, its links, and the
RabbitMQ session process serving it. Publisher links are logged from the client's (sending) end,
consumer links from the broker's (sending) end: the sender's credit and available are what the
starvation metric needs (DESIGN.md §4: "the sending side has work and no credit").

RabbitMQ policies applied here (all in :class:`~flowctl_core.protocols.config.RabbitPolicy`):
170 credits to a publisher, topped up when credit <= 85 and fewer than 170 unconfirmed (so up to
169 + 170 = 339 unconfirmed: the ``capacity`` its enqueues log, the 170 being their
``detail.max_link_credit``); a session incoming window of 400 frames re-opened at 200; at most
256 credits per consumer handed to the queue (a consumer link's ``link_attached`` and ``flow``
events log it as ``detail.max_queue_credit``); a memory or disk alarm closes the incoming window
(publishers stop, consumers go on).

It stays one module although over 500 lines: it is one connection's flow control from both
ends (the client's links, the broker's links and the session process between them), so each flow
frame and the answer the other end makes to it read in one place, as h11 keeps its connection
states in one ``_state.py``.
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from flowctl_core.events import link_columns
from flowctl_core.protocols.amqp10 import (
    LinkFlow,
    ProtocolError,
    ReceiverLink,
    SenderLink,
    SessionEndpoint,
    transfer_frames,
)
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherApp,
    PublisherConfig,
    RabbitPolicy,
    incoming_window_due,
    publisher_credit_due,
    publisher_unconfirmed_bound,
)
from flowctl_core.protocols.consuming_app import ConsumingApp, TakesFromApp
from flowctl_core.protocols.endpoints import LinkIdentity, QueueFedSender, log_confirm
from flowctl_core.protocols.wire import (
    AckFrame,
    ConfirmFrame,
    ControlFrames,
    FlowFrame,
    Frame,
    FrameWriter,
    TransferFrame,
    Wire,
)
from flowctl_core.queue import Message, Queue, Transfer
from schemas.broker_events import AMQP_1_0

if TYPE_CHECKING:
    from flowctl_core.broker import Broker


def _flow_detail(flow: LinkFlow, origin: str, credit_window: int | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "origin": origin,
        "link_credit": flow.link_credit,
        "drain": flow.drain,
        "echo": flow.echo,
    }
    if credit_window is not None:
        detail["credit_window"] = credit_window
    return detail


# -- client side -------------------------------------------------------------------------------
class ClientPublisherLink:
    """A publishing application on a sender link; a frame source for the client's writer."""

    def __init__(self, connection: Amqp10Connection, config: PublisherConfig) -> None:
        self.connection = connection
        self.config = config
        self.link = SenderLink(config.name, config.initial_delivery_count)
        self.app = PublisherApp(config)
        self.link.available = self.advertised
        self.identity = LinkIdentity(
            connection.broker,
            link=config.name,
            role="publisher",
            protocol=AMQP_1_0,
            session=connection.config.session,
            connection=connection.config.name,
            queue=config.queue,
        )
        self._frames_left = 0  # further frames of a message split by max-frame-size
        self._current: TransferFrame | None = None

    @property
    def advertised(self) -> int:
        """The ``available`` the sender puts in its link state (0 when it reports nothing)."""
        return self.app.available if self.config.reports_available else 0

    def emit(self, event_type: str, detail: dict[str, Any] | None = None, **extra: Any) -> None:
        link = self.link
        self.identity.emit(
            event_type,
            credit=link.credit,
            delivery_count=link.delivery_count,
            available=link.available,
            detail=detail,
            **extra,
        )

    def next_frame(self) -> Frame | None:
        session = self.connection.client_session
        if self._frames_left:
            if not session.can_send():
                return None
            session.send_frame()
            self._frames_left -= 1
            assert self._current is not None
            return TransferFrame(
                self.config.name,
                self._current.message_id,
                self._current.size_bytes,
                self._frames_left == 0,
            )
        link = self.link
        if not link.credit or not self.app.has_message() or not session.can_send():
            return None
        size = self.app.take()
        link.send_transfer()
        link.available = self.advertised
        session.send_frame()
        message_id = self.connection.broker.next_message_id()
        frames = transfer_frames(size, self.connection.config.max_frame_size)
        self._frames_left = frames - 1
        self.emit("transfer", message_id=message_id, size_bytes=size)
        frame = TransferFrame(self.config.name, message_id, size, frames == 1)
        self._current = frame
        return frame

    def on_flow(self, flow: LinkFlow) -> None:
        reply = self.link.on_flow(flow)
        self.emit("flow", _flow_detail(flow, "receiver"))
        if reply is not None:
            self.connection.client_control.push(
                FlowFrame(self.config.name, reply, self.connection.client_session.state())
            )
        self.connection.writer.wake()

    def on_confirm(self) -> None:
        if self.app.on_confirm() and self.config.reports_available:
            self.link.available = self.advertised
            self.emit("flow", {"origin": "sender", "reason": "available"})
            self.connection.writer.wake()


class ClientConsumerLink(TakesFromApp):
    """A consuming application on a receiver link: acks each message once it has processed it
    (``process_us``) and tops its credit up, counting the messages waiting in its buffer against
    the credit, so that credit and buffer together never exceed the credit it grants."""

    def __init__(self, connection: Amqp10Connection, config: ConsumerConfig) -> None:
        self.connection = connection
        self.config = config
        # The broker's sender chooses it; the client learns it from the attach.
        self.link = ReceiverLink(
            config.name, initial_delivery_count=connection.policy.initial_delivery_count
        )
        #: The credit it grants (and tops up to): the config's, until a credit change.
        self.credit = config.credit
        self.app = ConsumingApp(connection.broker.scheduler, config.process_us, self._processed)

    def _held(self) -> int:
        """Messages the application holds against its credit: those waiting in its buffer,
        and a delivery split over frames whose first has come (its credit is spent there) but
        not its last. None with ``process_us`` 0: an instant application holds nothing."""
        if not self.config.process_us:
            return 0
        return self.app.waiting + int(self.link.mid_delivery)

    def _window_left(self) -> int:
        """The credit to grant now: the consumer's credit less what it holds."""
        return max(0, self.credit - self._held())

    def attach(self) -> None:
        self.grant(self.credit)
        scheduler = self.connection.broker.scheduler
        for after_us, credit in self.config.credit_changes:
            scheduler.call_later(after_us, self._change_credit, credit)

    def _change_credit(self, credit: int) -> None:
        """A credit change of the scenario's: granted at once (set, not added), then topped up
        to; a credit of 0 leaves nothing to top up."""
        self.credit = credit
        self.grant(self._window_left())

    def grant(self, credit: int, *, drain: bool | None = None, echo: bool | None = None) -> None:
        """Grant ``credit`` (set, not added), with the consumer's own drain / echo unless told."""
        connection = self.connection
        config = self.config
        flow = self.link.grant(
            credit,
            drain=config.drain if drain is None else drain,
            echo=config.echo if echo is None else echo,
        )
        connection.client_control.push(
            FlowFrame(self.config.name, flow, connection.client_session.state(), self.credit)
        )
        connection.writer.wake()

    def on_transfer(self, frame: TransferFrame) -> None:
        self.link.on_transfer(frame.final)  # counted at the delivery's first frame
        if self.config.drain and self.link.drain and self.link.credit == 0:
            # A drained grant used up by transfers: the sender owes no flow frame for it (the
            # transfers answered the drain), so poll again as after a drained flow, or a
            # consumer that never tops up would wait for good.
            self._poll_later()
        if frame.final:
            self.app.on_delivery()

    def _processed(self) -> None:
        self.connection.client_control.push(AckFrame(self.config.name))
        if self.config.top_up_due(self.link.credit + self._held(), self.credit):
            self.grant(self._window_left())
        else:
            self.connection.writer.wake()

    def on_flow(self, flow: LinkFlow) -> None:
        self.link.on_flow(flow)
        if self.config.drain and flow.drain and self.link.credit == 0:
            # The sender drained what the queue did not fill: poll again a little later (a
            # grant at once would drain again at the same instant, without end).
            self._poll_later()

    def _poll_later(self) -> None:
        self.connection.broker.scheduler.call_later(self.config.drain_poll_us, self._poll)

    def _poll(self) -> None:
        if self.link.credit:
            return
        if self._window_left() > 0:
            self.grant(self._window_left())
        elif self._held():
            # A full buffer: poll again once it has room (without a top-up mark, polling is
            # the only way this consumer grants again).
            self.connection.broker.scheduler.call_later(self.config.drain_poll_us, self._poll)


# -- broker side -------------------------------------------------------------------------------
class BrokerPublisherLink:
    """RabbitMQ's receiving end of a publisher link: routes, counts unconfirmed, grants credit."""

    def __init__(self, session: ServerSession, config: PublisherConfig) -> None:
        self.session = session
        self.config = config
        self.broker = session.broker
        self.link = ReceiverLink(
            config.name, config.initial_delivery_count, counts_at_last_frame=True
        )
        self.unconfirmed = 0
        self.accepted = 0
        self.wants_confirms = config.batch is not None
        self.detached: str | None = None  # the error condition, once detached
        self._destinations = self.broker.route("", config.queue)
        # The enqueues' capacity is the true bound on their outstanding (unconfirmed) count,
        # 2 x 170 - 1, not the 170 credits of one grant (publisher_unconfirmed_bound).
        max_link_credit = session.policy.max_link_credit
        self.capacity = publisher_unconfirmed_bound(max_link_credit)
        self._fields: dict[str, Any] = {
            "link": config.name,
            "link_role": "publisher",
            "protocol": AMQP_1_0,
            "session": session.name,
            "connection": session.connection_name,
            "capacity": self.capacity,
            "detail": json.dumps({"max_link_credit": max_link_credit}),
        }

    def attach(self) -> None:
        self._grant()

    def on_message(self, frame: TransferFrame) -> None:
        """A transfer frame of the publisher's: the message is counted and routed at its last
        frame, as RabbitMQ does (:meth:`ReceiverLink.on_transfer`)."""
        if self.detached is not None:
            return
        try:
            self.link.on_transfer(frame.final)
        except ProtocolError as error:
            self.detach(error)
            return
        if not frame.final:
            return
        self.unconfirmed += 1
        self.accepted += 1
        transfer = Transfer(
            frame.message_id,
            frame.size_bytes,
            self.config.name,
            self.capacity,
            self.broker.scheduler.now_us,
            self._on_confirm,
        )
        fields = dict(self._fields)
        fields["outstanding"] = self.unconfirmed
        self.broker.publish(transfer, self._destinations, link_columns(fields))
        self._maybe_grant()

    def _on_confirm(self, transfer: Transfer) -> None:
        # Publisher confirms are always on between the session and its target queues (seed 004).
        self.unconfirmed -= 1
        if self.wants_confirms:
            self.session.send(ConfirmFrame(self.config.name, transfer.message_id))
            log_confirm(self.broker, transfer, dict(self._fields, outstanding=self.unconfirmed))
        self._maybe_grant()

    def _maybe_grant(self) -> None:
        if self.detached is None and publisher_credit_due(
            self.link.credit, self.unconfirmed, self.session.policy.max_link_credit
        ):
            self._grant()

    def _grant(self) -> None:
        flow = self.link.grant(self.session.policy.max_link_credit)
        self.session.send(FlowFrame(self.config.name, flow, self.session.endpoint.state()))

    def detach(self, error: ProtocolError) -> None:
        self.detached = error.condition
        self.broker.emit(
            "link_detached",
            dict(
                self._fields,
                credit=self.link.credit,
                delivery_count=self.link.delivery_count,
                available=self.link.available,
                detail=json.dumps({"error": error.condition}),
            ),
        )


class BrokerConsumerLink(QueueFedSender):
    """RabbitMQ's sending end of a consumer link, fed by its queue through the 256-credit cap."""

    def __init__(self, session: ServerSession, config: ConsumerConfig, queue: Queue) -> None:
        identity = LinkIdentity(
            session.broker,
            link=config.name,
            role="consumer",
            protocol=AMQP_1_0,
            session=session.name,
            connection=session.connection_name,
            queue=queue.name,
        )
        super().__init__(identity, queue)
        self.session = session
        self.config = config
        # Its delivery-count starts at the policy's: 0, as RabbitMQ's from 4.2 (4.0 and 4.1
        # started it at 2**32 - 5, and the session's transfer-ids at 2**32 - 4).
        self.link = SenderLink(config.name, session.policy.initial_delivery_count)
        # Credit the session has handed to the queue; messages the queue sent to the session
        # that are not yet forwarded to the client wait in `buffered`.
        self.queue_credit = 0
        self.buffered: deque[Message] = deque()
        # Frames of buffered[0] still to send: a message split by max-frame-size goes out frame
        # by frame as the client's session window allows (seed 004: "the sender might still be
        # blocked by session flow control sending this message in its entirety").
        self._frames_left = 0
        self._drain_answered = False  # set when the pump answers a drain with its flow
        # An echo asked while messages wait in the session: answered once they have gone out.
        self._echo_due = False

    def link_state(self) -> tuple[int, int | None]:
        return self.link.credit, self.link.delivery_count

    def _cap_detail(self, detail: dict[str, Any] | None = None) -> dict[str, Any]:
        """``detail`` with the link's queue-credit cap (``max_queue_credit``): seed 004, "the
        queue will only ever see up to 256 credits for a given consumer", so credit granted above
        it only buffers in the session. Logged so the recommender can tell the link is capped."""
        return dict(detail or {}, max_queue_credit=self.session.policy.max_queue_credit)

    def emit_attached(self) -> None:
        """The attach: no credit yet (the consumer's first flow grants it), the queue's ready
        messages available. No flow frame goes with an attach, so it is no ``flow`` event."""
        self.reported_available = self.queue.depth_msgs
        self.identity.emit(
            "link_attached",
            credit=self.link.credit,
            delivery_count=self.link.delivery_count,
            available=self.reported_available,
            detail=self._cap_detail(),
        )

    def emit_flow(self, detail: dict[str, Any]) -> None:
        super().emit_flow(self._cap_detail(detail))

    def may_take(self) -> bool:
        return self.queue_credit > 0

    def on_flow(self, flow: LinkFlow, credit_window: int | None = None) -> None:
        # Seed 004: RabbitMQ sets ``available`` (the queue's ready messages) in the flow frames it
        # sends the consumer, an echo reply included.
        self.link.available = self.queue.depth_msgs
        echo = self.link.on_flow(flow) is not None
        self.emit_flow(_flow_detail(flow, "receiver", credit_window))
        # RabbitMQ passes every client flow on to the queue (seed 004: "Grant a link-credit of 0
        # (causing the queue to stop sending)"), within the 256-credit cap.
        self._grant_queue_credit(client_flow=True)
        self._drain_answered = False
        # A flow without echo leaves one asked before it due (RabbitMQ stashes a credit request
        # that comes while another is with the queue, and answers the first's echo all the same).
        self._echo_due = self._echo_due or echo
        self.forward()
        self.pump()

    def _answer_echo(self) -> None:
        """Answer an echo once the queue has served the credit passed on to it and the messages
        buffered in the session have gone out: the reply's state and ``available`` are those
        after the deliveries it allowed (RabbitMQ's amqp_client_SUITE available_messages: 4
        ready, credit 1 with echo -> one transfer, then a flow with available 3), and RabbitMQ
        queues a link's flow behind its pending transfers ("An outgoing FLOW frame with link
        flow control information must not overtake a TRANSFER frame for the same link"), a
        message split over frames included. A drain answered meanwhile by its flow answers the
        echo too."""
        if not self._echo_due or self.buffered:
            return
        self._echo_due = False
        if not self._drain_answered:
            self._send_link_flow("echo")

    def _send_link_flow(self, reason: str) -> None:
        """Send the client the link's state, ``available`` the queue's ready messages now, in a
        flow frame: a drain's or an echo's answer. A flow frame of the sender's (DESIGN §3:
        `flow` ... new credit / drain / echo), so it is logged as one."""
        self.link.available = self.queue.depth_msgs
        self.session.send(
            FlowFrame(self.config.name, self.link.state(), self.session.endpoint.state())
        )
        self.emit_flow({"origin": "sender", "reason": reason})

    def _grant_queue_credit(self, *, client_flow: bool = False) -> None:
        """Set the credit the queue holds for this consumer: seed 004, "the queue will only ever
        see up to 256 credits for a given consumer. Once these 256 messages have been sent out by
        the server session process, the server session process will grant the next batch".

        The cap covers the messages the queue already handed to the session that are not yet sent
        out (``buffered``), so buffered + queue credit never exceeds 256 (the cap exists "to guard
        against ... a large number of messages ... buffered in the session process"). A client
        flow re-sets the queue's credit (lowering it too); otherwise the next batch is granted
        once the previous one has been sent out. The queue never holds more than the link credit
        the buffered messages have not taken yet (a message partly sent has taken its credit).
        """
        buffered = len(self.buffered)
        if not client_flow and (self.queue_credit or buffered):
            return
        waiting = buffered - (1 if self._frames_left else 0)
        uncovered = max(0, self.link.credit - waiting)
        room = max(0, self.session.policy.max_queue_credit - buffered)
        self.queue_credit = min(uncovered, room)

    def deliver(self, message: Message) -> None:
        self.queue_credit -= 1
        self.buffered.append(message)
        self.forward()

    def forward(self) -> None:
        """Send buffered messages while the client's session window allows.

        Only the window holds them back (seed 004: "messages are buffered in the session process
        until the client's `incoming-window` allows them to be forwarded"): a message the queue
        handed the session had link credit then, and goes out even if the client has since
        lowered its credit (RabbitMQ's session, ``send_pending``, checks the remote incoming
        window alone: the credit stays at 0, the delivery-count goes on). The queue gets no new
        credit meanwhile (:meth:`_grant_queue_credit`)."""
        buffered, link, endpoint = self.buffered, self.link, self.session.endpoint
        session, name = self.session, self.config.name
        while buffered and endpoint.remote_incoming_window:
            message = buffered[0]
            left = self._frames_left
            if not left:
                # A new delivery: it takes one link credit (if the client left it any), its
                # frames take session window. The credit is spent now, so the transfer is logged
                # now (as a publisher's is), even if the window lets its last frame go only later.
                if link.credit:
                    link.send_transfer()
                else:
                    link.send_transfer_past_credit()
                self.emit_transfer(message)
                left = transfer_frames(message.size, session.max_frame_size)
            while left and endpoint.remote_incoming_window:
                endpoint.send_frame()
                left -= 1
                session.send(TransferFrame(name, message.message_id, message.size, not left))
            self._frames_left = left
            if left:
                break
            buffered.popleft()
        self._grant_queue_credit()

    def pump(self) -> None:
        super().pump()
        link = self.link
        # A drain ends once the queue has nothing more to send, or when there is no credit to
        # send with (seed 004: the drain asks to "Either send a transfer or a flow frame"; with no
        # credit only the flow is possible). Either way its flow follows the messages buffered
        # in the session, which go out whatever the credit (:meth:`forward`): RabbitMQ queues a
        # link's flow behind them ("An outgoing FLOW frame with link flow control information
        # must not overtake a TRANSFER frame for the same link"), as it does an echo's.
        if link.drain and not self.buffered and (not link.credit or not self.queue.depth_msgs):
            reply = link.finish_drain()  # uses up the credit left, or None: nothing to say
            if reply is not None:
                self.queue_credit = 0  # the drain used up every credit, the queue's too
                self._drain_answered = True
                self._send_link_flow("drained")
        self._answer_echo()


class ServerSession:
    """The RabbitMQ session process of one connection."""

    def __init__(
        self,
        broker: Broker,
        config: ConnectionConfig,
        policy: RabbitPolicy,
        to_client: Wire,
    ) -> None:
        self.broker = broker
        self.policy = policy
        self.name = config.session
        self.connection_name = config.name
        self.max_frame_size = config.max_frame_size
        self.to_client = to_client
        # A session begun during an alarm starts with its incoming window closed (RabbitMQ's
        # begin: 0 while any resource alarm is in effect, else max_incoming_window).
        window = 0 if broker.alarmed else policy.max_incoming_window
        self.endpoint = SessionEndpoint(
            self.name, incoming_window=window, initial_outgoing_id=policy.initial_outgoing_id
        )
        self.publishers: dict[str, BrokerPublisherLink] = {}
        self.consumers: dict[str, BrokerConsumerLink] = {}
        self.error: str | None = None
        broker.alarm_listeners.append(self._on_alarm)

    def send(self, frame: Frame) -> None:
        self.to_client.write(frame)

    def read(self, frame: Frame) -> None:
        if self.error is not None:
            return  # the session has ended
        if isinstance(frame, TransferFrame):
            self._on_transfer(frame)
        elif isinstance(frame, FlowFrame):
            self._on_flow(frame)
        # AckFrame: a disposition settles a delivery; in AMQP 1.0 it grants nothing (seed 004).

    def _on_transfer(self, frame: TransferFrame) -> None:
        try:
            self.endpoint.receive_frame()
        except ProtocolError as error:
            self._end(error)
            return
        self.publishers[frame.link].on_message(frame)
        if not self.broker.alarmed and incoming_window_due(
            self.endpoint.incoming_window, self.policy.max_incoming_window
        ):
            self._set_window(self.policy.max_incoming_window, "reopened")

    def _on_flow(self, frame: FlowFrame) -> None:
        if frame.session_flow is not None:
            try:
                self.endpoint.on_flow(frame.session_flow)
            except ProtocolError as error:
                self._end(error)
                return
        if frame.link is not None and frame.link_flow is not None:
            consumer = self.consumers.get(frame.link)
            if consumer is not None:
                try:
                    consumer.on_flow(frame.link_flow, frame.credit_window)
                except ProtocolError as error:
                    self._end(error)
                    return
            # A publisher's own flow (its available) is ignored by RabbitMQ (seed 004).
        for consumer in self.consumers.values():
            consumer.forward()
            consumer.pump()

    def _set_window(self, frames: int, reason: str) -> None:
        flow = self.endpoint.set_incoming_window(frames)
        self.send(FlowFrame(None, None, flow))
        self.emit_window(reason)

    def emit_window(self, reason: str, **detail: Any) -> None:
        endpoint = self.endpoint
        info = {
            "reason": reason,
            "incoming_window": endpoint.incoming_window,
            "next_incoming_id": endpoint.next_incoming_id,
            "next_outgoing_id": endpoint.next_outgoing_id,
            "remote_incoming_window": endpoint.remote_incoming_window,
        }
        info.update(detail)
        self.broker.emit(
            "session_window",
            {
                "session": self.name,
                "connection": self.connection_name,
                "protocol": AMQP_1_0,
                "detail": json.dumps(info, sort_keys=True),
            },
        )

    def _on_alarm(self, alarmed: bool) -> None:
        """Seed 004: "each session will close its incoming window by sending a flow frame with
        incoming_window = 0 to publishers"; consuming goes on."""
        if self.error is None:
            if alarmed:
                self._set_window(0, "alarm")
            else:
                self._set_window(self.policy.max_incoming_window, "alarm_cleared")

    def _end(self, error: ProtocolError) -> None:
        self.error = error.condition
        self.emit_window("ended", error=error.condition)


class Amqp10Connection:
    """A client with one AMQP 1.0 connection and session, and the broker session serving it."""

    def __init__(
        self, broker: Broker, config: ConnectionConfig, policy: RabbitPolicy | None = None
    ) -> None:
        if config.protocol != AMQP_1_0:
            raise ValueError(f"connection {config.name!r} is not {AMQP_1_0}")
        self.broker = broker
        self.config = config
        self.policy = policy or RabbitPolicy()
        scheduler = broker.scheduler
        self.to_broker = Wire(scheduler, config.latency_us)
        self.to_client = Wire(scheduler, config.latency_us)
        self.writer = FrameWriter(scheduler, self.to_broker, config.frame_cost_us)
        self.client_session = SessionEndpoint(
            config.session, incoming_window=config.client_incoming_window
        )
        self.client_control = ControlFrames()
        self.server = ServerSession(broker, config, self.policy, self.to_client)
        self.publishers = {p.name: ClientPublisherLink(self, p) for p in config.publishers}
        self.consumers = {c.name: ClientConsumerLink(self, c) for c in config.consumers}
        self.to_broker.reader = self.server.read
        self.to_client.reader = self._client_read
        # begin: both ends learn the other's ids and windows.
        self.client_session.on_begin(self.server.endpoint.begin())
        self.server.endpoint.on_begin(self.client_session.begin())

    def start(self) -> None:
        """Attach every link; the broker grants publishers credit, consumers grant theirs."""
        if self.server.endpoint.incoming_window == 0:
            # Begun during an alarm: the session starts closed, and the log says so, as it does
            # for a session closed by an alarm later (DESIGN §3: blocking is read off the log).
            self.server.emit_window("alarm", begun_during_alarm=True)
        for name, publisher in self.publishers.items():
            self.server.publishers[name] = BrokerPublisherLink(self.server, publisher.config)
            publisher.emit("link_attached")
        for name, consumer in self.consumers.items():
            queue = self.broker.queue(consumer.config.queue)
            broker_link = BrokerConsumerLink(self.server, consumer.config, queue)
            self.server.consumers[name] = broker_link
            broker_link.emit_attached()
        # Control frames (flows, acks) take their turn with the publishers' transfers.
        self.writer.add_source(self.client_control)
        for publisher in self.publishers.values():
            self.writer.add_source(publisher)
        for broker_publisher in self.server.publishers.values():
            broker_publisher.attach()
        for consumer in self.consumers.values():
            consumer.attach()

    def _client_read(self, frame: Frame) -> None:
        if isinstance(frame, TransferFrame):
            self._client_receive_frame()
            self.consumers[frame.link].on_transfer(frame)
        elif isinstance(frame, FlowFrame):
            if frame.session_flow is not None:
                self.client_session.on_flow(frame.session_flow)
            if frame.link is not None and frame.link_flow is not None:
                if frame.link in self.publishers:
                    self.publishers[frame.link].on_flow(frame.link_flow)
                else:
                    self.consumers[frame.link].on_flow(frame.link_flow)
            self.writer.wake()
        elif isinstance(frame, ConfirmFrame):
            self.publishers[frame.link].on_confirm()

    def _client_receive_frame(self) -> None:
        session = self.client_session
        session.receive_frame()
        if incoming_window_due(session.incoming_window, self.config.client_incoming_window):
            flow = session.set_incoming_window(self.config.client_incoming_window)
            self.client_control.push(FlowFrame(None, None, flow))
            self.writer.wake()

    @property
    def blocked_count(self) -> int:
        """AMQP 1.0 throttles links and sessions, never the whole connection."""
        return 0

    # -- results -------------------------------------------------------------------------------
    def sent(self) -> dict[str, int]:
        return {name: p.app.sent for name, p in self.publishers.items()}

    def received(self) -> dict[str, int]:
        return {name: c.received for name, c in self.consumers.items()}

    def last_received_us(self) -> dict[str, int | None]:
        return {name: c.last_received_us for name, c in self.consumers.items()}

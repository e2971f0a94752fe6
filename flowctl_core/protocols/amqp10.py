"""AMQP 1.0 link and session flow control as pure state machines (seeds 002/004).

Nothing here knows about clocks, queues or events: an endpoint is updated by the frames it sends
and receives, and returns the frames it has to send. :mod:`flowctl_core.protocols.rabbitmq_amqp10`
wires the endpoints to the broker, the virtual clock and the event log.

Link flow control (AMQP 1.0 §2.6.7): the receiver *sets* link-credit; the sender owns
delivery-count and available. Session flow control (§2.5.6) counts transfer frames against the
peer's incoming-window, using next-incoming-id / next-outgoing-id to account for frames in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowctl_core.errors import ProtocolError as ProtocolError
from flowctl_core.protocols.serial import SERIAL_MAX, serial_add, serial_diff, serial_distance

LINK_TRANSFER_LIMIT_EXCEEDED = "amqp:link:transfer-limit-exceeded"
SESSION_WINDOW_VIOLATION = "amqp:session:window-violation"
INVALID_FIELD = "amqp:invalid-field"
#: The spec's MIN-MAX-FRAME-SIZE: no peer may negotiate a smaller max-frame-size.
MIN_MAX_FRAME_SIZE = 512


def _check_uint(name: str, value: int) -> None:
    if not 0 <= value <= SERIAL_MAX:
        raise ProtocolError(INVALID_FIELD, f"{name} must be a uint (0..{SERIAL_MAX}), got {value}")


@dataclass(frozen=True, slots=True)
class LinkFlow:
    """The link fields of a flow frame."""

    link_credit: int
    # None from a receiver that has not seen the sender's attach yet (spec: use the
    # initial-delivery-count in that case).
    delivery_count: int | None
    available: int = 0
    drain: bool = False
    echo: bool = False


@dataclass(frozen=True, slots=True)
class SessionFlow:
    """The session fields of a flow frame (and of begin, where next_incoming_id is None)."""

    next_incoming_id: int | None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int


class SenderLink:
    """The sending end of a link: owns delivery-count and available; credit comes from flows."""

    __slots__ = (
        "available",
        "credit",
        "delivery_count",
        "drain",
        "drain_unanswered",
        "initial_delivery_count",
        "name",
        "receiver_delivery_count",
    )

    def __init__(self, name: str, initial_delivery_count: int = 0) -> None:
        _check_uint("initial-delivery-count", initial_delivery_count)
        self.name = name
        # Sent in the attach frame; any value will do (seed 004: "0, 10, or 4,294,967,295").
        self.initial_delivery_count = initial_delivery_count
        self.delivery_count = initial_delivery_count
        # The receiver's delivery-count in its latest flow: it only ever moves forward, to a
        # delivery-count this sender has had.
        self.receiver_delivery_count = initial_delivery_count
        self.credit = 0  # no transfer before the receiver's first flow
        self.available = 0
        self.drain = False
        # A drain request not yet answered by any frame: seed 004, the receiver asks the sender to
        # "Either send a transfer or a flow frame".
        self.drain_unanswered = False

    def on_flow(self, flow: LinkFlow) -> LinkFlow | None:
        """Apply the receiver's flow; returns the state to send back when ``echo`` asks for it.

        link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd), computed
        as link-credit(rcv) minus the transfers (and drained credit) still in flight towards the
        receiver. That is the forward serial distance modulo 2**32, so a delivery-count that
        wrapped past 4,294,967,295 gives the same credit as one that did not, and a drain of
        2**31 or more credits (a distance RFC 1982 cannot order) is counted like any other.
        The receiver's delivery-count can only lie between the one it reported last and ours:
        anything else (ahead of us, or back before its last report) is an invalid field.
        """
        _check_uint("link-credit", flow.link_credit)
        receiver_count = (
            self.initial_delivery_count if flow.delivery_count is None else flow.delivery_count
        )
        _check_uint("delivery-count", receiver_count)
        in_flight = serial_distance(self.delivery_count, receiver_count)
        if in_flight > serial_distance(self.delivery_count, self.receiver_delivery_count):
            raise ProtocolError(
                INVALID_FIELD,
                f"link {self.name!r}: receiver delivery-count {receiver_count} is not between its "
                f"last {self.receiver_delivery_count} and the sender's {self.delivery_count}",
            )
        self.receiver_delivery_count = receiver_count
        # More transfers in flight than the new credit: the receiver lowered its credit; the
        # sender simply has none left (credit is a uint, never negative).
        self.credit = max(0, flow.link_credit - in_flight)
        self.drain = flow.drain
        # Every drain flow is a new request; an echo reply is a flow frame, so it answers it.
        self.drain_unanswered = flow.drain and not flow.echo
        return self.state() if flow.echo else None

    def send_transfer(self) -> None:
        """Account for one message sent; without credit that is a protocol error."""
        if self.credit == 0:
            raise ProtocolError(
                LINK_TRANSFER_LIMIT_EXCEEDED, f"link {self.name!r}: transfer without link credit"
            )
        self.credit -= 1
        self.delivery_count = serial_add(self.delivery_count, 1)
        self.drain_unanswered = False

    def send_transfer_past_credit(self) -> None:
        """Account for one message sent with no credit left: a sender that forwards what it had
        taken off its queue before the receiver lowered the credit (RabbitMQ's session buffer).
        The credit stays at 0 and the delivery-count goes on, so the receiver's next flow counts
        the message as in flight. It was due before any drain asked since: it answers none."""
        if self.credit:
            raise ValueError(f"link {self.name!r}: {self.credit} credit left, send it with it")
        self.delivery_count = serial_add(self.delivery_count, 1)

    def finish_drain(self) -> LinkFlow | None:
        """After sending what it has, a draining sender uses up the rest of its credit.

        Seed 004: "If there are not enough messages to send, the sender must still exhaust all
        link credit as follows: 1. Advance the delivery-count by the remaining link-credit. 2. Set
        link-credit to 0. 3. Send a flow frame to the receiver." Returns that flow, or None when
        there is nothing to do: not draining, or a drain whose credit all went in transfers (it
        asked to "Either send a transfer or a flow frame" and the transfers answered it). A drain
        with no credit at all is answered by the flow alone (seed 004: "If the source queue is
        empty, RabbitMQ will promptly reply with only a flow frame"), once.
        """
        if not self.drain or (self.credit == 0 and not self.drain_unanswered):
            return None
        self.delivery_count = serial_add(self.delivery_count, self.credit)
        self.credit = 0
        self.drain_unanswered = False
        return self.state()

    def state(self) -> LinkFlow:
        return LinkFlow(self.credit, self.delivery_count, self.available, self.drain)


class ReceiverLink:
    """The receiving end of a link: it alone decides the link credit."""

    __slots__ = (
        "available",
        "counts_at_last_frame",
        "credit",
        "delivery_count",
        "drain",
        "mid_delivery",
        "name",
        "shrink_allowance",
    )

    def __init__(
        self, name: str, initial_delivery_count: int, *, counts_at_last_frame: bool = False
    ) -> None:
        _check_uint("initial-delivery-count", initial_delivery_count)
        self.name = name
        # When a delivery split over frames is counted: at its first frame, as its sender counts
        # it (Proton, on both ends), or at its last, as RabbitMQ's incoming links do (their
        # `more = true` frames only accumulate the message).
        self.counts_at_last_frame = counts_at_last_frame
        self.delivery_count = initial_delivery_count  # learned from the sender's attach
        self.credit = 0
        self.available = 0
        self.drain = False
        # Transfers the sender may still send under credit we have since lowered: seed 004,
        # "In-flight transfers can still arrive until the flow state is updated at the sender."
        self.shrink_allowance = 0
        # A delivery split over transfer frames has begun and its last frame is still to come.
        self.mid_delivery = False

    def grant(self, link_credit: int, *, drain: bool = False, echo: bool = False) -> LinkFlow:
        """Set the credit to ``link_credit``: seed 004, "Granting link credit is not cumulative"."""
        _check_uint("link-credit", link_credit)
        # Whatever the sender could still legally send stays acceptable (it may not have seen
        # this flow yet); the allowance is the part the new credit does not cover.
        could_still_send = self.credit + self.shrink_allowance
        self.shrink_allowance = max(0, could_still_send - link_credit)
        self.credit = link_credit
        self.drain = drain
        return LinkFlow(link_credit, self.delivery_count, self.available, drain, echo)

    def on_transfer(self, final: bool = True) -> None:
        """Count one received transfer frame; beyond every credit ever granted it is an error.

        ``final`` is False on every frame of a delivery but its last. The delivery is counted
        once, at its first frame or at its last (``counts_at_last_frame``); its sender counted
        it when it sent the first (:meth:`SenderLink.send_transfer`), so a flow the sender
        writes between two frames carries a count that includes it (:meth:`on_flow`).
        """
        first = not self.mid_delivery
        self.mid_delivery = not final
        if not (final if self.counts_at_last_frame else first):
            return
        if self.credit:
            self.credit -= 1
        elif self.shrink_allowance:
            self.shrink_allowance -= 1
        else:
            raise ProtocolError(
                LINK_TRANSFER_LIMIT_EXCEEDED,
                f"link {self.name!r}: transfer received without link credit",
            )
        self.delivery_count = serial_add(self.delivery_count, 1)

    def on_flow(self, flow: LinkFlow) -> None:
        """Apply the sender's state: a drain advanced delivery-count without transfers.

        Frames on a session arrive in order, so every transfer sent before this flow has been
        counted already; any further advance of delivery-count is credit the sender gave up.
        That advance is never negative and at most the credit granted (a uint, up to 2**32 - 1),
        so it is the forward serial distance modulo 2**32, as the sender counts what is in flight
        (:meth:`SenderLink.on_flow`): a drain of 2**31 or more credits is not an RFC-1982
        comparison (undefined or backwards at that distance) but a count.
        """
        if flow.delivery_count is None:
            raise ProtocolError(INVALID_FIELD, f"link {self.name!r}: sender flow without count")
        _check_uint("delivery-count", flow.delivery_count)
        delivery_count = flow.delivery_count
        if self.counts_at_last_frame and self.mid_delivery:
            # Written after the first frame of the message in progress: the sender has counted
            # it, this end counts it at its last frame.
            delivery_count = serial_add(delivery_count, SERIAL_MAX)  # minus 1, mod 2**32
        advanced = serial_distance(delivery_count, self.delivery_count)
        self.credit = max(0, self.credit - advanced)
        self.delivery_count = delivery_count
        self.available = flow.available


def transfer_frames(size_bytes: int, max_frame_size: int) -> int:
    """Transfer frames needed for one message: a large message is split across several frames.

    ``max_frame_size`` is taken as the payload per frame; frame and performative headers are not
    modelled. Even an empty message needs one frame.
    """
    if max_frame_size < MIN_MAX_FRAME_SIZE:
        raise ValueError(f"max_frame_size must be >= {MIN_MAX_FRAME_SIZE}, got {max_frame_size}")
    return max(1, -(-size_bytes // max_frame_size))


class SessionEndpoint:
    """One end of a session: windows counted in transfer frames (AMQP 1.0 §2.5.6)."""

    __slots__ = (
        "incoming_window",
        "initial_outgoing_id",
        "name",
        "next_incoming_id",
        "next_outgoing_id",
        "outgoing_window",
        "remote_incoming_window",
        "remote_outgoing_window",
        "shrink_allowance",
    )

    def __init__(
        self,
        name: str,
        *,
        incoming_window: int,
        outgoing_window: int = SERIAL_MAX,
        initial_outgoing_id: int = 0,
    ) -> None:
        _check_uint("incoming-window", incoming_window)
        _check_uint("outgoing-window", outgoing_window)
        self.name = name
        self.incoming_window = incoming_window
        self.outgoing_window = outgoing_window
        self.initial_outgoing_id = initial_outgoing_id
        self.next_outgoing_id = initial_outgoing_id
        self.next_incoming_id: int | None = None  # the peer's next-outgoing-id, from its begin
        self.remote_incoming_window = 0  # nothing may be sent before the peer's begin
        self.remote_outgoing_window = 0
        # Frames the peer may still send under a window we have since shrunk (see
        # set_incoming_window): they were legal when sent, so they are no violation.
        self.shrink_allowance = 0

    def begin(self) -> SessionFlow:
        return SessionFlow(None, self.incoming_window, self.next_outgoing_id, self.outgoing_window)

    def on_begin(self, peer: SessionFlow) -> None:
        self.next_incoming_id = peer.next_outgoing_id
        self.remote_incoming_window = peer.incoming_window
        self.remote_outgoing_window = peer.outgoing_window

    def state(self) -> SessionFlow:
        return SessionFlow(
            self.next_incoming_id,
            self.incoming_window,
            self.next_outgoing_id,
            self.outgoing_window,
        )

    def on_flow(self, peer: SessionFlow) -> None:
        """Apply the peer's session state (AMQP 1.0 §2.5.6).

        remote-incoming-window := next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id;
        as for link credit, the frames we sent that the peer had not yet counted are subtracted.
        """
        peer_next_incoming = (
            self.initial_outgoing_id if peer.next_incoming_id is None else peer.next_incoming_id
        )
        unseen_by_peer = serial_diff(self.next_outgoing_id, peer_next_incoming)
        if unseen_by_peer < 0:
            # The peer claims frames we never sent: its window cannot be computed (as for a
            # receiver delivery-count ahead of the sender's; RabbitMQ ends the session so).
            raise ProtocolError(
                SESSION_WINDOW_VIOLATION,
                f"session {self.name!r}: next-incoming-id {peer_next_incoming} leads "
                f"next-outgoing-id {self.next_outgoing_id}",
            )
        self.remote_incoming_window = max(0, peer.incoming_window - unseen_by_peer)
        if self.next_incoming_id is not None:
            unseen_by_us = serial_diff(peer.next_outgoing_id, self.next_incoming_id)
            self.remote_outgoing_window = max(0, peer.outgoing_window + unseen_by_us)

    def can_send(self, frames: int = 1) -> bool:
        return self.remote_incoming_window >= frames

    def send_frame(self) -> int:
        """Account for one outgoing transfer frame; returns its transfer-id."""
        if self.remote_incoming_window == 0:
            raise ProtocolError(
                SESSION_WINDOW_VIOLATION, f"session {self.name!r}: peer's incoming window is 0"
            )
        transfer_id = self.next_outgoing_id
        self.next_outgoing_id = serial_add(transfer_id, 1)
        self.remote_incoming_window -= 1
        return transfer_id

    def receive_frame(self) -> None:
        """Account for one incoming transfer frame; a frame beyond our window is a violation."""
        if self.next_incoming_id is None:
            raise ProtocolError(SESSION_WINDOW_VIOLATION, f"session {self.name!r}: not begun")
        if self.incoming_window:
            self.incoming_window -= 1
        elif self.shrink_allowance:
            self.shrink_allowance -= 1
        else:
            raise ProtocolError(
                SESSION_WINDOW_VIOLATION,
                f"session {self.name!r}: transfer frame beyond the incoming window",
            )
        self.next_incoming_id = serial_add(self.next_incoming_id, 1)
        if self.remote_outgoing_window:
            self.remote_outgoing_window -= 1

    def set_incoming_window(self, frames: int) -> SessionFlow:
        """Announce a new window; returns the flow that carries it.

        Shrinking (a broker closing the window on an alarm) cannot recall frames the peer already
        sent under the old window, so those stay acceptable until the peer has seen the flow. As
        for link credit, the room kept is all the peer could still send under any window it may
        be using (the current one plus what earlier shrinks kept), less the new window: setting
        the window again, or growing it, never takes back room a frame in flight may be using.
        """
        _check_uint("incoming-window", frames)
        could_still_send = self.incoming_window + self.shrink_allowance
        self.shrink_allowance = max(0, could_still_send - frames)
        self.incoming_window = frames
        return self.state()

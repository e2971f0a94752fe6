"""An independent, plain reference model of AMQP 1.0 link and session flow control and of
RabbitMQ's AMQP 1.0 credit policy, written only from /work/shared/DESIGN.md §2-§3 and seeds 002/004
("Ten Benefits of AMQP 1.0 Flow Control"). It does not import flowctl_core: the differential tests
in tests/engine/test_amqp10_differential.py drive the engine and this model with the same
operations and compare them.

What the documents state (quoted where it matters) is modelled as stated; where they are silent
an assumption is written down as A1, A2, ... next to the code that makes it:

- A1  The sender's credit is a uint: when the receiver lowers link-credit below the transfers
      still in flight, ``delivery_count_rcv + link_credit_rcv - delivery_count_snd`` is negative
      and the sender's credit is 0 (not the value modulo 2**32). The in-flight count itself is
      the forward serial distance ``delivery_count_snd - delivery_count_rcv`` modulo 2**32.
- A2  The receiver's credit is a uint too: a transfer that was in flight when the receiver lowered
      its credit still arrives ("In-flight transfers can still arrive until the flow state is
      updated at the sender") and leaves the receiver's credit at 0, not below.
- A3  A flow from the sender (drain answer or echo reply) carries the sender's link state: its
      current credit, delivery-count, available and drain (the last value it got from the
      receiver); it never sets echo itself ("RabbitMQ does not set this field").
- A4  The receiver applies a sender's flow by taking the sender's delivery-count: frames on a
      session arrive in order, so any advance beyond the transfers already counted is credit the
      sender gave up by draining; its own credit drops by that advance (at least to 0). It takes
      available from the sender ("available is set by the sender") and never takes link-credit
      from it ("it is always the receiver (and never the sender) that determines the current
      link credit").
- A5  A sender ignores the available field of the receiver's flows; a receiver's flow carries the
      last available it learnt from the sender (the documents give it no other value).
- A6  Drain: on a flow with drain=true, the sender owes the receiver "either a transfer or a flow
      frame". When the sender is done sending (``finish_drain``) with credit left, it advances
      delivery-count by that credit, sets credit 0 and sends a flow. With no credit left, a
      transfer sent since the drain request answered it (nothing more is sent); if none was
      sent (e.g. the drain arrived with no credit at all, "If the source queue is empty,
      RabbitMQ will promptly reply with only a flow frame") the flow is sent, once; an echo
      reply sent with no credit left is that flow (the drain is not answered twice).
- A7  Echo: the sender replies to a flow with echo=true with its state right after applying that
      flow (before any drain is finished).
- A8  Session: ``begin`` carries the endpoint's incoming-window and next-outgoing-id; the peer's
      window is then the whole incoming-window. A session flow sets the remote incoming window
      to ``next_incoming_id(peer) + incoming_window(peer) - next_outgoing_id`` (serial
      arithmetic, floored at 0 as in A1). Windows lowered below the frames in flight floor at 0
      on arrival, as in A2.
- A9  A message of ``size`` bytes takes ``max(1, ceil(size / max_frame_size))`` transfer frames
      (the documents give no frame overhead); each frame counts once against the window.
- A10 RabbitMQ's publisher top-up rule is checked after every transfer the session receives and
      after every confirm from the queue; "grants again 170" sets the link-credit to 170.
      "falls below half (i.e. 85)" / DESIGN "fallen to 85 or less" is ``credit <= max // 2``.
- A11 RabbitMQ's session window is checked after every transfer frame: when it has fallen to
      ``max // 2`` (200) it is set back to the maximum (400). While any memory or disk alarm is in
      effect the window is 0 and is never re-opened; when the last alarm clears it is set back
      to the maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

SERIAL_BITS = 32
SERIAL_MOD = 1 << SERIAL_BITS
SERIAL_MAX = SERIAL_MOD - 1  # "range from [0 .. 4,294,967,295] and wrap around"
HALF = 1 << (SERIAL_BITS - 1)


class ModelError(Exception):
    """An operation the documents forbid (e.g. sending a transfer without credit)."""


def serial_add(a: int, n: int) -> int:
    """RFC 1982 addition: "Adding 1 to 4,294,967,295 results in 0"."""
    return (a + n) % SERIAL_MOD


def serial_distance(frm: int, to: int) -> int:
    """Forward distance from ``frm`` to ``to`` modulo 2**32 (how far ``to`` is ahead)."""
    return (to - frm) % SERIAL_MOD


def serial_lt(a: int, b: int) -> bool:
    """RFC 1982 comparison; undefined (False both ways) exactly half the space apart."""
    d = serial_distance(a, b)
    return 0 < d < HALF


def check_uint(value: int) -> None:
    if not 0 <= value <= SERIAL_MAX:
        raise ModelError(f"not a uint: {value}")


# -- link flow control -------------------------------------------------------------------------
@dataclass(frozen=True)
class Flow:
    """The link fields of a flow frame (seed 004: link-credit, delivery-count, available, drain,
    echo)."""

    link_credit: int
    delivery_count: int
    available: int = 0
    drain: bool = False
    echo: bool = False


def sender_credit(delivery_count_rcv: int, link_credit_rcv: int, delivery_count_snd: int) -> int:
    """link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd).

    Seed 004: "Set the new link-credit to the link-credit I just received in the flow frame minus
    any in-flight deliveries." The in-flight count is serial (A1), the result a uint (A1).
    """
    in_flight = serial_distance(delivery_count_rcv, delivery_count_snd)
    return max(0, link_credit_rcv - in_flight)


class SenderModel:
    """The sending end: "The following link flow control fields are independently determined by
    the sender: delivery-count, available"."""

    def __init__(self, initial_delivery_count: int = 0) -> None:
        check_uint(initial_delivery_count)
        self.delivery_count = initial_delivery_count
        self.credit = 0  # nothing may be sent before the receiver's first flow
        self.available = 0
        self.drain = False
        self.drain_owed = False  # A6

    def state(self) -> Flow:  # A3
        return Flow(self.credit, self.delivery_count, self.available, self.drain, False)

    def on_flow(self, flow: Flow) -> Flow | None:
        # "the sender sets drain to the last known value from the receiver"
        self.drain = flow.drain
        self.credit = sender_credit(flow.delivery_count, flow.link_credit, self.delivery_count)
        self.drain_owed = flow.drain  # A6
        # A5: flow.available is ignored.
        if not flow.echo:
            return None
        if self.credit == 0:
            self.drain_owed = False  # A6: the echo reply is the flow that answers the drain
        return self.state()  # A7

    def send_transfer(self) -> None:
        # "When the sender's link credit reaches 0, it must stop sending messages."
        if self.credit <= 0:
            raise ModelError("transfer without credit")
        self.credit -= 1
        self.delivery_count = serial_add(self.delivery_count, 1)
        self.drain_owed = False  # A6: a transfer answers the drain

    def finish_drain(self) -> Flow | None:
        """Seed 004: "1. Advance the delivery-count by the remaining link-credit. 2. Set
        link-credit to 0. 3. Send a flow frame to the receiver."."""
        if not self.drain:
            return None
        if self.credit > 0:
            self.delivery_count = serial_add(self.delivery_count, self.credit)
            self.credit = 0
        elif not self.drain_owed:
            return None
        self.drain_owed = False
        return self.state()


class ReceiverModel:
    """The receiving end: "The following link flow control fields are independently determined
    by the receiver: link-credit, drain"."""

    def __init__(self, initial_delivery_count: int = 0) -> None:
        check_uint(initial_delivery_count)
        self.delivery_count = initial_delivery_count
        self.credit = 0
        self.available = 0
        self.drain = False

    def grant(self, link_credit: int, *, drain: bool = False, echo: bool = False) -> Flow:
        """ "Granting link credit is not cumulative ... the receiver sets the current credit to
        N instead of adding N more credits"."""
        check_uint(link_credit)
        self.credit = link_credit
        self.drain = drain
        return Flow(link_credit, self.delivery_count, self.available, drain, echo)  # A5

    def on_transfer(self) -> None:
        # "the receiver reduces link credit by 1 when it receives a message" / "the receiver
        # increments the delivery-count whenever it receives a message"; A2 for the floor.
        self.delivery_count = serial_add(self.delivery_count, 1)
        self.credit = max(0, self.credit - 1)

    def on_flow(self, flow: Flow) -> None:  # A4
        advance = serial_distance(self.delivery_count, flow.delivery_count)
        self.delivery_count = flow.delivery_count
        self.credit = max(0, self.credit - advance)
        self.available = flow.available


# -- session flow control ----------------------------------------------------------------------
@dataclass(frozen=True)
class SessionState:
    """The session fields of a flow (or begin) frame."""

    next_incoming_id: int | None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int


def transfer_frames(size_bytes: int, max_frame_size: int) -> int:
    """A9: "a large message is split into multiple transfer frames"."""
    return max(1, -(-size_bytes // max_frame_size))


class SessionModel:
    """One session endpoint: "Sessions provide a flow control scheme based on the number of
    transfer frames transmitted"."""

    def __init__(
        self, incoming_window: int, outgoing_window: int = SERIAL_MAX, initial_outgoing_id: int = 0
    ) -> None:
        check_uint(incoming_window)
        self.incoming_window = incoming_window
        self.outgoing_window = outgoing_window
        self.next_outgoing_id = initial_outgoing_id
        self.next_incoming_id: int | None = None
        self.remote_incoming_window = 0

    def state(self) -> SessionState:
        return SessionState(
            self.next_incoming_id, self.incoming_window, self.next_outgoing_id, self.outgoing_window
        )

    def begin(self) -> SessionState:
        return self.state()

    def on_begin(self, peer: SessionState) -> None:  # A8
        self.next_incoming_id = peer.next_outgoing_id
        self.remote_incoming_window = peer.incoming_window

    def on_flow(self, peer: SessionState) -> None:  # A8
        if peer.next_incoming_id is None:
            raise ModelError("flow without next-incoming-id")
        in_flight = serial_distance(peer.next_incoming_id, self.next_outgoing_id)
        self.remote_incoming_window = max(0, peer.incoming_window - in_flight)

    def can_send(self, frames: int = 1) -> bool:
        return self.remote_incoming_window >= frames

    def send_frame(self) -> int:
        if self.remote_incoming_window <= 0:
            raise ModelError("transfer frame outside the peer's incoming window")
        frame_id = self.next_outgoing_id
        self.next_outgoing_id = serial_add(self.next_outgoing_id, 1)
        self.remote_incoming_window -= 1
        return frame_id

    def receive_frame(self) -> None:
        if self.next_incoming_id is None:
            raise ModelError("frame before begin")
        self.next_incoming_id = serial_add(self.next_incoming_id, 1)
        self.incoming_window = max(0, self.incoming_window - 1)  # A8

    def set_incoming_window(self, frames: int) -> SessionState:
        check_uint(frames)
        self.incoming_window = frames
        return self.state()


# -- RabbitMQ policy (DESIGN §2, seed 004) -----------------------------------------------------
MAX_LINK_CREDIT = 170  # rabbit.max_link_credit
MAX_INCOMING_WINDOW = 400  # rabbit.max_incoming_window
MAX_QUEUE_CREDIT = 256  # rabbit.max_queue_credit


def publisher_top_up_due(credit: int, unconfirmed: int, max_link_credit: int) -> bool:
    """DESIGN §2: "topped up to 170 when credit has fallen to 85 or less and fewer than 170
    messages are unconfirmed" (A10)."""
    return credit <= max_link_credit // 2 and unconfirmed < max_link_credit


def max_unconfirmed(max_link_credit: int) -> int:
    """A top-up happens with at most ``max - 1`` unconfirmed and gives ``max`` credits (set, not
    added, so credit left over does not add): 2 x 170 - 1 = 339."""
    return 2 * max_link_credit - 1


class RabbitPublisherModel:
    """RabbitMQ's side (the receiver) of a publisher link."""

    def __init__(self, initial_delivery_count: int = 0, max_link_credit: int = MAX_LINK_CREDIT):
        self.max_link_credit = max_link_credit
        self.link = ReceiverModel(initial_delivery_count)
        self.unconfirmed = 0
        self.grants: list[Flow] = []

    def attach(self) -> Flow:
        """ "grants initially 170 link credits to the publisher"."""
        flow = self.link.grant(self.max_link_credit)
        self.grants.append(flow)
        return flow

    def _maybe_grant(self) -> Flow | None:  # A10
        if publisher_top_up_due(self.link.credit, self.unconfirmed, self.max_link_credit):
            flow = self.link.grant(self.max_link_credit)
            self.grants.append(flow)
            return flow
        return None

    def on_transfer(self) -> Flow | None:
        self.link.on_transfer()
        self.unconfirmed += 1  # "publisher confirms are always enabled" internally
        return self._maybe_grant()

    def on_confirm(self) -> Flow | None:
        if self.unconfirmed <= 0:
            raise ModelError("confirm without an unconfirmed message")
        self.unconfirmed -= 1
        return self._maybe_grant()


class RabbitSessionWindowModel:
    """RabbitMQ's incoming window for one session (A11)."""

    def __init__(self, max_incoming_window: int = MAX_INCOMING_WINDOW, alarmed: bool = False):
        self.max = max_incoming_window
        self.alarms: set[str] = set()
        self.window = max_incoming_window
        self.reopened = 0
        if alarmed:
            self.alarms.add("alarm")
            self.window = 0

    def on_frame(self) -> bool:
        """One transfer frame processed; True when the window is re-opened."""
        self.window = max(0, self.window - 1)
        if not self.alarms and self.window <= self.max // 2:
            self.window = self.max
            self.reopened += 1
            return True
        return False

    def raise_alarm(self, resource: str) -> None:
        """ "each session will close its incoming window by sending a flow frame with
        incoming_window = 0 to publishers"."""
        self.alarms.add(resource)
        self.window = 0

    def clear_alarm(self, resource: str) -> None:
        self.alarms.discard(resource)
        if not self.alarms:
            self.window = self.max


def queue_credit_ok(queue_credit: int, max_queue_credit: int = MAX_QUEUE_CREDIT) -> bool:
    """ "Even if the client grants a large number of link credits, the queue will only ever see
    up to 256 credits for a given consumer"."""
    return 0 <= queue_credit <= max_queue_credit

"""AMQP 1.0 link and session flow control (flowctl_core/protocols/amqp10.py, serial.py): the seeds'
sentences.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/): 002 =
002_8bfb94f9202e03aa.txt and 004 = 004_fc910a8b38581445.txt (RabbitMQ, "Ten Benefits of AMQP 1.0
Flow Control", prose and markdown of the same post). Moved from tests/test_seed_conformance.py and
tests/test_seed_conformance_links.py (provenance: the ``seed`` mark).
"""

from __future__ import annotations

import pytest

from flowctl_core.protocols.amqp10 import (
    SESSION_WINDOW_VIOLATION,
    LinkFlow,
    ProtocolError,
    ReceiverLink,
    SenderLink,
    SessionEndpoint,
    SessionFlow,
)
from flowctl_core.protocols.serial import SERIAL_MAX

pytestmark = pytest.mark.seed("004")


# -- AMQP 1.0 link flow control --------------------------------------------------------------------
def test_drain_of_a_huge_credit_leaves_both_ends_with_zero_credit() -> None:
    """004: "Grant a link-credit of 0 ... or a huge number of link credits (up to 4 billion)";
    draining: "Advance the delivery-count by the remaining link-credit. Set link-credit to 0.
    Send a flow frame to the receiver." The receiver must see its credit used up as well."""
    sender, receiver = SenderLink("l", 5), ReceiverLink("l", 5)
    sender.on_flow(receiver.grant(SERIAL_MAX, drain=True))
    sender.send_transfer()
    receiver.on_transfer()
    reply = sender.finish_drain()
    assert reply is not None
    assert (reply.delivery_count, reply.link_credit) == ((5 + SERIAL_MAX) % 2**32, 0)
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, reply.delivery_count)


@pytest.mark.parametrize("credit", [2**31 - 1, 2**31, 2**31 + 1, 3_000_000_000])
def test_drain_advance_of_half_the_serial_space_is_a_count_not_a_comparison(credit: int) -> None:
    """004: delivery-count values "are 32-bit RFC-1982 serial numbers that range from [0 ..
    4,294,967,295] and wrap around"; link-credit is a uint "(2^32 - 1)". A drain may advance the
    count by any uint credit."""
    sender, receiver = SenderLink("l", SERIAL_MAX - 3), ReceiverLink("l", SERIAL_MAX - 3)
    sender.on_flow(receiver.grant(credit, drain=True))
    reply = sender.finish_drain()
    assert reply is not None
    receiver.on_flow(reply)
    assert receiver.credit == 0
    assert receiver.delivery_count == (SERIAL_MAX - 3 + credit) % 2**32


def test_drain_wraps_delivery_count_past_4294967295() -> None:
    """004: "Adding 1 to 4,294,967,295 results in 0." - a drain of 10 from 4,294,967,290."""
    sender, receiver = SenderLink("l", 4_294_967_290), ReceiverLink("l", 4_294_967_290)
    sender.on_flow(receiver.grant(10, drain=True))
    for _ in range(2):
        sender.send_transfer()
        receiver.on_transfer()
    assert sender.delivery_count == 4_294_967_292
    reply = sender.finish_drain()
    assert reply is not None and reply.delivery_count == 4
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, 4)
    # A new grant after the wrap works from the wrapped count.
    sender.on_flow(receiver.grant(3))
    assert sender.credit == 3


def test_credit_formula_crossing_flow_after_the_wrap() -> None:
    """004: "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)";
    the seed's 20+6-21=5 shifted to straddle 2**32: (2**32 - 1) + 6 - 0 = 5."""
    sender, receiver = SenderLink("l", SERIAL_MAX), ReceiverLink("l", SERIAL_MAX)
    sender.on_flow(receiver.grant(3))
    flow = receiver.grant(6)
    assert flow.delivery_count == SERIAL_MAX
    sender.send_transfer()
    receiver.on_transfer()
    sender.on_flow(flow)
    assert (sender.delivery_count, sender.credit) == (0, 5)
    assert (receiver.delivery_count, receiver.credit) == (0, 5)


def test_flow_before_the_attach_uses_the_initial_delivery_count() -> None:
    """004: "The delivery-count is initialized by the sender, which sends its chosen value in the
    initial-delivery-count field of the attach frame." A receiver flow that carries no count yet
    is measured against that initial value."""
    sender = SenderLink("l", 10)
    sender.on_flow(LinkFlow(link_credit=4, delivery_count=None))
    assert sender.credit == 4
    sender.send_transfer()
    sender.on_flow(LinkFlow(link_credit=4, delivery_count=None))  # 10 + 4 - 11
    assert sender.credit == 3


def test_lowering_credit_below_the_transfers_in_flight_gives_zero_not_negative() -> None:
    """004: "The receiver is allowed to dynamically increase or decrease the amount of link
    credit"; link-credit is a uint: never negative."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    sender.on_flow(receiver.grant(10))
    for _ in range(4):
        sender.send_transfer()
    sender.on_flow(receiver.grant(2))  # 0 + 2 - 4 = -2 -> 0
    assert sender.credit == 0


# -- AMQP 1.0 link flow control: who owns which field ---------------------------------------------
def test_a_sender_flow_never_changes_the_receivers_link_credit() -> None:
    """004: "it is always the receiver (and never the sender) that determines the current link
    credit. The sender only "consumes" link credit granted by the receiver"."""
    sender, receiver = SenderLink("l", 7), ReceiverLink("l", 7)
    sender.on_flow(receiver.grant(5))
    sender.send_transfer()
    receiver.on_transfer()
    # A sender's flow (e.g. an echo reply) claiming more credit than granted changes nothing.
    receiver.on_flow(LinkFlow(link_credit=1_000, delivery_count=sender.delivery_count))
    assert receiver.credit == 4
    # Even a sender with a stale, larger credit view cannot raise it: only delivery-count moves.
    receiver.on_flow(LinkFlow(link_credit=SERIAL_MAX, delivery_count=sender.delivery_count))
    assert (receiver.credit, receiver.delivery_count) == (4, 8)


def test_available_is_set_by_the_sender_only() -> None:
    """004: "The following link flow control fields are independently determined by the sender:
    delivery-count, available"; "The available field could also be set by a publisher"."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    sender.available = 7
    grant = receiver.grant(3)
    sender.on_flow(LinkFlow(grant.link_credit, grant.delivery_count, available=123))
    assert sender.available == 7  # a receiver's available is no instruction to the sender
    receiver.on_flow(sender.state())
    assert receiver.available == 7


def test_the_sender_takes_drain_from_the_receivers_last_flow() -> None:
    """004: "The receiver decides whether drain mode is enabled, and the sender sets drain to the
    last known value from the receiver." / "By default, the drain field is set to false"."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    assert LinkFlow(1, 0).drain is False and LinkFlow(1, 0).echo is False
    sender.on_flow(receiver.grant(2, drain=True))
    assert sender.drain is True and sender.state().drain is True
    sender.on_flow(receiver.grant(2))
    assert sender.drain is False
    assert sender.finish_drain() is None  # not draining: the credit stays
    assert sender.credit == 2


def test_figure_2_45_grant_6_then_6_again_after_3_received_with_2_in_flight() -> None:
    """004: "the receiver might have granted 6 credits initially, and then sends another flow
    frame with link-credit = 6 to RabbitMQ whenever it has received 3 messages." With 5 sent and
    3 received, the sender computes 3 + 6 - 5 = 4 and both ends agree once the 2 arrive."""
    sender, receiver = SenderLink("l", 20), ReceiverLink("l", 20)
    sender.on_flow(receiver.grant(6))
    for _ in range(5):
        sender.send_transfer()
    for _ in range(3):
        receiver.on_transfer()
    flow = receiver.grant(6)
    assert flow.delivery_count == 23
    sender.on_flow(flow)
    assert (sender.credit, sender.delivery_count) == (4, 25)
    for _ in range(2):
        receiver.on_transfer()
    assert (receiver.credit, receiver.delivery_count) == (4, 25)


def test_session_window_computed_with_transfers_crossing_the_flow_across_the_wrap() -> None:
    """004: "next-incoming-id and next-outgoing-id are sequence numbers and serve the same purpose
    as the delivery-count in link flow control: they ensure that the windows are computed
    correctly on the other side when transfer frames are sent in parallel with flow frames."
    RabbitMQ starts its next-outgoing-id at 2**32 - 4, so 6 frames cross the wrap."""
    sender = SessionEndpoint("s", incoming_window=400, initial_outgoing_id=SERIAL_MAX - 3)
    receiver = SessionEndpoint("r", incoming_window=10)
    sender.on_begin(receiver.begin())
    receiver.on_begin(sender.begin())
    assert sender.remote_incoming_window == 10
    for _ in range(4):
        sender.send_frame()
        receiver.receive_frame()
    flow = receiver.set_incoming_window(10)  # next-incoming-id 0 (wrapped), window 10
    assert flow.next_incoming_id == 0
    for _ in range(2):
        sender.send_frame()  # in flight while the flow travels
    sender.on_flow(flow)
    assert sender.next_outgoing_id == 2
    assert sender.remote_incoming_window == 0 + 10 - 2


def test_a_flow_whose_next_incoming_id_leads_next_outgoing_id_is_a_window_violation() -> None:
    """004: next-incoming-id "serve[s] the same purpose as the delivery-count": a peer cannot have
    received frames that were never sent (RabbitMQ: "next-incoming-id from FLOW leads
    next-outgoing-id", session error window-violation)."""
    endpoint = SessionEndpoint("s", incoming_window=400)
    endpoint.on_begin(SessionFlow(None, 10, 0, SERIAL_MAX))
    endpoint.send_frame()
    with pytest.raises(ProtocolError) as error:
        endpoint.on_flow(SessionFlow(5, 10, 0, SERIAL_MAX))
    assert error.value.condition == SESSION_WINDOW_VIOLATION
    endpoint.on_flow(SessionFlow(1, 10, 0, SERIAL_MAX))  # caught up exactly: fine
    assert endpoint.remote_incoming_window == 10


# -- numbers: uint ranges and configurable RabbitMQ limits ---------------------------------------
def test_link_credit_and_windows_are_uints_up_to_4294967295() -> None:
    """004: "The type uint stands for unsigned integer, a value between 0 and a large number (2^32
    - 1)"; clients can "Grant ... a huge number of link credits (up to 4 billion)" or open the
    session incoming-window "widely (up to 4 billion)"."""
    receiver = ReceiverLink("l", 0)
    assert receiver.grant(SERIAL_MAX).link_credit == SERIAL_MAX
    for bad in (-1, SERIAL_MAX + 1):
        with pytest.raises(ProtocolError):
            receiver.grant(bad)
    endpoint = SessionEndpoint("s", incoming_window=SERIAL_MAX)
    assert endpoint.set_incoming_window(SERIAL_MAX).incoming_window == SERIAL_MAX
    with pytest.raises(ProtocolError):
        endpoint.set_incoming_window(SERIAL_MAX + 1)

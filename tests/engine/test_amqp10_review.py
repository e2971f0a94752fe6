"""AMQP 1.0 drains and serial delivery counts (flowctl_core/protocols/amqp10.py), for the points of
the AMQP review.

Each test quotes the seed or DESIGN.md sentence it enforces (seed files in /work/shared/seeds/:
004 = 004_fc910a8b38581445.txt, RabbitMQ's "Ten Benefits of AMQP 1.0 Flow Control"). Moved from
tests/test_amqp_seed_review.py (provenance: the ``review`` mark).
"""

from __future__ import annotations

import pytest

from flowctl_core.protocols.amqp10 import LinkFlow, ProtocolError, ReceiverLink, SenderLink
from flowctl_core.protocols.serial import SERIAL_MAX

pytestmark = pytest.mark.review


# -- 4. a drain is always answered: by transfers, or else by a flow frame --------------------------
def test_a_drain_with_no_credit_is_answered_by_one_flow() -> None:
    """004: "By setting the drain field to true, the consumer requests RabbitMQ to "Either send a
    transfer or a flow frame."" With no credit no transfer can answer, so a flow frame must -
    once: the answered request asks for nothing more."""
    sender, receiver = SenderLink("l", 9), ReceiverLink("l", 9)
    sender.on_flow(receiver.grant(0, drain=True))
    reply = sender.finish_drain()
    assert reply is not None
    assert (reply.link_credit, reply.delivery_count, reply.drain) == (0, 9, True)
    assert sender.finish_drain() is None


def test_a_drain_used_up_by_transfers_needs_no_closing_flow() -> None:
    """004: the drain asks to "Either send a transfer or a flow frame", and the flow that exhausts
    the credit is due only "If there are not enough messages to send": "the sender must still
    exhaust all link credit as follows: ... Send a flow frame to the receiver." A drain whose
    credit all went in transfers has been answered by them."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    sender.on_flow(receiver.grant(3, drain=True))
    for _ in range(3):
        sender.send_transfer()
        receiver.on_transfer()
    assert sender.finish_drain() is None
    assert (receiver.credit, receiver.delivery_count) == (0, 3)


def test_an_echoed_drain_with_no_credit_gets_one_flow_not_two() -> None:
    """004: "The consumer can set the echo field to request RabbitMQ to reply with a flow frame";
    that flow also answers a drain with no credit ("Either send a transfer or a flow frame")."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    assert sender.on_flow(receiver.grant(0, drain=True, echo=True)) is not None
    assert sender.finish_drain() is None


# -- 5. delivery-count distances are serial (mod 2**32) at both ends, also for huge drains ---------
@pytest.mark.parametrize("drained", [2**31 - 1, 2**31, 2**31 + 9, SERIAL_MAX - 1])
def test_a_flow_crossing_a_huge_drain_across_the_wrap(drained: int) -> None:
    """004: delivery-count values "are 32-bit RFC-1982 serial numbers that range from
    [0 .. 4,294,967,295] and wrap around: Adding 1 to 4,294,967,295 results in 0"; the sender
    computes "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)";
    a client may grant "a huge number of link credits (up to 4 billion)" and add "drain=true".
    A drain of ``drained`` credits, crossed by a new grant of 5 sent before the drain's flow
    arrived, leaves both ends with credit 0 and the same delivery-count; the next grant works."""
    start = SERIAL_MAX - 4
    sender, receiver = SenderLink("l", start), ReceiverLink("l", start)
    sender.on_flow(receiver.grant(drained + 1, drain=True))
    sender.send_transfer()
    receiver.on_transfer()
    reply = sender.finish_drain()
    assert reply is not None
    crossing = receiver.grant(5)  # sent before the drain's flow reached the receiver
    sender.on_flow(crossing)
    receiver.on_flow(reply)
    expected = (start + 1 + drained) % 2**32
    assert (sender.credit, sender.delivery_count) == (0, expected)
    assert (receiver.credit, receiver.delivery_count) == (0, expected)
    sender.on_flow(receiver.grant(7))
    assert sender.credit == 7


@pytest.mark.parametrize("start", [10, SERIAL_MAX])
def test_a_receiver_delivery_count_ahead_of_the_sender_is_still_an_error(start: int) -> None:
    """The formula "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) -
    delivery-count(snd)" presumes the receiver counts only what the sender sent (004: "the sender
    ... only "consumes" link credit granted by the receiver"): a receiver delivery-count the
    sender never reached - also just past the wrap - is rejected, as is one that goes back."""
    sender = SenderLink("l", start)
    sender.on_flow(LinkFlow(3, start))
    sender.send_transfer()
    ahead = (start + 2) % 2**32
    with pytest.raises(ProtocolError):
        sender.on_flow(LinkFlow(3, ahead))
    sender.on_flow(LinkFlow(3, (start + 1) % 2**32))
    with pytest.raises(ProtocolError):
        sender.on_flow(LinkFlow(3, start))  # behind what the receiver reported already


# -- 6. a delivery split over frames is counted once, at its first frame, at both ends ------------
def test_a_flow_between_the_frames_of_one_delivery_leaves_both_counts_equal() -> None:
    """004: the sender computes "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) -
    delivery-count(snd)", so both ends must count a delivery alike. The sender counts a message
    when it sends its first transfer frame; a flow it writes before the message's last frame
    (an echo's reply) carries that count. Counted by the receiver at the last frame, the flow
    read as a credit given up and the last frame counted the message again: the receiver's
    delivery-count ran ahead and the next grant set the sender's credit to 0 ("transfer received
    without link credit" on a legal scenario, found by an audit)."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    sender.on_flow(receiver.grant(2, echo=True))
    sender.send_transfer()  # message 1, frame 1 of 3
    receiver.on_transfer(final=False)
    assert (receiver.credit, receiver.delivery_count) == (1, 1)
    receiver.on_flow(sender.state())  # the echo's reply, between two frames of message 1
    receiver.on_transfer(final=False)
    receiver.on_transfer(final=True)
    assert (receiver.credit, receiver.delivery_count) == (sender.credit, sender.delivery_count)
    sender.on_flow(receiver.grant(2))
    assert sender.credit == 2
    for final in (False, True, True):  # message 2 in two frames, message 3 in one
        if not receiver.mid_delivery:
            sender.send_transfer()
        receiver.on_transfer(final=final)
    assert (receiver.credit, receiver.delivery_count) == (0, 3)
    assert (sender.credit, sender.delivery_count) == (0, 3)
    with pytest.raises(ProtocolError):
        receiver.on_transfer()  # a fourth message: no credit left


def test_a_receiver_counting_at_the_last_frame_reads_a_flow_between_frames_the_same() -> None:
    """RabbitMQ's incoming (publisher) links count a message at its last frame (their earlier
    frames only accumulate it), while the sending client counts it at its first: a flow the
    client writes in between (its available changed) includes the message in progress, which is
    no credit given up. Both ends agree once the last frame is in."""
    sender = SenderLink("l", 0)
    receiver = ReceiverLink("l", 0, counts_at_last_frame=True)
    sender.on_flow(receiver.grant(3))
    sender.send_transfer()  # message 1, frame 1 of 2
    receiver.on_transfer(final=False)
    assert (receiver.credit, receiver.delivery_count) == (3, 0)  # not counted yet
    sender.available = 5
    receiver.on_flow(sender.state())
    assert (receiver.credit, receiver.available) == (3, 5)
    receiver.on_transfer(final=True)
    assert (receiver.credit, receiver.delivery_count) == (2, 1)
    assert (sender.credit, sender.delivery_count) == (2, 1)
    sender.on_flow(receiver.grant(3))
    assert sender.credit == 3

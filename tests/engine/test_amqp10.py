"""AMQP 1.0 link and session flow control, quoting seeds 002/004, plus property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowctl_core.protocols.amqp10 import (
    LINK_TRANSFER_LIMIT_EXCEEDED,
    SESSION_WINDOW_VIOLATION,
    LinkFlow,
    ProtocolError,
    ReceiverLink,
    SenderLink,
    SessionEndpoint,
    transfer_frames,
)
from flowctl_core.protocols.serial import (
    SERIAL_MAX,
    SerialError,
    serial_add,
    serial_diff,
    serial_gt,
    serial_lt,
)


def attached(initial_delivery_count: int = 0) -> tuple[SenderLink, ReceiverLink]:
    return SenderLink("l", initial_delivery_count), ReceiverLink("l", initial_delivery_count)


def test_granting_link_credit_is_not_cumulative() -> None:
    # Seed 004: "if a receiver sends two flow frames with link-credit = 50 without any messages
    # being transferred in between, the receiver will have 50 credits, not 100."
    sender, receiver = attached()
    sender.on_flow(receiver.grant(50))
    sender.on_flow(receiver.grant(50))
    assert (receiver.credit, sender.credit) == (50, 50)


def test_delivery_count_example_20_plus_6_minus_21_is_5() -> None:
    # Seed 004: delivery-count 20, credit 3; flow(delivery-count = 20, link-credit = 6) crosses a
    # transfer: "link-credit = 20+6-21 = 5 (above formula)" on both sides.
    sender, receiver = attached(20)
    sender.on_flow(receiver.grant(3))
    flow = receiver.grant(6)  # in flight towards the sender...
    sender.send_transfer()  # ...while the sender sends a transfer
    receiver.on_transfer()
    sender.on_flow(flow)
    assert (sender.delivery_count, sender.credit) == (21, 5)
    assert (receiver.delivery_count, receiver.credit) == (21, 5)


def test_drain_with_fewer_messages_than_credit() -> None:
    # Seed 004: "Advance the delivery-count by the remaining link-credit. Set link-credit to 0.
    # Send a flow frame to the receiver."
    sender, receiver = attached(7)
    sender.on_flow(receiver.grant(10, drain=True))
    for _ in range(3):  # only three messages available
        sender.send_transfer()
        receiver.on_transfer()
    reply = sender.finish_drain()
    assert reply is not None
    assert (reply.delivery_count, reply.link_credit) == (7 + 10, 0)
    receiver.on_flow(reply)
    assert (receiver.delivery_count, receiver.credit) == (17, 0)
    assert sender.finish_drain() is None  # nothing left to drain


def test_a_transfer_past_a_lowered_credit_is_counted_in_flight_by_both_ends() -> None:
    # RabbitMQ's session forwards a message it had taken off the queue after the receiver cut
    # its credit to 0: the receiver's allowance takes it, and the sender's next credit leaves it
    # out (seed 004: "In-flight transfers can still arrive until the flow state is updated").
    sender, receiver = attached()
    sender.on_flow(receiver.grant(2))
    sender.send_transfer()
    with pytest.raises(ValueError, match="1 credit left"):
        sender.send_transfer_past_credit()  # with credit, a transfer spends it
    flow = receiver.grant(0)
    sender.on_flow(flow)  # one transfer in flight, credit 0 - 1: none
    assert sender.credit == 0
    sender.send_transfer_past_credit()
    receiver.on_transfer()
    receiver.on_transfer()  # the second within the allowance of the credit it cut
    assert (sender.delivery_count, receiver.delivery_count, receiver.credit) == (2, 2, 0)
    sender.on_flow(receiver.grant(3))
    assert sender.credit == 3


def test_echo_asks_for_a_flow_reply() -> None:
    # Seed 004: "The consumer can set the echo field to request RabbitMQ to reply with a flow".
    sender, receiver = attached()
    sender.available = 4
    assert sender.on_flow(receiver.grant(5)) is None
    reply = sender.on_flow(receiver.grant(0, echo=True))  # stop the link, and confirm it
    assert reply == LinkFlow(0, 0, 4, False)


def test_delivery_count_wraps_at_4294967295() -> None:
    # Seed 004: "Adding 1 to 4,294,967,295 results in 0."; the sender may start at 4,294,967,295.
    assert serial_add(4_294_967_295, 1) == 0
    sender, receiver = attached(4_294_967_295)
    sender.on_flow(receiver.grant(6))
    flow = receiver.grant(6)
    for _ in range(2):
        sender.send_transfer()
    assert sender.delivery_count == 1
    sender.on_flow(flow)  # 4,294,967,295 + 6 - 1, modulo 2**32
    assert sender.credit == 4


def test_transfer_without_credit_is_a_protocol_error() -> None:
    sender, receiver = attached()
    with pytest.raises(ProtocolError) as error:
        sender.send_transfer()  # "RabbitMQ is not allowed to start sending ... until ... flow"
    assert error.value.condition == LINK_TRANSFER_LIMIT_EXCEEDED
    with pytest.raises(ProtocolError):
        receiver.on_transfer()


def test_transfers_in_flight_when_a_link_is_stopped_still_arrive() -> None:
    # Seed 004 (figure 2.46): flow(link-credit=0, echo=True): "(1) In-flight transfers can still
    # arrive until the flow state is updated at the sender. (2) At this point no further
    # transfers will arrive."
    sender, receiver = attached()
    sender.on_flow(receiver.grant(2))
    sender.send_transfer()
    stop = receiver.grant(0, echo=True)
    receiver.on_transfer()  # (1): sent under the old credit, accepted
    reply = sender.on_flow(stop)
    assert reply is not None and reply.link_credit == 0 and sender.credit == 0
    receiver.on_transfer()  # the sender's view allowed one more before it saw the stop...
    with pytest.raises(ProtocolError):
        receiver.on_transfer()  # ...but never more than was ever granted


def test_serial_comparison_is_undefined_half_the_space_apart() -> None:
    assert serial_lt(SERIAL_MAX, 0) and serial_gt(0, SERIAL_MAX)
    with pytest.raises(SerialError):
        serial_diff(0, 1 << 31)


def test_large_message_is_split_by_max_frame_size() -> None:
    # Seed 004: "if the negotiated max-frame-size ... is very low and a single message is very
    # large ... the sender might still be blocked by session flow control".
    assert transfer_frames(0, 512) == 1
    assert transfer_frames(1025, 512) == 3
    client = SessionEndpoint("c", incoming_window=100)
    server = SessionEndpoint("s", incoming_window=2)
    client.on_begin(server.begin())
    server.on_begin(client.begin())
    assert not client.can_send(transfer_frames(1025, 512))


def test_session_window_and_violation() -> None:
    client = SessionEndpoint("c", incoming_window=100, initial_outgoing_id=SERIAL_MAX)
    server = SessionEndpoint("s", incoming_window=2)
    client.on_begin(server.begin())
    server.on_begin(client.begin())
    assert [client.send_frame(), client.send_frame()] == [SERIAL_MAX, 0]  # ids wrap too
    assert not client.can_send()
    server.receive_frame()
    flow = server.set_incoming_window(3)  # re-opened while one frame is still in flight
    client.on_flow(flow)
    assert client.remote_incoming_window == 2  # 3 minus the frame the server has not seen
    server.receive_frame()
    server.receive_frame()
    server.receive_frame()
    with pytest.raises(ProtocolError) as error:
        server.receive_frame()
    assert error.value.condition == SESSION_WINDOW_VIOLATION


serials = st.integers(0, SERIAL_MAX)
near_wrap = st.integers(SERIAL_MAX - 1000, SERIAL_MAX) | st.integers(0, 1000) | serials


@given(near_wrap, st.integers(0, (1 << 31) - 1))
def test_serial_arithmetic_agrees_with_plain_integers(start: int, step: int) -> None:
    advanced = serial_add(start, step)
    assert advanced == (start + step) % (1 << 32)
    assert serial_diff(advanced, start) == step
    assert serial_diff(start, advanced) == -step
    assert serial_lt(start, advanced) == (step > 0)


@given(
    near_wrap,
    st.lists(
        st.one_of(
            st.tuples(st.just("grant"), st.integers(0, 300)),
            st.tuples(st.just("send"), st.integers(0, 20)),
            st.tuples(st.just("deliver"), st.integers(0, 20)),
        ),
        max_size=40,
    ),
)
def test_credit_is_never_negative_and_no_transfer_goes_without_credit(
    initial: int, actions: list[tuple[str, int]]
) -> None:
    """Flows and transfers cross on the wire in any order; neither end ever over-runs."""
    sender, receiver = attached(initial)
    to_sender: list[LinkFlow] = []
    in_flight = 0
    for action, amount in actions:
        if action == "grant":
            to_sender.append(receiver.grant(amount))
        elif action == "send":
            for _ in range(amount):
                if sender.credit == 0:
                    break
                sender.send_transfer()
                in_flight += 1
            if to_sender:
                sender.on_flow(to_sender.pop(0))
        else:
            for _ in range(min(amount, in_flight)):
                receiver.on_transfer()  # raises if the sender ever sent without credit
                in_flight -= 1
        assert sender.credit >= 0 and receiver.credit >= 0
        # The sender never sends more than the receiver will accept.
        assert sender.credit + in_flight <= receiver.credit + receiver.shrink_allowance

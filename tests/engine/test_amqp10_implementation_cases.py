"""AMQP 1.0 link-credit cases from the protocol implementations' own test suites, on our engine.

Each test is named after the upstream case it mirrors and says, in a comment, which test it comes
from and which fact it checks. Only the facts (inputs and expected outcomes) are carried over; the
code is ours and uses our engine's API:

- Proton: apache/qpid-proton ``python/tests/proton_tests/engine.py`` (``CreditTest``,
  ``SessionCreditTest``). Proton's ``Receiver.flow(n)`` *adds* n to the receiver's credit and sends
  the resulting total on the wire; our ``ReceiverLink.grant`` takes that total (the wire value:
  DESIGN.md §2, "link credit is set, not added"). Proton's receiver spends a credit when the
  application advances past a delivery; ours when the transfer is counted (``on_transfer``).
- RabbitMQ: rabbitmq/rabbitmq-server ``deps/rabbit/test/amqp_client_SUITE.erl`` against our
  RabbitMQ model (``Amqp10Connection``); message counts are scaled down where the upstream number
  only makes the run longer (they stay above the 256-credit queue cap where that matters).

Not repeated here, because existing tests check the same facts: Proton testPartialDrain
(test_drain_with_fewer_messages_than_credit), testNegative / testPushback
(test_transfer_without_credit_is_a_protocol_error), RabbitMQ resource_alarm_after_session_begin
(test_an_alarm_does_not_reopen_the_window_at_200_and_consumers_still_receive).
"""

from __future__ import annotations

import json

import pytest

from flowctl_core.protocols.amqp10 import ReceiverLink, SenderLink, SessionEndpoint
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
    publisher_credit_due,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection, ClientConsumerLink
from schemas.broker_events import AMQP_1_0
from tests.engine.helpers import Rabbit

pytestmark = pytest.mark.implementation_case

SETTLE_US = 10_000  # long enough on the virtual clock for every frame in flight to arrive


def link_pair(initial_delivery_count: int = 0) -> tuple[SenderLink, ReceiverLink]:
    return SenderLink("l", initial_delivery_count), ReceiverLink("l", initial_delivery_count)


def deliver(sender: SenderLink, receiver: ReceiverLink, count: int = 1) -> None:
    for _ in range(count):
        sender.send_transfer()
        receiver.on_transfer()


# -- qpid-proton engine tests --------------------------------------------------------------------
def test_proton_credit_test_credit_sender() -> None:
    # Proton CreditTest.testCreditSender: a new link gives the sender 0 credit; flow(10) gives it
    # 10; flow(1024) more with nothing sent in between gives it exactly 10 + 1024.
    sender, receiver = link_pair()
    assert sender.credit == 0
    sender.on_flow(receiver.grant(10))
    assert sender.credit == 10
    sender.on_flow(receiver.grant(receiver.credit + 1024))
    assert sender.credit == 10 + 1024


def test_proton_credit_test_credit_receiver() -> None:
    # Proton CreditTest.testCreditReceiver: after flow(10) the receiver holds 10 credits and one
    # delivery received (and consumed) leaves it 9.
    sender, receiver = link_pair()
    sender.on_flow(receiver.grant(10))
    assert receiver.credit == 10
    deliver(sender, receiver)
    assert (receiver.credit, sender.credit) == (9, 9)


def test_proton_credit_test_full_drain() -> None:
    # Proton CreditTest.testFullDrain: drain(10) with nothing to send. The receiver holds 10 until
    # the sender's answer arrives; the sender sees 10, drains to 0; the receiver ends with 0 and
    # the delivery-count advanced by the 10 drained credits (drained() == 10).
    sender, receiver = link_pair()
    request = receiver.grant(10, drain=True)
    assert (receiver.credit, receiver.drain, sender.credit) == (10, True, 0)
    sender.on_flow(request)
    assert (receiver.credit, sender.credit) == (10, 10)
    reply = sender.finish_drain()
    assert reply is not None and sender.credit == 0
    assert receiver.credit == 10  # the reply has not reached the receiver yet
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, 10)


def test_proton_credit_test_drain_flow() -> None:
    # Proton CreditTest.testDrainFlow: after a full drain, a plain flow(10) gives the sender 10;
    # the sender "drained()" call without drain mode changes nothing, on either side.
    sender, receiver = link_pair()
    sender.on_flow(receiver.grant(10, drain=True))
    reply = sender.finish_drain()
    assert reply is not None
    receiver.on_flow(reply)
    assert (sender.credit, receiver.credit) == (0, 0)
    sender.on_flow(receiver.grant(10))
    assert (sender.credit, receiver.credit) == (10, 10)
    assert sender.finish_drain() is None  # not draining: nothing is given up
    assert (sender.credit, receiver.credit, receiver.delivery_count) == (10, 10, 10)


def test_proton_credit_test_drain_zero() -> None:
    # Proton CreditTest.testDrainZero: flow(10), then drained() outside drain mode keeps 10;
    # drain(0) (drain mode, no extra credit: the total stays 10) lets the sender drain its 10;
    # once the answer arrives the receiver has 0 credit and 10 drained, nothing queued.
    sender, receiver = link_pair()
    sender.on_flow(receiver.grant(10))
    assert sender.finish_drain() is None
    assert (sender.credit, receiver.credit) == (10, 10)
    sender.on_flow(receiver.grant(receiver.credit, drain=True))
    assert (sender.credit, receiver.credit) == (10, 10)
    reply = sender.finish_drain()
    assert reply is not None
    assert (sender.credit, receiver.credit) == (0, 10)
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, 10)


def test_proton_credit_test_drain_order() -> None:
    # Proton CreditTest.testDrainOrder (PROTON-401): drain works whatever the ordering.
    # (1) 10 credits, one transfer sent but not yet counted by the receiver when it asks to drain
    #     (drain(0): the total it sends is still 10): the sender has 9, drains them after it; the
    #     receiver ends at 0 once both the transfer and the answer have arrived.
    sender, receiver = link_pair()
    sender.on_flow(receiver.grant(10))
    sender.send_transfer()  # "A", in flight
    assert sender.finish_drain() is None  # sender says drained, but no drain was asked
    sender.on_flow(receiver.grant(receiver.credit, drain=True))
    assert (sender.credit, receiver.credit) == (9, 10)
    receiver.on_transfer()  # "A" arrives
    assert receiver.credit == 9
    reply = sender.finish_drain()
    assert reply is not None
    receiver.on_flow(reply)
    assert (sender.credit, receiver.credit) == (0, 0)
    assert receiver.delivery_count == sender.delivery_count == 10
    # (2) A drain is answered only after the sender's pending messages: 10 credits, "B" sent,
    #     drain asked, "C" sent, then drained: the sender has 0 and the receiver, which has not
    #     counted B and C yet, still 2; once it has, 0.
    sender.on_flow(receiver.grant(10))
    sender.send_transfer()  # "B"
    assert (sender.credit, receiver.credit) == (9, 10)
    sender.on_flow(receiver.grant(receiver.credit, drain=True))
    assert sender.credit == 9
    sender.send_transfer()  # "C"
    assert sender.credit == 8
    reply = sender.finish_drain()
    assert reply is not None and sender.credit == 0
    assert receiver.credit == 10  # B, C and the answer are still on the wire
    # The frames of a session arrive in order: B, C, then the answering flow.
    receiver.on_transfer()
    receiver.on_transfer()
    assert receiver.credit == 8
    receiver.on_flow(reply)
    assert (sender.credit, receiver.credit) == (0, 0)
    assert receiver.delivery_count == sender.delivery_count == 20


def test_proton_session_credit_test_credit_with_buffering() -> None:
    # Proton SessionCreditTest.testCreditWithBuffering: flow(128); the sender spends all 128 while
    # the session's incoming capacity holds part of them back; the receiver then adds 1 credit
    # (flow(1)) and the sender gets exactly 1: the deliveries still held back count against it.
    sender, receiver = link_pair()
    sending = SessionEndpoint("snd", incoming_window=1_000)
    receiving = SessionEndpoint("rcv", incoming_window=64)  # room for 64 transfer frames
    sending.on_begin(receiving.begin())
    receiving.on_begin(sending.begin())
    sender.on_flow(receiver.grant(128))
    held_back = 0
    while sender.credit:
        sender.send_transfer()
        if sending.can_send():
            sending.send_frame()
            receiving.receive_frame()
            receiver.on_transfer()
        else:
            held_back += 1  # waits in the sender's session for window
    assert sender.delivery_count == 128 and 0 < held_back < 128
    assert receiver.credit == held_back
    sender.on_flow(receiver.grant(receiver.credit + 1))
    assert sender.credit == 1


# -- RabbitMQ amqp_client_SUITE ------------------------------------------------------------------
def _consumer(
    rabbit: Rabbit, credit: int, **config: object
) -> tuple[Amqp10Connection, ClientConsumerLink]:
    connection = rabbit.connect(
        consumers=(ConsumerConfig("c1", "q", credit=credit, top_up_below=0),), **config
    )
    return connection, connection.consumers["c1"]


def test_rabbitmq_roundtrip_with_drain() -> None:
    # amqp_client_SUITE roundtrip_with_drain: one message in the queue, the receiver grants 1
    # credit with drain=true and gets it; a message published afterwards is not delivered (the
    # credit was used, and the drain left none).
    rabbit = Rabbit(prefill=1)
    connection, client = _consumer(rabbit, 1)
    client.grant(1, drain=True)
    rabbit.run_for(SETTLE_US)
    assert client.received == 1
    rabbit.fill(1)
    rabbit.run_for(SETTLE_US)
    assert client.received == 1 and rabbit.queue.depth_msgs == 1
    assert (client.link.credit, connection.server.consumers["c1"].link.credit) == (0, 0)


def test_rabbitmq_drain_many() -> None:
    # amqp_client_SUITE drain_many (5000 messages there, 600 here; still above the 256 queue
    # credits): drain with Num - 1 credits delivers Num - 1; drain with Num delivers the last one
    # and uses up the rest; Num new messages are then not delivered; flows of 0, 1, Num/2, Num and
    # Num with drain in a row end with all Num delivered; one more is not delivered; a drain of
    # 2,000,000,000 credits delivers it and leaves the receiver with no credit.
    num = 600
    rabbit = Rabbit(prefill=num)
    connection, client = _consumer(rabbit, num - 1, client_incoming_window=10_000)
    server = connection.server.consumers["c1"]
    client.grant(num - 1, drain=True)
    rabbit.run_for(SETTLE_US)
    assert client.received == num - 1
    client.grant(num, drain=True)
    rabbit.run_for(SETTLE_US)
    assert client.received == num and rabbit.queue.depth_msgs == 0
    assert (client.link.credit, server.link.credit) == (0, 0)
    rabbit.fill(num)
    rabbit.run_for(SETTLE_US)
    assert client.received == num
    for credit, drain in ((0, False), (1, False), (num // 2, False), (num, False), (num, True)):
        client.grant(credit, drain=drain)
    rabbit.run_for(10 * SETTLE_US)
    assert client.received == 2 * num and rabbit.queue.depth_msgs == 0
    rabbit.fill(1)
    rabbit.run_for(SETTLE_US)
    assert client.received == 2 * num and rabbit.queue.depth_msgs == 1
    before = client.link.delivery_count
    client.grant(2_000_000_000, drain=True)
    rabbit.run_for(SETTLE_US)
    assert client.received == 2 * num + 1
    assert (client.link.credit, server.link.credit) == (0, 0)  # credit_exhausted
    assert client.link.delivery_count == (before + 2_000_000_000) % 2**32
    assert server.link.delivery_count == client.link.delivery_count
    assert connection.server.error is None


def _echo_attach(client: ClientConsumerLink, credit: int) -> None:
    """Make the consumer's first flow (sent at attach) grant ``credit`` with echo=true."""

    def attach() -> None:
        client.grant(credit, echo=True)

    client.attach = attach  # type: ignore[method-assign]


def test_rabbitmq_available_messages_drain_reports_none_left() -> None:
    # amqp_client_SUITE available_messages: with 2 messages ready, a flow granting 99 credits
    # with drain=true delivers both and RabbitMQ's answering flow reports available = 0.
    rabbit = Rabbit(prefill=2)
    _connection, client = _consumer(rabbit, 1)
    rabbit.run_for(SETTLE_US)
    assert client.received == 1
    client.grant(99, drain=True)
    rabbit.run_for(SETTLE_US)
    assert client.received == 2
    assert (client.link.available, client.link.credit) == (0, 0)


def test_rabbitmq_available_messages_echo_after_credit() -> None:
    # amqp_client_SUITE available_messages: 4 messages ready, the receiver's first flow grants 1
    # credit with echo=true; it gets 1 message and RabbitMQ's flow reports available = 3. Later,
    # with 5001 messages ready, flow(credit=0) then flow(credit=1, echo=true) must report 5000
    # (the same ordering; not repeated here). The reply comes after the transfer: its state is
    # the one the granted credit left.
    rabbit = Rabbit(prefill=4)
    consumer = ConsumerConfig("c1", "q", credit=1, top_up_below=0)
    connection = Amqp10Connection(
        rabbit.broker, ConnectionConfig("c", AMQP_1_0, consumers=(consumer,))
    )
    client = connection.consumers["c1"]
    _echo_attach(client, 1)
    connection.start()
    rabbit.run_for(SETTLE_US)
    assert client.received == 1
    assert (client.link.available, client.link.credit) == (3, 0)


def test_rabbitmq_resource_alarm_before_session_begin() -> None:
    # amqp_client_SUITE resource_alarm_before_session_begin: with a memory alarm in effect when
    # the session begins, the publisher still gets link credit (the target queue is fine) but
    # RabbitMQ's incoming window lets no transfer through; adding a disk alarm, then clearing the
    # memory alarm, still lets nothing through; once every alarm is cleared it can send.
    rabbit = Rabbit()
    rabbit.broker.raise_alarm("memory")
    connection = rabbit.connect(publishers=(PublisherConfig("p", "q", size_bytes=100),))
    publisher = connection.publishers["p"]
    rabbit.run_for(SETTLE_US)
    assert publisher.link.credit == 170  # link flow control grants ...
    assert connection.client_session.remote_incoming_window == 0  # ... session flow control not
    assert publisher.app.sent == 0
    rabbit.broker.raise_alarm("disk")
    rabbit.run_for(SETTLE_US)
    rabbit.broker.clear_alarm("memory")
    rabbit.run_for(SETTLE_US)
    assert publisher.app.sent == 0 and connection.client_session.remote_incoming_window == 0
    rabbit.broker.clear_alarm("disk")
    rabbit.run_for(SETTLE_US)
    assert publisher.app.sent > 0 and rabbit.queue.stats.enqueued > 0
    assert connection.server.error is None
    # The log says the session began closed, so the blocking read off it starts at the begin,
    # not at the alarm's end (a session closed by a later alarm logs the same).
    windows = [json.loads(e["detail"]) for e in rabbit.log.of_type("session_window")]
    assert windows[0]["incoming_window"] == 0 and windows[0]["reason"] == "alarm"
    assert windows[0]["begun_during_alarm"] is True
    assert (windows[1]["reason"], windows[1]["incoming_window"]) == ("alarm_cleared", 400)
    assert all(w["incoming_window"] > 0 for w in windows[1:])  # then reopened as it receives


def test_rabbitmq_session_constants_match_rabbit_amqp_session() -> None:
    # rabbit_amqp_session.erl: DEFAULT_MAX_LINK_CREDIT 170, DEFAULT_MAX_QUEUE_CREDIT 256,
    # DEFAULT_MAX_INCOMING_WINDOW 400; a publisher is topped up when its credit is at most
    # max_link_credit div 2 and fewer than max_link_credit are unconfirmed.
    policy = RabbitPolicy()
    assert (policy.max_link_credit, policy.max_queue_credit, policy.max_incoming_window) == (
        170,
        256,
        400,
    )
    assert publisher_credit_due(170 // 2, 169, 170)
    assert not publisher_credit_due(170 // 2 + 1, 0, 170)
    assert not publisher_credit_due(0, 170, 170)

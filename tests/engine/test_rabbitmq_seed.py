"""RabbitMQ's credit, session-window and alarm policies (flowctl_core/protocols/rabbitmq_amqp10.py),
checked against the sentences of seed 004 (004_fc910a8b38581445.txt in /work/shared/seeds/,
RabbitMQ's "Ten Benefits of AMQP 1.0 Flow Control"; 002 is the same post as plain prose) that
each test quotes. The ``seed`` mark keeps their provenance: they came from
tests/test_seed_conformance.py and tests/test_seed_conformance_links.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.protocols.amqp10 import SESSION_WINDOW_VIOLATION, LinkFlow, SessionFlow
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.serial import SERIAL_MAX
from flowctl_core.protocols.wire import FlowFrame
from flowctl_core.queue import Message
from schemas.broker_events import AMQP_1_0
from tests.engine.helpers import NEVER, SECOND, Rabbit

pytestmark = pytest.mark.seed("004")


def _consumer_connection(prefill: int, credit: int) -> tuple[Scheduler, Broker, Amqp10Connection]:
    scheduler = Scheduler(0)
    bus = EventBus("t", scheduler, validate=True)
    bus.subscribe(EventCollector())
    broker = Broker(bus, scheduler)
    queue = broker.declare_queue("q")
    for _ in range(prefill):
        queue.enqueue(Message(broker.next_message_id(), 100, None))
    consumer = ConsumerConfig("c1", "q", credit=credit, top_up_below=0)
    connection = Amqp10Connection(broker, ConnectionConfig("c", AMQP_1_0, consumers=(consumer,)))
    connection.start()
    scheduler.run_until(10_000)
    return scheduler, broker, connection


def _consumer(credit: int, **config: Any) -> tuple[ConsumerConfig, dict[str, Any]]:
    return ConsumerConfig("c1", "q", credit=credit, top_up_below=0), config


def test_echo_reply_from_rabbitmq_carries_the_available_messages() -> None:
    """004: "RabbitMQ sets the available field in the flow frame to inform the consumer how many
    messages are available" ... "Including this information in every flow frame sent from
    RabbitMQ to the consumer"; "The consumer can set the echo field to request RabbitMQ to reply
    with a flow frame"."""
    scheduler, broker, connection = _consumer_connection(prefill=10, credit=3)
    client = connection.consumers["c1"]
    assert client.received == 3 and broker.queue("q").depth_msgs == 7
    client.grant(0, echo=True)
    scheduler.run_until(20_000)
    assert client.link.available == 7
    assert client.link.credit == 0


def test_drain_on_an_empty_queue_replies_with_a_flow_and_zero_credit() -> None:
    """004: "If the source queue is empty, RabbitMQ will promptly reply with only a flow frame."
    (delivery-count advanced by the remaining credit, credit 0, available 0)."""
    scheduler, _broker, connection = _consumer_connection(prefill=2, credit=5)
    client = connection.consumers["c1"]
    assert client.received == 2 and client.link.credit == 3
    client.grant(3, drain=True)
    scheduler.run_until(20_000)
    assert client.received == 2
    assert (client.link.credit, client.link.delivery_count, client.link.available) == (0, 5, 0)
    assert connection.server.consumers["c1"].link.credit == 0


# -- RabbitMQ alarms -------------------------------------------------------------------------------
def test_window_stays_closed_until_every_alarm_clears() -> None:
    """004: "each session will close its incoming window by sending a flow frame with
    incoming_window = 0 to publishers" when "a memory or disk alarm is triggered"."""
    scheduler, broker, connection = _consumer_connection(prefill=0, credit=5)
    endpoint = connection.server.endpoint
    broker.raise_alarm("memory")
    broker.raise_alarm("disk")
    assert endpoint.incoming_window == 0
    broker.clear_alarm("memory")
    assert endpoint.incoming_window == 0  # disk still alarmed
    broker.clear_alarm("disk")
    assert endpoint.incoming_window == 400
    scheduler.run_until(20_000)


def test_rabbitmq_sends_nothing_before_the_consumers_first_flow() -> None:
    """004: "RabbitMQ is not allowed to start sending messages to the consumer until the consumer
    sends its first flow frame, granting link credit to the sending queue"."""
    rabbit = Rabbit(prefill=5)
    consumer, _ = _consumer(3)
    connection = rabbit.connect(consumers=(consumer,), latency_us=100, frame_cost_us=10)
    server = connection.server.consumers["c1"]
    rabbit.run_for(50)  # the flow is still on the wire (100 us latency)
    assert (server.link.credit, rabbit.queue.stats.dequeued) == (0, 0)
    rabbit.run_for(10_000)
    assert rabbit.queue.stats.dequeued == 3
    assert connection.consumers["c1"].received == 3


# -- RabbitMQ: credit passed through to the queue -------------------------------------------------
def test_link_credit_0_stops_the_queue_even_with_queue_credit_left() -> None:
    """004: clients can "Grant a link-credit of 0 (causing the queue to stop sending)". With 300
    granted on an empty queue the queue holds 256 credits; after the 0 grant, messages that arrive
    must stay in the queue (ready for others, counted in available), not move into the session."""
    rabbit = Rabbit()
    consumer, _ = _consumer(300)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    server = connection.server.consumers["c1"]
    assert server.queue_credit == 256
    connection.consumers["c1"].grant(0, echo=True)
    rabbit.run_for(10_000)
    rabbit.fill(10)
    rabbit.run_for(10_000)
    assert rabbit.queue.depth_msgs == 10
    assert (rabbit.queue.stats.dequeued, len(server.buffered)) == (0, 0)
    assert connection.consumers["c1"].received == 0


def test_after_a_drain_on_an_empty_queue_new_messages_stay_in_the_queue() -> None:
    """004: draining: "Advance the delivery-count by the remaining link-credit. Set link-credit to
    0." With no credit left the queue must not send: messages published after the drain stay
    ready in the queue (the queue held 256 of the 300 credits before the drain)."""
    rabbit = Rabbit()
    consumer, _ = _consumer(300)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    connection.consumers["c1"].grant(300, drain=True)
    rabbit.run_for(10_000)
    server = connection.server.consumers["c1"]
    assert (server.link.credit, connection.consumers["c1"].link.credit) == (0, 0)
    rabbit.fill(10)
    rabbit.run_for(10_000)
    assert rabbit.queue.depth_msgs == 10
    assert (server.queue_credit, len(server.buffered)) == (0, 0)


def test_lowering_link_credit_lowers_what_the_queue_may_send() -> None:
    """004: "The receiver is allowed to dynamically increase or decrease the amount of link
    credit"; "the queue will only ever see up to 256 credits for a given consumer" - and never
    more than the consumer's current credit."""
    rabbit = Rabbit()
    consumer, _ = _consumer(300)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    connection.consumers["c1"].grant(5)
    rabbit.run_for(10_000)
    rabbit.fill(20)
    rabbit.run_for(10_000)
    assert rabbit.queue.stats.dequeued == 5
    assert connection.consumers["c1"].received == 5
    assert rabbit.queue.depth_msgs == 15


def test_the_next_queue_batch_is_the_remaining_credit_after_256_were_sent_out() -> None:
    """004: "Once these 256 messages have been sent out by the server session process, the server
    session process will grant the next batch of 256 credits to the queue." With 300 granted the
    second batch is the 44 credits the consumer still has."""
    rabbit = Rabbit(prefill=1_000)
    consumer, _ = _consumer(300)
    connection = rabbit.connect(consumers=(consumer,), client_incoming_window=10_000)
    rabbit.run_for(100_000)
    assert connection.consumers["c1"].received == 300
    assert rabbit.queue.stats.dequeued == 300 and rabbit.queue.depth_msgs == 700
    server = connection.server.consumers["c1"]
    assert (server.link.credit, server.queue_credit) == (0, 0)


def test_max_queue_credit_is_configurable() -> None:
    """004: "The value of 256 is configurable via advanced.config setting
    rabbit.max_queue_credit"."""
    rabbit = Rabbit(prefill=100)
    consumer = ConsumerConfig("c1", "q", credit=50, top_up_below=0)
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig("c", AMQP_1_0, consumers=(consumer,), client_incoming_window=3),
        RabbitPolicy(max_queue_credit=8),
    )
    connection.start()
    rabbit.run_for(210)  # the client's flow has arrived; the client window lets 3 through
    assert rabbit.queue.stats.dequeued == 8
    rabbit.run_for(100_000)
    assert connection.consumers["c1"].received == 50


# -- session flow control -------------------------------------------------------------------------
def test_a_large_message_goes_out_frame_by_frame_through_a_small_session_window() -> None:
    """004: "if the negotiated max-frame-size on the connection is very low and a single message is
    very large, if the receiver grants one link credit to the sender, the sender might still be
    blocked by session flow control sending this message in its entirety." Blocked, not stuck: a
    3-frame message through a client window of 2 frames is sent 2 + 1 as the window re-opens."""
    rabbit = Rabbit(prefill=2, size=3 * 512)
    consumer, _ = _consumer(1)
    connection = rabbit.connect(consumers=(consumer,), max_frame_size=512, client_incoming_window=2)
    rabbit.run_for(100_000)
    client = connection.consumers["c1"]
    assert client.received == 1  # one credit: one message, all three frames
    assert connection.server.endpoint.next_outgoing_id == 3
    assert connection.client_session.next_incoming_id == 3
    assert (client.link.credit, rabbit.queue.depth_msgs) == (0, 1)


def test_a_publishers_message_of_three_frames_uses_three_units_of_the_400_window() -> None:
    """004: "for link-credit, the unit is a potentially large application message, while for
    incoming-window, the unit is a transfer frame." / "a large message is split into multiple
    transfer frames"."""
    rabbit = Rabbit(service_time_us=NEVER)
    publisher = PublisherConfig("p", "q", size_bytes=1_025)
    connection = rabbit.connect(publishers=(publisher,), max_frame_size=512)
    rabbit.run_for(SECOND)
    assert rabbit.queue.stats.enqueued == 170 + 85  # link credit counts messages
    assert connection.server.endpoint.next_incoming_id == 3 * 255  # the window counts frames
    assert connection.server.publishers["p"].link.delivery_count == 255


def test_rabbitmq_ends_the_session_on_a_leading_next_incoming_id() -> None:
    """004: "Session flow control ... is designed to protect the entire client application and
    RabbitMQ as a whole": a flow that breaks the session sequence numbers ends the session."""
    rabbit = Rabbit()
    consumer, _ = _consumer(5)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    bad = SessionFlow(
        next_incoming_id=1_000, incoming_window=10, next_outgoing_id=1, outgoing_window=SERIAL_MAX
    )
    connection.server.read(FlowFrame(None, None, bad))
    assert connection.server.error == SESSION_WINDOW_VIOLATION
    ended = [e for e in rabbit.log.of_type("session_window") if "ended" in e["detail"]]
    assert len(ended) == 1


# -- RabbitMQ publisher credit ---------------------------------------------------------------------
def test_publisher_top_up_happens_exactly_when_credit_has_fallen_to_85() -> None:
    """004: "grants initially 170 link credits to the publisher, and grants again 170 link credits
    when the remaining link credit falls below half (i.e. 85) and the number of unconfirmed
    messages is less than 170"."""
    rabbit = Rabbit()  # a queue that confirms at once: unconfirmed stays low
    publisher = PublisherConfig("p", "q", size_bytes=100)
    connection = Amqp10Connection(
        rabbit.broker, ConnectionConfig("c", AMQP_1_0, publishers=(publisher,))
    )
    server_link_credits: list[tuple[int, int]] = []
    connection.start()
    server = connection.server.publishers["p"]
    grant = server._grant

    def spy() -> None:
        server_link_credits.append((server.link.credit, server.unconfirmed))
        grant()

    server._grant = spy  # type: ignore[method-assign]
    rabbit.run_for(50_000)
    assert server_link_credits, "no top-up happened"
    assert {credit for credit, _ in server_link_credits} == {85}
    assert all(unconfirmed < 170 for _, unconfirmed in server_link_credits)
    flows = [e for e in rabbit.log.of_type("flow") if e.get("link") == "p"]
    assert flows[0]["credit"] == 170


def test_rabbitmq_ignores_a_publishers_available() -> None:
    """004: "The available field could also be set by a publisher to tell RabbitMQ how many
    messages the publisher has available to send. Currently, RabbitMQ ignores this
    information.\""""
    rabbit = Rabbit(service_time_us=NEVER)
    publisher = PublisherConfig("p", "q", batch=3)
    connection = rabbit.connect(publishers=(publisher,))
    rabbit.run_for(10_000)
    server = connection.server.publishers["p"]
    before = (server.link.credit, server.link.delivery_count, server.link.available)
    flow = LinkFlow(0, server.link.delivery_count, available=1_000_000, echo=True)
    connection.server.read(FlowFrame("p", flow, connection.client_session.state()))
    assert (server.link.credit, server.link.delivery_count, server.link.available) == before
    assert connection.server.error is None


def test_an_alarm_does_not_reopen_the_window_at_200_and_consumers_still_receive() -> None:
    """004: "each session will close its incoming window by sending a flow frame with
    incoming_window = 0 to publishers" ... "Other operations, such as AMQP 1.0 clients consuming
    on the same session ... will still be allowed"."""
    rabbit = Rabbit(prefill=50)
    publisher = PublisherConfig("p", "q", size_bytes=100)
    consumer = ConsumerConfig("c1", "q", credit=200, top_up_below=100)
    connection = rabbit.connect(publishers=(publisher,), consumers=(consumer,))
    rabbit.run_for(5_000)
    rabbit.broker.raise_alarm("memory")
    assert connection.server.endpoint.incoming_window == 0
    rabbit.run_for(5_000)  # frames in flight when the window closed still arrive
    sent = connection.publishers["p"].app.sent
    received = connection.consumers["c1"].received
    rabbit.fill(20)  # e.g. a 0.9.1 publisher's messages already routed
    rabbit.run_for(100_000)
    assert connection.publishers["p"].app.sent == sent  # publishers stopped
    assert connection.server.endpoint.incoming_window == 0  # no re-open while alarmed
    assert connection.server.error is None
    assert connection.consumers["c1"].received == received + 20  # consumers go on
    assert rabbit.queue.depth_msgs == 0
    rabbit.broker.clear_alarm("memory")
    assert connection.server.endpoint.incoming_window == 400
    rabbit.run_for(10_000)
    assert connection.publishers["p"].app.sent > sent


def test_a_session_begun_during_an_alarm_starts_with_its_window_closed() -> None:
    """004: "In the event of a cluster wide memory or disk alarm, RabbitMQ will block AMQP 1.0
    clients only from publishing transfer frames." A publisher that connects while the alarm is
    in effect must not get the usual 400 frames; consuming still works."""
    rabbit = Rabbit(prefill=10)
    rabbit.broker.raise_alarm("disk")
    publisher = PublisherConfig("p", "q", size_bytes=100)
    consumer = ConsumerConfig("c1", "q", credit=50, top_up_below=0)
    connection = rabbit.connect(publishers=(publisher,), consumers=(consumer,))
    assert connection.server.endpoint.incoming_window == 0
    assert connection.client_session.remote_incoming_window == 0
    rabbit.run_for(100_000)
    assert connection.publishers["p"].app.sent == 0
    assert rabbit.queue.stats.enqueued == 10  # the prefill only
    assert connection.consumers["c1"].received == 10
    rabbit.broker.clear_alarm("disk")
    assert connection.server.endpoint.incoming_window == 400
    rabbit.run_for(10_000)
    assert connection.publishers["p"].app.sent > 0


def test_max_link_credit_and_max_incoming_window_are_configurable() -> None:
    """004: "The value of 170 is configurable via advanced.config setting rabbit.max_link_credit"
    / "The value of 400 is configurable via advanced.config setting rabbit.max_incoming_window".
    With 10 credits a never-confirming queue gets 10 + 5 messages; a window of 20 re-opens at 10.
    """
    rabbit = Rabbit(service_time_us=NEVER)
    publisher = PublisherConfig("p", "q", size_bytes=100)
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig("c", AMQP_1_0, publishers=(publisher,)),
        RabbitPolicy(max_link_credit=10, max_incoming_window=20),
    )
    connection.start()
    rabbit.run_for(SECOND)
    assert rabbit.queue.stats.enqueued == 15
    reopened = [e for e in rabbit.log.of_type("session_window") if "reopened" in e["detail"]]
    assert len(reopened) == 1  # after frames 1..10 the window is 10: re-opened to 20 once
    assert connection.server.endpoint.incoming_window == 20 - 5

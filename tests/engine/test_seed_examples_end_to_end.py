"""Worked examples and rules of seeds 002/004 (RabbitMQ, "Ten Benefits of AMQP 1.0 Flow Control")
driven end to end through broker connections, where the other engine tests check them a unit at a
time.

Seed files are in /work/shared/seeds/: 002 = 002_8bfb94f9202e03aa.txt and 004 =
004_fc910a8b38581445.txt (the same post, prose and markdown).
Each test paraphrases the passage it checks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowctl_core.protocols.amqp091 import Amqp091Connection
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.serial import SERIAL_MAX
from flowctl_core.protocols.wire import AckFrame, FlowFrame, Frame
from flowctl_core.queue import Message
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0
from tests.engine.helpers import NEVER, SECOND, Rabbit, record_frames

SETTLE_US = 10_000  # every frame in flight has arrived (latency 100 us each way)


def link_grants(frames: list[Frame], link: str) -> list[tuple[int | None, int]]:
    """(delivery-count, link-credit) of the client's flow frames for ``link``."""
    return [
        (f.link_flow.delivery_count, f.link_flow.link_credit)
        for f in frames
        if isinstance(f, FlowFrame) and f.link == link and f.link_flow is not None
    ]


# -- seed 002/004: link credit through RabbitMQ's consumer link -----------------------------------
@pytest.mark.seed("002", "004")
def test_two_flows_of_50_through_rabbitmq_give_the_queue_50_credits_not_100() -> None:
    """004: granting link credit is not cumulative; two flows of link-credit = 50 with no
    transfer between leave 50 credits, not 100. Driven through the broker: the queue then sends
    50 of 200 messages."""
    rabbit = Rabbit()
    connection = rabbit.connect(consumers=(ConsumerConfig("c1", "q", credit=50, top_up_below=0),))
    rabbit.run_for(SETTLE_US)
    client, server = connection.consumers["c1"], connection.server.consumers["c1"]
    client.grant(50)  # the second flow of 50, nothing transferred in between
    rabbit.run_for(SETTLE_US)
    assert (server.link.credit, server.queue_credit) == (50, 50)
    rabbit.fill(200)
    rabbit.run_for(100 * SETTLE_US)
    assert client.received == 50
    assert rabbit.queue.depth_msgs == 150


@pytest.mark.seed("002", "004")
def test_crossing_flow_20_plus_6_minus_21_gives_5_at_both_ends_of_a_rabbitmq_link() -> None:
    """004: delivery-count 20, credit 3; the receiver sends flow(delivery-count = 20,
    link-credit = 6) while the sender sends a transfer; afterwards both ends have delivery-count
    21 and credit 20 + 6 - 21 = 5. Here through RabbitMQ's consumer link (its delivery-count set
    to start at 20) with the frames really crossing on the wire."""
    rabbit = Rabbit()
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig(
            "c", AMQP_1_0, consumers=(ConsumerConfig("c1", "q", credit=3, top_up_below=0),)
        ),
        RabbitPolicy(initial_delivery_count=20),
    )
    connection.start()
    rabbit.run_for(SETTLE_US)
    client, server = connection.consumers["c1"], connection.server.consumers["c1"]
    assert (client.link.delivery_count, client.link.credit) == (20, 3)
    assert (server.link.delivery_count, server.link.credit) == (20, 3)
    rabbit.fill(1)
    rabbit.scheduler.run_until(rabbit.scheduler.now_us)  # the broker sends the transfer now
    assert server.link.delivery_count == 21 and client.received == 0  # still on the wire
    client.grant(6)  # carries delivery-count 20: the flow crosses the transfer
    rabbit.run_for(SETTLE_US)
    assert client.received == 1
    assert (client.link.delivery_count, client.link.credit) == (21, 5)
    assert (server.link.delivery_count, server.link.credit) == (21, 5)
    rabbit.fill(10)
    rabbit.run_for(SETTLE_US)
    assert client.received == 1 + 5 and rabbit.queue.depth_msgs == 5


@pytest.mark.seed("002", "004")
def test_dispositions_grant_no_credit_only_flow_frames_do() -> None:
    """004: in AMQP 1.0 acknowledging messages (disposition frames) does not prompt RabbitMQ to
    deliver more; the client must send flow frames. A consumer granting 5 and never topping up
    acks all 5 and gets nothing more from a queue of 20."""
    rabbit = Rabbit(prefill=20)
    connection = rabbit.connect(
        consumers=(ConsumerConfig("c1", "q", credit=5, top_up_below=0, process_us=100),)
    )
    frames = record_frames(connection.to_broker)
    rabbit.run_for(SECOND)
    assert sum(isinstance(f, AckFrame) for f in frames) == 5  # every message acknowledged
    assert link_grants(frames, "c1") == [(0, 5)]  # one flow: the attach's grant
    assert connection.consumers["c1"].received == 5
    assert rabbit.queue.depth_msgs == 15


@pytest.mark.seed("002", "004")
@pytest.mark.parametrize(
    ("credit", "below", "every"),
    [
        # "initially grant 200 link credits and send a flow with link-credit = 200 whenever the
        # remaining link credit falls below 100": at 99 left, i.e. after every 101 messages.
        (200, 100, 101),
        # Figure 2.45: "granted 6 credits initially, and then sends another flow frame with
        # link-credit = 6 ... whenever it has received 3 messages" (3 left: below 4).
        (6, 4, 3),
    ],
)
def test_consumer_tops_up_exactly_when_its_credit_falls_below_the_mark(
    credit: int, below: int, every: int
) -> None:
    """004: the consumer policies the post describes: each new flow sets the credit back to the
    granted value once the remaining credit has fallen below the mark, and not before."""
    rabbit = Rabbit(prefill=1_000)
    connection = rabbit.connect(
        consumers=(ConsumerConfig("c1", "q", credit=credit, top_up_below=below),)
    )
    frames = record_frames(connection.to_broker)
    rabbit.run_for(SECOND)
    grants = link_grants(frames, "c1")
    assert connection.consumers["c1"].received == 1_000
    assert {c for _, c in grants} == {credit}
    counts = [d for d, _ in grants]
    assert counts == list(range(0, 1_000 + 1, every))[: len(counts)]
    assert len(counts) == 1_000 // every + 1


@pytest.mark.seed("002", "004")
@pytest.mark.parametrize("initial", [0, 10, SERIAL_MAX])
def test_a_publisher_may_start_its_delivery_count_anywhere_and_rabbitmq_follows_it(
    initial: int,
) -> None:
    """004: the sender chooses the initial delivery-count in its attach, "such as 0, 10, or
    4,294,967,295"; delivery-counts wrap at 2**32. RabbitMQ's 170 / 85 credit policy must work
    from any start: a never-confirming queue still gets 170 + 85 = 255 messages, and both ends
    end at initial + 255 (mod 2**32) with no session error."""
    rabbit = Rabbit(service_time_us=NEVER)
    connection = rabbit.connect(
        publishers=(PublisherConfig("p", "q", size_bytes=100, initial_delivery_count=initial),)
    )
    rabbit.run_for(SECOND)
    assert rabbit.queue.stats.enqueued == 255
    expected = (initial + 255) % 2**32
    assert connection.publishers["p"].link.delivery_count == expected
    server = connection.server.publishers["p"]
    assert server.link.delivery_count == expected
    assert (server.detached, connection.server.error) == (None, None)


# -- seed 002/004: RabbitMQ's session window ------------------------------------------------------
@pytest.mark.seed("002", "004")
def test_rabbitmq_lets_a_publisher_send_400_frames_then_200_per_reopen() -> None:
    """004: "Initially, RabbitMQ allows the publisher to send 400 transfer frames"; after
    processing 200 it sends a flow with incoming_window = 400. With 1 s latency and ample link
    credit the client sends exactly 400 frames before that flow arrives, and may send 200 more
    (400 less the 200 the broker had not yet seen) once it has."""
    rabbit = Rabbit(service_time_us=NEVER)
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig(
            "c",
            AMQP_1_0,
            publishers=(PublisherConfig("p", "q", size_bytes=100),),
            latency_us=SECOND,
            frame_cost_us=1,
            socket_buffer_frames=10_000,
        ),
        RabbitPolicy(max_link_credit=1_000),  # link credit does not limit here
    )
    connection.start()
    session = connection.client_session
    # The link credit arrives at 1 s; the first re-open (sent at 2 s + 200 frames) at ~3 s.
    rabbit.scheduler.run_until(3 * SECOND)
    assert (session.next_outgoing_id, session.remote_incoming_window) == (400, 0)
    assert connection.publishers["p"].link.credit == 600
    # The first re-open (next-incoming-id 200, window 400) has arrived, not the second: the
    # client may send up to frame 200 + 400 = 600, i.e. 200 beyond the 400 it had sent.
    rabbit.scheduler.run_until(3 * SECOND + 300)
    assert 400 < session.next_outgoing_id < 600
    assert session.next_outgoing_id + session.remote_incoming_window == 600
    reopened = [json.loads(e["detail"]) for e in rabbit.log.of_type("session_window")]
    assert [(d["reason"], d["incoming_window"]) for d in reopened][:2] == [("reopened", 400)] * 2
    assert [d["next_incoming_id"] for d in reopened][:2] == [200, 400]


# -- seed 002/004: AMQP 0.9.1 ----------------------------------------------------------------------
def _amqp091(rabbit: Rabbit, name: str, **config: Any) -> Amqp091Connection:
    connection = Amqp091Connection(rabbit.broker, ConnectionConfig(name, AMQP_0_9_1, **config))
    connection.start()
    return connection


@pytest.mark.seed("002", "004")
def test_a_consume_only_amqp091_connection_keeps_consuming_during_an_alarm() -> None:
    """004: in AMQP 0.9.1 an alarm blocks reading from the connection socket, so "AMQP 0.9.1
    clients must use separate connections for publishing and consuming to continue consuming
    during an alarm". The publishing connection stops; the separate consuming one goes on far
    past its prefetch of 200 (its acks are still read)."""
    rabbit = Rabbit(prefill=5_000)
    rabbit.broker.declare_queue("inbox")
    publishing = _amqp091(rabbit, "pub", publishers=(PublisherConfig("p", "inbox"),))
    consuming = _amqp091(
        rabbit, "sub", consumers=(ConsumerConfig("c", "q", credit=200, process_us=10),)
    )
    rabbit.run_for(SETTLE_US)
    rabbit.broker.raise_alarm("memory")
    rabbit.run_for(5_000)  # frames already read settle
    inbox = rabbit.broker.queue("inbox")
    published, consumed = inbox.stats.enqueued, consuming.received()["c"]
    rabbit.run_for(2 * SETTLE_US)
    assert inbox.stats.enqueued == published  # the publishing connection is blocked
    assert consuming.received()["c"] - consumed > 200 * 5  # the consumer is not held at 200
    blocked = rabbit.log.of_type("connection_blocked")
    assert [e["connection"] for e in blocked] == ["pub"]
    assert publishing.blocked_count == 1 and consuming.blocked_count == 0


@pytest.mark.seed("002", "004")
def test_a_slow_target_queue_stops_amqp091_acks_and_so_consuming_but_not_amqp10() -> None:
    """004 (benefit #4): when one target queue blocks the 0.9.1 reader, "the client's message
    acknowledgements are no longer processed by RabbitMQ, preventing the delivery of new
    messages to the consumer once its prefetch limit is reached"; AMQP 1.0 slows the link alone.
    Same connection layout: a publisher to a never-confirming queue and a consumer (prefetch /
    credit 200) on another queue."""

    def run(protocol: str) -> tuple[list[int], int]:
        rabbit = Rabbit()
        rabbit.broker.declare_queue("slow", service_time_us=NEVER)
        outbox = rabbit.broker.declare_queue("outbox")
        for _ in range(20_000):
            outbox.enqueue(Message(rabbit.broker.next_message_id(), 100, None))
        config = ConnectionConfig(
            "c",
            protocol,
            publishers=(PublisherConfig("p", "slow"),),
            consumers=(ConsumerConfig("sub", "outbox", credit=200, process_us=5),),
        )
        connection: Amqp10Connection | Amqp091Connection
        if protocol == AMQP_0_9_1:
            connection = Amqp091Connection(rabbit.broker, config)
        else:
            connection = Amqp10Connection(rabbit.broker, config)
        connection.start()
        received = []
        for _ in range(10):
            rabbit.run_for(2_000)
            received.append(connection.received()["sub"])
        return received, len(rabbit.log.of_type("connection_blocked"))

    received_091, blocked_091 = run(AMQP_0_9_1)
    assert blocked_091 == 1
    # Blocked after 400 unprocessed publishes (by 8 ms): no further delivery from then on.
    assert received_091[-1] == received_091[4] > 0
    received_10, blocked_10 = run(AMQP_1_0)
    assert blocked_10 == 0
    assert received_10[-1] - received_10[4] > 200  # AMQP 1.0 keeps consuming


@pytest.mark.seed("002", "004")
def test_rabbitmq_answers_echo_and_drain_without_echo_and_with_the_receivers_drain() -> None:
    """004: echo is "determined by the consumer, as RabbitMQ does not set this field in its
    current implementation"; "the sender sets drain to the last known value from the receiver";
    RabbitMQ puts available in every flow frame it sends the consumer. Each echo gets one flow
    back, none of RabbitMQ's flows (to consumer or publisher) asks for an echo."""
    rabbit = Rabbit(prefill=10)
    rabbit.broker.declare_queue("in")
    connection = rabbit.connect(
        consumers=(ConsumerConfig("c1", "q", credit=3, top_up_below=0),),
        publishers=(PublisherConfig("p", "in", size_bytes=100),),
    )
    frames: list[Frame] = []
    seen: list[Frame] = []  # every frame to the client, never cleared
    read = connection.to_client.reader
    assert read is not None

    def recording(frame: Frame) -> None:
        frames.append(frame)
        seen.append(frame)
        read(frame)

    connection.to_client.reader = recording
    rabbit.run_for(SETTLE_US)
    client = connection.consumers["c1"]
    assert client.received == 3
    replies = []
    for credit, drain in ((2, False), (20, True), (0, False)):
        frames.clear()
        client.grant(credit, drain=drain, echo=True)
        rabbit.run_for(SETTLE_US)
        flows = [f.link_flow for f in frames if isinstance(f, FlowFrame) and f.link == "c1"]
        assert len(flows) == 1 and flows[0] is not None
        replies.append(flows[0])
    states = [(f.link_credit, f.delivery_count, f.available, f.drain) for f in replies]
    # credit 2: 2 sent, 5 left; drain 20: the 5 sent, 15 credits given back; stop: nothing left.
    assert states == [(0, 5, 5, False), (0, 25, 0, True), (0, 25, 0, False)]
    assert client.received == 10
    link_flows = [f.link_flow for f in seen if isinstance(f, FlowFrame) and f.link_flow]
    assert any(isinstance(f, FlowFrame) and f.link == "p" for f in seen)  # publisher grants
    assert link_flows and not any(flow.echo for flow in link_flows)

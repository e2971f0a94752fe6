"""RabbitMQ's own flow-control test cases, ported to our RabbitMQ model.

Each test is named after the upstream case and says, in a comment, where it comes from and which
fact it checks. Only facts (inputs and expected outcomes) carry over; code and wording are ours.
Sources (rabbitmq/rabbitmq-server unless said otherwise):

- ``deps/rabbit/test/amqp_client_SUITE.erl`` (AMQP 1.0), classic-queue variants only: our queues
  confirm like classic queues; a quorum queue that is down is modelled as a queue that is slow
  (or never) to confirm.
- ``deps/rabbit/test/amqp_credit_api_v2_SUITE.erl`` (credit_api_v2).
- ``deps/amqp_client/test/system_SUITE.erl`` (connection_blocked_network),
  ``deps/rabbit/test/unit_credit_flow_SUITE.erl`` (credit_flow_settings) and
  rabbitmq/rabbitmq-java-client ``src/test/java/com/rabbitmq/client/test/server/
  BlockedConnection.java`` (AMQP 0.9.1 connection blocking).

Already ported in tests/engine/test_amqp10_implementation_cases.py and not repeated:
roundtrip_with_drain, drain_many, available_messages, resource_alarm_before_session_begin. Not
ported, because our model has no equivalent: tcp_back_pressure_* (TCP buffers),
incoming_window_closed_close_link and the detach/requeue cases (no link detach of consumers),
priorities, single active consumer, exchanges with several target queues for AMQP 1.0 publishers
(last_queue_confirms, target_queue_deleted).
No case named credit_reply_* exists in the stored amqp_client_SUITE.erl (commit 02b8de5d).

The Erlang client's ``amqp10_client_session:flow(Session, Window, never)`` sets the client's
incoming window without ever renewing it; our client always renews its window at half
(``ConnectionConfig.client_incoming_window``), so :func:`client_window` switches that renewal off
for the "never" steps (a client's choice, not the broker's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from flowctl_core.protocols.amqp091 import Amqp091Connection
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection, ClientConsumerLink
from flowctl_core.protocols.wire import FlowFrame, TransferFrame
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0
from tests.engine.helpers import NEVER, Rabbit, record_frames

pytestmark = pytest.mark.implementation_case

SETTLE_US = 10_000  # every frame in flight has arrived by then (latency 100 us per direction)


# -- helpers -----------------------------------------------------------------------------------
def open_connection(
    rabbit: Rabbit,
    *,
    name: str = "c",
    consumers: tuple[ConsumerConfig, ...] = (),
    publishers: tuple[PublisherConfig, ...] = (),
    grant_at_attach: bool = True,
    **config: Any,
) -> Amqp10Connection:
    """An AMQP 1.0 connection; with ``grant_at_attach`` False its consumers attach without
    granting credit (the Erlang client's attach_receiver_link, before flow_link_credit)."""
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig(name, AMQP_1_0, publishers=publishers, consumers=consumers, **config),
    )
    if not grant_at_attach:
        for client in connection.consumers.values():
            client.attach = lambda: None  # type: ignore[method-assign]
    connection.start()
    return connection


def consumer(name: str = "c1", queue: str = "q", credit: int = 1, below: int = 0) -> ConsumerConfig:
    return ConsumerConfig(name, queue, credit=credit, top_up_below=below)


def client_window(connection: Amqp10Connection, frames: int, *, renew: bool) -> None:
    """Send a session flow setting the client's incoming window to ``frames``; with ``renew`` the
    client re-opens it to ``frames`` at half (flow(Session, N, M)), else never (flow(Session, N,
    never))."""
    session = connection.client_session
    if renew:
        connection.config = dataclasses.replace(connection.config, client_incoming_window=frames)
        connection.__dict__.pop("_client_receive_frame", None)
    else:
        connection._client_receive_frame = session.receive_frame  # type: ignore[method-assign]
    connection.client_control.push(FlowFrame(None, None, session.set_incoming_window(frames)))
    connection.writer.wake()


def set_top_up(client: ClientConsumerLink, credit: int, below: int) -> None:
    """The Erlang client's auto top-up: flow_link_credit(Receiver, credit, below | never)."""
    client.config = dataclasses.replace(client.config, credit=credit, top_up_below=below)


def run_until(rabbit: Rabbit, done: Callable[[], bool], limit_us: int = 10 * SETTLE_US) -> None:
    scheduler = rabbit.scheduler
    end = scheduler.now_us + limit_us
    while not done():
        due = scheduler.next_due_us()
        assert due is not None and due <= end, "condition not reached"
        scheduler.run_until(due)


# -- amqp_client_SUITE: synchronous get, timed get, stop ----------------------------------------
def test_sync_get_unsettled_classic_queue() -> None:
    # amqp_client_SUITE sync_get_unsettled (figure 2.43): credit 1 on an empty queue delivers
    # nothing; 4 messages then arrive and only the first is delivered (credit exhausted);
    # credit 1 again gives the 2nd; settling both grants no credit; credit 1 gives the 3rd.
    rabbit = Rabbit()
    connection = open_connection(rabbit, consumers=(consumer(credit=1),))
    client = connection.consumers["c1"]
    rabbit.run_for(SETTLE_US)
    assert client.received == 0
    rabbit.fill(4)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (1, 0)
    client.grant(1)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (2, 0)
    # Our client settles (AckFrame) every delivery on receipt: no credit comes of it.
    rabbit.run_for(SETTLE_US)
    assert client.received == 2 and connection.server.consumers["c1"].link.credit == 0
    client.grant(1)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit, rabbit.queue.depth_msgs) == (3, 0, 1)


def test_sync_get_unsettled_2_classic_queue() -> None:
    # amqp_client_SUITE sync_get_unsettled_2: credit 2 then 5 messages: exactly 2 delivered;
    # credit 2 again: exactly 2 more; credit 2 again: the 5th (the last one).
    rabbit = Rabbit()
    connection = open_connection(rabbit, consumers=(consumer(credit=2),))
    client = connection.consumers["c1"]
    rabbit.run_for(SETTLE_US)
    rabbit.fill(5)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (2, 0)
    client.grant(2)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (4, 0)
    client.grant(2)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit, rabbit.queue.depth_msgs) == (5, 1, 0)


def test_sync_get_settled_classic_queue() -> None:
    # amqp_client_SUITE sync_get_settled: as sync_get_unsettled with 3 messages and pre-settled
    # deliveries: credit 1 -> m1 only, credit 1 again -> m2 only.
    rabbit = Rabbit()
    connection = open_connection(rabbit, consumers=(consumer(credit=1),))
    client = connection.consumers["c1"]
    rabbit.run_for(SETTLE_US)
    assert client.received == 0
    rabbit.fill(3)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (1, 0)
    client.grant(1)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit, rabbit.queue.depth_msgs) == (2, 0, 1)


def test_timed_get_classic_queue() -> None:
    # amqp_client_SUITE timed_get (figure 2.44): credit 1 without drain on an empty queue: nothing
    # comes back; credit 1 with drain: credit exhausted (a flow with credit 0, delivery-count
    # advanced by the 1 credit); a message published then is not delivered; credit 1 with drain
    # again delivers it and exhausts the credit.
    rabbit = Rabbit()
    connection = open_connection(rabbit, consumers=(consumer(),), grant_at_attach=False)
    client = connection.consumers["c1"]
    frames = record_frames(connection.to_client)
    client.grant(1)
    rabbit.run_for(SETTLE_US)
    assert frames == []
    client.grant(1, drain=True)
    rabbit.run_for(SETTLE_US)
    assert [type(f) for f in frames] == [FlowFrame]
    assert (client.link.credit, client.link.delivery_count) == (0, 1)
    rabbit.fill(1)
    rabbit.run_for(SETTLE_US)
    assert client.received == 0 and rabbit.queue.depth_msgs == 1
    client.grant(1, drain=True)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit, client.link.delivery_count) == (1, 0, 2)


def test_stop_classic_queue() -> None:
    # amqp_client_SUITE stop (figure 2.46): credit 10 renewed below 5, 300 messages sent; after
    # 20 received the link is stopped (credit 0, no renewal); some transfers still in flight
    # arrive, but fewer than all that is left; credit 50 renewed below 40 then delivers every
    # remaining message.
    num_sent, num_received = 300, 20
    rabbit = Rabbit()
    connection = open_connection(rabbit, consumers=(consumer(credit=10, below=5),))
    client = connection.consumers["c1"]
    rabbit.fill(num_sent)
    run_until(rabbit, lambda: client.received >= num_received)
    at_stop = client.received
    set_top_up(client, 10, 0)
    client.grant(0)
    rabbit.run_for(SETTLE_US)
    in_flight = client.received - at_stop
    assert 0 < in_flight < num_sent - at_stop
    rabbit.run_for(SETTLE_US)
    assert client.received == at_stop + in_flight  # stopped
    set_top_up(client, 50, 40)
    client.grant(50)
    rabbit.run_for(20 * SETTLE_US)
    assert client.received == num_sent and rabbit.queue.depth_msgs == 0


def test_async_notify_settled_classic_queue() -> None:
    # amqp_client_SUITE async_notify (figure 2.45): 30 messages ready, credit 10 renewed whenever
    # it falls below 5: all 30 arrive, and nothing more.
    rabbit = Rabbit(prefill=30)
    connection = open_connection(rabbit, consumers=(consumer(credit=10, below=5),))
    client = connection.consumers["c1"]
    rabbit.run_for(5 * SETTLE_US)
    assert client.received == 30 and rabbit.queue.depth_msgs == 0
    rabbit.run_for(SETTLE_US)
    assert client.received == 30


def test_classic_queue_on_old_node() -> None:
    # amqp_client_SUITE queue_and_client_different_nodes (classic_queue_on_old_node): 1100 ready
    # messages (more than RabbitMQ's internal per-consumer queue credit) and credit 1100: all 1100
    # arrive; then one more message and a drain with 999 credits: that one arrives and the credit
    # is exhausted.
    num = 1100
    rabbit = Rabbit(prefill=num)
    connection = open_connection(rabbit, consumers=(consumer(credit=num),))
    client = connection.consumers["c1"]
    rabbit.run_for(10 * SETTLE_US)
    assert client.received == num and rabbit.queue.depth_msgs == 0
    rabbit.fill(1)
    client.grant(999, drain=True)
    rabbit.run_for(SETTLE_US)
    assert (client.received, client.link.credit) == (num + 1, 0)
    assert connection.server.consumers["c1"].link.credit == 0


def test_receive_many_made_available_over_time_classic_queue() -> None:
    # amqp_client_SUITE receive_many_made_available_over_time: 5000 credits granted once while
    # messages become available in batches of 10, 2990 and 1999: each batch is delivered in full;
    # 2 more messages then find 1 credit left, so exactly 1 of them is delivered.
    rabbit = Rabbit(prefill=10)
    connection = open_connection(rabbit, consumers=(consumer(credit=5000),))
    client = connection.consumers["c1"]
    received = 0
    for batch in (10, 2990, 1999):
        if received:
            rabbit.fill(batch)
        rabbit.run_for(20 * SETTLE_US)
        received += batch
        assert client.received == received
    rabbit.fill(2)
    rabbit.run_for(SETTLE_US)
    assert client.received == 5000 and rabbit.queue.depth_msgs == 1
    assert client.link.credit == 0


def test_receive_many_auto_flow_classic_queue() -> None:
    # amqp_client_SUITE receive_many_auto_flow: 10,000 ready messages, credit 1300 renewed
    # whenever it falls below 1200: all 10,000 arrive.
    num = 10_000
    rabbit = Rabbit(prefill=num)
    connection = open_connection(rabbit, consumers=(consumer(credit=1300, below=1200),))
    rabbit.run_for(100 * SETTLE_US)
    assert connection.consumers["c1"].received == num and rabbit.queue.depth_msgs == 0


# -- amqp_client_SUITE: session flow control ------------------------------------------------------
def test_session_flow_control_default_max_frame_size() -> None:
    # amqp_client_SUITE session_flow_control_default_max_frame_size: 1000 ready messages, link
    # credit 2000, the client's incoming window 2 (never renewed): exactly 2 arrive; window 1:
    # exactly 1 more; window 0: none; window 2 renewed at 1: the remaining 997. Then window 0
    # (never renewed) and 1000 more messages: none arrive; window 100 renewed: all 1000.
    num = 1000
    rabbit = Rabbit(prefill=num)
    connection = open_connection(rabbit, consumers=(consumer(),), grant_at_attach=False)
    client = connection.consumers["c1"]
    client_window(connection, 2, renew=False)
    client.grant(2 * num)
    rabbit.run_for(SETTLE_US)
    assert client.received == 2
    client_window(connection, 1, renew=False)
    rabbit.run_for(SETTLE_US)
    assert client.received == 3
    client_window(connection, 0, renew=False)
    rabbit.run_for(SETTLE_US)
    assert client.received == 3
    client_window(connection, 2, renew=True)
    rabbit.run_for(100 * SETTLE_US)
    assert client.received == num
    client_window(connection, 0, renew=False)
    rabbit.run_for(SETTLE_US)  # upstream's window flow reaches RabbitMQ before the publishes
    rabbit.fill(num)
    rabbit.run_for(SETTLE_US)
    assert client.received == num
    client_window(connection, 100, renew=True)
    rabbit.run_for(100 * SETTLE_US)
    assert client.received == 2 * num and rabbit.queue.depth_msgs == 0
    assert connection.server.error is None


def test_session_flow_control_small_max_frame_size() -> None:
    # amqp_client_SUITE session_flow_control_small_max_frame_size: max-frame-size 1000 and 10
    # messages of about 2500 bytes, each split into 3 transfer frames; incoming window 3 (never
    # renewed) and plenty of link credit: exactly 1 message arrives; window 2 renewed at 1: the
    # other 9 arrive.
    rabbit = Rabbit(prefill=10, size=2502)
    connection = open_connection(
        rabbit, consumers=(consumer(),), grant_at_attach=False, max_frame_size=1000
    )
    client = connection.consumers["c1"]
    frames = record_frames(connection.to_client)
    client_window(connection, 3, renew=False)
    client.grant(50)
    rabbit.run_for(SETTLE_US)
    assert client.received == 1
    assert sum(isinstance(f, TransferFrame) for f in frames) == 3
    client_window(connection, 2, renew=True)
    rabbit.run_for(10 * SETTLE_US)
    assert client.received == 10
    assert sum(isinstance(f, TransferFrame) for f in frames) == 30
    assert connection.server.error is None


def test_incoming_window_closed_transfer_flow_order() -> None:
    # amqp_client_SUITE incoming_window_closed_transfer_flow_order: 1 ready message, the client's
    # incoming window closed, credit 2 with drain: neither the transfer nor the drain's flow
    # (credit 0, delivery-count advanced) arrives; once the window opens (5), the transfer
    # arrives first and the flow after it.
    rabbit = Rabbit(prefill=1)
    connection = open_connection(rabbit, consumers=(consumer(),), grant_at_attach=False)
    client = connection.consumers["c1"]
    frames = record_frames(connection.to_client)
    client_window(connection, 0, renew=False)
    client.grant(2, drain=True)
    rabbit.run_for(SETTLE_US)
    assert frames == []
    client_window(connection, 5, renew=False)
    rabbit.run_for(SETTLE_US)
    link_frames = [f for f in frames if isinstance(f, TransferFrame) or f.link is not None]
    assert [type(f) for f in link_frames] == [TransferFrame, FlowFrame]
    drained = link_frames[1]
    assert isinstance(drained, FlowFrame) and drained.link_flow is not None
    assert (drained.link_flow.link_credit, drained.link_flow.delivery_count) == (0, 2)
    assert (client.received, client.link.credit, client.link.delivery_count) == (1, 0, 2)


def test_incoming_window_closed_stop_link() -> None:
    # amqp_client_SUITE incoming_window_closed_stop_link: 2 ready messages, the client's incoming
    # window closed, credit 1 with drain and then credit 0 (stop); once the window opens, the 1st
    # message may or may not arrive, the 2nd must not.
    rabbit = Rabbit(prefill=2)
    connection = open_connection(rabbit, consumers=(consumer(),), grant_at_attach=False)
    client = connection.consumers["c1"]
    client_window(connection, 0, renew=False)
    client.grant(1, drain=True)
    client.grant(0)
    rabbit.run_for(SETTLE_US)
    assert client.received == 0
    client_window(connection, 5, renew=False)
    rabbit.run_for(5 * SETTLE_US)
    assert client.received <= 1
    assert connection.server.error is None


def test_incoming_window_closed_rabbitmq_internal_flow_classic_queue() -> None:
    # amqp_client_SUITE incoming_window_closed_rabbitmq_internal_flow: 5000 ready messages, the
    # client's incoming window closed, all 5000 credits granted at once: nothing arrives, and the
    # queue has not handed all its messages to the session (ready messages remain: RabbitMQ's
    # internal flow control); window 100 renewed at 50: all 5000 arrive.
    num = 5000
    rabbit = Rabbit(prefill=num)
    connection = open_connection(rabbit, consumers=(consumer(),), grant_at_attach=False)
    client = connection.consumers["c1"]
    client_window(connection, 0, renew=False)
    client.grant(num)
    rabbit.run_for(SETTLE_US)
    assert client.received == 0
    assert rabbit.queue.depth_msgs > 0
    assert rabbit.queue.depth_msgs == num - 256  # the 256 queue credits of seed 004
    client_window(connection, 100, renew=True)
    rabbit.run_for(100 * SETTLE_US)
    assert client.received == num and rabbit.queue.depth_msgs == 0


# -- amqp_client_SUITE: publishers -----------------------------------------------------------------
def test_link_flow_control() -> None:
    # amqp_client_SUITE link_flow_control: two sender links on one session, to a classic queue
    # and to a quorum queue that cannot confirm (there: its nodes are stopped; here: a queue that
    # takes 1 ms to confirm each message, far slower than the sender). The quorum sender runs out
    # of credit and is granted no more, while the classic sender on the same session is granted
    # credit again and again (1000 messages get through meanwhile); once the quorum queue has
    # confirmed enough, its sender is credited again.
    rabbit = Rabbit()
    rabbit.broker.declare_queue("qq", service_time_us=1_000)
    connection = open_connection(
        rabbit,
        publishers=(PublisherConfig("cq-sender", "q"), PublisherConfig("qq-sender", "qq")),
    )
    qq_sender = connection.publishers["qq-sender"]

    def qq_grants() -> int:
        return sum(1 for e in rabbit.log.of_type("flow") if e["link"] == "qq-sender")

    rabbit.run_for(10_000)
    grants, sent, classic = qq_grants(), qq_sender.app.sent, rabbit.queue.stats.enqueued
    assert qq_sender.link.credit == 0  # ran out of credit
    rabbit.run_for(40_000)
    assert (qq_grants(), qq_sender.app.sent, qq_sender.link.credit) == (grants, sent, 0)
    assert rabbit.queue.stats.enqueued - classic >= 1000  # the classic sender goes on
    rabbit.run_for(200_000)  # enough confirms take the unconfirmed count below 170
    assert qq_grants() > grants and qq_sender.app.sent > sent
    assert connection.server.error is None


def test_link_flow_control_amqp091_contrast() -> None:
    # amqp_client_SUITE link_flow_control, its header comment: unlike AMQP 1.0, in AMQP 0.9.1 a
    # single slow queue blocks the entire connection. Same two targets on one 0.9.1 connection:
    # once the slow queue has 400 unprocessed messages (credit flow), the classic publisher stops
    # too.
    rabbit = Rabbit()
    rabbit.broker.declare_queue("qq", service_time_us=NEVER)
    publishers = (PublisherConfig("cq-sender", "q"), PublisherConfig("qq-sender", "qq"))
    connection = Amqp091Connection(
        rabbit.broker, ConnectionConfig("c", AMQP_0_9_1, publishers=publishers)
    )
    connection.start()
    rabbit.run_for(50_000)
    classic = rabbit.queue.stats.enqueued
    assert rabbit.broker.queue("qq").stats.enqueued == 400
    rabbit.run_for(50_000)
    assert rabbit.queue.stats.enqueued == classic  # the classic publisher is blocked too
    assert len(rabbit.log.of_type("connection_blocked")) == 1


def test_resource_alarm_after_session_begin() -> None:
    # amqp_client_SUITE resource_alarm_after_session_begin: 3 messages in the queue, then a memory
    # alarm: an existing receiver still gets m1; a receiver granting credit on the same session
    # after the alarm gets m2; a receiver on a new connection opened during the alarm gets m3;
    # the sender cannot send (RabbitMQ's incoming window is 0); once the alarm clears it can.
    rabbit = Rabbit(prefill=3)
    connection1 = open_connection(
        rabbit,
        publishers=(PublisherConfig("sender", "q", batch=1),),
        consumers=(consumer("receiver 1"), consumer("receiver 2")),
        grant_at_attach=False,
    )
    sender = connection1.publishers["sender"]
    rabbit.broker.raise_alarm("memory")
    sent_before = sender.app.sent
    connection1.consumers["receiver 1"].grant(1)
    rabbit.run_for(SETTLE_US)
    assert connection1.consumers["receiver 1"].received == 1
    connection1.consumers["receiver 2"].grant(1)
    rabbit.run_for(SETTLE_US)
    assert connection1.consumers["receiver 2"].received == 1
    connection2 = open_connection(rabbit, name="c2", consumers=(consumer("receiver 3"),))
    rabbit.run_for(SETTLE_US)
    assert connection2.consumers["receiver 3"].received == 1
    assert connection1.client_session.remote_incoming_window == 0
    assert sender.app.sent == sent_before and sender.link.credit > 0
    rabbit.broker.clear_alarm("memory")
    rabbit.run_for(SETTLE_US)
    assert sender.app.sent > sent_before
    assert connection1.server.error is None and connection2.server.error is None


def test_resource_alarm_send_many() -> None:
    # amqp_client_SUITE resource_alarm_send_many (issue 12816): a memory alarm kicks in while the
    # client sends as fast as it can; the client's remote incoming window is eventually exceeded
    # (RabbitMQ set its incoming window to 0) and nothing crashes: the transfers already in
    # flight are no window violation.
    rabbit = Rabbit()
    connection = open_connection(rabbit, publishers=(PublisherConfig("sender", "q"),))
    sender = connection.publishers["sender"]
    rabbit.run_for(2_000)
    assert sender.app.sent > 0
    rabbit.broker.raise_alarm("memory")
    rabbit.run_for(SETTLE_US)
    stopped_at = sender.app.sent
    assert connection.client_session.remote_incoming_window == 0
    rabbit.run_for(SETTLE_US)
    assert sender.app.sent == stopped_at
    assert rabbit.queue.stats.enqueued == stopped_at  # every frame in flight was accepted
    assert connection.server.error is None
    rabbit.broker.clear_alarm("memory")
    rabbit.run_for(SETTLE_US)
    assert sender.app.sent > stopped_at


# -- amqp_credit_api_v2_SUITE ----------------------------------------------------------------------
def test_credit_api_v2() -> None:
    # amqp_credit_api_v2_SUITE credit_api_v2 (classic queue): 40 messages; receivers on one
    # session take turns granting 10 credits and each turn delivers exactly 10; with the queue
    # empty, a drain of 10 credits is answered by credit exhausted (a flow, no transfer) and
    # nothing else.
    rabbit = Rabbit(prefill=40)
    connection = open_connection(
        rabbit,
        consumers=(consumer("cq receiver 1"), consumer("cq receiver 3")),
        grant_at_attach=False,
    )
    frames = record_frames(connection.to_client)
    expected = {"cq receiver 1": 0, "cq receiver 3": 0}
    for name in ("cq receiver 1", "cq receiver 3", "cq receiver 1", "cq receiver 3"):
        connection.consumers[name].grant(10)
        rabbit.run_for(SETTLE_US)
        expected[name] += 10
        assert {n: c.received for n, c in connection.consumers.items()} == expected
    assert rabbit.queue.depth_msgs == 0
    frames.clear()
    receiver = connection.consumers["cq receiver 3"]
    before = receiver.link.delivery_count
    receiver.grant(10, drain=True)
    rabbit.run_for(SETTLE_US)
    link_frames = [f for f in frames if isinstance(f, TransferFrame) or f.link is not None]
    assert [type(f) for f in link_frames] == [FlowFrame]
    assert (receiver.link.credit, receiver.link.delivery_count) == (0, before + 10)


# -- AMQP 0.9.1 connection blocking ----------------------------------------------------------
def _amqp091_publisher(rabbit: Rabbit, policy: RabbitPolicy | None = None) -> Amqp091Connection:
    connection = Amqp091Connection(
        rabbit.broker,
        ConnectionConfig("c091", AMQP_0_9_1, publishers=(PublisherConfig("p", "q"),)),
        policy,
    )
    connection.start()
    return connection


def test_connection_blocked_network() -> None:
    # amqp_client system_SUITE connection_blocked_network: with a memory alarm set, a publishing
    # connection is sent connection.blocked; clearing the alarm sends connection.unblocked.
    rabbit = Rabbit()
    connection = _amqp091_publisher(rabbit)
    rabbit.run_for(SETTLE_US)
    rabbit.broker.raise_alarm("memory")
    rabbit.run_for(SETTLE_US)
    blocked = rabbit.log.of_type("connection_blocked")
    assert [e["connection"] for e in blocked] == ["c091"]
    enqueued = rabbit.queue.stats.enqueued
    rabbit.run_for(SETTLE_US)
    assert rabbit.queue.stats.enqueued == enqueued
    rabbit.broker.clear_alarm("memory")
    rabbit.run_for(SETTLE_US)
    assert [e["connection"] for e in rabbit.log.of_type("connection_unblocked")] == ["c091"]
    assert rabbit.queue.stats.enqueued > enqueued
    assert connection.blocked_count == 1


def test_blocked_connection_initial_block() -> None:
    # rabbitmq-java-client BlockedConnection.initialBlock: an alarm is raised first, then a
    # connection is opened and publishes; it is told connection.blocked (and nothing it publishes
    # is taken), and connection.unblocked once the alarm clears.
    rabbit = Rabbit()
    rabbit.broker.raise_alarm("memory")
    _amqp091_publisher(rabbit)
    rabbit.run_for(SETTLE_US)
    assert len(rabbit.log.of_type("connection_blocked")) == 1
    assert rabbit.queue.stats.enqueued == 0
    rabbit.broker.clear_alarm("memory")
    rabbit.run_for(SETTLE_US)
    assert len(rabbit.log.of_type("connection_unblocked")) == 1
    assert rabbit.queue.stats.enqueued > 0


def test_blocked_connection_test_block() -> None:
    # rabbitmq-java-client BlockedConnection.testBlock: a connection is opened, then an alarm
    # is raised and it publishes: connection.blocked; the alarm cleared: connection.unblocked.
    rabbit = Rabbit()
    _amqp091_publisher(rabbit)
    rabbit.broker.raise_alarm("disk")
    rabbit.run_for(SETTLE_US)
    assert len(rabbit.log.of_type("connection_blocked")) == 1
    rabbit.broker.clear_alarm("disk")
    rabbit.run_for(SETTLE_US)
    assert len(rabbit.log.of_type("connection_unblocked")) == 1


@pytest.mark.parametrize(("initial", "more"), [(400, 200), (600, 300)])
def test_credit_flow_settings(initial: int, more: int) -> None:
    # unit_credit_flow_SUITE credit_flow_settings: credit flow defaults to {400, 200} and can be
    # set to {600, 300}. A 0.9.1 publisher to a queue that processes nothing gets exactly the
    # initial credit through before its connection is blocked (by that queue).
    rabbit = Rabbit(service_time_us=NEVER)
    policy = (
        None
        if (initial, more) == (400, 200)
        else RabbitPolicy(credit_flow_initial=initial, credit_flow_more=more)
    )
    _amqp091_publisher(rabbit, policy)
    rabbit.run_for(5 * SETTLE_US)
    assert rabbit.queue.stats.enqueued == initial
    (blocked,) = rabbit.log.of_type("connection_blocked")
    assert blocked["queue"] == "q"

"""Conformance of the AMQP 1.0 link/session layer, RabbitMQ's credit policies and the Artemis model.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/): 002 =
002_8bfb94f9202e03aa.txt and 004 = 004_fc910a8b38581445.txt (RabbitMQ, "Ten Benefits of AMQP 1.0
Flow Control", prose and markdown of the same post), 003 = 003_f23b3b194dd46fde.txt (Apache
Artemis flow control). Cases already covered by tests/test_seed_conformance.py and the
tests/test_protocol_*.py files are not repeated here.
"""

from __future__ import annotations

from typing import Any

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.protocols.amqp10 import (
    SESSION_WINDOW_VIOLATION,
    LinkFlow,
    ProtocolError,
    ReceiverLink,
    SenderLink,
    SessionEndpoint,
    SessionFlow,
)
from flowctl_core.protocols.artemis import (
    AddressConfig,
    ArtemisConfig,
    ArtemisConsumerConfig,
    ArtemisProducerConfig,
    ArtemisServer,
)
from flowctl_core.protocols.artemis_flow import (
    DEFAULT_CONSUMER_WINDOW,
    DEFAULT_CORE_MESSAGE_OVERHEAD,
    DEFAULT_MAX_SIZE_BYTES,
    AddressSettings,
    ArtemisConfigError,
    ConsumerWindow,
    rate_limiter,
)
from flowctl_core.protocols.config import (
    AMQP_10,
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.serial import SERIAL_MAX
from flowctl_core.protocols.wire import FlowFrame
from flowctl_core.queue import Message

NEVER = 10**12  # a queue service time no test reaches: the queue never confirms
SECOND = 1_000_000


class Rabbit:
    """A broker on a fresh virtual clock with one AMQP 1.0 connection, events validated."""

    def __init__(self, prefill: int = 0, service_time_us: int = 0, size: int = 100) -> None:
        self.scheduler = Scheduler(0)
        self.log = EventCollector()
        bus = EventBus("t", self.scheduler, validate=True)
        bus.subscribe(self.log)
        self.broker = Broker(bus, self.scheduler)
        self.queue = self.broker.declare_queue("q", service_time_us=service_time_us)
        self.fill(prefill, size)

    def fill(self, count: int, size: int = 100) -> None:
        for _ in range(count):
            self.queue.enqueue(Message(self.broker.next_message_id(), size, None))

    def connect(self, **config: Any) -> Amqp10Connection:
        connection = Amqp10Connection(self.broker, ConnectionConfig("c", AMQP_10, **config))
        connection.start()
        return connection

    def run_for(self, us: int) -> None:
        self.scheduler.run_until(self.scheduler.now_us + us)


def _consumer(credit: int, **config: Any) -> tuple[ConsumerConfig, dict[str, Any]]:
    return ConsumerConfig("c1", "q", credit=credit, top_up_below=0), config


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
        ConnectionConfig("c", AMQP_10, consumers=(consumer,), client_incoming_window=3),
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
        rabbit.broker, ConnectionConfig("c", AMQP_10, publishers=(publisher,))
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


# -- Artemis (seed 003) ----------------------------------------------------------------------------
def test_artemis_defaults() -> None:
    """003: "By default, the consumerWindowSize is set to 1 MiB (1024 * 1024 bytes)"; "in the
    default configuration all addresses are set to block producers after 10 MiB"; reject
    threshold "by default set to -1 (or no limit)"; max rates: "The default value is -1."."""
    assert DEFAULT_CONSUMER_WINDOW == 1024 * 1024
    assert ArtemisConsumerConfig("c", "q").window == 1024 * 1024
    settings = AddressSettings()
    assert settings.max_size_bytes == DEFAULT_MAX_SIZE_BYTES == 10 * 1024 * 1024
    assert settings.address_full_policy == "BLOCK"
    assert settings.max_size_bytes_reject_threshold == -1
    assert (settings.amqp_credits, settings.amqp_low_credits) == (100, 30)
    assert ArtemisProducerConfig("p", "q").max_rate == -1
    assert ArtemisConsumerConfig("c", "q").max_rate == -1


@pytest.mark.parametrize("rate", [0, -2, -100])
def test_a_max_rate_must_be_positive_or_minus_one(rate: int) -> None:
    """003: "The rate must be a positive integer to enable this functionality" / "Setting this to
    -1 disables rate limited flow control."."""
    assert rate_limiter(-1) is None
    assert rate_limiter(1) is not None
    with pytest.raises(ArtemisConfigError):
        rate_limiter(rate)
    with pytest.raises(ArtemisConfigError):
        ArtemisProducerConfig("p", "q", max_rate=rate)
    with pytest.raises(ArtemisConfigError):
        ArtemisConsumerConfig("c", "q", max_rate=rate)


def _artemis(config: ArtemisConfig) -> tuple[Scheduler, ArtemisServer]:
    scheduler = Scheduler(0)
    bus = EventBus("t", scheduler, validate=True)
    bus.subscribe(EventCollector())
    server = ArtemisServer(Broker(bus, scheduler), config)
    server.start()
    return scheduler, server


def test_consumer_window_minus_one_buffers_without_bound() -> None:
    """003: "-1 for an unbounded buffer" / "This will allow unbounded message buffering on the
    client side." A consumer that takes a second per message still receives every message."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(AddressConfig("q", AddressSettings(max_size_bytes=-1), prefill_count=500),),
            consumers=(ArtemisConsumerConfig("c", "q", window=-1, process_us=SECOND),),
        )
    )
    scheduler.run_until(SECOND // 2)
    consumer = server.consumers["c"]
    assert consumer.server_end.credits is None
    assert consumer.received == 500 and consumer.peak_buffered_msgs >= 499
    assert ConsumerWindow(-1).on_take(10_000) == 0  # nothing to give back: no credit exists


def test_consumer_window_counts_bytes_not_messages() -> None:
    """003: "The total maximum size of messages (in bytes) that will be buffered on each consumer
    is determined by the consumerWindowSize parameter." A 10,000-byte window holds 10 messages of
    1,000 bytes (the server sends while it has any credit left)."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(
                AddressConfig(
                    "q", AddressSettings(max_size_bytes=-1), prefill_count=50, prefill_size=1_000
                ),
            ),
            consumers=(ArtemisConsumerConfig("c", "q", window=10_000, process_us=10 * SECOND),),
        )
    )
    scheduler.run_until(SECOND)
    consumer = server.consumers["c"]
    assert consumer.received == 10
    assert consumer.server_end.credits == 0


def test_address_size_counts_a_message_once_for_all_its_queues() -> None:
    """003: "The address block applies to all queues registered to that address. i.e. the total
    memory for all queues bound to that address will not exceed max-size-bytes."."""
    scheduler, server = _artemis(
        ArtemisConfig(
            addresses=(
                AddressConfig(
                    "t", AddressSettings(max_size_bytes=100_000), queues=("s1", "s2", "s3")
                ),
            ),
            producers=(ArtemisProducerConfig("p", "t", size=1_000, count=20),),
        )
    )
    scheduler.run_until(SECOND)
    state = server.addresses["t"].state
    assert state.accepted == 20
    # Each message once at its memory estimate (DESIGN §2: body + the CORE overhead), not 3 x.
    assert state.size == 20 * (1_000 + DEFAULT_CORE_MESSAGE_OVERHEAD)
    assert all(server.broker.queue(q).depth_msgs == 20 for q in ("s1", "s2", "s3"))


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


def test_max_link_credit_and_max_incoming_window_are_configurable() -> None:
    """004: "The value of 170 is configurable via advanced.config setting rabbit.max_link_credit"
    / "The value of 400 is configurable via advanced.config setting rabbit.max_incoming_window".
    With 10 credits a never-confirming queue gets 10 + 5 messages; a window of 20 re-opens at 10.
    """
    rabbit = Rabbit(service_time_us=NEVER)
    publisher = PublisherConfig("p", "q", size_bytes=100)
    connection = Amqp10Connection(
        rabbit.broker,
        ConnectionConfig("c", AMQP_10, publishers=(publisher,)),
        RabbitPolicy(max_link_credit=10, max_incoming_window=20),
    )
    connection.start()
    rabbit.run_for(SECOND)
    assert rabbit.queue.stats.enqueued == 15
    reopened = [e for e in rabbit.log.of_type("session_window") if "reopened" in e["detail"]]
    assert len(reopened) == 1  # after frames 1..10 the window is 10: re-opened to 20 once
    assert connection.server.endpoint.incoming_window == 20 - 5

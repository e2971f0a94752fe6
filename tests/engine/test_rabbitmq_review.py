"""RabbitMQ's AMQP 1.0 and 0.9.1 links (flowctl_core/protocols/rabbitmq_amqp10.py, amqp091.py), for
the points of the AMQP review.

Each test quotes the seed or DESIGN.md sentence it enforces (seed files in /work/shared/seeds/:
004 = 004_fc910a8b38581445.txt, RabbitMQ's "Ten Benefits of AMQP 1.0 Flow Control"). Moved from
tests/test_amqp_seed_review.py (provenance: the ``review`` mark).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from flowctl_core import EventCollector
from flowctl_core.events import PREFILL_LINK
from flowctl_core.protocols.amqp091 import Amqp091Connection
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection, BrokerConsumerLink
from flowctl_core.queue import Message
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario, parse_scenario
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0
from tests.engine.helpers import Rabbit

pytestmark = pytest.mark.review


def _watch(link: BrokerConsumerLink, check: Callable[[], None]) -> None:
    """Run ``check`` after every state change of ``link`` (client flows, deliveries, sends)."""
    for name in ("on_flow", "deliver", "forward", "pump"):
        method = getattr(link, name)

        def watched(*args: Any, _method: Any = method) -> None:
            _method(*args)
            check()

        setattr(link, name, watched)


# -- 2. every link's attach is a link_attached event ----------------------------------------------
def _short_run(name: str, duration_s: float = 0.05) -> EventCollector:
    log = EventCollector()
    scenario = load_scenario(name).model_copy(update={"duration_s": duration_s})
    run_scenario(scenario, [log], validate=True)
    return log


# -- 3. AMQP 0.9.1 enqueues carry the publisher's window and what is outstanding in it -------------
def _amqp091_enqueues(publisher: PublisherConfig, service_time_us: int) -> list[dict[str, Any]]:
    rabbit = Rabbit()
    rabbit.broker.declare_queue("slow", service_time_us=service_time_us)
    connection = Amqp091Connection(
        rabbit.broker,
        ConnectionConfig("c091", AMQP_0_9_1, publishers=(publisher,), frame_cost_us=8),
    )
    connection.start()
    rabbit.run_for(200_000)
    return [e for e in rabbit.log.of_type("enqueue") if e["link"] == publisher.name]


def _sender_flows(rabbit: Rabbit, link: str) -> list[dict[str, Any]]:
    return [
        json.loads(e["detail"])
        for e in rabbit.log.of_type("flow")
        if e["link"] == link and json.loads(e["detail"])["origin"] == "sender"
    ]


# -- 1. the 256-credit cap covers the messages buffered in the session ----------------------------
@pytest.mark.parametrize("top_up_below", [500, 995])
def test_buffered_plus_queue_credit_never_exceeds_256_while_the_client_tops_up(
    top_up_below: int,
) -> None:
    """004: "To guard against this scenario - where a large number of messages could be buffered
    in the session process - RabbitMQ ... internally grants link credits from the session process
    to the queue process in batches of at most 256 link credits. Even if the client grants a large
    number of link credits, the queue will only ever see up to 256 credits for a given consumer.
    Once these 256 messages have been sent out by the server session process, the server session
    process will grant the next batch". So the messages the queue handed to the session that are
    not yet sent out, plus the credit the queue still holds, never exceed 256 - also while the
    client keeps topping up a large credit through a small session incoming-window."""
    rabbit = Rabbit(prefill=5_000)
    consumer = ConsumerConfig("c1", "q", credit=1_000, top_up_below=top_up_below)
    connection = rabbit.connect(consumers=(consumer,), client_incoming_window=20)
    link = connection.server.consumers["c1"]
    seen: list[int] = []

    def check() -> None:
        held = len(link.buffered) + link.queue_credit
        seen.append(held)
        assert held <= 256, (len(link.buffered), link.queue_credit)
        assert link.queue_credit >= 0

    _watch(link, check)
    rabbit.run_for(200_000)
    client = connection.consumers["c1"]
    assert client.received > 3_000  # the client kept topping up: many flows crossed the buffer
    assert max(seen) == 256  # the cap is used, not just respected


def _first_flow_in(rabbit: Rabbit, credit: int) -> Amqp10Connection:
    """A consumer granting ``credit`` through a client session window of 20 frames, run until
    its first flow has reached the broker (the queue has handed the session what it may)."""
    consumer = ConsumerConfig("c1", "q", credit=credit, top_up_below=0)
    config = ConnectionConfig("c", AMQP_1_0, consumers=(consumer,), client_incoming_window=20)
    connection = Amqp10Connection(rabbit.broker, config)
    connection.start()
    rabbit.run_for(config.latency_us + config.frame_cost_us)
    return connection


def _flow_replies(rabbit: Rabbit) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """Link c1's events: its drain and echo answers (position and event) and the position of its
    last transfer."""
    events = [e for e in rabbit.log.events if e.get("link") == "c1"]
    replies = [
        (i, e)
        for i, e in enumerate(events)
        if e["event_type"] == "flow"
        and json.loads(e["detail"]).get("reason") in ("drained", "echo")
    ]
    last_transfer = max(i for i, e in enumerate(events) if e["event_type"] == "transfer")
    return replies, last_transfer


def test_a_client_flow_cannot_hand_the_queue_credit_for_messages_already_buffered() -> None:
    """004: "the queue will only ever see up to 256 credits for a given consumer. Once these 256
    messages have been sent out by the server session process, the server session process will
    grant the next batch". With 236 of the first 256 still waiting in the session, a new grant of
    1,000 may give the queue only the 20 the session has sent out."""
    rabbit = Rabbit(prefill=2_000)
    connection = _first_flow_in(rabbit, 1_000)
    link = connection.server.consumers["c1"]
    assert (rabbit.queue.stats.dequeued, len(link.buffered), link.queue_credit) == (256, 236, 0)
    connection.consumers["c1"].grant(1_000)
    rabbit.run_for(connection.config.latency_us + connection.config.frame_cost_us)
    assert len(link.buffered) + link.queue_credit <= 256
    assert rabbit.queue.stats.dequeued <= 256 + 20


def test_messages_buffered_in_the_session_go_out_after_the_client_lowers_its_credit() -> None:
    """004: "messages are buffered in the session process until the client's `incoming-window`
    allows them to be forwarded". Only the window holds them: RabbitMQ's session forwards what the
    queue handed it even after the client lowered its credit (rabbit_amqp_session's
    send_pending checks the remote incoming window alone; the link's credit stays at 0, its
    delivery-count goes on). A grant of 0 stops the queue, and strands nothing: found by an audit,
    30 of the 50 messages the queue had delivered stayed in the session."""
    rabbit = Rabbit(prefill=100)
    connection = _first_flow_in(rabbit, 50)
    link = connection.server.consumers["c1"]
    assert (rabbit.queue.stats.dequeued, len(link.buffered)) == (50, 30)
    client = connection.consumers["c1"]
    client.grant(0)
    rabbit.run_for(100_000)
    assert connection.server.error is None
    assert (client.received, rabbit.queue.stats.dequeued, len(link.buffered)) == (50, 50, 0)
    assert (link.link.credit, link.queue_credit, rabbit.queue.depth_msgs) == (0, 0, 50)
    assert link.link.delivery_count == client.link.delivery_count == 50
    transfers = [e for e in rabbit.log.of_type("transfer") if e["link"] == "c1"]
    assert [e["delivery_count"] for e in transfers] == list(range(1, 51))


@pytest.mark.parametrize(
    ("drain", "echo", "reason"),
    [(True, False, "drained"), (False, True, "echo"), (True, True, "echo")],
)
def test_a_flow_asked_with_no_credit_answers_after_the_messages_buffered_in_the_session(
    drain: bool, echo: bool, reason: str
) -> None:
    """rabbit_amqp_session queues a link's flow behind its pending transfers ("An outgoing FLOW
    frame with link flow control information must not overtake a TRANSFER frame for the same
    link"): a drain or an echo with credit 0 while 30 messages wait for the client's window is
    answered by one flow once they have gone out, its delivery-count theirs (a drain with echo:
    the echo's reply answers both). Before, the echo's reply overtook them (a review)."""
    rabbit = Rabbit(prefill=100)
    connection = _first_flow_in(rabbit, 50)
    connection.consumers["c1"].grant(0, drain=drain, echo=echo)
    rabbit.run_for(100_000)
    assert connection.server.error is None
    replies, last_transfer = _flow_replies(rabbit)
    assert [json.loads(e["detail"])["reason"] for _, e in replies] == [reason]
    ((answered, reply),) = replies
    assert answered > last_transfer
    assert (reply["credit"], reply["delivery_count"]) == (0, 50)
    assert connection.consumers["c1"].link.delivery_count == 50


def test_an_echo_still_due_is_answered_after_a_later_flow_without_echo() -> None:
    """An echo asked while messages wait in the session, then a flow without echo before they
    have gone out: the first echo is still answered, once, after them (RabbitMQ stashes the
    second credit request until the first's reply)."""
    rabbit = Rabbit(prefill=100)
    connection = _first_flow_in(rabbit, 50)
    client = connection.consumers["c1"]
    client.grant(0, echo=True)
    rabbit.run_for(connection.config.frame_cost_us)
    client.grant(0, echo=False)
    rabbit.run_for(100_000)
    replies, last_transfer = _flow_replies(rabbit)
    assert [json.loads(e["detail"])["reason"] for _, e in replies] == ["echo"]
    ((answered, reply),) = replies
    assert answered > last_transfer
    assert (reply["credit"], reply["delivery_count"]) == (0, 50)


@pytest.mark.parametrize("scenario", ["rabbitmq-one-sender-one-receiver", "rabbitmq-two-senders"])
def test_every_link_starts_with_one_link_attached(scenario: str) -> None:
    """DESIGN.md §3: "Event types: ... `link_attached`, `link_detached`, `flow` (a flow frame: new
    credit / drain / echo)". Every link of the log - AMQP 1.0 and 0.9.1, publisher and consumer -
    is attached once, by a link_attached that is its first event; an attach sends no flow frame,
    so no flow event stands in for it. Messages put in the queue before the run name the reserved
    producer ``prefill`` (DESIGN §3: "Enqueue events name the producer in `link`"), which is no
    link: it has no attach and no link event."""
    log = _short_run(scenario)
    first: dict[str, dict[str, Any]] = {}
    attached: dict[str, int] = {}
    for event in log.events:
        link = event.get("link")
        if link == PREFILL_LINK:
            assert event["event_type"] == "enqueue"
            continue
        if link is None:
            continue
        first.setdefault(link, event)
        if event["event_type"] == "link_attached":
            attached[link] = attached.get(link, 0) + 1
    assert first and attached == dict.fromkeys(first, 1)
    assert {e["event_type"] for e in first.values()} == {"link_attached"}
    reasons = {json.loads(e["detail"]).get("reason") for e in log.of_type("flow") if e["detail"]}
    assert not reasons & {"attached", "basic.consume"}


def test_a_consumer_link_attaches_with_the_state_it_has() -> None:
    """004: "RabbitMQ is not allowed to start sending messages to the consumer until the consumer
    sends its first flow frame, granting link credit to the sending queue"; DESIGN.md §3: "link
    events carry the link's `credit` and `available` after the event". An AMQP 1.0 consumer
    attaches with credit 0 and the queue's ready messages available; a 0.9.1 basic.consume with
    its prefetch as credit (the logged credit of a 0.9.1 consumer is prefetch - unacknowledged)."""
    rabbit = Rabbit(prefill=7)
    rabbit.connect(consumers=(ConsumerConfig("c1", "q", credit=50, top_up_below=25),))
    connection = Amqp091Connection(
        rabbit.broker,
        ConnectionConfig(
            "c091", AMQP_0_9_1, consumers=(ConsumerConfig("c2", "q", credit=30, top_up_below=0),)
        ),
    )
    connection.start()
    events = {e["link"]: e for e in rabbit.log.of_type("link_attached")}
    assert set(events) == {"c1", "c2"}
    ten, old = events["c1"], events["c2"]
    assert (ten["link_role"], ten["protocol"]) == ("consumer", AMQP_1_0)
    assert (ten["credit"], ten["delivery_count"], ten["available"]) == (0, 0, 7)
    assert (old["link_role"], old["protocol"]) == ("consumer", AMQP_0_9_1)
    assert (old["credit"], old["available"]) == (30, 7)
    # The consumer's own first flow follows the attach: a flow frame really sent.
    rabbit.run_for(10_000)
    flows = [json.loads(e["detail"]) for e in rabbit.log.of_type("flow") if e["link"] == "c1"]
    # RabbitMQ's per-consumer queue credit cap rides along (seed 004: "256 credits").
    assert {
        "origin": "receiver",
        "link_credit": 50,
        "credit_window": 50,
        "drain": False,
        "echo": False,
        "max_queue_credit": 256,
    } in flows


def test_an_amqp091_publisher_attaches_with_its_window_as_credit() -> None:
    """DESIGN.md §3: "`link_role` | `publisher` (into the broker)"; "link events carry the link's
    `credit` and `available` after the event". 0.9.1 has no link credit (a publisher is throttled
    by blocking its connection), so its link_attached carries the window its enqueues log as
    capacity (400 unprocessed messages) as credit, never 0, and what it has ready (1 message when
    sending flat out) as available."""
    rabbit = Rabbit()
    connection = Amqp091Connection(
        rabbit.broker,
        ConnectionConfig("c091", AMQP_0_9_1, publishers=(PublisherConfig("p", "q"),)),
    )
    connection.start()
    (event,) = rabbit.log.of_type("link_attached")
    assert (event["link"], event["link_role"], event["protocol"]) == ("p", "publisher", AMQP_0_9_1)
    assert (event["credit"], event["available"]) == (400, 1)


def test_amqp091_enqueues_carry_the_credit_flow_window_and_the_unprocessed_messages() -> None:
    """DESIGN.md §3: "Enqueue events name the producer in `link` and carry its `capacity` and
    `outstanding`"; §2: "A producer has a capacity window of uncompleted transfers; when it is full
    the producer must wait". A 0.9.1 publisher's window is RabbitMQ's credit flow to the queue
    (400): when 400 of its messages are unprocessed the connection is blocked (004: "one slow
    queue ... causes the entire AMQP 0.9.1 connection to be blocked")."""
    enqueues = _amqp091_enqueues(PublisherConfig("p", "slow"), service_time_us=67)
    assert len(enqueues) > 1_000
    assert {e["capacity"] for e in enqueues} == {400}
    outstanding = [e["outstanding"] for e in enqueues]
    assert outstanding[0] == 1 and min(outstanding) >= 1
    assert max(outstanding) == 400  # the window fills, and is never exceeded


def test_a_confirming_amqp091_publisher_batch_narrows_its_window() -> None:
    """DESIGN.md §2: "A producer has a capacity window of uncompleted transfers; when it is full
    the producer must wait". A publisher that waits for its batch of 50 to be confirmed (004:
    "batches of 10,000 messages" awaiting confirms) never has more than 50 uncompleted."""
    enqueues = _amqp091_enqueues(PublisherConfig("p", "slow", batch=50), service_time_us=1_000)
    assert len(enqueues) > 100
    assert {e["capacity"] for e in enqueues} == {50}
    assert max(e["outstanding"] for e in enqueues) == 50


@pytest.mark.parametrize("ready", [0, 5])
def test_rabbitmq_replies_to_a_drain_with_no_credit_with_a_flow(ready: int) -> None:
    """004: "By setting the drain field to true, the consumer requests RabbitMQ to "Either send a
    transfer or a flow frame." If the source queue is empty, RabbitMQ will promptly reply with
    only a flow frame." With link-credit 0 no transfer is possible, so whether or not the queue
    has messages the reply is a flow frame, carrying the queue's ready messages in available."""
    rabbit = Rabbit()
    consumer = ConsumerConfig("c1", "q", credit=4, top_up_below=0)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    client = connection.consumers["c1"]
    replies: list[Any] = []
    original = client.on_flow

    def on_flow(flow: Any) -> None:
        replies.append(flow)
        original(flow)

    client.on_flow = on_flow  # type: ignore[method-assign]
    client.grant(0)
    rabbit.run_for(10_000)
    for _ in range(ready):
        rabbit.queue.enqueue(Message(rabbit.broker.next_message_id(), 100, None))
    rabbit.run_for(10_000)
    assert not replies
    client.grant(0, drain=True)
    rabbit.run_for(10_000)
    assert len(replies) == 1
    assert (replies[0].link_credit, replies[0].drain, replies[0].available) == (0, True, ready)
    assert _sender_flows(rabbit, "c1")[-1]["reason"] == "drained"
    assert rabbit.queue.depth_msgs == ready and client.received == 0


def test_rabbitmq_sends_no_closing_flow_after_a_drain_answered_by_transfers() -> None:
    """004: the drain asks RabbitMQ to "Either send a transfer or a flow frame"; the credit-
    exhausting flow is for when "there are not enough messages to send". Credit 3 drained with
    10 messages ready is answered by 3 transfers and no flow."""
    rabbit = Rabbit(prefill=10)
    consumer = ConsumerConfig("c1", "q", credit=3, top_up_below=0)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    client = connection.consumers["c1"]
    assert client.received == 3
    client.grant(3, drain=True)
    rabbit.run_for(10_000)
    assert client.received == 6
    assert not [d for d in _sender_flows(rabbit, "c1") if d.get("reason") == "drained"]


def test_rabbitmq_takes_a_grant_crossing_a_drain_of_over_2_to_the_31_credits() -> None:
    """004: clients can "Grant ... a huge number of link credits (up to 4 billion)" and "Add other
    special logic, such as drain=true, into the mix"; "If the source queue is empty, RabbitMQ will
    promptly reply with only a flow frame." A grant sent right behind such a drain crosses the
    drain's flow; RabbitMQ must take it (credit 0: the drain used it all) and go on serving."""
    rabbit = Rabbit()
    consumer = ConsumerConfig("c1", "q", credit=4, top_up_below=0)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    client = connection.consumers["c1"]
    client.grant(2**31 + 10, drain=True)
    client.grant(5)  # in flight behind the drain
    rabbit.run_for(10_000)
    server = connection.server.consumers["c1"]
    assert connection.server.error is None
    assert (server.link.credit, client.link.credit) == (0, 0)
    assert server.link.delivery_count == client.link.delivery_count == 2**31 + 10
    client.grant(3)
    for _ in range(5):
        rabbit.queue.enqueue(Message(rabbit.broker.next_message_id(), 100, None))
    rabbit.run_for(10_000)
    assert client.received == 3


def test_rabbitmq_ends_the_session_on_a_consumer_flow_from_the_future() -> None:
    """A consumer's flow whose delivery-count the sender never reached breaks "link-credit(snd) :=
    delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)"; RabbitMQ ends the session with
    amqp:invalid-field instead of crashing."""
    rabbit = Rabbit()
    consumer = ConsumerConfig("c1", "q", credit=4, top_up_below=0)
    connection = rabbit.connect(consumers=(consumer,))
    rabbit.run_for(10_000)
    client = connection.consumers["c1"]
    client.link.delivery_count = 99
    client.grant(3)
    rabbit.run_for(10_000)
    assert connection.server.error == "amqp:invalid-field"


# -- 6. a consumer's credit change is logged when the credit is spent ------------------------------
def test_the_credit_of_a_message_split_across_frames_is_logged_when_spent() -> None:
    """DESIGN.md §3: "A link event is emitted whenever a link's `credit` or `available` changes."
    004: "the sender might still be blocked by session flow control sending this message in its
    entirety". Two 3-frame messages, 2 credits, a client window of 2 frames: the second message
    takes the last credit with its first frame, sent when the window re-opens; the event showing
    credit 0 comes then, not a window later after its last frame."""
    rabbit = Rabbit()
    for _ in range(2):
        rabbit.queue.enqueue(Message(rabbit.broker.next_message_id(), 3 * 512, None))
    consumer = ConsumerConfig("c1", "q", credit=2, top_up_below=0)
    connection = rabbit.connect(consumers=(consumer,), max_frame_size=512, client_incoming_window=2)
    server = connection.server.consumers["c1"]
    spent_at = last_frame_at = None
    while rabbit.scheduler.now_us < 10_000:
        rabbit.run_for(1)
        if spent_at is None and server.link.credit == 0 and server.link.delivery_count == 2:
            spent_at = rabbit.scheduler.now_us
        if last_frame_at is None and connection.server.endpoint.next_outgoing_id == 6:
            last_frame_at = rabbit.scheduler.now_us
    assert spent_at is not None and last_frame_at is not None and spent_at < last_frame_at
    assert connection.consumers["c1"].received == 2
    events = [e for e in rabbit.log.events if e.get("link") == "c1"]
    spent = [e for e in events if e["event_type"] != "link_attached" and e["credit"] == 0]
    assert spent[0]["ts"] == spent_at


# -- 4. an echo answered between the frames of a message split over frames -------------------------
def test_an_echo_answered_between_the_frames_of_one_message_keeps_the_consumer_going() -> None:
    """004: "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)".
    Messages of 2,000 B in 512-byte frames, a client window of 3 frames, a consumer that tops up
    its 2 credits at 1 with echo, its flows crossing messages half sent. Found by an audit: the
    run failed with "transfer received without link credit" (the client counted the message at
    its last frame, RabbitMQ at its first). The echo's reply now waits for the messages the
    session holds (RabbitMQ queues a link's flow behind its pending transfers). The consumer
    goes on and the log keeps its contract."""
    from tests.engine.test_event_log_contract import ContractChecker

    scenario = parse_scenario(
        {
            "name": "echo-between-frames",
            "kind": "workload",
            "duration_s": 0.05,
            "queues": [{"name": "q", "prefill": {"count": 3, "size": 2000}}],
            "connections": [
                {
                    "name": "c1",
                    "protocol": "amqp-1.0",
                    "max_frame_size": 512,
                    "client_incoming_window": 3,
                    "consumers": [
                        {"name": "k", "queue": "q", "credit": 2, "top_up_below": 1, "echo": True}
                    ],
                    "publishers": [{"name": "p", "queue": "q", "size": 100, "batch": 4}],
                }
            ],
        }
    )
    log, checker = EventCollector(), ContractChecker()
    result = run_scenario(scenario, [log], validate=True)
    for event in log.events:
        checker.feed(event)
    checker.finish()
    assert dict(checker.counts) == {}
    assert result.events == len(log.events)
    # The consumer went on to the end of the run (hundreds of messages, one round trip of credit
    # at a time), each message counted once: its link's delivery-count is its transfers.
    transfers = [e for e in log.of_type("transfer") if e["link"] == "k"]
    consumer_events = [e for e in log.events if e["link"] == "k"]
    assert len(transfers) > 100
    assert consumer_events[-1]["delivery_count"] == len(transfers)

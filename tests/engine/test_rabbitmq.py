"""RabbitMQ's AMQP 1.0 and 0.9.1 flow-control policies and seed 004's benchmarks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.broker import BrokerConfig
from flowctl_core.protocols.amqp091 import Amqp091Connection, CreditFlow
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
    incoming_window_due,
    publisher_credit_due,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.wire import TransferFrame
from flowctl_core.queue import Message
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario
from flowctl_core.summary import connection_totals, link_messages, protocol_comparisons
from schemas.broker_events import AMQP_0_9_1, AMQP_1_0
from tests.engine.helpers import Rabbit

NEVER = 10**12  # a service time longer than any test: the queue never confirms


class Rig:
    def __init__(self) -> None:
        self.scheduler = Scheduler(0)
        self.log = EventCollector()
        bus = EventBus("t", self.scheduler, validate=True)
        bus.subscribe(self.log)
        self.broker = Broker(bus, self.scheduler)

    def queue(self, name: str, service_time_us: int = 0, prefill: int = 0) -> None:
        queue = self.broker.declare_queue(name, service_time_us=service_time_us)
        for _ in range(prefill):
            queue.enqueue(Message(self.broker.next_message_id(), 100, None))

    def run_for(self, us: int) -> None:
        self.scheduler.run_until(self.scheduler.now_us + us)

    def events(self, event_type: str, link: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.log.of_type(event_type) if link is None or e.get("link") == link]


def detail(event: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(event["detail"]))


def test_publisher_grant_rule_170_85() -> None:
    # Seed 004: "grants again 170 link credits when the remaining link credit falls below half
    # (i.e. 85) and the number of unconfirmed messages is less than 170".
    assert publisher_credit_due(85, 0, 170) and not publisher_credit_due(86, 0, 170)
    assert not publisher_credit_due(0, 170, 170) and publisher_credit_due(0, 169, 170)


def test_a_queue_that_never_confirms_gets_170_plus_85_messages() -> None:
    rig = Rig()
    rig.queue("quorum", service_time_us=NEVER)
    publisher = PublisherConfig("p", "quorum")
    Amqp10Connection(rig.broker, ConnectionConfig("c", AMQP_1_0, publishers=(publisher,))).start()
    rig.run_for(1_000_000)
    # 170 granted; at 85 received (unconfirmed 85 < 170) 170 again; then unconfirmed reaches 170
    # and no more credit comes: the link starves with 85 + 170 sent.
    assert rig.broker.queue("quorum").stats.enqueued == 255
    grants = [detail(e)["link_credit"] for e in rig.events("flow", "p")]
    assert grants == [170, 170]
    last = rig.events("transfer", "p")[-1]
    assert (last["credit"], last["available"]) == (0, 1)  # starved: work and no credit


def test_session_window_400_reopened_at_200() -> None:
    # Seed 004: "Initially, RabbitMQ allows the publisher to send 400 transfer frames. Whenever
    # the RabbitMQ session process has processed half of that number (200 transfer frames),
    # RabbitMQ expands this window by sending a flow frame ... incoming_window = 400."
    assert incoming_window_due(200, 400) and not incoming_window_due(201, 400)
    rig = Rig()
    rig.queue("classic")
    publisher = PublisherConfig("p", "classic", size_bytes=100)
    config = ConnectionConfig("c", AMQP_1_0, publishers=(publisher,))
    Amqp10Connection(rig.broker, config).start()
    rig.run_for(20_000)
    reopened = [detail(e) for e in rig.events("session_window")]
    assert reopened and all(d["reason"] == "reopened" for d in reopened)
    assert all(d["incoming_window"] == 400 for d in reopened)
    assert [d["next_incoming_id"] for d in reopened[:3]] == [200, 400, 600]


def test_a_queue_sees_at_most_256_credits_per_consumer() -> None:
    # Seed 004: "Even if the client grants a large number of link credits, the queue will only
    # ever see up to 256 credits for a given consumer."
    rig = Rig()
    rig.queue("classic", prefill=2_000)
    consumer = ConsumerConfig("c1", "classic", credit=1_000, top_up_below=0)
    config = ConnectionConfig("c", AMQP_1_0, consumers=(consumer,), client_incoming_window=20)
    connection = Amqp10Connection(rig.broker, config)
    connection.start()
    rig.run_for(config.latency_us + config.frame_cost_us)  # the client's flow has arrived
    server_link = connection.server.consumers["c1"]
    assert rig.broker.queue("classic").stats.dequeued == 256
    assert server_link.link.credit == 1_000 - 20  # the client window let 20 through
    assert len(server_link.buffered) == 256 - 20


def test_consumer_link_events_carry_the_queue_credit_cap() -> None:
    # Seed 004: "Even if the client grants a large number of link credits, the queue will only
    # ever see up to 256 credits for a given consumer"; DESIGN.md §2: "a queue sees at most 256
    # credits per consumer". The consumer link's link_attached and flow events log the cap (and
    # keep what their detail already says); publisher links are not capped and do not.
    rig = Rig()
    rig.queue("classic", prefill=10)
    consumer = ConsumerConfig("c1", "classic", credit=300, top_up_below=0)
    publisher = PublisherConfig("p", "classic")
    config = ConnectionConfig("c", AMQP_1_0, publishers=(publisher,), consumers=(consumer,))
    Amqp10Connection(rig.broker, config).start()
    rig.run_for(100_000)
    (attached,) = rig.events("link_attached", "c1")
    assert detail(attached) == {"max_queue_credit": 256}
    flows = rig.events("flow", "c1")
    assert flows and all(detail(e)["max_queue_credit"] == 256 for e in flows)
    receiver = [detail(e) for e in flows if detail(e)["origin"] == "receiver"]
    assert receiver[0] == {
        "origin": "receiver",
        "link_credit": 300,
        "credit_window": 300,
        "drain": False,
        "echo": False,
        "max_queue_credit": 256,
    }
    publisher_events = rig.events("link_attached", "p") + rig.events("flow", "p")
    assert all(
        e.get("detail") is None or "max_queue_credit" not in detail(e) for e in publisher_events
    )


def test_the_logged_queue_credit_cap_is_the_configured_one() -> None:
    # Seed 004: "The value of 256 is configurable via advanced.config setting
    # rabbit.max_queue_credit" (scenarios: rabbitmq.max_queue_credit).
    rig = Rig()
    rig.queue("classic", prefill=10)
    consumer = ConsumerConfig("c1", "classic", credit=50, top_up_below=0)
    config = ConnectionConfig("c", AMQP_1_0, consumers=(consumer,))
    Amqp10Connection(rig.broker, config, RabbitPolicy(max_queue_credit=8)).start()
    rig.run_for(100_000)
    events = rig.events("link_attached", "c1") + rig.events("flow", "c1")
    assert events and {detail(e)["max_queue_credit"] for e in events} == {8}


def test_client_consumer_policy_200_100() -> None:
    # Seed 004: "the client could initially grant 200 link credits and send a flow with
    # link-credit = 200 whenever the remaining link credit falls below 100."
    rig = Rig()
    rig.queue("classic", prefill=1_000)
    consumer = ConsumerConfig("c1", "classic", credit=200, top_up_below=100)
    Amqp10Connection(rig.broker, ConnectionConfig("c", AMQP_1_0, consumers=(consumer,))).start()
    rig.run_for(100_000)
    flows = [e for e in rig.events("flow", "c1") if detail(e)["origin"] == "receiver"]
    assert len(flows) > 5
    assert {detail(e)["link_credit"] for e in flows} == {200}
    assert rig.broker.queue("classic").stats.dequeued == 1_000


def alarm_rig(protocol: str) -> tuple[Rig, ConnectionConfig]:
    rig = Rig()
    rig.queue("inbox")
    rig.queue("outbox", prefill=50_000)
    config = ConnectionConfig(
        "c",
        protocol,
        publishers=(PublisherConfig("pub", "inbox"),),
        consumers=(ConsumerConfig("sub", "outbox"),),
    )
    return rig, config


def progress_during_alarm(rig: Rig) -> tuple[int, int]:
    inbox, outbox = rig.broker.queue("inbox"), rig.broker.queue("outbox")
    rig.run_for(50_000)
    rig.broker.raise_alarm("memory")
    rig.run_for(5_000)  # frames already in flight settle
    published, consumed = inbox.stats.enqueued, outbox.stats.dequeued
    rig.run_for(50_000)
    progress = (inbox.stats.enqueued - published, outbox.stats.dequeued - consumed)
    rig.broker.clear_alarm("memory")
    return progress


def test_an_alarm_blocks_amqp10_publishers_but_not_consumers() -> None:
    # Seed 004: "RabbitMQ will block AMQP 1.0 clients only from publishing transfer frames. Other
    # operations, such as AMQP 1.0 clients consuming on the same session ... will still be
    # allowed."
    rig, config = alarm_rig(AMQP_1_0)
    Amqp10Connection(rig.broker, config).start()
    published, consumed = progress_during_alarm(rig)
    assert published == 0 and consumed > 1_000
    reasons = [detail(e)["reason"] for e in rig.events("session_window")]
    assert "alarm" in reasons and reasons[-1] == "alarm_cleared"
    before = rig.broker.queue("inbox").stats.enqueued
    rig.run_for(10_000)
    assert rig.broker.queue("inbox").stats.enqueued > before  # publishing resumes


def test_an_alarm_blocks_a_whole_amqp091_connection() -> None:
    # Seed 004: "In AMQP 0.9.1, RabbitMQ will block reading from the connection socket entirely".
    rig, config = alarm_rig(AMQP_0_9_1)
    Amqp091Connection(rig.broker, config).start()
    published, consumed = progress_during_alarm(rig)
    assert published == 0
    assert consumed <= config.consumers[0].credit  # only what the prefetch let out before
    assert [e["event_type"] for e in rig.log.of_type("connection_blocked")] == [
        "connection_blocked"
    ]


def _credit_granted_at(flow: CreditFlow, sends: int) -> list[int]:
    """The processed counts at which ``flow`` grants credit, ``sends`` messages sent first."""
    for _ in range(sends):
        flow.on_send()
    return [n for n in range(1, sends + 1) if flow.on_processed()]


def test_a_quorum_queue_holds_back_credit_until_it_is_below_its_soft_limit() -> None:
    # RabbitMQ's credit flow {400, 200}: a classic queue grants 200 per 200 processed. A quorum
    # queue's channel blocks itself while the queue has more than quorum_commands_soft_limit (32)
    # commands pending, and a blocked process defers the credit it owes: the 200 due at the
    # 200th processed are granted at the 368th, when 32 wait; the next 200 are due at the 400th.
    assert _credit_granted_at(CreditFlow(400, 200), 400) == [200, 400]
    quorum = CreditFlow(400, 200, soft_limit=32)
    assert _credit_granted_at(quorum, 400) == [368, 400]
    assert quorum.credit == 400 and not quorum.blocked
    assert _credit_granted_at(CreditFlow(400, 200, soft_limit=400), 400) == [200, 400]


def test_a_queue_declared_quorum_holds_back_its_connections_credit() -> None:
    """x-queue-type: quorum (RabbitMQ's declare argument) gives the queue's credit flow the
    policy's soft limit; a classic queue, or one declared without a type, has none; a type the
    engine does not model is refused, naming the queue."""
    rig = Rig()
    rig.broker.declare_queue("q", {"x-queue-type": "quorum"})
    rig.broker.declare_queue("c", {"x-queue-type": "classic"})
    rig.queue("plain")
    publishers = tuple(PublisherConfig(f"to-{q}", q) for q in ("q", "c", "plain"))
    connection = Amqp091Connection(
        rig.broker,
        ConnectionConfig("conn", AMQP_0_9_1, publishers=publishers),
        RabbitPolicy(quorum_commands_soft_limit=10),
    )
    limits = {q: flow.soft_limit for q, flow in connection.server.credit_flows.items()}
    assert limits == {"q": 10, "c": None, "plain": None}
    with pytest.raises(ValueError, match=r"queue 's': x-queue-type must be one of classic, quorum"):
        rig.broker.declare_queue("s", {"x-queue-type": "stream"})


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_one_slow_queue_blocks_the_whole_amqp091_connection(queue_type: str) -> None:
    # Seed 004: "quorum-queue-amqp-091 causes the entire AMQP 0.9.1 connection to be blocked (and
    # unblocked) around 80 times per second"; a quorum queue's soft limit holds the credit back
    # longer, not more often.
    rig = Rig()
    rig.queue("classic", service_time_us=2)
    rig.broker.declare_queue("quorum", {"x-queue-type": queue_type}, service_time_us=67)
    publishers = (PublisherConfig("to-classic", "classic"), PublisherConfig("to-quorum", "quorum"))
    connection = Amqp091Connection(
        rig.broker, ConnectionConfig("c", AMQP_0_9_1, publishers=publishers, frame_cost_us=8)
    )
    connection.start()
    rig.run_for(500_000)
    blocked = rig.log.of_type("connection_blocked")
    assert 30 <= len(blocked) <= 50  # ~80 per second
    assert {e["queue"] for e in blocked} == {"quorum"}
    sent = connection.sent()
    assert abs(sent["to-classic"] - sent["to-quorum"]) <= 1


def shortened(name: str, duration_s: float) -> Any:
    return load_scenario(name).model_copy(update={"duration_s": duration_s})


def test_benchmark_two_senders_amqp10_sends_several_times_more() -> None:
    # Seed 004: "the total send throughput of AMQP 1.0 is four times (!) higher than that of
    # AMQP 0.9.1" (1,237,655 vs 314,859 messages).
    result = run_scenario(shortened("rabbitmq-two-senders", 0.4), validate=True)
    totals = {row.protocol: row for row in connection_totals(result)}
    ratio = totals[AMQP_1_0].sent / totals[AMQP_0_9_1].sent
    assert 3 <= ratio <= 5
    per_link = {row.link: row.messages for row in link_messages(result)}
    # The 1.0 quorum link is throttled alone; the classic link runs at full speed.
    assert per_link["publisher-classic-10"] > 5 * per_link["publisher-quorum-10"]


def test_benchmark_one_sender_one_receiver_amqp10_receives_tens_of_times_more() -> None:
    # Seed 004: "the AMQP 1.0 client receives 73 times (!) more messages than the AMQP 0.9.1
    # client" while publishing batches of 10,000 to a quorum queue on the same connection; the
    # 0.9.1 consumer took 9,068 while its connection published 172,800. Its acks wait behind
    # the batch in the socket: the benchmark's 12-byte messages, a whole batch of them, fit in
    # a socket's buffers (the scenario's socket_buffer_frames), and the quorum queue holds back
    # the reader's credit until it has nearly caught up (its soft limit). With the default
    # buffer of 200 frames and no soft limit the acks passed between the publishes: 6.3x, and
    # the consumer took more than its connection published (an audit); 40x or more now.
    result = run_scenario(shortened("rabbitmq-one-sender-one-receiver", 0.4), validate=True)
    totals = {row.protocol: row for row in connection_totals(result)}
    assert totals[AMQP_1_0].received > 20 * totals[AMQP_0_9_1].received
    assert 5 * totals[AMQP_0_9_1].received < totals[AMQP_0_9_1].sent
    assert totals[AMQP_0_9_1].blocked > 0 and totals[AMQP_1_0].blocked == 0


def test_protocols_compare_publishers_with_publishers_and_consumers_with_consumers() -> None:
    # The memory alarm's 0.9.1 consumer drains a backlog no 1.0 link reads: set beside the 1.0
    # publisher it made "amqp-1.0 moved 0.43x the messages of amqp-0-9-1" of two publishers
    # that sent as many (a README walk-through). Only the role both protocols have compares.
    alarm = run_scenario(load_scenario("rabbitmq-memory-alarm"), validate=True)
    (publishers,) = protocol_comparisons(alarm)
    assert publishers.role == "publisher"
    assert publishers.amqp10 == publishers.amqp091 == 14_900 and publishers.ratio == 1.0
    both = run_scenario(shortened("rabbitmq-one-sender-one-receiver", 0.4), validate=True)
    compared = {c.role: c for c in protocol_comparisons(both)}
    assert set(compared) == {"publisher", "consumer"}
    received = {
        link.protocol: link.messages for link in link_messages(both) if link.role == "consumer"
    }
    assert (compared["consumer"].amqp10, compared["consumer"].amqp091) == (
        received[AMQP_1_0],
        received[AMQP_0_9_1],
    )
    assert compared["consumer"].ratio is not None and compared["consumer"].ratio > 3


def test_link_events_carry_the_link_state() -> None:
    result_log = EventCollector()
    run_scenario(shortened("rabbitmq-two-senders", 0.05), [result_log], validate=True)
    link_events = result_log.of_type("flow", "transfer", "link_attached")
    assert link_events
    for event in link_events:
        for column in ("link", "link_role", "protocol", "session", "connection"):
            assert event.get(column) is not None, (column, event)
        if (event["protocol"], event["link_role"]) == (AMQP_0_9_1, "publisher"):
            # 0.9.1 has no link credit: its publishers' attach is their only link event.
            assert event["event_type"] == "link_attached"
        assert event["credit"] >= 0 and event["available"] >= 0


def test_amqp10_publisher_capacity_is_the_true_bound_on_unconfirmed() -> None:
    # DESIGN §2: "a publisher link gets 170 credits and is topped up to 170 when credit has fallen
    # to 85 or less and fewer than 170 messages are unconfirmed"; seed 004: "grants again 170 link
    # credits when the remaining link credit falls below half (i.e. 85) **and** the number of
    # unconfirmed messages is less than 170". A top-up at 169 unconfirmed lets 170 more arrive
    # before any confirm: 169 + 170 = 339. DESIGN §3: enqueue events "carry its `capacity` and
    # `outstanding`", and Qpid's overshoot_ratio <= 1 needs outstanding <= capacity.
    rig = Rig()
    # One confirm per 20 ms: the publisher spends a whole grant (170 sends, ~2 ms) between two.
    rig.queue("quorum", service_time_us=20_000)
    publisher = PublisherConfig("p", "quorum")
    Amqp10Connection(rig.broker, ConnectionConfig("c", AMQP_1_0, publishers=(publisher,))).start()
    rig.run_for(3_000_000)
    enqueues = rig.events("enqueue", "p")
    assert {e["capacity"] for e in enqueues} == {339}
    assert {detail(e)["max_link_credit"] for e in enqueues} == {170}
    outstanding = [e["outstanding"] for e in enqueues]
    assert max(outstanding) == 339  # the worst case is reached ...
    assert all(1 <= o <= e["capacity"] for o, e in zip(outstanding, enqueues, strict=True))
    # ... by the top-up granted when the 86th confirm took the unconfirmed count to 169.
    first = outstanding.index(339)
    assert outstanding[first - 169] == 170 and 255 in outstanding[:first]
    # A different policy scales the same way: 2 x max_link_credit - 1.
    small = Rig()
    small.queue("quorum", service_time_us=20_000)
    Amqp10Connection(
        small.broker,
        ConnectionConfig("c", AMQP_1_0, publishers=(publisher,)),
        RabbitPolicy(max_link_credit=10),
    ).start()
    small.run_for(1_000_000)
    small_enqueues = small.events("enqueue", "p")
    assert {e["capacity"] for e in small_enqueues} == {19}
    assert max(e["outstanding"] for e in small_enqueues) == 19


def test_amqp091_publisher_attach_logs_its_window_as_credit() -> None:
    # DESIGN §3: "link events carry the link's `credit` and `available` after the event";
    # DESIGN §2: "AMQP 0.9.1: one overloaded target queue blocks the whole connection" (no link
    # credit). The attach logs the window its enqueues carry as `capacity` (400 unprocessed, or
    # the confirm batch if smaller) as credit, and what the application has ready as available
    # (1 flat out, the batch in batches): credit > 0, so DESIGN §4's "credit == 0 and available
    # > 0" never reads a 0.9.1 publisher as starved; its stalls are connection_blocked events.
    rig = Rig()
    rig.queue("slow", service_time_us=NEVER)  # never confirms: the connection gets blocked
    rig.queue("fast")
    publishers = (PublisherConfig("flat", "slow"), PublisherConfig("batched", "fast", batch=50))
    Amqp091Connection(rig.broker, ConnectionConfig("c", AMQP_0_9_1, publishers=publishers)).start()
    rig.run_for(200_000)
    for name, window, available in (("flat", 400, 1), ("batched", 50, 50)):
        (attached,) = rig.events("link_attached", name)
        assert (attached["credit"], attached["available"], attached["capacity"]) == (
            window,
            available,
            window,
        )
        assert detail(attached) == {"credit_source": "credit-flow window"}
        enqueues = rig.events("enqueue", name)
        assert enqueues and {e["capacity"] for e in enqueues} == {window}
        assert max(e["outstanding"] for e in enqueues) <= window
        # No other link event: nothing in 0.9.1 carries a publisher's credit after the attach.
        assert not rig.events("flow", name) and not rig.events("transfer", name)
    assert max(e["outstanding"] for e in rig.events("enqueue", "flat")) == 400
    assert rig.events("connection_blocked")


# -- publisher confirms are completions (DESIGN §2) --------------------------------------------
def _confirmed_run(
    protocol: str, service_time_us: int, *, log_immediate: bool = False
) -> tuple[Rig, int]:
    """One batch publisher (confirms on) to one queue for 50 ms; the rig and the messages the
    queue processed (each of them confirmed: a batch publisher waits for every confirm)."""
    rig = Rig()
    rig.broker.config = BrokerConfig(log_immediate_completions=log_immediate)
    rig.queue("q", service_time_us=service_time_us)
    publisher = PublisherConfig("p", "q", batch=5)
    config = ConnectionConfig("c", protocol, publishers=(publisher,))
    connection_class = Amqp10Connection if protocol == AMQP_1_0 else Amqp091Connection
    connection_class(rig.broker, config).start()
    rig.run_for(50_000)
    queue = rig.broker.queue("q")
    processed = queue.stats.enqueued - queue.in_service
    return rig, processed


@pytest.mark.parametrize("protocol", [AMQP_1_0, AMQP_0_9_1])
def test_delayed_publisher_confirms_are_logged_as_completions(protocol: str) -> None:
    # A queue that confirms 1 ms after a message arrives (a quorum queue's replication): every
    # confirm is delayed, so every one is a transfer_completed of the publisher with its delay.
    rig, processed = _confirmed_run(protocol, service_time_us=1_000)
    completed = rig.events("transfer_completed", "p")
    assert processed > 10 and len(completed) == processed
    assert all(e["latency_us"] >= 1_000 for e in completed)
    assert all(e["link_role"] == "publisher" and e["protocol"] == protocol for e in completed)
    # One at a time, in batches of 5: the first waits exactly its own service time.
    assert completed[0]["latency_us"] == 1_000
    assert [e["outstanding"] for e in completed[:5]] == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("protocol", [AMQP_1_0, AMQP_0_9_1])
def test_immediate_confirms_are_logged_only_when_asked(protocol: str) -> None:
    rig, processed = _confirmed_run(protocol, service_time_us=0)
    assert processed > 10 and rig.events("transfer_completed", "p") == []
    rig, processed = _confirmed_run(protocol, service_time_us=0, log_immediate=True)
    completed = rig.events("transfer_completed", "p")
    assert len(completed) == processed and {e["latency_us"] for e in completed} == {0}


def test_an_alarm_is_told_to_a_091_client_already_held_by_credit_flow() -> None:
    # A real RabbitMQ 3.10 (conformance: the memory-alarm case) sends connection.blocked for an
    # alarm even while credit flow already holds the connection. Here a queue that never
    # confirms holds it by credit flow (400 unprocessed) before the alarm is raised.
    rig = Rig()
    rig.queue("stuck", service_time_us=NEVER)
    publisher = PublisherConfig("p", "stuck")
    Amqp091Connection(
        rig.broker, ConnectionConfig("c", AMQP_0_9_1, publishers=(publisher,))
    ).start()
    rig.run_for(100_000)
    assert [detail(e)["reason"] for e in rig.log.of_type("connection_blocked")] == [
        "credit_flow:stuck"
    ]
    rig.broker.raise_alarm("memory")
    rig.run_for(1_000)
    reasons = [detail(e)["reason"] for e in rig.log.of_type("connection_blocked")]
    assert reasons == ["credit_flow:stuck", "alarm"]
    # Still one stall: the blocked count, and the unblock when both reasons are gone, say so.
    assert [detail(e)["blocked_count"] for e in rig.log.of_type("connection_blocked")] == [1, 1]
    assert rig.log.of_type("connection_unblocked") == []


def test_a_publisher_detached_for_sending_without_credit_logs_its_links_state() -> None:
    """DESIGN §3: link events carry the link's credit and available after the event; the
    broker's link_detached of a publisher that sent beyond its credit had no available."""
    rabbit = Rabbit(service_time_us=NEVER)
    connection = rabbit.connect(publishers=(PublisherConfig("p", "q"),))
    rabbit.run_for(200_000)  # 255 sent unconfirmed: no grant since
    server_end = connection.server.publishers["p"]
    credit, delivered = server_end.link.credit, server_end.link.delivery_count
    server_end.on_message(TransferFrame("p", 99_999, 10))
    (detached,) = rabbit.log.of_type("link_detached")
    assert (detached["credit"], detached["delivery_count"]) == (credit, delivered)
    assert detached["available"] == server_end.link.available

"""Delayed completion of transfers and producer capacity windows (seeds 000/001, DESIGN.md §2)."""

from __future__ import annotations

import itertools

from tests.engine.helpers import NO_DEFAULTS, Rig


def _worst_case_rig() -> Rig:
    rig = Rig(NO_DEFAULTS)
    rig.queue("q", {"qpid.max_count": 1000, "qpid.flow_stop_count": 100})
    return rig


def test_165_message_worst_case_is_reached_and_never_exceeded() -> None:
    # Seed 001: "C1 has a configured capacity of 50 messages, and client C2's capacity is 15 ...
    # If this queue has a Flow Stop Threshold of 100 messages, then, worst-case, the queue may
    # receive up to 165 messages before clients C1 and C2 are blocked from sending further."
    rig = _worst_case_rig()
    queue = rig.broker.queue("q")
    c1 = rig.producer("C1", capacity=50, routing_key="q")
    c2 = rig.producer("C2", capacity=15, routing_key="q")
    c1.send(10, 1000)
    c2.send(10, 1000)
    rig.settle()
    assert queue.depth_msgs == 165
    assert (c1.outstanding, c2.outstanding) == (50, 15)
    assert c1.blocked and c2.blocked
    # The 101st message is held too: 65 held transfers, all of them past the threshold.
    assert queue.held_count == 65
    # Draining and refilling many times never lets the queue pass 165.
    consumer = rig.consumer("c", "q")
    for _ in range(30):
        consumer.consume(70)
        rig.settle()
        assert queue.depth_msgs <= 165
    assert queue.stats.peak_depth_msgs == 165
    assert max(e["depth_msgs"] for e in rig.events("enqueue")) == 165
    assert queue.stats.max_overshoot_msgs == 65


def test_the_101st_message_is_held_and_its_transfer_not_completed() -> None:
    # Seed 001: "the queue will enable flow control on receipt of its 101'st message - preventing
    # the completion of the Message.Transfer command that carried the 101'st message."
    rig = _worst_case_rig()
    producer = rig.producer("C1", capacity=200, routing_key="q")
    producer.send(10, 101)
    rig.settle()
    assert producer.outstanding == 1
    assert not rig.events("transfer_completed")
    enqueue, stopped = rig.events()[-2:]
    assert enqueue["event_type"] == "enqueue" and enqueue["message_id"] == 101
    assert stopped["event_type"] == "flow_stopped" and stopped["seq"] == enqueue["seq"] + 1
    assert enqueue["capacity"] == 200 and enqueue["link"] == "C1"


def test_held_transfers_complete_in_arrival_order_with_latency() -> None:
    rig = Rig(NO_DEFAULTS)
    rig.queue("q", {"qpid.flow_stop_count": 2, "qpid.flow_resume_count": 1})
    producer = rig.producer("p", capacity=10, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(1, 5)  # messages 3, 4, 5 are held
    rig.scheduler.advance(2_000_000)
    consumer.consume(4)  # depth 1 is not < 1: still ON; 3 and 4 were dequeued: released alone
    completed = rig.events("transfer_completed")
    assert [e["message_id"] for e in completed] == [3, 4]
    consumer.consume(1)  # depth 0 < 1: OFF, releases 5
    completed = rig.events("transfer_completed")
    assert [e["message_id"] for e in completed] == [3, 4, 5]
    assert {e["latency_us"] for e in completed} == {2_000_000}
    assert producer.outstanding == 0


def test_release_order_on_resume_is_arrival_order() -> None:
    rig = Rig(NO_DEFAULTS)
    rig.queue("q", {"qpid.flow_stop_count": 3, "qpid.flow_resume_count": 3})
    producers = [rig.producer(f"p{i}", capacity=5, routing_key="q") for i in range(3)]
    for round_ in range(2):
        for producer in producers:
            producer.send(1, 1 + round_)
    consumer = rig.consumer("c", "q")
    held_ids = [e["message_id"] for e in rig.events("enqueue")][3:]
    consumer.consume(rig.broker.queue("q").depth_msgs - 2)
    released = [e["message_id"] for e in rig.events("transfer_completed")]
    assert released == sorted(released)
    assert set(released) == set(held_ids)


def test_message_routed_to_two_queues_completes_only_after_both_release() -> None:
    # Seed 001: "The completion of the Message.Transfer command is held off until flow control
    # state transitions to OFF for all queues that are a destination for that command."
    rig = Rig(NO_DEFAULTS)
    a = rig.queue("a", {"qpid.flow_stop_count": 1})
    b = rig.queue("b", {"qpid.flow_stop_count": 1})
    rig.broker.declare_exchange("fan", "fanout")
    rig.broker.bind("fan", "a")
    rig.broker.bind("fan", "b")
    producer = rig.producer("p", capacity=10, routing_key="", exchange="fan")
    producer.send(1, 2)  # message 2 takes both queues over 1: held by both
    assert a.flow.flow_stopped and b.flow.flow_stopped
    assert producer.outstanding == 1
    rig.consumer("ca", "a").consume(2)
    rig.settle()
    assert not a.flow.flow_stopped
    assert producer.outstanding == 1  # b still holds it
    assert not rig.events("transfer_completed")
    rig.consumer("cb", "b").consume(2)
    rig.settle()
    assert producer.outstanding == 0
    assert [e["message_id"] for e in rig.events("transfer_completed")] == [2]


def test_head_of_line_blocking_across_destinations() -> None:
    # Seed 000 non-goal: no "skipping" of messages addressed to an unsaturated destination.
    rig = Rig(NO_DEFAULTS)
    full = rig.queue("full", {"qpid.flow_stop_count": 1})
    idle = rig.queue("idle", {"qpid.flow_stop_count": 100})
    producer = rig.producer("p", capacity=1, routing_key="full")
    producer.send(1, 2)  # the 2nd message is held by "full": window (1) is full
    producer.send(1, 3, routing_key="idle")
    rig.settle()
    assert full.depth_msgs == 2 and idle.depth_msgs == 0
    rig.consumer("c", "full").consume(2)
    rig.settle()
    assert idle.depth_msgs == 3


def test_reject_policy_rejects_at_the_limit_and_frees_the_window() -> None:
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.max_count": 3, "qpid.policy_type": "reject"})
    producer = rig.producer("p", capacity=2, routing_key="q")
    producer.send(1, 5)
    rig.settle()
    assert queue.depth_msgs == 3 and queue.stats.rejected == 2
    rejected = rig.events("message_rejected")
    assert [e["message_id"] for e in rejected] == [4, 5]
    assert '"reason":"max_count"' in rejected[0]["detail"]
    assert producer.outstanding == 0


def test_reject_by_size_limit() -> None:
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.max_size": 100})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(60, 2)
    assert queue.depth_bytes == 60 and queue.stats.rejected == 1


def test_held_message_evicted_from_a_ring_is_released() -> None:
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue(
        "q", {"qpid.max_count": 3, "qpid.policy_type": "ring", "qpid.flow_stop_count": 2}
    )
    producer = rig.producer("p", capacity=10, routing_key="q")
    producer.send(1, 3)  # message 3 held
    producer.send(1, 3)  # evicts 1, 2, 3 (3 released on its own); 4..6 held
    rig.settle()
    assert queue.stats.evicted == 3
    assert [e["message_id"] for e in rig.events("transfer_completed")] == [3]
    assert producer.outstanding == 3


def test_enqueue_events_carry_producer_and_queue_state() -> None:
    rig = Rig()
    rig.queue("q", {"qpid.max_count": 10})
    producer = rig.producer("p", capacity=4, routing_key="q")
    producer.send(100, 3)
    enqueue = rig.events("enqueue")[-1]
    assert enqueue["link"] == "p" and enqueue["link_role"] == "publisher"
    assert enqueue["protocol"] == "amqp-0-10"
    assert enqueue["capacity"] == 4 and enqueue["outstanding"] == 1
    assert (enqueue["depth_msgs"], enqueue["depth_bytes"]) == (3, 300)
    assert (enqueue["flow_stop_count"], enqueue["flow_resume_count"]) == (8, 7)
    # No qpid.max_size: the broker's default queue limit, 100 MiB (DESIGN §2), with byte
    # thresholds round(104857600 x 0.8) = 83886080 and floor(104857600 x 0.7) = 73400320.
    assert (enqueue["max_count"], enqueue["max_size"]) == (10, 104_857_600)
    assert (enqueue["flow_stop_size"], enqueue["flow_resume_size"]) == (83_886_080, 73_400_320)
    assert [e["seq"] for e in rig.events()] == list(range(1, len(rig.events()) + 1))


def test_rate_consumer_dequeues_at_its_rate_and_parks_when_empty() -> None:
    rig = Rig(NO_DEFAULTS)
    rig.queue("q")
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q", rate=10)
    producer.send(1, 5)
    consumer.start()
    rig.scheduler.advance(10_000_000)
    dequeues = rig.events("dequeue")
    assert len(dequeues) == 5
    gaps = {b["ts"] - a["ts"] for a, b in itertools.pairwise(dequeues)}
    assert gaps == {100_000}
    producer.send(1, 1)  # wakes the parked consumer without polling
    rig.scheduler.advance(1_000_000)
    assert len(rig.events("dequeue")) == 6


def test_a_completion_that_reopens_a_full_window_is_logged_even_when_immediate() -> None:
    """The enqueue that fills a producer's window shows outstanding == capacity; a transfer the
    queue does not hold completes at once, and that completion is logged when it reopens the
    window, or the log would keep the producer blocked until its next event (an audit found a
    capacity-1 producer blocked for its whole run, DESIGN §4's producer window). Completions
    that leave a window open stay unlogged, as before."""
    rig = Rig(NO_DEFAULTS)
    rig.queue("q", {"qpid.max_count": 1000, "qpid.flow_stop_count": 100})
    one = rig.producer("one", capacity=1, routing_key="q")
    three = rig.producer("three", capacity=3, routing_key="q")
    one.send(10, 3)
    three.send(10, 3)
    rig.settle()
    assert (one.outstanding, three.outstanding) == (0, 0)
    ones = [(e["event_type"], e["outstanding"]) for e in rig.events() if e.get("link") == "one"]
    assert ones == [("enqueue", 1), ("transfer_completed", 0)] * 3
    completed = rig.events("transfer_completed")
    assert {e["link"] for e in completed} == {"one"}
    assert all(e["latency_us"] == 0 for e in completed)

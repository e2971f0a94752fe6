"""Queues (flowctl_core/queue.py): delayed completion of held transfers, the seeds' sentences.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/):
000 = 000_dde6cdfc17ad042a.txt (Qpid producer flow control design), 001 = 001_f5389c1dd690e5ae.txt
(Qpid user guide). Moved from tests/test_seed_conformance.py (provenance: the ``seed`` mark).
"""

from __future__ import annotations

import pytest

from flowctl_core.flowlimit import FlowThresholds
from tests.engine.helpers import NO_DEFAULTS, Rig
from tests.engine.helpers import completed_ids as _completed

pytestmark = pytest.mark.seed("000", "001")


def _kinds(rig: Rig, *types: str) -> list[tuple[str, int | None]]:
    return [(e["event_type"], e.get("message_id")) for e in rig.events(*types)]


# -- delayed completion ----------------------------------------------------------------------------
def test_dequeue_that_resumes_flow_releases_the_held_message_with_the_others() -> None:
    """000, on dequeue: "If the amount of queue resources then drops below the low water mark,
    clear the saturated flag. Once the saturated flag is cleared, pending messages should have
    their pending completion counter decremented ... If the queue is still saturated after the
    message has been dequeued ... decrement the pending completion counter anyways." The resume
    test comes first: a held message whose dequeue turns flow OFF completes after flow_resumed."""
    rig = Rig(NO_DEFAULTS)
    rig.queue("q", {"qpid.flow_stop_count": 1, "qpid.flow_resume_count": 1})
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(1, 2)  # message 2 held
    consumer.consume(2)  # dequeue of 2 takes the depth to 0 < 1: OFF
    assert _kinds(rig, "dequeue", "flow_resumed", "transfer_completed") == [
        ("dequeue", 1),
        ("dequeue", 2),
        ("flow_resumed", None),
        ("transfer_completed", 2),
    ]


def test_held_message_dequeued_while_still_on_is_released_alone() -> None:
    """DESIGN §2: "a held message that is dequeued while the queue is still ON is released on its
    own" (000: "If the queue is still saturated after the message has been dequeued, and the
    message's transfer has not been completed, decrement the pending completion counter")."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 2, "qpid.flow_resume_count": 1})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 2)
    rig.consumer("c0", "q").consume(2)  # empty again, never stopped
    producer.send(1, 6)  # 3..8: 5, 6, 7, 8 held
    assert queue.held_count == 4
    consumer = rig.consumer("c", "q")
    consumer.consume(3)  # 3, 4 (not held) and 5 (held): depth 3, still ON
    assert queue.flow.flow_stopped
    assert _completed(rig) == [5]
    assert queue.held_count == 3 and producer.outstanding == 3
    assert not rig.events("flow_resumed")


def test_transfer_routed_to_two_queues_waits_for_the_last_holder() -> None:
    """001: "The completion of the Message.Transfer command is held off until flow control state
    transitions to OFF for all queues that are a destination for that command." A held copy
    dequeued while its queue is still ON frees that queue only."""
    rig = Rig(NO_DEFAULTS)
    a = rig.queue("a", {"qpid.flow_stop_count": 1, "qpid.flow_resume_count": 1})
    b = rig.queue("b", {"qpid.flow_stop_count": 2, "qpid.flow_resume_count": 1})
    rig.broker.declare_exchange("fan", "fanout")
    rig.broker.bind("fan", "a")
    rig.broker.bind("fan", "b")
    producer = rig.producer("p", capacity=None, routing_key="", exchange="fan")
    producer.send(1, 3)  # a holds 2 and 3; b holds 3 only
    assert (a.held_count, b.held_count) == (2, 1)
    assert _completed(rig) == []
    rig.consumer("cb", "b").consume(3)  # b: 3 released (b OFF), but a still holds 2 and 3
    assert not b.flow.flow_stopped
    assert _completed(rig) == []
    rig.consumer("ca", "a").consume(1)  # a: depth 2, still ON
    assert _completed(rig) == []
    rig.consumer("ca2", "a").consume(1)  # a: held 2 dequeued, depth 1 not < 1: released alone
    assert _completed(rig) == [2] and a.flow.flow_stopped
    rig.consumer("ca3", "a").consume(1)  # a OFF: 3 held by no one now
    assert _completed(rig) == [2, 3] and producer.outstanding == 0


def test_transfer_to_a_flowing_and_a_stopped_queue_waits_for_the_stopped_one() -> None:
    """001: "held off until flow control state transitions to OFF for all queues that are a
    destination"; a queue that was OFF when the message arrived does not hold it, even if it
    stops later."""
    rig = Rig(NO_DEFAULTS)
    stopped = rig.queue("stopped", {"qpid.flow_stop_count": 1})
    flowing = rig.queue("flowing", {"qpid.flow_stop_count": 3})
    rig.broker.declare_exchange("fan", "fanout")
    rig.broker.bind("fan", "stopped")
    rig.broker.bind("fan", "flowing")
    producer = rig.producer("p", capacity=None, routing_key="", exchange="fan")
    producer.send(1, 2)  # stopped holds 2; flowing holds nothing
    assert (stopped.held_count, flowing.held_count) == (1, 0)
    rig.producer("other", capacity=None, routing_key="flowing").send(1, 2)  # flowing: 4 > 3, ON
    assert flowing.flow.flow_stopped and flowing.held_count == 1  # only the other's message
    rig.consumer("c", "stopped").consume(2)
    assert 2 in _completed(rig) and producer.outstanding == 0


def test_resume_releases_held_transfers_of_several_producers_in_arrival_order() -> None:
    """DESIGN §2: "When a queue turns OFF it releases every message it holds, in arrival order"
    (001: "The completion ... is held off until flow control state transitions to OFF")."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 1, "qpid.flow_resume_count": 1})
    producers = [rig.producer(f"p{i}", capacity=3, routing_key="q") for i in range(3)]
    producers[0].send(1, 1)  # 1 not held
    for _ in range(3):
        for producer in reversed(producers):
            producer.send(1, 1)
    held = rig.events("enqueue")[1:]
    assert queue.held_count == 9 and [e["link"] for e in held[:3]] == ["p2", "p1", "p0"]
    # Raise the resume threshold so that one dequeue (of the unheld message 1) turns flow OFF.
    rig.broker.set_thresholds("q", FlowThresholds(stop_count=100, resume_count=100))
    rig.consumer("c", "q").consume(1)
    assert not queue.flow.flow_stopped
    completed = rig.events("transfer_completed")
    assert [e["message_id"] for e in completed] == [e["message_id"] for e in held]
    assert [e["link"] for e in completed] == [e["link"] for e in held]


@pytest.mark.parametrize(
    ("stop", "capacities"), [(100, (50, 15)), (10, (1, 1, 1)), (5, (7,)), (1, (2, 3))]
)
def test_overshoot_reaches_and_never_passes_stop_plus_capacities(
    stop: int, capacities: tuple[int, ...]
) -> None:
    """001: "If this queue has a Flow Stop Threshold of 100 messages, then, worst-case, the queue
    may receive up to 165 messages before clients C1 and C2 are blocked from sending further
    messages." (DESIGN §2: "at most the sum of its producers' capacities")."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": stop})
    producers = [
        rig.producer(f"C{i}", capacity=cap, routing_key="q") for i, cap in enumerate(capacities)
    ]
    for producer in producers:
        producer.send(1, 10 * (stop + sum(capacities)))
    rig.settle()
    bound = stop + sum(capacities)
    assert queue.depth_msgs == bound
    assert all(p.blocked for p in producers)
    consumer = rig.consumer("c", "q")
    for step in (1, 3, bound, 2):
        consumer.consume(step)
        rig.settle()
        assert queue.depth_msgs <= bound
    assert queue.stats.peak_depth_msgs == bound


def test_rejected_message_is_completed_even_while_the_queue_is_on() -> None:
    """DESIGN §2: "At the queue limit: reject policy rejects the message (the old behaviour
    disconnected the producer)" (000: "the broker will forcibly disconnect any client that
    attempts to route a message to that queue"). A rejected message is not held."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.max_count": 3, "qpid.flow_stop_count": 2})
    producer = rig.producer("p", capacity=5, routing_key="q")
    producer.send(1, 5)  # 3 held (ON), 4 and 5 rejected
    assert queue.depth_msgs == 3 and queue.stats.rejected == 2
    assert producer.outstanding == 1 and queue.held_count == 1

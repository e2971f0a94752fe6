"""Adversarial conformance checks of the engine against the seeds and DESIGN.md §2.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/):
000 = 000_dde6cdfc17ad042a.txt (Qpid producer flow control design), 001 = 001_f5389c1dd690e5ae.txt
(Qpid user guide), 003 = 003_f23b3b194dd46fde.txt (Artemis), 004 = 004_fc910a8b38581445.txt
(RabbitMQ, Ten Benefits of AMQP 1.0 Flow Control; 002 is the same text as plain prose).
"""

from __future__ import annotations

import pytest

from flowctl_core import Broker, EventBus, EventCollector, Scheduler
from flowctl_core.broker import BrokerConfig
from flowctl_core.flowlimit import FlowConfigError, FlowDefaults, FlowThresholds
from flowctl_core.protocols.amqp10 import LinkFlow, ReceiverLink, SenderLink
from flowctl_core.protocols.artemis_flow import AddressSettings, ArtemisConfigError
from flowctl_core.protocols.config import AMQP_10, ConnectionConfig, ConsumerConfig
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.serial import SERIAL_MAX
from flowctl_core.queue import Message
from tests.engine_helpers import NO_DEFAULTS, QPID_4000_8K, Rig


def _kinds(rig: Rig, *types: str) -> list[tuple[str, int | None]]:
    return [(e["event_type"], e.get("message_id")) for e in rig.events(*types)]


def _completed(rig: Rig) -> list[int]:
    return [e["message_id"] for e in rig.events("transfer_completed")]


# -- queue flow limits: boundaries -----------------------------------------------------------------
@pytest.mark.parametrize("stop", [1, 2, 7])
def test_count_only_stop_is_strict_and_resume_is_strict(stop: int) -> None:
    """001: "While the total number of enqueued messages is less than or equal to 900, the
    queue's flow control state remains OFF" / "remains ON until the total number of enqueued
    messages is less than 500"."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": stop, "qpid.flow_resume_count": stop})
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(10_000, stop)  # bytes are no threshold here: any size is fine
    assert queue.depth_msgs == stop and not queue.flow.flow_stopped
    producer.send(1, 1)
    assert queue.flow.flow_stopped
    consumer.consume(1)
    assert queue.depth_msgs == stop and queue.flow.flow_stopped  # stop is not < stop
    consumer.consume(1)
    assert queue.depth_msgs == stop - 1 and not queue.flow.flow_stopped


def test_bytes_only_thresholds_ignore_the_message_count_and_resume_strictly_below() -> None:
    """001: "A similar example using total enqueued content bytes as the threshold units are
    permitted." (stop on bytes > stop, resume on bytes < resume)."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_size": 1000, "qpid.flow_resume_size": 600})
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(0, 5000)  # 5000 empty messages: no count threshold, never stops
    assert not queue.flow.flow_stopped
    consumer.consume(5000)
    producer.send(100, 10)
    assert queue.depth_bytes == 1000 and not queue.flow.flow_stopped
    producer.send(1, 1)
    assert queue.depth_bytes == 1001 and queue.flow.flow_stopped
    consumer.consume(4)  # 1001 - 400 = 601
    assert queue.depth_bytes == 601 and queue.flow.flow_stopped
    producer.send(0, 1)  # an enqueue never resumes
    assert queue.flow.flow_stopped
    consumer.consume(1)  # 501 < 600
    assert queue.depth_bytes == 501 and not queue.flow.flow_stopped


def test_bytes_resume_exactly_at_the_resume_size_stays_on() -> None:
    """001: "remain active until both thresholds are satified: (total-msg less-than 3000 AND
    total-bytes less-than 6K)" - equal is not less."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_size": 8192, "qpid.flow_resume_size": 6144})
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(2049, 1)
    producer.send(2048, 2)
    assert queue.depth_bytes == 6145 and not queue.flow.flow_stopped
    producer.send(2048, 1)
    assert queue.depth_bytes == 8193 and queue.flow.flow_stopped
    consumer.consume(1)
    assert queue.depth_bytes == 6144 and queue.flow.flow_stopped  # 6144 is not < 6144
    consumer.consume(1)
    assert queue.depth_bytes == 4096 and not queue.flow.flow_stopped


def test_4000_msgs_or_8k_bytes_either_stops_count_first() -> None:
    """001: "The queue's flow control state transitions to ON if either threshold is crossed:
    (total-msgs greater-than 4000 OR total-bytes greater-than 8K)" - here the count crosses."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", QPID_4000_8K)
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(2, 4000)  # 8000 bytes: neither crossed
    assert not queue.flow.flow_stopped
    producer.send(2, 1)  # 4001 msgs, 8002 bytes: count crossed only
    assert queue.flow.flow_stopped
    consumer.consume(1002)  # 2999 msgs (< 3000) and 5998 bytes (< 6144): both satisfied
    assert not queue.flow.flow_stopped
    assert [e["depth_msgs"] for e in rig.events("flow_resumed")] == [2999]


# -- queue flow limits: defaults -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("max_size", "stop", "resume", "expected"),
    [
        (9999, 80, 70, (7999, 6999)),  # 7999.2 -> 7999, 6999.3 -> 6999
        (10001, 80, 70, (8001, 7000)),  # 8000.8 -> 8001, 7000.7 -> 7000
        (25, 70, 50, (18, 12)),  # 17.5 rounds half up, 12.5 floors
        (15, 90, 75, (14, 11)),  # 13.5 -> 14, 11.25 -> 11
        (10000, 90, 75, (9000, 7500)),  # the seed's own example
    ],
)
def test_default_byte_thresholds_round_stop_and_floor_resume(
    max_size: int, stop: float, resume: float, expected: tuple[int, int]
) -> None:
    """001: "If a queue is created with a default-queue-limit of 10000 bytes, then the default
    flow stop threshold would be 90% of 10000 = 9000 bytes and the flow resume threshold would be
    75% of 10000 = 7500." (DESIGN: stop = round(max x stop%), resume = floor(max x resume%))."""
    rig = Rig(BrokerConfig(default_flow_stop_ratio=stop, default_flow_resume_ratio=resume))
    queue = rig.queue("q", {"qpid.max_size": max_size})
    assert (queue.flow.stop_size, queue.flow.resume_size) == expected
    assert (queue.flow.stop_count, queue.flow.resume_count) == (0, 0)


@pytest.mark.parametrize(
    ("max_count", "expected"),
    [(13, (10, 9)), (11, (9, 7)), (2, (2, 1)), (9, (7, 6)), (1001, (801, 700))],
)
def test_default_count_thresholds_80_70_on_odd_max_counts(
    max_count: int, expected: tuple[int, int]
) -> None:
    """001: "If not overridden by the user, the value of the default-flow-stop-threshold is 80%
    and the value of the default-flow-resume-threshold is 70%." ("The same computation is
    performed should a queue be created with a maximum size expressed as a message count")."""
    queue = Rig().queue("q", {"qpid.max_count": max_count})
    assert (queue.flow.stop_count, queue.flow.resume_count) == expected


def test_default_resume_ratio_zero_means_resume_at_stop() -> None:
    """DESIGN §2: "A resume of 0 with a non-zero stop means resume = stop" (001: "Flow Stop
    Threshold must be greater than or equal to the value of the queue's Flow Resume Threshold")."""
    rig = Rig(BrokerConfig(default_flow_stop_ratio=50, default_flow_resume_ratio=0))
    queue = rig.queue("q", {"qpid.max_count": 10, "qpid.max_size": 1000})
    assert queue.flow.thresholds == FlowThresholds(5, 5, 500, 500)
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 6)
    assert queue.flow.flow_stopped
    rig.consumer("c", "q").consume(1)
    assert queue.flow.flow_stopped  # 5 is not < 5
    rig.consumer("c2", "q").consume(1)
    assert not queue.flow.flow_stopped


@pytest.mark.parametrize("policy", ["ring", "ring-strict"])
def test_ring_queues_get_no_default_thresholds_from_the_default_queue_limit(policy: str) -> None:
    """001: "queues that have been configured with a Limit Policy of type RING or RING-STRICT do
    NOT have queue flow thresholds enabled by default."."""
    rig = Rig(BrokerConfig(default_queue_limit_bytes=1000))
    ring = rig.queue("ring", {"qpid.policy_type": policy})
    plain = rig.queue("plain")
    assert ring.max_size == 1000 and not ring.flow.thresholds.enabled
    assert plain.flow.thresholds == FlowThresholds(0, 0, 800, 700)
    rig.producer("p", capacity=None, routing_key="ring").send(100, 25)
    assert ring.depth_bytes == 1000 and ring.stats.evicted == 15
    assert not rig.events("flow_stopped")


@pytest.mark.parametrize(
    ("stop", "resume"),
    [(100, 100), (100, 0), (0, 0), (50, 50), (100, 99)],
)
def test_valid_default_ratios(stop: float, resume: float) -> None:
    """001: "--default-flow-stop-threshold ... --default-flow-resume-threshold"; a ratio of 100 is
    not "over 100" and equal ratios are not "a resume ratio above the stop ratio" (DESIGN §2)."""
    FlowDefaults(stop, resume)
    Broker(EventBus("t", Scheduler(0)), Scheduler(0), BrokerConfig("b", stop, resume))


@pytest.mark.parametrize(
    ("stop", "resume"), [(100.5, 0), (0, 100.5), (0, 1), (79, 80), (-1, 0), (80, -1)]
)
def test_invalid_default_ratios_are_refused_when_the_broker_starts(
    stop: float, resume: float
) -> None:
    """DESIGN §2: "Errors: ... a ratio over 100, or a resume ratio above the stop ratio"."""
    with pytest.raises(FlowConfigError):
        Broker(EventBus("t", Scheduler(0)), Scheduler(0), BrokerConfig("b", stop, resume))


# -- queue flow limits: validation of explicit thresholds ------------------------------------------
@pytest.mark.parametrize(
    "arguments",
    [
        {"qpid.flow_stop_count": 5, "qpid.flow_resume_count": 6},
        {"qpid.flow_stop_size": 500, "qpid.flow_resume_size": 501},
        {"qpid.max_count": 100, "qpid.flow_stop_count": 101},
        {"qpid.max_size": 100, "qpid.flow_stop_size": 101},
        {"qpid.max_count": 100, "qpid.flow_stop_count": 101, "qpid.flow_resume_count": 1},
    ],
)
def test_invalid_explicit_thresholds(arguments: dict[str, int]) -> None:
    """001: "The value for a queue's Flow Stop Threshold must be greater than or equal to the
    value of the queue's Flow Resume Threshold." DESIGN §2: errors "resume > stop, stop > max"."""
    with pytest.raises(FlowConfigError):
        Rig().queue("q", arguments)


def test_stop_equal_to_max_is_allowed_in_bytes_and_is_reachable() -> None:
    """DESIGN §2: "stop > max (stop == max is allowed)" - with stop == max the queue can never
    go strictly above the stop, so it never stops (the limit rejects first)."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue(
        "q", {"qpid.max_size": 1000, "qpid.flow_stop_size": 1000, "qpid.flow_resume_size": 1000}
    )
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(100, 11)
    assert queue.depth_bytes == 1000 and queue.stats.rejected == 1
    assert not queue.flow.flow_stopped


def test_equal_stop_and_resume_are_allowed() -> None:
    """001: "greater than or equal to" - resume == stop is valid."""
    queue = Rig().queue("q", {"qpid.flow_stop_count": 7, "qpid.flow_resume_count": 7})
    assert queue.flow.thresholds == FlowThresholds(7, 7, 0, 0)


# -- thresholds changed at run time ----------------------------------------------------------------
def test_run_time_change_while_stopped_uses_the_new_resume_on_the_next_dequeue() -> None:
    """000 goal: "queue watermarks should be configurable, and allow run-time modification"."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 10, "qpid.flow_resume_count": 2})
    producer = rig.producer("p", capacity=20, routing_key="q")
    producer.send(1, 12)  # 11 and 12 held
    assert queue.flow.flow_stopped and queue.held_count == 2
    rig.broker.set_thresholds("q", FlowThresholds(stop_count=10, resume_count=10))
    assert queue.flow.flow_stopped and queue.flow.flow_stopped_count == 1  # no transition yet
    changed = rig.events("thresholds_changed")[-1]
    assert (changed["flow_stopped"], changed["flow_resume_count"]) == (True, 10)
    consumer = rig.consumer("c", "q")
    consumer.consume(2)  # depth 10: not < 10
    assert queue.flow.flow_stopped
    consumer.consume(1)  # depth 9 < 10: OFF, the held ones (11, 12) complete in order
    assert not queue.flow.flow_stopped
    assert _completed(rig) == [11, 12]
    assert producer.outstanding == 0


def test_run_time_change_to_zero_disables_flow_control() -> None:
    """001: "The user may disable flow control on a per queue basis by setting the flow-stop-size
    and flow-stop-count to zero for the queue." With every resume threshold 0 the next dequeue
    resumes (DESIGN §2: "every non-zero resume threshold is satisfied") and nothing stops again."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 3, "qpid.flow_stop_size": 300})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 5)
    assert queue.flow.flow_stopped and queue.held_count == 2
    rig.broker.set_thresholds("q", FlowThresholds())
    changed = rig.events("thresholds_changed")[-1]
    assert [changed[k] for k in ("flow_stop_count", "flow_stop_size")] == [0, 0]
    rig.consumer("c", "q").consume(1)
    assert not queue.flow.flow_stopped
    assert _completed(rig) == [4, 5]
    producer.send(1000, 50)
    assert not queue.flow.flow_stopped and queue.flow.flow_stopped_count == 1


def test_run_time_change_while_flowing_lower_than_the_depth_stops_on_the_next_enqueue() -> None:
    """000 goal: "allow run-time modification"; DESIGN §2: ON "on an enqueue, while OFF"."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_size": 10_000})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(100, 20)
    rig.broker.set_thresholds("q", FlowThresholds(stop_size=500, resume_size=0))
    assert queue.flow.resume_size == 500  # resume 0 -> resume = stop
    assert not queue.flow.flow_stopped
    producer.send(1, 1)
    assert queue.flow.flow_stopped
    # the message that crossed the (new) threshold is held
    assert queue.held_count == 1 and producer.outstanding == 1


@pytest.mark.parametrize(
    "thresholds",
    [
        FlowThresholds(stop_count=5, resume_count=6),
        FlowThresholds(stop_size=50, resume_size=51),
        FlowThresholds(stop_count=101),
        FlowThresholds(stop_size=10_001),
    ],
)
def test_invalid_run_time_change_is_refused_and_leaves_the_queue_as_it_was(
    thresholds: FlowThresholds,
) -> None:
    """DESIGN §2: errors "resume > stop, stop > max"; "Thresholds can be changed at run time"."""
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue(
        "q", {"qpid.max_count": 100, "qpid.max_size": 10_000, "qpid.flow_stop_count": 50}
    )
    before = queue.flow.thresholds
    with pytest.raises(FlowConfigError):
        rig.broker.set_thresholds("q", thresholds)
    assert queue.flow.thresholds == before
    assert not rig.events("thresholds_changed")
    rig.broker.set_thresholds("q", FlowThresholds(stop_count=100, stop_size=10_000))  # == max


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


# -- AMQP 1.0 link flow control --------------------------------------------------------------------
def test_drain_of_a_huge_credit_leaves_both_ends_with_zero_credit() -> None:
    """004: "Grant a link-credit of 0 ... or a huge number of link credits (up to 4 billion)";
    draining: "Advance the delivery-count by the remaining link-credit. Set link-credit to 0.
    Send a flow frame to the receiver." The receiver must see its credit used up as well."""
    sender, receiver = SenderLink("l", 5), ReceiverLink("l", 5)
    sender.on_flow(receiver.grant(SERIAL_MAX, drain=True))
    sender.send_transfer()
    receiver.on_transfer()
    reply = sender.finish_drain()
    assert reply is not None
    assert (reply.delivery_count, reply.link_credit) == ((5 + SERIAL_MAX) % 2**32, 0)
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, reply.delivery_count)


@pytest.mark.parametrize("credit", [2**31 - 1, 2**31, 2**31 + 1, 3_000_000_000])
def test_drain_advance_of_half_the_serial_space_is_a_count_not_a_comparison(credit: int) -> None:
    """004: delivery-count values "are 32-bit RFC-1982 serial numbers that range from [0 ..
    4,294,967,295] and wrap around"; link-credit is a uint "(2^32 - 1)". A drain may advance the
    count by any uint credit."""
    sender, receiver = SenderLink("l", SERIAL_MAX - 3), ReceiverLink("l", SERIAL_MAX - 3)
    sender.on_flow(receiver.grant(credit, drain=True))
    reply = sender.finish_drain()
    assert reply is not None
    receiver.on_flow(reply)
    assert receiver.credit == 0
    assert receiver.delivery_count == (SERIAL_MAX - 3 + credit) % 2**32


def test_drain_wraps_delivery_count_past_4294967295() -> None:
    """004: "Adding 1 to 4,294,967,295 results in 0." - a drain of 10 from 4,294,967,290."""
    sender, receiver = SenderLink("l", 4_294_967_290), ReceiverLink("l", 4_294_967_290)
    sender.on_flow(receiver.grant(10, drain=True))
    for _ in range(2):
        sender.send_transfer()
        receiver.on_transfer()
    assert sender.delivery_count == 4_294_967_292
    reply = sender.finish_drain()
    assert reply is not None and reply.delivery_count == 4
    receiver.on_flow(reply)
    assert (receiver.credit, receiver.delivery_count) == (0, 4)
    # A new grant after the wrap works from the wrapped count.
    sender.on_flow(receiver.grant(3))
    assert sender.credit == 3


def test_credit_formula_crossing_flow_after_the_wrap() -> None:
    """004: "link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)";
    the seed's 20+6-21=5 shifted to straddle 2**32: (2**32 - 1) + 6 - 0 = 5."""
    sender, receiver = SenderLink("l", SERIAL_MAX), ReceiverLink("l", SERIAL_MAX)
    sender.on_flow(receiver.grant(3))
    flow = receiver.grant(6)
    assert flow.delivery_count == SERIAL_MAX
    sender.send_transfer()
    receiver.on_transfer()
    sender.on_flow(flow)
    assert (sender.delivery_count, sender.credit) == (0, 5)
    assert (receiver.delivery_count, receiver.credit) == (0, 5)


def test_flow_before_the_attach_uses_the_initial_delivery_count() -> None:
    """004: "The delivery-count is initialized by the sender, which sends its chosen value in the
    initial-delivery-count field of the attach frame." A receiver flow that carries no count yet
    is measured against that initial value."""
    sender = SenderLink("l", 10)
    sender.on_flow(LinkFlow(link_credit=4, delivery_count=None))
    assert sender.credit == 4
    sender.send_transfer()
    sender.on_flow(LinkFlow(link_credit=4, delivery_count=None))  # 10 + 4 - 11
    assert sender.credit == 3


def test_lowering_credit_below_the_transfers_in_flight_gives_zero_not_negative() -> None:
    """004: "The receiver is allowed to dynamically increase or decrease the amount of link
    credit"; link-credit is a uint: never negative."""
    sender, receiver = SenderLink("l", 0), ReceiverLink("l", 0)
    sender.on_flow(receiver.grant(10))
    for _ in range(4):
        sender.send_transfer()
    sender.on_flow(receiver.grant(2))  # 0 + 2 - 4 = -2 -> 0
    assert sender.credit == 0


def _consumer_connection(prefill: int, credit: int) -> tuple[Scheduler, Broker, Amqp10Connection]:
    scheduler = Scheduler(0)
    bus = EventBus("t", scheduler, validate=True)
    bus.subscribe(EventCollector())
    broker = Broker(bus, scheduler)
    queue = broker.declare_queue("q")
    for _ in range(prefill):
        queue.enqueue(Message(broker.next_message_id(), 100, None))
    consumer = ConsumerConfig("c1", "q", credit=credit, top_up_below=0)
    connection = Amqp10Connection(broker, ConnectionConfig("c", AMQP_10, consumers=(consumer,)))
    connection.start()
    scheduler.run_until(10_000)
    return scheduler, broker, connection


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


# -- Artemis ---------------------------------------------------------------------------------------
def test_artemis_reject_threshold_must_be_above_the_block_limit() -> None:
    """003: "This is additional parameter allows a kind of soft and hard limit, in normal
    circumstances the broker will utilize the max-size-bytes parameter ... but will protect the
    broker by rejecting messages once the address size is reached." (DESIGN §2: "the reject
    threshold above the block limit")."""
    AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=1001)
    AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=-1)
    for threshold in (1000, 999, 0):
        with pytest.raises(ArtemisConfigError):
            AddressSettings(max_size_bytes=1000, max_size_bytes_reject_threshold=threshold)

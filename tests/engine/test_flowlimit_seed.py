"""Queue flow limits (flowctl_core/flowlimit.py, as the broker applies them): the seeds' sentences.

Each test quotes the seed sentence it checks (seed files in /work/shared/seeds/):
000 = 000_dde6cdfc17ad042a.txt (Qpid producer flow control design), 001 = 001_f5389c1dd690e5ae.txt
(Qpid user guide). Moved from tests/test_seed_conformance.py (provenance: the ``seed`` mark).
"""

from __future__ import annotations

import pytest

from flowctl_core import Broker, EventBus, Scheduler
from flowctl_core.broker import BrokerConfig
from flowctl_core.flowlimit import FlowConfigError, FlowDefaults, FlowThresholds
from tests.engine.helpers import NO_DEFAULTS, QPID_4000_8K, Rig
from tests.engine.helpers import completed_ids as _completed

pytestmark = pytest.mark.seed("000", "001")


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

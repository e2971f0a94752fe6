"""Queue flow thresholds, defaults and validation (seed 001, DESIGN.md §2)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowctl_core import FlowConfigError, FlowDefaults, FlowLimit, FlowThresholds
from flowctl_core.broker import BrokerConfig
from tests.engine.helpers import NO_DEFAULTS, QPID_4000_8K, Rig


def test_900_500_hysteresis_from_seed_001() -> None:
    # Seed 001 §1.1.1: "When the total number of enqueued messages is greater than 900, the queue's
    # flow control state transitions to ON ... remains ON until the total number of enqueued
    # messages is less than 500."
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue(
        "q", {"qpid.max_count": 1000, "qpid.flow_stop_count": 900, "qpid.flow_resume_count": 500}
    )
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    producer.send(10, 900)
    assert queue.depth_msgs == 900 and not queue.flow.flow_stopped  # <= 900 stays OFF
    producer.send(10, 1)
    assert queue.flow.flow_stopped and queue.flow.flow_stopped_count == 1
    consumer.consume(401)
    assert queue.depth_msgs == 500 and queue.flow.flow_stopped  # 500 is not less than 500
    consumer.consume(1)
    assert queue.depth_msgs == 499 and not queue.flow.flow_stopped
    stops = rig.events("flow_stopped")
    resumes = rig.events("flow_resumed")
    assert [e["depth_msgs"] for e in stops] == [901]
    assert [e["depth_msgs"] for e in resumes] == [499]


def test_either_stop_both_resume_4000_msgs_8k_bytes() -> None:
    # Seed 001 §1.1.2: ON if (total-msgs > 4000 OR total-bytes > 8K); stays ON until
    # (total-msgs < 3000 AND total-bytes < 6K).
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", QPID_4000_8K)
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    # Bytes trip first: 8 x 1025 = 8200 > 8192 with only 8 messages.
    producer.send(1025, 8)
    assert queue.flow.flow_stopped
    # Count satisfied (< 3000) but bytes not (< 6144 needs depth <= 5 messages): still ON.
    consumer.consume(2)
    assert queue.depth_bytes == 6150 and queue.flow.flow_stopped
    consumer.consume(1)
    assert queue.depth_bytes == 5125 and not queue.flow.flow_stopped
    consumer.consume(5)
    # Count trips alone: 4001 messages of 0 bytes.
    producer.send(0, 4001)
    assert queue.flow.flow_stopped and queue.flow.flow_stopped_count == 2
    consumer.consume(1001)
    assert queue.depth_msgs == 3000 and queue.flow.flow_stopped  # 3000 is not < 3000
    consumer.consume(1)
    assert not queue.flow.flow_stopped


def test_stop_is_strictly_greater_and_resume_strictly_less_in_bytes() -> None:
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_size": 1000, "qpid.flow_resume_size": 500})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(500, 2)
    assert queue.depth_bytes == 1000 and not queue.flow.flow_stopped
    producer.send(1, 1)
    assert queue.flow.flow_stopped


def test_flow_stopped_count_counts_off_to_on_only() -> None:
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 2, "qpid.flow_resume_count": 1})
    producer = rig.producer("p", capacity=None, routing_key="q")
    consumer = rig.consumer("c", "q")
    for _ in range(3):
        producer.send(1, 5)  # stays ON across extra enqueues: counted once per episode
        consumer.consume(5)
    assert queue.flow.flow_stopped_count == 3
    assert len(rig.events("flow_stopped")) == 3
    assert [e["flow_stopped_count"] for e in rig.events("flow_stopped")] == [1, 2, 3]


def test_default_ratios_80_70() -> None:
    # Seed 001 §1.2: "If not overridden by the user, the value of the default-flow-stop-threshold
    # is 80% and the value of the default-flow-resume-threshold is 70%."
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 1000, "qpid.max_size": 10000})
    assert queue.flow.thresholds == FlowThresholds(800, 700, 8000, 7000)


def test_default_ratios_90_75_on_a_10000_byte_queue() -> None:
    # Seed 001 §1.2: "qpidd --default-flow-stop-threshold=90 --default-flow-resume-threshold=75
    # ... 90% of 10000 = 9000 bytes and the flow resume threshold to 75% of 10000 = 7500."
    rig = Rig(BrokerConfig(default_flow_stop_ratio=90, default_flow_resume_ratio=75))
    queue = rig.queue("q", {"qpid.max_size": 10000})
    assert (queue.flow.stop_size, queue.flow.resume_size) == (9000, 7500)
    assert (queue.flow.stop_count, queue.flow.resume_count) == (0, 0)


def test_default_queue_limit_gives_default_thresholds() -> None:
    rig = Rig(
        BrokerConfig(
            default_flow_stop_ratio=90,
            default_flow_resume_ratio=75,
            default_queue_limit_bytes=10000,
        )
    )
    queue = rig.queue("q")
    assert queue.max_size == 10000
    assert (queue.flow.stop_size, queue.flow.resume_size) == (9000, 7500)


@pytest.mark.parametrize(
    ("max_count", "stop", "resume", "expected"),
    [
        (7, 80, 70, (6, 4)),  # 5.6 rounds to 6, 4.9 floors to 4
        (5, 90, 75, (5, 3)),  # 4.5 rounds half up to 5, 3.75 floors to 3
        (3, 50, 50, (2, 1)),  # 1.5 -> 2, 1.5 -> 1
        (1, 80, 70, (1, 1)),  # floor(0.7) = 0 -> a resume of 0 means resume = stop
        (1000, 100, 100, (1000, 1000)),
    ],
)
def test_default_rounding_round_stop_floor_resume(
    max_count: int, stop: float, resume: float, expected: tuple[int, int]
) -> None:
    thresholds = FlowDefaults(stop, resume).thresholds_for(max_count, 0)
    assert (thresholds.stop_count, thresholds.resume_count) == expected


def test_fractional_ratios_are_exact() -> None:
    # 10 x 0.7 % of 1000 = 7 exactly (binary floats would give 6.999...).
    assert FlowDefaults(0.8, 0.7).thresholds_for(1000, 0).resume_count == 7


def test_zero_zero_disables_defaults_but_manual_still_applies() -> None:
    # Seed 001: "disable default queue flow control broker-wide by specifying the value 0 for both
    # ... flow control may still be applied manually on a per-queue basis in this case."
    rig = Rig(NO_DEFAULTS)
    plain = rig.queue("plain", {"qpid.max_count": 1000})
    manual = rig.queue("manual", {"qpid.max_count": 1000, "qpid.flow_stop_count": 10})
    assert not plain.flow.thresholds.enabled
    assert manual.flow.thresholds == FlowThresholds(10, 10, 0, 0)


def test_per_queue_zero_stop_values_disable_flow_control() -> None:
    # Seed 001: "disable flow control on a per queue basis by setting the flow-stop-size and
    # flow-stop-count to zero for the queue."
    rig = Rig()
    queue = rig.queue(
        "q", {"qpid.max_count": 100, "qpid.flow_stop_count": 0, "qpid.flow_stop_size": 0}
    )
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 100)
    assert not queue.flow.flow_stopped and not rig.events("flow_stopped")


@pytest.mark.parametrize("policy", ["ring", "ring-strict", "ring_strict"])
def test_ring_queues_get_no_default_thresholds(policy: str) -> None:
    # Seed 001: "queues that have been configured with a Limit Policy of type RING or RING-STRICT
    # do NOT have queue flow thresholds enabled by default."
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 100, "qpid.policy_type": policy})
    assert not queue.flow.thresholds.enabled
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 250)
    assert queue.depth_msgs == 100 and queue.stats.evicted == 150
    assert not rig.events("flow_stopped")
    evicted = rig.events("ring_evicted")
    assert [e["message_id"] for e in evicted[:3]] == [1, 2, 3]  # the oldest go first


def test_ring_queue_accepts_explicit_thresholds() -> None:
    rig = Rig()
    queue = rig.queue(
        "q", {"qpid.max_count": 100, "qpid.policy_type": "ring", "qpid.flow_stop_count": 50}
    )
    rig.producer("p", capacity=None, routing_key="q").send(1, 51)
    assert queue.flow.flow_stopped


def test_resume_zero_means_resume_at_stop() -> None:
    limit = FlowLimit(FlowThresholds(stop_count=10))
    assert limit.resume_count == 10
    limit.stop()
    assert not limit.should_resume(10, 0)
    assert limit.should_resume(9, 0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"qpid.flow_stop_count": 10, "qpid.flow_resume_count": 11}, "flow_resume_count"),
        ({"qpid.flow_stop_size": 10, "qpid.flow_resume_size": 11}, "flow_resume_size"),
        ({"qpid.max_count": 10, "qpid.flow_stop_count": 11}, "exceeds max_count"),
        ({"qpid.max_size": 10, "qpid.flow_stop_size": 11}, "exceeds max_size"),
        ({"qpid.flow_stop_count": "lots"}, "qpid.flow_stop_count"),
        ({"qpid.flow_stop_count": -1}, "non-negative"),
        ({"qpid.policy_type": "flow_to_disk"}, "qpid.policy_type"),
        ({"qpid.max_count": -5}, "qpid.max_count"),
    ],
)
def test_invalid_thresholds_name_the_queue_and_setting(
    arguments: dict[str, object], message: str
) -> None:
    rig = Rig()
    with pytest.raises(FlowConfigError, match=message) as raised:
        rig.queue("orders", arguments)
    assert "orders" in str(raised.value)
    assert not rig.events()  # nothing declared, nothing logged


def test_stop_equal_to_max_is_allowed() -> None:
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 10, "qpid.flow_stop_count": 10})
    assert queue.flow.stop_count == 10


@pytest.mark.parametrize(
    ("stop", "resume", "message"),
    [(101, 70, "stop_ratio"), (80, 101, "resume_ratio"), (70, 80, "above the stop ratio")],
)
def test_invalid_default_ratios(stop: float, resume: float, message: str) -> None:
    with pytest.raises(FlowConfigError, match=message):
        FlowDefaults(stop, resume)


def test_thresholds_changed_at_run_time() -> None:
    # Seed 000 goal: "queue watermarks should be configurable, and allow run-time modification".
    rig = Rig(NO_DEFAULTS)
    queue = rig.queue("q", {"qpid.flow_stop_count": 100})
    producer = rig.producer("p", capacity=None, routing_key="q")
    producer.send(1, 50)
    rig.broker.set_thresholds("q", FlowThresholds(stop_count=40, resume_count=20))
    changed = rig.events("thresholds_changed")
    assert changed[-1]["flow_stop_count"] == 40 and changed[-1]["flow_resume_count"] == 20
    assert not queue.flow.flow_stopped  # a transition needs an enqueue...
    producer.send(1, 1)
    assert queue.flow.flow_stopped  # ...and the next one uses the new threshold
    with pytest.raises(FlowConfigError):
        rig.broker.set_thresholds("q", FlowThresholds(stop_count=10, resume_count=20))


def _stops_by_the_seed_rule(flow: FlowLimit, depth_msgs: int, depth_bytes: int) -> bool:
    """Seed 000: flowStopped goes ON when either non-zero stop threshold is exceeded (strict >)."""
    if flow.flow_stopped:
        return False
    return bool(
        (flow.stop_count and depth_msgs > flow.stop_count)
        or (flow.stop_size and depth_bytes > flow.stop_size)
    )


_thresholds = st.builds(
    lambda stop_count, stop_size: FlowThresholds(
        stop_count, stop_count // 2, stop_size, stop_size // 2
    ),
    st.integers(0, 50),
    st.integers(0, 5_000),
)


@given(
    first=_thresholds,
    steps=st.lists(
        st.one_of(st.just("stop"), st.just("resume"), _thresholds), min_size=0, max_size=6
    ),
    depth_msgs=st.integers(0, 60),
    depth_bytes=st.integers(0, 6_000),
)
def test_stop_above_depths_follow_every_state_change(
    first: FlowThresholds, steps: list[object], depth_msgs: int, depth_bytes: int
) -> None:
    # The queue's enqueue path tests stop_above_* instead of calling should_stop: after any
    # sequence of threshold changes, stops and resumes both must give the seed's answer.
    flow = FlowLimit(first)
    for step in [None, *steps]:
        if step == "stop":
            flow.stop()
        elif step == "resume":
            flow.resume()
        elif isinstance(step, FlowThresholds):
            flow.apply(step)
        expected = _stops_by_the_seed_rule(flow, depth_msgs, depth_bytes)
        assert flow.should_stop(depth_msgs, depth_bytes) == expected
        assert (
            depth_msgs > flow.stop_above_msgs or depth_bytes > flow.stop_above_bytes
        ) == expected


def test_the_broker_default_queue_limit_is_100_mib() -> None:
    """DESIGN §2: "The broker's default queue limit is 100 MiB in bytes (settable; 0 = none), so
    a queue without `qpid.max_size` still gets byte thresholds 80 % / 70 % of it"."""
    from flowctl_core import Broker, EventBus, Scheduler
    from flowctl_core.scenario import Scenario

    base = {
        "name": "s",
        "kind": "scripted",
        "queues": [{"name": "q"}],
        "steps": [{"advance": {"seconds": 1}}],
    }
    qpid = Scenario.model_validate(base).broker_config()
    assert qpid.default_queue_limit_bytes == 104_857_600
    broker = Broker(EventBus("t", Scheduler(0)), Scheduler(0), qpid)
    flow = broker.declare_queue("q").flow
    assert (flow.stop_size, flow.resume_size) == (83_886_080, 73_400_320)
    assert (flow.stop_count, flow.resume_count) == (0, 0)  # no max_count: no count thresholds
    off = Scenario.model_validate({**base, "broker": {"default_queue_limit_bytes": 0}})
    assert off.broker_config().default_queue_limit_bytes == 0


def test_a_rabbitmq_queue_has_no_default_limit_and_a_qpid_queue_beside_it_keeps_qpids() -> None:
    """A queue a connection's link names is RabbitMQ's: no Qpid default limit (unless the
    scenario's broker sets one, or the queue its own), and no Qpid default flow thresholds from
    any limit: RabbitMQ has none (DESIGN §2 gives them to Qpid's queues). A queue only a Qpid
    producer uses keeps the 100 MiB of DESIGN §2 and its 80 % / 70 %, connections beside it or
    not: it lost them when a scenario's connections made every queue RabbitMQ's."""
    from flowctl_core.runner import build
    from flowctl_core.scenario import Scenario

    mixed: dict[str, Any] = {
        "name": "mixed",
        "kind": "workload",
        "duration_s": 1,
        "queues": [{"name": "qpid-q"}, {"name": "rabbit-q"}, {"name": "sized-rabbit-q",
                   "arguments": {"qpid.max_size": 1000}}],
        "producers": [{"name": "p", "routing_key": "qpid-q", "capacity": 10, "rate": 10}],
        "connections": [{"name": "c", "protocol": "amqp-1.0", "publishers": [
            {"name": "l1", "queue": "rabbit-q"}, {"name": "l2", "queue": "sized-rabbit-q"}]}],
    }  # fmt: skip
    scenario = Scenario.model_validate(mixed)
    assert scenario.rabbitmq_queues() == {"rabbit-q", "sized-rabbit-q"}
    broker, _, _ = build(scenario, "r", [])
    qpid, rabbit, sized = (broker.queue(n) for n in ("qpid-q", "rabbit-q", "sized-rabbit-q"))
    assert (qpid.max_size, qpid.flow.stop_size, qpid.flow.resume_size) == (
        104_857_600,
        83_886_080,
        73_400_320,
    )
    assert (rabbit.max_size, rabbit.flow.stop_size, rabbit.flow.resume_size) == (0, 0, 0)
    # Its own limit is x-max-length(-bytes): a limit, not thresholds (it had 800 / 700, holding
    # its publishers' transfers as a Qpid queue would: a review).
    assert (sized.max_size, sized.flow.stop_size, sized.flow.resume_size) == (1000, 0, 0)
    # Without the Qpid producer, the same: the connections never changed the Qpid queue's limit.
    alone = Scenario.model_validate({**mixed, "producers": []})
    assert build(alone, "r", [])[0].queue("qpid-q").max_size == 104_857_600
    # A default the scenario sets is every queue's, RabbitMQ's included.
    set_default = Scenario.model_validate({**mixed, "broker": {"default_queue_limit_bytes": 500}})
    broker, _, _ = build(set_default, "r", [])
    assert broker.queue("rabbit-q").max_size == broker.queue("qpid-q").max_size == 500
    assert (broker.queue("rabbit-q").flow.stop_size, broker.queue("qpid-q").flow.stop_size) == (
        0,
        400,
    )
    # A RabbitMQ queue that sets a stop threshold itself has the four values it gives.
    explicit = {**mixed["queues"][1], "arguments": {"qpid.flow_stop_count": 5}}
    own = Scenario.model_validate({**mixed, "queues": [*mixed["queues"][::2], explicit]})
    assert build(own, "r", [])[0].queue("rabbit-q").flow.stop_count == 5


def test_qpid_spells_ring_strict_with_an_underscore_and_the_engine_reads_it_as_ring_strict() -> (
    None
):
    # qpid-cpp's QueuePolicy::RING_STRICT is "ring_strict" (qpid-config's --limit-policy writes
    # "ring-strict"): a declare argument copied from a real broker is the same queue.
    rig = Rig()
    queue = rig.queue("q", {"qpid.max_count": 10, "qpid.policy_type": "ring_strict"})
    assert queue.policy == "ring-strict"


@pytest.mark.parametrize("policy", ["flow_to_disk", "RING", "ring strict", 3])
def test_an_unknown_limit_policy_is_refused_naming_the_accepted_spellings(policy: object) -> None:
    with pytest.raises(FlowConfigError, match="ring-strict, ring_strict, got"):
        Rig().queue("q", {"qpid.max_count": 10, "qpid.policy_type": policy})

"""Property-based tests over random broker scenarios (hypothesis)."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl_core.broker import BrokerConfig
from tests.engine.helpers import Rig

queue_arguments = st.fixed_dictionaries(
    {
        "qpid.max_count": st.sampled_from([0, 50, 200]),
        "qpid.policy_type": st.sampled_from(["reject", "ring", "ring-strict"]),
    },
    optional={
        "qpid.flow_stop_count": st.integers(1, 40),
        "qpid.flow_stop_size": st.integers(100, 4000),
    },
)

operation = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 3), st.integers(1, 60), st.integers(0, 300)),
    st.tuples(st.just("consume"), st.integers(0, 2), st.integers(1, 60), st.just(0)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 5), st.just(0)),
)


def _resume_args(args: dict[str, object], data: st.DataObject) -> dict[str, object]:
    if "qpid.flow_stop_count" in args:
        args["qpid.flow_resume_count"] = data.draw(
            st.integers(0, int(str(args["qpid.flow_stop_count"])))
        )
    if "qpid.flow_stop_size" in args:
        args["qpid.flow_resume_size"] = data.draw(
            st.integers(0, int(str(args["qpid.flow_stop_size"])))
        )
    return args


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    arguments=st.lists(queue_arguments, min_size=1, max_size=3),
    capacities=st.lists(st.one_of(st.none(), st.integers(1, 30)), min_size=1, max_size=4),
    operations=st.lists(operation, min_size=1, max_size=40),
    fanout=st.booleans(),
)
def test_random_scenarios_keep_the_invariants(
    data: st.DataObject,
    arguments: list[dict[str, object]],
    capacities: list[int | None],
    operations: list[tuple[str, int, int, int]],
    fanout: bool,
) -> None:
    rig = Rig(BrokerConfig(default_flow_stop_ratio=60, default_flow_resume_ratio=30))
    names = [f"q{i}" for i in range(len(arguments))]
    for name, args in zip(names, arguments, strict=True):
        args = _resume_args(dict(args), data)
        if args.get("qpid.max_count") and "qpid.flow_stop_count" in args:
            args["qpid.max_count"] = max(
                int(str(args["qpid.max_count"])), int(str(args["qpid.flow_stop_count"]))
            )
        rig.queue(name, args)
    exchange = ""
    if fanout:
        rig.broker.declare_exchange("fan", "fanout")
        for name in names:
            rig.broker.bind("fan", name)
        exchange = "fan"
    producers = [
        rig.producer(f"p{i}", capacity=cap, routing_key=names[i % len(names)], exchange=exchange)
        for i, cap in enumerate(capacities)
    ]
    consumers = [rig.consumer(f"c{i}", name) for i, name in enumerate(names)]

    for action, who, count, size in operations:
        if action == "send":
            producers[who % len(producers)].send(size, count)
        elif action == "consume":
            consumers[who % len(consumers)].consume(count)
        else:
            rig.scheduler.advance(count * 1000)
        rig.settle()

    events = rig.events()
    # seq strictly increases; time never goes backwards.
    assert all(b["seq"] > a["seq"] for a, b in itertools.pairwise(events))
    assert all(b["ts"] >= a["ts"] for a, b in itertools.pairwise(events))

    capacity_sum = sum(c for c in capacities if c is not None)
    bounded = all(c is not None for c in capacities)
    for name in names:
        queue = rig.broker.queue(name)
        counts = Counter(e["event_type"] for e in events if e.get("queue") == name)
        # No message lost: enqueued = dequeued + depth + evicted.
        assert counts["enqueue"] == counts["dequeue"] + counts["ring_evicted"] + queue.depth_msgs
        # flowStoppedCount equals the OFF->ON transitions in the log, which alternate with resumes.
        transitions = [
            e["event_type"]
            for e in events
            if e.get("queue") == name and e["event_type"] in ("flow_stopped", "flow_resumed")
        ]
        assert counts["flow_stopped"] == queue.flow.flow_stopped_count
        assert all(
            t == ("flow_stopped" if i % 2 == 0 else "flow_resumed")
            for i, t in enumerate(transitions)
        )
        # Overshoot never above the sum of the producers' capacities (seed 001's 165 rule).
        if bounded and queue.flow.stop_count:
            assert queue.stats.max_overshoot_msgs <= capacity_sum
    # Every window is respected, and nothing is completed twice.
    for producer in producers:
        if producer.capacity is not None:
            assert 0 <= producer.outstanding <= producer.capacity
        assert producer.completed + producer.outstanding == producer.sent

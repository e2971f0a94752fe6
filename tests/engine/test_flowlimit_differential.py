"""Differential tests: the engine's Qpid flow control (flowctl_core/flowlimit.py, as the broker
applies it) against ``tests/engine/reference/qpid_reference_model.py``.

The model is written from DESIGN.md §2-§3 and seeds 000/001 only. Hypothesis generates workloads
(queues with random limits, thresholds and policies; 1-3 producers with capacity windows, routed
to one queue or fanned out to several; sends, dequeues, time advances and run-time threshold
changes); both sides run them and are compared after every step: flow state and flowStoppedCount
per queue, depths, held counts, rejected / evicted counts, producer windows, and the event rows
(enqueue, dequeue, flow_stopped, flow_resumed, transfer_completed, message_rejected, ring_evicted,
thresholds_changed) in order. The engine's own log is also checked against seed 001's overshoot
bound: the peak depth of an episode is at most the stop threshold plus the capacities of the
producers that enqueued during it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl_core import BrokerConfig, FlowConfigError, FlowThresholds
from tests.engine.helpers import Rig
from tests.engine.reference.qpid_reference_model import Model, ModelConfigError, Thresholds

pytestmark = pytest.mark.differential

# -- workload description ---------------------------------------------------------------------


@dataclass(frozen=True)
class QueueSpec:
    name: str
    max_count: int = 0
    max_size: int = 0
    policy: str = "reject"
    explicit: Thresholds | None = None  # None: broker defaults

    def arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {"qpid.policy_type": self.policy}
        if self.max_count:
            args["qpid.max_count"] = self.max_count
        if self.max_size:
            args["qpid.max_size"] = self.max_size
        if self.explicit is not None:
            th = self.explicit
            args["qpid.flow_stop_count"] = th.stop_count
            args["qpid.flow_resume_count"] = th.resume_count
            args["qpid.flow_stop_size"] = th.stop_size
            args["qpid.flow_resume_size"] = th.resume_size
        return args


@dataclass(frozen=True)
class ProducerSpec:
    name: str
    capacity: int | None
    route: tuple[str, ...]


@dataclass
class Workload:
    queues: list[QueueSpec]
    producers: list[ProducerSpec]
    ops: list[tuple[Any, ...]] = field(default_factory=list)
    stop_ratio: float = 80
    resume_ratio: float = 70
    default_limit_bytes: int = 0


# -- the two runners --------------------------------------------------------------------------

#: The columns compared per event type (§3). ``ts`` is compared as latency only (the clocks start
#: at different origins); the dequeue's ``link`` is the consumer on the engine side.
QUEUE_COLS = (
    "queue",
    "depth_msgs",
    "depth_bytes",
    "flow_stopped",
    "flow_stopped_count",
)
THRESHOLD_COLS = ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")
MESSAGE_COLS = ("message_id", "size_bytes")
PRODUCER_COLS = ("link", "outstanding")
COMPARED: dict[str, tuple[str, ...]] = {
    "enqueue": QUEUE_COLS
    + MESSAGE_COLS
    + PRODUCER_COLS
    + THRESHOLD_COLS
    + ("capacity", "max_count", "max_size"),
    "dequeue": QUEUE_COLS + MESSAGE_COLS,
    "ring_evicted": QUEUE_COLS + MESSAGE_COLS,
    "message_rejected": QUEUE_COLS + MESSAGE_COLS + PRODUCER_COLS,
    "flow_stopped": QUEUE_COLS + THRESHOLD_COLS,
    "flow_resumed": QUEUE_COLS + THRESHOLD_COLS,
    "transfer_completed": MESSAGE_COLS + PRODUCER_COLS + ("latency_us",),
    "thresholds_changed": ("queue", *THRESHOLD_COLS),
}


def _rows(events: list[dict[str, Any]], cols: dict[str, tuple[str, ...]]) -> list[tuple[Any, ...]]:
    """The compared columns of each row."""
    rows = []
    for e in events:
        kind = e["event_type"]
        if kind not in cols:
            continue
        rows.append((kind, *(e.get(c) for c in cols[kind])))
    return rows


class EngineRun:
    def __init__(self, w: Workload) -> None:
        self.rig = Rig(
            BrokerConfig(
                default_flow_stop_ratio=w.stop_ratio,
                default_flow_resume_ratio=w.resume_ratio,
                default_queue_limit_bytes=w.default_limit_bytes,
                log_immediate_completions=True,
            )
        )
        self.queues = {q.name: self.rig.queue(q.name, q.arguments()) for q in w.queues}
        self.producers = {}
        for p in w.producers:
            if len(p.route) == 1:
                self.producers[p.name] = self.rig.producer(p.name, p.capacity, p.route[0])
            else:
                exchange = f"fan-{p.name}"
                self.rig.broker.declare_exchange(exchange, "fanout")
                for q in p.route:
                    self.rig.broker.bind(exchange, q)
                self.producers[p.name] = self.rig.producer(
                    p.name, p.capacity, "", exchange=exchange
                )
        self.consumers = {q: self.rig.consumer(f"c-{q}", q) for q in self.queues}
        self.mark = len(self.rig.log.events)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "send":
            self.producers[op[1]].send(op[2], op[3])
        elif kind == "consume":
            self.consumers[op[1]].consume(op[2])
        elif kind == "advance":
            self.rig.scheduler.advance(op[1])
        elif kind == "set":
            th: Thresholds = op[2]
            self.rig.broker.set_thresholds(op[1], FlowThresholds(*th.as_tuple()))
        self.rig.settle()

    def new_events(self) -> list[dict[str, Any]]:
        events = self.rig.log.events[self.mark :]
        self.mark = len(self.rig.log.events)
        return events

    def snapshot(self) -> dict[str, Any]:
        return {
            "queues": {
                name: (
                    q.depth_msgs,
                    q.depth_bytes,
                    bool(q.flow.flow_stopped),
                    q.flow.flow_stopped_count,
                    q.held_count,
                    (q.flow.stop_count, q.flow.resume_count, q.flow.stop_size, q.flow.resume_size),
                    q.stats.rejected,
                    q.stats.evicted,
                )
                for name, q in self.queues.items()
            },
            "producers": {
                name: (p.outstanding, p.sent, p.completed, len(p.backlog))
                for name, p in self.producers.items()
            },
        }


class ModelRun:
    def __init__(self, w: Workload) -> None:
        self.model = Model(w.stop_ratio, w.resume_ratio, w.default_limit_bytes)
        for q in w.queues:
            self.model.declare_queue(
                q.name,
                max_count=q.max_count,
                max_size=q.max_size,
                policy=q.policy,
                explicit=q.explicit,
            )
        for p in w.producers:
            self.model.add_producer(p.name, p.capacity, p.route)
        self.mark = 0

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "send":
            self.model.send(op[1], op[2], op[3])
        elif kind == "consume":
            self.model.consume(op[1], op[2])
        elif kind == "advance":
            self.model.advance(op[1])
        elif kind == "set":
            self.model.set_thresholds(op[1], op[2])
        self.model.settle()

    def new_events(self) -> list[dict[str, Any]]:
        events = self.model.events[self.mark :]
        self.mark = len(self.model.events)
        return events

    def snapshot(self) -> dict[str, Any]:
        return {
            "queues": {
                name: (
                    q.depth_msgs,
                    q.depth_bytes,
                    q.stopped,
                    q.stopped_count,
                    len(q.held),
                    q.thresholds.as_tuple(),
                    q.rejected,
                    q.evicted,
                )
                for name, q in self.model.queues.items()
            },
            "producers": {
                name: (p.outstanding, p.sent, p.completed, len(p.backlog))
                for name, p in self.model.producers.items()
            },
        }


def run_both(w: Workload) -> tuple[EngineRun, ModelRun]:
    """Run ``w`` through both sides, comparing state and event rows after every step."""
    engine, model = EngineRun(w), ModelRun(w)
    assert engine.snapshot() == model.snapshot(), "after the declarations"
    engine.new_events()
    for step, op in enumerate(w.ops):
        if op[0] == "set":
            try:
                model.apply(op)
            except ModelConfigError:
                with pytest.raises(FlowConfigError):
                    engine.apply(op)
                assert not engine.new_events(), f"step {step} {op}: a refused change logged"
                assert engine.snapshot() == model.snapshot(), f"step {step} {op}: state differs"
                continue
            engine.apply(op)
        else:
            engine.apply(op)
            model.apply(op)
        got = _rows(engine.new_events(), COMPARED)
        want = _rows(model.new_events(), COMPARED)
        assert got == want, f"step {step} {op}: event rows differ\nengine {got}\nmodel  {want}"
        assert engine.snapshot() == model.snapshot(), f"step {step} {op}: state differs"
    return engine, model


def check_overshoot_bound(engine: EngineRun, w: Workload, changed: set[str]) -> None:
    """Seed 001 / DESIGN §2: during a stopped episode the queue passes its stop threshold by at
    most the sum of the capacities of the producers that enqueued to it (the trigger included);
    in bytes, by at most each such producer's window of its largest message."""
    capacity = {p.name: p.capacity for p in w.producers}
    largest: dict[str, int] = {}
    for op in w.ops:
        if op[0] == "send":
            largest[op[1]] = max(largest.get(op[1], 0), op[2])
    events = engine.rig.log.events
    for queue in engine.queues:
        if queue in changed:
            continue  # a run-time change can lower the stop below the depth already there
        last_enqueue: dict[str, Any] | None = None
        episode: dict[str, Any] | None = None
        for e in events:
            if e.get("queue") != queue:
                continue
            kind = e["event_type"]
            if kind == "enqueue":
                last_enqueue = e
                if episode is not None:
                    episode["links"].add(e["link"])
                    episode["peak"] = max(episode["peak"], e["depth_msgs"])
                    episode["peak_bytes"] = max(episode["peak_bytes"], e["depth_bytes"])
            elif kind == "flow_stopped":
                assert last_enqueue is not None
                episode = {
                    "stop": e["flow_stop_count"],
                    "stop_size": e["flow_stop_size"],
                    "links": {last_enqueue["link"]},
                    "peak": e["depth_msgs"],
                    "peak_bytes": e["depth_bytes"],
                }
            elif kind == "flow_resumed" and episode is not None:
                _assert_episode_bound(episode, capacity, largest, queue)
                episode = None
        if episode is not None:
            _assert_episode_bound(episode, capacity, largest, queue)


def _assert_episode_bound(
    episode: dict[str, Any], capacity: dict[str, int | None], largest: dict[str, int], queue: str
) -> None:
    caps = [capacity[link] for link in episode["links"]]
    if any(c is None for c in caps):
        return  # a producer without a window: no bound
    if episode["stop"]:
        bound = episode["stop"] + sum(c or 0 for c in caps)
        assert episode["peak"] <= bound, (queue, episode)
    if episode["stop_size"]:
        bound = episode["stop_size"] + sum(
            (capacity[link] or 0) * largest[link] for link in episode["links"]
        )
        assert episode["peak_bytes"] <= bound, (queue, episode)


# -- seed 001's worked examples ---------------------------------------------------------------


def test_seed_001_example_900_500() -> None:
    # "greater than 900 ... ON ... remains ON until the total number of enqueued messages is less
    # than 500."
    w = Workload(
        [QueueSpec("q", max_count=1000, explicit=Thresholds(900, 500, 0, 0))],
        [ProducerSpec("p", None, ("q",))],
        [
            ("send", "p", 10, 900),
            ("send", "p", 10, 1),
            ("consume", "q", 401),
            ("consume", "q", 1),
        ],
        stop_ratio=0,
        resume_ratio=0,
    )
    engine, model = run_both(w)
    stops = [e["depth_msgs"] for e in engine.rig.events("flow_stopped")]
    resumes = [e["depth_msgs"] for e in engine.rig.events("flow_resumed")]
    assert (stops, resumes) == ([901], [499])
    assert model.model.queues["q"].stopped_count == 1


def test_seed_001_example_4000_msgs_8k_bytes() -> None:
    # ON if (msgs > 4000 OR bytes > 8K); stays ON until (msgs < 3000 AND bytes < 6K).
    w = Workload(
        [QueueSpec("q", 5000, 10240, explicit=Thresholds(4000, 3000, 8192, 6144))],
        [ProducerSpec("p", None, ("q",))],
        [
            ("send", "p", 1025, 8),  # 8200 bytes > 8192: ON by bytes
            ("consume", "q", 2),  # 6150 bytes: not < 6144, ON
            ("consume", "q", 1),  # 5125: OFF
            ("consume", "q", 5),
            ("send", "p", 0, 4001),  # ON by count
            ("consume", "q", 1001),  # 3000 is not < 3000
            ("consume", "q", 1),  # OFF
        ],
        stop_ratio=0,
        resume_ratio=0,
    )
    engine, _ = run_both(w)
    assert [e["depth_msgs"] for e in engine.rig.events("flow_stopped")] == [8, 4001]
    assert [e["depth_bytes"] for e in engine.rig.events("flow_resumed")] == [5125, 0]
    assert [e["depth_msgs"] for e in engine.rig.events("flow_resumed")] == [5, 2999]


def test_seed_001_worst_case_165() -> None:
    # "C1 has a configured capacity of 50 ... C2's capacity is 15 ... Flow Stop Threshold of 100
    # messages, then, worst-case, the queue may receive up to 165 messages".
    ops: list[tuple[Any, ...]] = [("send", "C1", 10, 1000), ("send", "C2", 10, 1000)]
    for _ in range(20):
        ops += [("consume", "q", 70), ("advance", 1000)]
    w = Workload(
        [QueueSpec("q", max_count=1000, explicit=Thresholds(100, 0, 0, 0))],
        [ProducerSpec("C1", 50, ("q",)), ProducerSpec("C2", 15, ("q",))],
        ops,
        stop_ratio=0,
        resume_ratio=0,
    )
    engine, model = run_both(w)
    depths = [e["depth_msgs"] for e in engine.rig.events("enqueue")]
    assert max(depths) == 165 == depths[164]  # reached by the first burst...
    assert max(e["depth_msgs"] for e in model.model.events if e["event_type"] == "enqueue") == 165
    check_overshoot_bound(engine, w, set())  # ...and never exceeded


def test_seed_001_default_ratios_90_75_and_80_70() -> None:
    # "90% of 10000 = 9000 bytes and the flow resume threshold to 75% of 10000 = 7500"; 80 / 70
    # when not overridden; ring queues get none.
    w = Workload(
        [QueueSpec("bytes", max_size=10000), QueueSpec("both", max_count=7, max_size=1001)],
        [],
        stop_ratio=90,
        resume_ratio=75,
    )
    engine, model = run_both(w)
    assert engine.snapshot()["queues"]["bytes"][5] == (0, 0, 9000, 7500)
    assert model.model.queues["both"].thresholds.as_tuple() == (6, 5, 901, 750)
    w = Workload(
        [QueueSpec("q", 1000, 10000), QueueSpec("r", 1000, 10000, "ring")],
        [],
    )
    engine, _ = run_both(w)
    assert engine.snapshot()["queues"]["q"][5] == (800, 700, 8000, 7000)
    assert engine.snapshot()["queues"]["r"][5] == (0, 0, 0, 0)


def test_fanout_completes_after_every_destination_releases() -> None:
    # "held off until flow control state transitions to OFF for all queues that are a
    # destination for that command."
    w = Workload(
        [
            QueueSpec("a", explicit=Thresholds(1, 0, 0, 0)),
            QueueSpec("b", explicit=Thresholds(2, 1, 0, 0)),
        ],
        [ProducerSpec("p", 4, ("a", "b"))],
        [
            ("send", "p", 5, 6),
            ("advance", 7),
            ("consume", "a", 3),
            ("consume", "b", 2),
            ("consume", "b", 1),
            ("consume", "a", 5),
            ("consume", "b", 5),
        ],
        stop_ratio=0,
        resume_ratio=0,
    )
    run_both(w)


# -- run-time threshold change (ASSUMPTION A4) --------------------------------------------------


def test_threshold_change_takes_effect_on_the_next_enqueue_or_dequeue() -> None:
    w = Workload(
        [QueueSpec("q", explicit=Thresholds(10, 5, 0, 0))],
        [ProducerSpec("p", 3, ("q",))],
        [
            ("send", "p", 1, 8),
            ("set", "q", Thresholds(4, 2, 0, 0)),  # depth 8 > 4, but no enqueue yet
            ("send", "p", 1, 1),  # ON now
            ("set", "q", Thresholds(20, 15, 0, 0)),  # depth 9 < 15, but no dequeue yet
            ("consume", "q", 1),  # OFF now
        ],
        stop_ratio=0,
        resume_ratio=0,
    )
    run_both(w)


# -- once disagreements, now fixed in the engine ------------------------------------------------


def test_enqueue_row_outstanding_after_ring_eviction_releases() -> None:
    # The 4th message evicts the 1st (40 bytes < resume 41): flow goes OFF and the held 2nd and
    # 3rd complete before the 4th is enqueued, so its enqueue logs outstanding 1 (itself), not
    # the 3 of its arrival (DESIGN §3: "a producer's uncompleted transfers").
    w = Workload(
        [QueueSpec("r", max_size=100, policy="ring", explicit=Thresholds(0, 0, 50, 41))],
        [ProducerSpec("p", 10, ("r",))],
        [("send", "p", 45, 1), ("send", "p", 10, 1), ("send", "p", 30, 1), ("send", "p", 30, 1)],
        stop_ratio=0,
        resume_ratio=0,
    )
    engine, _ = run_both(w)
    assert [e["outstanding"] for e in engine.rig.events("enqueue")][-1] == 1


def test_both_stops_zero_with_a_resume_switch_flow_control_off_at_declare_as_at_run_time() -> None:
    # §2: "Setting both stop values to 0 disables flow control on that queue", the specific rule,
    # over the general "resume > stop" error: at declaration and at run time alike.
    explicit = Thresholds(0, 5, 0, 0)
    assert Model(0, 0).declare_queue("q", explicit=explicit) is not None
    rig = Rig(BrokerConfig(default_flow_stop_ratio=0, default_flow_resume_ratio=0))
    stopped = rig.queue("p", {"qpid.flow_stop_count": 3})
    rig.broker.set_thresholds("p", FlowThresholds(*explicit.as_tuple()))
    assert stopped.flow.thresholds == FlowThresholds(0, 0, 0, 0)
    declared = rig.queue("q", QueueSpec("q", explicit=explicit).arguments())
    assert declared.flow.thresholds == FlowThresholds(0, 0, 0, 0)


def test_switching_flow_control_off_while_on_resumes_on_the_next_dequeue() -> None:
    # ASSUMPTION A4: "OFF on a dequeue ... when every non-zero resume threshold is satisfied".
    w = Workload(
        [QueueSpec("q", explicit=Thresholds(2, 1, 0, 0))],
        [ProducerSpec("p", 2, ("q",))],
        [("send", "p", 1, 6), ("set", "q", Thresholds()), ("consume", "q", 1), ("consume", "q", 9)],
        stop_ratio=0,
        resume_ratio=0,
    )
    engine, _ = run_both(w)
    assert [e["depth_msgs"] for e in engine.rig.events("flow_resumed")] == [3]


def test_a_message_too_big_for_an_empty_ring_queue_is_rejected() -> None:
    # ASSUMPTION A2: eviction cannot make it fit, so nothing is evicted.
    w = Workload(
        [QueueSpec("r", max_size=50, policy="ring")],
        [ProducerSpec("p", 2, ("r",))],
        [("send", "p", 10, 2), ("send", "p", 60, 1)],
    )
    engine, _ = run_both(w)
    assert not engine.rig.events("ring_evicted") and engine.queues["r"].stats.rejected == 1


# -- declarations: the model's error / no-error and thresholds against the engine's ---------------

_ratios = st.sampled_from(
    [(80, 70), (0, 0), (90, 75), (50, 50), (100, 100), (97, 73), (80, 0), (0.8, 0.7), (33.3, 12.5)]
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    ratios=_ratios,
    max_count=st.sampled_from([0, 1, 2, 5, 7, 10, 1000]),
    max_size=st.sampled_from([0, 1, 3, 99, 100, 10000, 2950001]),
    policy=st.sampled_from(["reject", "ring", "ring-strict"]),
    explicit=st.one_of(
        st.none(),
        st.builds(
            Thresholds,
            st.integers(0, 12),
            st.integers(0, 12),
            st.sampled_from([0, 1, 50, 99, 100, 101]),
            st.sampled_from([0, 1, 50, 99, 100, 101]),
        ),
    ),
)
def test_declarations_agree(
    ratios: tuple[int, int],
    max_count: int,
    max_size: int,
    policy: str,
    explicit: Thresholds | None,
) -> None:
    if explicit is not None and not explicit.stop_count and not explicit.stop_size:
        # Both stops 0 with a resume given: the engine disagrees, see
        # test_both_stops_zero_with_a_resume_is_refused_at_declare_as_at_run_time.
        explicit = Thresholds()
    spec = QueueSpec("q", max_count, max_size, policy, explicit)
    model = Model(*ratios)
    rig = Rig(BrokerConfig(default_flow_stop_ratio=ratios[0], default_flow_resume_ratio=ratios[1]))
    try:
        want = model.declare_queue(
            "q", max_count=max_count, max_size=max_size, policy=policy, explicit=explicit
        ).thresholds.as_tuple()
    except ModelConfigError:
        with pytest.raises(FlowConfigError):
            rig.queue("q", spec.arguments())
        return
    queue = rig.queue("q", spec.arguments())
    flow = queue.flow
    assert (flow.stop_count, flow.resume_count, flow.stop_size, flow.resume_size) == want


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    stop=st.sampled_from([-1, 0, 0.7, 50, 80, 99.99, 100, 100.01, 101]),
    resume=st.sampled_from([-1, 0, 0.7, 50, 70, 80, 100, 101]),
)
def test_default_ratio_errors_agree(stop: float, resume: float) -> None:
    try:
        Model(stop, resume)
    except ModelConfigError:
        with pytest.raises(FlowConfigError):
            Rig(BrokerConfig(default_flow_stop_ratio=stop, default_flow_resume_ratio=resume))
        return
    rig = Rig(BrokerConfig(default_flow_stop_ratio=stop, default_flow_resume_ratio=resume))
    queue = rig.queue("q", {"qpid.max_count": 1000, "qpid.max_size": 999})
    model = Model(stop, resume).declare_queue("q", max_count=1000, max_size=999)
    assert queue.flow.thresholds == FlowThresholds(*model.thresholds.as_tuple())


# -- random workloads ---------------------------------------------------------------------------

QUEUE_NAMES = ("q0", "q1", "q2")


@st.composite
def _queue_spec(draw: st.DrawFn, name: str, default_limit: int) -> QueueSpec:
    max_count = draw(st.sampled_from([0, 0, 3, 6, 10, 20, 40]))
    max_size = draw(st.sampled_from([0, 0, 60, 150, 400]))
    policy = draw(st.sampled_from(["reject", "reject", "ring", "ring-strict"]))
    explicit = None
    if draw(st.booleans()):
        # resume <= stop, or any resume under stops that are both 0 (flow control off).
        sc = draw(st.integers(0, max_count or 25))
        ss = draw(st.integers(0, max_size or default_limit or 300))
        off = sc == 0 and ss == 0
        rc = draw(st.integers(0, 5 if off else sc))
        rs = draw(st.integers(0, 50 if off else ss))
        explicit = Thresholds(sc, rc, ss, rs)
    return QueueSpec(name, max_count, max_size, policy, explicit)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    stop_ratio, resume_ratio = draw(_ratios)
    default_limit = draw(st.sampled_from([0, 0, 0, 100, 250]))
    n_queues = draw(st.integers(1, 3))
    queues = [draw(_queue_spec(QUEUE_NAMES[i], default_limit)) for i in range(n_queues)]
    names = [q.name for q in queues]
    producers = []
    for i in range(draw(st.integers(1, 3))):
        if n_queues > 1 and draw(st.integers(0, 3)) == 0:
            route = tuple(draw(st.lists(st.sampled_from(names), min_size=2, unique=True)))
        else:
            route = (draw(st.sampled_from(names)),)
        capacity = draw(st.one_of(st.integers(1, 8), st.integers(1, 8), st.none()))
        producers.append(ProducerSpec(f"p{i}", capacity, route))
    by_name = {q.name: q for q in queues}
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["send"] * 4 + ["consume"] * 3 + ["advance", "set"]))
        if kind == "send":
            p = draw(st.sampled_from(producers))
            size = draw(st.integers(0, 60))
            ops.append(("send", p.name, size, draw(st.integers(1, 12))))
        elif kind == "consume":
            ops.append(("consume", draw(st.sampled_from(names)), draw(st.integers(1, 12))))
        elif kind == "advance":
            ops.append(("advance", draw(st.integers(1, 3_000_000))))
        else:
            q = by_name[draw(st.sampled_from(names))]
            if draw(st.integers(0, 5)) == 0:  # anything, invalid ones included
                sc, ss = draw(st.integers(0, 30)), draw(st.integers(0, 400))
                rc, rs = draw(st.integers(0, 30)), draw(st.integers(0, 400))
            else:
                sc = draw(st.integers(0, q.max_count or 25))
                ss = draw(st.integers(0, q.max_size or default_limit or 300))
                rc, rs = draw(st.integers(0, sc)), draw(st.integers(0, ss))
            ops.append(("set", q.name, Thresholds(sc, rc, ss, rs)))
    return Workload(queues, producers, ops, stop_ratio, resume_ratio, default_limit)


@settings(
    max_examples=250,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(w=workloads())
def test_engine_matches_the_model(w: Workload) -> None:
    engine, _ = run_both(w)
    changed = {op[1] for op in w.ops if op[0] == "set"}
    check_overshoot_bound(engine, w, changed)

"""The sweep (flowctl_core/sweep.py): the value grammar, the choice by an objective, and sweeps of
bundled scenarios on the engine checked against seed 003 and against the what-if's own runs."""

from __future__ import annotations

import dataclasses
import json
import math
from concurrent.futures import ProcessPoolExecutor

import pytest
import yaml
from typer.testing import CliRunner

from flowctl.cli import app
from flowctl_core.flowlimit import FlowThresholds
from flowctl_core.scenario import Scenario, load_scenario, parse_scenario
from flowctl_core.sweep import (
    HIGHER,
    KNOB_VALUE,
    LOWER,
    SWEEP_KNOBS,
    Candidate,
    Criterion,
    SweepError,
    _with_stop_count,
    choose,
    parse_objective,
    parse_values,
    run_sweep,
    sweep_knobs,
)
from flowctl_core.whatif import run_whatif
from flowctl_core.whatif_knobs import (
    KNOB_APPLIERS,
    KNOB_READERS,
    KnobChange,
    knob_applies,
    measure_knob,
    with_knob,
)
from schemas.recommendations import KNOB_QPID_FLOW_STOP_COUNT

# -- values and objectives ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("5", [5]),
        ("300,100, 200,100", [100, 200, 300]),
        ("100..500+200", [100, 300, 500]),
        ("100..600+200", [100, 300, 500]),
        ("1024..8192*2", [1024, 2048, 4096, 8192]),
        ("-1,0,1024..4096*2", [-1, 0, 1024, 2048, 4096]),
    ],
)
def test_values_parse_lists_and_ranges(text: str, values: list[int]) -> None:
    assert parse_values(text) == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10,abc", "'abc' is neither an integer nor a range"),
        ("1.5", "'1.5' is neither"),
        ("10..1", "'10..1' needs a step (+N) or a factor (*N)"),
        ("500..100+10", "starts above its end"),
        ("0..100*2", "never grows"),
        ("1..100+0", "never grows"),
        ("1..1000+1", "more than 200 values"),
        ("", "'' is neither"),
    ],
)
def test_bad_values_are_refused_naming_the_part(text: str, message: str) -> None:
    with pytest.raises(SweepError, match="--values") as refused:
        parse_values(text)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_objective_parses_criteria_in_order() -> None:
    text = "rejected msgs:lower, time stopped s : lower : 2.5%,knob value:higher"
    assert parse_objective(text) == (
        Criterion("rejected msgs", LOWER),
        Criterion("time stopped s", LOWER, 0.025),
        Criterion(KNOB_VALUE, HIGHER),
    )
    for bad in ("rejected msgs:least", ":lower"):
        with pytest.raises(SweepError, match="is not METRIC:lower or METRIC:higher"):
            parse_objective(bad)
    # A metric's own comma, inside its parentheses, does not split it (an audit: the Artemis
    # objectives' first metric could not be named).
    assert parse_objective("lost msgs (dropped, failed):lower,knob value:lower") == (
        Criterion("lost msgs (dropped, failed)", LOWER),
        Criterion(KNOB_VALUE, LOWER),
    )


def test_every_knob_a_whatif_applies_can_be_swept() -> None:
    assert set(SWEEP_KNOBS) == {*KNOB_APPLIERS, KNOB_QPID_FLOW_STOP_COUNT}
    assert set(KNOB_READERS) == set(KNOB_APPLIERS)


# -- the choice -----------------------------------------------------------------------------


def _candidate(value: int | None, *, as_written: bool = False, **metrics: float) -> Candidate:
    return Candidate(value, dict(metrics), as_written=as_written)


def test_choice_takes_criteria_in_priority_order() -> None:
    objective = (Criterion("lost", LOWER), Criterion("done", HIGHER), Criterion("peak", LOWER))
    candidates = [
        _candidate(1, lost=5, done=100, peak=1),  # loses messages: out first
        _candidate(2, lost=0, done=90, peak=2),  # less work done
        _candidate(3, lost=0, done=100, peak=9),
        _candidate(4, lost=0, done=100, peak=3),
    ]
    choice = choose(candidates, objective, current=None)
    assert choice.best == 3
    assert choice.dropped == {
        0: "lost: 5 against 0",
        1: "done: 90 against 100",
        2: "peak: 9 against 3",
    }


def test_tolerance_lets_a_later_criterion_choose() -> None:
    """Within 1 % of the most messages received, the least credit: Kung & Morris's point that
    credit past rate x round trip buys nothing."""
    objective = (Criterion("received", HIGHER, 0.01), Criterion(KNOB_VALUE, LOWER))
    candidates = [
        _candidate(100, received=900),
        _candidate(500, received=995),
        _candidate(1000, received=1000),
    ]
    choice = choose(candidates, objective, current=100)
    assert choice.best == 1
    assert choice.dropped[0] == "received: 900 against 1,000"
    assert choice.dropped[2] == "knob value: 1,000 against 500"


def test_off_is_the_largest_knob_value_and_a_best_of_off_is_matched_by_off_only() -> None:
    """Artemis's -1 switches a window off: no bound, never the cheapest to hold; and when "no
    bound" is the best (knob value higher), only no bound ties with it (inf x 0 is no slack)."""
    candidates = [_candidate(-1, x=1), _candidate(65536, x=1)]
    lowest = choose(candidates, (Criterion(KNOB_VALUE, LOWER),), current=-1, off=-1)
    assert lowest.best == 1
    assert lowest.dropped[0] == "knob value: off against 65,536"
    highest = choose(candidates, (Criterion(KNOB_VALUE, HIGHER, 0.01),), current=None, off=-1)
    assert highest.best == 0
    assert highest.dropped == {1: "knob value: 65,536 against off"}


def test_ties_keep_the_run_as_written_then_the_value_nearest_it() -> None:
    objective = (Criterion("x", LOWER),)
    grid = [_candidate(v, x=1) for v in (1024, 2048, 8192)]
    as_written = _candidate(4096, as_written=True, x=1)
    kept = choose([as_written, *grid], objective, current=4096)
    assert kept.best == 0
    assert kept.dropped[1] == "as good; the run as written is kept"
    assert choose([_candidate(4096, as_written=True, x=2), *grid], objective, 4096).best == 2
    assert choose(grid, objective, current=None).best == 0
    off = choose(grid, objective, current=-1, off=-1)
    assert off.best == 2  # nearest "no bound" is the largest bound
    assert off.dropped[0] == "as good; 8,192 is nearer the value as written"


def test_refused_values_take_no_part() -> None:
    objective = (Criterion("x", LOWER),)
    refused = Candidate(9, None, "flow_stop_count (9) exceeds max_count (5)")
    choice = choose([refused, _candidate(1, x=3)], objective, current=None)
    assert choice.best == 1
    assert choice.dropped[0] == "refused: flow_stop_count (9) exceeds max_count (5)"
    assert choose([refused], objective, current=None).best is None


def test_resume_keeps_its_share_of_the_stop_and_never_becomes_the_stop() -> None:
    """A resume of 0 reads as "resume at the stop": a stop of 1 under a 100 / 80 queue resumes
    at 1, not at 0; a stop of 0 switches the count thresholds off; sizes stay."""
    written = FlowThresholds(100, 80, 5000, 4000)
    assert _with_stop_count(written, 4) == FlowThresholds(4, 3, 5000, 4000)
    assert _with_stop_count(written, 1) == FlowThresholds(1, 1, 5000, 4000)
    assert _with_stop_count(written, 0) == FlowThresholds(0, 0, 5000, 4000)
    # Count thresholds off as written: Qpid's default ratios, 70 / 80.
    assert _with_stop_count(FlowThresholds(0, 0, 5000, 4000), 800).resume_count == 700


# -- sweeps on the engine -------------------------------------------------------------------


def test_slow_consumer_sweep_finds_seed_003s_window_of_zero() -> None:
    """Seed 003, "Slow consumers": a slow consumer beside a fast one should buffer nothing
    (consumerWindowSize 0), so that the fast one is not left idle. The sweep finds it from the
    runs alone: the queue's messages are all processed, and soonest, at 0."""
    spec = load_scenario("artemis-slow-fast-consumers")
    sweep = run_sweep(spec, "consumerWindowSize", "slow-unbounded", [-1, 0, 1024, 65536])
    assert sweep.current == -1
    as_written, *grid = sweep.candidates
    assert as_written.as_written and as_written.value == -1
    assert [c.value for c in grid] == [0, 1024, 65536]  # -1 is the run as written
    assert sweep.choice.best is not None and sweep.candidates[sweep.choice.best].value == 0
    unbounded, none = as_written.metrics, grid[0].metrics
    assert unbounded is not None and none is not None
    assert none["queue msgs processed"] > unbounded["queue msgs processed"]
    assert sweep.verdict() == "best consumerWindowSize for slow-unbounded: 0 (as written: -1 (off))"


def test_producer_window_sweep_cuts_overshoot_without_slowing_the_queue() -> None:
    """Seed 003's bound: an address overshoots max-size-bytes by up to producers x window. The
    window counts a message's encoded size and the address its memory estimate (DESIGN §2), so
    in the address's bytes: 4 producers x (the messages a window covers, plus the one that
    crosses the limit) x the estimate of one. Over windows doubling the overshoot stays within
    it and grows with the window; the best window is a small one that processes as many
    messages."""
    spec = load_scenario("artemis-block-core-producers")
    windows = parse_values("4096..262144*2")
    sweep = run_sweep(spec, "producerWindowSize", "orders", windows)
    # 65,536, the window as written, is the run as written.
    measured = {c.value: c.metrics for c in sweep.candidates if c.metrics is not None}
    assert sorted(measured) == windows
    artemis = spec.artemis
    assert artemis is not None
    credit = 1024 + artemis.core_encode_overhead_bytes
    memory = 1024 + artemis.core_message_overhead_bytes
    overshoots = [measured[w]["max overshoot bytes"] for w in windows]
    for window, overshoot in zip(windows, overshoots, strict=True):
        assert overshoot <= 4 * (math.ceil(window / credit) + 1) * memory
    assert overshoots == sorted(overshoots)
    assert sweep.choice.best is not None
    best = sweep.candidates[sweep.choice.best]
    assert best.metrics is not None and best.value == windows[0]
    most = max(m["queue msgs processed"] for m in measured.values())
    assert best.metrics["queue msgs processed"] >= 0.99 * most


def test_qpid_stop_count_sweep_agrees_with_the_whatif() -> None:
    """The sweep's run at a stop count is the what-if's run with the same thresholds (another
    path through the engine); counts past the queue's max_count are refused with the engine's
    own reason; the resume keeps its share of the stop (3500 / 4000 as written)."""
    spec = load_scenario("bursty-producer")
    sweep = run_sweep(spec, KNOB_QPID_FLOW_STOP_COUNT, "events", [2000, 4000, 5000, 6000])
    assert sweep.current == 4000
    by_value = {c.value: c for c in sweep.candidates[1:]}
    assert by_value[6000].metrics is None
    assert by_value[6000].refused == (
        "queue 'events': flow_stop_count (6000) exceeds max_count (5000)"
    )
    written = run_whatif(spec, {}).queue("events").before.thresholds
    assert (written.stop_count, written.resume_count) == (4000, 3500)
    for stop, resume in ((2000, 1750), (5000, 4375)):
        thresholds = FlowThresholds(stop, resume, written.stop_size, written.resume_size)
        after = run_whatif(spec, {"events": thresholds}).queue("events").after
        assert after.thresholds == thresholds
        assert by_value[stop].metrics == after.metrics()
    assert 4000 not in by_value  # the stop count as written: the run as written
    assert sweep.choice.best is not None
    best = sweep.candidates[sweep.choice.best]
    assert best.metrics is not None and best.metrics["rejected msgs"] == 0
    # A pick at the queue's max_count is a count that never stops it: the verdict says so (a
    # README walk-through saw 5,000 picked with no word of it); a pick below says nothing.
    assert sweep.count_limit == 5000
    at_limit = dataclasses.replace(sweep, choice=dataclasses.replace(sweep.choice, best=2))
    assert at_limit.candidates[2].value == 5000
    # The byte thresholds still stop it (179.51 s at 5,000): the verdict says so.
    assert at_limit.verdict().endswith(
        "at or above the queue's qpid.max_count (5,000) the count threshold never acts: the "
        f"limit refuses first; only its byte threshold ({written.stop_size:,} bytes) can stop "
        "the queue"
    )
    assert written.stop_size > 0 and at_limit.candidates[2].metrics["time stopped s"] > 0  # type: ignore[index]
    below = dataclasses.replace(sweep, choice=dataclasses.replace(sweep.choice, best=1))
    assert below.candidates[1].value == 2000 and "max_count" not in below.verdict()


#: A reader over AMQP 1.0 of a prefilled RabbitMQ queue: a link credit sweep in half a second.
CREDIT_READER = """
name: credit-reader
kind: workload
duration_s: 1
queues: [{name: q, prefill: {count: 5000, size: 256}}]
connections:
  - name: reader
    protocol: amqp-1.0
    consumers: [{name: r, queue: q, credit: 200, top_up_below: 100}]
"""


def _scenario(name_or_yaml: str) -> Scenario:
    if "\n" in name_or_yaml:
        return parse_scenario(yaml.safe_load(name_or_yaml))
    return load_scenario(name_or_yaml)


#: A scenario, an entity and values for each knob: every default objective runs.
EVERY_KNOB = [
    (KNOB_QPID_FLOW_STOP_COUNT, "qpid-165-worst-case", "payments", [1, 4, 150, 200]),
    ("max-size-bytes", "artemis-block-core-producers", "orders", [262144, 4194304]),
    ("max-size-bytes-reject-threshold", "artemis-amqp-reject-threshold", "telemetry-hard",
     [-1, 204800, 800000]),
    ("producerWindowSize", "artemis-rate-limits", "metrics", [1024, 16384]),
    ("consumerWindowSize", "artemis-rate-limits", "metrics-sink", [0, 16384]),
    ("link credit", CREDIT_READER, "r", [1, 100]),
    ("prefetch", "rabbitmq-memory-alarm", "backlog-reader", [10, 50]),
    ("x-max-length", "rabbitmq-memory-alarm", "backlog", [1000, 30000]),
]  # fmt: skip


@pytest.mark.parametrize(("knob", "scenario", "entity", "values"), EVERY_KNOB)
def test_every_knobs_objective_runs_on_a_bundled_scenario(
    knob: str, scenario: str, entity: str, values: list[int]
) -> None:
    """The objective's metrics are the knob's measurements; the run as written is measured as
    the what-if measures it; a best value comes out."""
    spec = _scenario(scenario)
    sweep = run_sweep(spec, knob, entity, values)
    as_written = sweep.candidates[0]
    assert as_written.as_written and as_written.metrics is not None
    assert {c.metric for c in sweep.objective} <= {*as_written.metrics, KNOB_VALUE}
    if knob != KNOB_QPID_FLOW_STOP_COUNT:
        change = KnobChange("", entity, knob, None, 0, "", "test")
        assert as_written.metrics == measure_knob(spec, spec.seed, change)
    assert [c.value for c in sweep.candidates[1:]] == values
    assert sweep.choice.best is not None


def test_figures_of_runs_that_did_nothing_are_not_absurd() -> None:
    """An unbounded address has no overshoot (not its peak + 1), and a queue whose consumers
    processed nothing was not done before the run began."""
    spec = load_scenario("artemis-rate-limits")
    unbounded = run_sweep(spec, "producerWindowSize", "metrics", [1024])
    assert all(c.metrics and c.metrics["max overshoot bytes"] == 0 for c in unbounded.candidates)
    late = spec.model_copy(
        update={
            "artemis": spec.artemis.model_copy(  # type: ignore[union-attr]
                update={
                    "consumers": [
                        c.model_copy(update={"start_s": 100})
                        for c in spec.artemis.consumers  # type: ignore[union-attr]
                    ]
                }
            )
        }
    )
    idle = run_sweep(late, "consumerWindowSize", "metrics-sink", [0])
    for candidate in idle.candidates:
        assert candidate.metrics is not None
        assert candidate.metrics["queue msgs processed"] == 0
        assert candidate.metrics["queue processed by s"] == pytest.approx(10.0)


def test_a_prefetch_sweep_keeps_what_drains_a_backlog_soonest() -> None:
    """A reader that drains a finite backlog receives all of it with any prefetch; a smaller one
    only receives it later (one round trip of 1 ms per prefetch's worth), so the sweep keeps the
    100 as written rather than the smallest value that receives as many."""
    spec = load_scenario("rabbitmq-memory-alarm")
    sweep = run_sweep(spec, "prefetch", "backlog-reader", [25, 50])
    received = {c.value: c.metrics for c in sweep.candidates if c.metrics}
    assert {value: m["consumer msgs received"] for value, m in received.items()} == {
        100: 20_000,
        25: 20_000,
        50: 20_000,
    }
    by_s = {value: m["consumer received by s"] for value, m in received.items()}
    assert by_s[25] > by_s[50] > by_s[100]
    assert sweep.verdict().startswith("keep prefetch of backlog-reader as written")


def test_a_credit_of_one_still_tops_up() -> None:
    """A 1.0 consumer's top-up mark scales with its credit, and stays at least 1: below 1 of a
    credit of 1 is 0 left, where a mark of 0 would never grant again."""
    spec = _scenario(CREDIT_READER)
    change = KnobChange("", "r", "link credit", None, 1, "", "test")
    changed = with_knob(spec, change)
    (reader,) = changed.connections[0].consumers
    assert (reader.credit, reader.top_up_below) == (1, 1)
    assert measure_knob(changed, spec.seed, change)["consumer msgs received"] > 1000


def test_values_the_broker_would_not_take_are_refused() -> None:
    spec = load_scenario("rabbitmq-memory-alarm")
    sweep = run_sweep(spec, "prefetch", "backlog-reader", [0, 100, 70_000])
    refused = {c.value: c.refused for c in sweep.candidates if c.refused}
    assert refused == {
        0: "0 is no limit in RabbitMQ, which the engine does not model: prefetch takes 1 and above",
        70_000: "basic.qos prefetch-count is a short: at most 65,535",
    }
    windows = run_sweep(
        load_scenario("artemis-rate-limits"), "consumerWindowSize", "metrics-sink", [2**31]
    )
    assert windows.candidates[1].refused == (
        "consumerWindowSize is a Java int: at most 2,147,483,647"
    )


def test_no_limit_as_written_takes_part_and_deliveries_come_first() -> None:
    """x-max-length on a RabbitMQ queue that has none: the run as written (no limit) is a
    candidate, and a limit that refuses part of the backlog its consumer would deliver (the
    prefill) does not beat it."""
    spec = load_scenario("rabbitmq-memory-alarm")
    sweep = run_sweep(spec, "x-max-length", "backlog", [1000, 30000])
    assert sweep.current is None
    as_written = sweep.candidates[0]
    assert as_written.metrics is not None and as_written.metrics["rejected msgs"] == 0
    rejecting = [c for c in sweep.candidates[1:] if c.metrics and c.metrics["rejected msgs"]]
    assert rejecting  # 1000 refuses part of the backlog's 20,000 prefilled messages
    assert sweep.choice.best is not None
    best = sweep.candidates[sweep.choice.best]
    assert best.metrics is not None and best.metrics["rejected msgs"] == 0


def test_a_process_pool_gives_the_same_sweep() -> None:
    """The engine is deterministic: runs in worker processes are the runs in this one."""
    spec = load_scenario("artemis-amqp-reject-threshold")
    values = [-1, 131072, 262144, 1048576]
    alone = run_sweep(spec, "max-size-bytes-reject-threshold", "telemetry-hard", values)
    with ProcessPoolExecutor(max_workers=2) as pool:
        pooled = run_sweep(
            spec, "max-size-bytes-reject-threshold", "telemetry-hard", values, mapper=pool.map
        )
    assert pooled == alone
    rejected = [c.metrics["rejected msgs"] for c in alone.candidates[1:] if c.metrics]
    assert rejected[0] == 0  # -1: no reject threshold
    assert rejected[1:] == sorted(rejected[1:], reverse=True)  # a higher threshold rejects less


QPID_STEP = """
name: qpid-step
kind: scripted
queues: [{name: orders, arguments: {qpid.max_count: 1000}}]
producers: [{name: p, capacity: 10, routing_key: orders}]
steps:
  - set_thresholds: {queue: orders, flow_stop_count: 950, flow_resume_count: 100}
  - send: {producer: p, count: 5}
"""


QPID_BESIDE_A_READER = """
name: qpid-beside-a-reader
kind: workload
duration_s: 1
queues: [{name: q, prefill: {count: 50, size: 256}}, {name: qpid-q}]
producers: [{name: p, capacity: 10, routing_key: qpid-q, rate: 10}]
connections:
  - name: reader
    protocol: amqp-1.0
    consumers: [{name: r, queue: q, credit: 20}]
"""


@pytest.mark.parametrize(
    ("scenario", "knob", "entity", "message"),
    [
        ("artemis-block-core-producers", "credit", "orders",
         "no sweep for knob 'credit'; did you mean 'link credit'? knobs: qpid.flow_stop_count,"),
        ("artemis-block-core-producers", "consumerWindowSze", "orders",
         "no sweep for knob 'consumerWindowSze'; did you mean 'consumerWindowSize'? knobs:"),
        ("bursty-producer", "consumerWindowSize", "c",
         "bursty-producer: no artemis section: consumerWindowSize is Artemis's"),
        ("artemis-block-core-producers", "producerWindowSize", "nowhere",
         "no artemis address with CORE producers 'nowhere' "
         "(its CORE producers' addresses: 'orders')"),
        # Not "'telemetry-soft' is an artemis address (max-size-bytes, producerWindowSize)":
        # the knob that refused it (a review).
        ("artemis-amqp-reject-threshold", "producerWindowSize", "telemetry-soft",
         "(its CORE producers' addresses: none); the producers of 'telemetry-soft' are AMQP: "
         "producerWindowSize is a CORE producer's window"),
        ("qpid-900-500", KNOB_QPID_FLOW_STOP_COUNT, "nowhere",
         "'nowhere' is no Qpid queue: qpid.flow_stop_count is Qpid's"),
        ("artemis-block-core-producers", KNOB_QPID_FLOW_STOP_COUNT, "orders",
         "'orders' is no Qpid queue"),
        ("rabbitmq-memory-alarm", KNOB_QPID_FLOW_STOP_COUNT, "orders-091",
         "'orders-091' is a RabbitMQ queue (a connection's link names it)"),
        ("qpid-900-500", "x-max-length", "orders",
         "no RabbitMQ connections: x-max-length is RabbitMQ's"),
        ("rabbitmq-memory-alarm", "link credit", "backlog-reader",
         "no amqp-1.0 consumer 'backlog-reader'"),
        (CREDIT_READER, "prefetch", "r", "no amqp-0-9-1 consumer 'r'"),
        (QPID_STEP, KNOB_QPID_FLOW_STOP_COUNT, "orders",
         "a set_thresholds step changes the thresholds of 'orders' during the run"),
        # Beside a connection, a queue no link names is Qpid's: no x-max-length for it.
        (QPID_BESIDE_A_READER, "x-max-length", "qpid-q",
         "'qpid-q' is no RabbitMQ queue (no connection's link names it): x-max-length is"),
        (QPID_BESIDE_A_READER, KNOB_QPID_FLOW_STOP_COUNT, "q",
         "'q' is a RabbitMQ queue (a connection's link names it)"),
    ],
)  # fmt: skip
def test_a_sweep_it_cannot_run_is_one_line(
    scenario: str, knob: str, entity: str, message: str
) -> None:
    spec = _scenario(scenario)
    with pytest.raises(SweepError) as refused:
        run_sweep(spec, knob, entity, [10])
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_objective_metrics_are_checked_against_the_knobs_measurements() -> None:
    spec = load_scenario("qpid-900-500")
    with pytest.raises(SweepError, match=r"no metric 'lost msgs' for qpid\.flow_stop_count"):
        run_sweep(
            spec,
            KNOB_QPID_FLOW_STOP_COUNT,
            "orders",
            [500],
            objective=parse_objective("lost msgs:lower"),
        )


def test_whatif_does_not_replay_a_change_the_scenario_already_has() -> None:
    spec = load_scenario("artemis-block-core-producers")
    same = KnobChange("artemis", "orders", "producerWindowSize", 1024, 65536, "lower", "r")
    other = KnobChange("artemis", "orders", "producerWindowSize", 65536, 4096, "lower", "r")
    assert not knob_applies(spec, same)
    assert knob_applies(spec, other)


# -- the command ----------------------------------------------------------------------------


def test_command_prints_the_table_and_the_verdict() -> None:
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            "artemis-slow-fast-consumers",
            "--knob",
            "consumerWindowSize",
            "--entity",
            "slow-unbounded",
            "--values=-1,0,65536",
            "--workers",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("-1 (off), as written" in line for line in lines)
    best = next(line for line in lines if line.strip("│ ").startswith("0 "))
    assert "best" in best
    assert (
        "objective, in priority order: queue msgs processed higher; queue processed by s lower "
        "(within 1%); knob value lower" in result.output
    )
    assert lines[-1] == "best consumerWindowSize for slow-unbounded: 0 (as written: -1 (off))"
    # The objective's metrics only, and for each run out the criterion it went out on.
    assert "consumer msgs processed" not in result.output
    assert "out: queue msgs processed" in result.output
    assert "out: queue processed by s" in result.output


def test_command_shows_every_metric_when_asked() -> None:
    args = ["sweep", "qpid-165-worst-case", "--knob", "qpid.flow_stop_count"]
    args += ["--entity", "payments", "--values", "1,300", "--all-metrics", "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    header = result.output[: result.output.index("as written")]
    for metric in ("rejected msgs", "enqueued", "peak depth bytes", "max overshoot msgs"):
        assert metric in header
    assert "out: enqueued" in result.output
    assert "refused: queue 'payments': flow_stop_count (300) exceeds max_count (200)" in (
        " ".join(result.output.split())
    ).replace("│ ", "")


def test_command_json_is_the_sweep_and_refusals_are_one_line() -> None:
    args = ["sweep", "qpid-165-worst-case", "--knob", "qpid.flow_stop_count"]
    args += ["--entity", "payments"]
    result = CliRunner().invoke(app, [*args, "--values", "1,150..200+50", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    spec = load_scenario("qpid-165-worst-case")
    assert (
        document == run_sweep(spec, KNOB_QPID_FLOW_STOP_COUNT, "payments", [1, 150, 200]).as_dict()
    )
    # 1 takes in fewer messages, 150 and 200 reject some: the run as written (100) is kept.
    assert document["keep"] is True and document["best"] == 100
    assert [c["best"] for c in document["candidates"]] == [True, False, False, False]
    # Each run's resume, the written 80 of 100 kept as a share of the stop.
    assert [c["resume_count"] for c in document["candidates"]] == [80, 1, 120, 160]
    assert document["verdict"] == "keep qpid.flow_stop_count of payments as written (100)"
    refused = CliRunner().invoke(app, [*args, "--values", "100..x"])
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        "error: --values: '100..x' is neither an integer nor a range like 100..1000+100 or "
        "1024..65536*2"
    ]


def test_a_length_limit_that_unblocks_the_connection_wins() -> None:
    """seed 004: a slow quorum queue on a 0.9.1 connection blocks the connection's publishes to
    every queue; reject-publish refuses what it will not hold instead, which is what the
    recommender advises and the what-if validates. With rejections first, no limit that acts
    could win a sweep (an audit): now the largest limit that unblocks the connection does. The
    scenario's first half second (of 2; the connection blocks within it): a quarter of the events,
    the same choice."""
    spec = load_scenario("rabbitmq-two-senders").model_copy(update={"duration_s": 0.5})
    sweep = run_sweep(spec, "x-max-length", "quorum-queue-amqp-091", [1, 10, 100, 1000])
    figures = {c.value: c.metrics for c in sweep.candidates if c.metrics}
    assert figures[None]["connection blocked s"] > 0.25 and figures[None]["rejected msgs"] == 0
    assert figures[100]["connection blocked s"] == figures[1]["connection blocked s"] == 0
    assert 0 < figures[1000]["connection blocked s"] < figures[None]["connection blocked s"]
    assert sweep.verdict() == "best x-max-length for quorum-queue-amqp-091: 100 (as written: none)"
    assert sweep.choice.dropped[0].startswith("connection blocked s")


def test_a_length_limit_as_written_is_run_once() -> None:
    """x-max-length is spelled with the queue's flow thresholds as four 0s, which a RabbitMQ
    queue has without them (no Qpid defaults): the value as written ran a second time, "as good"
    as itself (a review). It is the run as written alone."""
    spec = load_scenario("rabbitmq-two-senders")
    limited = [
        q.model_copy(update={"arguments": {"qpid.max_count": 500, "qpid.policy_type": "reject"}})
        if q.name == "quorum-queue-amqp-091"
        else q
        for q in spec.queues
    ]
    spec = spec.model_copy(update={"queues": limited, "duration_s": 0.2})
    sweep = run_sweep(spec, "x-max-length", "quorum-queue-amqp-091", [100, 500])
    assert sweep.current == 500
    assert [c.value for c in sweep.candidates] == [500, 100]
    assert sweep.candidates[0].as_written


def test_an_artemis_limit_that_takes_nothing_does_not_win() -> None:
    """Every live limit of this address rejects (AMQP producers past its reject threshold): with
    rejections before the work done, max-size-bytes 0, at which nothing is taken, processed or
    rejected, won (an audit). And -1 (off) was refused beside the reject threshold: the
    threshold now goes off with the limit, and the verdict says how far the address grew. The
    scenario's first 1.5 s (of 4; the readers start at 1 s): without a limit the producers fill
    the address flat out, and the run's cost grows with it."""
    spec = load_scenario("artemis-amqp-reject-threshold").model_copy(update={"duration_s": 1.5})
    sweep = run_sweep(spec, "max-size-bytes", "telemetry-hard", [-1, 0, 51200, 2**63])
    figures = {c.value: c for c in sweep.candidates}
    assert figures[0].metrics is not None and figures[0].metrics["queue msgs processed"] == 0
    assert figures[2**63].refused == (
        "max-size-bytes is a Java long: at most 9,223,372,036,854,775,807"
    )
    off = figures[-1].metrics
    assert off is not None and off["rejected msgs"] == 0
    best = sweep.candidates[sweep.choice.best or 0]
    assert best.value == -1
    verdict = sweep.verdict()
    assert verdict.startswith("best max-size-bytes for telemetry-hard: -1 (off) (as written: ")
    assert f"the address reached {off['peak address bytes']:,.0f} bytes in this run" in verdict
    unbounded = with_knob(
        spec, KnobChange("", "telemetry-hard", "max-size-bytes", None, -1, "", "test")
    )
    address = next(a for a in unbounded.artemis.addresses if a.name == "telemetry-hard")  # type: ignore[union-attr]
    assert (address.max_size_bytes, address.max_size_bytes_reject_threshold) == (-1, -1)


def test_a_queue_declared_by_a_step_can_be_swept() -> None:
    """Its qpid.max_count is read from the declare step (an audit: a StopIteration, every run
    lost)."""
    spec = _scenario(
        """
name: declared-step
kind: scripted
start: 2026-03-02T09:00:00Z
broker: {name: qpid-orders}
producers:
  - {name: loader, capacity: 2000, routing_key: orders}
consumers:
  - {name: worker, queue: orders}
steps:
  - declare: {queue: orders, arguments: {qpid.max_count: 1000, qpid.flow_stop_count: 900}}
  - send: {producer: loader, count: 950, size: 256}
  - advance: {seconds: 1}
  - consume: {consumer: worker, count: 950}
"""
    )
    sweep = run_sweep(spec, KNOB_QPID_FLOW_STOP_COUNT, "orders", [500, 1000])
    assert sweep.count_limit == 1000
    assert [c.value for c in sweep.candidates] == [900, 500, 1000]


#: Seed 001's queue (stop 100 of max_count 200, producers' windows 50 + 15) under a light load:
#: 150 messages, which no stop count from 150 up holds back.
LIGHT_PAYMENTS = """
name: light-payments
kind: scripted
start: 2026-03-02T11:00:00Z
broker: {name: qpid-payments}
queues:
  - name: payments
    arguments: {qpid.max_count: 200, qpid.flow_stop_count: 100, qpid.flow_resume_count: 80}
producers:
  - {name: C1, capacity: 50, routing_key: payments}
  - {name: C2, capacity: WINDOW, routing_key: payments}
consumers:
  - {name: settle, queue: payments}
steps:
  - send: {producer: C1, count: 120, size: 512}
  - send: {producer: C2, count: 30, size: 512}
  - advance: {seconds: 20}
  - consume: {consumer: settle, count: 150}
"""


def test_a_stop_count_whose_overshoot_bound_passes_max_count_is_said() -> None:
    """A light run cannot show that a stop count leaves too little room below qpid.max_count:
    the sweep picks 150 (never stopped), and the verdict adds seed 001's bound, 150 + 50 + 15 =
    215 > 200. The bundled heavy run of the same queue shows the warning is right: at 150 the
    limit refuses messages, at 125 (125 + 65 = 190) none, and 125 gets no such warning."""
    light = _scenario(LIGHT_PAYMENTS.replace("WINDOW", "15"))
    sweep = run_sweep(light, KNOB_QPID_FLOW_STOP_COUNT, "payments", [125, 150])
    assert sweep.producers_capacity == 65
    assert sweep.choice.best is not None
    assert sweep.candidates[sweep.choice.best].value == 150
    assert sweep.verdict().endswith(
        "; the stop plus the producers' windows (150 + 65 = 215) passes the queue's "
        "qpid.max_count (200): a busier run than this one can meet the limit before flow "
        "control holds the producers"
    )
    at_125 = dataclasses.replace(sweep, choice=dataclasses.replace(sweep.choice, best=1))
    assert at_125.candidates[1].value == 125 and "max_count" not in at_125.verdict()

    heavy = run_sweep(
        _scenario("qpid-165-worst-case"), KNOB_QPID_FLOW_STOP_COUNT, "payments", [125, 150]
    )
    rejected = {c.value: (c.metrics or {})["rejected msgs"] for c in heavy.candidates}
    assert rejected[150] > 0 and rejected[125] == 0


def test_a_producer_without_a_window_leaves_no_bound_below_max_count() -> None:
    """A producer with no capacity never waits for its held transfers: whatever the stop, the
    verdict says nothing keeps the queue below its qpid.max_count."""
    unbounded = LIGHT_PAYMENTS.replace("capacity: WINDOW, ", "")
    sweep = run_sweep(_scenario(unbounded), KNOB_QPID_FLOW_STOP_COUNT, "payments", [125, 150])
    assert sweep.producers_capacity is None
    assert "a producer without a window (capacity) never waits for its held transfers" in (
        sweep.verdict()
    )


def test_a_kept_stop_count_gets_the_same_warning() -> None:
    """The stop as written is no safer for being kept: 150 of max_count 200 with windows 65,
    where no value swept does better, is kept with the same words."""
    light = _scenario(
        LIGHT_PAYMENTS.replace("WINDOW", "15").replace(
            "qpid.flow_stop_count: 100, qpid.flow_resume_count: 80",
            "qpid.flow_stop_count: 150, qpid.flow_resume_count: 120",
        )
    )
    sweep = run_sweep(light, KNOB_QPID_FLOW_STOP_COUNT, "payments", [175])
    assert sweep.verdict() == (
        "keep qpid.flow_stop_count of payments as written (150); the stop plus the producers' "
        "windows (150 + 65 = 215) passes the queue's qpid.max_count (200): a busier run than "
        "this one can meet the limit before flow control holds the producers"
    )


def test_a_run_that_met_the_limit_says_so_and_counts_every_producer() -> None:
    """Stop 150 of max_count 200 under seed 001's heavy load: C2 is refused whole at the limit
    (its messages are message_rejected, none enqueued), and its window still counts: 150 + 65 =
    215 (a review: 150 + 50 = 200, no warning, in the run that refused 300). The verdict says
    this run met the limit. A count switched off says the limit refuses first."""
    heavy = _scenario("qpid-165-worst-case")
    queue = heavy.queues[0]
    arguments = {**queue.arguments, "qpid.flow_stop_count": 150, "qpid.flow_resume_count": 120}
    at_150 = heavy.model_copy(
        update={"queues": [queue.model_copy(update={"arguments": arguments})]}
    )
    sweep = run_sweep(at_150, KNOB_QPID_FLOW_STOP_COUNT, "payments", [175, 200])
    assert sweep.producers_capacity == 65
    assert sweep.candidates[0].metrics["rejected msgs"] == 300  # type: ignore[index]
    assert sweep.verdict() == (
        "keep qpid.flow_stop_count of payments as written (150); the stop plus the producers' "
        "windows (150 + 65 = 215) passes the queue's qpid.max_count (200): this run met the limit "
        "before flow control held the producers (300 refused)"
    )
    off = run_sweep(heavy, KNOB_QPID_FLOW_STOP_COUNT, "payments", [0])
    as_off = dataclasses.replace(off, choice=dataclasses.replace(off.choice, best=1))
    assert as_off.candidates[1].value == 0
    assert as_off.verdict().endswith(
        "; with the count threshold off, the queue's qpid.max_count (200) refuses first"
    )


def test_a_ring_queue_evicts_at_its_limit_and_the_table_shows_it() -> None:
    """A ring queue drops its oldest messages at its qpid.max_count; it refuses none (DESIGN
    §2). The verdict said "refuses first" for one (a review), and no figure showed its losses:
    its evictions are a column of the table."""
    sweep = run_sweep(load_scenario("ring-no-defaults"), KNOB_QPID_FLOW_STOP_COUNT, "ticks", [50])
    assert sweep.limit_policy == "ring"
    assert sweep.verdict().endswith(
        "; with the count threshold off, the queue's qpid.max_count (100) evicts its oldest "
        "messages first"
    )
    assert "evicted msgs" in sweep.shown_metrics()
    assert sweep.candidates[0].metrics["evicted msgs"] == 150  # type: ignore[index]
    reject = run_sweep(
        load_scenario("qpid-165-worst-case"), KNOB_QPID_FLOW_STOP_COUNT, "payments", [0]
    )
    assert "evicted msgs" not in reject.shown_metrics()


RING_HELD_BY_FLOW_CONTROL = """
name: ring-held
description: a ring queue whose flow thresholds hold its producer before it evicts
kind: scripted
start: 2026-03-03T15:00:00Z
broker: {name: qpid-ring}
queues:
  - name: ticks
    arguments: {qpid.max_count: 100, qpid.policy_type: ring, qpid.flow_stop_count: 90,
                qpid.flow_resume_count: 60}
producers:
  - {name: ticker, capacity: 10, routing_key: ticks}
consumers:
  - {name: reader, queue: ticks}
steps:
  - send: {producer: ticker, count: 250, size: 64}
  - advance: {seconds: 5}
  - consume: {consumer: reader, count: 100}
"""


def test_a_ring_queue_keeps_the_count_that_loses_no_message() -> None:
    """A ring queue's evictions are its loss at its limit, and it counts the evicted among the
    messages enqueued: with flow control off it took 250 messages and evicted 150, and won the
    sweep on enqueued (250 against 200) over the count as written, which evicted none (a
    review)."""
    sweep = run_sweep(_scenario(RING_HELD_BY_FLOW_CONTROL), KNOB_QPID_FLOW_STOP_COUNT, "ticks", [0])
    as_written, off = (c.metrics or {} for c in sweep.candidates)
    assert (as_written["evicted msgs"], off["evicted msgs"]) == (0, 150)
    assert off["enqueued"] > as_written["enqueued"]
    assert sweep.choice.best == 0  # the run as written
    assert sweep.choice.cause[1] == "evicted msgs"
    assert sweep.shown_metrics()[:2] == ["rejected msgs", "evicted msgs"]


def test_a_count_the_queue_never_passed_says_its_byte_threshold_stopped_it() -> None:
    """bursty-producer's events queue stops on bytes (4 MiB) before 4,508 messages: every
    count from 4,508 up gives the same runs. The sweep says which thresholds every run keeps,
    and that the count chosen never acted (a review: the what-if of a recommendation that also
    raised the byte stop showed 0 episodes for the count the sweep showed 12 at)."""
    sweep = run_sweep(
        load_scenario("bursty-producer"), KNOB_QPID_FLOW_STOP_COUNT, "events", [4508, 5000]
    )
    assert sweep.kept_text() == (
        "every run keeps the byte thresholds of events as written: stop 4,194,304, resume "
        "3,670,016 bytes"
    )
    assert sweep.verdict() == (
        "best qpid.flow_stop_count for events: 4,508 (as written: 4,000); the queue never "
        "passed 4,508 msgs (peak 4,202): its byte threshold stopped it each time"
    )
    assert sweep.as_dict()["byte_thresholds"] == {"stop_size": 4_194_304, "resume_size": 3_670_016}
    # Flow stops above the count (DESIGN §2): a peak at the count never passed it.
    best = sweep.candidates[sweep.choice.best]  # type: ignore[index]
    assert "(peak 4,202)" in sweep._bytes_stopped(dataclasses.replace(best, value=4_202))
    assert sweep._bytes_stopped(dataclasses.replace(best, value=4_201)) == ""


def test_a_sweep_of_values_all_refused_says_none_ran_and_fails() -> None:
    """Every value refused: nothing was compared, so the sweep neither keeps nor chooses; the
    command says so and exits 2 (it said "keep ... as written" with exit 0: a review)."""
    args = ["sweep", "rabbitmq-memory-alarm", "--knob", "prefetch", "--entity", "backlog-reader"]
    result = CliRunner().invoke(app, [*args, "--values=-5,70000", "--workers", "1"])
    assert result.exit_code == 2, result.output
    assert (
        "no value of prefetch for backlog-reader ran: each was refused, so none was compared "
        "with the value as written" in result.output
    )
    ran = CliRunner().invoke(app, [*args, "--values=0,200", "--workers", "1"])
    assert ran.exit_code == 0, ran.output


def test_an_overshoot_past_a_threshold_that_is_off_is_null_in_json() -> None:
    """qpid-165-worst-case's payments has count thresholds only: its byte overshoot is
    undefined (DESIGN §4), null in the JSON and "off" in the table, not 0; so is the count
    overshoot of a run with the count switched off."""
    sweep = run_sweep(
        load_scenario("qpid-165-worst-case"), KNOB_QPID_FLOW_STOP_COUNT, "payments", [0]
    )
    written, off = (c["metrics"] for c in sweep.as_dict()["candidates"])
    assert (written["max overshoot msgs"], written["max overshoot bytes"]) == (65, None)
    assert (off["max overshoot msgs"], off["max overshoot bytes"]) == (None, None)
    assert sweep.figures(sweep.candidates[1])["max overshoot msgs"] == "off"


@pytest.mark.parametrize(
    ("scenario", "knob", "entity", "said"),
    [
        ("rabbitmq-paced-consumers", "prefetch", "worker-10",
         "no amqp-0-9-1 consumer 'worker-10' (its amqp-0-9-1 consumers: 'worker-091'); "
         "'worker-10' is an amqp-1.0 consumer ('link credit')"),
        ("rabbitmq-paced-consumers", "prefetch", "workr-091",
         "(its amqp-0-9-1 consumers: 'worker-091'); did you mean 'worker-091'?"),
        ("artemis-slow-fast-consumers", "max-size-bytes", "slow-100k",
         "no artemis address 'slow-100k' (its artemis addresses: 'jobs-100k', 'jobs-no-buffer', "
         "'jobs-unbounded'); 'slow-100k' is an artemis consumer (consumerWindowSize)"),
    ],
)  # fmt: skip
def test_an_entity_of_another_knob_is_named_with_its_knob(
    scenario: str, knob: str, entity: str, said: str
) -> None:
    """A consumer of the other protocol, or of another kind, was "no ... consumer" with nothing
    more (a review): the error lists the knob's entities and names the knob of the one given."""
    with pytest.raises(SweepError) as error:
        run_sweep(load_scenario(scenario), knob, entity, [1])
    assert said in str(error.value)


def test_an_empty_objective_is_refused() -> None:
    args = ["sweep", "qpid-900-500", "--knob", KNOB_QPID_FLOW_STOP_COUNT, "--entity", "orders"]
    result = CliRunner().invoke(app, [*args, "--values", "800", "--objective", ""])
    assert result.exit_code == 2
    assert "--objective: '' is not METRIC:lower or METRIC:higher" in result.output


def test_the_help_names_every_knob_whole_at_80_columns() -> None:
    """The --knob option's column cut the names a user has to type ("qpid.flow_stop_co…",
    a review): the command's text lists them, each whole, and names them all."""
    result = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert [knob for knob in sweep_knobs() if knob not in text] == []
    assert "\u2026" not in result.output

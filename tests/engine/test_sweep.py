"""The sweep (flowctl_core/sweep.py): the value grammar, the choice by an objective, and sweeps of
bundled scenarios on the engine checked against seed 003 and against the what-if's own runs."""

from __future__ import annotations

import json
import math
from concurrent.futures import ProcessPoolExecutor

import pytest
from typer.testing import CliRunner

from flowctl.cli import app
from flowctl_core.flowlimit import FlowThresholds
from flowctl_core.scenario import load_scenario
from flowctl_core.sweep import (
    HIGHER,
    KNOB_VALUE,
    LOWER,
    OBJECTIVES,
    Candidate,
    Criterion,
    SweepError,
    choose,
    parse_objective,
    parse_values,
    run_sweep,
)
from flowctl_core.whatif import run_whatif
from flowctl_core.whatif_knobs import KNOB_APPLIERS, KNOB_READERS
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
        ("500..100+10", "starts above its end"),
        ("0..100*2", "never grows"),
        ("1..100+0", "never grows"),
        ("1..1000+1", "more than 200 values"),
        ("-2,5", "-2 is negative"),
    ],
)
def test_bad_values_are_refused_naming_the_part(text: str, message: str) -> None:
    with pytest.raises(SweepError, match="--values") as refused:
        parse_values(text)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_objective_parses_criteria_in_order() -> None:
    assert parse_objective("rejected msgs:lower, time stopped s:lower:2.5%,knob value:higher") == (
        Criterion("rejected msgs", LOWER),
        Criterion("time stopped s", LOWER, 0.025),
        Criterion(KNOB_VALUE, HIGHER),
    )
    with pytest.raises(SweepError, match="'rejected msgs:least' is not METRIC:lower"):
        parse_objective("rejected msgs:least")


def test_every_objective_names_metrics_its_knob_measures() -> None:
    """An objective's metric missing from the knob's measurements would fail every sweep of it:
    each one is checked against a real run of a bundled scenario in the tests below, and here
    every knob the what-if can apply has an objective."""
    assert set(OBJECTIVES) == {*KNOB_APPLIERS, KNOB_QPID_FLOW_STOP_COUNT}
    assert set(KNOB_READERS) == set(KNOB_APPLIERS)


# -- the choice -----------------------------------------------------------------------------


def _candidate(value: int, **metrics: float) -> Candidate:
    return Candidate(value, {name.replace("_", " "): m for name, m in metrics.items()})


def test_choice_takes_criteria_in_priority_order() -> None:
    objective = (Criterion("lost", LOWER), Criterion("done", HIGHER), Criterion("peak", LOWER))
    candidates = [
        _candidate(1, lost=5, done=100, peak=1),  # loses messages: out first
        _candidate(2, lost=0, done=90, peak=2),  # less work done
        _candidate(3, lost=0, done=100, peak=9),
        _candidate(4, lost=0, done=100, peak=3),
    ]
    choice = choose(candidates, objective, current=None)
    assert choice.best is candidates[3]
    assert choice.dropped == {
        1: "lost: 5 against 0",
        2: "done: 90 against 100",
        3: "peak: 9 against 3",
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
    assert choice.best is candidates[1]
    assert choice.dropped[100] == "received: 900 against 1,000"
    assert choice.dropped[1000] == "knob value: 1,000 against 500"


def test_off_is_the_largest_knob_value() -> None:
    """Artemis's -1 switches a window off: no bound, so never the cheapest to hold."""
    objective = (Criterion(KNOB_VALUE, LOWER),)
    candidates = [_candidate(-1, x=1), _candidate(65536, x=1)]
    choice = choose(candidates, objective, current=-1)
    assert choice.best is candidates[1]
    assert choice.dropped[-1] == "knob value: off against 65,536"


def test_ties_go_to_the_value_nearest_as_written_then_the_lowest() -> None:
    objective = (Criterion("x", LOWER),)
    candidates = [_candidate(v, x=1) for v in (1024, 2048, 8192)]
    assert choose(candidates, objective, current=4096).best is candidates[1]
    assert choose(candidates, objective, current=None).best is candidates[0]
    assert choose(candidates, objective, current=-1).best is candidates[2]
    kept = choose(candidates, objective, current=8192)
    assert kept.best is candidates[2]
    assert kept.dropped[1024] == "as good; 8,192 is nearer the value as written"


def test_refused_values_take_no_part() -> None:
    objective = (Criterion("x", LOWER),)
    refused = Candidate(9, None, "flow_stop_count (9) exceeds max_count (5)")
    choice = choose([refused, _candidate(1, x=3)], objective, current=None)
    assert choice.best is not None and choice.best.value == 1
    assert choice.dropped[9] == "refused: flow_stop_count (9) exceeds max_count (5)"
    assert choose([refused], objective, current=None).best is None


# -- sweeps on the engine -------------------------------------------------------------------


def test_slow_consumer_sweep_finds_seed_003s_window_of_zero() -> None:
    """Seed 003, "Slow consumers": a slow consumer beside a fast one should buffer nothing
    (consumerWindowSize 0), so that the fast one is not left idle. The sweep finds it from the
    runs alone: the queue's messages are all processed, and soonest, at 0."""
    spec = load_scenario("artemis-slow-fast-consumers")
    sweep = run_sweep(spec, "consumerWindowSize", "slow-unbounded", [-1, 0, 1024, 65536])
    assert sweep.current == -1
    assert sweep.choice.best is not None and sweep.choice.best.value == 0
    by_value = {c.value: c for c in sweep.candidates}
    assert by_value[-1].metrics == sweep.baseline  # the value as written, run again
    unbounded, none = by_value[-1].metrics, by_value[0].metrics
    assert unbounded is not None and none is not None
    assert none["queue msgs processed"] > unbounded["queue msgs processed"]
    assert sweep.verdict() == "best consumerWindowSize for slow-unbounded: 0 (now -1)"


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
    best = sweep.choice.best
    assert best is not None and best.metrics is not None
    assert best.value < sweep.current  # type: ignore[operator]
    most = max(m["queue msgs processed"] for m in measured.values())
    assert best.metrics["queue msgs processed"] >= 0.99 * most
    assert best.metrics["max overshoot bytes"] == min(
        m["max overshoot bytes"]
        for m in measured.values()
        if m["queue msgs processed"] >= 0.99 * most
    )


def test_qpid_stop_count_sweep_agrees_with_the_whatif() -> None:
    """The sweep's run at a stop count is the what-if's run with the same thresholds (another
    path through the engine); counts past the queue's max_count are refused with the engine's
    own reason; the resume keeps its share of the stop (3000 / 4000 as written)."""
    spec = load_scenario("bursty-producer")
    sweep = run_sweep(spec, KNOB_QPID_FLOW_STOP_COUNT, "events", [2000, 5000, 6000])
    assert sweep.current == 4000
    by_value = {c.value: c for c in sweep.candidates}
    assert by_value[6000].metrics is None
    assert by_value[6000].refused == (
        "queue 'events': flow_stop_count (6000) exceeds max_count (5000)"
    )
    written = run_whatif(spec, {}).queue("events").before.thresholds
    for stop in (2000, 5000):
        thresholds = FlowThresholds(
            stop_count=stop,
            resume_count=stop * written.resume_count // written.stop_count,
            stop_size=written.stop_size,
            resume_size=written.resume_size,
        )
        after = run_whatif(spec, {"events": thresholds}).queue("events").after
        assert after.thresholds == thresholds
        assert by_value[stop].metrics == after.metrics()
    assert by_value[4000].metrics == sweep.baseline
    best = sweep.choice.best
    assert best is not None and best.metrics is not None
    assert best.metrics["rejected msgs"] == 0
    assert best.metrics["time stopped s"] == min(
        c.metrics["time stopped s"] for c in sweep.candidates if c.metrics is not None
    )


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
    rejected = [c.metrics["rejected msgs"] for c in alone.candidates if c.metrics is not None]
    assert rejected[0] == 0  # -1: no reject threshold
    assert rejected[1:] == sorted(rejected[1:], reverse=True)  # a higher threshold rejects less


@pytest.mark.parametrize(
    ("knob", "entity", "message"),
    [
        ("credit", "orders", "no sweep for knob 'credit'; knobs: qpid.flow_stop_count,"),
        ("producerWindowSize", "nowhere", "no CORE producer on artemis address 'nowhere'"),
        ("qpid.flow_stop_count", "nowhere", "no queue 'nowhere'"),
    ],
)
def test_unknown_knob_or_entity_is_one_line(knob: str, entity: str, message: str) -> None:
    spec = load_scenario("artemis-block-core-producers")
    with pytest.raises(SweepError) as refused:
        run_sweep(spec, knob, entity, [1024])
    assert message in str(refused.value)


def test_objective_metrics_are_checked_against_the_knobs_measurements() -> None:
    spec = load_scenario("qpid-900-500")
    with pytest.raises(SweepError, match=r"no metric .lost msgs. for qpid\.flow_stop_count"):
        run_sweep(
            spec,
            KNOB_QPID_FLOW_STOP_COUNT,
            "orders",
            [500],
            objective=parse_objective("lost msgs:lower"),
        )


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
    assert lines[-1] == "best consumerWindowSize for slow-unbounded: 0 (now -1)"


def test_command_json_and_one_line_refusals() -> None:
    args = ["sweep", "qpid-900-500", "--knob", "qpid.flow_stop_count", "--entity", "orders"]
    result = CliRunner().invoke(app, [*args, "--values", "100..900+400", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [c["value"] for c in document["candidates"]] == [100, 500, 900]
    assert sum(c["best"] for c in document["candidates"]) == 1
    assert document["best"] in (100, 500, 900)
    refused = CliRunner().invoke(app, [*args, "--values", "100..x"])
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        "error: --values: '100..x' is neither an integer nor a range like 100..1000+100 or "
        "1024..65536*2"
    ]
    assert math.isfinite(document["baseline"]["time stopped s"])

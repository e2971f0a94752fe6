"""What-if reruns on the engine, and the bundled bursty-producer scenario validated end to end:
engine -> Parquet -> the pipeline's transforms -> recommendations -> what-if on the engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from flowctl_core.events import EventCollector
from flowctl_core.flowlimit import FlowConfigError, FlowThresholds
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario
from flowctl_core.whatif import (
    QueueComparison,
    format_comparison,
    overrides_from_recommendations,
    queue_verdicts,
    run_whatif,
    with_thresholds,
    without_artemis_queues,
)
from tests.scenario_gold import recommendation_rows, recommendations_by_broker


def test_overrides_are_declared_from_the_start() -> None:
    scenario = load_scenario("qpid-165-worst-case")
    changed = with_thresholds(scenario, {"payments": FlowThresholds(120, 90)})
    arguments = changed.queues[0].arguments
    assert arguments["qpid.max_count"] == 200
    assert (arguments["qpid.flow_stop_count"], arguments["qpid.flow_resume_count"]) == (120, 90)
    collector = EventCollector()
    run_scenario(changed, [collector])
    declared = collector.of_type("queue_declared")[0]
    assert (declared["flow_stop_count"], declared["flow_resume_count"]) == (120, 90)
    assert scenario.queues[0].arguments["qpid.flow_stop_count"] == 100  # the original is intact


def test_seed_001_worst_case_moves_with_the_stop_threshold() -> None:
    """Seed 001: stop 100 and capacities 50 + 15 queue up to 165; with stop 120, up to 185."""
    comparison = run_whatif(
        load_scenario("qpid-165-worst-case"),
        {"payments": FlowThresholds(120, 80), "not-here": FlowThresholds(1, 1)},
    )
    payments = comparison.queue("payments")
    assert (payments.before.peak_depth_msgs, payments.after.peak_depth_msgs) == (165, 185)
    assert payments.before.max_overshoot_msgs == payments.after.max_overshoot_msgs == 65
    # Stop 100 / resume 80: the sends stop the queue at t=0; each of the four consumes (t=20, 40,
    # 60, 80 s) leaves fewer than 80 queued, so it resumes, and the held windows refill it past 100
    # at once: 5 episodes, four of 20 s and one open at the watermark (t=80), 80 s stopped.
    # Stop 120: the first consume (185 - 86 = 99 left) does not reach 80, so the first episode
    # lasts 40 s, then two of 20 s and the open one: 4 episodes, the same 80 s.
    assert (payments.before.episodes, payments.after.episodes) == (5, 4)
    assert payments.before.time_stopped_s == payments.after.time_stopped_s == pytest.approx(80.0)
    assert comparison.ignored_overrides == ("not-here",)
    # A raise is for stopping less: one episode fewer, no rejection, so it is validated.
    assert payments.aim == "relieve" and payments.validated


def test_an_overshoot_past_a_threshold_that_is_off_prints_off() -> None:
    """Seed 001's queue has count thresholds only: its byte overshoot is undefined, not 0
    (DESIGN §4), as `flowctl simulate` prints it; with the stop switched off, so is its count
    overshoot, and the thresholds say which unit is off."""
    comparison = run_whatif(
        load_scenario("qpid-165-worst-case"), {"payments": FlowThresholds(0, 0)}
    )
    shown = {
        row["metric"]: (row["before"], row["after"], row["change"]) for row in comparison.rows()
    }
    assert shown["thresholds (stop/resume)"] == ("100/80 msgs, bytes off", "off", "changed")
    assert shown["max overshoot bytes"] == ("off", "off", "=")
    assert shown["max overshoot msgs"] == (65, "off", "changed")
    payments = comparison.queue("payments")
    assert (payments.before.max_overshoot_bytes, payments.after.max_overshoot_msgs) == (0, 0)


def test_printed_figures_have_the_decimals_of_the_change_and_the_verdict() -> None:
    """The table printed 182.07 and 0.00 beside a change of -182.072 and a verdict of
    "182.072 -> 0 s" (a review): before and after are printed as the change is."""
    comparison = run_whatif(
        load_scenario("bursty-producer"),
        {"events": FlowThresholds(4_508, 3_944, 4_487_168, 3_926_272)},
    )
    printed = {row["metric"]: row for row in comparison.printed_rows() if row["queue"] == "events"}
    stopped = printed["time stopped s"]
    assert (stopped["before"], stopped["change"]) == ("182.072", "-182.072")
    assert stopped["after"] == "0"
    assert printed["enqueued"]["before"] == "138,079"


def test_verdicts_judge_each_change_by_what_it_is_for() -> None:
    """The recommender raises a stop threshold so that the queue stops less, lowers one to leave
    room for the overshoot below the limit, and moves only the resume threshold against flapping;
    the what-if judges each by that aim, and names what failed."""
    scenario = load_scenario("qpid-165-worst-case")
    raised = run_whatif(scenario, {"payments": FlowThresholds(120, 80)})
    # The verdict names what it stands on: fewer episodes, not less time stopped.
    assert queue_verdicts(raised) == [
        ("payments", "validated to stop less: episodes 5 -> 4, time stopped 80 s either way", False)
    ]
    # Stop 100 -> 60 (seed 001: the bound is stop + 65 = 125 <= 200): a protective change for a
    # queue that never reached its limit. It cannot cut rejections (none) nor overshoot (still
    # 65, over a lower stop): it is validated by the room it makes, the peak 165 -> 125 with the
    # same 80 s stopped (an audit: every at-risk row failed its what-if, exit 1, on the old bar).
    lowered = run_whatif(scenario, {"payments": FlowThresholds(60, 40)})
    payments = lowered.queue("payments")
    assert payments.aim == "protect"
    assert payments.after.max_overshoot_msgs == payments.before.max_overshoot_msgs == 65
    assert (payments.before.peak_depth_msgs, payments.after.peak_depth_msgs) == (165, 125)
    assert queue_verdicts(lowered) == [
        (
            "payments",
            "validated to keep room below the limit: peak depth msgs 165 -> 125, time stopped "
            "80 s either way, peak depth bytes 84,480 -> 64,000",
            False,
        )
    ]
    # The same lowering had the queue's peak stayed where it was: it made no room.
    no_room = QueueComparison(
        "payments", payments.before, dataclasses.replace(payments.after, peak_depth_msgs=165,
        peak_depth_bytes=payments.before.peak_depth_bytes)
    )  # fmt: skip
    assert no_room.failures() == ["neither overshoot, rejections nor the peak depth cut"]
    # Resume only, 80 -> 20: fewer, longer episodes.
    steadier = run_whatif(scenario, {"payments": FlowThresholds(100, 20)})
    payments = steadier.queue("payments")
    assert payments.aim == "steady"
    assert (payments.before.episodes, payments.after.episodes) == (5, 4)
    assert queue_verdicts(steadier) == [
        (
            "payments",
            "validated to stop less often: episodes 5 -> 4",
            False,
        )
    ]
    same = run_whatif(scenario, {"payments": FlowThresholds(100, 80)})
    assert same.queue("payments").before.thresholds == FlowThresholds(100, 80)
    assert queue_verdicts(same) == [
        ("payments", "thresholds unchanged: nothing to validate", False)
    ]


def test_invalid_override_is_refused_by_the_engine() -> None:
    with pytest.raises(FlowConfigError, match="exceeds max_count"):
        run_whatif(load_scenario("qpid-165-worst-case"), {"payments": FlowThresholds(300, 80)})


def test_overrides_from_rows_skip_links_and_refuse_ambiguity() -> None:
    rows: list[dict[str, Any]] = [
        {"entity_kind": "queue", "entity": "q", "recommended_flow_stop_count": 10,
         "recommended_flow_resume_count": 8, "recommended_flow_stop_size": None,
         "recommended_flow_resume_size": None},
        {"entity_kind": "consumer_link", "entity": "c", "recommended_credit": 5},
    ]  # fmt: skip
    assert overrides_from_recommendations(rows) == {"q": FlowThresholds(10, 8, 0, 0)}
    # A RabbitMQ queue's row is about its length limit: no Qpid thresholds to replay.
    rabbit = {"entity_kind": "queue", "entity": "r", "knob": "x-max-length",
              "recommended_value": 500}  # fmt: skip
    qpid = {**rows[0], "knob": "qpid.flow_stop_count"}
    assert overrides_from_recommendations([qpid, rabbit]) == {"q": FlowThresholds(10, 8, 0, 0)}
    conflicting = {**rows[0], "recommended_flow_stop_count": 11}
    with pytest.raises(ValueError, match="disagree"):
        overrides_from_recommendations([rows[0], conflicting])


@pytest.fixture(scope="module")
def qpid_recommendations(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[dict[str, Any]]]:
    """The recommendations of the bundled bursty-producer (2026-03-02 23:30 to 00:30) and
    qpid-165-worst-case (2026-03-02), by broker, in one computation as of 2026-03-03 (each alone
    cost a test ~15 s of Spark planning; the default policy's 7-day look-back holds both).
    Read-only: the tests assert on it."""
    scenarios = [load_scenario("bursty-producer"), load_scenario("qpid-165-worst-case")]
    brokers = [scenario.broker.name for scenario in scenarios]
    assert brokers == ["qpid-events", "qpid-payments"]
    return recommendations_by_broker(spark, scenarios, tmp_path_factory.mktemp("qpid"))


@pytest.mark.spark
@pytest.mark.slow
def test_bursty_producer_recommendations_validated_on_the_engine(
    qpid_recommendations: dict[str, list[dict[str, Any]]],
) -> None:
    """The honest loop: recommendations computed by the Spark transforms from the scenario's own
    event log, then replayed on the engine. The queue's verdict is a raise (it stopped with room
    to spare), so the what-if must find it stopping less, with no more rejections, and its peak
    must stay below the limit by the room the recommendation kept."""
    scenario = load_scenario("bursty-producer")
    # 23:30 to 00:30: the recommendations over both days, as of the second (2026-03-03).
    rows = qpid_recommendations["qpid-events"]
    queue_row = next(r for r in rows if r["entity"] == "events")
    print(queue_row["rationale"])
    assert queue_row["verdict"] == "raise"
    assert (queue_row["broker_kind"], queue_row["knob"], queue_row["rule"]) == (
        "qpid",
        "qpid.flow_stop_count",
        "room to spare",
    )
    assert queue_row["recommended_value"] == queue_row["recommended_flow_stop_count"]
    # Bursts every 300 s from 60 s into the 3,600 s run: 12 bursts of 4,200 messages, each past
    # the default stop threshold of 4,000 (80 % of 5,000): one episode each.
    assert queue_row["episodes"] == 12
    assert queue_row["producer_capacity_sum"] == 410  # batcher 400 + heartbeat 10

    comparison = run_whatif(scenario, overrides_from_recommendations(rows))
    print(format_comparison(comparison))
    events_queue = comparison.queue("events")
    assert events_queue.aim == "relieve" and events_queue.validated
    assert events_queue.after.rejected <= events_queue.before.rejected
    assert (
        events_queue.after.time_stopped_s < events_queue.before.time_stopped_s
        or events_queue.after.episodes < events_queue.before.episodes
    )
    # The recommendation kept its promise: the peak stays below the limit by the room it kept.
    assert events_queue.after.peak_depth_msgs <= 5000 - queue_row["headroom_msgs"]


#: A queue stopping at 1000 and resuming at 999 while producers send faster (2 x 80 msgs/s) than
#: its consumer takes (100 msgs/s): it flaps, every episode a fraction of a second.
FLAPPING_QUEUE = """
name: qpid-flap
kind: workload
start: 2026-03-05T06:00:00Z
broker: {name: qpid-flap}
duration_s: 120
seed: 3
queues:
  - name: flappy
    arguments: {qpid.max_count: 2000, qpid.flow_stop_count: 1000, qpid.flow_resume_count: 999,
                qpid.policy_type: reject}
producers:
  - {name: p1, capacity: 20, routing_key: flappy, size: 256, rate: 80, arrival: poisson}
  - {name: p2, capacity: 20, routing_key: flappy, size: 256, rate: 80, arrival: poisson}
consumers:
  - {name: c1, queue: flappy, rate: 100}
"""


@pytest.mark.spark
@pytest.mark.slow
def test_one_flapping_recommendation_stops_the_flapping(spark: Any, tmp_path: Path) -> None:
    """The resume gap is sized by the pace the consumers drain a stopped queue at (its dequeues
    per second stopped, 100 msgs/s here), so one step is enough: run again with the recommended
    thresholds, no episode is under the 5 s dwell and the queue is not flapping. An audit found
    the net fall over whole episodes read (about 40 msgs/s, the rise to the peak counted), which
    left every episode short after one step and widened the gap night after night."""
    import yaml

    from flowctl_core.scenario import parse_scenario

    document = yaml.safe_load(FLAPPING_QUEUE)
    scenario = parse_scenario(document, "qpid-flap")
    rows = recommendation_rows(spark, scenario, tmp_path / "before")
    row = next(r for r in rows if r["entity"] == "flappy")
    assert (row["verdict"], row["short_episodes"]) == ("flapping", row["episodes"] - 1), row
    assert 95 <= row["drain_rate_msgs_s"] <= 110, row["drain_rate_msgs_s"]
    comparison = run_whatif(scenario, overrides_from_recommendations(rows))
    print(format_comparison(comparison))
    assert comparison.queue("flappy").validated
    arguments = document["queues"][0]["arguments"]
    arguments["qpid.flow_stop_count"] = row["recommended_flow_stop_count"]
    arguments["qpid.flow_resume_count"] = row["recommended_flow_resume_count"]
    again = recommendation_rows(spark, parse_scenario(document, "qpid-flap"), tmp_path / "after")
    after = next(r for r in again if r["entity"] == "flappy")
    assert after["verdict"] != "flapping" and after["short_episodes"] == 0, after
    assert after["median_episode_s"] >= 5.0


def test_artemis_queues_are_set_apart_from_threshold_overrides() -> None:
    scenario = load_scenario("artemis-slow-fast-consumers")
    assert scenario.artemis is not None
    artemis_queue = scenario.artemis.addresses[0].queue_names[0]
    thresholds = FlowThresholds(stop_count=10, resume_count=5, stop_size=0, resume_size=0)
    kept, set_apart = without_artemis_queues(
        scenario, {artemis_queue: thresholds, "elsewhere": thresholds}
    )
    assert set_apart == [artemis_queue] and list(kept) == ["elsewhere"]
    assert without_artemis_queues(load_scenario("qpid-900-500"), {"orders": thresholds}) == (
        {"orders": thresholds},
        [],
    )


@pytest.mark.spark
def test_seed_001_worst_case_is_not_at_risk_of_a_byte_limit_it_cannot_reach(
    qpid_recommendations: dict[str, list[dict[str, Any]]],
) -> None:
    """Seed 001's queue: max_count 200, stop 100 / resume 80 in messages, no byte thresholds
    (a stop argument makes them explicit, 0 = off) under the broker's default 100 MiB limit.
    200 messages of 512 bytes never near 100 MiB, so byte flow control off is no risk; the
    verdict comes from the messages: the stop leaves room for the 65 the windows bound, with the
    margin, 200 - ceil(65 x 1.2) = 122 (an audit found it 'at risk of overflow', with a byte
    stop of 104,817,664 advised)."""
    rows = qpid_recommendations["qpid-payments"]
    payments = next(r for r in rows if r["entity"] == "payments")
    # Qpid's knob, each rule table's stage compiled (recommendations_by_broker: as the jobs
    # run them).
    assert payments["knob"] == "qpid.flow_stop_count"
    assert payments["verdict"] != "at_risk_of_overflow", payments["rationale"]
    assert "flow control off under a limit" not in payments["rationale"]
    assert payments["recommended_flow_stop_size"] == payments["current_flow_stop_size"] == 0
    assert payments["recommended_flow_stop_count"] == 122


def test_a_producer_window_change_is_judged_by_its_verdict() -> None:
    """A window lowered for an overshoot seen must cut it; one at risk (seed 003's bound, not
    reached yet) must only not add to it, as the overshoot seen may be 0 before and after."""
    from flowctl_core.whatif_knobs import KnobChange, KnobComparison

    def failures(verdict: str, before: int, after: int) -> list[str]:
        change = KnobChange("artemis", "orders", "producerWindowSize", 65536, 5461, verdict, "r")
        lost = "lost msgs (dropped, failed)"
        metrics = {"max overshoot bytes": before, lost: 0}
        return KnobComparison(change, metrics, {**metrics, "max overshoot bytes": after}).failures()

    assert failures("lower", 37_012, 11_908) == []
    assert failures("lower", 0, 0) == ["overshoot not cut"]
    assert failures("at_risk_of_overflow", 0, 0) == []
    assert failures("at_risk_of_overflow", 2_856, 1_000) == []
    assert failures("at_risk_of_overflow", 2_856, 3_000) == ["more overshoot"]


def test_a_queue_a_set_thresholds_step_changes_is_not_judged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The scenario's own step overrides the recommended thresholds mid-run, so the comparison
    shows the step's effect, not the recommendation's: it is said, and nothing fails."""
    import yaml

    from flowctl.cli import _print_threshold_whatif
    from flowctl_core.scenario import parse_scenario

    spec = parse_scenario(
        yaml.safe_load(
            """
name: stepped
kind: scripted
queues: [{name: orders, arguments: {qpid.max_count: 1000, qpid.flow_stop_count: 900}}]
producers: [{name: p, capacity: 10, routing_key: orders}]
steps:
  - send: {producer: p, count: 50}
  - set_thresholds: {queue: orders, flow_stop_count: 950, flow_resume_count: 600}
  - send: {producer: p, count: 50}
"""
        )
    )
    failed = _print_threshold_whatif(
        spec, {"orders": FlowThresholds(880, 600, 0, 0)}, "recommendations", None
    )
    out = " ".join(capsys.readouterr().out.split())
    assert not failed
    assert (
        "orders: not validated: a set_thresholds step of the scenario changes its thresholds" in out
    )


def test_a_smaller_window_for_a_slow_consumer_is_judged_by_its_queue() -> None:
    """Seed 003: a slow consumer's smaller buffer leaves it fewer messages, which the fast one
    beside it takes: its own count drops (149 -> 86 here) while its queue's rises (349 -> 400),
    and the queue's is what a consumer window is validated on."""
    from flowctl_core.whatif_knobs import KnobChange, run_knob_whatif

    change = KnobChange(
        "artemis", "slow-unbounded", "consumerWindowSize", -1, 87_558, "lower", "over-provisioned"
    )
    comparison = run_knob_whatif(load_scenario("artemis-slow-fast-consumers"), change)
    before, after = comparison.before, comparison.after
    assert after["consumer msgs processed"] < before["consumer msgs processed"]
    assert after["queue msgs processed"] > before["queue msgs processed"]
    assert comparison.validated


def test_a_raised_prefetch_is_judged_by_how_soon_a_finite_backlog_is_received(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rabbitmq-memory-alarm's reader drains a prefilled backlog of 20,000 whatever its prefetch,
    so a raise cannot show as more messages received: it shows as the backlog received sooner
    (25 in flight per 1 ms round trip drain it in 0.8 s, 100 in 0.2 s), and a raise that
    changes nothing is not validated. The two changes share one run of the scenario as
    written."""
    from flowctl_core import whatif_knobs
    from flowctl_core.whatif_knobs import KnobChange, run_knob_whatifs, with_knob

    def prefetch(current: int, value: int) -> KnobChange:
        return KnobChange("rabbitmq", "backlog-reader", "prefetch", current, value, "raise", "t")

    runs: list[str] = []
    engine_run = whatif_knobs.run_scenario

    def counted(scenario: Any, *args: Any, **kwargs: Any) -> Any:
        runs.append(scenario.name)
        return engine_run(scenario, *args, **kwargs)

    monkeypatch.setattr(whatif_knobs, "run_scenario", counted)
    # The scenario's reader with a prefetch of 25, raised to the 100 the scenario has.
    scenario = with_knob(load_scenario("rabbitmq-memory-alarm"), prefetch(100, 25))
    raised, unchanged = run_knob_whatifs(scenario, [prefetch(25, 100), prefetch(25, 25)])
    assert len(runs) == 3  # as written once, then each change
    before, after = raised.before, raised.after
    assert before["consumer msgs received"] == after["consumer msgs received"] == 20_000
    assert before["consumer received by s"] == pytest.approx(0.8, rel=0.05)
    assert after["consumer received by s"] == pytest.approx(0.2, rel=0.05)
    assert raised.validated
    assert unchanged.before == raised.before
    assert unchanged.failures() == ["messages received neither more nor sooner"]


def test_a_length_limit_the_replay_never_reaches_is_not_exercised() -> None:
    """rabbitmq-one-sender-one-receiver's quorum queue blocks its 0.9.1 connection for 0.98 s
    while it grows to 15,000 in a 1 s run: x-max-length 8,000 acts (blocked 0.53 s, validated);
    15,300 (a second of its intake) is never reached in the run, so it can show nothing either
    way: not exercised, neither validated nor failed."""
    from flowctl_core.whatif_knobs import KnobChange, format_knob_comparison, run_knob_whatifs

    scenario = load_scenario("rabbitmq-one-sender-one-receiver")

    def limit(value: int) -> KnobChange:
        return KnobChange(
            "rabbitmq", "quorum-queue-amqp-091", "x-max-length", None, value, "at_risk", "t"
        )

    acting, beyond = run_knob_whatifs(scenario, [limit(8_000), limit(15_300)])
    assert acting.after["connection blocked s"] < acting.before["connection blocked s"]
    assert acting.unexercised() is None and acting.validated
    # What it was validated on, and the publishes it refuses: what a length limit is for.
    refused = acting.after["rejected msgs"] - acting.before["rejected msgs"]
    assert refused > 0
    assert format_knob_comparison(acting).endswith(
        "  validated: peak depth within the limit, its connection blocked less; it refuses "
        f"{refused:,} more publishes at the limit (reject-publish), the backlog it keeps from "
        "growing"
    )
    assert beyond.before["peak depth msgs"] == beyond.after["peak depth msgs"] == 15_000
    assert beyond.failures() == [] and not beyond.validated
    reason = beyond.unexercised()
    assert reason is not None and "peak of 15,000 stays under 15,300" in reason
    assert format_knob_comparison(beyond).endswith(f"  not exercised: {reason}")
    # The classic queue on the same connection never blocked it (the quorum one did): said of
    # the queue, not "no connection blocked" beside a connection blocked 0.85 s (a review).
    classic = KnobChange(
        "rabbitmq", "classic-queue-amqp-091", "x-max-length", None, 8_000, "at_risk", "t"
    )
    (limited,) = run_knob_whatifs(scenario, [classic])
    assert limited.before["connection blocked s"] == 0
    assert "peak depth within the limit, it blocked no connection; " in (
        format_knob_comparison(limited)
    )


def test_a_length_limit_under_a_prefill_refuses_no_publish_of_the_run() -> None:
    """The classic queue holds 150,000 written before the run: x-max-length 100,000 replayed from
    the start refuses 50,000 of them, which no publisher of the run sent. They stay among the
    messages refused (a sweep ranks loss first) and are counted apart, and the text says whose
    they were (an audit read them as "it refuses 50,000 more publishes")."""
    from flowctl_core.whatif_knobs import KnobChange, format_knob_comparison, run_knob_whatifs

    scenario = load_scenario("rabbitmq-one-sender-one-receiver")
    change = KnobChange(
        "rabbitmq", "classic-queue-amqp-091", "x-max-length", None, 100_000, "at_risk", "t"
    )
    (comparison,) = run_knob_whatifs(scenario, [change])
    print(format_knob_comparison(comparison))
    assert (
        comparison.before["prefill refused msgs"],
        comparison.after["prefill refused msgs"],
    ) == (
        0,
        50_000,
    )
    assert (comparison.before["rejected msgs"], comparison.after["rejected msgs"]) == (0, 50_000)
    assert format_knob_comparison(comparison).endswith(
        "; it refuses 50,000 more messages at the limit (reject-publish), the backlog it keeps "
        "from growing (publishes of the run 0 -> 0, the prefill written before it 0 -> 50,000)"
    )


def test_a_limit_taken_away_is_exercised_though_the_new_one_is_not_reached() -> None:
    """x-max-length 8,000 as written, reached (the queue held at it), raised to 16,000 that the
    re-run never reaches: the change acted (it took the limit away), so it is judged."""
    from flowctl_core.whatif_knobs import KnobChange, KnobComparison

    change = KnobChange("rabbitmq", "q", "x-max-length", 8_000, 16_000, "raise", "t")
    before = {"peak depth msgs": 8_000, "rejected msgs": 29_891, "connection blocked s": 0.45}
    after = {"peak depth msgs": 15_200, "rejected msgs": 0, "connection blocked s": 0.85}
    comparison = KnobComparison(change, before, after)
    assert comparison.unexercised() is None
    assert comparison.failures() == ["connection blocked no less"]
    never = KnobComparison(change, {**before, "peak depth msgs": 7_000}, after)
    assert never.unexercised() is not None and never.failures() == []


def test_figures_print_as_their_changes_do() -> None:
    # "peak address bytes: 1389088 -> 1112944 (-276,144)", "1.7414 -> 0.867579 (-0.874)": the
    # change was separated and rounded, the figures not (a README walk-through).
    from flowctl_core.whatif import change_text, figure_text

    assert [figure_text(1_389_088), figure_text(1.7414), figure_text(0.867579)] == [
        "1,389,088",
        "1.741",
        "0.868",
    ]
    assert [figure_text(182.0), figure_text("4/3 msgs"), figure_text(True)] == [
        "182",
        "4/3 msgs",
        "True",
    ]
    assert change_text(1_389_088, 1_112_944) == "-276,144"


def test_a_raised_max_size_takes_a_reject_threshold_it_reaches_along() -> None:
    """Artemis takes no reject threshold at or below max-size-bytes: the what-if of a raised
    limit moves such a threshold up by its gap above the old limit (the advice says so), and
    leaves one above the new limit, or none (-1), as it is; the engine then runs the scenario."""
    from flowctl_core.whatif_knobs import KnobChange, with_knob
    from tests.scenario_gold import with_first_artemis_address

    base = load_scenario("artemis-address-full-policies")
    address = base.artemis.addresses[0]
    limit = address.max_size_bytes

    def applied(threshold: int, raised_to: int) -> tuple[int, int]:
        scenario = with_first_artemis_address(base, max_size_bytes_reject_threshold=threshold)
        change = KnobChange(
            "artemis", address.name, "max-size-bytes", limit, raised_to, "raise", "r"
        )
        changed = with_knob(scenario, change)
        run_scenario(changed, [EventCollector()])  # the engine takes the changed settings
        spec = changed.artemis.addresses[0]
        return spec.max_size_bytes, spec.max_size_bytes_reject_threshold

    assert applied(limit + 1000, limit * 2) == (limit * 2, limit * 2 + 1000)
    assert applied(limit * 3, limit * 2) == (limit * 2, limit * 3)
    assert applied(-1, limit * 2) == (limit * 2, -1)


def test_the_evidence_and_the_verdict_read_time_stopped_alike() -> None:
    """A review: 80.0001 s before and 80.0004 s after failed a lowering on "more time stopped"
    beside "time stopped 80 s either way". Both now read it to the millisecond, as the table
    prints it; and a failed aim still shows the figure it is decided on (episodes 5 either
    way)."""
    scenario = load_scenario("qpid-165-worst-case")
    lowered = run_whatif(scenario, {"payments": FlowThresholds(60, 40)}).queue("payments")
    nudged = QueueComparison(
        "payments",
        dataclasses.replace(lowered.before, time_stopped_s=80.0001),
        dataclasses.replace(lowered.after, time_stopped_s=80.0004),
    )
    assert nudged.validated and nudged.evidence().startswith(
        "peak depth msgs 165 -> 125, time stopped 80 s either way"
    )
    flapping = run_whatif(scenario, {"payments": FlowThresholds(100, 95)})
    assert queue_verdicts(flapping) == [
        (
            "payments",
            "NOT validated to stop less often: episodes not cut (episodes 5 either way)",
            True,
        )
    ]

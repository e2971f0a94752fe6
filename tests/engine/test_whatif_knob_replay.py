"""The what-if replays a link-credit row as the row prescribes it (flowctl_core/whatif_knobs.py):
from the start, whatever credit changes the scenario makes later, and topped up at half where
the advice says so (an audit found both replayed otherwise)."""

from __future__ import annotations

from typing import Any

import yaml

from flowctl_core.scenario import Scenario, parse_scenario
from flowctl_core.whatif_knobs import (
    current_knob_value,
    format_knob_comparison,
    knob_applies,
    knob_changes_from_recommendations,
    run_knob_whatif,
    with_knob,
)
from schemas.recommendations import KNOB_LINK_CREDIT, TOP_UP_AT_HALF_ADVICE


def _scenario(consumer: str, publisher: str = "publishers: [{name: w, queue: q}]") -> Scenario:
    text = f"""
name: credit-replay
kind: workload
duration_s: 1
broker: {{name: rabbit}}
queues: [{{name: q, prefill: {{count: 5000, size: 256}}}}]
connections:
  - name: c
    protocol: amqp-1.0
    latency_us: 2000
    {publisher}
    consumers: [{consumer}]
"""
    return parse_scenario(yaml.safe_load(text), "credit-replay")


def _row(current: int, value: int, rationale: str) -> dict[str, Any]:
    return {
        "entity": "r", "knob": KNOB_LINK_CREDIT, "current_value": current,
        "recommended_value": value, "broker_kind": "rabbitmq", "verdict": "raise",
        "rule": "starved for want of credit", "rationale": rationale,
    }  # fmt: skip


def _consumer(scenario: Scenario) -> Any:
    return scenario.connections[0].consumers[0]


def test_a_refill_at_empty_row_is_replayed_topped_up_at_half() -> None:
    """The row for a receiver that refilled only at empty sizes its credit as if it topped up at
    half and says to: the replay grants 11 and tops up below 6, not below 2 (the old share of 1
    in 5), which would replay the configuration the advice tells the operator to leave."""
    scenario = _scenario("{name: r, queue: q, credit: 5, top_up_below: 1}")
    advice = f"raise: starved ...; = 11 credits: {TOP_UP_AT_HALF_ADVICE}"
    (half,) = knob_changes_from_recommendations([_row(5, 11, advice)])
    (share,) = knob_changes_from_recommendations([_row(5, 11, "raise: starved ...")])
    assert (half.top_up_at_half, share.top_up_at_half) == (True, False)
    replayed = _consumer(with_knob(scenario, half))
    assert (replayed.credit, replayed.top_up_below) == (11, 6)
    assert (_consumer(with_knob(scenario, share)).top_up_below) == 2
    comparison = run_knob_whatif(scenario, half)
    first_line = format_knob_comparison(comparison).splitlines()[0]
    assert first_line.startswith("r (rabbitmq): link credit 5 -> 11, topped up at half (below 6)")


def test_a_credit_row_replaces_the_scenarios_later_credit_changes() -> None:
    """Credit 50 at the attach, 5 from 0.1 s on: the credit in force is 5 (the log's last grants
    say so, and so does the recommender), and a row 5 -> 50 is a change to replay from the start,
    the scheduled change dropped (it was dropped as 'already 50', or replayed for 0.1 s)."""
    scenario = _scenario(
        "{name: r, queue: q, credit: 50, top_up_below: 25, credit_changes: [{after_s: 0.1, "
        "credit: 5}]}"
    )
    assert current_knob_value(scenario, KNOB_LINK_CREDIT, "r") == 5
    (change,) = knob_changes_from_recommendations([_row(5, 50, "raise: starved")])
    assert knob_applies(scenario, change)
    replayed = _consumer(with_knob(scenario, change))
    assert (replayed.credit, replayed.top_up_below, replayed.credit_changes) == (50, 25, [])


def test_a_lowered_credit_that_slows_the_consumer_is_not_validated() -> None:
    """200 -> 10 on a 2 ms link, a backlog of 5000 and no publisher: every message still arrives,
    but later; the old check (no fewer received) validated it (an audit saw it 3.7x later)."""
    scenario = _scenario("{name: r, queue: q, credit: 200, top_up_below: 100}", "")
    (change,) = knob_changes_from_recommendations(
        [{**_row(200, 10, "lower: never starved"), "verdict": "lower", "rule": "over-provisioned"}]
    )
    comparison = run_knob_whatif(scenario, change)
    before, after = comparison.before, comparison.after
    assert after["consumer received by s"] > before["consumer received by s"] * 1.01, (
        before,
        after,
    )
    assert "received later" in comparison.failures()


def test_a_raised_consumer_window_must_move_the_queue() -> None:
    """A raise of consumerWindowSize is for a consumer starved for credit: validated only when
    the queue's messages are processed more or sooner. 100 KiB -> 200 KiB on the fast consumer
    of seed 003's case changes nothing and was validated by "no fewer" (an audit); 0 -> 1 byte
    halves the time the queue takes."""
    from flowctl_core.scenario import load_scenario
    from flowctl_core.whatif_knobs import KnobChange

    scenario = load_scenario("artemis-slow-fast-consumers")
    still = run_knob_whatif(
        scenario,
        KnobChange("artemis", "fast-100k", "consumerWindowSize", 102_400, 204_800, "raise", "r"),
    )
    assert still.before == still.after
    assert still.failures() == ["the queue's messages processed neither more nor sooner"]
    sooner = run_knob_whatif(
        scenario, KnobChange("artemis", "fast-no-buffer", "consumerWindowSize", 0, 1, "raise", "r")
    )
    assert sooner.after["queue processed by s"] < sooner.before["queue processed by s"]
    assert sooner.failures() == []


def test_every_knob_the_whatif_applies_has_its_checks_and_a_reader() -> None:
    """KNOB_CHECKS and KNOB_METRICS replaced if-ladders whose last branch took any knob for
    x-max-length (reviews): the tables name the same knobs, and a knob without checks or
    metrics is an error."""
    import pytest

    from flowctl_core.whatif_knobs import (
        KNOB_APPLIERS,
        KNOB_CHECKS,
        KNOB_METRICS,
        KNOB_READERS,
        knob_checks,
        knob_metrics,
    )

    assert set(KNOB_CHECKS) == set(KNOB_APPLIERS) == set(KNOB_READERS) == set(KNOB_METRICS)

    class Unknown:
        knob = "no-such-knob"

    class Comparison:
        change = Unknown()

    with pytest.raises(KeyError, match="no what-if checks for knob 'no-such-knob'"):
        knob_checks(Comparison())  # type: ignore[arg-type]
    # Raised before the run is read: none is needed to refuse the knob.
    with pytest.raises(KeyError, match="no what-if metrics for knob 'no-such-knob'"):
        knob_metrics(Unknown(), None)  # type: ignore[arg-type]

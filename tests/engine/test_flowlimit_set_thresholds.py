"""A run-time threshold change that gives only some thresholds keeps the others.

Seed 000: "Goal: queue watermarks should be configurable, and allow run-time modification";
DESIGN.md §2: "Thresholds can be changed at run time."

A change is a modification of the thresholds in force, not a new declaration: a ``set_thresholds``
step that gives only ``flow_stop_count`` used to set the three others to 0, silently switching
off, for example, the byte thresholds the queue had from the broker's default ratios. Now every
threshold a step leaves out keeps the queue's value in force, and the merged thresholds are
checked the way a declaration's are (seed 001: "The value for a queue's Flow Stop Threshold must
be greater than or equal to the value of the queue's Flow Resume Threshold").
"""

from __future__ import annotations

from typing import Any

import pytest

from flowctl_core import FlowConfigError, FlowThresholds
from flowctl_core.flowlimit import ThresholdChange
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import ScenarioError, SetThresholdsStep, parse_scenario
from tests.engine.helpers import Rig

# Broker defaults 80 % / 70 % of max 1000 messages and 100 000 bytes (seed 001 §1.2).
LIMITS = {"qpid.max_count": 1000, "qpid.max_size": 100_000}
DEFAULTS = FlowThresholds(800, 700, 80_000, 70_000)


def scripted(*changes: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"send": {"producer": "p", "count": 1}}]
    steps += [{"set_thresholds": {"queue": "orders", **change}} for change in changes]
    return {
        "name": "change",
        "kind": "scripted",
        "queues": [{"name": "orders", "arguments": LIMITS}],
        "producers": [{"name": "p", "routing_key": "orders"}],
        "steps": steps,
    }


def thresholds_after(*changes: dict[str, Any]) -> FlowThresholds:
    result = run_scenario(parse_scenario(scripted(*changes)))
    thresholds: FlowThresholds = result.broker.queues["orders"].flow.thresholds
    return thresholds


def rejected(*changes: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(scripted(*changes), "conf/x.yaml")
    return str(raised.value)


# -- scenario steps -----------------------------------------------------------------------------
def test_a_step_giving_only_the_stop_count_keeps_the_default_byte_thresholds() -> None:
    assert thresholds_after({"flow_stop_count": 900}) == FlowThresholds(900, 700, 80_000, 70_000)


def test_each_field_alone_changes_only_itself() -> None:
    assert thresholds_after({"flow_resume_count": 500}) == FlowThresholds(800, 500, 80_000, 70_000)
    assert thresholds_after({"flow_stop_size": 90_000}) == FlowThresholds(800, 700, 90_000, 70_000)
    assert thresholds_after({"flow_resume_size": 1}) == FlowThresholds(800, 700, 80_000, 1)


def test_an_explicit_zero_still_switches_a_threshold_off() -> None:
    # Seed 001: "disable flow control on a per queue basis by setting the flow-stop-size and
    # flow-stop-count to zero".
    off = thresholds_after({"flow_stop_size": 0, "flow_resume_size": 0})
    assert off == FlowThresholds(800, 700, 0, 0)
    both_off = thresholds_after({k: 0 for k in ("flow_stop_count", "flow_resume_count")})
    assert both_off == FlowThresholds(0, 0, 80_000, 70_000)


def test_later_steps_build_on_earlier_ones_in_validation_and_in_the_run() -> None:
    # Step 2 is valid only because step 1 lowered the resume count below its stop of 200.
    changes = ({"flow_resume_count": 100}, {"flow_stop_count": 200})
    assert thresholds_after(*changes) == FlowThresholds(200, 100, 80_000, 70_000)


def test_merged_thresholds_are_checked_and_the_kept_values_are_named() -> None:
    # Stop 600 under the kept default resume of 700 breaks "stop >= resume".
    message = rejected({"flow_stop_count": 600})
    assert (
        "steps.1.set_thresholds: queue 'orders': flow_resume_count (700) must not exceed "
        "flow_stop_count (600); not given, so kept at the queue's current values: "
        "flow_resume_count=700, flow_stop_size=80000, flow_resume_size=70000"
    ) in message
    assert thresholds_after({"flow_stop_count": 600, "flow_resume_count": 500}) == FlowThresholds(
        600, 500, 80_000, 70_000
    )


def test_merged_stop_above_the_queue_limit_is_refused() -> None:
    message = rejected({"flow_stop_size": 100_001})
    assert "steps.1.set_thresholds: queue 'orders': flow_stop_size (100001) exceeds max_size" in (
        message
    )


def test_a_step_needs_at_least_one_threshold() -> None:
    message = rejected({})
    assert "steps.1.set_thresholds: a set_thresholds step needs at least one of" in message


def test_the_step_model_documents_the_field_semantics() -> None:
    doc = SetThresholdsStep.__doc__ or ""
    assert "keeps" in doc and "at least one" in doc and "0" in doc


# -- engine ---------------------------------------------------------------------------------------
def test_engine_change_keeps_what_it_does_not_give() -> None:
    rig = Rig()
    queue = rig.queue("q", LIMITS)
    assert queue.flow.thresholds == DEFAULTS
    rig.broker.set_thresholds("q", ThresholdChange(stop_size=95_000))
    assert queue.flow.thresholds == FlowThresholds(800, 700, 95_000, 70_000)
    changed = rig.events("thresholds_changed")[-1]
    assert (changed["flow_stop_size"], changed["flow_resume_size"]) == (95_000, 70_000)
    # A full FlowThresholds still replaces all four, as before.
    rig.broker.set_thresholds("q", FlowThresholds(stop_count=10))
    assert queue.flow.thresholds == FlowThresholds(10, 10, 0, 0)


def test_engine_refuses_a_bad_merge_and_leaves_the_queue_as_it_was() -> None:
    rig = Rig()
    queue = rig.queue("q", LIMITS)
    with pytest.raises(FlowConfigError, match=r"kept at the queue's current values"):
        rig.broker.set_thresholds("q", ThresholdChange(stop_count=600))
    assert queue.flow.thresholds == DEFAULTS
    assert not rig.events("thresholds_changed")


def test_an_empty_change_is_refused() -> None:
    with pytest.raises(FlowConfigError, match="at least one"):
        ThresholdChange()

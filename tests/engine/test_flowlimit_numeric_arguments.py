"""Numeric ``qpid.*`` declare arguments are integers, in the engine and in scenario files alike.

Seed 001 §1.2: "| qpid.flow\\_stop\\_count | integer - queue's flow stop threshold value as a
message count |" (and likewise for qpid.flow_resume_count, qpid.flow_stop_size and
qpid.flow_resume_size); DESIGN.md §2: "Declare arguments accept the Qpid keys
`qpid.flow_stop_count`, `qpid.flow_resume_count`, `qpid.flow_stop_size`, `qpid.flow_resume_size`,
`qpid.max_count`, `qpid.max_size`, `qpid.policy_type`."

A boolean is not an integer, even though Python's ``int(True)`` is 1: ``qpid.flow_stop_count: true``
used to become a stop threshold of 1 message. Every numeric argument takes a non-negative integer
or a string of decimal digits (as ``qpid-config`` passes them) and refuses everything else with an
error that names the queue and the argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowctl_core import FlowConfigError
from flowctl_core.broker import MAX_COUNT_KEY, MAX_SIZE_KEY
from flowctl_core.flowlimit import FLOW_KEYS, FlowThresholds
from flowctl_core.scenario import ScenarioError, load_scenario, parse_scenario
from tests.engine.helpers import NO_DEFAULTS, Rig

NUMERIC_KEYS = (MAX_COUNT_KEY, MAX_SIZE_KEY, *FLOW_KEYS)
NOT_INTEGERS: list[object] = [True, False, 100.0, 100.5, "1e3", "-5", "", "ten", None, {"n": 1}]


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_engine_refuses_a_value_that_is_not_an_integer(key: str, value: object) -> None:
    rig = Rig(NO_DEFAULTS)
    with pytest.raises(FlowConfigError) as raised:
        rig.queue("orders", {key: value})
    assert str(raised.value) == (
        f"queue 'orders': {key} must be a non-negative integer, got {value!r}"
    )
    assert not rig.broker.queues and not rig.events()  # nothing declared, nothing logged


@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_engine_refuses_a_negative_integer(key: str) -> None:
    with pytest.raises(FlowConfigError, match=f"queue 'orders': {key} must be a non-negative"):
        Rig(NO_DEFAULTS).queue("orders", {key: -1})


def test_engine_accepts_integers_and_digit_strings_for_every_key() -> None:
    arguments = {
        MAX_COUNT_KEY: "1000",
        MAX_SIZE_KEY: 10_000,
        "qpid.flow_stop_count": 900,
        "qpid.flow_resume_count": " 500 ",
        "qpid.flow_stop_size": "9000",
        "qpid.flow_resume_size": 7500,
    }
    queue = Rig(NO_DEFAULTS).queue("orders", arguments)
    assert (queue.max_count, queue.max_size) == (1000, 10_000)
    assert queue.flow.thresholds == FlowThresholds(900, 500, 9000, 7500)


# -- scenario files -----------------------------------------------------------------------------
def _workload(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "x",
        "kind": "workload",
        "duration_s": 1,
        "queues": [{"name": "audit"}, {"name": "orders", "arguments": arguments}],
    }


def _rejected(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(data, "conf/x.yaml")
    return str(raised.value)


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@pytest.mark.parametrize("value", [True, False, 100.0, 100.5, "1e3", "-5", "{x}"], ids=repr)
def test_scenario_refuses_what_the_engine_refuses_and_names_the_field(
    key: str, value: object
) -> None:
    # Pydantic's lax int would turn true into 1 and 100.0 into 100 before the engine saw them.
    message = _rejected(_workload({key: value}))
    assert (
        f"queues.1.arguments: queue 'orders': {key} must be a non-negative integer, got {value!r}"
    ) in message


def test_a_declare_step_argument_names_the_step() -> None:
    data = {
        "name": "x",
        "kind": "scripted",
        "producers": [{"name": "p", "routing_key": "later"}],
        "steps": [
            {"declare": {"queue": "later", "arguments": {"qpid.flow_stop_size": True}}},
            {"send": {"producer": "p", "count": 1}},
        ],
    }
    message = _rejected(data)
    assert (
        "steps.0.declare.arguments: queue 'later': qpid.flow_stop_size must be a "
        "non-negative integer, got True"
    ) in message


def test_a_yaml_true_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bool.yaml"
    path.write_text(
        "name: bool\nkind: workload\nduration_s: 1\n"
        "queues:\n  - name: orders\n    arguments: {qpid.flow_stop_count: true}\n",
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError, match=r"qpid.flow_stop_count must be a non-negative integer"):
        load_scenario(path)


def test_scenario_accepts_integers_and_digit_strings() -> None:
    arguments = {
        MAX_COUNT_KEY: "1000",
        "qpid.flow_stop_count": 900,
        "qpid.flow_resume_count": "500",
    }
    scenario = parse_scenario(_workload(arguments))
    assert scenario.queues[1].arguments == arguments


@pytest.mark.parametrize("value", [True, 100.0, "100"], ids=repr)
def test_a_set_thresholds_step_takes_integers_only(value: object) -> None:
    data = {
        "name": "x",
        "kind": "scripted",
        "queues": [{"name": "orders"}],
        "producers": [{"name": "p", "routing_key": "orders"}],
        "steps": [
            {"set_thresholds": {"queue": "orders", "flow_stop_count": value}},
            {"send": {"producer": "p", "count": 1}},
        ],
    }
    message = _rejected(data)
    assert "steps.0.set_thresholds.flow_stop_count: Input should be a valid integer" in message

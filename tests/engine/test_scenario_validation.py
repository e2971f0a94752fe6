"""Scenario validation: a routing key that reaches no queue is a scenario error, unless the
producer opts in with ``allow_unroutable: true`` (the engine still drops such messages); an
unknown ``qpid.*`` declare argument and thresholds the engine would refuse are errors that name
the field."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

import flowctl_core
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import (
    QPID_ARGUMENTS,
    BrokerSpec,
    Scenario,
    ScenarioError,
    bundled_scenarios,
    load_scenario,
)
from flowctl_core.scenario import parse_scenario as _parse


def parse_scenario(data: dict[str, Any]) -> Scenario:
    return _parse(data, "conf/x.yaml")


def workload(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "routes",
        "kind": "workload",
        "duration_s": 1,
        "queues": [{"name": "orders"}, {"name": "audit"}],
    }
    return base | fields


def scripted(*steps: dict[str, Any], **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "routes",
        "kind": "scripted",
        "queues": [{"name": "orders"}],
        "producers": [{"name": "p", "routing_key": "orders"}],
        "steps": list(steps),
    }
    return base | fields


def producer(**fields: Any) -> dict[str, Any]:
    return {"name": "p", "rate": 10} | fields


def rejected(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(data)
    return str(raised.value)


# -- routable keys pass -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exchange", "key"),
    [
        ({"type": "direct", "bindings": [{"queue": "orders", "key": "order.new"}]}, "order.new"),
        ({"type": "fanout", "bindings": [{"queue": "audit"}]}, "anything at all"),
        ({"type": "fanout", "bindings": [{"queue": "audit", "key": "ignored"}]}, ""),
        ({"type": "topic", "bindings": [{"queue": "orders", "key": "order.*"}]}, "order.new"),
        ({"type": "topic", "bindings": [{"queue": "orders", "key": "order.#"}]}, "order"),
        ({"type": "topic", "bindings": [{"queue": "orders", "key": "order.#"}]}, "order.eu.new"),
        ({"type": "topic", "bindings": [{"queue": "orders", "key": "#"}]}, ""),
        ({"type": "topic", "bindings": [{"queue": "orders", "key": "*.new"}]}, "order.new"),
    ],
)
def test_keys_that_reach_a_queue_pass(exchange: dict[str, Any], key: str) -> None:
    parse_scenario(
        workload(
            exchanges=[{"name": "x", **exchange}],
            producers=[producer(exchange="x", routing_key=key)],
        )
    )


def test_default_exchange_routes_a_queue_name() -> None:
    parse_scenario(workload(producers=[producer(routing_key="audit")]))


def test_a_queue_declared_by_a_later_step_makes_the_key_routable() -> None:
    scenario = parse_scenario(
        scripted(
            {"send": {"producer": "p", "count": 1, "routing_key": "later"}},
            {"declare": {"queue": "later"}},
            {"send": {"producer": "p", "count": 2, "routing_key": "later"}},
        )
    )
    assert len(scenario.steps) == 3


def test_a_queue_of_an_artemis_address_is_routable_on_the_default_exchange() -> None:
    parse_scenario(
        workload(
            queues=[],
            artemis={"addresses": [{"name": "addr", "queues": ["addr-q"]}]},
            producers=[producer(routing_key="addr-q")],
        )
    )


def test_a_scripted_producers_own_key_is_not_checked_when_every_send_gives_one() -> None:
    parse_scenario(
        scripted(
            {"send": {"producer": "p", "count": 1, "routing_key": "orders"}},
            producers=[{"name": "p"}],  # key "" would reach no queue, but no step uses it
        )
    )


def test_allow_unroutable_accepts_the_key_and_the_engine_drops_the_messages() -> None:
    scenario = parse_scenario(
        scripted(
            {"send": {"producer": "p", "count": 3}},
            {"send": {"producer": "p", "count": 2, "routing_key": "nowhere"}},
            producers=[{"name": "p", "routing_key": "orderz", "allow_unroutable": True}],
        )
    )
    result = run_scenario(scenario)
    assert result.producers["p"].sent == 5
    assert result.broker.queues["orders"].depth_msgs == 0


def test_bundled_scenarios_still_load() -> None:
    paths = bundled_scenarios()
    assert paths
    for path in paths:
        load_scenario(path)


def test_bundled_scenarios_each_name_their_own_broker() -> None:
    # The pipeline's recommendations and the dashboard group by (broker, queue): scenarios that
    # shared the default broker name merged their "orders" queues.
    brokers = {path.stem: load_scenario(path).broker.name for path in bundled_scenarios()}
    assert BrokerSpec().name not in brokers.values()
    assert len(set(brokers.values())) == len(brokers), brokers


# -- keys that reach no queue are rejected ------------------------------------------------------


def test_typo_on_the_default_exchange_names_producer_key_and_queues() -> None:
    message = rejected(workload(producers=[producer(name="loader", routing_key="ordres")]))
    assert "conf/x.yaml" in message
    assert "producers.0.routing_key" in message
    assert "'loader'" in message and "'ordres'" in message
    assert "default exchange" in message
    assert "'orders', 'audit'" in message
    assert "allow_unroutable" in message


def test_a_workload_producer_without_a_key_is_rejected() -> None:
    message = rejected(workload(producers=[producer(), producer(name="q2", routing_key="audit")]))
    assert "producers.0.routing_key" in message and "routing_key ''" in message


def test_direct_exchange_names_its_bindings() -> None:
    message = rejected(
        workload(
            exchanges=[
                {
                    "name": "shop",
                    "type": "direct",
                    "bindings": [
                        {"queue": "orders", "key": "order.new"},
                        {"queue": "audit", "key": "order.paid"},
                    ],
                }
            ],
            producers=[producer(exchange="shop", routing_key="order.created")],
        )
    )
    assert "producers.0.routing_key" in message and "'order.created'" in message
    assert "exchange 'shop' (direct)" in message
    assert "key 'order.new' -> queue 'orders'" in message
    assert "key 'order.paid' -> queue 'audit'" in message


@pytest.mark.parametrize("key", ["order", "order.eu.new", "orders.new", ""])
def test_topic_star_matches_exactly_one_word(key: str) -> None:
    message = rejected(
        workload(
            exchanges=[
                {"name": "t", "type": "topic", "bindings": [{"queue": "orders", "key": "order.*"}]}
            ],
            producers=[producer(exchange="t", routing_key=key)],
        )
    )
    assert "producers.0.routing_key" in message and f"routing_key {key!r}" in message
    assert "exchange 't' (topic)" in message and "key 'order.*' -> queue 'orders'" in message
    assert "* matches one word" in message


def test_fanout_without_bindings_is_rejected() -> None:
    message = rejected(
        workload(
            exchanges=[{"name": "fan", "type": "fanout"}],
            producers=[producer(exchange="fan")],
        )
    )
    assert "producers.0.routing_key" in message
    assert "exchange 'fan' (fanout)" in message and "it has no bindings" in message


def test_a_send_steps_own_key_is_checked_and_named_by_step_index() -> None:
    message = rejected(
        scripted(
            {"send": {"producer": "p", "count": 1}},
            {"advance": {"seconds": 1}},
            {"send": {"producer": "p", "count": 1, "routing_key": "ordesr"}},
        )
    )
    assert "steps.2.send.routing_key" in message
    assert "'p'" in message and "'ordesr'" in message and "'orders'" in message


def test_a_scripted_producers_own_key_is_checked_when_a_send_step_uses_it() -> None:
    message = rejected(scripted({"send": {"producer": "p", "count": 1}}, producers=[{"name": "p"}]))
    assert "producers.0.routing_key" in message and "'p'" in message


def test_a_queue_declared_later_does_not_excuse_a_different_key() -> None:
    message = rejected(
        scripted(
            {"declare": {"queue": "later"}},
            {"send": {"producer": "p", "count": 1, "routing_key": "latre"}},
        )
    )
    assert "steps.1.send.routing_key" in message and "'later'" in message


def test_allow_unroutable_is_per_producer() -> None:
    message = rejected(
        workload(
            producers=[
                producer(name="tolerant", routing_key="nowhere", allow_unroutable=True),
                producer(name="strict", routing_key="nowhere"),
            ]
        )
    )
    assert "producers.1.routing_key" in message and "'strict'" in message


def test_a_binding_to_a_queue_declared_only_by_a_later_step_is_rejected() -> None:
    # Bindings are made when the run starts; the engine would fail with "no queue named 'later'".
    exchange = {"name": "fan", "type": "fanout", "bindings": [{"queue": "later"}]}
    message = rejected(
        scripted(
            {"declare": {"queue": "later"}},
            {"send": {"producer": "p", "count": 1}},
            exchanges=[exchange],
            producers=[{"name": "p", "exchange": "fan"}],
        )
    )
    assert (
        "exchange 'fan' binds queue 'later'" in message and "list the queue under queues" in message
    )


# -- declare arguments ----------------------------------------------------------------------------


def test_known_qpid_arguments_are_the_ones_the_engine_reads() -> None:
    # Every "qpid.*" string literal in the engine is a key it reads or writes: one list, no drift.
    root = Path(flowctl_core.__file__).parent
    literals = {
        node.value
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("qpid.")
        and " " not in node.value
        and node.value[-1] not in "._"  # prefixes such as "qpid.flow_"
    }
    assert literals <= set(QPID_ARGUMENTS)
    assert len(QPID_ARGUMENTS) == len(set(QPID_ARGUMENTS)) == 7


def test_a_misspelt_queue_argument_is_rejected_with_its_path_and_a_suggestion() -> None:
    arguments = {"qpid.max_count": 10, "qpid.flow_stop_cnt": 3}
    message = rejected(
        workload(queues=[{"name": "orders"}, {"name": "audit", "arguments": arguments}])
    )
    assert "conf/x.yaml" in message
    assert "queues.1.arguments" in message
    assert "'qpid.flow_stop_cnt'" in message
    assert "did you mean 'qpid.flow_stop_count'?" in message


def test_a_misspelt_declare_step_argument_is_rejected_with_its_path() -> None:
    message = rejected(
        scripted(
            {"declare": {"queue": "later", "arguments": {"qpid.polcy_type": "ring"}}},
            {"send": {"producer": "p", "count": 1}},
        )
    )
    assert "steps.0.declare.arguments" in message
    assert "did you mean 'qpid.policy_type'?" in message


def test_an_unknown_qpid_argument_without_a_close_match_lists_the_known_ones() -> None:
    message = rejected(workload(queues=[{"name": "orders", "arguments": {"qpid.lvq_key": "k"}}]))
    assert "'qpid.lvq_key'" in message and "did you mean" not in message
    assert all(key in message for key in QPID_ARGUMENTS)


def test_arguments_outside_the_qpid_namespace_pass_through() -> None:
    # As on a real broker, arguments the engine does not read are accepted and ignored.
    arguments = {"x-queue-type": "quorum", "qpid.max_count": 100}
    scenario = parse_scenario(
        scripted(
            {"send": {"producer": "p", "count": 1}},
            queues=[{"name": "orders", "arguments": arguments}],
        )
    )
    assert run_scenario(scenario).broker.queues["orders"].max_count == 100


def test_a_stop_threshold_above_max_count_names_the_queue_field() -> None:
    arguments = {"qpid.max_count": 1000, "qpid.flow_stop_count": 1200}
    message = rejected(
        workload(queues=[{"name": "audit"}, {"name": "orders", "arguments": arguments}])
    )
    assert (
        "queues.1.arguments: queue 'orders': flow_stop_count (1200) exceeds max_count (1000)"
        in (message)
    )


def test_a_bad_argument_value_names_the_declare_step() -> None:
    message = rejected(
        scripted(
            {"declare": {"queue": "later", "arguments": {"qpid.max_size": "lots"}}},
            {"send": {"producer": "p", "count": 1}},
        )
    )
    assert "steps.0.declare.arguments: queue 'later': qpid.max_size must be" in message


def test_default_thresholds_are_checked_with_the_brokers_ratios() -> None:
    # The broker's default ratios, not the engine's, decide the thresholds: a stop ratio below
    # the resume ratio is a broker error.
    message = rejected(workload(broker={"default_flow_stop_ratio": 50}))
    assert "broker: default flow resume ratio (70" in message


def test_a_set_thresholds_step_above_max_count_names_the_step() -> None:
    message = rejected(
        scripted(
            {"send": {"producer": "p", "count": 1}},
            {"set_thresholds": {"queue": "orders", "flow_stop_count": 1200}},
            queues=[{"name": "orders", "arguments": {"qpid.max_count": 1000}}],
        )
    )
    assert "steps.1.set_thresholds: queue 'orders': flow_stop_count (1200) exceeds max_count" in (
        message
    )


def test_a_set_thresholds_step_with_resume_above_stop_names_the_step() -> None:
    message = rejected(
        scripted(
            {"declare": {"queue": "later"}},
            {"set_thresholds": {"queue": "later", "flow_stop_count": 5, "flow_resume_count": 9}},
            {"send": {"producer": "p", "count": 1}},
        )
    )
    assert "steps.1.set_thresholds: queue 'later': flow_resume_count (9) must not exceed" in message


def test_set_thresholds_before_the_declare_step_is_rejected() -> None:
    # The engine would fail at that step with "no queue named 'later'".
    message = rejected(
        scripted(
            {"set_thresholds": {"queue": "later", "flow_stop_count": 5}},
            {"declare": {"queue": "later"}},
            {"send": {"producer": "p", "count": 1}},
        )
    )
    assert (
        "steps.0.set_thresholds.queue: queue 'later' is declared only by a later declare step"
        in (message)
    )


def test_declaring_a_queue_twice_is_rejected() -> None:
    message = rejected(
        scripted({"declare": {"queue": "orders"}}, {"send": {"producer": "p", "count": 1}})
    )
    assert "steps.0.declare.queue: queue 'orders' is already declared" in message


def test_valid_thresholds_still_run() -> None:
    arguments = {"qpid.max_count": 1000, "qpid.flow_stop_count": 900, "qpid.flow_resume_count": 500}
    scenario = parse_scenario(
        scripted(
            {"send": {"producer": "p", "count": 3}},
            {"set_thresholds": {"queue": "orders", "flow_stop_count": 800}},
            queues=[{"name": "orders", "arguments": arguments}],
        )
    )
    result = run_scenario(scenario)
    assert result.broker.queues["orders"].flow.thresholds.stop_count == 800


# -- AMQP 1.0 uints ------------------------------------------------------------------------------

_UINT_MAX = 2**32 - 1
_AMQP10_CONSUMER = {"name": "w", "queue": "orders", "credit": 10, "top_up_below": 0}


def _amqp10(consumer: dict[str, Any] | None = None, **connection: Any) -> list[dict[str, Any]]:
    return [
        {"name": "c", "protocol": "amqp-1.0", "consumers": [consumer or _AMQP10_CONSUMER]}
        | connection
    ]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        (
            {"connections": _amqp10({**_AMQP10_CONSUMER, "credit_changes": [
                {"after_s": 0.001, "credit": 2**32}]})},
            "connections.0.consumers.0.credit_changes.0.credit",
        ),
        (
            {"connections": _amqp10(client_incoming_window=2**32)},
            "connections.0.client_incoming_window",
        ),
        (
            {"rabbitmq": {"max_incoming_window": 2**32}, "connections": _amqp10()},
            "rabbitmq.max_incoming_window",
        ),
        ({"rabbitmq": {"max_link_credit": 2**32}, "connections": _amqp10()},
         "rabbitmq.max_link_credit"),
        ({"rabbitmq": {"max_queue_credit": 2**32}, "connections": _amqp10()},
         "rabbitmq.max_queue_credit"),
    ],
)  # fmt: skip
def test_an_amqp10_uint_past_2_32_is_refused_at_load_naming_its_field(
    fields: dict[str, Any], path: str
) -> None:
    """Link-credit and the session windows are AMQP 1.0 uints: 2**32 passed validation and
    stopped the run midway on the engine's protocol check (an audit); it is refused at load, and
    the largest uint runs."""
    assert f"conf/x.yaml: {path}: Input should be less than or equal to {_UINT_MAX}" in rejected(
        workload(**fields)
    )


def test_the_largest_amqp10_uints_run() -> None:
    consumer = {**_AMQP10_CONSUMER, "credit_changes": [{"after_s": 0.001, "credit": _UINT_MAX}]}
    scenario = parse_scenario(
        workload(
            duration_s=0.01,
            rabbitmq={"max_incoming_window": _UINT_MAX, "max_link_credit": _UINT_MAX},
            connections=_amqp10(consumer, client_incoming_window=_UINT_MAX),
            queues=[{"name": "orders", "prefill": {"count": 10, "size": 100}}],
        )
    )
    consumer_end = run_scenario(scenario).connections["c"].consumers["w"]
    assert consumer_end.received == 10


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"duration_s": 10}, "duration_s"),
        ({"producers": [{"name": "p", "routing_key": "orders", "rate": 100}]}, "producers.0.rate"),
        (
            {"producers": [{"name": "p", "routing_key": "orders", "bursts": {"every_s": 1,
                                                                             "count": 5}}]},
            "producers.0.bursts",
        ),
        ({"producers": [{"name": "p", "routing_key": "orders", "stop_s": 1}]},
         "producers.0.stop_s"),
        ({"producers": [{"name": "p", "routing_key": "orders", "arrival": "poisson"}]},
         "producers.0.arrival"),
        ({"producers": [{"name": "p", "routing_key": "orders", "start_s": 1}]},
         "producers.0.start_s"),
        # Several: the first in a fixed order, whatever the hash seed (a review).
        ({"producers": [{"name": "p", "routing_key": "orders", "stop_s": 2, "bursts": {
            "every_s": 1, "count": 5}, "rate": 3}]}, "producers.0.rate"),
    ],
)  # fmt: skip
def test_a_workload_setting_in_a_scripted_scenario_is_refused(
    fields: dict[str, Any], path: str
) -> None:
    """A scripted run lasts as long as its advance steps and its producers send by send steps:
    a duration_s or a producer's rate, bursts or times were accepted and read by nothing (a
    rate producer sent no message; an audit)."""
    message = rejected(scripted({"send": {"producer": "p", "count": 1}}, **fields))
    assert f"conf/x.yaml: {path}: " in message and "use kind: workload" in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "got an empty document"),
        ("- a\n- b\n", "got a list"),
        ("42\n", "got a single value (int 42)"),
    ],
)
def test_a_file_that_is_no_mapping_says_what_it_holds(tmp_path: Path, text: str, said: str) -> None:
    """An empty scenario file said "got NoneType" (a review)."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    wanted = f"s.yaml: a scenario must be a YAML mapping, {said}"
    with pytest.raises(ScenarioError, match=re.escape(wanted)):
        load_scenario(path)


def test_a_folder_given_as_the_scenario_is_said_to_be_one(tmp_path: Path) -> None:
    """A folder was "no such scenario file or bundled scenario" (a review)."""
    with pytest.raises(ScenarioError, match="is a folder; give a scenario file"):
        load_scenario(tmp_path)

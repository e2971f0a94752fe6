"""Scenario validation: a routing key that reaches no queue is a scenario error, unless the
producer opts in with ``allow_unroutable: true`` (the engine still drops such messages)."""

from __future__ import annotations

from typing import Any

import pytest

from flowctl_core.runner import run_scenario
from flowctl_core.scenario import Scenario, ScenarioError, bundled_scenarios, load_scenario
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

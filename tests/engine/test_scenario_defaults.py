"""One home per default value: the scenario format's defaults are the engine's (DESIGN.md §2's
80 % / 70 %, RabbitMQ's 170 / 400 / 256 / 400 / 200, the consumer's 200 / 100 credit), so a
scenario that leaves a setting out runs exactly as the engine's config would."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flowctl_core.broker import BrokerConfig
from flowctl_core.flowlimit import FlowDefaults
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.scenario import (
    BrokerSpec,
    ConnectionSpec,
    LinkConsumerSpec,
    LinkPublisherSpec,
    RabbitPolicySpec,
)

#: A spec field whose default deliberately differs from its engine field, and why.
DIFFERENT_ON_PURPOSE = {
    # None: Qpid's 100 MiB for a Qpid queue, none for a RabbitMQ queue (Scenario.queue_arguments).
    (BrokerSpec, "default_queue_limit_bytes"),
    # The links: a list in YAML, a tuple in the engine; both empty.
    (ConnectionSpec, "publishers"),
    (ConnectionSpec, "consumers"),
    (LinkConsumerSpec, "credit_changes"),
}
RENAMED = {(LinkPublisherSpec, "size"): "size_bytes"}


def _engine_defaults(config: type) -> dict[str, Any]:
    return {
        f.name: f.default
        for f in dataclasses.fields(config)
        if f.default is not dataclasses.MISSING
    }


@pytest.mark.parametrize(
    "spec, config",
    [
        (BrokerSpec, BrokerConfig),
        (RabbitPolicySpec, RabbitPolicy),
        (LinkConsumerSpec, ConsumerConfig),
        (LinkPublisherSpec, PublisherConfig),
        (ConnectionSpec, ConnectionConfig),
    ],
)
def test_a_scenarios_defaults_are_the_engines(spec: Any, config: type) -> None:
    engine = _engine_defaults(config)
    compared = 0
    for name, field in spec.model_fields.items():
        engine_name = RENAMED.get((spec, name), name)
        if engine_name not in engine or (spec, name) in DIFFERENT_ON_PURPOSE:
            continue
        assert field.default == engine[engine_name], f"{spec.__name__}.{name}"
        compared += 1
    assert compared >= 3, f"{spec.__name__}: too few shared fields compared ({compared})"


def test_the_broker_and_the_flow_limits_share_the_default_ratios() -> None:
    assert (FlowDefaults().stop_ratio, FlowDefaults().resume_ratio) == (80, 70)
    assert BrokerConfig().flow_defaults == FlowDefaults()

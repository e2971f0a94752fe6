"""Session-scoped real brokers for the conformance suite (DESIGN.md §6, issue 18).

One ActiveMQ Artemis 2.40, one RabbitMQ 3.10 and one RabbitMQ 4.0 node for the whole session,
each a plain process on 127.0.0.1 with its state in a temporary folder, started when the first
test asks for it and stopped by PID at the end of the session whatever the tests did. A broker
or client library that is not installed, or a broker that does not start, skips its tests with a
reason naming it (``bash scripts/setup_brokers.sh`` installs everything) -- unless
``FLOWCTL_REAL_BROKERS`` is ``required``, as scripts/test.sh sets it once that script has
installed them: then it fails them, so that a broker that no longer starts cannot leave the
suite green with its tests skipped.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import TypeVar

import pytest

from conformance.brokers import ArtemisBroker, BrokerUnavailable, RabbitBroker
from conformance.cases import ARTEMIS_ADDRESSES, rabbitmq4_broker, rabbitmq_broker

BrokerT = TypeVar("BrokerT", ArtemisBroker, RabbitBroker)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realbroker: runs a real Artemis / RabbitMQ process (tests/realbrokers)"
    )


#: The environment variable, and its value, that make an unavailable broker a failure.
REQUIRED_ENV, REQUIRED = "FLOWCTL_REAL_BROKERS", "required"


def _unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail with it where the brokers are required."""
    if os.environ.get(REQUIRED_ENV) == REQUIRED:
        pytest.fail(f"{reason} ({REQUIRED_ENV}={REQUIRED})", pytrace=False)
    pytest.skip(reason)


def _need_module(module: str, package: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        _unavailable(f"{package} is not installed in .venv: run `bash scripts/setup_brokers.sh`")


def _running(broker: BrokerT, name: str) -> Iterator[BrokerT]:
    """``broker`` started for the session and stopped after it; a skip (or a failure, where
    required) naming why when it cannot start."""
    try:
        broker.start()
    except BrokerUnavailable as error:
        _unavailable(f"{name} unavailable: {error}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def artemis() -> Iterator[ArtemisBroker]:
    _need_module("proton", "python-qpid-proton")
    yield from _running(ArtemisBroker(ARTEMIS_ADDRESSES), "ActiveMQ Artemis")


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[RabbitBroker]:
    _need_module("pika", "pika")
    yield from _running(rabbitmq_broker(), "RabbitMQ")


@pytest.fixture(scope="session")
def rabbitmq4() -> Iterator[RabbitBroker]:
    _need_module("proton", "python-qpid-proton")
    _need_module("pika", "pika")
    yield from _running(rabbitmq4_broker(), "RabbitMQ 4.0")

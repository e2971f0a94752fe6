"""The engine against real brokers: every row of every conformance case within its tolerance.

Each case runs one workload on the real broker (python-qpid-proton for AMQP 1.0, pika's codec for
AMQP 0.9.1, Artemis's own ``artemis producer`` for CORE) and on the engine, and compares named
figures (conformance/cases.py). ``bench/conformance.py`` prints the same rows as a table.
"""

from __future__ import annotations

import pytest

from conformance.brokers import ArtemisBroker, RabbitBroker
from conformance.cases import ARTEMIS_CASES, RABBITMQ_CASES, Case, Row

pytestmark = pytest.mark.realbroker


def _explain(rows: list[Row]) -> str:
    return "\n".join(
        f"{row.figure}: real {row.real}, engine {row.engine}, tolerance {row.tolerance}"
        + (f" ({row.note})" if row.note else "")
        for row in rows
        if not row.ok
    )


def _check(rows: list[Row]) -> None:
    assert rows, "the case compared no figure"
    failing = [row for row in rows if not row.ok]
    assert not failing, f"{len(failing)} of {len(rows)} figures disagree:\n{_explain(failing)}"


@pytest.mark.parametrize("case", ARTEMIS_CASES, ids=[c.name for c in ARTEMIS_CASES])
def test_artemis(case: Case, artemis: ArtemisBroker) -> None:
    _check(case.run(artemis))


@pytest.mark.parametrize("case", RABBITMQ_CASES, ids=[c.name for c in RABBITMQ_CASES])
def test_rabbitmq(case: Case, rabbitmq: RabbitBroker) -> None:
    _check(case.run(rabbitmq))

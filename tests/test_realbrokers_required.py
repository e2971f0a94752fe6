"""Where the real brokers are required (scripts/test.sh, once it installed them), one that is
unavailable fails its tests; elsewhere it skips them (tests/realbrokers/conftest.py)."""

from __future__ import annotations

import pytest

from tests.realbrokers.conftest import REQUIRED, REQUIRED_ENV, _unavailable


def test_an_unavailable_broker_skips_its_tests_unless_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRED_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="RabbitMQ unavailable"):
        _unavailable("RabbitMQ unavailable: epmd did not listen")
    monkeypatch.setenv(REQUIRED_ENV, REQUIRED)
    with pytest.raises(pytest.fail.Exception, match=r"RabbitMQ unavailable.*required"):
        _unavailable("RabbitMQ unavailable: epmd did not listen")


def test_the_test_command_requires_the_brokers_it_installed() -> None:
    from pathlib import Path

    script = (Path(__file__).parent.parent / "scripts" / "test.sh").read_text()
    assert f"{REQUIRED_ENV}={REQUIRED} .venv/bin/python -m pytest tests/realbrokers" in script

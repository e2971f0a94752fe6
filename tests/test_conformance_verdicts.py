"""How conformance rows are read, without a broker: a comparison agrees or disagrees, a check of
one side holds or fails and is never counted as an agreement, and ``bench/conformance.py`` exits
non-zero on any row that does not hold or any case that did not run (conformance/cases.py)."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench import conformance as bench
from conformance import cases

AGREES = cases.same("w", "f", 1, 1)
DISAGREES = cases.same("w", "f", 1, 2)
HOLDS = cases.check("w", "f", 100, 100, True, "both = 100")
FAILS = cases.check("w", "f", 99, 100, False, "both = 100")


def test_a_check_is_told_from_a_comparison() -> None:
    assert [row.verdict for row in (AGREES, DISAGREES, HOLDS, FAILS)] == [
        "agrees",
        "DISAGREES",
        "holds",
        "FAILS",
    ]
    assert {row.kind for row in (AGREES, DISAGREES)} == {cases.COMPARE}
    assert {row.kind for row in (HOLDS, FAILS)} == {cases.CHECK}


@pytest.mark.parametrize(
    ("rows", "problems", "code"),
    [
        ([AGREES, HOLDS], [], 0),
        ([AGREES, DISAGREES], [], 1),
        ([AGREES, FAILS], [], 1),
        ([AGREES], ["artemis-x: failed: TimeoutError: ..."], 1),
        ([AGREES], ["rabbitmq: not started, 3 cases skipped: ..."], 1),
        ([], [], 1),
    ],
)
def test_the_table_exits_non_zero_unless_every_row_holds_and_every_case_ran(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    rows: list[cases.Row],
    problems: list[str],
    code: int,
) -> None:
    def ran(selected: list[cases.Case], console: Console) -> tuple[list[cases.Row], list[str]]:
        return rows, problems

    monkeypatch.setattr(bench, "run_cases", ran)
    assert bench.main(["--case", "artemis-amqp-fail"]) == code
    if rows:
        agree = sum(row.ok for row in rows if row.kind == cases.COMPARE)
        assert f"{agree} agree" in capsys.readouterr().out


def test_the_rows_that_check_completion_or_constants_are_checks() -> None:
    """The rows the review found comparing nothing (a rate-limited client's total, each side of
    seed 004's bound) are checks: a loss would still fail them, an agreement is not claimed."""
    got = cases.real.RateRun(samples=[(0.05 * i, i) for i in range(1, 101)], client_count=100)
    rows = cases._rate_rows("w", "sent", got, [i * 50_000 for i in range(100)], 20, 100, "")
    assert [row.kind for row in rows] == [cases.CHECK, cases.COMPARE]
    assert rows[0].ok
    short = cases._rate_rows("w", "sent", got, [i * 50_000 for i in range(99)], 20, 99, "")
    assert not short[0].ok  # the engine's 99 against the count of 99 and the client's 100

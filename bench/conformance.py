"""Conformance table: the engine against real ActiveMQ Artemis and RabbitMQ brokers.

Starts Artemis 2.40, RabbitMQ 3.10 and RabbitMQ 4.0 as plain processes on 127.0.0.1 (installed
by ``bash scripts/setup_brokers.sh``), runs every conformance case of conformance/cases.py on the
real broker and on the engine, and prints one table: workload, figure, real broker, engine,
tolerance, verdict. A row compares the real broker with the engine ("agrees" / "DISAGREES"), or is
a check that does not ("holds" / "FAILS": one side, or each against a constant), never counted as
an agreement. Exits 0 only when every row agrees or holds and every case ran; 1 otherwise (a
disagreement, a failed check, a case that raised, a broker that did not start), as
tests/realbrokers would fail.

    .venv/bin/python bench/conformance.py                   # every case, a few minutes
    .venv/bin/python bench/conformance.py --only rabbitmq4  # one broker's cases
    .venv/bin/python bench/conformance.py --case artemis-amqp-fail --markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from conformance.brokers import ArtemisBroker, BrokerUnavailable, RabbitBroker
from conformance.cases import (
    ARTEMIS_ADDRESSES,
    CASES,
    CHECK,
    COMPARE,
    Case,
    Row,
    rabbitmq4_broker,
    rabbitmq_broker,
)

#: Each kind of broker a case names, and how to make it (started once for all its cases).
BROKERS: dict[str, Callable[[], ArtemisBroker | RabbitBroker]] = {
    "artemis": lambda: ArtemisBroker(ARTEMIS_ADDRESSES),
    "rabbitmq": rabbitmq_broker,
    "rabbitmq4": rabbitmq4_broker,
}


def run_cases(cases: list[Case], console: Console) -> tuple[list[Row], list[str]]:
    """Every case, each broker started once for its cases and stopped after them."""
    rows: list[Row] = []
    problems: list[str] = []
    for kind, make in BROKERS.items():
        mine = [case for case in cases if case.broker == kind]
        if not mine:
            continue
        broker = make()
        started = time.monotonic()
        try:
            with console.status(f"starting {kind}"):
                broker.start()
        except BrokerUnavailable as error:
            problems.append(f"{kind}: not started, {len(mine)} cases skipped: {error}")
            continue
        console.print(f"{kind} up in {time.monotonic() - started:.0f} s")
        try:
            for case in mine:
                began = time.monotonic()
                with console.status(f"{case.name}: {case.about}"):
                    try:
                        got = case.run(broker)
                    except Exception as error:  # one broken case must not hide the others
                        problems.append(f"{case.name}: failed: {type(error).__name__}: {error}")
                        continue
                rows.extend(got)
                console.print(
                    f"  {case.name}: {len(got)} figures, {time.monotonic() - began:.0f} s"
                )
        finally:
            broker.stop()
    return rows, problems


def render(rows: list[Row]) -> Table:
    table = Table(title="flowctl engine vs real brokers", show_lines=True)
    for column, style in (
        ("workload", "cyan"),
        ("figure", ""),
        ("real broker", "bold"),
        ("engine", "bold"),
        ("tolerance", ""),
        ("verdict", ""),
    ):
        table.add_column(column, style=style, overflow="fold")
    for row in rows:
        verdict = f"[green]{row.verdict}[/]" if row.ok else f"[red]{row.verdict}[/]"
        figure = row.figure + (f"\n[dim]{row.note}[/]" if row.note else "")
        table.add_row(row.workload, figure, row.real, row.engine, row.tolerance, verdict)
    return table


def markdown(rows: list[Row]) -> str:
    """The rows as a Markdown table (for an issue's closing note), notes in the last column."""
    lines = [
        "| workload | figure | real broker | engine | tolerance | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = (row.workload, row.figure, row.real, row.engine, row.tolerance, row.verdict)
        lines.append("| " + " | ".join((*cells, row.note)).replace("\n", " ") + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=tuple(BROKERS), help="one broker's cases")
    parser.add_argument("--case", action="append", default=[], help="a case by name (repeat)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    args = parser.parse_args(argv)
    known = {case.name for case in CASES}
    unknown = sorted(set(args.case) - known)
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    cases = [
        case
        for case in CASES
        if (args.only is None or case.broker == args.only)
        and (not args.case or case.name in args.case)
    ]
    # Piped into a file or a CI log, rich would wrap the table at 80 columns: give it room.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    began = time.monotonic()
    rows, problems = run_cases(cases, console)
    if rows:
        console.print(render(rows))
    if rows and args.markdown:
        print(markdown(rows))
    compared = [row for row in rows if row.kind == COMPARE]
    checks = [row for row in rows if row.kind == CHECK]
    disagree = [row for row in compared if not row.ok]
    failed = [row for row in checks if not row.ok]
    console.print(
        f"{len(rows)} figures from {len(cases)} cases in {time.monotonic() - began:.0f} s: "
        f"{len(compared) - len(disagree)} agree, {len(disagree)} disagree; "
        f"{len(checks) - len(failed)} checks hold, {len(failed)} fail"
        + (" (see the verdict column)" if disagree or failed else "")
    )
    for problem in problems:
        console.print(f"[yellow]{problem}[/]")
    return 0 if rows and not (disagree or failed or problems) else 1


if __name__ == "__main__":
    sys.exit(main())

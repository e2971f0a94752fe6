"""What ``flowctl`` prints: the consoles and the tables of a run's summary, the gold daily metrics
and the pipeline state (the commands themselves are in flowctl/cli.py)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from flowctl_core.runner import RunResult
from flowctl_core.summary import (
    ROLE_MOVES,
    QueueSummary,
    artemis_addresses,
    artemis_links,
    connection_totals,
    link_messages,
    protocol_comparisons,
    queue_summaries,
)
from flowctl_core.wording import counted, shown_overshoot

if TYPE_CHECKING:  # pragma: no cover - typing only
    from flowctl_core.sweep import Sweep
    from jobs.pipeline_state import PipelineStatus

# Piped output (CI logs, `| less`) gets a wide table instead of one folded to 80 columns,
# unless $COLUMNS says how wide (Rich reads it: `COLUMNS=100 flowctl ... | tee`).
# No console markup: what is printed is data (names, paths, rationales, a what-if's
# "[verdict, rule]"), which Rich would otherwise read as style tags and drop; styles are Text's.
_COLUMNS = os.environ.get("COLUMNS", "")
# Fixed here: Rich would read $COLUMNS again at each print, and without it fall back to 80
# columns when piped.
console = Console(
    width=int(_COLUMNS) if _COLUMNS.isdigit() else None if sys.stdout.isatty() else 200,
    markup=False,
)
# An error is one line however long (a path, a field): never folded to the terminal's or, when
# stderr is not a terminal (CI, pipes), to 80 columns.
err_console = Console(stderr=True, soft_wrap=True, markup=False)


#: A cell: plain text, or styled (a sweep's best run in bold green).
Cell = str | Text
#: How wide a prose column (justify "prose": a sweep's outcome) counts when a table is fitted to
#: the console, unless a word of it is longer: its words wrap onto more lines, as figures must
#: not, and no word is cut ("flow_stop_co" / "unt").
PROSE_WIDTH = 12
#: How wide a name (a run id, a queue: justify "left") counts in a turned table that would
#: otherwise be split into tables of one or two columns each: the names fold onto more lines,
#: the figures stay whole. A new user's 100-column terminal showed the demo's daily table as 8
#: tables of 1-2 queues, every column as wide as its 40-character run id.
NAME_WIDTH = 16


def _tables(
    title: str,
    headers: list[tuple[str, str]],
    rows: Sequence[Sequence[Cell]],
    *,
    turn: bool = True,
) -> list[Table]:
    """``rows`` under ``headers`` (name, justify), as one table when it fits the console. Wider
    (a terminal of 80 or 100 columns), it is turned, one row per header and one column per row
    named by its first cell, and split into as many tables as it takes to fit: no figure is cut
    ("230,…") nor a table cropped; split, its names fold (:data:`NAME_WIDTH`) so that more
    columns share a table. Rows that their first cell does not name, with the other
    cells (a what-if's metrics of one queue), are not turned (``turn`` false): they stay one
    table, whose cells fold onto more lines rather than lose characters. A "prose" column's
    cells wrap at words."""
    prose = [justify == "prose" for _, justify in headers]

    def fits(widths: list[int]) -> bool:
        return sum(width + 3 for width in widths) + 1 <= console.width

    def cell_width(cell: Cell, index: int) -> int:
        if not prose[index]:
            return len(cell)
        longest_word = max((len(word) for word in str(cell).split()), default=0)
        return min(len(cell), max(PROSE_WIDTH, longest_word))

    def column_width(index: int) -> int:
        name = headers[index][0]
        return max(len(name), *(cell_width(row[index], index) for row in rows))

    def entity_width(row: Sequence[Cell]) -> int:
        return max(cell_width(cell, index) for index, cell in enumerate(row))

    def folded_entity_width(row: Sequence[Cell]) -> int:
        return max(
            min(len(cell), NAME_WIDTH) if headers[index][1] == "left" else cell_width(cell, index)
            for index, cell in enumerate(row)
        )

    if not rows or not turn or fits([column_width(i) for i in range(len(headers))]):
        return [_one_table(title, headers, rows)]
    first = max(len(name) for name, _ in headers)

    def groups(width: Callable[[Sequence[Cell]], int]) -> list[list[Sequence[Cell]]]:
        """The rows in order, as many to a turned table as fit the console."""
        found: list[list[Sequence[Cell]]] = [[]]
        for row in rows:
            if found[-1] and not fits([first, *(width(r) for r in [*found[-1], row])]):
                found.append([])
            found[-1].append(row)
        return found

    width = entity_width
    split = groups(width)
    if len(split) > 1:
        width = folded_entity_width
        split = groups(width)
    return [
        _turned(title if number == 0 else "", headers, group, width)
        for number, group in enumerate(split)
    ]


def _one_table(
    title: str,
    headers: Sequence[tuple[Cell, str]],
    rows: Sequence[Sequence[Cell]],
    max_widths: Sequence[int | None] = (),
) -> Table:
    table = Table(title=title or None)
    for index, (name, justify) in enumerate(headers):
        table.add_column(
            name,
            justify="right" if justify == "right" else "left",
            no_wrap=index == 0,
            overflow="fold",
            max_width=max_widths[index] if index < len(max_widths) else None,
        )
    for row in rows:
        table.add_row(*row)
    return table


def _turned(
    title: str,
    headers: list[tuple[str, str]],
    entities: Sequence[Sequence[Cell]],
    entity_width: Callable[[Sequence[Cell]], int],
) -> Table:
    """One row per header after the first, one column per entity (its first cell, styled as it
    is, names it: a sweep's best run stays bold), as wide as ``entity_width`` counts it; a row
    of names (a date, a run) or prose stays left-aligned among the figures."""

    widths = [entity_width(entity) for entity in entities]

    def folded(value: Cell, width: int) -> Text:
        text = value.copy() if isinstance(value, Text) else Text(value)
        if text.spans or "\n" in text.plain:
            return text
        return Text(_folded_name(text.plain, width), style=text.style, justify=text.justify)

    def cell(value: Cell, justify: str, width: int) -> Cell:
        if justify == "right":
            return value
        text = folded(value, width)
        text.justify = "left"
        return text

    turned_headers: list[tuple[Cell, str]] = [
        (headers[0][0], "left"),
        *((folded(e[0], width), "right") for e, width in zip(entities, widths, strict=True)),
    ]
    rows: list[list[Cell]] = [
        [
            name,
            *(
                cell(entity[i], justify, width)
                for entity, width in zip(entities, widths, strict=True)
            ),
        ]
        for i, (name, justify) in enumerate(headers)
        if i > 0
    ]
    return _one_table(title, turned_headers, rows, [None, *widths])


def _folded_name(name: str, width: int) -> str:
    """``name`` on lines of at most ``width`` characters, broken after a ``-``, ``_``, ``.``,
    ``:`` or ``/`` where it can be: a run id read "rabbitmq-paced-c" / "onsumers-slow-s4" folded
    at the column's edge. A piece longer than the column is cut at its edge; names of words
    (with spaces) are left for the table to wrap."""
    if len(name) <= width or " " in name:
        return name
    lines = [""]
    for piece in re.findall(r"[^-_.:/]+[-_.:/]*|[-_.:/]+", name):
        while piece:
            if lines[-1] and len(lines[-1]) + len(piece) > width:
                lines.append("")
            room = width - len(lines[-1])
            lines[-1] += piece[:room]
            piece = piece[room:]
    return "\n".join(lines)


#: The threshold cells of a queue whose flow control is an Artemis address's: its limit and
#: overshoot are in the addresses' table.
_BY_ADDRESS = ("address", "address", "address")


def _thresholds(row: QueueSummary) -> tuple[str, str, str]:
    """The final stop count and the overshoots of a queue's own (Qpid) thresholds."""
    return (
        f"{row.flow_stop_count:,}" if row.flow_stop_count else "off",
        format_cell(shown_overshoot(row.max_overshoot_msgs, row.flow_stop_count)),
        format_cell(shown_overshoot(row.max_overshoot_bytes, row.flow_stop_size)),
    )


def print_summary(result: RunResult, out: Path | None = None) -> None:
    headers = [
        ("queue", "left"),
        *(
            (name, "right")
            for name in (
                "enqueued",
                "dequeued",
                "rejected",
                "evicted",
                "flowStoppedCount",
                "peak depth",
                "peak bytes",
                "final stop count",
                "overshoot msgs",
                "overshoot bytes",
            )
        ),
    ]
    rows = [
        [
            row.queue,
            f"{row.enqueued:,}",
            f"{row.dequeued:,}",
            f"{row.rejected:,}",
            f"{row.evicted:,}",
            f"{row.flow_stopped_count:,}",
            f"{row.peak_depth_msgs:,}",
            f"{row.peak_depth_bytes:,}",
            *(_BY_ADDRESS if row.flow_by_address else _thresholds(row)),
        ]
        for row in queue_summaries(result)
    ]
    title = f"{result.scenario.name}  run {result.run_id}  ({result.events:,} events)"
    for table in _tables(title, headers, rows):
        console.print(table)
    print_protocol_summary(result)
    if getattr(result, "artemis", None):
        print_dict_table("artemis addresses", [row.as_dict() for row in artemis_addresses(result)])
        print_dict_table(
            "artemis clients",
            [_headed(row.as_dict(), ARTEMIS_CLIENT_HEADINGS) for row in artemis_links(result)],
        )
        print_line(ARTEMIS_READING)
    if out is not None:
        console.print(f"event log: {out}", highlight=False)


#: The clients' columns as printed: "messages" and "received" beside each other read alike,
#: and "refused" beside the address's "failed" read as a contradiction (a review).
ARTEMIS_CLIENT_HEADINGS = {
    "messages": "sent or processed",
    "received": "delivered",
    "refused": "refusals told",
}
#: What the Artemis tables' figures are, said once under them.
ARTEMIS_READING = (
    "size bytes: the address's size as Artemis counts it, each message's memory estimate (more "
    "than its body, the queues' peak bytes); refusals told: the address-full errors and AMQP "
    "rejections a producer was told of (a CORE producer stops at its first, while its address "
    "fails what it had sent before it, in the address's failed)"
)


def _headed(row: dict[str, object], headings: dict[str, str]) -> dict[str, object]:
    """``row`` with its keys renamed by ``headings`` (print_dict_table heads columns by key)."""
    return {headings.get(key, key): value for key, value in row.items()}


def format_cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def print_sweep(sweep: Sweep, *, all_metrics: bool = False) -> None:
    """A sweep as one table, a row per run (the run as written first): the objective's metrics
    in its order (every metric measured with ``all_metrics``), and what became of the run: the
    criterion it dropped out on, or why it was not run; then the objective and the verdict."""
    metrics = sweep.shown_metrics(all_metrics=all_metrics)
    # A flow stop count sweep keeps the queue's resume share: the resume each run used.
    resumes = sweep.written is not None
    headers = [
        ("value", "right"),
        *([("resume", "right")] if resumes else []),
        *((metric, "right") for metric in metrics),
        ("outcome", "prose"),
    ]
    rows: list[list[Cell]] = []
    for index, candidate in enumerate(sweep.candidates):
        best = sweep.choice.best == index
        value = sweep.value_text(candidate.value)
        if candidate.as_written:
            value = f"{value}, as written"
        figures = sweep.figures(candidate)
        cells = (
            [format_cell(figures[m]) for m in metrics]
            if candidate.metrics is not None
            else [""] * len(metrics)
        )
        cause = sweep.choice.cause.get(index, "")
        if best:
            outcome = Text("best", style="bold green")
        elif cause in ("refused", "as good"):
            outcome = Text(sweep.choice.dropped[index])
        else:
            outcome = Text(f"out: {cause}")
        resume = sweep.resume_count(candidate.value) if candidate.metrics is not None else None
        resume_cells = [Text("" if resume is None else f"{resume:,}")] if resumes else []
        rows.append(
            [Text(value, style="bold green" if best else ""), *resume_cells, *cells, outcome]
        )
    title = f"sweep {sweep.knob} of {sweep.entity}: {sweep.scenario} (seed {sweep.seed})"
    for table in _tables(title, headers, rows):
        console.print(table)
    objective = "; ".join(c.text() for c in sweep.objective)
    print_line(f"objective, in priority order: {objective}")
    if sweep.kept_text():
        print_line(sweep.kept_text())
    print_line(sweep.verdict())


def print_line(text: str) -> None:
    """A line of a run's report as one line: never folded at the console's width (200 columns
    when piped), so that a log or a grep sees it whole."""
    console.print(text, highlight=False, soft_wrap=True)


def format_ingest_report(report: dict[str, object]) -> str:
    """One line of an ingest's report (jobs/ingest_report.py): files, rows in = accepted +
    quarantined, and the checks, rather than the report's dict."""

    def count(key: str) -> str:
        value = report.get(key)
        return f"{value:,}" if isinstance(value, int) else "?"

    files = report.get("files_listed")
    listed = counted(files, "file") if isinstance(files, int) else "? files"
    checks = "balanced" if report.get("balanced") else "NOT balanced"
    if "great_expectations_success" in report:
        passed = "passed" if report["great_expectations_success"] else "FAILED"
        checks += f", Great Expectations {passed} ({report.get('great_expectations_result')})"
    return (
        f"ingest {report.get('date_from')}..{report.get('date_to')}: "
        f"{listed} ({count('files_quarantined')} quarantined whole, "
        f"{count('files_partially_read')} partially read); rows read {count('rows_read')} = "
        f"accepted {count('rows_accepted')} + quarantined {count('rows_quarantined')} "
        f"(duplicates {count('duplicates_quarantined')}, keys held on other days "
        f"{count('duplicates_of_other_days')}): {checks}"
    )


def format_figures(figures: dict[str, object]) -> str:
    """``name value, ...`` of a flat dict of counts or seconds (``'a_b'`` reads ``a b``)."""
    return ", ".join(f"{name.replace('_', ' ')} {format_cell(v)}" for name, v in figures.items())


def print_dict_table(title: str, rows: list[dict[str, object]]) -> None:
    """A table whose columns are the rows' keys: for summaries that carry their own columns."""
    if not rows:
        return
    headers = [
        (
            key.replace("_", " "),
            "right" if isinstance(value, int | float) and not isinstance(value, bool) else "left",
        )
        for key, value in rows[0].items()
    ]
    cells = [[format_cell(value) for value in row.values()] for row in rows]
    # Turned, a column per row is headed by its first cell: only when that names the row.
    named_by_first = len({row[0] for row in cells}) == len(cells)
    for table in _tables(title, headers, cells, turn=named_by_first):
        console.print(table)


def print_protocol_summary(result: RunResult) -> None:
    """Messages per link and totals per connection, so protocols compare side by side (seed 004)."""
    links = link_messages(result)
    if not links:
        return
    link_headers = [
        *((column, "left") for column in ("connection", "protocol", "link", "role", "queue")),
        ("messages", "right"),
    ]
    link_rows: list[list[Cell]] = [
        [link.connection, link.protocol, link.link, link.role, link.queue, f"{link.messages:,}"]
        for link in links
    ]
    total_headers = [
        ("connection", "left"),
        ("protocol", "left"),
        *((column, "right") for column in ("sent", "received", "total", "times blocked")),
    ]
    total_rows: list[list[Cell]] = [
        [
            row.connection,
            row.protocol,
            f"{row.sent:,}",
            f"{row.received:,}",
            f"{row.total:,}",
            f"{row.blocked:,}",
        ]
        for row in connection_totals(result)
    ]
    for table in [
        # A connection's links share its name in the first column: folded, not turned.
        *_tables("messages per link", link_headers, link_rows, turn=False),
        *_tables("totals per connection", total_headers, total_rows),
    ]:
        console.print(table)
    for compared in protocol_comparisons(result):
        moved = ROLE_MOVES[compared.role]
        times = "" if compared.ratio is None else f" ({compared.ratio:.2f}x)"
        console.print(
            f"{compared.role}s {moved}: amqp-1.0 {compared.amqp10:,}, amqp-0-9-1 "
            f"{compared.amqp091:,}{times}",
            highlight=False,
        )


DAILY_COLUMNS = (
    ("date", "date"),
    ("run_id", "run"),
    ("queue", "queue"),
    ("flow_stopped_count", "flowStoppedCount"),
    ("time_stopped_s", "stopped s"),
    ("stopped_share", "stopped share"),
    ("episodes", "episodes"),
    ("max_depth_msgs", "max depth"),
    ("max_overshoot_msgs", "max overshoot msgs"),
    ("p95_overshoot_msgs", "p95 overshoot msgs"),
    # An Artemis address overshoots its max-size-bytes in bytes only.
    ("max_overshoot_bytes", "max overshoot bytes"),
    ("max_overshoot_ratio", "overshoot / bound"),
    ("counter_check_ok", "counter ok"),
)


#: The daily overshoot columns, null for a threshold that is off or a depth not logged (the
#: ratio is null for a producer without a window too).
_OVERSHOOTS = frozenset({"max_overshoot_msgs", "p95_overshoot_msgs", "max_overshoot_bytes"})


def recommendations_line(recommended: dict[str, Any]) -> str:
    """The recommend job's counts: every day's set it wrote, then the last day's, the one the
    dashboard and ``whatif`` read."""
    line = (
        f"threshold_recommendations: {counted(recommended['rows'], 'row')}, a set for each of "
        f"{counted(recommended['days'], 'day')} ({format_figures(dict(recommended['verdicts']))})"
    )
    if recommended["days"] > 1:
        line += (
            f"; as of {recommended['latest']} (the dashboard's): {recommended['latest_rows']:,} "
            f"({format_figures(dict(recommended['latest_verdicts']))})"
        )
    return line


def _gold_tables(
    title: str,
    columns: tuple[tuple[str, str], ...],
    names: tuple[str, ...],
    entity: str,
    rows: list[dict[str, object]],
) -> list[Table]:
    """Gold rows as tables that fit the console (:func:`_tables`: turned when too wide, as a
    piped 200-column console is for the daily table, whose headers were cut: "flowStoppe…").
    ``names`` are the columns that name a row (left); ``entity``, the one among them a row is
    about, leads, so that a turned table heads each column with it; a ``*_share`` column is a
    percentage, the rest figures."""
    ordered = [c for c in columns if c[0] == entity] + [c for c in columns if c[0] != entity]
    headers = [
        (heading, "left" if key in names or key == "counter_check_ok" else "right")
        for key, heading in ordered
    ]
    cells = []
    for row in rows:
        line = []
        for key, _ in ordered:
            value = row.get(key)
            if key.endswith("_share") and isinstance(value, float):
                line.append(f"{value:.1%}")
            elif key in _OVERSHOOTS and value is None and row.get("episodes"):
                # Episodes without an overshoot: of a threshold that is off (DESIGN §4: null), or
                # with no depth logged (a collector's carried-over block); the daily row does
                # not tell which, so not "off" (a review). Blank where no episode began.
                line.append("n/a")
            else:
                line.append(format_cell(value))
        cells.append(line)
    return _tables(title, headers, cells)


def print_daily_metrics(
    rows: list[dict[str, object]], stopped: int | None = None, queue_days: int | None = None
) -> None:
    """Gold queue_flow_daily rows, one line per (date, run, queue); given the counts, the rows
    are the most stopped, and a line says how many queue-days stopped of all."""
    if rows:
        title = "queue_flow_daily (gold)" + ("" if stopped is None else ": the most stopped queues")
        names = ("date", "run_id", "queue")
        for table in _gold_tables(title, DAILY_COLUMNS, names, "queue", rows):
            console.print(table)
    if stopped is None or queue_days is None or not queue_days:
        return
    shown = f" (the {len(rows)} most stopped above)" if 0 < len(rows) < stopped else ""
    print_line(f"queues: {stopped:,} of {queue_days:,} queue-days stopped{shown}")


STARVED_LINK_COLUMNS = (
    ("date", "date"),
    ("run_id", "run"),
    ("link", "link"),
    ("link_role", "role"),
    ("starved_s", "starved s"),
    ("starved_share", "starved share"),
    ("episodes", "episodes"),
    ("attached_s", "attached s"),
)


def print_starved_links(rows: list[dict[str, object]], starved: int, link_days: int) -> None:
    """The most starved links of the days (gold link_starvation_daily), then how many of the
    link-days starved: a link with work and no credit (DESIGN §4). Nothing when no link was
    logged."""
    if not link_days:
        return
    if rows:
        title = "link_starvation_daily (gold): the most starved links"
        names = ("date", "run_id", "link", "link_role")
        for table in _gold_tables(title, STARVED_LINK_COLUMNS, names, "link", rows):
            console.print(table)
    shown = f" (the {len(rows)} most starved above)" if 0 < len(rows) < starved else ""
    console.print(
        f"links: {starved:,} of {link_days:,} link-days starved (credit 0 with messages "
        f"available){shown}",
        highlight=False,
    )


def print_pipeline_status(status: PipelineStatus, warehouse_dir: str) -> None:
    """Per job its recorded days and how many are behind bronze, then each day behind and why."""
    table = Table(title=f"pipeline state of {warehouse_dir}")
    for name, justify in (("job", "left"), ("days", "right"), ("first", "left"), ("last", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    # Ingest's days behind are those it did not finish writing (jobs/pipeline_state.py); blank,
    # its cell hid them beside the line that names them (a review).
    table.add_column("behind", justify="right")
    for job in status.jobs:
        table.add_row(
            job.job,
            f"{job.days:,}",
            str(job.first or ""),
            str(job.last or ""),
            f"{len(job.behind):,}",
        )
    console.print(table)
    for job in status.jobs:
        for day, why in job.behind.items():
            console.print(f"behind: {job.job} {day}: {why}", highlight=False)
    if status.unrecorded_bronze_days:
        from jobs.pipeline_state import days_text

        console.print(
            "bronze days without a record (ingested before the pipeline state existed): "
            + days_text(status.unrecorded_bronze_days),
            highlight=False,
        )
    if not any(job.days for job in status.jobs) and not status.unrecorded_bronze_days:
        console.print(
            f"nothing recorded in {warehouse_dir}: no job has run on it (the warehouse you meant?)",
            highlight=False,
        )
    elif status.up_to_date:
        console.print("every recorded day is up to date with bronze", highlight=False)

"""What `flowctl pipeline` prints of a run's reports: one line each, not the reports' dicts (a
new-user trial found the ingest report printed as a Python dict, wrapped mid-entry)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from flowctl import render
from flowctl.render import format_figures, format_ingest_report

REPORT: dict[str, object] = {
    "date_from": "2026-03-01",
    "date_to": "2026-03-04",
    "files_listed": 16,
    "files_quarantined": 1,
    "files_partially_read": 0,
    "rows_read": 2_546_640,
    "rows_accepted": 2_546_631,
    "rows_quarantined": 9,
    "duplicates_quarantined": 3,
    "duplicates_of_other_days": 0,
    "balanced": True,
    "great_expectations_success": True,
    "great_expectations_result": "var/quality/broker_events/2026-03-01_2026-03-04.json",
}


def test_the_ingest_report_is_one_line_of_its_counts_and_checks() -> None:
    assert format_ingest_report(REPORT) == (
        "ingest 2026-03-01..2026-03-04: 16 files (1 quarantined whole, 0 partially read); rows "
        "read 2,546,640 = accepted 2,546,631 + quarantined 9 (duplicates 3, keys held on other "
        "days 0): balanced, Great Expectations passed "
        "(var/quality/broker_events/2026-03-01_2026-03-04.json)"
    )


def test_one_file_is_one_file() -> None:
    assert ": 1 file (0 quarantined whole," in format_ingest_report(
        {**REPORT, "files_listed": 1, "files_quarantined": 0}
    )


def test_a_failed_check_shouts_and_a_skipped_suite_is_not_claimed() -> None:
    failed = {**REPORT, "balanced": False, "great_expectations_success": False}
    assert format_ingest_report(failed).endswith(
        ": NOT balanced, Great Expectations FAILED "
        "(var/quality/broker_events/2026-03-01_2026-03-04.json)"
    )
    skipped = {k: v for k, v in REPORT.items() if not k.startswith("great_expectations")}
    assert format_ingest_report(skipped).endswith("keys held on other days 0): balanced")


def test_figures_read_as_words_and_numbers() -> None:
    figures = {"at_risk_of_overflow": 39, "keep": 23, "ingest": 47.37}
    assert format_figures(figures) == "at risk of overflow 39, keep 23, ingest 47.37"


def test_a_report_line_is_printed_whole_however_narrow_the_console(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fresh demo's log showed the ingest line folded at 200 columns ("Great\nExpectations")."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=40))
    render.print_line(format_ingest_report(REPORT))
    assert out.getvalue() == format_ingest_report(REPORT) + "\n"


def test_a_table_wider_than_the_terminal_is_turned_not_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`flowctl simulate` at 80 columns cut its figures ("230,…") and cropped the table: wider
    than the console, a table is turned (a row per column) and split into tables that fit."""
    rows = [
        {
            "link": f"consumer-{n}", "protocol": "artemis-core", "role": "consumer",
            "target": "jobs-unbounded", "window": 102_400, "max_rate": -1, "messages": 200,
            "received": 300, "refused": 0, "peak_buffered_bytes": 204_800,
        }
        for n in range(6)
    ]  # fmt: skip
    for width, tables in ((200, 1), (80, 2)):
        out = io.StringIO()
        monkeypatch.setattr(render, "console", Console(file=out, width=width, markup=False))
        render.print_dict_table("artemis clients", rows)
        text = out.getvalue()
        assert "…" not in text and all(len(line) <= width for line in text.splitlines())
        assert text.count("┏") == tables
        assert text.count("102,400") == 6 and text.count("consumer-5") == 1
    assert "│ window " in text  # turned: the columns' names head the rows


def test_the_artemis_tables_say_what_their_figures_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FAIL address "failed 7" beside its producer "refused 1", "messages" beside
    "received", and the address's size beside the queue's bytes read as contradictions (a
    review): the clients' columns say what they count, and a line says what the sizes and the
    refusals are."""
    from flowctl_core.runner import run_scenario
    from flowctl_core.scenario import load_scenario

    result = run_scenario(load_scenario("artemis-address-full-policies"), [])
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=400, markup=False))
    render.print_summary(result)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("┃ link"))
    columns = [cell.strip() for cell in header.strip("┃").split("┃")]
    assert {"sent or processed", "delivered", "refusals told"} <= set(columns)
    assert not {"messages", "received", "refused"} & set(columns)
    fail = next(line for line in lines if line.startswith("│ fail-producer"))
    cells = dict(zip(columns, [c.strip() for c in fail.strip("│").split("│")], strict=True))
    assert (cells["sent or processed"], cells["refusals told"]) == ("263", "1")
    assert render.ARTEMIS_READING in lines


def test_the_daily_table_shows_an_artemis_address_overshoot_in_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An address overshoots max-size-bytes in bytes only: a table of message overshoots alone
    showed the collected `orders` (149,176 bytes past its limit, at risk) with none."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=300))
    row = {"date": "2026-11-28", "run_id": "r", "queue": "orders", "max_overshoot_bytes": 149_176}
    render.print_daily_metrics([row])
    header, line = (
        text for text in out.getvalue().splitlines() if "overshoot" in text or "orders" in text
    )
    columns = [cell.strip() for cell in header.strip("┃").split("┃")]
    cells = [cell.strip() for cell in line.strip("│").split("│")]
    assert dict(zip(columns, cells, strict=True))["max overshoot bytes"] == "149,176"


def test_the_daily_table_says_n_a_for_an_overshoot_it_has_none_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A queue that stopped on its count threshold, its byte one off: gold's byte overshoot is
    null (DESIGN §4), and the table left it blank, as if nothing were printed (a review). It
    says n/a, not "off": a depth not logged is null too, and the row does not say which. A
    queue-day without an episode stays blank."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=300))
    stopped = {
        "date": "2026-03-02",
        "run_id": "r",
        "queue": "payments",
        "episodes": 3,
        "max_overshoot_msgs": 12,
        "max_overshoot_bytes": None,
        "max_overshoot_ratio": None,
    }
    idle = {**stopped, "queue": "audit", "episodes": 0, "max_overshoot_msgs": None}  # fmt: skip
    render.print_daily_metrics([stopped, idle])
    lines = out.getvalue().splitlines()
    header = next(text for text in lines if "overshoot" in text)
    columns = [cell.strip() for cell in header.strip("┃").split("┃")]

    def cells(queue: str) -> dict[str, str]:
        line = next(text for text in lines if f" {queue} " in text)
        return dict(zip(columns, [c.strip() for c in line.strip("│").split("│")], strict=True))

    shown = cells("payments")
    assert (shown["max overshoot msgs"], shown["max overshoot bytes"]) == ("12", "n/a")
    assert shown["overshoot / bound"] == ""  # null for a producer without a window too
    assert (cells("audit")["max overshoot msgs"], cells("audit")["max overshoot bytes"]) == ("", "")


def test_the_daily_table_is_turned_not_cut_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped (200 columns) the daily table's thirteen columns with a long run id cut a header to
    "flowStoppe…": wider than the console it is turned, each column headed by a queue."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=200, markup=False))
    row = {key: 1_234 for key, _ in render.DAILY_COLUMNS}
    row.update(date="2026-03-03", run_id="qpid-seed-001-worst-case-s7-3f9a2c1d", queue="orders")
    render.print_daily_metrics([row, {**row, "queue": "audit"}])
    text = out.getvalue()
    assert "…" not in text and all(len(line) <= 200 for line in text.splitlines())
    assert "│ flowStoppedCount " in text and text.count("1,234") == 2 * 10
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == ["queue", "orders", "audit"]


def test_long_run_ids_fold_rather_than_split_the_daily_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new user's 100-column terminal showed the demo's daily table turned into 8 tables of 1-2
    queues, every column as wide as its run id (40 characters): split, a turned table folds its
    names (a run id, a queue) at render.NAME_WIDTH instead, so four queues share a table, their
    figures whole; where the queues fit one turned table (three at 200 columns), none folds."""
    rows = []
    for scenario in ("artemis-address-full-policies", "rabbitmq-paced-consumers-slow"):
        for queue in ("orders", "audit", "payments", "ledger"):
            row = {key: 1_234_567 for key, _ in render.DAILY_COLUMNS}
            run_id = f"{scenario}-s42-3f9a2c1d"
            row.update(date="2026-03-03", run_id=run_id, queue=f"{queue}-{scenario[:3]}")
            rows.append(row)

    def shown(width: int, rows: list[dict[str, object]]) -> tuple[str, dict[str, str]]:
        out = io.StringIO()
        monkeypatch.setattr(render, "console", Console(file=out, width=width, markup=False))
        render.print_daily_metrics(rows)
        text = out.getvalue()
        assert "…" not in text and all(len(line) <= width for line in text.splitlines())
        assert text.count("1,234,567") == len(rows) * 10
        return text, _turned_column_cells(text.splitlines(), "run")

    text, runs = shown(100, rows)
    assert text.count("┏") == 2  # 4 queues a table (8 tables with the run ids unfolded)
    # Folded: each run id's pieces, read down its column, are the whole id.
    assert {queue: run.replace(" ", "") for queue, run in runs.items()} == {
        str(row["queue"]): row["run_id"] for row in rows
    }
    # ... and break after their hyphens, not mid-word ("rabbitmq-paced-c" / "onsumers-slow-s4").
    assert runs["orders-rab"] == "rabbitmq-paced- consumers-slow- s42-3f9a2c1d"
    text, runs = shown(200, rows[:3])
    assert text.count("┏") == 1
    assert set(runs.values()) == {"artemis-address-full-policies-s42-3f9a2c1d"}  # not folded


def test_the_starved_links_turned_are_headed_by_their_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Turned at 80 columns, each column of the starved links is headed by its link, not by its
    role (a review: "publisher", "consumer")."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=80, markup=False))
    row = {
        "date": "2026-11-28", "run_id": "client-links-artemis-1-2026-11-28T10:00:00",
        "link": "orders-in", "link_role": "publisher", "starved_s": 3.0, "starved_share": 0.5,
        "episodes": 1, "attached_s": 6.0,
    }  # fmt: skip
    render.print_starved_links([row, {**row, "link": "audit-in"}], starved=2, link_days=4)
    headers = [line for line in out.getvalue().splitlines() if line.startswith("┃")]
    cells = [cell.strip() for header in headers for cell in header.strip("┃").split("┃")]
    assert "orders-in" in cells and "audit-in" in cells and "publisher" not in cells, headers
    assert "│ role " in out.getvalue()


def test_the_most_starved_links_and_how_many_link_days_starved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=200))
    row = {
        "date": "2026-11-28",
        "run_id": "client-a",
        "link": "p",
        "link_role": "publisher",
        "starved_s": 3.0,
        "starved_share": 0.5,
        "episodes": 1,
        "attached_s": 6.0,
    }
    render.print_starved_links([row], starved=12, link_days=40)
    text = out.getvalue()
    assert "the most starved links" in text and "50.0%" in text and "publisher" in text
    assert text.rstrip().endswith(
        "links: 12 of 40 link-days starved (credit 0 with messages available) "
        "(the 1 most starved above)"
    )
    out.truncate(0)
    out.seek(0)
    render.print_starved_links([], starved=0, link_days=5)
    assert out.getvalue() == (
        "links: 0 of 5 link-days starved (credit 0 with messages available)\n"
    )
    out.truncate(0)
    out.seek(0)
    render.print_starved_links([], starved=0, link_days=0)  # no link logged: nothing said
    assert out.getvalue() == ""


@pytest.mark.parametrize("width", [80, 100])
def test_a_sweep_too_wide_for_the_terminal_is_turned_not_cut(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """A README walk-through saw `--all-metrics` at 100 columns print "138,0…" and "out: stop…":
    now each run is a column, its figures whole, a refusal wrapped at words, left-aligned."""
    from flowctl_core.scenario import load_scenario
    from flowctl_core.sweep import run_sweep
    from schemas.recommendations import KNOB_QPID_FLOW_STOP_COUNT

    sweep = run_sweep(
        load_scenario("qpid-165-worst-case"), KNOB_QPID_FLOW_STOP_COUNT, "payments", [1, 150, 300]
    )
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=width, markup=False))
    render.print_sweep(sweep, all_metrics=True)
    text = out.getvalue()
    lines = text.splitlines()
    table_lines = [line for line in lines if line[:1] in "┏┃┡│└"]
    # (The objective and the verdict are report lines: printed whole, never folded.)
    assert "…" not in text and all(len(line) <= width for line in table_lines)
    for figure in ("84,480", "33,792", "102,400"):
        assert figure in text
    value_rows = [line for line in lines if line.startswith("┃ value")]
    assert len(value_rows) == {80: 2, 100: 1}[width]  # at 80, the fourth run in a table of its own
    # The outcomes wrap at words, left-aligned, whole words only ("flow_stop_co" / "unt" was
    # cut at a width of 12): read down each run's column.
    outcomes = _turned_column_cells(lines, "outcome")
    assert outcomes["1"] == "out: enqueued" and outcomes["150"] == "out: rejected msgs"
    assert (
        outcomes["300"]
        == "refused: queue 'payments': flow_stop_count (300) exceeds max_count (200)"
    )
    outcome = next(line for line in lines if "refused:" in line)
    assert outcome.split("│")[-2].startswith(" refused:")  # prose left-aligned
    # Each run's resume count: the written share of the stop (80 of 100) kept (a review: the
    # table said nothing of the resume a swept stop brought with it); none for a run refused.
    resumes = _turned_column_cells(lines, "resume")
    assert resumes == {"100, as written": "80", "1": "1", "150": "120", "300": ""}


def _turned_column_cells(lines: list[str], row_name: str) -> dict[str, str]:
    """A turned table's cells of the row ``row_name`` (its continuation lines joined), by the
    column each is under (the header's name), over every table of ``lines``."""
    cells: dict[str, str] = {}
    names: list[str] = []
    in_row = False
    for line in lines:
        if line.startswith("┃"):
            names = [cell.strip() for cell in line.strip("┃").split("┃")][1:]
        elif line.startswith("│"):
            parts = [cell.strip() for cell in line.strip("│").split("│")]
            in_row = parts[0] == row_name or (in_row and parts[0] == "")
            if in_row:
                for name, part in zip(names, parts[1:], strict=True):
                    cells[name] = f"{cells.get(name, '')} {part}".strip()
        else:
            in_row = False
    return cells


def test_a_turned_table_keeps_its_name_rows_left_and_its_best_run_styled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Turned, a row of names (the date, the run) stays left-aligned as it was as a column (it
    was pushed right, as the figures are), and a sweep's best run heads its column in its own
    style, bold green (the turned table had dropped it)."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=80, markup=False))
    row = {key: 1_234 for key, _ in render.DAILY_COLUMNS}
    row.update(date="2026-03-03", run_id="qpid-seed-001-worst-case-s7-3f9a2c1d", queue="orders")
    render.print_daily_metrics([row])
    date_row = next(line for line in out.getvalue().splitlines() if line.startswith("│ date "))
    assert date_row.split("│")[2].startswith(" 2026-03-03 ")
    figure_row = next(line for line in out.getvalue().splitlines() if "1,234" in line)
    assert figure_row.split("│")[2].endswith(" 1,234 ")

    header = (
        render._turned(
            "",
            [("value", "right"), ("episodes", "right")],
            [[Text("4,096", style="bold green"), "3"]],
            lambda entity: 8,
        )
        .columns[1]
        .header
    )
    assert isinstance(header, Text) and header.style == "bold green"


def test_the_most_stopped_queues_and_how_many_queue_days_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=300, markup=False))
    row = {"date": "2026-03-03", "run_id": "r", "queue": "orders", "time_stopped_s": 12.5}
    render.print_daily_metrics([row], 7, 30)
    lines = out.getvalue().splitlines()
    assert "queue_flow_daily (gold): the most stopped queues" in lines[0]
    assert lines[-1] == "queues: 7 of 30 queue-days stopped (the 1 most stopped above)"
    out.truncate(0)
    out.seek(0)
    render.print_daily_metrics([row], 1, 30)  # every stopped one shown: no "most stopped" count
    assert out.getvalue().splitlines()[-1] == "queues: 1 of 30 queue-days stopped"
    out.truncate(0)
    out.seek(0)
    render.print_daily_metrics([], 0, 0)  # no queue logged: nothing said
    assert out.getvalue() == ""


def test_a_what_if_table_too_wide_is_folded_not_headed_by_one_queue_in_every_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Turned, a what-if's rows (queue, metric) were headed "events | events | events" with the
    metric names as a body row (a README walk-through at 100 columns): rows their first cell
    does not name stay one table, their cells folded, no character lost."""
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=60, markup=False))
    long = "4,000/3,500 msgs, 4,194,304/3,670,016 bytes"
    rows: list[dict[str, object]] = [
        {"queue": "events", "metric": "thresholds (stop/resume)", "before": long, "after": long},
        {"queue": "events", "metric": "episodes", "before": 12, "after": 9},
    ]
    render.print_dict_table("what-if", rows)
    text = out.getvalue()
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")][:2] == ["queue", "metric"]
    assert "…" not in text and all(len(line) <= 60 for line in text.splitlines())
    before = "".join(
        line.split("│")[3].replace(" ", "")
        for line in text.splitlines()[4:8]
        if line.startswith("│")
    )
    assert before == long.replace(" ", "")


def test_piped_tables_take_the_width_columns_gives(tmp_path: Path) -> None:
    """Piped, the tables are 200 columns wide (not folded to 80), unless $COLUMNS says how wide:
    it was ignored (a review). Run as a user's shell runs it, the console made at import."""
    import os
    import subprocess
    import sys

    def widest_table_line(env: dict[str, str], run: str) -> int:
        command = [sys.executable, "-m", "flowctl.cli", "simulate", "qpid-165-worst-case",
                   "--out", str(tmp_path / run), "--run-id", run]  # fmt: skip
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        return max(len(line) for line in out.splitlines() if line[:1] in "┏┃│└")

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    assert widest_table_line({**env, "COLUMNS": "90"}, "narrow") <= 90
    assert widest_table_line(env, "wide") > 90


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("short-name", ["short-name"]),
        ("rabbitmq-paced-consumers-slow-s42", ["rabbitmq-paced-", "consumers-slow-", "s42"]),
        ("a_b.c:d/e-f", ["a_b.c:d/e-f"]),
        (
            "averyveryverylongpiecewithoutbreaks-x",
            ["averyveryverylon", "gpiecewithoutbre", "aks-x"],
        ),
        ("orders--dlq", ["orders--dlq"]),
        ("two words that are long", ["two words that are long"]),  # the table wraps words
    ],
)
def test_a_folded_name_breaks_after_its_separators(name: str, lines: list[str]) -> None:
    folded = render._folded_name(name, render.NAME_WIDTH)
    assert folded.split("\n") == lines
    assert folded.replace("\n", "") == name


def test_the_status_counts_the_days_ingest_did_not_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash review: the ingest row's cell was blank beside "behind: ingest D: started writing
    it ... and did not finish"; it counts those days as the other rows count theirs."""
    from datetime import date

    from jobs.pipeline_state import INGEST, INGEST_WRITING, DayRecord, pipeline_status

    day = date(2026, 3, 2)
    status = pipeline_status([DayRecord(INGEST_WRITING, day, 3)], [day])
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=120, markup=False))
    render.print_pipeline_status(status, "wh")
    rows = {
        cells[0]: cells[1:]
        for line in out.getvalue().splitlines()
        if (cells := [c.strip() for c in line.strip("│┃").split("│")])[0] in (INGEST, "episodes")
    }
    assert rows[INGEST][-1] == "1" and rows["episodes"][-1] == "1"
    assert "behind: ingest 2026-03-02: started writing it and did not finish" in out.getvalue()

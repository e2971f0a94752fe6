"""The pipeline state (jobs/pipeline_state.py): which days each job is behind bronze on, what a job
processes first, and what it refuses. The crash-then-later-days case on real Delta tables is in
tests/test_processing_order.py, beside the other processing orders it must equal."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from jobs import failures
from jobs.pipeline_state import (
    INGEST_WRITING,
    DayRecord,
    StaleInputError,
    behind_days,
    contiguous_ranges,
    days_text,
    earlier_days_behind,
    pipeline_status,
    stale_inputs,
    unfinished_ingests,
)

D1, D2, D3, D4, D5 = (date(2026, 3, day) for day in range(1, 6))


def _records(*rows: tuple[str, date, int]) -> list[DayRecord]:
    return [DayRecord(job, day, version) for job, day, version in rows]


def test_a_day_is_behind_when_never_processed_or_ingested_again_since() -> None:
    records = _records(
        ("ingest", D1, 3),
        ("ingest", D2, 5),  # re-ingested after episodes read v4
        ("ingest", D3, 6),  # the crash: ingested, episodes never ran
        ("episodes", D1, 4),  # read a later version than ingest wrote: up to date
        ("episodes", D2, 4),
        ("episodes", D4, 7),  # a day ingest has no record of (before the state existed)
    )
    assert behind_days(records, "episodes") == {
        D2: "bronze v5 is newer than v4",
        D3: "never processed",
    }
    assert earlier_days_behind(records, "episodes", D3) == [D2]
    assert list(behind_days(records, "daily_metrics")) == [D1, D2, D3]


def test_a_job_reading_another_is_refused_on_the_days_that_other_is_behind() -> None:
    records = _records(
        ("ingest", D1, 1),
        ("ingest", D2, 2),
        ("episodes", D1, 2),
    )
    assert stale_inputs(records, "daily_metrics", [D1]) is None
    assert stale_inputs(records, "daily_metrics", [D1, D2]) == (
        "episodes is behind bronze on 2026-03-02"
    )
    # episodes reads bronze only: never refused for another job's state.
    assert stale_inputs(records, "episodes", [D1, D2]) is None


def test_days_are_named_as_ranges() -> None:
    assert contiguous_ranges([D5, D1, D2, D4, D2]) == [(D1, D2), (D4, D5)]
    assert days_text([D1, D2, D3, D5]) == "2026-03-01..2026-03-03, 2026-03-05"
    assert contiguous_ranges([]) == []


def test_the_status_lists_each_job_its_days_behind_and_unrecorded_bronze_days() -> None:
    records = _records(
        ("ingest", D2, 1),
        ("ingest", D3, 2),
        ("episodes", D2, 2),
        ("episodes", D3, 2),
        ("daily_metrics", D2, 2),
    )
    status = pipeline_status(records, in_bronze=[D1, D2, D3])
    by_job = {job.job: job for job in status.jobs}
    assert [job.job for job in status.jobs] == ["ingest", "episodes", "daily_metrics"]
    assert (by_job["ingest"].days, by_job["ingest"].first, by_job["ingest"].last) == (2, D2, D3)
    assert by_job["episodes"].behind == {}
    assert by_job["daily_metrics"].behind == {D3: "never processed"}
    assert status.unrecorded_bronze_days == (D1,)
    assert not status.up_to_date
    caught_up = pipeline_status([*records, DayRecord("daily_metrics", D3, 2)], [D2, D3])
    assert caught_up.up_to_date and caught_up.unrecorded_bronze_days == ()


def _at(hour: int) -> datetime:
    return datetime(2026, 3, 6, hour)


def test_an_ingest_killed_while_writing_leaves_its_days_behind_until_it_is_rerun() -> None:
    """Ingest records that it is writing a day (at the version its write will make) before the
    write, and that it wrote it after: a day whose start is newer than its finish did not finish.
    A helper's crash audit: killed after the bronze commit and before its record (the quarantine
    not written), `flowctl status --check` said up to date, and no later night caught the day up."""
    before = [
        DayRecord("ingest", D1, 3, _at(1)),
        DayRecord("episodes", D1, 3, _at(2)),
        DayRecord("daily_metrics", D1, 3, _at(2)),
    ]
    killed = [*before, DayRecord(INGEST_WRITING, D1, 4, _at(3))]
    assert list(unfinished_ingests(killed)) == [D1]
    # The later jobs read v3: behind on the version the killed write would make.
    assert behind_days(killed, "episodes") == {D1: "bronze v4 is newer than v3"}
    status = pipeline_status(killed, in_bronze=[D1])
    ingest = next(job for job in status.jobs if job.job == "ingest")
    assert ingest.behind == {
        D1: "started writing it at 2026-03-06 03:00:00 UTC and did not finish (killed?): rerun "
        "ingest for the day"
    }
    assert not status.up_to_date
    # Episodes caught up from bronze as the kill left it (the write committed: v4): not behind.
    caught_up = [*killed, DayRecord("episodes", D1, 4, _at(4))]
    assert "episodes" not in {j.job for j in pipeline_status(caught_up, [D1]).jobs if j.behind}
    # The rerun: started and finished, as every ingest does.
    rerun = [
        *caught_up,
        DayRecord(INGEST_WRITING, D1, 5, _at(5)),
        DayRecord("ingest", D1, 5, _at(6)),
    ]
    assert unfinished_ingests(rerun) == {}
    assert behind_days(rerun, "episodes") == {D1: "bronze v5 is newer than v4"}
    # Killed before any ingest record of the day, on a fresh warehouse: not "unrecorded".
    fresh = pipeline_status([DayRecord(INGEST_WRITING, D2, 1, _at(1))], in_bronze=[D2])
    assert fresh.unrecorded_bronze_days == () and not fresh.up_to_date
    # An ingest that wrote nothing to bronze records the version it found, below its start's.
    nothing_written = [DayRecord(INGEST_WRITING, D3, 8, _at(1)), DayRecord("ingest", D3, 7, _at(2))]
    assert unfinished_ingests(nothing_written) == {}
    assert behind_days(nothing_written, "episodes") == {D3: "never processed"}


def test_a_refusal_is_its_own_kind_of_failure_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(failures.LOG_DIR_ENV_VAR, str(tmp_path))
    error = StaleInputError("episodes is behind bronze on 2026-03-02")
    rule = failures.rule_for(error)
    assert (rule.kind, rule.exit_code) == ("input behind bronze", 65)
    line = failures.failure_line("daily_metrics", error, None)
    assert line.startswith(
        "error: daily_metrics: input behind bronze: episodes is behind bronze on 2026-03-02: "
        "nothing was written; run the job named over those days first"
    )


@pytest.mark.spark
def test_daily_metrics_refuses_days_whose_episodes_are_behind_and_status_names_them(
    spark: Any, pipeline_conf: Any, tmp_path: Path
) -> None:
    """Killed after ingest: daily_metrics alone must not compute the day from missing episodes
    (one line, exit 65, nothing written), and ``flowctl status`` names the day for both jobs."""
    from typer.testing import CliRunner

    from flowctl.cli import app
    from jobs.daily_metrics import run_daily_metrics
    from jobs.delta_io import read_table
    from jobs.ingest import run_ingest
    from jobs.pipeline_state import read_records
    from schemas.tables import QUEUE_FLOW_DAILY
    from tests.conftest import at, event, write_raw

    _, conf = pipeline_conf(validate=False)
    write_raw(tmp_path / "raw", [event(1, at(1, 9), "queue_declared", queue="q", depth_msgs=0)])
    day = date(2024, 1, 1)
    run_ingest(spark, conf, day, day)
    with pytest.raises(StaleInputError, match=r"^episodes is behind bronze on 2024-01-01$"):
        run_daily_metrics(spark, conf, day, day)
    assert read_table(spark, conf, QUEUE_FLOW_DAILY).count() == 0
    assert sorted(r.job for r in read_records(spark, conf)) == ["ingest", INGEST_WRITING]

    shown = CliRunner().invoke(
        app, ["status", "--warehouse", conf.warehouse_dir, "--check"], terminal_width=200
    )
    assert shown.exit_code == 1, shown.output
    assert "behind: episodes 2024-01-01: never processed" in shown.output
    assert "behind: daily_metrics 2024-01-01: never processed" in shown.output


@pytest.mark.spark
def test_an_ingest_killed_after_its_bronze_commit_is_behind_and_the_next_night_catches_up(
    spark: Any, pipeline_conf: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash audit's case on Delta tables: ingest of day 1 dies after its bronze commit,
    before the quarantine and its record. `flowctl status --check` must say so (exit 1, naming
    ingest and the later jobs), the next night's episodes and daily_metrics process day 1 from
    bronze first, and a rerun of ingest over day 1 clears it."""
    from typer.testing import CliRunner

    from flowctl.cli import app
    from jobs import ingest_write
    from jobs.daily_metrics import run_daily_metrics
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest
    from tests.conftest import at, event, write_raw

    _, conf = pipeline_conf(validate=False)
    day1, day2 = date(2024, 1, 1), date(2024, 1, 2)
    write_raw(
        tmp_path / "raw",
        [
            event(1, at(1, 9), "queue_declared", queue="q", depth_msgs=0),
            event(2, at(2, 9), "queue_declared", queue="q2", depth_msgs=0),
        ],
    )

    def killed(*_: Any, **__: Any) -> int:
        raise KeyboardInterrupt("killed after the bronze commit")

    with monkeypatch.context() as patched:
        patched.setattr(ingest_write, "write_quarantine", killed)
        with pytest.raises(KeyboardInterrupt):
            run_ingest(spark, conf, day1, day1)

    def status() -> Any:
        return CliRunner().invoke(
            app, ["status", "--warehouse", conf.warehouse_dir, "--check"], terminal_width=200
        )

    shown = status()
    assert shown.exit_code == 1, shown.output
    assert "behind: ingest 2024-01-01: started writing it at " in shown.output
    assert "behind: episodes 2024-01-01: never processed" in shown.output
    assert "without a record" not in shown.output  # not "ingested before the state existed"
    # The next night: day 2 alone; the later jobs process day 1 first, from bronze.
    run_ingest(spark, conf, day2, day2)
    assert run_episodes(spark, conf, day2, day2)["caught_up"] == "2024-01-01"
    run_daily_metrics(spark, conf, day2, day2)
    shown = status()
    assert shown.exit_code == 1 and "behind: ingest 2024-01-01" in shown.output
    assert "behind: episodes" not in shown.output and "behind: daily_metrics" not in shown.output
    # The rerun of day 1's ingest finishes it; the later jobs are behind on its new version.
    run_ingest(spark, conf, day1, day1)
    shown = status()
    assert "behind: ingest" not in shown.output
    assert "behind: episodes 2024-01-01: bronze v" in shown.output

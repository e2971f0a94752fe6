"""The pipeline state (jobs/pipeline_state.py): which days each job is behind bronze on, what a job
processes first, and what it refuses. The crash-then-later-days case on real Delta tables is in
tests/test_processing_order.py, beside the other processing orders it must equal."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs import failures
from jobs.pipeline_state import (
    DAILY_METRICS_LATER_DAYS,
    INGEST_WRITING,
    RECOMMEND_STARTED,
    DayRecord,
    StaleInputError,
    behind_days,
    contiguous_ranges,
    days_text,
    earlier_days_behind,
    later_days_to_redo,
    later_days_version,
    pipeline_status,
    stale_inputs,
    unfinished_ingests,
)

D1, D2, D3, D4, D5 = (date(2026, 3, day) for day in range(1, 6))
D6, D7, D8 = (date(2026, 3, day) for day in range(6, 9))


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
    assert [job.job for job in status.jobs] == ["ingest", "episodes", "daily_metrics", "recommend"]
    assert (by_job["ingest"].days, by_job["ingest"].first, by_job["ingest"].last) == (2, D2, D3)
    assert by_job["episodes"].behind == {}
    assert by_job["daily_metrics"].behind == {D3: "never processed"}
    # Recommendations are optional: never run, nothing of theirs is behind.
    assert (by_job["recommend"].days, by_job["recommend"].behind) == (0, {})
    assert status.unrecorded_bronze_days == (D1,)
    assert not status.up_to_date
    caught_up = pipeline_status([*records, DayRecord("daily_metrics", D3, 2)], [D2, D3])
    assert caught_up.up_to_date and caught_up.unrecorded_bronze_days == ()


def _recommended(day: date, version: int, window_days: int = 3) -> DayRecord:
    """recommend's record of ``day``: read bronze v``version`` over a look-back of the days."""
    return DayRecord("recommend", day, version, evidence_from=day - timedelta(window_days - 1))


def test_a_recommendation_is_behind_when_a_day_of_its_look_back_is_written_again() -> None:
    """The crash audit's leftover: a day processed out of order (or a raw file added to it) left
    the advice of the next days, whose look-back window holds it, as it was, and `status` silent.
    Here D2 is ingested again (v9) after the advice of D2..D5 was made from v5."""
    ingested = [DayRecord("ingest", day, n) for n, day in enumerate([D1, D2, D3, D4, D5], 1)]
    advice = [_recommended(day, 5) for day in [D1, D2, D3, D4, D5]]
    assert behind_days([*ingested, *advice], "recommend") == {}
    again = [*ingested, *advice, DayRecord("ingest", D2, 9)]
    # D2..D4 hold D2 in their 3-day look-back; D1 (before it) and D5 (D3..D5) do not.
    look_back = "bronze v9 of 2026-03-02 (in its look-back from {}) is newer than v5"
    assert behind_days(again, "recommend") == {
        day: look_back.format(day - timedelta(2)) for day in [D2, D3, D4]
    }
    # A run over D2 redoes D3 and D4 after it; one over D5 first processes D2..D4.
    assert later_days_to_redo(again, "recommend", D2) == [D3, D4]
    assert earlier_days_behind(again, "recommend", D5) == [D2, D3, D4]
    # Redone from v9: up to date again.
    redone = [*again, *(_recommended(day, 9) for day in [D2, D3, D4])]
    assert behind_days(redone, "recommend") == {}
    # An ingest killed in its write of D4 counts at the version its write would make.
    killed = [
        *redone,
        DayRecord("ingest", D4, 4, datetime(2026, 3, 8)),
        DayRecord(INGEST_WRITING, D4, 12, datetime(2026, 3, 9)),
    ]
    assert list(behind_days(killed, "recommend")) == [D4, D5]


def test_a_recommendation_is_behind_when_daily_metrics_recomputed_its_window_as_later_days() -> (
    None
):
    """A day before the look-back window, processed again, changes the state its runs carry into
    the window (a queue's declaration with its thresholds): daily_metrics recomputes the runs'
    later days and records them, and the advice reading them is behind."""
    records = [
        *(DayRecord("ingest", day, 1) for day in [D1, D2, D3, D4, D5, D6]),
        *(_recommended(day, 1) for day in [D4, D5, D6]),
        DayRecord("ingest", D1, 4),
        DayRecord("daily_metrics", D1, 4),
        # The runs of D1 go on to D5: their rows of D2..D5 recomputed from v4.
        *(DayRecord(DAILY_METRICS_LATER_DAYS, day, 4) for day in [D2, D3, D4, D5]),
    ]
    behind = behind_days(records, "recommend")
    assert list(behind) == [D4, D5, D6]  # D6's window D4..D6 holds D4 and D5
    assert (
        behind[D6] == "bronze v4 of 2026-03-04 (in its look-back from 2026-03-04) is newer than v1"
    )
    # The markers are recommend's evidence only: daily_metrics itself is not behind on D2..D5.
    assert behind_days(records, "daily_metrics") == {
        day: "never processed" for day in [D2, D3, D4, D5, D6]
    }


def test_the_days_recommend_never_processed_count_after_its_latest() -> None:
    """Recommendations are optional (`flowctl pipeline --no-recommend`, one day of the past
    recommended on its own), and a warehouse from before recommend was recorded has none: only
    the days after its latest are behind when it never processed them (a night killed before
    recommend), and those are caught up by a later day's run, never redone by an earlier one's.
    A review's case: recommending one old day again made every day of the gap behind it."""
    ingested = [DayRecord("ingest", day, 1) for day in [D1, D2, D3, D4, D5, D6, D7, D8]]
    assert behind_days(ingested, "recommend") == {}
    records = [*ingested, _recommended(D3, 1), _recommended(D5, 1)]
    assert behind_days(records, "recommend") == {day: "never processed" for day in [D6, D7, D8]}
    assert later_days_to_redo(records, "recommend", D3) == []
    assert earlier_days_behind(records, "recommend", D8) == [D6, D7]
    # D8 recommended: the gaps (D1, D2, D4, D6, D7) are nobody's to fill.
    assert behind_days([*records, _recommended(D8, 1)], "recommend") == {}
    # The other jobs redo no later days: their scope recomputes them (jobs/scope.py).
    assert later_days_to_redo([*ingested, DayRecord("episodes", D1, 0)], "episodes", D1) == []


def test_a_first_night_killed_in_recommend_leaves_its_days_behind() -> None:
    """A review killed the first night in recommend (after its day rollup, before its
    recommendations): with no recommend record at all, the warehouse read as one that does
    without recommendations, `flowctl status --check` passed and no later night caught the day
    up. Recommend records the days it starts first; a day started and never processed is
    behind, and the next night's run processes it first."""
    ingested = [DayRecord("ingest", day, 1) for day in [D1, D2]]
    killed = [*ingested, DayRecord(RECOMMEND_STARTED, D1, 1)]
    assert behind_days(ingested, "recommend") == {}  # recommendations are optional
    assert behind_days(killed, "recommend") == {D1: "never processed"}
    assert earlier_days_behind(killed, "recommend", D2) == [D1]
    assert not pipeline_status(killed, []).up_to_date
    # Processed since (the marker stays): D1 is up to date; D2, after it, behind as before.
    assert behind_days([*killed, _recommended(D1, 1)], "recommend") == {D2: "never processed"}
    assert behind_days([*killed, _recommended(D1, 1), _recommended(D2, 1)], "recommend") == {}
    # A day started but not ingested (since deleted from bronze by hand) is nobody's to redo.
    assert behind_days([*ingested, DayRecord(RECOMMEND_STARTED, D3, 1)], "recommend") == {}


def test_recommend_records_the_days_it_starts_before_computing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobs import pipeline_state

    written: list[tuple[str, date, date, int]] = []
    monkeypatch.setattr(pipeline_state, "bronze_version", lambda spark, conf: 7)

    def record(spark: Any, conf: Any, job: str, first: date, last: date, version: int,
               evidence_from: Any = None) -> None:  # fmt: skip
        written.append((job, first, last, version))

    monkeypatch.setattr(pipeline_state, "record_processed", record)

    def process(spark: Any, conf: Any, first: date, last: date) -> dict[str, Any]:
        assert written == [(RECOMMEND_STARTED, D1, D2, 7)]  # before the computing
        return {"rows": 1}

    pipeline_state._process_and_record(None, None, "recommend", process, D1, D2, None)  # type: ignore[arg-type]
    assert written == [(RECOMMEND_STARTED, D1, D2, 7), ("recommend", D1, D2, 7)]


def test_the_later_days_are_marked_at_the_version_of_the_change_that_made_them() -> None:
    """A review's case: daily_metrics rerun over a day with nothing new in bronze marked the later
    days at the version it read, newer than the advice's, and recommend redid them for nothing."""
    records = [DayRecord("ingest", D1, 3), DayRecord("ingest", D2, 5), DayRecord("ingest", D3, 2)]
    assert later_days_version(records, D1, D1, version_read=9) == 3
    assert later_days_version(records, D1, D3, version_read=9) == 5
    assert later_days_version(records, D1, D2, version_read=4) == 4  # never past what it read
    assert later_days_version(records, D4, D5, version_read=9) is None
    rerun = [
        *records,
        _recommended(D2, 5),  # read v5: after ingest wrote D1 (v3) and D2 (v5)
        DayRecord(DAILY_METRICS_LATER_DAYS, D2, later_days_version(records, D1, D1, 9) or 0),
    ]
    assert D2 not in behind_days(rerun, "recommend")
    # Had ingest written D1 again since (v8), its mark would make D2's advice behind.
    again = [*records, _recommended(D2, 5), DayRecord("ingest", D1, 8)]
    marked = later_days_version(again, D1, D1, 9)
    assert marked == 8
    assert D2 in behind_days([*again, DayRecord(DAILY_METRICS_LATER_DAYS, D2, marked)], "recommend")


def test_daily_metrics_marks_the_later_days_before_it_records_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review's case: killed between its own record and the marker, daily_metrics was up to
    date and nothing said the later days were recomputed, so their advice stayed stale. The
    marker goes first: a kill after it leaves daily_metrics behind, and recommend refused."""
    from jobs import pipeline_state

    written: list[tuple[str, date, date, int]] = []
    monkeypatch.setattr(pipeline_state, "bronze_version", lambda spark, conf: 7)
    monkeypatch.setattr(
        pipeline_state, "read_records", lambda spark, conf: [DayRecord("ingest", D1, 6)]
    )

    def record(spark: Any, conf: Any, job: str, first: date, last: date, version: int,
               evidence_from: Any = None) -> None:  # fmt: skip
        written.append((job, first, last, version))

    monkeypatch.setattr(pipeline_state, "record_processed", record)

    def process(spark: Any, conf: Any, first: date, last: date) -> dict[str, Any]:
        return {"rows": 1, "span_to": D4}

    report = pipeline_state._process_and_record(None, None, "daily_metrics", process, D1, D1, None)  # type: ignore[arg-type]
    assert report == {"rows": 1}
    assert written == [(DAILY_METRICS_LATER_DAYS, D2, D4, 6), ("daily_metrics", D1, D1, 7)]


def test_recommend_is_refused_while_a_job_it_reads_is_behind_on_any_day_up_to_its_last() -> None:
    """Its look-back, and the state daily metrics carry into it, reach back before its range."""
    records = [
        *(DayRecord("ingest", day, 2) for day in [D1, D2, D3]),
        *(DayRecord("episodes", day, 2) for day in [D1, D2, D3]),
        DayRecord("daily_metrics", D2, 2),
        DayRecord("daily_metrics", D3, 2),
    ]
    assert stale_inputs(records, "recommend", [D3]) == (
        "daily_metrics is behind bronze on 2026-03-01"
    )
    assert stale_inputs([*records, DayRecord("daily_metrics", D1, 2)], "recommend", [D3]) is None


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
    ingest and the later jobs). The next night's ingest ingests day 1 again first (its
    quarantine, accounting and Great Expectations had never run, and the night said nothing: a
    review), and its episodes and daily_metrics process day 1 first."""
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
    # The next night: day 2 alone; ingest does day 1 again first, the later jobs process it first.
    night = run_ingest(spark, conf, day2, day2)
    assert night["caught_up"] == "2024-01-01" and night["balanced"]
    shown = status()
    assert "behind: ingest" not in shown.output
    assert "behind: episodes 2024-01-01: never processed" in shown.output
    assert run_episodes(spark, conf, day2, day2)["caught_up"] == "2024-01-01"
    run_daily_metrics(spark, conf, day2, day2)
    shown = status()
    assert shown.exit_code == 0, shown.output
    # A night after it has nothing to catch up.
    assert "caught_up" not in run_ingest(spark, conf, day2, day2)


@pytest.mark.spark
def test_a_day_processed_again_redoes_the_recommendations_whose_look_back_holds_it(
    spark: Any, pipeline_conf: Any, tmp_path: Path
) -> None:
    """The crash audit's leftover on Delta tables: a raw file added to day 1 after days 1-3
    were processed (a run whose queue qz stopped on day 1). Recommendations as of days 1 and 2
    read day 1 (a 2-day look-back), and day 3's reads days 2-3, whose rows of run r2 (going from
    day 1 to 3) daily_metrics recomputed: `status` names all three, and recommend over day 1
    redoes days 2-3 after it. The new run adds its queue's rows to days 1 and 2 and changes no
    other row: r2's days recomputed hold what they held (a fresh computation of the redone days,
    which this test made before, wrote the same rows and cost two recommend days more).

    Days 1-3 are processed in one range: the state records each day of a range as a night
    records it (tests/test_processing_order.py holds nights and ranges to the same tables; it
    runs no recommend), and three nights cost this test two more calls of each job."""
    import dataclasses

    from typer.testing import CliRunner

    from flowctl.cli import app
    from jobs.daily_metrics import run_daily_metrics
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest
    from jobs.pipeline_state import read_records, read_status
    from jobs.recommend import load_policy, recommendations_path, run_recommend
    from tests.conftest import at, event, write_raw
    from tests.test_processing_order import _run_crossing_midnights

    _, conf = pipeline_conf(validate=False)
    policy = dataclasses.replace(load_policy(), lookback_days=2)
    raw = Path(conf.raw_dir)
    rows = _run_crossing_midnights()
    for run in ("r2", "r3"):
        write_raw(raw, [dict(r) for r in rows if r["run_id"] == run])
    days = [date(2024, 1, n) for n in (1, 2, 3)]
    for job in (run_ingest, run_episodes, run_daily_metrics):
        job(spark, conf, days[0], days[-1])
    run_recommend(spark, conf, days[0], days[-1], policy)
    assert read_status(spark, conf).up_to_date

    def queues_by_day() -> dict[date, set[str]]:
        table = spark.read.format("delta").load(recommendations_path(conf))
        found: dict[date, set[str]] = {}
        for row in table.where("queue IS NOT NULL").select("date", "queue").collect():
            found.setdefault(row.date, set()).add(row.queue)
        return found

    def table_rows() -> list[dict[str, Any]]:
        table = spark.read.format("delta").load(recommendations_path(conf))
        return sorted((row.asDict() for row in table.collect()), key=str)

    assert not any("qz" in queues for queues in queues_by_day().values())
    before = table_rows()

    late = {"run_id": "late", "queue": "qz", "flow_stop_count": 2, "flow_resume_count": 1}
    write_raw(
        raw,
        [
            event(1, at(1, 10), "enqueue", **late, depth_msgs=3, link="pz", capacity=1),
            event(2, at(1, 10), "flow_stopped", **late, depth_msgs=3, flow_stopped_count=1),
            event(3, at(1, 11), "flow_resumed", **late, depth_msgs=0, flow_stopped_count=1),
        ],
    )
    run_ingest(spark, conf, days[0], days[0])
    run_episodes(spark, conf, days[0], days[0])
    run_daily_metrics(spark, conf, days[0], days[0])
    later = sorted(r.day for r in read_records(spark, conf) if r.job == DAILY_METRICS_LATER_DAYS)
    assert later == days[1:]  # r2's days after day 1, recomputed

    recommend = next(job for job in read_status(spark, conf).jobs if job.job == "recommend")
    assert list(recommend.behind) == days
    assert "of 2024-01-01 (in its look-back from 2024-01-01)" in recommend.behind[days[1]]
    assert "of 2024-01-02 (in its look-back from 2024-01-02)" in recommend.behind[days[2]]
    shown = CliRunner().invoke(
        app, ["status", "--warehouse", conf.warehouse_dir, "--check"], terminal_width=200
    )
    assert shown.exit_code == 1, shown.output
    assert "behind: recommend 2024-01-03: bronze v" in shown.output

    report = run_recommend(spark, conf, days[0], days[0], policy)
    assert report["redone"] == "2024-01-02..2024-01-03"
    assert read_status(spark, conf).up_to_date
    queues = queues_by_day()
    assert "qz" in queues[days[0]] and "qz" in queues[days[1]]  # day 2 looks back to day 1
    assert "qz" not in queues[days[2]]
    redone = table_rows()
    assert [row for row in redone if row["queue"] != "qz"] == before

    # Day 1 is qz's only day in both look-backs: its rows as of days 1 and 2 say the same.
    def qz_as_of(day: date) -> list[dict[str, Any]]:
        rows = (r for r in redone if r["queue"] == "qz" and r["date"] == day)
        return [{k: v for k, v in r.items() if k not in ("date", "window_from")} for r in rows]

    assert qz_as_of(days[0]) and qz_as_of(days[1]) == qz_as_of(days[0])


@pytest.mark.parametrize("outcome", ["ingested", "refused", "failed"])
def test_the_unfinished_days_ingested_first_never_stop_the_asked_ones(
    monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """A review of the catch-up: it passed --allow-empty-days, meant for the asked days, to the
    unfinished ones (whose raw files retention may have removed: their bronze replaced with
    nothing), and a refusal of theirs stopped the night, and so every night after it. Now: never
    with allow_empty_days; refused, they stay behind with a warning and the asked days are
    ingested; failed (accounting, Great Expectations), the asked days are ingested and the run
    fails, as for its own days."""
    from jobs import ingest
    from jobs.ingest_refusals import IngestRefused

    calls: list[tuple[date, date, bool]] = []

    def ingest_days(spark: Any, conf: Any, first: date, last: date, raw_dir: Any = None, *,
                    allow_empty_days: bool = False) -> dict[str, Any]:  # fmt: skip
        calls.append((first, last, allow_empty_days))
        if first == D1 and outcome == "refused":
            raise IngestRefused("no raw files for 2026-03-01")
        return {"balanced": not (first == D1 and outcome == "failed")}

    monkeypatch.setattr(ingest, "ingest_days", ingest_days)
    monkeypatch.setattr(
        ingest, "read_records", lambda spark, conf: [DayRecord(INGEST_WRITING, D1, 2)]
    )
    report = ingest.run_ingest(None, None, D5, D5, allow_empty_days=True)  # type: ignore[arg-type]
    assert calls == [(D1, D1, False), (D5, D5, True)]
    assert report["caught_up"] == "2026-03-01"
    assert report.get("caught_up_refused") == ("2026-03-01" if outcome == "refused" else None)
    assert report.get("caught_up_failed") == ("2026-03-01" if outcome == "failed" else None)
    assert ingest.ingest_succeeded(report) == (outcome != "failed")


@pytest.mark.parametrize("stop", [ValueError("a bug"), KeyboardInterrupt()])
def test_a_recommend_run_that_fails_forgets_it_started_and_a_killed_one_does_not(
    monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    """A review: a day whose recommend fails every time (a bug its data meets), left started,
    was redone first by every later run and stopped each. A failure forgets the mark; a kill
    (Ctrl-C here; SIGKILL runs no code) leaves it, so the next night catches the days up."""
    from jobs import pipeline_state

    forgotten: list[tuple[str, date, date]] = []
    monkeypatch.setattr(pipeline_state, "bronze_version", lambda spark, conf: 7)
    monkeypatch.setattr(pipeline_state, "record_processed", lambda *args, **kwargs: None)
    monkeypatch.setattr(
        pipeline_state,
        "forget_recorded",
        lambda spark, conf, job, first, last: forgotten.append((job, first, last)),
    )

    def process(spark: Any, conf: Any, first: date, last: date) -> dict[str, Any]:
        raise stop

    with pytest.raises(type(stop)):
        pipeline_state._process_and_record(None, None, "recommend", process, D1, D2, None)  # type: ignore[arg-type]
    killed = isinstance(stop, KeyboardInterrupt)
    assert forgotten == ([] if killed else [(RECOMMEND_STARTED, D1, D2)])

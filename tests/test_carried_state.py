"""A nightly run reads the state carried into its span, not the run's earlier days (issue 22).

The episodes and daily_metrics jobs compute a span from silver ``carried_events`` (the events that
carry each run's state over a day's end, jobs/transforms/carry.py) plus the span's bronze days. A
run lasting four days, its first three processed, then the fourth with the first day's bronze
files gone (a read of them would fail), must give the tables of one range run over the four days;
so must a warehouse whose carried rows are missing (processed before they were kept), which reads
whole runs.
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs.daily_metrics import run_daily_metrics
from jobs.delta_io import read_table, table_path
from jobs.episodes import depth_timeline_path, run_episodes
from jobs.ingest import run_ingest
from jobs.transforms.blocking import blocking_episodes
from jobs.transforms.carry import carried_events
from jobs.transforms.daily import link_starvation_daily
from jobs.transforms.episodes import link_starvation_episodes, run_bounds
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    BRONZE_BROKER_EVENTS,
    CARRIED_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from tests.conftest import at, event, scratch_conf, write_raw

pytestmark = pytest.mark.spark

DAYS = [date(2024, 1, 1) + timedelta(days=n) for n in range(4)]
COMPARED = (
    QUEUE_FLOW_EPISODES,
    LINK_STARVATION_EPISODES,
    BLOCKING_EPISODES,
    QUEUE_FLOW_DAILY,
    LINK_STARVATION_DAILY,
    BLOCKING_DAILY,
)

Q1 = {"queue": "q1"}
P1 = {"queue": "q1", "link": "p1", "capacity": 4}
C1 = {"link": "c1", "link_role": "consumer"}


def four_day_run() -> list[dict[str, Any]]:
    """Run r1, day 1 12:00 to day 4 18:00, and what each night must carry:

    - q1's thresholds (stop 8, resume 4) are set once on day 1 and never logged again;
    - q1 stops on day 1 23:00 and resumes on day 2; it stops again on day 3 at 00:00:01, its
      trigger the last enqueue of day 2 (23:59:59), and resumes on day 3 06:00;
    - message 7, enqueued on day 2 23:30, completes held on day 3 01:30 (2 h);
    - consumer c1 attaches on day 1 and starves from day 1 22:00 to day 3 02:00;
    - connection conn1 is blocked from day 2 20:00 to day 3 04:00;
    - qidle is declared on day 1 and idle after: a row on every day.

    Run r2 lives on day 4 only."""
    rows = [
        event(1, at(1, 12), "queue_declared", **Q1, depth_msgs=0, flow_stopped_count=0,
              flow_stop_count=10, flow_resume_count=5),
        event(2, at(1, 12, 0, 1), "queue_declared", queue="qidle", depth_msgs=0,
              flow_stopped_count=0),
        event(3, at(1, 12, 0, 1), "link_attached", **C1, credit=5, available=0),
        event(4, at(1, 13), "thresholds_changed", **Q1, flow_stop_count=8, flow_resume_count=4),
        event(5, at(1, 22), "flow", **C1, credit=0, available=3),
        event(6, at(1, 23), "enqueue", **P1, depth_msgs=7, flow_stopped_count=0),
        event(7, at(1, 23, 0, 1), "enqueue", **P1, depth_msgs=8, flow_stopped_count=0),
        event(8, at(1, 23, 0, 2), "enqueue", **P1, depth_msgs=9, flow_stopped_count=0),
        event(9, at(1, 23, 0, 2), "flow_stopped", **Q1, depth_msgs=9, flow_stopped_count=1),
        event(10, at(2, 10), "dequeue", **Q1, depth_msgs=4, flow_stopped_count=1),
        event(11, at(2, 10, 0, 1), "flow_resumed", **Q1, depth_msgs=4, flow_stopped_count=1),
        event(12, at(2, 20), "connection_blocked", connection="conn1", protocol="amqp-0-9-1",
              detail='{"reason": "memory"}'),
        event(13, at(2, 23, 30), "enqueue", **P1, message_id=7, depth_msgs=5),
        event(14, at(2, 23, 59, 59), "enqueue", **P1, message_id=8, depth_msgs=9),
        event(15, at(3, 0, 0, 1), "flow_stopped", **Q1, depth_msgs=9, flow_stopped_count=2),
        event(16, at(3, 1, 30), "transfer_completed", link="p1", message_id=7,
              latency_us=7_200_000_000),
        event(17, at(3, 2), "flow", **C1, credit=5, available=3),
        event(18, at(3, 4), "connection_unblocked", connection="conn1", protocol="amqp-0-9-1"),
        event(19, at(3, 6), "dequeue", **Q1, depth_msgs=3),
        event(20, at(3, 6, 0, 1), "flow_resumed", **Q1, depth_msgs=3, flow_stopped_count=2),
        event(21, at(4, 9), "enqueue", **P1, message_id=9, depth_msgs=4),
        event(22, at(4, 18), "dequeue", **Q1, depth_msgs=3),
    ]  # fmt: skip
    q9 = {"run_id": "r2", "queue": "q9"}
    rows += [
        event(1, at(4, 8), "queue_declared", **q9, flow_stop_count=2, flow_resume_count=1,
              depth_msgs=0, flow_stopped_count=0),
        event(2, at(4, 8, 1), "enqueue", **q9, link="p9", capacity=1, depth_msgs=3),
        event(3, at(4, 8, 1), "flow_stopped", **q9, depth_msgs=3, flow_stopped_count=1),
        event(4, at(4, 8, 5), "dequeue", **q9, depth_msgs=2),
    ]  # fmt: skip
    return rows


def tables_of(spark: Any, conf: Any) -> dict[str, list[dict[str, Any]]]:
    """Silver and gold as sorted rows, every column compared (a closed episode carries no
    watermark, so one that a later night does not rewrite is the same row as a range run's)."""
    tables = {}
    for table in COMPARED:
        rows = [r.asDict() for r in read_table(spark, conf, table).collect()]
        tables[table.name] = sorted(rows, key=lambda r: tuple(str(v) for v in r.values()))
    timeline = spark.read.format("delta").load(depth_timeline_path(conf)).collect()
    tables["queue_depth_timeline"] = sorted(
        (r.asDict() for r in timeline), key=lambda r: tuple(str(v) for v in r.values())
    )
    return tables


@pytest.fixture(scope="module")
def outcomes(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tables of one run over the four days, of night after night (day 1's bronze files
    removed before the fourth night), and of a copy whose carried rows were dropped before it."""

    root = tmp_path_factory.mktemp("carried")
    rows = four_day_run()
    for run in ("r1", "r2"):
        write_raw(root / "raw", [dict(r) for r in rows if r["run_id"] == run])

    results: dict[str, Any] = {"reads": {}}
    # Both warehouses ingest the four days: one ingest, copied (its log's paths are relative).
    nightly = scratch_conf(root, "nightly")
    run_ingest(spark, nightly, DAYS[0], DAYS[-1])
    whole = scratch_conf(root, "range")
    shutil.copytree(root / "nightly", root / "range")
    run_episodes(spark, whole, DAYS[0], DAYS[-1])
    run_daily_metrics(spark, whole, DAYS[0], DAYS[-1])
    results["range"] = tables_of(spark, whole)
    # The same range with each job's tables written in turn, not from two threads at once.
    in_turn = dataclasses.replace(scratch_conf(root, "in_turn"), concurrent_jobs=1)
    shutil.copytree(root / "nightly", root / "in_turn")
    run_episodes(spark, in_turn, DAYS[0], DAYS[-1])
    run_daily_metrics(spark, in_turn, DAYS[0], DAYS[-1])
    results["in_turn"] = tables_of(spark, in_turn)

    # Days 1-3 processed (as one range: the carried rows are the same as night after night's,
    # tests/test_processing_order.py compares those), then the fourth night.
    results["reads"]["first"] = run_episodes(spark, nightly, DAYS[0], DAYS[2])["read"]
    run_daily_metrics(spark, nightly, DAYS[0], DAYS[2])
    legacy = scratch_conf(root, "legacy")
    shutil.copytree(root / "nightly", root / "legacy")
    shutil.rmtree(table_path(legacy, CARRIED_EVENTS))
    bronze_day1 = Path(table_path(nightly, BRONZE_BROKER_EVENTS), f"date={DAYS[0].isoformat()}")
    assert any(bronze_day1.glob("*.parquet"))
    shutil.rmtree(bronze_day1)
    results["reads"]["last"] = run_episodes(spark, nightly, DAYS[3], DAYS[3])["read"]
    results["daily_read"] = run_daily_metrics(spark, nightly, DAYS[3], DAYS[3])["read"]
    results["nightly"] = tables_of(spark, nightly)
    results["carried"] = sorted(
        (r.carried_to, r.run_id, r.seq)
        for r in read_table(spark, nightly, CARRIED_EVENTS).collect()
    )

    results["legacy_read"] = run_episodes(spark, legacy, DAYS[3], DAYS[3])["read"]
    run_daily_metrics(spark, legacy, DAYS[3], DAYS[3])
    results["legacy"] = tables_of(spark, legacy)
    return results


def assert_four_day_run_tables(tables: dict[str, list[dict[str, Any]]]) -> None:
    """:func:`four_day_run`'s tables as derived by hand: q1's episodes with the thresholds set
    on day 1, the held transfer, qidle's idle days, c1's starvation and conn1's blocking."""
    episodes = {e["start_seq"]: e for e in tables["queue_flow_episodes"]}
    # Stopped at 9 > 8 (thresholds of seq 4), then at seq 15 whose trigger is seq 14 (day 2).
    assert {(s, e["flow_stop_count"], e["end_seq"]) for s, e in episodes.items()} == {
        (9, 8, 11),
        (15, 8, 20),
        (3, 2, None),  # r2's q9, open at its watermark
    }
    assert episodes[15]["overshoot_bound_msgs"] == 4  # p1, the trigger's producer
    daily = {(r["queue"], r["date"]): r for r in tables["queue_flow_daily"]}
    assert daily[("q1", DAYS[2])]["held_completions"] == 1
    assert daily[("q1", DAYS[2])]["completion_max_us"] == 7_200_000_000
    assert daily[("q1", DAYS[2])]["flow_stopped_counter_delta"] == 1
    assert [daily[("qidle", d)]["observed_s"] for d in DAYS] == [43200.0, 86400.0, 86400.0, 64800.0]
    starved = {r["date"]: r["starved_s"] for r in tables["link_starvation_daily"]}
    assert [starved[d] for d in DAYS[:3]] == [7200.0, 86400.0, 7200.0]
    blocked = {r["date"]: r["blocked_s"] for r in tables["blocking_daily"]}
    assert blocked == {DAYS[1]: 14400.0, DAYS[2]: 14400.0}


def test_the_range_run_has_what_design_defines(outcomes):
    assert_four_day_run_tables(outcomes["range"])


def test_tables_written_in_turn_are_those_written_at_once(outcomes):
    # The range run's conf, the bundled one, writes each job's tables from several threads.
    assert scratch_conf(Path("unused")).concurrent_jobs > 1
    assert outcomes["in_turn"] == outcomes["range"]


def test_night_after_night_reads_the_carried_state_and_gives_the_range_tables(outcomes):
    reads = outcomes["reads"]
    # Days 1-3 with bronze through day 4: the span reaches forward to the runs' later days.
    assert reads["first"] == "carried state + span (2024-01-01..2024-01-04)"
    # The fourth night starts at the run's latest day before it (its rows were computed against
    # an earlier watermark), from the rows carried to day 2; day 1's bronze files are gone, and a
    # read of them would have failed the job.
    assert reads["last"] == "carried state + span (2024-01-03..2024-01-04)"
    assert outcomes["daily_read"] == "carried state + span (2024-01-03..2024-01-04)"
    for name, rows in outcomes["range"].items():
        assert outcomes["nightly"][name] == rows, name


def test_a_warehouse_without_carried_rows_reads_whole_runs(outcomes):
    assert outcomes["legacy_read"] == "whole runs (2024-01-03..2024-01-04)"
    for name, rows in outcomes["range"].items():
        assert outcomes["legacy"][name] == rows, name


def test_carried_rows_are_the_latest_of_each_kind(outcomes):
    """What day 2 carries of r1 into day 3: the run's first event (1) and last (14); q1's
    thresholds (4), flow state (11), counter (11), depth and last event (14); qidle's
    declaration (2); c1's attach (3) and credit (5); p1's last enqueue (14); conn1's block (12)."""
    carried = {seq for day, run, seq in outcomes["carried"] if (day, run) == (DAYS[1], "r1")}
    assert carried == {1, 2, 3, 4, 5, 11, 12, 14}


def test_carried_events_of_hand_built_events(spark: Any, make_events: Any) -> None:
    """Each day's rows are the latest of each kind up to that day's end."""
    rows = [r for r in four_day_run() if r["run_id"] == "r1" and r["ts"] < at(3)]
    events = make_events(rows)
    carried = carried_events(events, DAYS[0], DAYS[1]).collect()
    by_day = {
        day: sorted(r.seq for r in carried if r.carried_to == day) for day in (DAYS[0], DAYS[1])
    }
    # Day 1: q1's thresholds (4), its last event and flow state (9), c1's credit (5) and attach
    # (3), p1's last enqueue (8), qidle (2), the run's first event (1).
    assert by_day == {DAYS[0]: [1, 2, 3, 4, 5, 8, 9], DAYS[1]: [1, 2, 3, 4, 5, 11, 12, 14]}


def test_a_core_producers_role_logged_before_the_span_is_carried_into_it(
    spark: Any, make_events: Any
) -> None:
    """An Artemis CORE producer whose role is logged on its day-1 attach only is blocked on day 2
    (no byte credit, messages waiting) in the day-2 span, from the rows carried to day 1 plus
    day 2's events, as in the whole run: the attach that names its role is carried."""
    core = {"link": "pc", "protocol": "artemis-core"}
    rows = [
        event(1, at(1, 12), "link_attached", link_role="publisher", credit=1000, available=0,
              **core),
        event(2, at(1, 13), "queue_declared", queue="q"),
        event(3, at(2, 10), "transfer", credit=0, available=4, **core),
        event(4, at(2, 10, 0, 10), "flow", credit=4000, available=4, **core),
        event(5, at(2, 11), "queue_declared", queue="q2"),
    ]  # fmt: skip
    whole = make_events(rows)
    span = _span_from(make_events, rows, DAYS[1])
    assert _blocking(span) == _blocking(whole) == [("producer_window", "pc", 3, 4, 10.0)]


def _span_from(make_events: Any, rows: list[dict[str, Any]], day: date) -> Any:
    """The events a span starting on ``day`` reads: the rows carried to the day before, plus
    the events from ``day`` on."""
    before = make_events([r for r in rows if r["ts"] < at(day.day)])
    carried = carried_events(before, day - timedelta(days=1), day - timedelta(days=1))
    later = make_events([r for r in rows if r["ts"] >= at(day.day)])
    return carried.drop("carried_to").unionByName(later)


def _blocking(events: Any) -> list[tuple[Any, ...]]:
    found = blocking_episodes(events, run_bounds(events)).collect()
    return sorted((r.kind, r.entity, r.start_seq, r.end_seq, r.duration_s) for r in found)


def test_a_core_producers_state_is_carried_with_the_role_it_rests_on(
    spark: Any, make_events: Any
) -> None:
    """A CORE producer whose credit events log no role: its blocked state of day 1 rests on the
    role of an earlier flow, which is neither its latest role event nor its attach. Carried
    without it, the state read as no producer's, and the span opened a second episode on day 2
    (a review of the carry)."""
    core = {"link": "pc", "protocol": "artemis-core"}
    rows = [
        event(1, at(1, 9), "link_attached", credit=1000, available=0, **core),
        event(2, at(1, 10), "flow", link_role="publisher", credit=1000, available=0, **core),
        event(3, at(1, 11), "transfer", credit=0, available=5, **core),
        event(4, at(1, 12), "enqueue", queue="q", link_role="publisher", **core),
        event(5, at(2, 5), "transfer", credit=0, available=6, **core),
        event(6, at(2, 10), "flow", credit=4000, available=6, **core),
        event(7, at(3, 10), "flow", credit=4000, available=0, **core),
    ]  # fmt: skip
    whole = make_events(rows)
    span = _span_from(make_events, rows, DAYS[1])
    assert _blocking(span) == _blocking(whole) == [("producer_window", "pc", 3, 6, 82800.0)]


def test_a_re_attached_links_role_is_the_whole_runs_in_a_later_span(
    spark: Any, make_events: Any
) -> None:
    """A link seen before any attach (attached from its first event, without a role), given its
    role, detached and attached again without one: its re-attach takes the role logged before
    it. The span needs its first event, its detach and that role (a review of the carry: without
    the detach, the first event opened an interval the re-attach did not end)."""
    rows = [
        event(1, at(1, 9), "flow", link="l", credit=5, available=0),
        event(2, at(1, 10), "flow", link="l", link_role="publisher", credit=5, available=0),
        event(3, at(1, 11), "link_detached", link="l"),
        event(4, at(1, 12), "link_attached", link="l", credit=5, available=0),
        event(5, at(2, 10), "flow", link="l", credit=4, available=0),
        event(6, at(3, 10), "flow", link="l", credit=3, available=0),
    ]  # fmt: skip

    def daily(events: Any) -> list[tuple[Any, ...]]:
        bounds = run_bounds(events)
        starved = link_starvation_episodes(events, bounds)
        rows = link_starvation_daily(events, starved, bounds, DAYS[1], DAYS[2]).collect()
        return sorted((r.date, r.link, r.link_role, r.attached_s) for r in rows)

    whole = make_events(rows)
    span = _span_from(make_events, rows, DAYS[1])
    assert daily(span) == daily(whole)
    assert [role for _, _, role, _ in daily(whole)] == ["publisher", "publisher"]


def test_a_changed_bucket_width_asks_for_whole_runs(
    spark: Any, make_events: Any, pipeline_conf: Any
) -> None:
    """Buckets before a span cut with another width than the run's now must be cut again: the
    guard that sends the episodes job to whole runs. The width grows until a run has lasted a
    day; the nightly span covers a run that young, a range processed out of order may not."""
    from jobs.episodes import timeline_width_changed, write_depth_timeline
    from jobs.span_events import SpanEvents

    _, conf = pipeline_conf()
    events = make_events([r for r in four_day_run() if r["run_id"] == "r1"])
    day_one = events.where(f"date = DATE '{DAYS[0].isoformat()}'")
    # Day 1 alone: 12:00 to 23:00:02, 11 h, buckets of 200 s.
    write_depth_timeline(
        spark, conf, SpanEvents(day_one, False, DAYS[0], DAYS[0], ("r1",)), run_bounds(day_one)
    )

    def span(first: Any, state: Any) -> Any:
        return SpanEvents(events, True, first, DAYS[3], ("r1",), ("r1",), state)

    # r1 was 11 h old before day 3 (its state: day 1's events); its span is now 3 days: 5 minutes.
    assert timeline_width_changed(spark, conf, span(DAYS[2], day_one), run_bounds(events))
    assert not timeline_width_changed(spark, conf, span(DAYS[2], day_one), run_bounds(day_one))
    # A span from the run's first day has no buckets before it; nor has a run without history.
    assert not timeline_width_changed(spark, conf, span(DAYS[0], day_one), run_bounds(events))
    assert not timeline_width_changed(spark, conf, span(DAYS[2], None), run_bounds(events))
    # A run a day old before the span was cut at a day's width already: not read.
    older = events.where(f"date < DATE '{DAYS[2].isoformat()}'")
    assert not timeline_width_changed(spark, conf, span(DAYS[2], older), run_bounds(events))

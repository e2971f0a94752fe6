"""Silver and gold do not depend on the order in which days are processed (real Delta tables).

DESIGN §4: "The watermark of a run is its last event's `ts`" and "a queue that was stopped at
midnight is stopped from 00:00"; §5: "A rerun of a day replaces that day (idempotent)". The nightly
DAG processes one day at a time while runs are still going, and a backfill may go in any order, so
a day's rows must be refreshed when a neighbouring day of the same run arrives: the same tables
must come out of one run over the whole range, of day after day, and of the last day first.
"""

from __future__ import annotations

import shutil
from datetime import date, timedelta
from typing import Any

import pytest
from delta.tables import DeltaTable

from jobs.daily_metrics import run_daily_metrics
from jobs.delta_io import days_predicate, read_table, sql_string, table_path
from jobs.episodes import depth_timeline_path, run_episodes
from jobs.ingest import run_ingest
from jobs.pipeline_state import read_status
from jobs.scope import DAILY_TABLES, EPISODE_TABLES, Scope, _scope_sources, processing_scope
from schemas.tables import (
    BROKER_EVENTS_QUARANTINE,
    BRONZE_BROKER_EVENTS,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from tests.conftest import at, event, naive, scratch_conf, write_raw_runs

pytestmark = pytest.mark.spark

DAY1, DAY3 = date(2024, 1, 1), date(2024, 1, 3)
DAYS = [DAY1 + timedelta(days=n) for n in range(3)]
R2_R3 = ("r2", "r3")
#: Every table the three jobs write but the pipeline state (which records when each day was
#: processed), the depth timeline (read by its own path, _tables) and carried_events: a cache of
#: the state each night carries into the next, written up to the night's span, so a range run
#: also carries runs that ended before its last day where nightly runs leave them alone
#: (tests/test_carried_state.py checks what is read from it).
TABLES = (BRONZE_BROKER_EVENTS, BROKER_EVENTS_QUARANTINE, *EPISODE_TABLES, *DAILY_TABLES)


def _run_crossing_midnights() -> list[dict[str, Any]]:
    """Run r2: q1 (stop 10) stops on day 1 at 20:00 and resumes on day 3; it peaks on day 2, so the
    overshoot of the episode counted on day 1 is only known once day 2 is in. Consumer c1 starves
    from day 1 09:00 to day 2 05:00. Run r3 (another queue, day 2 only) is never concerned by r2's
    days and must keep its rows. r2's qi is declared on day 1 and idle after: it has a row on
    each day up to r2's watermark (day 3), whichever day brings its declaration in."""
    q1 = {"run_id": "r2", "queue": "q1", "flow_stop_count": 10, "flow_resume_count": 5}
    c1 = {"run_id": "r2", "link": "c1", "link_role": "consumer"}
    rows = [
        event(0, at(1, 8), "queue_declared", run_id="r2", queue="qi", flow_stopped_count=0),
        event(1, at(1, 9), "link_attached", **c1, credit=0, available=3),
        event(2, at(1, 19), "queue_declared", **q1, depth_msgs=0, flow_stopped_count=0),
    ]
    seq = 3
    for depth in range(1, 12):  # 11 > 10: the 11th enqueue stops the queue
        rows.append(
            event(
                seq,
                at(1, 20, 0, depth),
                "enqueue",
                **q1,
                depth_msgs=depth,
                link="p1",
                capacity=20,
                flow_stopped_count=0,
            )
        )
        seq += 1
    rows.append(
        event(
            seq,
            at(1, 20, 0, 11),
            "flow_stopped",
            **q1,
            depth_msgs=11,
            flow_stopped=True,
            flow_stopped_count=1,
        )
    )
    seq += 1
    for depth, ts in ((12, at(1, 21)), (13, at(1, 21, 1)), (16, at(2, 3)), (17, at(2, 3, 1))):
        rows.append(
            event(
                seq,
                ts,
                "enqueue",
                **q1,
                depth_msgs=depth,
                link="p2",
                capacity=3,
                flow_stopped=True,
                flow_stopped_count=1,
            )
        )
        seq += 1
    rows.append(event(seq, at(2, 5), "flow", **c1, credit=5, available=3))
    seq += 1
    rows.append(
        event(
            seq,
            at(2, 12, 30),
            "dequeue",
            **q1,
            depth_msgs=16,
            flow_stopped=True,
            flow_stopped_count=1,
        )
    )
    seq += 1
    rows.append(
        event(seq, at(3, 1), "dequeue", **q1, depth_msgs=4, flow_stopped=True, flow_stopped_count=1)
    )
    rows.append(
        event(
            seq + 1,
            at(3, 1),
            "flow_resumed",
            **q1,
            depth_msgs=4,
            flow_stopped=False,
            flow_stopped_count=1,
        )
    )
    rows.append(event(seq + 2, at(3, 6), "link_detached", **c1, credit=5, available=0))
    other = {"run_id": "r3", "queue": "qx", "flow_stop_count": 2, "flow_resume_count": 1}
    rows += [
        event(1, at(2, 8), "enqueue", **other, depth_msgs=3, link="px", capacity=1),
        event(2, at(2, 8), "flow_stopped", **other, depth_msgs=3, flow_stopped_count=1),
        event(3, at(2, 9), "flow_resumed", **other, depth_msgs=0, flow_stopped_count=1),
        # A collector's replay on day 3 of r3's seq 3 (another ts, so another content): the
        # day-2 copy is the event whichever day is ingested first, and the replay is quarantined.
        event(3, at(3, 2), "flow_resumed", **other, depth_msgs=0, flow_stopped_count=1),
    ]
    return rows


def _run_ended_stopped_and_one_started_later() -> list[dict[str, Any]]:
    """Run "old" ends on day 1 with q1 still stopped and consumer c starving (open episodes, which
    DESIGN §4 clips at the run's watermark); run "new" starts on day 3. The nights after day 1
    must neither re-read "old" nor call their span back to day 1 for it (nightly runs would
    otherwise rewrite every day since), and must leave its episode and gold rows as they were."""
    q1 = {"run_id": "old", "queue": "q1", "flow_stop_count": 1, "flow_resume_count": 1}
    return [
        event(1, at(1, 10), "enqueue", **q1, depth_msgs=2, link="p", capacity=5),
        event(2, at(1, 10), "flow_stopped", **q1, depth_msgs=2, flow_stopped_count=1),
        event(3, at(1, 11), "enqueue", **q1, depth_msgs=3, link="p", capacity=5),
        event(4, at(1, 11), "flow", run_id="old", link="c", link_role="consumer", credit=0,
              available=3),
        event(1, at(3, 9), "enqueue", run_id="new", queue="q2", depth_msgs=1),
    ]  # fmt: skip


def _run_quiet_on_day_2() -> list[dict[str, Any]]:
    """Run r6: consumer c6 attached on day 1 with credit, no event at all on day 2, one on day 3.
    Day 2 is still observed and c6 still attached (86,400 s, none starved), whatever range brings
    it in: a night of day 2 alone must give that row, not none (DESIGN §5, "A rerun of a day
    replaces that day")."""
    c6 = {"run_id": "r6", "link": "c6", "link_role": "consumer"}
    return [
        event(1, at(1, 9), "link_attached", **c6, credit=10, available=0),
        event(2, at(1, 10), "flow", **c6, credit=9, available=0),
        event(3, at(3, 8), "flow", **c6, credit=8, available=0),
    ]


def _run_closed_on_its_first_day() -> list[dict[str, Any]]:
    """Run r4: q4's one episode opens and closes on day 1, and the run goes on to day 3 with
    nothing open, so the nights of days 2 and 3 do not call for that episode's day (jobs/scope.py:
    r4 calls day 3's night back to its latest gold day, day 2)."""
    q4 = {"run_id": "r4", "queue": "q4", "flow_stop_count": 2, "flow_resume_count": 1}
    return [
        event(1, at(1, 10), "enqueue", **q4, depth_msgs=3, link="p4", capacity=1),
        event(2, at(1, 10), "flow_stopped", **q4, depth_msgs=3, flow_stopped_count=1),
        event(3, at(1, 11), "flow_resumed", **q4, depth_msgs=0, flow_stopped_count=1),
        event(4, at(2, 12), "enqueue", **q4, depth_msgs=1, link="p4", capacity=1),
        event(5, at(3, 4), "dequeue", **q4, depth_msgs=0),
    ]


def _run_stepping_back_over_midnight() -> list[dict[str, Any]]:
    """Run r5: q5 stops at day 1 23:59:51 and resumes at day 2 00:00:10; between them the
    collector's clock steps back over midnight: seq 15 and 16 are stamped on day 2, seq 17 and 18
    on day 1 again (so they sit in day 1's partition after day 2's first events by seq). Link c5
    starves at day 2 00:00:06 and gets credit at day 1 23:59:59: a 0 s starvation."""
    q5 = {"run_id": "r5", "queue": "q5", "flow_stop_count": 10, "flow_resume_count": 5}
    c5 = {"run_id": "r5", "link": "c5", "link_role": "consumer"}
    stopped = {**q5, "flow_stopped": True, "flow_stopped_count": 1}
    rows = [
        event(0, at(1, 8), "queue_declared", **q5, depth_msgs=0, flow_stopped_count=0),
        event(1, at(1, 9), "link_attached", **c5, credit=5, available=0),
    ]
    rows += [
        event(1 + d, at(1, 23, 59, 40 + d), "enqueue", **q5, depth_msgs=d, link="p1",
              capacity=20, flow_stopped_count=0)
        for d in range(1, 12)
    ]  # fmt: skip
    rows += [
        event(13, at(1, 23, 59, 51), "flow_stopped", **stopped, depth_msgs=11),
        event(14, at(2, 0, 0, 5), "enqueue", **stopped, depth_msgs=12, link="p1", capacity=20),
        event(15, at(2, 0, 0, 6), "flow", **c5, credit=0, available=3),
        event(16, at(1, 23, 59, 58), "enqueue", **stopped, depth_msgs=15, link="p2", capacity=3),
        event(17, at(1, 23, 59, 59), "flow", **c5, credit=4, available=3),
        event(18, at(2, 0, 0, 10), "dequeue", **stopped, depth_msgs=4),
        event(19, at(2, 0, 0, 10), "flow_resumed", **q5, depth_msgs=4, flow_stopped_count=1),
        event(20, at(2, 6), "link_detached", **c5, credit=4, available=0),
        event(21, at(3, 6), "dequeue", **q5, depth_msgs=3, flow_stopped_count=1),
    ]
    return rows


def _tables(spark: Any, conf: Any) -> dict[str, list[dict[str, Any]]]:
    """Bronze, quarantine, silver and gold (:data:`TABLES`), and the depth timeline, as sorted
    rows."""

    def rows(frame: Any) -> list[dict[str, Any]]:
        return sorted(
            (r.asDict() for r in frame.collect()), key=lambda r: tuple(str(v) for v in r.values())
        )

    tables = {table.name: rows(read_table(spark, conf, table)) for table in TABLES}
    tables["timeline"] = rows(spark.read.format("delta").load(depth_timeline_path(conf)))
    return tables


@pytest.fixture(scope="module")
def outcomes(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Bronze, quarantine, silver, gold and the depth timeline after processing days 1-3 in one
    range, night by night (the tables after the first night too), the last day first, after a
    crash, and once more day 2 alone after the range (its gold rows deleted first: a rerun of a
    middle day, ingest included, must give them back and change nothing else); with each
    warehouse's pipeline state and its scope of a run over day 3 once all is in.

    One raw folder for all the runs of this module (r2 and r3, r4, r5, r6, "old" and "new"):
    each order of days is a warehouse of its own, and every job call there serves every claim."""

    root = tmp_path_factory.mktemp("order")
    rows = (
        _run_crossing_midnights()
        + _run_closed_on_its_first_day()
        + _run_stepping_back_over_midnight()
        + _run_ended_stopped_and_one_started_later()
        + _run_quiet_on_day_2()
    )
    write_raw_runs(root / "raw", rows)
    results: dict[str, Any] = {}
    for name, ranges in {
        "range": [(DAY1, DAY3)],
        "forward": [(d, d) for d in DAYS],
        # A backfill: the last day first, then the days before it in one range, which must
        # refresh its rows (three nights in reverse cost three job calls more, 14 s each in the
        # suite, for no claim this order does not make).
        "reverse": [(DAY3, DAY3), (DAY1, DAYS[1])],
        # Killed after ingest of day 1 (its warehouse is "forward"'s then, copied below), then
        # the later days: episodes and daily_metrics must process day 1 first (it is behind
        # bronze), never compute days 2-3 on top of its hole.
        "crashed": [(DAYS[1], DAY3)],
        # The range's warehouse, then day 2 again, its gold rows gone: r6 spans day 2 without
        # an event there (jobs/scope.py reads bronze before the day for it).
        "day 2 again": [(DAYS[1], DAYS[1])],
    }.items():
        conf = scratch_conf(root, name)
        if name == "day 2 again":
            shutil.copytree(root / "range", root / name)
            for table in DAILY_TABLES:
                DeltaTable.forPath(spark, table_path(conf, table)).delete(
                    days_predicate("date", DAYS[1], DAYS[1])
                )
        for first, last in ranges:
            run_ingest(spark, conf, first, last)
            if name == "forward" and first == DAY1:
                shutil.copytree(root / name, root / "crashed")  # the crash: nothing after ingest
            run_episodes(spark, conf, first, last)
            run_daily_metrics(spark, conf, first, last)
            if name == "forward" and first == DAY1:
                results["after the first night"] = _tables(spark, conf)
        results[name] = _tables(spark, conf)
        results[name]["status"] = read_status(spark, conf)
        results[name]["day 3's scope"] = processing_scope(spark, conf, DAY3, DAY3)
        if name == "forward":
            results["day 3's scope sources"] = _scope_sources(spark, conf, DAY3, DAY3)
    return results


def test_the_range_run_has_what_design_defines(outcomes):
    """The reference itself: q1 is stopped from day 1 20:00:11 to day 3 01:00; its one episode,
    counted on day 1, peaks at 17 on day 2 (overshoot 7, bound 20 + 3); c1 starves 20 h."""
    queue_daily = {
        (r["run_id"], r["queue"], r["date"]): r for r in outcomes["range"]["queue_flow_daily"]
    }
    day1 = queue_daily[("r2", "q1", DAY1)]
    assert (day1["flow_stopped_count"], day1["max_overshoot_msgs"]) == (1, 7)
    assert day1["time_stopped_s"] == 4 * 3600 - 11
    assert queue_daily[("r2", "q1", DAYS[1])]["time_stopped_s"] == 86400.0
    assert queue_daily[("r2", "q1", DAY3)]["time_stopped_s"] == 3600.0
    # DESIGN §4: "A queue gets a row for every day of its run's observed span from its
    # declaration on, idle days included". r2 observes day 1 08:00 (qi's declaration) -> day 3
    # 06:00 (its watermark): 16 h, 24 h and 6 h; qi is never stopped.
    idle = [(d, queue_daily[("r2", "qi", d)]) for d in DAYS if ("r2", "qi", d) in queue_daily]
    assert [(d, r["observed_s"], r["time_stopped_s"], r["episodes"]) for d, r in idle] == [
        (DAY1, 16 * 3600.0, 0.0, 0),
        (DAYS[1], 24 * 3600.0, 0.0, 0),
        (DAY3, 6 * 3600.0, 0.0, 0),
    ]
    link_daily = {(r["link"], r["date"]): r for r in outcomes["range"]["link_starvation_daily"]}
    assert link_daily[("c1", DAY1)]["starved_s"] == 15 * 3600.0
    assert link_daily[("c1", DAYS[1])]["starved_s"] == 5 * 3600.0
    # r6's c6 has no event on day 2 and stays attached with credit: observed, never starved.
    assert [(link_daily[("c6", d)]["attached_s"], link_daily[("c6", d)]["starved_s"]) for d in DAYS
            ] == [(15 * 3600.0, 0.0), (86400.0, 0.0), (8 * 3600.0, 0.0)]  # fmt: skip
    # r3's seq 3 replayed on day 3: the day-2 copy ends qx's episode at 09:00, the replay is
    # quarantined on its day with its position in its file.
    episodes = [e for e in outcomes["range"]["queue_flow_episodes"] if e["run_id"] in R2_R3]
    (qx,) = [e for e in episodes if e["queue"] == "qx"]
    assert (qx["end_seq"], qx["duration_s"]) == (3, 3600.0)
    # A closed episode carries no watermark (none is open here: q1 resumes on day 3).
    assert [e["run_watermark_ts"] for e in episodes] == [None] * 2
    (replay,) = outcomes["range"]["broker_events_quarantine"]
    assert (replay["run_id"], replay["seq"], replay["date"]) == ("r3", 3, DAY3)
    assert (replay["reason"], replay["source_row_index"]) == ("conflicting_duplicate", 0)


@pytest.mark.parametrize("order", ["forward", "reverse", "crashed", "day 2 again"])
def test_day_by_day_in_any_order_gives_the_tables_of_one_range_run(outcomes, order):
    for table in [*(t.name for t in TABLES), "timeline", "day 3's scope"]:
        assert outcomes[order][table] == outcomes["range"][table], table
    # ... and the pipeline state knows every day as processed from the bronze it holds.
    status = outcomes[order]["status"]
    assert status.up_to_date and status.unrecorded_bronze_days == ()
    assert [(job.job, job.days) for job in status.jobs] == [
        ("ingest", 3),
        ("episodes", 3),
        ("daily_metrics", 3),
        ("recommend", 0),  # not run here: optional, so never behind
    ]


def test_the_scope_predicates_quote_run_ids_and_leave_other_runs_alone():
    scope = Scope(DAYS[1], DAYS[1], ("r2", "it's\\x"), DAY1, DAY3)
    predicate = scope.day_predicate()
    assert predicate.startswith("(date >= DATE '2024-01-02' AND date <= DATE '2024-01-02') OR ")
    assert "run_id IN ('r2', 'it\\'s\\\\x') AND date >= DATE '2024-01-01'" in predicate
    assert sql_string("a'b") == "'a\\'b'"
    not_extended = Scope(DAYS[1], DAYS[1], ("r2",), DAYS[1], DAYS[1])
    assert not_extended.day_predicate() == "date >= DATE '2024-01-02' AND date <= DATE '2024-01-02'"


def test_nights_give_the_range_tables_of_a_closed_episode_and_a_clock_stepping_back(outcomes):
    """Runs r4, r5, "old" and "new", processed night by night (the "forward" order) and in one
    range. r4: with the run's watermark kept on closed episodes, q4's would be day 2's in the
    nightly run (the last night that wrote it) and day 3's in the range run; it is null in both.
    r5: day 2's night carries day 1's state in, which holds events later by seq than day 2's
    first ones. "old": its rows after the first night are its rows after the last. That every
    table, the depth timeline included, is the range run's is
    test_day_by_day_in_any_order_gives_the_tables_of_one_range_run's claim."""
    episodes = {e["queue"]: e for e in outcomes["range"]["queue_flow_episodes"]}
    q4 = episodes["q4"]
    assert (q4["end_ts"], q4["duration_s"], q4["run_watermark_ts"]) == (
        naive(at(1, 11)),
        3600.0,
        None,
    )
    q5 = episodes["q5"]
    assert (q5["start_ts"], q5["end_ts"], q5["peak_depth_msgs"]) == (
        naive(at(1, 23, 59, 51)),
        naive(at(2, 0, 0, 10)),
        15,
    )
    # Stopped from 23:59:51 to midnight, then from 00:00 (stopped at midnight) to 00:00:10.
    daily = {r["date"]: r for r in outcomes["range"]["queue_flow_daily"] if r["queue"] == "q5"}
    assert [daily[d]["time_stopped_s"] for d in DAYS] == [9.0, 10.0, 0.0]
    starvations = {e["link"]: e for e in outcomes["range"]["link_starvation_episodes"]}
    c5 = starvations["c5"]
    assert (c5["start_date"], c5["end_seq"], c5["duration_s"]) == (DAYS[1], 17, 0.0)
    # "old": its open episode and starvation, and its one gold day, as the first night left them.
    first_night = outcomes["after the first night"]
    for table in ("queue_flow_episodes", "link_starvation_episodes", "queue_flow_daily"):
        before = [r for r in first_night[table] if r["run_id"] == "old"]
        assert [r for r in outcomes["forward"][table] if r["run_id"] == "old"] == before, table
    (old_episode,) = [e for e in first_night["queue_flow_episodes"] if e["run_id"] == "old"]
    assert old_episode["end_ts"] is None
    assert [(r["date"], r["time_stopped_s"]) for r in first_night["queue_flow_daily"]
            if r["run_id"] == "old"] == [(DAY1, 3600.0)]  # fmt: skip
    assert starvations["c"]["run_id"] == "old"


def test_a_night_rereads_no_run_that_ended_and_no_closed_episode_before_its_last_gold_day(
    outcomes,
):
    """Day 3's night once all is in, source by source (jobs/scope.py ``_scope_sources``): "old"
    ended on day 1 with its episodes open (they end at its watermark): they and its gold day are
    read, but it has no events in or after the night and nothing of it is in range, so it is
    not concerned. r4, r5 and r6 have nothing open at the night's start, so they call for the span
    from their latest gold day, day 2, not from r4's episode closed on day 1 (nightly runs would
    otherwise rewrite every day since). Only r2's q1, stopped since day 1, takes the span back
    to day 1."""
    sources = {(r.run_id, r.source): r for r in outcomes["day 3's scope sources"]}
    old = {source: row for (run, source), row in sources.items() if run == "old"}
    assert set(old) == {
        t.name
        for t in (
            QUEUE_FLOW_DAILY,
            LINK_STARVATION_DAILY,
            QUEUE_FLOW_EPISODES,
            LINK_STARVATION_EPISODES,
        )
    }
    assert [row.last for row in old.values()] == [DAY1] * 4
    assert not any(row.in_range for row in old.values())
    assert [sources[(run, QUEUE_FLOW_DAILY.name)].last for run in ("r4", "r5")] == [DAYS[1]] * 2
    assert sources[("r6", LINK_STARVATION_DAILY.name)].last == DAYS[1]  # a link's run: the same
    episode_starts = {
        key: row.first
        for key, row in sources.items()
        if key[0] != "old" and key[1].endswith("_episodes")
    }
    assert episode_starts == {("r2", QUEUE_FLOW_EPISODES.name): DAY1}
    scope = outcomes["forward"]["day 3's scope"]
    assert (scope.runs, scope.span_from, scope.span_to) == (
        ("new", "r2", "r4", "r5", "r6"),
        DAY1,
        DAY3,
    )

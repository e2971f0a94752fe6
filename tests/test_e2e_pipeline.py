"""End to end: simulate on the engine, run the Spark pipeline on real Delta tables, and compare the
gold metrics with what the engine itself counted for the same run."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from flowctl_core.events import EventCollector
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario, parse_scenario
from flowctl_core.sink import ParquetSink
from flowctl_core.summary import queue_summaries
from schemas.model import US_PER_DAY, US_PER_SECOND

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# A workload that toggles flow control often and runs across midnight, so the daily split and the
# carry-over of a stopped state at 00:00 are exercised on real engine output.
ACROSS_MIDNIGHT = {
    "name": "e2e-across-midnight",
    "kind": "workload",
    "start": "2026-04-10T23:50:00Z",
    "duration_s": 1200,
    "seed": 5,
    "queues": [
        {
            "name": "jobs",
            "arguments": {
                "qpid.max_count": 400,
                "qpid.flow_stop_count": 200,
                "qpid.flow_resume_count": 120,
            },
        }
    ],
    "producers": [
        {"name": "bulk", "capacity": 40, "routing_key": "jobs", "rate": 25, "arrival": "poisson"},
        {
            "name": "spiky",
            "capacity": 15,
            "routing_key": "jobs",
            "size": 900,
            "bursts": {"every_s": 97, "count": 300},
        },
    ],
    "consumers": [{"name": "worker", "queue": "jobs", "rate": 24}],
}


def _engine_stopped_seconds_per_day(events: list[dict[str, Any]]) -> dict[str, float]:
    """Independent reference for time_stopped_s: walk the engine's own events, split at midnight."""
    per_day: dict[str, float] = defaultdict(float)
    watermark = events[-1]["ts"]
    stopped_since: int | None = None

    def add(start: int, stop: int) -> None:
        while start < stop:
            boundary = (start // US_PER_DAY + 1) * US_PER_DAY
            piece_end = min(stop, boundary)
            day = datetime.fromtimestamp(start / US_PER_SECOND, tz=UTC).date().isoformat()
            per_day[day] += (piece_end - start) / US_PER_SECOND
            start = piece_end

    for event in events:
        if event["event_type"] == "flow_stopped":
            stopped_since = event["ts"]
        elif event["event_type"] == "flow_resumed" and stopped_since is not None:
            add(stopped_since, event["ts"])
            stopped_since = None
    if stopped_since is not None:
        add(stopped_since, watermark)
    return dict(per_day)


def _simulate(scenario: Any, raw: Path, run_id: str) -> tuple[Any, list[dict[str, Any]]]:
    collector = EventCollector()
    sink = ParquetSink(raw, run_id, row_group_size=4096)
    with sink:
        result = run_scenario(scenario, [sink, collector], run_id=run_id)
    return result, collector.events


def test_gold_metrics_match_the_engine(spark: Any, tmp_path: Path) -> None:
    from jobs.pipeline import daily_metrics_rows, run_pipeline

    raw = tmp_path / "raw"
    midnight, midnight_events = _simulate(parse_scenario(ACROSS_MIDNIGHT), raw, "e2e-midnight")
    worst, _ = _simulate(load_scenario("qpid-165-worst-case"), raw, "e2e-165")

    first, last = date(2026, 3, 2), date(2026, 4, 11)
    steps: list[tuple[str, float | None]] = []
    outcome = run_pipeline(
        None,
        first,
        last,
        str(raw),
        warehouse_dir=str(tmp_path / "warehouse"),
        spark=spark,
        on_step=lambda job, seconds: steps.append((job, seconds)),
    )
    assert outcome["ok"], outcome
    # Each job is announced as it starts and reported with its seconds as it ends (the command
    # line's progress), in the order it runs.
    jobs = ("ingest", "episodes", "daily_metrics")
    assert steps == [step for job in jobs for step in ((job, None), (job, outcome["seconds"][job]))]
    rows = daily_metrics_rows(
        None, first, last, warehouse_dir=str(tmp_path / "warehouse"), spark=spark
    )
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_run[row["run_id"]].append(row)

    # The seed's worst case: one queue, peak 165, overshoot 65 against a bound of 50 + 15.
    (worst_summary,) = queue_summaries(worst)
    worst_rows = by_run["e2e-165"]
    assert sum(r["flow_stopped_count"] for r in worst_rows) == worst_summary.flow_stopped_count
    assert max(r["max_depth_msgs"] for r in worst_rows) == 165
    assert max(r["max_overshoot_msgs"] or 0 for r in worst_rows) == 65
    assert max(r["max_overshoot_ratio"] or 0 for r in worst_rows) == pytest.approx(1.0)
    assert all(r["counter_check_ok"] for r in worst_rows)

    # Across midnight: counts, peaks and stopped time per day agree with the engine's own log.
    (summary,) = queue_summaries(midnight)
    assert summary.flow_stopped_count >= 3, "the scenario must toggle flow control"
    days = {r["date"].isoformat(): r for r in by_run["e2e-midnight"]}
    assert set(days) == {"2026-04-10", "2026-04-11"}
    assert sum(r["flow_stopped_count"] for r in days.values()) == summary.flow_stopped_count
    assert max(r["max_depth_msgs"] for r in days.values()) == summary.peak_depth_msgs
    assert max(r["max_overshoot_msgs"] or 0 for r in days.values()) == summary.max_overshoot_msgs
    expected = _engine_stopped_seconds_per_day(midnight_events)
    for day, row in days.items():
        assert row["time_stopped_s"] == pytest.approx(expected.get(day, 0.0), abs=1e-6), day
        assert row["counter_check_ok"]
    engine_stops_per_day: dict[str, int] = defaultdict(int)
    for event in midnight_events:
        if event["event_type"] == "flow_stopped":
            day = datetime.fromtimestamp(event["ts"] / US_PER_SECOND, tz=UTC).date().isoformat()
            engine_stops_per_day[day] += 1
    assert {d: r["flow_stopped_count"] for d, r in days.items()} == {
        d: engine_stops_per_day.get(d, 0) for d in days
    }

    # What `flowctl pipeline` prints of them: the most stopped first (then most episodes, most
    # rejected), at most STOPPED_QUEUES_SHOWN (here 2), and how many of all the queue-days stopped.
    from jobs import pipeline

    def rank(row: dict[str, Any]) -> tuple[Any, ...]:
        keys = (row["date"], row["broker"], row["run_id"], row["queue"])
        return (-row["time_stopped_s"], -row["episodes"], -(row["rejected"] or 0), *keys)

    shown = pipeline.STOPPED_QUEUES_SHOWN
    pipeline.STOPPED_QUEUES_SHOWN = 2
    try:
        top, stopped, queue_days = pipeline.most_stopped_queue_rows(
            None, first, last, warehouse_dir=str(tmp_path / "warehouse"), spark=spark
        )
    finally:
        pipeline.STOPPED_QUEUES_SHOWN = shown
    assert queue_days == len(rows) > 2
    assert stopped == sum(1 for r in rows if r["time_stopped_s"] > 0)
    assert top == sorted((r for r in rows if r["time_stopped_s"] > 0), key=rank)[:2]

"""The cost columns of ``queue_flow_daily`` (jobs/transforms/queue_costs.py) against the
pure-Python reference (tests/metrics_oracle.py ``queue_costs_daily``) on random logs: messages
routed to one or several queues, paged, refused with every outcome, evicted, dequeued, and
completed at once or after a hold, some across midnight; producers reusing each other's ids,
and one that the log does not name (its enqueues and completions without a ``link``)."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs.transforms.daily import queue_flow_daily
from jobs.transforms.episodes import queue_flow_episodes, run_bounds
from jobs.transforms.queue_costs import QUEUE_COST_COLUMNS, with_queue_costs
from schemas.model import US_PER_SECOND
from tests import metrics_oracle as oracle
from tests.test_metrics_oracle import events_frame

pytestmark = pytest.mark.spark

QUEUES = ("q1", "q2", "q3")
PRODUCERS = ("p1", "p2", None)  # None: a producer the log does not name (no `link`)
OUTCOMES = (None, "rejected", "failed", "dropped")
DAY1, DAY3 = date(2024, 1, 1), date(2024, 1, 3)


def random_run(rng: random.Random, run_id: str) -> list[dict[str, Any]]:
    ts = datetime(2024, 1, 1, 20, tzinfo=UTC) + timedelta(minutes=rng.randint(0, 600))
    rows: list[dict[str, Any]] = []
    next_id = dict.fromkeys(PRODUCERS, 1)  # each producer numbers its own messages from 1
    held: list[tuple[str, int, datetime]] = []

    def emit(kind: str, **fields: Any) -> None:
        rows.append({"run_id": run_id, "broker": "b1", "seq": len(rows) + 1, "ts": ts,
                     "event_type": kind, **fields})  # fmt: skip

    for queue in QUEUES:
        emit("queue_declared", queue=queue)
    for _ in range(rng.randint(80, 160)):
        ts += timedelta(seconds=rng.choice((1, 30, 600, 3600)), microseconds=rng.randint(0, 999))
        roll, producer = rng.random(), rng.choice(PRODUCERS)
        if roll < 0.45:
            message_id = next_id[producer]
            next_id[producer] += 1
            for queue in rng.sample(QUEUES, rng.choice((1, 1, 2, 3))):
                detail = json.dumps({"paged": True}) if rng.random() < 0.2 else None
                emit("enqueue", queue=queue, link=producer, message_id=message_id, detail=detail)
            held.append((producer, message_id, ts))
        elif roll < 0.6:
            outcome = rng.choice(OUTCOMES)
            detail = json.dumps({"outcome": outcome}) if outcome else '{"reason": "max_count"}'
            emit("message_rejected", queue=rng.choice((*QUEUES, None)), link=producer,
                 message_id=next_id[producer], detail=detail)  # fmt: skip
            next_id[producer] += 1
        elif roll < 0.68:
            emit("ring_evicted", queue=rng.choice(QUEUES), message_id=rng.randint(1, 50))
        elif roll < 0.85:
            emit("dequeue", queue=rng.choice(QUEUES), message_id=rng.randint(1, 50))
        elif held:
            producer, message_id, since = held.pop(rng.randrange(len(held)))
            latency = (
                0 if rng.random() < 0.25 else int((ts - since).total_seconds() * US_PER_SECOND) + 1
            )
            emit("transfer_completed", link=producer, message_id=message_id, latency_us=latency)
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    rng = random.Random(20261125)
    return [row for index in range(8) for row in random_run(rng, f"r{index}")]


def test_the_log_exercises_every_count_and_midnight(rows) -> None:
    kinds = {row["event_type"] for row in rows}
    assert {"enqueue", "dequeue", "message_rejected", "ring_evicted", "transfer_completed"} <= kinds
    days = {row["ts"].date() for row in rows}
    assert len(days) >= 2
    completions = [r for r in rows if r["event_type"] == "transfer_completed"]
    assert any(r["latency_us"] == 0 for r in completions)
    assert any(r["latency_us"] > 86_400_000_000 / 24 for r in completions)
    assert any(r["link"] is None and r["latency_us"] > 0 for r in completions)


def test_queue_costs_match_the_oracle(spark, rows, tmp_path: Path) -> None:
    events = events_frame(spark, rows, tmp_path)
    bounds = run_bounds(events)
    daily = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY3)
    actual = {
        (r.run_id, r.broker, r.queue, r.date): {c: r[c] for c in QUEUE_COST_COLUMNS}
        for r in with_queue_costs(daily, events, DAY1, DAY3).collect()
    }
    expected = oracle.queue_costs_daily(rows, actual)
    assert sum(row["held_completions"] for row in expected.values()) > 50
    differences = [
        f"{key} {column}: spark={actual[key][column]!r} oracle={value!r}"
        for key, want in expected.items()
        for column, value in want.items()
        if not _same(actual[key][column], value)
    ]
    assert not differences, "\n".join(differences[:30])


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))

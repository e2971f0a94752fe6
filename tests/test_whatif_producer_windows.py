"""The what-if's and the sweep's producers' windows (flowctl_core/whatif.py ``_ProducerWindows``,
a hot-path copy in the engine) against the rule it copies, DESIGN §4's bound as the episodes job
computes it (jobs/transforms/episodes.py ``overshoot_bound``), over the same rows of a run:
bundled scenarios with windowed, unwindowed and refused producers. The copy differed: an enqueue
that named no producer counted as one, and one row without a capacity took a producer's window
away (a review). The rows are the copy's own (``PRODUCER_EVENTS``: enqueues and refusals, over
the run), not an episode's enqueues as DESIGN's bound: what is compared is the rule over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario
from flowctl_core.sink import ParquetSink
from flowctl_core.whatif import PRODUCER_EVENTS, _ProducerWindows

pytestmark = pytest.mark.spark

SCENARIOS = [
    "slow-consumer",
    "qpid-165-worst-case",
    "fanout-three-queues",
    "ring-no-defaults",
    "rabbitmq-two-senders",
    "artemis-address-full-policies",
    "artemis-block-core-producers",
]


def _bounds_by_the_jobs_rule(spark: Any, raw: Path) -> dict[str, int | None]:
    from pyspark.sql import functions as F

    from jobs.transforms.episodes import overshoot_bound

    rows = spark.read.parquet(str(raw)).where(
        F.col("event_type").isin(*PRODUCER_EVENTS) & F.col("queue").isNotNull()
    )
    producers = rows.groupBy("queue", "link").agg(F.max("capacity").alias("capacity"))
    bounds = producers.groupBy("queue").agg(
        overshoot_bound(F.col("link"), F.col("capacity")).alias("bound"),
        F.count("link").alias("producers"),
    )
    return {row["queue"]: row["bound"] if row["producers"] else 0 for row in bounds.collect()}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_whatifs_producer_windows_are_the_episodes_bound_over_the_run(
    spark: Any, tmp_path: Path, name: str
) -> None:
    scenario = load_scenario(name)
    windows = _ProducerWindows()
    with ParquetSink(tmp_path, name) as sink:
        run_scenario(scenario, [sink, windows], run_id=name)
    expected = _bounds_by_the_jobs_rule(spark, tmp_path)
    assert expected, f"{name}: no producer rows"
    assert {queue: windows.total(queue) for queue in expected} == expected


def _row(event_type: str, queue: str, link: str | None, capacity: int | None) -> tuple[Any, ...]:
    """An engine row (flowctl_core/events.py ROW_LAYOUT) with these columns, the rest null."""
    from flowctl_core.events import ROW_LAYOUT

    values = {"event_type": event_type, "queue": queue, "link": link, "capacity": capacity}
    return tuple(
        values.get(entry) if isinstance(entry, str) else tuple(values.get(n) for n in entry)
        for entry in ROW_LAYOUT
    )


def test_rows_no_scenario_writes_are_read_by_both_alike(spark: Any) -> None:
    """What the bundled scenarios do not log, and the copy read otherwise: one enqueue without
    a capacity among a windowed producer's (q1: 50 + 15, not None), an enqueue naming no
    producer (q2: 5, not 15), a producer that never logged a window (q3: None), a producer
    refused whole beside one enqueued (q4: 7 + 3)."""
    rows = [
        ("enqueue", "q1", "p1", 50),
        ("enqueue", "q1", "p1", None),
        ("enqueue", "q1", "p2", 15),
        ("enqueue", "q2", None, 10),
        ("enqueue", "q2", "p3", 5),
        ("enqueue", "q3", "p4", None),
        ("enqueue", "q3", "p4", None),
        ("message_rejected", "q4", "p5", 7),
        ("enqueue", "q4", "p6", 3),
        ("dequeue", "q4", "p7", 100),  # not a producer's
    ]
    windows = _ProducerWindows()
    for row in rows:
        windows(_row(*row))
    from pyspark.sql import functions as F

    from jobs.transforms.episodes import overshoot_bound

    frame = spark.createDataFrame(
        rows, "event_type string, queue string, link string, capacity long"
    )
    producers = (
        frame.where(F.col("event_type").isin(*PRODUCER_EVENTS))
        .groupBy("queue", "link")
        .agg(F.max("capacity").alias("capacity"))
    )
    by_rule = {
        row["queue"]: row["bound"]
        for row in producers.groupBy("queue")
        .agg(overshoot_bound(F.col("link"), F.col("capacity")).alias("bound"))
        .collect()
    }
    assert by_rule == {"q1": 65, "q2": 5, "q3": None, "q4": 10}
    assert {queue: windows.total(queue) for queue in by_rule} == by_rule

"""Gold rows of every broker the demo simulates, computed from the bundled scenarios' event log
by the jobs' transforms, checked against derivations by hand from the scenario or the engine's
own event list: an Artemis BLOCK address, a blocked AMQP 0.9.1 connection, a memory alarm, and
starved CORE producers; and seed 004's comparison (one slow queue blocks a whole 0.9.1
connection, AMQP 1.0 only the one link) read from gold (jobs/transforms/held_back.py)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_approx_df_equality

from flowctl_core.events import EventCollector
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import load_scenario
from flowctl_core.sink import ParquetSink
from jobs.transforms.blocking import blocking_daily, blocking_episodes
from jobs.transforms.daily import link_starvation_daily, observed_seconds, queue_flow_daily
from jobs.transforms.episodes import (
    link_starvation_episodes,
    queue_flow_episodes,
    run_bounds,
)
from jobs.transforms.held_back import publishers_held_back
from jobs.transforms.queue_costs import with_queue_costs
from schemas.model import US_PER_SECOND

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("gold_per_broker")]

ALARM, TWO_SENDERS, ARTEMIS = (
    "rabbitmq-memory-alarm",
    "rabbitmq-two-senders",
    "artemis-block-core-producers",
)
MARCH_4, MARCH_5 = date(2026, 3, 4), date(2026, 3, 5)


@pytest.fixture(scope="module")
def demo_gold(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The three bundled scenarios simulated to Parquet (their events kept), and the gold
    tables computed from that log by the transforms the episodes and daily_metrics jobs run
    (the jobs' Delta plumbing is tested in test_e2e_pipeline and test_processing_order)."""
    raw = tmp_path_factory.mktemp("gold_per_broker") / "raw"
    events: dict[str, list[dict[str, Any]]] = {}
    for name in (ALARM, TWO_SENDERS, ARTEMIS):
        collector = EventCollector()
        with ParquetSink(raw, name, row_group_size=65_536) as sink:
            run_scenario(load_scenario(name), [sink, collector], run_id=name)
        events[name] = collector.events
    log = spark.read.parquet(str(raw)).cache()
    bounds = run_bounds(log).cache()
    queues = queue_flow_daily(log, queue_flow_episodes(log, bounds), bounds, MARCH_4, MARCH_5)
    return {
        "events": events,
        "blocking": blocking_daily(
            blocking_episodes(log, bounds),
            observed_seconds(bounds, MARCH_4, MARCH_5),
            bounds,
            MARCH_4,
            MARCH_5,
        ).cache(),
        "links": link_starvation_daily(
            log, link_starvation_episodes(log, bounds), bounds, MARCH_4, MARCH_5
        ).cache(),
        "queues": with_queue_costs(queues, log, MARCH_4, MARCH_5).cache(),
    }


def _seconds(
    events: list[dict[str, Any]], starts: Any, ends: Any, watermark_us: int | None = None
) -> tuple[float, int]:
    """Seconds and intervals from each event ``starts`` accepts to the next one ``ends``
    accepts; one still open ends at ``watermark_us`` (the run's last event), by default the
    last of ``events``."""
    total_us, intervals, since = 0, 0, None
    for event in events:
        if since is None and starts(event):
            since, intervals = event["ts"], intervals + 1
        elif since is not None and ends(event):
            total_us, since = total_us + event["ts"] - since, None
    if since is not None:
        total_us += (events[-1]["ts"] if watermark_us is None else watermark_us) - since
    return total_us / US_PER_SECOND, intervals


def _gold(frame: Any, run_id: str, columns: list[str]) -> Any:
    return frame.where(frame.run_id == run_id).select(*columns).orderBy(*columns[:2])


def _assert_rows(actual: Any, rows: list[tuple[Any, ...]], precision: float) -> None:
    """``actual`` equals ``rows`` (in its column order and row order), floats to
    ``precision``."""
    expected = actual.sparkSession.createDataFrame(rows, actual.schema)
    assert_approx_df_equality(actual, expected, precision)


def test_a_memory_alarm_blocks_publishers_for_its_three_seconds(spark, demo_gold) -> None:
    # By hand from the scenario: the alarm is raised at 2 s and cleared at 5 s of a 6 s run, so
    # the alarm, the 0.9.1 publisher connection and the 1.0 publisher's session window are each
    # blocked once, for 3 s, half the observed time; the consuming connection is not blocked.
    columns = ["kind", "entity", "protocol", "blocked_s", "episodes", "observed_s", "blocked_share"]
    _assert_rows(
        _gold(demo_gold["blocking"], ALARM, columns),
        [
            ("alarm", "memory", None, 3.0, 1, 6.0, 0.5),
            ("connection", "publisher-091", "amqp-0-9-1", 3.0, 1, 6.0, 0.5),
            ("session_window", "publisher-10/session-1", "amqp-1.0", 3.0, 1, 6.0, 0.5),
        ],
        1e-9,
    )


def test_the_alarm_costs_the_publishers_throughput_not_messages(demo_gold) -> None:
    # Batches of 100 confirmed at 200 us a message: at most 5,000 a second, for the 3 s of the
    # run without the alarm; nothing is refused; the consumer drained its 20,000 throughout.
    queues = {r.queue: r for r in demo_gold["queues"].where(f"run_id = '{ALARM}'").collect()}
    enqueues = [e for e in demo_gold["events"][ALARM] if e["event_type"] == "enqueue"]
    for name in ("orders-091", "orders-10"):
        row = queues[name]
        assert row.enqueued == sum(1 for e in enqueues if e["queue"] == name)
        assert 14_000 <= row.enqueued <= 3 * 5_000
        assert row.rejected == row.dropped == row.evicted == 0
        # A confirm waits for its batch's turn at 200 us a message: at most 100 x 200 us.
        assert row.held_completions > 0.99 * row.enqueued
        assert 0 < row.completion_p50_us <= row.completion_max_us <= 100 * 200
    assert (queues["backlog"].enqueued, queues["backlog"].dequeued) == (20_000, 20_000)


def test_one_slow_queue_blocks_the_whole_091_connection_and_one_10_link(spark, demo_gold):
    """Seed 004 from gold: the 0.9.1 connection carrying both publishers is blocked most of the
    run, while over AMQP 1.0 only the link to the slow quorum queue starves."""
    events = demo_gold["events"][TWO_SENDERS]
    blocked_s, blockings = _seconds(
        events,
        lambda e: e["event_type"] == "connection_blocked",
        lambda e: e["event_type"] == "connection_unblocked",
    )

    def starved(link: str) -> tuple[float, int]:
        mine = [e for e in events if e["link"] == link and e["credit"] is not None]
        return _seconds(
            mine,
            lambda e: e["credit"] == 0 and (e["available"] or 0) > 0,
            lambda e: not (e["credit"] == 0 and (e["available"] or 0) > 0),
            events[-1]["ts"],
        )

    quorum_s, quorum_starvations = starved("publisher-quorum-10")
    classic_s, classic_starvations = starved("publisher-classic-10")
    run_s = 2.0
    held = publishers_held_back(demo_gold["blocking"], demo_gold["links"])
    _assert_rows(
        _gold(held, TWO_SENDERS, ["grain", "entity", "held_s", "episodes", "share"]),
        [
            ("connection", "amqp-091", blocked_s, blockings, blocked_s / run_s),
            ("link", "publisher-classic-091", 0.0, 0, 0.0),
            ("link", "publisher-classic-10", classic_s, classic_starvations, classic_s / run_s),
            ("link", "publisher-quorum-091", 0.0, 0, 0.0),
            ("link", "publisher-quorum-10", quorum_s, quorum_starvations, quorum_s / run_s),
        ],
        1e-6,
    )
    # What it means: the 0.9.1 connection is held back most of the time and its fast queue takes
    # no more than the slow one; over 1.0 the fast queue's link is (all but) never held back and
    # its queue takes several times the slow one's messages.
    assert blocked_s / run_s > 0.5 and quorum_s / run_s > 0.5 and classic_s < 0.01
    enqueued = {
        r.queue: r.enqueued
        for r in demo_gold["queues"].where(f"run_id = '{TWO_SENDERS}'").collect()
    }
    assert enqueued["classic-queue-amqp-091"] == enqueued["quorum-queue-amqp-091"]
    assert enqueued["classic-queue-amqp-10"] > 5 * enqueued["quorum-queue-amqp-10"]


def test_an_artemis_block_address_and_its_starved_core_producers(spark, demo_gold) -> None:
    # The address blocks (flow_stopped) and unblocks (flow_resumed) as it fills and drains; its
    # producers' byte credit is withheld while it is full (DESIGN §2): starved links.
    events = demo_gold["events"][ARTEMIS]
    address = [e for e in events if e["queue"] == "orders"]
    stopped_s, stops = _seconds(
        address,
        lambda e: e["event_type"] == "flow_stopped",
        lambda e: e["event_type"] == "flow_resumed",
    )
    first = datetime.fromtimestamp(events[0]["ts"] / US_PER_SECOND, tz=UTC)
    watermark_s = (events[-1]["ts"] - events[0]["ts"]) / US_PER_SECOND
    assert first.date() == MARCH_5 and stops > 10
    _assert_rows(
        _gold(
            demo_gold["queues"],
            ARTEMIS,
            [
                "queue",
                "flow_stopped_count",
                "episodes",
                "time_stopped_s",
                "observed_s",
                "stopped_share",
            ],
        ),
        [("orders", stops, stops, stopped_s, watermark_s, stopped_s / watermark_s)],
        1e-6,
    )
    # Its overshoot in bytes is the address's: the peak address size (the broker's memory
    # estimate, each enqueue's detail.address_size) above max-size-bytes. An audit found the
    # enqueues' bodies compared with the estimate: 1.6 KB of overshoot for ~340 KB.
    limit = next(e["flow_stop_size"] for e in address if e["event_type"] == "flow_stopped")
    enqueues = [e for e in address if e["event_type"] == "enqueue"]
    peak = max(json.loads(e["detail"])["address_size"] for e in enqueues)
    (gold,) = _gold(demo_gold["queues"], ARTEMIS, ["queue", "max_overshoot_bytes"]).collect()
    assert gold.max_overshoot_bytes == peak - limit > 100_000  # of the order of producers x window

    rows = []
    for writer in ("order-writer-1", "order-writer-2", "order-writer-3", "order-writer-4"):
        mine = [e for e in events if e["link"] == writer and e["credit"] is not None]
        starved_s, starvations = _seconds(
            mine,
            lambda e: e["credit"] == 0 and (e["available"] or 0) > 0,
            lambda e: not (e["credit"] == 0 and (e["available"] or 0) > 0),
            events[-1]["ts"],
        )
        rows.append((writer, starved_s, starvations))
        assert starved_s / watermark_s > 0.5, writer
    writers = _gold(demo_gold["links"], ARTEMIS, ["link", "starved_s", "episodes"])
    _assert_rows(writers.where("link like 'order-writer-%'"), rows, 1e-6)
    # DESIGN §4 lists a CORE producer's exhausted byte credit with the blocking kinds too: the
    # same seconds as a producer window as starved.
    blocked = _gold(demo_gold["blocking"], ARTEMIS, ["entity", "kind", "blocked_s"])
    windows = blocked.where("kind = 'producer_window'").select("entity", "blocked_s")
    assert sorted((r.entity, round(r.blocked_s, 6)) for r in windows.collect()) == [
        (writer, round(seconds, 6)) for writer, seconds, _ in rows
    ]


def test_the_bundled_alarm_scenario_is_in_the_demo() -> None:
    from flowctl_core.scenario import bundled_scenarios

    assert ALARM in {Path(path).stem for path in bundled_scenarios()}

"""Collector sessions through the pipeline: what the Artemis collector writes keeps the event
log's contract (every row accepted) and gives DESIGN §4's figures for the address — an episode
closed by its unblock line, and one still open at midnight that its samples keep counting up to
the watermark (the last sample), as it would not without them. A RabbitMQ collector writes into
the same raw folder (as two collectors of one host may): its alarm is the log's, its blocked
connection the samples'. One warehouse serves both (a job call costs seconds whatever its rows);
each claim reads its own broker's rows."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from collectors.artemis import ArtemisCollector
from collectors.rabbitmq import ManagementSample, RabbitMQCollector
from jobs.daily_metrics import run_daily_metrics
from jobs.delta_io import read_table
from jobs.episodes import run_episodes
from jobs.ingest import run_ingest
from jobs.recommend import recommendations_path, run_recommend
from schemas.tables import BLOCKING_DAILY, BLOCKING_EPISODES, QUEUE_FLOW_DAILY, QUEUE_FLOW_EPISODES
from tests.collectors.test_artemis_collector import (
    FakeJolokia,
    block,
    disk_blocking,
    disk_free,
    disk_full,
    unblock,
)
from tests.collectors.test_rabbitmq_collector import FakeManagement
from tests.conftest import scratch_conf

pytestmark = pytest.mark.spark

DAY1, DAY2 = date(2026, 11, 27), date(2026, 11, 28)
ARTEMIS, RABBITMQ = "artemis-1", "rabbit-1"
#: An Artemis whose collector started a new session (--new-session) while an address blocked.
CARRIED = "artemis-2"
#: A RabbitMQ node whose collector started a new session while its alarm held a connection.
CARRIED_RABBITMQ = "rabbit-2"
SAMPLE = {"address_size": 150_964, "messages": 73, "max_size_bytes": 100_000, "policy": "BLOCK"}


def _collect(root: Path) -> None:
    """Day 1: blocked 10:00:00-10:00:30, the disk full 12:00:00-12:00:20 (the address blocked by
    it), blocked again at 23:00; day 2: samples at 00:30 and 01:00 (still blocked), the log
    rolled over at midnight."""
    log = root / "log" / "artemis.log"
    log.parent.mkdir(parents=True)
    now = [datetime(2026, 11, 27, 9, 59, tzinfo=UTC)]
    collector = ArtemisCollector(
        log_path=log,
        raw_dir=root / "raw",
        state_path=root / "state.json",
        broker=ARTEMIS,
        log_zone=UTC,
        jolokia=FakeJolokia([{"orders": SAMPLE}, {"orders": SAMPLE}]),
        sample_interval_s=30.0,
        clock=lambda: now[0],
    )
    log.write_text(
        block("2026-11-27 10:00:00,000")
        + unblock("2026-11-27 10:00:30,000")
        + disk_full("2026-11-27 12:00:00,000")
        + disk_blocking("2026-11-27 12:00:05,000")
        + disk_free("2026-11-27 12:00:20,000")
        + unblock("2026-11-27 12:00:20,002", size=0, msgs=0)
        + block("2026-11-27 23:00:00,000")
    )
    collector.read_log()
    log.rename(log.with_name("artemis.log.2026-11-27"))
    log.write_text("")
    for sampled_at in (
        datetime(2026, 11, 28, 0, 30, tzinfo=UTC),
        datetime(2026, 11, 28, 1, tzinfo=UTC),
    ):
        now[0] = sampled_at
        collector.sample()
    collector.flush()


@pytest.fixture(scope="module")
def tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("collected")
    _collect(root)
    _collect_rabbitmq(root)
    _collect_new_session_while_blocked(root)
    _collect_rabbitmq_new_session_while_blocked(root)
    conf = scratch_conf(root, "pipeline")
    counts = run_ingest(spark, conf, DAY1, DAY2)
    run_episodes(spark, conf, DAY1, DAY2)
    run_daily_metrics(spark, conf, DAY1, DAY2)
    run_recommend(spark, conf, DAY2, DAY2)
    advice = spark.read.format("delta").load(recommendations_path(conf))

    def of(table: Any) -> list[dict[str, Any]]:
        return [r.asDict() for r in read_table(spark, conf, table).collect()]

    raw = pq.read_table(root / "raw", columns=["broker"]).column("broker").to_pylist()
    return {
        "counts": counts,
        "raw rows": Counter(raw),
        "recommendations": [r.asDict() for r in advice.collect()],
        "episodes": sorted(
            (r for r in of(QUEUE_FLOW_EPISODES) if r["broker"] == ARTEMIS),
            key=lambda r: r["start_seq"],
        ),
        "daily": {r["date"]: r for r in of(QUEUE_FLOW_DAILY) if r["broker"] == ARTEMIS},
        "carried": sorted(
            (r for r in of(QUEUE_FLOW_EPISODES) if r["broker"] == CARRIED),
            key=lambda r: r["run_id"],
        ),
        "carried daily": [r for r in of(QUEUE_FLOW_DAILY) if r["broker"] == CARRIED],
        "carried rabbitmq": sorted(
            (r for r in of(BLOCKING_EPISODES) if r["broker"] == CARRIED_RABBITMQ),
            key=lambda r: (r["kind"], r["run_id"]),
        ),
        "carried rabbitmq daily": [
            r for r in of(BLOCKING_DAILY) if r["broker"] == CARRIED_RABBITMQ
        ],
        "blocking": of(BLOCKING_EPISODES),
        "blocking daily": of(BLOCKING_DAILY),
    }


def test_every_collected_row_keeps_the_contract(tables: dict[str, Any]) -> None:
    """Every row the collectors wrote is accepted: the Artemis session's 7, the RabbitMQ
    session's, and the two runs of the Artemis and of the RabbitMQ collected across
    --new-session."""
    counts, raw = tables["counts"], tables["raw rows"]
    assert raw[ARTEMIS] == 7 and raw[RABBITMQ] > 0 and raw[CARRIED] == 3
    assert raw[CARRIED_RABBITMQ] == 6
    assert set(raw) == {ARTEMIS, RABBITMQ, CARRIED, CARRIED_RABBITMQ}
    assert (counts["rows_read"], counts["rows_accepted"], counts["rows_quarantined"]) == (
        raw.total(),
        raw.total(),
        0,
    )


def test_the_full_disk_is_the_brokers_disk_alarm(tables: dict[str, Any]) -> None:
    """An alarm episode of resource disk, as a RabbitMQ disk alarm's; no episode of the address
    for it (test_the_episodes_of_the_address: its two episodes are max-size-bytes's)."""
    (alarm,) = [r for r in tables["blocking"] if r["broker"] == ARTEMIS]
    assert (alarm["kind"], alarm["entity"], alarm["duration_s"]) == ("alarm", "disk", 20.0)
    # The one disk alarm of the warehouse is Artemis's (the RabbitMQ session's is memory's).
    assert [r["broker"] for r in tables["blocking"] if r["entity"] == "disk"] == [ARTEMIS]


def test_the_episodes_of_the_address(tables: dict[str, Any]) -> None:
    closed, open_ = tables["episodes"]
    assert (closed["queue"], closed["duration_s"], closed["is_open"]) == ("orders", 30.0, False)
    assert (closed["flow_stop_size"], closed["peak_depth_bytes"]) == (100_000, 101_332)
    assert open_["is_open"] and open_["start_ts"].replace(tzinfo=None) == datetime(2026, 11, 27, 23)
    # The open one holds the samples (its peak is theirs: 150964 bytes), the closed one none.
    assert (closed["sample_interval_ms"], open_["sample_interval_ms"]) == (None, 30_000)
    assert open_["peak_depth_bytes"] == 150_964


def test_the_open_episode_counts_up_to_the_last_sample(tables: dict[str, Any]) -> None:
    day1, day2 = tables["daily"][DAY1], tables["daily"][DAY2]
    assert (day1["flow_stopped_count"], day1["episodes"]) == (2, 2)
    assert day1["time_stopped_s"] == 30.0 + 3600.0
    assert (day2["flow_stopped_count"], day2["stopped_at_day_start"]) == (0, True)
    assert day2["time_stopped_s"] == 3600.0  # 00:00 to the sample at 01:00
    assert day2["max_depth_bytes"] == 150_964  # the sample's: past max-size-bytes
    # ... and marked as resting on samples (DESIGN §6); day 1's figures are the log's events.
    assert (day1["sample_interval_ms"], day2["sample_interval_ms"]) == (None, 30_000)


def test_advice_on_the_sampled_address_is_marked_approximate(tables: dict[str, Any]) -> None:
    """DESIGN §6: the address's peak (150,964 bytes) is a sample's, so the advice resting on it
    says so, as the episode and the day do."""
    rows = {(r["entity_kind"], r["entity"]): r for r in tables["recommendations"]
            if r["broker"] == ARTEMIS}  # fmt: skip
    address = rows[("address", "orders")]
    assert (address["broker_kind"], address["sample_interval_ms"]) == ("artemis", 30_000)


# -- a new session while an address is blocked ----------------------------------------------
def _collect_new_session_while_blocked(root: Path) -> None:
    """Blocked at 09:00; the collector stopped, then started on a new session (a new run) at
    09:30, before the unblock at 09:45."""
    log = root / "log-2" / "artemis.log"
    log.parent.mkdir(parents=True)

    def collect(started: datetime, *, new_session: bool) -> None:
        ArtemisCollector(
            log_path=log,
            raw_dir=root / "raw",
            state_path=root / "carried-state.json",
            broker=CARRIED,
            log_zone=UTC,
            clock=lambda: started,
            new_session=new_session,
        ).run(stop=lambda: False, once=True)

    log.write_text(block("2026-11-27 09:00:00,000"))
    collect(datetime(2026, 11, 27, 9, 1, tzinfo=UTC), new_session=False)
    with log.open("a") as handle:
        handle.write(unblock("2026-11-27 09:45:00,000"))
    collect(datetime(2026, 11, 27, 9, 30, tzinfo=UTC), new_session=True)


def test_a_block_carried_into_a_new_session_is_counted_once(tables: dict[str, Any]) -> None:
    """The old run's episode ends at its watermark, its block line (DESIGN §4: an interval
    never closed ends at the watermark); the new run's starts there, from the block it
    carried over, and ends at the unblock line: 45 minutes stopped in all, not 0 (the new
    run's unblock alone, which the pipeline ignores: a review) nor 90."""
    old, new = tables["carried"]
    assert old["is_open"] and old["start_ts"] == new["start_ts"]
    assert (new["is_open"], new["duration_s"]) == (False, 2700.0)
    assert new["start_ts"].replace(tzinfo=None) == datetime(2026, 11, 27, 9)
    assert sum(day["time_stopped_s"] for day in tables["carried daily"]) == 2700.0


def _collect_rabbitmq_new_session_while_blocked(root: Path) -> None:
    """The node's memory alarm set at 09:00, its publisher sampled blocked at 09:00:30; the
    collector stopped, then started on a new session (a new run, without sampling) at 09:50,
    with the alarm's clear line at 09:45 still to read."""
    log = root / "log-3" / "rabbit@localhost.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "2026-11-27 09:00:00.000000+00:00 [warning] <0.320.0> memory resource limit alarm set "
        "on node rabbit@localhost.\n"
    )
    blocked = {"c1": {"protocol": "AMQP 0-9-1", "client_name": "publisher", "state": "blocked"}}

    def collect(started: datetime, *, new_session: bool) -> None:
        RabbitMQCollector(
            log_path=log,
            raw_dir=root / "raw",
            state_path=root / "carried-rabbitmq-state.json",
            broker=CARRIED_RABBITMQ,
            management=None if new_session else FakeManagement([ManagementSample({}, blocked)]),
            clock=lambda: started,
            new_session=new_session,
        ).run(stop=lambda: False, once=True)

    collect(datetime(2026, 11, 27, 9, 0, 30, tzinfo=UTC), new_session=False)
    with log.open("a") as handle:
        handle.write(
            "2026-11-27 09:45:00.000000+00:00 [warning] <0.320.0> memory resource limit alarm "
            "cleared on node rabbit@localhost\n"
        )
    collect(datetime(2026, 11, 27, 9, 50, tzinfo=UTC), new_session=True)


def test_an_alarm_and_a_block_carried_into_a_new_session_are_counted_once(
    tables: dict[str, Any],
) -> None:
    """As the Artemis block above: the old run's alarm and connection block end at its
    watermark (the sample at 09:00:30); the new run's start there, from the rows it carried
    over, and end at the clear line, each one closed interval (the new run's ends alone were
    ignored: a review). The alarm is counted 45 minutes in all, the block 44.5."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for episode in tables["carried rabbitmq"]:
        by_kind.setdefault(episode["kind"], []).append(episode)
    assert sorted(by_kind) == ["alarm", "connection"]
    watermark, cleared = datetime(2026, 11, 27, 9, 0, 30), datetime(2026, 11, 27, 9, 45)
    for kind, (old, new) in by_kind.items():
        assert old["is_open"], kind
        assert (new["is_open"], new["reason"]) == (False, "carried_over"), kind
        assert new["start_ts"].replace(tzinfo=None) == watermark, kind
        assert new["end_ts"].replace(tzinfo=None) == cleared, kind
        assert new["duration_s"] == 2670.0, kind
    assert by_kind["connection"][1]["entity"] == "c1"
    blocked_s = {kind: 0.0 for kind in by_kind}
    for day in tables["carried rabbitmq daily"]:
        blocked_s[day["kind"]] += day["blocked_s"]
    assert blocked_s == {"alarm": 2700.0, "connection": 2670.0}


# -- a RabbitMQ session: an alarm from the log (exact), a blocked connection from samples ------
def _collect_rabbitmq(root: Path) -> None:
    log = root / "rabbit@localhost.log"
    log.write_text(
        "2026-11-27 10:00:00.000000+00:00 [warning] <0.320.0> memory resource limit alarm set "
        "on node rabbit@localhost.\n"
    )
    state = {"protocol": "AMQP 0-9-1", "client_name": "publisher"}
    samples = [
        ManagementSample(connections={"c1": {**state, "state": "blocked"}}),
        ManagementSample(connections={"c1": {**state, "state": "running"}}),
    ]
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    collector = RabbitMQCollector(
        log_path=log,
        raw_dir=root / "raw",
        state_path=root / "rabbitmq-state.json",
        broker=RABBITMQ,
        management=FakeManagement(samples),
        sample_interval_s=30.0,
        clock=lambda: now[0],
    )
    collector.read_log()
    collector.sample()
    with log.open("a") as handle:
        handle.write(
            "2026-11-27 10:05:00.000000+00:00 [warning] <0.320.0> memory resource limit alarm "
            "cleared on node rabbit@localhost\n"
        )
    now[0] = datetime(2026, 11, 27, 10, 5, 30, tzinfo=UTC)
    collector.read_log()
    collector.sample()
    collector.flush()


def test_sampled_blocking_is_marked_approximate(tables: dict[str, Any]) -> None:
    episodes = {r["kind"]: r for r in tables["blocking"] if r["broker"] == RABBITMQ}
    assert (episodes["alarm"]["duration_s"], episodes["alarm"]["sample_interval_ms"]) == (
        300.0,
        None,
    )
    connection = episodes["connection"]
    # Blocked at the sample that found it (10:00:30), unblocked at the alarm's clear line.
    assert (connection["entity"], connection["reason"], connection["duration_s"]) == (
        "c1",
        "alarm",
        270.0,
    )
    assert connection["sample_interval_ms"] == 30_000
    daily = {r["kind"]: r for r in tables["blocking daily"] if r["broker"] == RABBITMQ}
    assert (daily["alarm"]["sample_interval_ms"], daily["connection"]["sample_interval_ms"]) == (
        None,
        30_000,
    )

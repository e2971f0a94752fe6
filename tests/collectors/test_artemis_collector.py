"""The Artemis collector on log files written by hand in the broker's own wording (the lines are
a real Artemis 2.40's, with their sizes): the events, and a session that survives restarts of
the collector (including a kill between a file's commit and the state file), a broker's stop and
crash, the log's roll-over at midnight and a day boundary, without losing or repeating a row."""

from __future__ import annotations

import bz2
import fcntl
import gzip
import json
import logging
import lzma
import os
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow.parquet as pq
import pytest

from collectors import artemis, base, logtail
from collectors.artemis import ArtemisCollector, JolokiaReader
from collectors.artemis_log import (
    BLOCKING,
    DISK_BLOCKING,
    STARTING,
    UNBLOCKING,
    parse_line,
)
from collectors.base import REASON_BROKER_RESTARTED, REASON_BROKER_STOPPED
from collectors.session import CHECKPOINT_KEY, CollectorStateError, SessionWriter, raw_lock_name
from jobs.raw_files import KNOWN_MARKERS, skipped_raw_entries
from schemas.broker_events import BROKER_EVENTS, ORIGIN_JOLOKIA
from tests.collectors.session_setup import NOON, CollectorSetup

WARN = "WARN  [org.apache.activemq.artemis.core.server]"
INFO = "INFO  [org.apache.activemq.artemis.core.server]"


def block(ts: str, address: str = "orders", size: int = 101_332, msgs: int = 49) -> str:
    return (
        f"{ts} {WARN} AMQ222183: Blocking message production on address '{address}'; "
        f"size={size} bytes ({msgs} messages); maxSize=100000 bytes (-1 messages); "
        f"globalSize={size} bytes ({msgs} messages); globalMaxSize=268435456 bytes (-1 messages);\n"
    )


def unblock(ts: str, address: str = "orders", size: int = 99_336, msgs: int = 48) -> str:
    return (
        f"{ts} {INFO} AMQ221046: Unblocking message production on address '{address}'; "
        f"size={size} bytes ({msgs} messages); maxSize=100000 bytes (-1 messages); "
        f"globalSize={size} bytes ({msgs} messages); globalMaxSize=268435456 bytes (-1 messages);\n"
    )


def bootstrap(ts: str) -> str:
    bootstrap_logger = "INFO  [org.apache.activemq.artemis.integration.bootstrap]"
    return f"{ts} {bootstrap_logger} AMQ101000: Starting ActiveMQ Artemis Server version 2.40.0\n"


def starting(ts: str) -> str:
    return f"{ts} {INFO} AMQ221000: Primary message broker is starting with configuration\n"


def stopped(ts: str) -> str:
    return (
        f"{ts} {INFO} AMQ221002: Apache ActiveMQ Artemis Message Broker version 2.40.0 "
        "[bd4794ee] stopped, uptime 12.239 seconds\n"
    )


# A real Artemis 2.40's lines with min-disk-free set just under the disk's free space, a file
# then filling the difference, a CORE producer sending, and the file removed
# (tests/realbrokers/test_artemis_collector.py does the same).
def disk_full(ts: str) -> str:
    return (
        f"{ts} {WARN} AMQ224128: Free storage space is at 63.1GB which is below the configured "
        "<min-disk-free>. System will start blocking producers.\n"
    )


def disk_blocking(ts: str, address: str = "orders") -> str:
    return (
        f"{ts} {WARN} AMQ222212: Disk Full! Blocking message production on address "
        f"'{address}'. Clients will report blocked.\n"
    )


def disk_free(ts: str) -> str:
    return (
        f"{ts} {WARN} AMQ224129: Free storage space is at 65.2GB which is above the configured "
        "<min-disk-free>. System will unblock producers.\n"
    )


def other(ts: str) -> str:
    return f"{ts} {WARN} AMQ222061: Client connection failed, clearing up resources\n"


Setup = CollectorSetup[ArtemisCollector]


def _artemis(**options: Any) -> ArtemisCollector:
    options.setdefault("log_zone", UTC)
    return ArtemisCollector(broker="artemis-1", **options)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return CollectorSetup(tmp_path, "artemis.log", _artemis)


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# -- the lines ---------------------------------------------------------------------------------
def test_a_blocking_line_of_artemis_2_40() -> None:
    line = parse_line(block("2026-11-27 22:06:07,635"), UTC)
    assert line is not None
    assert (line.code, line.address, line.size_bytes, line.messages, line.max_size_bytes) == (
        BLOCKING,
        "orders",
        101_332,
        49,
        100_000,
    )
    assert line.ts == _ts("2026-11-27 22:06:07.635")


def counted_block(ts: str, blocking: bool = True) -> str:
    """A real 2.40's line of an address that max-size-messages (20) blocks, max-size-bytes off."""
    code, level, verb = (
        (BLOCKING, WARN, "Blocking") if blocking else (UNBLOCKING, INFO, "Unblocking")
    )
    return (
        f"{ts} {level} {code}: {verb} message production on address 'counted'; size=58700 "
        "bytes (50 messages); maxSize=-1 bytes (20 messages); globalSize=58700 bytes (50 "
        "messages); globalMaxSize=268435456 bytes (500 messages);\n"
    )


def test_a_block_by_max_size_messages_has_its_count_threshold(setup: Setup) -> None:
    """The message limit after maxSize= (not globalMaxSize's) is the address's stop and resume
    count: the rows said no threshold in force, 0 / 0 (a review). Artemis is full at messages
    >= max-size-messages, as at size >= max-size-bytes, which the columns hold the same way."""
    line = parse_line(counted_block("2026-12-07 05:32:44,023"), UTC)
    assert line is not None
    assert (line.max_size_bytes, line.max_messages, line.messages) == (-1, 20, 50)
    by_bytes = parse_line(block("2026-12-07 05:32:44,023"), UTC)
    assert by_bytes is not None and by_bytes.max_messages == -1
    setup.write(
        counted_block("2026-12-07 05:32:44,023"),
        counted_block("2026-12-07 05:32:50,000", blocking=False),
    )
    setup.collect()
    rows = setup.rows()
    limits = [
        (r["event_type"], r["flow_stop_count"], r["flow_resume_count"], r["flow_stop_size"])
        for r in rows
    ]
    assert limits == [("flow_stopped", 20, 20, 0), ("flow_resumed", 20, 20, 0)]
    assert json.loads(rows[0]["detail"])["max_size_messages"] == 20
    # A state file of a release before it goes on (its addresses without the limit).
    state = json.loads(setup.state.read_text())
    del state["entities"]["addresses"]["counted"]["max_size_messages"]
    setup.state.write_text(json.dumps(state))
    setup.write(counted_block("2026-12-07 05:33:00,000"))
    setup.collect()
    assert [(r["event_type"], r["flow_stop_count"]) for r in setup.rows()[2:]] == [
        ("flow_stopped", 20)
    ]


def test_the_wording_of_releases_before_2_27() -> None:
    text = (
        "2021-05-26 17:20:17,865 INFO  [org.apache.activemq.artemis.core.server] AMQ221046: "
        "Unblocking message production on address 'a.b'; size is currently: 4096 bytes; "
        "max-size-bytes: 10485760"
    )
    line = parse_line(text, UTC)
    assert line is not None
    assert (line.code, line.address, line.size_bytes, line.messages, line.max_size_bytes) == (
        UNBLOCKING,
        "a.b",
        4096,
        None,
        10_485_760,
    )


def test_the_log_time_is_the_brokers_local_time() -> None:
    line = parse_line(starting("2026-07-01 09:00:00,250"), ZoneInfo("Europe/Paris"))
    assert line is not None
    assert (line.code, line.ts) == (STARTING, _ts("2026-07-01 07:00:00.250"))


def test_lines_without_a_timestamp_are_not_lines_of_the_log() -> None:
    assert parse_line("\tat org.apache.activemq.artemis.core.server.impl.X(X.java:1)", UTC) is None
    assert parse_line("     _        _               _", UTC) is None


def test_the_disk_lines() -> None:
    """Both limits' wordings (max-disk-usage's states the total and the usage rate)."""
    full = parse_line(disk_full("2026-11-28 01:09:12,256"), UTC)
    assert full is not None
    assert (full.disk_full, full.disk_limit, full.free_space, full.disk_usage) == (
        True,
        "min-disk-free",
        "63.1GB",
        None,
    )
    usage = parse_line(
        "2021-05-26 17:20:17,865 WARN  [org.apache.activemq.artemis.core.server] AMQ222211: "
        "Free storage space is at 6.1GB of 255.4GB total. Usage rate is 89.2% which is below the "
        "configured <max-disk-usage>. System will unblock producers.",
        UTC,
    )
    assert usage is not None
    assert (usage.disk_full, usage.disk_limit, usage.free_space, usage.disk_usage) == (
        False,
        "max-disk-usage",
        "6.1GB",
        "89.2%",
    )
    blocking = parse_line(disk_blocking("2026-11-28 01:09:13,309", "a.b"), UTC)
    assert blocking is not None
    assert (blocking.code, blocking.address, blocking.is_flow) == (DISK_BLOCKING, "a.b", False)


# -- events ------------------------------------------------------------------------------------
def test_a_full_disk_is_the_brokers_disk_alarm(setup: Setup) -> None:
    """A full disk blocks every producer: an alarm of resource disk, as the engine writes a
    RabbitMQ disk alarm, from the full line to the free one; the address it blocked, and the
    "Unblocking" it gets after, are no flow events (max-size-bytes did not block it), while a
    block by max-size-bytes later still is."""
    setup.write(
        disk_full("2026-11-28 01:09:12,256"),
        disk_blocking("2026-11-28 01:09:13,309"),
        other("2026-11-28 01:09:16,283"),
        disk_free("2026-11-28 01:09:16,471"),
        unblock("2026-11-28 01:09:16,473", size=0, msgs=0),
        block("2026-11-28 01:10:00,000"),
        unblock("2026-11-28 01:10:05,000"),
    )
    collector = setup.collect()
    rows = setup.rows()
    assert [r["event_type"] for r in rows] == [
        "alarm_raised",
        "alarm_cleared",
        "flow_stopped",
        "flow_resumed",
    ]
    raised, cleared = rows[0], rows[1]
    assert (raised["ts"], cleared["ts"]) == (
        _ts("2026-11-28 01:09:12.256"),
        _ts("2026-11-28 01:09:16.471"),
    )
    assert json.loads(raised["detail"]) == {
        "resource": "disk",
        "origin": "artemis-log",
        "log_code": "AMQ224128",
        "limit": "min-disk-free",
        "free_space": "63.1GB",
    }
    assert json.loads(cleared["detail"])["log_code"] == "AMQ224129"
    assert raised["queue"] is None and raised["protocol"] is None
    assert [r["flow_stopped_count"] for r in rows[2:]] == [1, 1]
    assert not collector.disk_full and collector.held_now() == []


def test_an_address_past_its_limit_when_the_disk_is_freed_stays_blocked(setup: Setup) -> None:
    """Artemis unblocks the addresses a full disk held in the moment it finds the disk free,
    those under max-size-bytes; one past it stays blocked, by max-size-bytes, and logs its
    "Unblocking" only once it drains: its block is written from the disk's release, and a
    crash before it drains ends it at the last line, as any block."""
    setup.write(
        disk_full("2026-11-28 10:00:00,000"),
        disk_blocking("2026-11-28 10:00:01,000"),
        disk_blocking("2026-11-28 10:00:02,000", address="audit"),
        disk_free("2026-11-28 10:00:10,000"),
        unblock("2026-11-28 10:00:10,002", address="audit", size=0, msgs=0),
        other("2026-11-28 10:00:20,000"),
        unblock("2026-11-28 10:00:40,000"),
        disk_full("2026-11-28 10:01:00,000"),
        disk_blocking("2026-11-28 10:01:01,000"),
        disk_free("2026-11-28 10:01:10,000"),
        other("2026-11-28 10:02:00,000"),
        bootstrap("2026-11-28 10:05:00,000"),  # a crash: orders never drained
    )
    collector = setup.collect()
    rows = [(r["event_type"], r["queue"], r["ts"], r["flow_stopped_count"]) for r in setup.rows()]
    assert rows == [
        ("alarm_raised", None, _ts("2026-11-28 10:00:00"), None),
        ("alarm_cleared", None, _ts("2026-11-28 10:00:10"), None),
        ("flow_stopped", "orders", _ts("2026-11-28 10:00:10"), 1),
        ("flow_resumed", "orders", _ts("2026-11-28 10:00:40"), 1),
        ("alarm_raised", None, _ts("2026-11-28 10:01:00"), None),
        ("alarm_cleared", None, _ts("2026-11-28 10:01:10"), None),
        ("flow_stopped", "orders", _ts("2026-11-28 10:01:10"), 2),
        ("flow_resumed", "orders", _ts("2026-11-28 10:02:00"), 2),
    ]
    reasons = [json.loads(r["detail"]).get("reason") for r in setup.rows()]
    assert reasons[2] == reasons[6] == "past max-size-bytes when the disk was freed"
    assert reasons[7] == REASON_BROKER_RESTARTED
    addresses = collector.addresses.values()
    assert all(not a.disk_blocked and a.disk_released_us is None for a in addresses)


def test_an_address_held_after_the_disk_is_freed_is_written_as_soon_as_that_is_known(
    setup: Setup,
) -> None:
    """Its block is written once any line of the log is past the moment of the release, not
    when the address drains."""
    setup.write(
        disk_full("2026-11-28 10:00:00,000"),
        disk_blocking("2026-11-28 10:00:01,000"),
        disk_free("2026-11-28 10:00:10,000"),
        other("2026-11-28 10:00:10,500"),  # within the moment: nothing known yet
    )
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == ["alarm_raised", "alarm_cleared"]
    setup.write(other("2026-11-28 10:00:20,000"))
    setup.collect()
    assert [(r["event_type"], r["queue"], r["ts"]) for r in setup.rows()[2:]] == [
        ("flow_stopped", "orders", _ts("2026-11-28 10:00:10")),
    ]


def test_a_sample_after_the_disk_is_freed_finds_the_address_held(setup: Setup) -> None:
    """The log quiet since the release: the sample is past its moment and says so."""
    setup.write(
        disk_full("2026-11-28 10:00:00,000"),
        disk_blocking("2026-11-28 10:00:01,000"),
        disk_free("2026-11-28 10:00:10,000"),
    )
    orders = {"address_size": 150_964, "messages": 73, "max_size_bytes": 100_000, "policy": None}
    taken = datetime(2026, 11, 28, 10, 0, 15, tzinfo=UTC)
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": orders}]), sample_interval_s=0.0, clock=lambda: taken
    )
    collector.poll_once()
    collector.flush()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows[2:]] == [
        ("flow_stopped", _ts("2026-11-28 10:00:10")),
        ("queue_declared", taken),
    ]
    assert (rows[3]["flow_stopped"], rows[3]["flow_stopped_count"]) == (True, 1)


@pytest.mark.parametrize("policy", ["PAGE", "DROP", "FAIL", "BLOCK"])
def test_only_a_block_address_past_its_limit_is_held_after_the_disk_is_freed(
    setup: Setup, policy: str
) -> None:
    """A full disk blocks an address of any policy; once it is freed, one past max-size-bytes
    stays blocked only under BLOCK. A PAGE address paging then was written blocked from the
    release (a review); its "Unblocking", once it stops paging, is the disk's and writes no
    row either."""
    past = {"address_size": 20_000_000, "messages": 20_000, "max_size_bytes": 10_000_000}
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": {**past, "policy": policy}}]),
        clock=lambda: datetime(2026, 11, 28, 9, 59, tzinfo=UTC),
    )
    collector.sample()
    collector.flush()
    collector.close()
    setup.write(
        disk_full("2026-11-28 10:00:00,000"),
        disk_blocking("2026-11-28 10:00:01,000"),
        disk_free("2026-11-28 10:00:10,000"),
        other("2026-11-28 10:00:20,000"),
        unblock("2026-11-28 12:00:00,000", size=0, msgs=0),
    )
    setup.collect()
    flow = [(r["event_type"], r["ts"]) for r in setup.rows() if r["queue"] == "orders"][1:]
    held = [
        ("flow_stopped", _ts("2026-11-28 10:00:10")),
        ("flow_resumed", _ts("2026-11-28 12:00:00")),
    ]
    assert flow == (held if policy == "BLOCK" else [])


@pytest.mark.parametrize("by", ["line", "sample"])
def test_a_release_settled_after_midnight_commits_with_a_checkpoint_past_it(
    setup: Setup, by: str
) -> None:
    """The disk freed at 23:59:59.5 with the address still held: its block (on the old day)
    is known at the first line or sample of the new day. Written inside that step, the new
    day's commit carried the checkpoint from before it, one seq behind the rows it held, and a
    restart from there wrote that seq again (an audit)."""
    setup.write(
        disk_full("2026-11-27 23:59:58,000"),
        disk_blocking("2026-11-27 23:59:58,100"),
        disk_free("2026-11-27 23:59:59,500"),
    )
    taken = datetime(2026, 11, 28, 0, 0, 10, tzinfo=UTC)
    orders = {"address_size": 150_964, "messages": 73, "max_size_bytes": 100_000, "policy": None}
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": orders}]), sample_interval_s=0.0, clock=lambda: taken
    )
    collector.read_log()
    if by == "line":
        setup.write(block("2026-11-28 00:00:10,000", address="invoices"))
        collector.read_log()
    else:
        collector.sample()
        collector.flush()
    day_one = max(setup.raw.glob("date=2026-11-27/*.parquet"))
    seqs = pq.read_table(day_one).column("seq").to_pylist()
    checkpoint = json.loads(pq.read_schema(day_one).metadata[CHECKPOINT_KEY])
    assert seqs == [0, 1, 2] and checkpoint["next_seq"] == 3
    collector.close()


def test_a_broker_that_stops_or_crashes_with_its_disk_full_clears_the_alarm(
    setup: Setup,
) -> None:
    setup.write(
        disk_full("2026-11-28 10:00:00,000"),
        stopped("2026-11-28 10:05:00,000"),
        bootstrap("2026-11-28 10:06:00,000"),
        disk_full("2026-11-28 10:06:05,000"),
        other("2026-11-28 10:07:00,000"),
        bootstrap("2026-11-28 11:00:00,000"),  # no stop line: killed
    )
    collector = setup.collect()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows] == [
        ("alarm_raised", _ts("2026-11-28 10:00:00")),
        ("alarm_cleared", _ts("2026-11-28 10:05:00")),
        ("alarm_raised", _ts("2026-11-28 10:06:05")),
        ("alarm_cleared", _ts("2026-11-28 10:07:00")),  # its last line before the boot
    ]
    reasons = [json.loads(r["detail"]).get("reason") for r in rows]
    assert reasons == [None, REASON_BROKER_STOPPED, None, REASON_BROKER_RESTARTED]
    assert [json.loads(r["detail"]).get("last_seen") for r in rows] == [
        None,
        None,
        None,
        "log_line",
    ]
    assert not collector.disk_full


def test_the_disk_alarm_goes_on_across_a_collector_restart(setup: Setup) -> None:
    setup.write(disk_full("2026-11-28 10:00:00,000"))
    first = setup.collect()
    assert first.held_now() == ["disk alarm"]
    setup.write(disk_full("2026-11-28 10:00:01,000"), disk_free("2026-11-28 10:01:00,000"))
    second = setup.collect()
    assert second.state.run_id == first.state.run_id
    rows = setup.rows()
    assert [r["event_type"] for r in rows] == ["alarm_raised", "alarm_cleared"]
    assert [r["seq"] for r in rows] == [0, 1]


def test_a_state_file_without_the_disk_alarm_goes_on(setup: Setup) -> None:
    """A checkpoint of the release before the disk alarm held the address map itself (nor
    had it the address fields added since)."""
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    state = json.loads(setup.state.read_text())
    state["entities"] = state["entities"]["addresses"]
    for fields in state["entities"].values():
        del fields["max_size_messages"], fields["missing_since_us"]
    setup.state.write_text(json.dumps(state))
    setup.write(unblock("2026-11-27 10:00:04,000"))
    setup.collect()
    assert [r["flow_stopped_count"] for r in setup.rows()] == [1, 1]
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped", "flow_resumed"]


def test_a_block_and_an_unblock_are_the_addresses_flow_events(setup: Setup) -> None:
    setup.write(
        starting("2026-11-27 22:06:04,100"),
        block("2026-11-27 22:06:07,635"),
        other("2026-11-27 22:06:14,084"),
        unblock("2026-11-27 22:06:15,317"),
    )
    collector = setup.collect()
    rows = setup.rows()
    assert [r["event_type"] for r in rows] == ["flow_stopped", "flow_resumed"]
    stop, resume = rows
    assert stop["run_id"] == resume["run_id"] == collector.state.run_id
    assert [stop["seq"], resume["seq"]] == [0, 1]
    assert stop["ts"] == _ts("2026-11-27 22:06:07.635")
    assert resume["ts"] == _ts("2026-11-27 22:06:15.317")
    assert (stop["queue"], stop["depth_bytes"], stop["depth_msgs"]) == ("orders", 101_332, 49)
    assert (resume["depth_bytes"], resume["depth_msgs"]) == (99_336, 48)
    assert (stop["flow_stopped"], stop["flow_stopped_count"]) == (True, 1)
    assert (resume["flow_stopped"], resume["flow_stopped_count"]) == (False, 1)
    # The engine's columns for the same transition: max-size-bytes is the stop and resume size.
    assert (stop["flow_stop_size"], stop["flow_resume_size"], stop["flow_stop_count"]) == (
        100_000,
        100_000,
        0,
    )
    detail = json.loads(stop["detail"])
    assert detail == {
        "address": "orders",
        "address_size": 101_332,
        "max_size_bytes": 100_000,
        "policy": "BLOCK",
        "origin": "artemis-log",
        "log_code": BLOCKING,
    }
    files = list(setup.raw.glob("date=2026-11-27/part-*.parquet"))
    assert len(files) == 1
    assert pq.read_schema(files[0]).remove_metadata().equals(BROKER_EVENTS.to_pyarrow())


def test_a_second_block_line_without_an_unblock_is_not_a_second_episode(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), block("2026-11-27 10:00:05,000"))
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def test_a_broker_that_stops_holds_nothing_blocked(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), stopped("2026-11-27 10:05:00,000"))
    setup.collect()
    rows = setup.rows()
    assert [r["event_type"] for r in rows] == ["flow_stopped", "flow_resumed"]
    assert rows[1]["ts"] == _ts("2026-11-27 10:05:00")
    assert json.loads(rows[1]["detail"])["reason"] == REASON_BROKER_STOPPED


def test_a_broker_that_crashed_unblocks_at_its_last_line(setup: Setup) -> None:
    setup.write(
        block("2026-11-27 10:00:00,000"),
        other("2026-11-27 10:02:00,000"),
        bootstrap("2026-11-27 11:00:00,000"),  # no stop line: killed; a start's first line
        starting("2026-11-27 11:00:00,050"),
        block("2026-11-27 11:00:30,000"),
    )
    setup.collect()
    rows = setup.rows()
    assert [r["event_type"] for r in rows] == ["flow_stopped", "flow_resumed", "flow_stopped"]
    assert rows[1]["ts"] == _ts("2026-11-27 10:02:00")
    detail = json.loads(rows[1]["detail"])
    assert (detail["reason"], detail["last_seen"]) == (REASON_BROKER_RESTARTED, "log_line")
    assert [r["flow_stopped_count"] for r in rows] == [1, 1, 2]


def test_a_crash_after_a_later_sample_ends_there_and_says_so(setup: Setup) -> None:
    """Sampled up at 10:30, after its last line (10:02), the broker crashed between then and
    the boot: the release is stamped at the sample (rows never go back in time), and
    detail.last_seen says it is a sample's time, not the log's (the walk-through's D7)."""
    setup.write(block("2026-11-27 10:00:00,000"), other("2026-11-27 10:02:00,000"))
    orders = {"address_size": 101_332, "messages": 49, "max_size_bytes": 100_000, "policy": None}
    taken = datetime(2026, 11, 27, 10, 30, 0, tzinfo=UTC)
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": orders}]), sample_interval_s=0.0, clock=lambda: taken
    )
    collector.poll_once()
    setup.write(bootstrap("2026-11-27 11:00:00,000"))  # no stop line: killed
    collector.read_log()
    collector.flush()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00")),
        ("queue_declared", taken),
        ("flow_resumed", taken),
    ]
    detail = json.loads(rows[2]["detail"])
    assert (detail["reason"], detail["last_seen"]) == (REASON_BROKER_RESTARTED, "sample")


# -- a session that goes on --------------------------------------------------------------------
def test_a_restarted_collector_goes_on_with_the_same_run(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"), block("2026-11-27 10:01:00,000"))
    second = setup.collect()
    assert second.resumed and second.state.run_id == first.state.run_id
    rows = setup.rows()
    assert [(r["seq"], r["event_type"], r["flow_stopped_count"]) for r in rows] == [
        (0, "flow_stopped", 1),
        (1, "flow_resumed", 1),
        (2, "flow_stopped", 2),
    ]
    assert {r["run_id"] for r in rows} == {first.state.run_id}
    setup.collect()  # nothing new: nothing written again
    assert len(setup.rows()) == 3


def test_killed_after_a_commit_and_before_its_state_file(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    stale = setup.state.read_bytes()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    setup.collect()
    setup.state.write_bytes(stale)  # the state file as it was before the second commit
    setup.write(block("2026-11-27 10:02:00,000"))
    setup.collect()
    rows = setup.rows()
    assert [(r["seq"], r["event_type"]) for r in rows] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
        (2, "flow_stopped"),
    ]
    newest = max(setup.raw.glob("date=*/*.parquet"))
    checkpoint = json.loads(pq.read_schema(newest).metadata[CHECKPOINT_KEY])
    assert checkpoint["next_seq"] == 3


def test_killed_before_a_commit_the_same_lines_get_the_same_seq(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    killed = setup.collector()
    killed.read_log()  # read, never committed: the process dies here
    killed.close()  # (its lock goes with it)
    (row,) = setup.rows()
    cut = f".part-{row['run_id']}-000000000001.parquet.inprogress"  # its commit, cut short
    (setup.raw / "date=2026-11-27" / cut).write_bytes(b"cut")
    setup.collect()
    assert [(r["seq"], r["event_type"]) for r in setup.rows()] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
    ]
    assert not list(setup.raw.glob("date=*/.*inprogress"))


def test_a_commit_in_progress_of_another_writer_is_left_alone(setup: Setup) -> None:
    """Collectors of other brokers and client recorders may share the raw folder: a hidden file
    of another run is its commit in progress unless no one has touched it for an hour. Every
    one was removed at a start, cutting a running collector's rename short (an audit)."""
    folder = setup.raw / "date=2026-11-27"
    folder.mkdir(parents=True)
    running = folder / ".part-collect-other-20261127T100000000000Z-000000000000.parquet.inprogress"
    killed = folder / ".part-client-other-20261126T100000000000Z-000000000007.parquet.inprogress"
    running.write_bytes(b"being written")
    killed.write_bytes(b"cut")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(killed, (two_hours_ago, two_hours_ago))
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    assert running.exists() and not killed.exists()
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def test_a_new_session_is_a_new_run(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    later = lambda: datetime(2026, 11, 28, 9, tzinfo=UTC)  # noqa: E731
    second = setup.collect(new_session=True, clock=later)
    assert second.state.run_id != first.state.run_id


def test_the_state_of_another_broker_is_refused(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    with pytest.raises(CollectorStateError, match="session of broker 'artemis-1'"):
        ArtemisCollector(
            log_path=setup.log, raw_dir=setup.raw, state_path=setup.state, broker="artemis-2"
        )


def test_the_log_rolled_over_at_midnight_loses_nothing(setup: Setup) -> None:
    setup.write(block("2026-11-27 23:59:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 23:59:58,000"))  # written, not yet read
    setup.log.rename(setup.log.with_name("artemis.log.2026-11-27"))
    setup.write(block("2026-11-28 00:00:30,000"))
    setup.collect()
    rows = setup.rows()
    assert [(r["seq"], r["event_type"], r["ts"].date().isoformat()) for r in rows] == [
        (0, "flow_stopped", "2026-11-27"),
        (1, "flow_resumed", "2026-11-27"),
        (2, "flow_stopped", "2026-11-28"),
    ]
    # A batch never spans two days: each day's rows are in its own partition.
    assert sorted(p.parent.name for p in setup.raw.glob("date=*/*.parquet")) == [
        "date=2026-11-27",
        "date=2026-11-27",
        "date=2026-11-28",
    ]


def test_a_half_written_line_waits(setup: Setup) -> None:
    whole = block("2026-11-27 10:00:00,000")
    setup.write(whole[:40])
    setup.collect()
    assert setup.rows() == []
    setup.write(whole[40:])
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def test_a_truncated_log_is_read_from_its_start(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), other("2026-11-27 10:00:01,000"))
    setup.collect()
    setup.log.write_text(unblock("2026-11-27 10:05:00,000"))
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped", "flow_resumed"]


@pytest.mark.parametrize("compress", [None, "gz"])
def test_a_log_copied_then_truncated_is_read_on_in_the_copy(
    setup: Setup, compress: str | None
) -> None:
    """logrotate's copytruncate: the live file keeps its inode and is emptied, the lines written
    after the position are in the copy (artemis.log.1, compressed or not, a new inode). They
    were lost when the copy was not compressed (an audit), whether the live file had been
    written to again (a new first line) or was still empty."""
    setup.write(block("2026-11-27 10:00:00,000"), other("2026-11-27 10:00:01,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"))  # written, not yet read
    copy = setup.log.with_name("artemis.log.1")
    copy.write_bytes(setup.log.read_bytes())
    if compress:
        copy.with_name("artemis.log.1.gz").write_bytes(gzip.compress(copy.read_bytes()))
        copy.unlink()
    setup.log.write_text("")
    setup.collect()  # the live file empty
    setup.write(block("2026-11-27 10:06:00,000"))
    setup.collect()
    assert [(r["event_type"], r["ts"]) for r in setup.rows()] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00")),
        ("flow_resumed", _ts("2026-11-27 10:00:04")),
        ("flow_stopped", _ts("2026-11-27 10:06:00")),
    ]


def test_a_log_copied_then_truncated_and_written_again_is_read_on_in_the_copy(
    setup: Setup,
) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), other("2026-11-27 10:00:01,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    setup.log.with_name("artemis.log.1").write_bytes(setup.log.read_bytes())
    # Truncated, then written past the old position before the collector looks again.
    setup.log.write_text(block("2026-11-27 10:06:00,000") + other("2026-11-27 10:06:01,000") * 3)
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == [
        "flow_stopped",
        "flow_resumed",
        "flow_stopped",
    ]


def test_the_hour_lived_twice_when_the_clocks_go_back(setup: Setup) -> None:
    """Europe/Paris, 27 October 2024: 02:00-03:00 local is lived at 00:00Z and again at 01:00Z.
    A block in the first pass and its unblock in the second were both read as the first, the
    unblock then held at the block's time: a 20-minute episode lasted 0 s (an audit)."""
    setup.write(
        block("2024-10-27 02:50:00,000"),  # 00:50Z
        unblock("2024-10-27 02:10:00,000"),  # the clocks went back at 03:00: 01:10Z
        block("2024-10-27 02:40:00,000"),  # 01:40Z
        unblock("2024-10-27 03:05:00,000"),  # 02:05Z: no longer ambiguous
    )
    setup.collect(log_zone=ZoneInfo("Europe/Paris"))
    assert [(r["event_type"], r["ts"]) for r in setup.rows()] == [
        ("flow_stopped", _ts("2024-10-27 00:50")),
        ("flow_resumed", _ts("2024-10-27 01:10")),
        ("flow_stopped", _ts("2024-10-27 01:40")),
        ("flow_resumed", _ts("2024-10-27 02:05")),
    ]


def test_a_log_read_in_the_wrong_time_zone_is_said_once(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker logging Paris time read as UTC: its lines are stamped an hour after they were
    read. Rows never go back in time, so every sample after them took their time, in silence
    (an audit); now said once, with the option that sets it right. Read in its zone, nothing."""
    setup.write(block("2026-11-27 12:59:00,000"), unblock("2026-11-27 13:00:30,000"))
    read_at = lambda: datetime(2026, 11, 27, 12, 1, tzinfo=UTC)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        setup.collect(clock=read_at)
    said = [r.getMessage() for r in caplog.records if "before its time" in r.getMessage()]
    assert len(said) == 1 and "3480 s before its time" in said[0]
    assert "--log-timezone" in said[0]
    caplog.clear()
    setup.write(block("2026-11-27 13:02:00,000"))  # 12:02Z, read at 12:03Z
    read_later = lambda: datetime(2026, 11, 27, 12, 3, tzinfo=UTC)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        run = setup.collect(new_session=True, clock=read_later, log_zone=ZoneInfo("Europe/Paris"))
    assert run.lines_timed == 1 and "before its time" not in caplog.text


def test_a_line_whose_stamp_is_no_time_is_skipped_and_said(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn or garbled write (30 February) stopped the collector, its position before the
    line, so every restart stopped on it again (an audit)."""
    setup.write(
        block("2026-11-27 10:00:00,000"),
        "2026-02-30 10:00:00,000 INFO  [org.apache.activemq.artemis.core.server] garbage\n",
        unblock("2026-11-27 10:00:04,000"),
    )
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        collector = setup.collect()
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped", "flow_resumed"]
    assert collector.lines_unreadable == 1
    assert "a line whose timestamp is no time is skipped (day is out of range" in caplog.text


# -- samples -----------------------------------------------------------------------------------
class FakeJolokia(JolokiaReader):
    def __init__(self, answers: list[dict[str, dict[str, Any]] | Exception]) -> None:
        super().__init__("http://127.0.0.1:1/console/jolokia", "u", "p")
        self.answers = answers

    def addresses(self) -> dict[str, dict[str, Any]]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_addresses_gone_from_the_samples_are_forgotten_unless_they_blocked(setup: Setup) -> None:
    """Temporary addresses (reply queues) piled up in the state every checkpoint copies (an
    audit): one a sample no longer lists is dropped, unless it has blocked (its counter goes
    on) or is outside the sampled addresses."""
    quiet = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    setup.write(block("2026-11-27 10:00:00,000"), unblock("2026-11-27 10:00:04,000"))
    now = [datetime(2026, 11, 27, 10, 0, 10, tzinfo=UTC)]
    samples: list[dict[str, dict[str, Any]] | Exception] = [
        {"orders": quiet, "reply.1": quiet, "reply.2": quiet, "audit": quiet},
        {"reply.2": quiet},
    ]
    collector = setup.collector(
        jolokia=FakeJolokia(samples),
        sampled_addresses=frozenset({"orders", "reply.1", "reply.2"}),
        sample_interval_s=0.0,
        clock=lambda: now[0],
    )
    collector.read_log()
    collector.sample()
    collector.flush()
    assert set(collector.addresses) == {"orders", "reply.1", "reply.2"}
    now[0] = datetime(2026, 11, 27, 10, 0, 20, tzinfo=UTC)
    collector.sample()
    collector.flush()
    # orders blocked once: kept (its flow_stopped_count goes on); reply.1 gone.
    assert set(collector.addresses) == {"orders", "reply.2"}
    assert collector.addresses["orders"].blocked_count == 1
    collector.close()


def test_an_address_deleted_while_blocked_is_unblocked_at_the_first_sample_without_it(
    setup: Setup,
) -> None:
    """Deleting an address logs no "Unblocking": it stayed blocked for the rest of the run (a
    review). Two samples in a row that no longer list it end its block at the first; one that
    lists it without its figures (its read failed: deleted between the search and the read,
    or a passing error) does not, nor does a sample of other addresses only (``--address``)."""
    setup.write(block("2026-11-27 10:00:00,000"))
    quiet = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    now = [datetime(2026, 11, 27, 10, 5, tzinfo=UTC)]
    samples: list[dict[str, dict[str, Any] | None] | Exception] = [
        {"orders": None, "DLQ": quiet},
        {"DLQ": quiet},
        {"DLQ": quiet},
    ]
    collector = setup.collector(
        jolokia=FakeJolokia(samples), sample_interval_s=0.0, clock=lambda: now[0]
    )
    collector.read_log()
    for minute in (5, 6, 7):
        now[0] = datetime(2026, 11, 27, 10, minute, tzinfo=UTC)
        collector.sample()
        collector.flush()
        if minute in (5, 6):
            assert collector.held_now() == ["address orders"]
    collector.close()
    flow = [r for r in setup.rows() if r["queue"] == "orders"]
    assert [(r["event_type"], r["ts"], r["flow_stopped_count"]) for r in flow] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00"), 1),
        ("flow_resumed", _ts("2026-11-27 10:06:00"), 1),
    ]
    detail = json.loads(flow[1]["detail"])
    assert (detail["reason"], detail["origin"]) == ("address_removed", ORIGIN_JOLOKIA)
    assert collector.held_now() == []
    # A session sampling other addresses only says nothing of this one.
    setup.write(block("2026-11-27 10:10:00,000", address="invoices"))
    only_dlq = setup.collector(
        jolokia=FakeJolokia([{"DLQ": quiet}]),
        sampled_addresses=frozenset({"DLQ"}),
        clock=lambda: datetime(2026, 11, 27, 10, 11, tzinfo=UTC),
    )
    only_dlq.run(stop=lambda: False, once=True)
    assert only_dlq.held_now() == ["address invoices"]


def test_samples_keep_the_watermark_and_never_go_back_in_time(setup: Setup) -> None:
    orders = {
        "address_size": 150_964,
        "messages": 73,
        "max_size_bytes": 100_000,
        "policy": "BLOCK",
    }
    dlq = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    now = [datetime(2026, 11, 27, 10, 0, 10, tzinfo=UTC)]
    jolokia = FakeJolokia([ConnectionRefusedError("down"), {"orders": orders, "DLQ": dlq}])
    setup.write(block("2026-11-27 10:00:00,000"))
    collector = setup.collector(jolokia=jolokia, sample_interval_s=0.0, clock=lambda: now[0])
    collector.poll_once()  # Jolokia down: no sample, nothing lost
    now[0] = datetime(2026, 11, 27, 9, 59, 0, tzinfo=UTC)  # a clock behind the log
    collector.poll_once()
    collector.flush()
    rows = setup.rows()
    assert [(r["event_type"], r["queue"]) for r in rows] == [
        ("flow_stopped", "orders"),
        ("queue_declared", "DLQ"),
        ("queue_declared", "orders"),
    ]
    dlq_row, orders_row = rows[1], rows[2]
    assert orders_row["ts"] == dlq_row["ts"] == rows[0]["ts"]  # never before the block
    assert (orders_row["depth_bytes"], orders_row["depth_msgs"]) == (150_964, 73)
    assert (orders_row["flow_stopped"], orders_row["flow_stopped_count"]) == (True, 1)
    assert orders_row["flow_stop_size"] == 100_000
    assert dlq_row["flow_stop_size"] == 0  # PAGE, no limit: no threshold in force
    detail = json.loads(orders_row["detail"])
    assert (detail["origin"], detail["sample_interval_ms"]) == (ORIGIN_JOLOKIA, 0)
    assert json.loads(dlq_row["detail"])["policy"] == "PAGE"


def test_a_sample_on_a_new_day_starts_a_new_file(setup: Setup) -> None:
    sample = {"address_size": 10, "messages": 1, "max_size_bytes": 100_000, "policy": "BLOCK"}
    setup.write(block("2026-11-27 23:59:59,000"))
    midnight = datetime(2026, 11, 28, 0, 0, 5, tzinfo=UTC)
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": sample}]),
        sample_interval_s=0.0,
        clock=lambda: midnight,
    )
    collector.run(stop=lambda: False, once=True)
    by_day = {
        path.parent.name: [r["seq"] for r in pq.read_table(path).to_pylist()]
        for path in setup.raw.glob("date=*/*.parquet")
    }
    assert by_day == {"date=2026-11-27": [0], "date=2026-11-28": [1]}
    assert setup.rows()[1]["ts"] == midnight


def test_a_sample_waits_for_the_line_of_an_event_before_it(setup: Setup) -> None:
    """The block happened at .400 and reached the log after the sample at .500 was taken: the
    line keeps its own time and comes first."""
    sample = {"address_size": 150_964, "messages": 73, "max_size_bytes": 100_000, "policy": None}
    taken = datetime(2026, 11, 27, 10, 0, 0, 500_000, tzinfo=UTC)
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": sample}]), sample_interval_s=60.0, clock=lambda: taken
    )
    collector.poll_once()
    setup.write(block("2026-11-27 10:00:00,400"))
    collector.poll_once()
    collector.flush()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00.400")),
        ("queue_declared", taken),
    ]
    assert (rows[1]["flow_stopped"], rows[1]["flow_stopped_count"]) == (True, 1)


def test_an_address_created_during_a_samples_round_trip_is_not_removed(setup: Setup) -> None:
    """The search ran before ``orders`` was created and blocked at .400, the sample was stamped
    at .500: the first sample without it ended its block at once (a review). Only a second
    sample in a row without it does; one that lists it, or a line of it, in between starts the
    count again."""
    dlq = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    orders = {**dlq, "max_size_bytes": 100_000, "policy": "BLOCK"}
    taken = [datetime(2026, 11, 27, 10, 0, 0, 500_000, tzinfo=UTC)]
    samples: list[dict[str, dict[str, Any] | None] | Exception] = [
        {"DLQ": dlq},  # searched before .400
        {"DLQ": dlq, "orders": orders},
        {"DLQ": dlq},  # gone? (not a removal yet)
        {"DLQ": dlq},  # its lines before it: there
    ]
    collector = setup.collector(
        jolokia=FakeJolokia(samples), sample_interval_s=60.0, clock=lambda: taken[0]
    )
    collector.poll_once()
    setup.write(block("2026-11-27 10:00:00,400"))
    collector.poll_once()
    collector.flush()
    assert collector.held_now() == ["address orders"]
    for minute in (1, 2, 3):
        taken[0] = datetime(2026, 11, 27, 10, minute, 0, 500_000, tzinfo=UTC)
        collector.sample()
        if minute == 3:
            setup.write(unblock("2026-11-27 10:02:30,000"), block("2026-11-27 10:02:30,050"))
            collector.read_log()
        collector.flush()
        assert collector.held_now() == ["address orders"], minute
    collector.close()
    flow = [(r["event_type"], r["ts"]) for r in setup.rows() if r["queue"] == "orders"]
    assert [f for f in flow if f[0] != "queue_declared"] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00.400")),
        ("flow_resumed", _ts("2026-11-27 10:02:30")),
        ("flow_stopped", _ts("2026-11-27 10:02:30.050")),
    ]


def test_only_the_addresses_asked_for_are_sampled(setup: Setup) -> None:
    sample = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": sample, "DLQ": sample}]),
        sampled_addresses=frozenset({"orders"}),
    )
    collector.sample()
    collector.flush()
    assert [r["queue"] for r in setup.rows()] == ["orders"]


def test_an_address_asked_for_that_the_broker_does_not_list_is_said_once(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """An audit's case: `--address ordrs` (a typo) sampled nothing, silently. It is said once,
    with what the broker lists; not refused (an address may be created later)."""
    sample = {"address_size": 0, "messages": 0, "max_size_bytes": -1, "policy": "PAGE"}
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": sample, "DLQ": sample}] * 2 + [{"ordrs": sample}]),
        sampled_addresses=frozenset({"ordrs"}),
    )
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        collector.sample()
        collector.sample()
        collector.sample()  # created meanwhile: sampled
    collector.flush()
    said = [r.getMessage() for r in caplog.records if "--address" in r.getMessage()]
    assert said == [
        "--address ordrs: the broker lists no such address (it lists: DLQ, orders); not sampled "
        "until it appears"
    ]
    assert [r["queue"] for r in setup.rows()] == ["ordrs"]


# -- what a review found -----------------------------------------------------------------------
#: How logrotate's ``compress`` would write a rolled file, by suffix.
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
}


def _roll(log: Path, name: str, mtime: float, compress: str | None = None) -> Path:
    """``log`` rolled to ``name``, dated ``mtime``; compressed as logrotate's ``compress`` does
    when ``compress`` is a suffix: a new file (a new inode), the plain one removed."""
    rolled = log.rename(log.with_name(name))
    if compress is not None:
        packed = rolled.with_name(name + compress)
        packed.write_bytes(COMPRESSORS[compress](rolled.read_bytes()))
        rolled.unlink()
        rolled = packed
    os.utime(rolled, (mtime, mtime))
    return rolled


@pytest.mark.parametrize("compress", [None, *sorted(COMPRESSORS)])
def test_two_roll_overs_while_the_collector_was_stopped(setup: Setup, compress: str | None) -> None:
    """The file read up to a position was rolled (and compressed by logrotate's ``compress``:
    a new inode) and another rolled after it: its rest, the other and the live log are read."""
    setup.write(other("2026-11-26 22:00:00,000"), block("2026-11-26 23:00:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-26 23:30:00,000"))  # after the position
    now = time.time()
    _roll(setup.log, "artemis.log.2026-11-26", now - 20, compress=compress)
    setup.write(block("2026-11-27 09:00:00,000"), unblock("2026-11-27 09:10:00,000"))
    _roll(setup.log, "artemis.log.2026-11-27", now - 10)
    setup.write(block("2026-11-28 08:00:00,000"))
    setup.collect()
    assert [(r["seq"], r["event_type"], r["ts"].isoformat()[:16]) for r in setup.rows()] == [
        (0, "flow_stopped", "2026-11-26T23:00"),
        (1, "flow_resumed", "2026-11-26T23:30"),
        (2, "flow_stopped", "2026-11-27T09:00"),
        (3, "flow_resumed", "2026-11-27T09:10"),
        (4, "flow_stopped", "2026-11-28T08:00"),
    ]


def test_a_position_in_a_compressed_file_reads_on_from_its_offset(tmp_path: Path) -> None:
    """A collector stopped part-way through a compressed rolled file goes on from the same
    offset of its text, then the live log."""
    log = tmp_path / "artemis.log"
    log.write_text("one\ntwo\nthree\n")
    packed = _roll(log, "artemis.log.1", time.time() - 10, compress=".gz")
    log.write_text("four\n")
    stat = packed.stat()
    position = logtail.LogPosition(stat.st_dev, stat.st_ino, 4, logtail.file_head(packed))
    assert position.head == logtail.file_head(log.with_name("artemis.log.1.gz"))
    assert [text for text, _ in logtail.follow(log, position) if text] == [
        "two\n",
        "three\n",
        "four\n",
    ]


def _cut_short(packed: Path) -> str:
    """Damage a compressed file: no end of stream. The warning it gets."""
    stat = packed.stat()
    packed.write_bytes(packed.read_bytes()[:-12])
    os.utime(packed, (stat.st_atime, stat.st_mtime))
    return f"{packed.name} cannot be read past byte"


def _zstd_packed(packed: Path) -> str:
    """As if zstd, which the collector does not read, had packed the file. The warning."""
    packed.rename(packed.with_name(packed.name.removesuffix(".gz") + ".zst"))
    return "or rolled into a file not read: .zip, .zst"


@pytest.mark.parametrize("spoil", [_cut_short, _zstd_packed])
def test_a_rolled_file_that_cannot_be_read_is_said_and_the_next_one_read(
    setup: Setup, caplog: pytest.LogCaptureFixture, spoil: Callable[[Path], str]
) -> None:
    setup.write(other("2026-11-26 22:00:00,000"), block("2026-11-26 23:00:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-26 23:30:00,000"))  # lost with the rest of the file
    packed = _roll(setup.log, "artemis.log.2026-11-26", time.time() - 20, compress=".gz")
    warning = spoil(packed)
    setup.write(block("2026-11-27 09:00:00,000", address="invoices"))
    with caplog.at_level("WARNING", logger="flowctl.collect"):
        setup.collect()
    assert [(r["event_type"], r["queue"]) for r in setup.rows()] == [
        ("flow_stopped", "orders"),
        ("flow_stopped", "invoices"),
    ]
    assert warning in caplog.text


@pytest.mark.parametrize("copy_done", [True, False])
def test_the_compressed_copy_of_a_rolled_file_just_read_is_not_read_again(
    setup: Setup, caplog: pytest.LogCaptureFixture, copy_done: bool
) -> None:
    """log4j2 renames the log, then compresses the rolled file (logrotate's ``compress`` too):
    for a while both are there, the ``.gz`` newer. Read to its end, the rolled file was
    followed by its own copy, read whole again with new seqs (a review). The copy, done or
    still being written, is told by its name, and said."""
    setup.write(starting("2026-11-27 23:00:00,000"), block("2026-11-27 23:10:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 23:20:00,000"))  # after the position
    rolled = _roll(setup.log, "artemis.log.2026-11-27", time.time() - 60)
    packed = gzip.compress(rolled.read_bytes())
    rolled.with_name(rolled.name + ".gz").write_bytes(packed if copy_done else packed[:10])
    setup.write(other("2026-11-28 00:00:01,000"), block("2026-11-28 00:05:00,000"))
    with caplog.at_level("WARNING", logger="flowctl.collect"):
        setup.collect()
    assert [(r["seq"], r["event_type"], r["ts"]) for r in setup.rows()] == [
        (0, "flow_stopped", _ts("2026-11-27 23:10:00")),
        (1, "flow_resumed", _ts("2026-11-27 23:20:00")),
        (2, "flow_stopped", _ts("2026-11-28 00:05:00")),
    ]
    assert "cannot be read" not in caplog.text
    said = f"{rolled}.gz is a compressed copy of {rolled.name}, read already: not read again"
    assert said in caplog.text


#: A first line every file of the log starts with (a log4j2 layout's header).
LAYOUT_HEADER = "Apache ActiveMQ Artemis log\n"


@pytest.mark.parametrize("copies", [False, True])
def test_rolled_files_that_start_with_the_same_line_are_each_read(
    setup: Setup, copies: bool
) -> None:
    """With a layout header every file starts with the same line: a rolled file after the one
    read was taken for its compressed copy and skipped, so two roll-overs while the collector
    was stopped lost the day between them without a word (a review). A copy is told by its
    name; each rolled file's own copy, newer than it, is still not read again."""
    setup.write(LAYOUT_HEADER, block("2026-11-26 23:00:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-26 23:30:00,000"))
    now = time.time()
    for day, rolled_at in (("2026-11-26", now - 20), ("2026-11-27", now - 10)):
        rolled = _roll(setup.log, f"artemis.log.{day}", rolled_at)
        if copies:
            copy = rolled.with_name(rolled.name + ".gz")
            copy.write_bytes(gzip.compress(rolled.read_bytes()))
            os.utime(copy, (rolled_at + 5, rolled_at + 5))
        if day == "2026-11-26":
            setup.write(
                LAYOUT_HEADER, block("2026-11-27 09:00:00,000"), unblock("2026-11-27 09:10:00,000")
            )
    setup.write(LAYOUT_HEADER, block("2026-11-28 08:00:00,000"))
    setup.collect(clock=lambda: datetime(2026, 11, 28, 9, tzinfo=UTC))
    assert [(r["seq"], r["event_type"], r["ts"]) for r in setup.rows()] == [
        (0, "flow_stopped", _ts("2026-11-26 23:00:00")),
        (1, "flow_resumed", _ts("2026-11-26 23:30:00")),
        (2, "flow_stopped", _ts("2026-11-27 09:00:00")),
        (3, "flow_resumed", _ts("2026-11-27 09:10:00")),
        (4, "flow_stopped", _ts("2026-11-28 08:00:00")),
    ]


def test_a_backlog_larger_than_a_read_is_read_whole(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logtail, "READ_CHUNK_BYTES", 300)  # about one line a read
    for hour in range(10, 20):
        setup.write(block(f"2026-11-27 {hour}:00:00,000"), unblock(f"2026-11-27 {hour}:00:09,000"))
    setup.collect()  # --once
    assert len(setup.rows()) == 20


def test_a_failed_commit_loses_nothing(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), unblock("2026-11-27 10:00:04,000"))
    real_commit = SessionWriter.commit

    def disk_full(self: SessionWriter, rows: Any, checkpoint: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SessionWriter, "commit", disk_full)
    with pytest.raises(OSError, match="No space left"):
        setup.collect()
    assert not setup.state.exists() and setup.rows() == []
    monkeypatch.setattr(SessionWriter, "commit", real_commit)
    setup.collect()
    assert [(r["seq"], r["event_type"]) for r in setup.rows()] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
    ]


def test_a_line_unrelated_to_flow_does_not_release_a_sample(setup: Setup) -> None:
    sample = {"address_size": 150_964, "messages": 73, "max_size_bytes": 100_000, "policy": None}
    taken = datetime(2026, 11, 27, 10, 0, 0, 500_000, tzinfo=UTC)
    collector = setup.collector(
        jolokia=FakeJolokia([{"orders": sample}]), sample_interval_s=60.0, clock=lambda: taken
    )
    collector.poll_once()
    setup.write(other("2026-11-27 10:00:00,100"))
    collector.poll_once()  # a line read, nothing to write: the state file only
    setup.write(block("2026-11-27 10:00:00,400"))
    collector.poll_once()
    collector.flush()
    assert [(r["event_type"], r["ts"]) for r in setup.rows()] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00.400")),
        ("queue_declared", taken),
    ]


def test_a_lost_state_file_goes_on_with_the_newest_session(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    setup.state.unlink()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    second = setup.collect()
    assert second.resumed and second.state.run_id == first.state.run_id
    assert [(r["seq"], r["event_type"]) for r in setup.rows()] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
    ]


def test_a_new_session_reads_on_where_the_last_one_stopped(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"), unblock("2026-11-27 10:00:02,000"))
    first = setup.collect()
    setup.write(block("2026-11-27 10:00:04,000"))
    later = datetime(2026, 11, 27, 13, tzinfo=UTC)
    second = setup.collect(new_session=True, clock=lambda: later)
    rows = sorted(setup.rows(), key=lambda r: (r["run_id"], r["seq"]))
    assert [(r["run_id"], r["event_type"]) for r in rows] == [
        (first.state.run_id, "flow_stopped"),
        (first.state.run_id, "flow_resumed"),
        (second.state.run_id, "flow_stopped"),  # not the first block again, as a second run's
    ]


def test_a_new_session_starts_with_what_the_last_one_left_open(setup: Setup) -> None:
    """--new-session while an address is blocked and the disk full: the new run knew neither,
    and their ends were lone ``flow_resumed`` / ``alarm_cleared`` rows the pipeline ignores (a
    review). Its first rows open them again at the old run's watermark (its last row), so its
    own rows make one stopped interval from there to the unblock line (DESIGN §4: from a
    ``flow_stopped`` to the next ``flow_resumed`` of the queue in the run), while the old run's
    ends at that watermark; its count starts again with it."""
    setup.write(
        block("2026-11-27 10:00:00,000"),
        unblock("2026-11-27 10:00:02,000"),
        block("2026-11-27 10:00:04,000"),
        disk_full("2026-11-27 10:20:00,000"),
        other("2026-11-27 10:25:00,000"),
    )
    first = setup.collect()
    setup.write(disk_free("2026-11-27 10:40:00,000"), unblock("2026-11-27 11:00:00,000"))
    later = datetime(2026, 11, 27, 13, tzinfo=UTC)
    second = setup.collect(new_session=True, clock=lambda: later)
    new_run = [
        (r["seq"], r["event_type"], r["queue"], r["ts"], r["flow_stopped_count"])
        for r in setup.rows()
        if r["run_id"] == second.state.run_id
    ]
    watermark = _ts("2026-11-27 10:20:00")  # the old run's last row: the alarm
    assert new_run == [
        (0, "alarm_raised", None, watermark, None),
        (1, "flow_stopped", "orders", watermark, 1),
        (2, "alarm_cleared", None, _ts("2026-11-27 10:40:00"), None),
        (3, "flow_resumed", "orders", _ts("2026-11-27 11:00:00"), 1),
    ]
    carried = [json.loads(r["detail"]) for r in setup.rows() if r["run_id"] == second.state.run_id]
    assert [d.get("reason") for d in carried] == ["carried_over", "carried_over", None, None]
    old_run = [r["event_type"] for r in setup.rows() if r["run_id"] == first.state.run_id]
    assert old_run == ["flow_stopped", "flow_resumed", "flow_stopped", "alarm_raised"]
    assert second.held_now() == []


def test_a_file_of_the_session_is_never_written_over(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    stale = setup.state.read_text()
    setup.collect()
    # The state restored from a copy older than the newest file is caught up from the files;
    # a session started twice at the same instant is refused at its first file.
    setup.state.write_text(stale)
    setup.collect()
    assert len(setup.rows()) == 2
    setup.write(block("2026-11-27 10:01:00,000"))
    with pytest.raises(CollectorStateError, match="exists"):
        setup.collect(new_session=True)


def test_one_collector_at_a_time(setup: Setup) -> None:
    """A second collector of the session is refused before it reads or removes anything: the
    running one's commit in progress is left alone."""
    setup.write(block("2026-11-27 10:00:00,000"))
    running = setup.collector()
    in_progress = setup.raw / "date=2026-11-27" / ".part-running.parquet.inprogress"
    in_progress.parent.mkdir(parents=True)
    in_progress.write_bytes(b"being written")
    with pytest.raises(CollectorStateError, match="another collector"):
        setup.collect()
    assert in_progress.exists()
    in_progress.unlink()
    running.run(stop=lambda: False, once=True)
    setup.collect()  # the session free again once the first one stopped
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def test_one_collector_per_broker_and_raw_folder(setup: Setup) -> None:
    """A second collector of the broker given another ``--state`` has none of its own, so it
    would go on with the broker's newest session in the raw folder, the running one's, and
    write its ``seq`` again: refused by the raw folder's lock. Another broker's collector may
    write there, and the lock is a writer's marker, not a file the ingest skips."""
    setup.write(block("2026-11-27 10:00:00,000"))
    running = setup.collector()
    other_state = setup.state.with_name("other.json")
    with pytest.raises(CollectorStateError, match="another collector of broker 'artemis-1'"):
        _artemis(log_path=setup.log, raw_dir=setup.raw, state_path=other_state, clock=lambda: NOON)
    assert _lock_is_free(setup.state.with_name("other.json.lock"))  # the refusal let it go
    neighbour = ArtemisCollector(
        broker="artemis-2",
        log_path=setup.log,
        raw_dir=setup.raw,
        state_path=other_state,
        clock=lambda: NOON,
        log_zone=UTC,
    )
    neighbour.close()
    running.run(stop=lambda: False, once=True)
    assert skipped_raw_entries(str(setup.raw), [date(2026, 11, 27)]) == []
    # Free again once the first one stopped: the other state goes on with its session.
    _artemis(log_path=setup.log, raw_dir=setup.raw, state_path=other_state, clock=lambda: NOON).run(
        stop=lambda: False, once=True
    )
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def _lock_is_free(path: Path) -> bool:
    with path.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def test_a_commit_cut_short_after_its_rename_is_not_written_again(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    collector = setup.collector()
    collector.read_log()
    checkpoint = collector.checkpoint()
    pending = list(collector._pending)
    collector.writer.commit(pending, checkpoint)  # renamed into place, then Ctrl-C ...
    collector.flush()  # ... and the stop commits the same rows again: nothing new, no error
    collector.close()
    assert [r["seq"] for r in setup.rows()] == [0]


def test_a_state_file_of_the_first_release_goes_on(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    state = json.loads(setup.state.read_text())
    # The first release kept the address map under "addresses" (no disk alarm then).
    state["version"], state["addresses"] = 1, state.pop("entities")["addresses"]
    setup.state.write_text(json.dumps(state))
    setup.write(unblock("2026-11-27 10:00:04,000"), block("2026-11-27 10:01:00,000"))
    second = setup.collect()
    assert second.state.run_id == first.state.run_id
    assert [r["flow_stopped_count"] for r in setup.rows()] == [1, 1, 2]  # the count went on


def test_a_new_log_on_the_inode_of_the_old_one_is_read_from_its_start(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log rotated away (deleted) and its inode given to the new log: the position's offset
    is not the new file's."""
    setup.write(other("2026-11-27 09:00:00,000"), block("2026-11-27 10:00:00,000"))
    setup.collect()
    stat = setup.log.stat()
    setup.log.unlink()
    setup.write(unblock("2026-11-28 00:00:05,000"), block("2026-11-28 00:10:00,000"))
    # This filesystem may or may not reuse the inode: make it look reused, as ext4 often does.
    real_identity = logtail._identity
    monkeypatch.setattr(
        logtail,
        "_identity",
        lambda s: (
            (stat.st_dev, stat.st_ino) if s.st_ino == setup.log.stat().st_ino else real_identity(s)
        ),
    )
    setup.collect()
    assert [r["event_type"] for r in setup.rows()] == [
        "flow_stopped",
        "flow_resumed",
        "flow_stopped",
    ]


def test_a_file_that_is_not_the_brokers_log_is_said(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """`--log my-check.yaml` committed 0 events and said nothing: no line began as Artemis's do."""
    setup.write("name: my-check\n", "kind: workload\n", "queues: []\n")
    with caplog.at_level("WARNING", logger="flowctl.collect"):
        setup.collect()
    assert setup.rows() == []
    assert (
        "none of the 3 lines read begins with a timestamp as Artemis's lines do: is it the "
        "broker's log?"
    ) in caplog.text
    caplog.clear()
    setup.write(block("2026-11-27 10:00:00,000"))  # the broker's lines after all: not said again
    with caplog.at_level("WARNING", logger="flowctl.collect"):
        setup.collect()
    assert "is it the broker's log" not in caplog.text
    assert [r["event_type"] for r in setup.rows()] == ["flow_stopped"]


def test_a_sample_of_many_addresses_is_committed_once_it_fills_a_batch(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is committed at FLUSH_ROWS rows when the poll releases a sample, as after a
    line: a sample's rows had waited for the flush interval (an audit). A restart goes on from
    that commit's checkpoint with the next seq."""
    monkeypatch.setattr(base, "FLUSH_ROWS", 3)
    setup.write(block("2026-11-28 10:00:00,000"))
    address = {"address_size": 10, "messages": 1, "max_size_bytes": 100_000, "policy": "BLOCK"}
    now = [datetime(2026, 11, 28, 10, 0, 5, tzinfo=UTC)]
    collector = setup.collector(
        # The blocked address listed too: one a sample no longer lists is unblocked there.
        jolokia=FakeJolokia([dict.fromkeys(["orders", "a0", "a1", "a2"], address)]),
        sample_interval_s=3600.0,
        flush_interval_s=3600.0,
        clock=lambda: now[0],
    )
    collector.poll_once()  # the block line, and the sample, held for lines before it
    assert setup.rows() == []
    now[0] = datetime(2026, 11, 28, 10, 0, 7, tzinfo=UTC)
    collector.poll_once()  # the sample released: five rows pending, more than a batch
    assert [r["seq"] for r in setup.rows()] == [0, 1, 2, 3, 4]
    collector.close()
    again = setup.collector(clock=lambda: now[0])
    assert again.state.next_seq == 5
    again.close()


#: A real 2.40's answer to the read of its broker MBean's Started (after a sample's reads).
STARTED = {
    "status": 200,
    "value": {'org.apache.activemq.artemis:broker="127.0.0.1"': {"Started": True}},
}


def _is_state_read(requests: list[dict[str, Any]]) -> bool:
    """Whether a bulk request is the read of the broker's state that ends a sample."""
    return requests[0].get("mbean") == artemis.BROKER_MBEAN_PATTERN


class AnsweringJolokia(JolokiaReader):
    """A reader whose bulk requests get ``answer`` (over an HTTP 200), its broker started."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__("http://127.0.0.1:1/console/jolokia", "u", "p")
        self.answer = answer

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [STARTED if _is_state_read(requests) else self.answer]


def test_a_search_jolokia_refuses_inside_its_answer_is_no_empty_broker() -> None:
    """An audit: a bulk answer over HTTP 200 whose search was refused (a restrictive
    jolokia-access.xml: status 403) read as "no addresses", and sampling stopped without a
    word. A 4xx is a refusal (the collector stops when it comes first), anything else a failed
    sample (sampling waits and says so); a search that finds nothing is no addresses."""
    from collectors.base import SamplerRefused

    refused = {"status": 403, "error": "java.lang.Exception : Operation search forbidden"}
    with pytest.raises(SamplerRefused, match="answered 403: java") as caught:
        AnsweringJolokia(refused).addresses()
    assert caught.value.code == 403
    with pytest.raises(ValueError, match="answered 500"):
        AnsweringJolokia({"status": 500, "error": "boom"}).addresses()
    assert AnsweringJolokia({"status": 200, "value": []}).addresses() == {}


#: What a real 2.40 made by a default ``artemis create`` answers over HTTP 200 to a request
#: whose Origin its jolokia-access.xml does not allow (only ``*://localhost*``): one object.
ORIGIN_REFUSED = {
    "status": 403,
    "error_type": "java.lang.Exception",
    "error": (
        "java.lang.Exception : Origin http://127.0.0.1:8161 is not allowed to call this agent"
    ),
}


def _answering(monkeypatch: pytest.MonkeyPatch, answer: Any) -> JolokiaReader:
    """A reader whose every POST is answered ``answer`` (over HTTP 200)."""
    monkeypatch.setattr(artemis, "http_json", lambda *args: answer)
    return JolokiaReader("http://127.0.0.1:8161/console/jolokia", "u", "p")


def test_a_request_jolokia_refuses_as_a_whole_stops_the_collector_with_its_reason(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review: the refusal, one object where a list of answers was expected, was "does not
    answer (too many values to unpack (expected 1))", and the collector waited forever. It is
    a refusal, in Jolokia's words and with what to change; the collector stops at the start."""
    collector = setup.collector(jolokia=_answering(monkeypatch, ORIGIN_REFUSED))
    with pytest.raises(base.SamplerRefused) as caught:
        collector.sample()
    collector.close()
    message = str(caught.value)
    assert "Origin http://127.0.0.1:8161 is not allowed to call this agent" in message
    assert "jolokia-access.xml" in message and "localhost" in message
    assert caught.value.code == 403


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"status": 500, "error": "boom"}, "the request answered 500: boom"),
        ([], "1 requests got 0 answers"),
        ([{"status": 200, "value": []}] * 2, "1 requests got 2 answers"),
        (["x"], "1 requests got 1 answers, not one object each"),
        ([{"status": 200, "value": "x"}], "the address search answered str, not list"),
    ],
)
def test_an_answer_of_another_shape_is_a_failed_sample(
    monkeypatch: pytest.MonkeyPatch, answer: Any, said: str
) -> None:
    """Sampling waits and says why (a ValueError), as for a broker that does not answer."""
    with pytest.raises(ValueError, match=said):
        _answering(monkeypatch, answer).addresses()


@pytest.mark.parametrize("broker", ["artemis-1", "a b,c=d", "brokér", "a\nb"])
def test_a_collectors_raw_lock_is_a_writers_marker_whatever_the_brokers_name(broker: str) -> None:
    """The ingest leaves a collector's lock out of the files it reports skipped, for any name a
    broker may have (a newline escaped the marker's pattern: a review)."""
    assert KNOWN_MARKERS.match(raw_lock_name(broker))


# -- the reject threshold ----------------------------------------------------------------------
class BulkJolokia(JolokiaReader):
    """A reader whose search, reads and address settings get these answers, as a real 2.40's
    Jolokia gives them (getAddressSettingsAsJSON answers a JSON string)."""

    def __init__(self, settings: dict[str, dict[str, Any]]) -> None:
        super().__init__("http://127.0.0.1:1/console/jolokia", "u", "p")
        self.settings = settings

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        mbean = 'org.apache.activemq.artemis:broker="127.0.0.1",component=addresses,address="{}"'
        if _is_state_read(requests):
            return [STARTED]
        if requests[0]["type"] == "search":
            return [{"status": 200, "value": [mbean.format(a) for a in sorted(self.settings)]}]
        if requests[0]["type"] == "read":
            names = [r["mbean"].split('address="')[1].rstrip('"') for r in requests]
            return [
                {
                    "status": 200,
                    "value": {"Address": n, "AddressSize": 0, "MessageCount": 0, "Internal": False},
                }
                for n in names
            ]
        return [
            {"status": 200, "value": json.dumps(self.settings[r["arguments"][0]])} for r in requests
        ]


def test_jolokia_reads_the_reject_threshold_of_an_address() -> None:
    """max-size-bytes-reject-threshold (maxSizeBytesRejectThreshold in the address settings):
    -1 (the default) is none, as the engine's "no threshold"; a broker whose settings do not
    have it has none either."""
    block_settings = {"maxSizeBytes": 102_400, "addressFullMessagePolicy": "BLOCK"}
    observed = BulkJolokia(
        {
            "reject-a": {**block_settings, "maxSizeBytesRejectThreshold": 204_800},
            "orders": {**block_settings, "maxSizeBytesRejectThreshold": -1},
            "older": block_settings,
        }
    ).addresses()
    assert {name: a["reject_threshold"] for name, a in observed.items()} == {
        "reject-a": 204_800,
        "orders": -1,
        "older": -1,
    }


def test_address_settings_left_out_are_artemiss_defaults(setup: Setup) -> None:
    """getAddressSettingsAsJSON leaves out what is not set; Artemis reads it as its defaults
    (AddressSettings: PAGE, max-size-bytes -1). An absent policy was taken for BLOCK, and the
    address written with max-size-bytes as its stop size (a review)."""
    observed = BulkJolokia({"paged": {"maxSizeBytes": 100_000}, "bare": {}}).addresses()
    assert {n: (a["policy"], a["max_size_bytes"]) for n, a in observed.items()} == {
        "bare": ("PAGE", -1),
        "paged": ("PAGE", 100_000),
    }
    setup.collector(jolokia=FakeJolokia([observed])).run(stop=lambda: False, once=True)
    rows = {r["queue"]: r for r in setup.rows()}
    assert [(rows[n]["flow_stop_size"], json.loads(rows[n]["detail"])["policy"]) for n in rows] == [
        (0, "PAGE"),
        (0, "PAGE"),
    ]


def test_max_size_messages_is_sampled(setup: Setup) -> None:
    """maxSizeMessages from the address settings (absent: Artemis's default, -1), the count
    threshold of a BLOCK address's rows."""
    block_settings = {"maxSizeBytes": -1, "addressFullMessagePolicy": "BLOCK"}
    observed = BulkJolokia(
        {"counted": {**block_settings, "maxSizeMessages": 20}, "orders": block_settings}
    ).addresses()
    assert {n: a["max_size_messages"] for n, a in observed.items() if a} == {
        "counted": 20,
        "orders": -1,
    }
    setup.collector(jolokia=FakeJolokia([observed])).run(stop=lambda: False, once=True)
    assert [(r["queue"], r["flow_stop_count"], r["flow_resume_count"]) for r in setup.rows()] == [
        ("counted", 20, 20),
        ("orders", 0, 0),
    ]


class MulticastJolokia(BulkJolokia):
    """A broker whose addresses have queues: ``queues`` maps an address to its queues' message
    counts (its MessageCount their sum, as a real 2.40's), ``None`` for one whose queues'
    read fails; the pattern reads asked are kept."""

    def __init__(self, queues: dict[str, dict[str, int] | None]) -> None:
        super().__init__({name: {"addressFullMessagePolicy": "BLOCK"} for name in queues})
        self.queues = queues
        self.patterns: list[str] = []

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if requests[0]["type"] != "read" or not requests[0]["mbean"].endswith(",*"):
            answers = super()._post(requests)
            if requests[0]["type"] == "read" and not _is_state_read(requests):
                for answer in answers:
                    counts = self.queues[answer["value"]["Address"]] or {"a": 1, "b": 2}
                    answer["value"]["QueueNames"] = sorted(counts)
                    answer["value"]["MessageCount"] = sum(counts.values())
            return answers
        self.patterns += [r["mbean"] for r in requests]
        answers = []
        for request in requests:
            address = request["mbean"].split('address="')[1].split('"')[0]
            counts = self.queues[address]
            answers.append(
                {"status": 404, "error": "javax.management.InstanceNotFoundException"}
                if counts is None
                else {
                    "status": 200,
                    "value": {
                        f'{request["mbean"][:-2]},queue="{q}"': {"MessageCount": n}
                        for q, n in counts.items()
                    },
                }
            )
        return answers


def test_a_multicast_addresss_messages_are_counted_once_not_per_queue() -> None:
    """A review, on a real 2.40: an address of 3 queues whose max-size-messages of 50 blocked
    it at 51 messages read MessageCount 153 (it sums the queues), so the collector wrote a
    depth of 153 beside a stop count of 50, an overshoot of 103 where Artemis's is 1. Its
    messages are the largest of its queues' counts; unknown (None) when they cannot be read,
    never the sum; an address of one queue costs no further read."""
    jolokia = MulticastJolokia(
        {
            "news": {"news.a": 51, "news.b": 51, "news.c": 40},
            "orders": {"orders": 7},
            "unread": None,
        }
    )
    observed = jolokia.addresses()
    assert {name: a["messages"] for name, a in observed.items() if a} == {
        "news": 51,
        "orders": 7,
        "unread": None,
    }
    mbean = 'org.apache.activemq.artemis:broker="127.0.0.1",component=addresses,address="{}"'
    assert jolokia.patterns == [
        mbean.format(name) + ",subcomponent=queues,*" for name in ("news", "unread")
    ]


def test_the_brokers_own_addresses_are_not_sampled() -> None:
    """Its notifications and management, and its MQTT sessions' store, which a real 2.40 does
    not flag Internal: sampled, ``$sys.mqtt.sessions`` was a phantom queue of 101 rows (a
    review)."""
    block = {"maxSizeBytes": 102_400, "addressFullMessagePolicy": "BLOCK"}
    names = ["orders", "activemq.notifications", "activemq.management", "$sys.mqtt.sessions"]
    observed = BulkJolokia(dict.fromkeys(names, block)).addresses()
    # Listed, so not gone, but without figures (not sampled).
    assert {name: a is None for name, a in observed.items()} == {
        "orders": False,
        "activemq.notifications": True,
        "activemq.management": True,
        "$sys.mqtt.sessions": True,
    }


class InternalJolokia(BulkJolokia):
    """A broker whose addresses under ``$.artemis.internal`` are flagged Internal (a cluster's
    store-and-forward addresses)."""

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answers = super()._post(requests)
        if requests[0]["type"] == "read" and not _is_state_read(requests):
            for answer in answers:
                value = answer["value"]
                value["Internal"] = value["Address"].startswith("$.artemis.internal")
        return answers


def test_an_address_not_sampled_is_no_address_removed(setup: Setup) -> None:
    """An internal address (a cluster's store-and-forward, under BLOCK) logs its block and
    unblock as any other; left out of the samples, it was taken for deleted and its block
    ended by every sample (a review). Listed, it is not gone: its block ends at its line."""
    forward = "$.artemis.internal.sf.my-cluster.abc"
    block_settings = {"addressFullMessagePolicy": "BLOCK", "maxSizeBytes": 100_000}
    observed = InternalJolokia({forward: block_settings, "orders": block_settings}).addresses()
    assert observed[forward] is None and observed["orders"] is not None
    setup.write(block("2026-11-27 10:00:00,000", address=forward))
    now = [datetime(2026, 11, 27, 10, 5, tzinfo=UTC)]
    collector = setup.collector(jolokia=FakeJolokia([observed, observed]), clock=lambda: now[0])
    collector.read_log()
    for minute in (5, 6):  # two samples: neither ends its block
        now[0] = datetime(2026, 11, 27, 10, minute, tzinfo=UTC)
        collector.sample()
        collector.flush()
    assert collector.held_now() == [f"address {forward}"]
    collector.close()
    setup.write(unblock("2026-11-27 10:30:00,000", address=forward))
    setup.collect(clock=lambda: datetime(2026, 11, 27, 10, 31, tzinfo=UTC))
    assert [(r["event_type"], r["ts"]) for r in setup.rows() if r["queue"] == forward] == [
        ("flow_stopped", _ts("2026-11-27 10:00:00")),
        ("flow_resumed", _ts("2026-11-27 10:30:00")),
    ]


class DeletingJolokia(BulkJolokia):
    """A broker whose addresses ``gone`` are deleted between the search and the read (Jolokia
    answers their reads 404), its MBeans quoted as Artemis quotes them (ObjectName.quote)."""

    def __init__(self, settings: dict[str, dict[str, Any]], gone: set[str]) -> None:
        super().__init__(settings)
        self.gone = gone

    @staticmethod
    def _mbean(name: str) -> str:
        quoted = name.replace("\\", "\\\\").replace('"', '\\"').replace("*", "\\*")
        return f'org.apache.activemq.artemis:address="{quoted}",broker="b",component=addresses'

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if requests[0]["type"] == "search":
            return [{"status": 200, "value": [self._mbean(a) for a in sorted(self.settings)]}]
        if requests[0]["type"] == "read" and not _is_state_read(requests):
            by_mbean = {self._mbean(n): n for n in self.settings}
            return [
                {"status": 404, "error": "javax.management.InstanceNotFoundException"}
                if by_mbean[r["mbean"]] in self.gone
                else {
                    "status": 200,
                    "value": {
                        "Address": by_mbean[r["mbean"]],
                        "AddressSize": 0,
                        "MessageCount": 0,
                        "Internal": False,
                    },
                }
                for r in requests
            ]
        return super()._post(requests)


def test_an_address_listed_whose_read_failed_is_reported_unread() -> None:
    """Its name from its MBean's address key, unquoted; no figures (None)."""
    page = {"addressFullMessagePolicy": "PAGE"}
    names = {"orders": page, 'a "b" \\ c*': page, "DLQ": page, "activemq.notifications": page}
    observed = DeletingJolokia(names, gone={"orders", 'a "b" \\ c*', "activemq.notifications"})
    assert {name: a is None for name, a in observed.addresses().items()} == {
        "orders": True,
        'a "b" \\ c*': True,
        "DLQ": False,
        "activemq.notifications": True,  # listed, as a broker's own read is
    }
    assert DeletingJolokia({"orders": page}, gone={"orders"}).addresses() == {"orders": None}


def test_the_reject_threshold_is_in_the_addresss_detail_as_the_engine_logs_it(
    setup: Setup,
) -> None:
    """The engine logs an address's reject threshold in the detail of its events
    (``reject_threshold``, flowctl_core/protocols/artemis.py), absent when there is none; the
    Artemis advice reads it as of the address's latest event with its settings. Samples carry
    it, and so do the log's flow events after them (a block line without it would read as the
    threshold removed); a sample of -1 removes it."""
    limits = {"address_size": 0, "messages": 0, "max_size_bytes": 100_000, "policy": "BLOCK"}
    now = [datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC)]
    jolokia = FakeJolokia(
        [
            {"reject-a": {**limits, "reject_threshold": 204_800}, "orders": limits},
            {"reject-a": {**limits, "reject_threshold": -1}},
        ]
    )
    collector = setup.collector(jolokia=jolokia, sample_interval_s=0.0, clock=lambda: now[0])
    collector.sample()
    collector.flush()
    # The session's state carries it across a restart of the collector.
    state = json.loads(setup.state.read_text())
    assert state["entities"]["addresses"]["reject-a"]["reject_threshold"] == 204_800
    setup.write(block("2026-11-27 10:00:05,000", address="reject-a"))
    collector.read_log()
    now[0] = datetime(2026, 11, 27, 10, 0, 10, tzinfo=UTC)
    collector.sample()
    collector.flush()
    collector.close()
    thresholds = [
        (r["event_type"], r["queue"], json.loads(r["detail"]).get("reject_threshold"))
        for r in setup.rows()
    ]
    assert thresholds == [
        ("queue_declared", "orders", None),
        ("queue_declared", "reject-a", 204_800),
        ("flow_stopped", "reject-a", 204_800),
        ("queue_declared", "reject-a", None),
    ]


# -- a broker being stopped ----------------------------------------------------------------------
#: What a real 2.40 answered inside HTTP 200s while it was being stopped (SIGTERM or ``artemis
#: stop``), an experiment polling it every 20 ms: first its address settings fail to read and
#: its broker MBean says it is not started, then, in some stops, a search that lists no address
#: at all and no broker MBean, for up to 0.5 s before its web server stopped and the AMQ221002
#: stop line.
NOT_STARTED = {
    "status": 500,
    "error": "java.lang.IllegalStateException : Broker is not started. It can not be managed yet",
}
STOPPED_STATE = {
    "status": 200,
    "value": {'org.apache.activemq.artemis:broker="127.0.0.1"': {"Started": False}},
}
NO_BROKER_MBEAN = {
    "status": 404,
    "error": (
        "javax.management.InstanceNotFoundException : No MBean with pattern "
        "org.apache.activemq.artemis:broker=* found for reading attributes"
    ),
}


class StoppingJolokia(BulkJolokia):
    """A broker whose every sample is in one phase of a real 2.40's stop: "up", "stopping"
    (its settings fail to read, ``Started`` is false) or "unregistered" (it lists nothing, its
    broker MBean gone); an exception is a sample that does not get through (its port closed)."""

    def __init__(self, settings: dict[str, dict[str, Any]], phases: list[str | Exception]) -> None:
        super().__init__(settings)
        self.phases = phases
        self.phase = "up"

    def addresses(self) -> dict[str, dict[str, Any] | None]:
        phase = self.phases.pop(0)
        if isinstance(phase, Exception):
            raise phase
        self.phase = phase
        return super().addresses()

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.phase == "unregistered":
            if _is_state_read(requests):
                return [NO_BROKER_MBEAN]
            if requests[0]["type"] == "search":
                return [{"status": 200, "value": []}]
        if self.phase == "stopping":
            if _is_state_read(requests):
                return [STOPPED_STATE]
            if requests[0].get("operation") == "getAddressSettingsAsJSON":
                return [NOT_STARTED for _ in requests]
        return super()._post(requests)


def test_a_broker_being_stopped_is_not_sampled() -> None:
    """What a real 2.40 answers as it stops is the broker going, not its addresses: no sample
    (:class:`BrokerNotUp`, which sampling waits through), said as a broker not started."""
    block_settings = {"maxSizeBytes": 100_000, "addressFullMessagePolicy": "BLOCK"}
    jolokia = StoppingJolokia({"orders": block_settings}, ["up", "stopping", "unregistered"])
    assert jolokia.addresses()["orders"] is not None
    with pytest.raises(base.BrokerNotUp, match=r"not started \(Started is false\)"):
        jolokia.addresses()
    with pytest.raises(base.BrokerNotUp, match=r"not started \(its MBean answered 404: javax"):
        jolokia.addresses()


def test_a_broker_whose_state_read_jolokia_refuses_is_sampled_as_before() -> None:
    """A jolokia-access.xml may allow the addresses and not the broker's MBean (403): its state
    is then not known, and the sample is taken as before the check, not waited for forever."""

    class Denying(BulkJolokia):
        def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if _is_state_read(requests):
                return [{"status": 403, "error": "java.lang.Exception : Reading denied"}]
            return super()._post(requests)

    observed = Denying({"orders": {"addressFullMessagePolicy": "BLOCK"}}).addresses()
    assert observed["orders"] is not None


def test_a_block_open_as_the_broker_stops_ends_at_its_stop_line(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """An experiment on a real 2.40, polling Jolokia through its stops: for up to 0.5 s before
    its stop line, its search listed no address. Two samples of that (0.5 s apart in
    tests/realbrokers) ended the blocked address as removed (``address_removed``, at the first)
    before the stop line, which then had nothing to end. They are no samples, nor is one of
    the moment before (its settings unread): the block ends at the stop line, as the broker
    stopped, and sampling says once that it waits, and once that it goes on after the start."""
    caplog.set_level(logging.INFO, logger="flowctl.collect")
    block_settings = {"maxSizeBytes": 100_000, "addressFullMessagePolicy": "BLOCK"}
    phases: list[str | Exception] = [
        "up",
        "stopping",
        "unregistered",
        "unregistered",
        ConnectionRefusedError(111, "Connection refused"),
        "up",
    ]
    jolokia = StoppingJolokia({"orders": block_settings}, phases)
    setup.write(block("2026-11-27 10:00:00,000"))
    now = [datetime(2026, 11, 27, 10, 0, 1, tzinfo=UTC)]
    collector = setup.collector(jolokia=jolokia, sample_interval_s=0.0, clock=lambda: now[0])
    collector.read_log()
    for tenths in range(5):  # the samples as it stops, each before the stop line
        now[0] = datetime(2026, 11, 27, 10, 0, 1, tenths * 100_000, tzinfo=UTC)
        collector.sample()
    assert collector.held_now() == ["address orders"]
    setup.write(stopped("2026-11-27 10:00:02,000"), bootstrap("2026-11-27 10:00:05,000"))
    now[0] = datetime(2026, 11, 27, 10, 0, 10, tzinfo=UTC)
    collector.read_log()
    collector.sample()  # the broker started again
    collector.flush()
    collector.close()
    rows = [(r["event_type"], r["ts"]) for r in setup.rows()]
    assert rows == [
        ("flow_stopped", _ts("2026-11-27 10:00:00")),
        ("queue_declared", _ts("2026-11-27 10:00:01")),
        ("flow_resumed", _ts("2026-11-27 10:00:02")),
        ("queue_declared", _ts("2026-11-27 10:00:10")),
    ]
    assert json.loads(setup.rows()[2]["detail"])["reason"] == REASON_BROKER_STOPPED
    said = [r.getMessage() for r in caplog.records if r.name == "flowctl.collect"]
    assert len(said) == 2, said
    assert said[0] == (
        "Jolokia http://127.0.0.1:1/console/jolokia/ answers for a broker that is not running "
        "(Started is false): sampling waits; the log is still followed"
    ), said
    assert "answers again after" in said[1], said

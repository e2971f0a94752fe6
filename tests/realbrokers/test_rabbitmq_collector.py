"""The RabbitMQ collector on a real RabbitMQ 3.10 node with its management plugin (DESIGN §6,
seed 004's memory alarm): a publisher's connection is blocked while the alarm is set and a
consumer's is not; the collector is stopped and started again; then the node is killed with the
alarm set and starts again without it. One run: the alarms at the log lines' microseconds, the
publisher's connection blocked and unblocked in the samples, queue samples with the queue's
x-max-length, ``seq`` without a gap."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.base import REASON_BROKER_RESTARTED
from collectors.rabbitmq import ManagementReader, RabbitMQCollector
from conformance.brokers import LOOPBACK, BrokerUnavailable, RabbitBroker
from tests.collectors.session_setup import committed_rows
from tests.realbrokers.collecting import collecting, until

pytestmark = pytest.mark.realbroker

pika = pytest.importorskip("pika")

QUEUE = "collected"
TINY_WATERMARK = "0.00001"


@pytest.fixture
def node() -> Iterator[RabbitBroker]:
    # Statistics every 500 ms (5 s by default): the samples see a connection's state sooner.
    broker = RabbitBroker("collect_statistics_interval = 500", management=True)
    try:
        broker.start()
    except BrokerUnavailable as error:
        pytest.skip(f"RabbitMQ unavailable: {error}")
    try:
        yield broker
    finally:
        broker.stop()


def _connect(node: RabbitBroker, name: str) -> Any:
    parameters = pika.ConnectionParameters(
        host=LOOPBACK, port=node.port, client_properties={"connection_name": name}
    )
    return pika.BlockingConnection(parameters)


def _alarm_set(collector: RabbitMQCollector) -> bool:
    return any(collector.node.alarms.values())


def test_a_real_rabbitmq_alarm_and_blocked_connection(node: RabbitBroker, tmp_path: Path) -> None:
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    management = ManagementReader(node.management_url, "guest", "guest")
    until(lambda: _answers(management), "the management API")

    def make() -> RabbitMQCollector:
        return RabbitMQCollector(
            log_path=node.log_path,
            raw_dir=raw,
            state_path=state,
            broker="rabbit-real",
            management=management,
            sample_interval_s=0.5,
            flush_interval_s=0.2,
        )

    publisher, consumer = _connect(node, "publisher"), _connect(node, "consumer")
    channel = publisher.channel()
    channel.queue_declare(QUEUE, arguments={"x-max-length": 1000, "x-overflow": "reject-publish"})
    consumer.channel().basic_consume(QUEUE, lambda *args: None, auto_ack=True)
    with collecting(make) as first:
        node.ctl_ok("set_vm_memory_high_watermark", TINY_WATERMARK)
        until(lambda: _alarm_set(first), "the alarm line")
        channel.basic_publish("", QUEUE, b"held")  # the node stops reading this connection
        until(lambda: bool(first.node.blocked), "the publisher blocked")
        node.ctl_ok("set_vm_memory_high_watermark", "0.4")
        until(lambda: not _alarm_set(first), "the alarm cleared")
        until(lambda: not first.node.blocked, "the publisher running again")
    with collecting(make) as second:
        assert second.resumed and second.state.run_id == first.state.run_id
        node.ctl_ok("set_vm_memory_high_watermark", TINY_WATERMARK)
        until(lambda: _alarm_set(second), "the second alarm line")
        node.restart_process(crash=True)
        until(lambda: not _alarm_set(second), "the start after the crash")
        time.sleep(1.0)

    rows = committed_rows(raw)
    assert [r["seq"] for r in rows] == list(range(len(rows)))  # none lost, none repeated
    assert {r["run_id"] for r in rows} == {first.state.run_id}
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(rows))
    alarms = [r for r in rows if r["event_type"] in ("alarm_raised", "alarm_cleared")]
    details = [json.loads(r["detail"]) for r in alarms]
    assert [r["event_type"] for r in alarms] == [
        "alarm_raised",
        "alarm_cleared",
        "alarm_raised",
        "alarm_cleared",
    ]
    assert {d["resource"] for d in details} == {"memory"}
    assert details[3]["reason"] == REASON_BROKER_RESTARTED
    # Each alarm row is at its log line's microsecond.
    stamps = [
        line[:26]
        for line in node.log_path.read_text().splitlines()
        if "memory resource limit alarm" in line and "across the cluster" not in line
    ]
    assert [r["ts"].strftime("%Y-%m-%d %H:%M:%S.%f") for r in alarms[:3]] == stamps[:3]
    # The publisher was held by the alarm, the consumer never.
    held = [r for r in rows if r["event_type"].startswith("connection_")]
    assert [r["event_type"] for r in held][:2] == ["connection_blocked", "connection_unblocked"]
    assert len({r["connection"] for r in held[:2]}) == 1
    assert json.loads(held[0]["detail"])["client_name"] == "publisher"
    assert json.loads(held[0]["detail"])["reason"] == "alarm"
    assert not any("consumer" in str(r["detail"]) for r in held)
    blocked_at, cleared_at = held[0]["ts"], alarms[1]["ts"]
    assert alarms[0]["ts"] <= blocked_at <= cleared_at
    # The node unblocks its connections when the alarm clears: the row is at that line.
    assert held[1]["ts"] == cleared_at
    # The crash's alarm ends at the last line before the node booted again.
    boots = [
        line[:26]
        for line in node.log_path.read_text().splitlines()
        if "Logging: configured log handlers are now ACTIVE" in line
    ]
    assert alarms[3]["ts"].strftime("%Y-%m-%d %H:%M:%S.%f") < boots[-1]
    # Queue samples: the queue's depth and its limit, RabbitMQ's own words made the engine's.
    samples = [r for r in rows if r["event_type"] == "queue_declared" and r["queue"] == QUEUE]
    assert samples and {r["max_count"] for r in samples} == {1000}
    assert {json.loads(r["detail"])["policy"] for r in samples} == {"reject"}


def _answers(management: ManagementReader) -> bool:
    try:
        management.read()
    except OSError:
        return False
    return True

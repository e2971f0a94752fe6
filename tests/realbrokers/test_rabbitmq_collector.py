"""The RabbitMQ collector on a real RabbitMQ 3.10 node with its management plugin (DESIGN §6,
seed 004's memory alarm): a publisher's connection is blocked while the alarm is set and a
consumer's is not; the collector is stopped and started again; then the node is killed with the
alarm set and starts again without it. One run: the alarms at the log lines' microseconds, the
publisher's connection blocked and unblocked in the samples, queue samples with the queue's
x-max-length, ``seq`` without a gap. And the node stopped and started again under a running
collector, a publisher blocked as it stops: nothing committed lost or rewritten, the block
closed when the node closes its connections, what follows the boot collected."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from collectors.base import (
    REASON_BROKER_RESTARTED,
    REASON_BROKER_STOPPED,
    SAMPLER_ERRORS,
    SamplerRefused,
)
from collectors.rabbitmq import ManagementReader, RabbitMQCollector
from conformance.brokers import LOOPBACK, BrokerUnavailable, RabbitBroker
from tests.collectors.session_setup import committed_rows
from tests.realbrokers.collecting import answered, collecting, polled, until

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


def _collector_of(node: RabbitBroker, raw: Path, state: Path) -> Callable[[], RabbitMQCollector]:
    """What makes the node's collector (again, after a restart), its management API up."""
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

    return make


def test_a_real_rabbitmq_alarm_and_blocked_connection(node: RabbitBroker, tmp_path: Path) -> None:
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    make = _collector_of(node, raw, state)

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
    """Whether the node's management API answers. A node starting answers HTTP 404 for a
    moment as its listener opens (2 of 14 starts of an experiment polling it every 20 ms):
    not an answer yet, where a refusal of another kind (the user, the password) fails."""
    try:
        management.read()
    except SamplerRefused as refused:
        if refused.code != 404:
            raise
        return False
    except SAMPLER_ERRORS:
        return False
    return True


KEPT = "kept"  # durable: the node declares it again as it boots, and the samples find it


def _committed(raw: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(raw.glob("date=*/*.parquet"))}


def _log_stamp(node: RabbitBroker, *phrases: str) -> list[str]:
    """The stamps (to the microsecond) of the node's log lines holding every one of
    ``phrases``."""
    lines = node.log_path.read_text().splitlines()
    return [line[:26] for line in lines if all(phrase in line for phrase in phrases)]


STAMP = "%Y-%m-%d %H:%M:%S.%f"  # the node's log lines' stamp, to the microsecond


def _stamp(row: dict[str, Any]) -> str:
    return str(row["ts"].strftime(STAMP))


def test_a_real_rabbitmq_restarted_under_a_running_collector(
    node: RabbitBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The node stopped (``rabbitmqctl stop``) and started again with its state while one
    collector runs on, an alarm set and a publisher blocked as it stops: what was committed
    before is there unchanged, the run goes on without a gap, the alarm and the block close as
    the node stops (the block when the node closes its connections, not at the stop line
    seconds later), the alarm and the block after the boot are collected, the queue is sampled
    again, and the outage is said in one line, and its end in another."""
    caplog.set_level(logging.INFO, logger="flowctl.collect")
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    make = _collector_of(node, raw, state)

    def blocked_client(collector: RabbitMQCollector, name: str) -> None:
        connection = _connect(node, name)
        channel = connection.channel()
        channel.queue_declare(KEPT, durable=True, arguments={"x-max-length": 500})
        node.ctl_ok("set_vm_memory_high_watermark", TINY_WATERMARK)
        until(lambda: _alarm_set(collector), f"the alarm line ({name})")
        channel.basic_publish("", KEPT, b"held")  # the node stops reading this connection
        until(lambda: bool(collector.node.blocked), f"{name} blocked")

    with collecting(make) as collector:
        blocked_client(collector, "before")
        until(
            lambda: any(r["event_type"] == "connection_blocked" for r in committed_rows(raw)),
            "the block committed",
        )
        before = _committed(raw)
        node.restart_process()  # rabbitmqctl stop, then the node again with its state
        until(lambda: not _alarm_set(collector) and not collector.node.blocked, "the stop read")
        blocked_client(collector, "after")
        node.ctl_ok("set_vm_memory_high_watermark", "0.4")
        until(lambda: not _alarm_set(collector), "the alarm cleared")
        until(lambda: not collector.node.blocked, "after running again")
        booted = _log_stamp(node, "Logging: configured log handlers are now ACTIVE")[-1]
        until(
            lambda: any(r["queue"] == KEPT and _stamp(r) > booted for r in committed_rows(raw)),
            "the queue sampled after the boot",
        )

    # Nothing committed before the stop is lost or rewritten; one run, no gap, in time order.
    assert all(path.read_bytes() == data for path, data in before.items())
    rows = committed_rows(raw)
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert {r["run_id"] for r in rows} == {collector.state.run_id}
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(rows))
    assert len(rows) > sum(len(pq.read_table(path)) for path in before)
    events = [r for r in rows if r["event_type"] != "queue_declared"]
    reasons = [json.loads(r["detail"]).get("reason") for r in events]
    assert list(zip([r["event_type"] for r in events], reasons, strict=True)) == [
        ("alarm_raised", None),
        ("connection_blocked", "alarm"),
        ("connection_unblocked", REASON_BROKER_STOPPED),
        ("alarm_cleared", REASON_BROKER_STOPPED),
        ("alarm_raised", None),
        ("connection_blocked", "alarm"),
        ("alarm_cleared", None),
        ("connection_unblocked", "alarm"),
    ]
    names = [json.loads(r["detail"]).get("client_name") for r in events]
    assert (names[1], names[5]) == ("before", "after")
    assert events[1]["connection"] == events[2]["connection"] != events[5]["connection"]
    # The node is asked to stop, closes its connections at once, and says it has stopped
    # seconds later (5 s on RabbitMQ 3.10): the block ends when its connection is closed.
    asked, closed = _log_stamp(node, "is asked to stop")[-1], _log_stamp(node, "state: blocked")
    stopped = _log_stamp(node, "Successfully stopped RabbitMQ")[-1]
    assert _stamp(events[2]) == asked <= closed[0] < stopped == _stamp(events[3])
    # Collected after the boot: the alarm lines at their microseconds, the queue's samples.
    alarm_lines = _log_stamp(node, "memory resource limit alarm", "on node")
    assert [_stamp(events[i]) for i in (4, 6)] == alarm_lines[-2:] and booted < alarm_lines[-2]
    # The node down said once, not at every sample, and once that it answers again. A node
    # being stopped or started may answer for a moment before its port closes, or as it opens:
    # 404 (on CI; in 2 of 20 starts of an experiment polling it every 10-20 ms), said as a
    # refusal after answers, not as the configuration's; or 500 with an empty body (1 of 16
    # stops there), said as an error. Whichever comes first is the line said.
    # (A queue listed without its statistics, as a node just started lists them, is said once:
    # not part of the outage's lines.)
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "flowctl.collect" and "without their statistics" not in r.getMessage()
    ]
    down = (
        "does not answer (",
        "refuses (HTTP 404 Not Found) after answering (",
        "answers with an error (HTTP 5",
    )
    assert len(said) == 2 and any(words in said[0] for words in down), said
    assert "answers again after" in said[1] and said[1].endswith("sampling goes on"), said


POLICED = "policed"  # durable, its limit set by a policy


def test_a_real_rabbitmq_starting_is_sampled_with_its_policies(node: RabbitBroker) -> None:
    """The management API polled without a pause through a stop and start of the node, a
    queue's length limit set by a policy: every sample that lists the queue after the start
    has the policy's limit. A real 3.10 lists its queues for seconds after it starts without
    their statistics, the policy in force among them: sampled, the queue had no limit in every
    row of those seconds (an experiment polling it every 20 ms; collectors/rabbitmq.py
    ``has_statistics``)."""
    declarer = _connect(node, "declarer")
    declarer.channel().queue_declare(POLICED, durable=True)
    declarer.close()
    limits = '{"max-length": 300, "overflow": "reject-publish"}'
    node.ctl_ok("set_policy", "limit", f"^{POLICED}$", limits, "--apply-to", "queues")
    management = ManagementReader(node.management_url, "guest", "guest")

    def limited(sample: Any) -> bool:
        arguments = sample.queues[POLICED]["arguments"]
        return (arguments.get("x-max-length"), arguments.get("x-overflow")) == (
            300,
            "reject-publish",
        )

    # A node stopping or starting may refuse with a 404, besides not answering.
    with polled(management.read, (*SAMPLER_ERRORS, SamplerRefused)) as answers:
        until(
            lambda: any(answered(a) and POLICED in a.queues and limited(a) for a in answers),
            "the policy",
        )
        before = len(answers)
        node.restart_process()  # rabbitmqctl stop, then the node again with its state
        until(lambda: not all(map(answered, answers[before:])), "the node seen down")
        down = before + next(i for i, a in enumerate(answers[before:]) if not answered(a))
        until(lambda: any(map(answered, answers[down:])), "an answer after the start")
        # On through the seconds its statistics take after the start (5 s for a classic
        # queue): the samples before rabbitmqctl stop's first refusal prove nothing.
        time.sleep(12)
    after = [a for a in answers[down:] if answered(a) and POLICED in a.queues]
    assert after and all(limited(s) for s in after), [s.queues[POLICED] for s in after]


BLOCKED_PUBLISHER = """
import sys, time, pika
parameters = pika.ConnectionParameters(
    host=sys.argv[1], port=int(sys.argv[2]), heartbeat=2,
    client_properties={"connection_name": sys.argv[4]},
)
channel = pika.BlockingConnection(parameters).channel()
channel.basic_publish("", sys.argv[3], b"held")
print("published", flush=True)
time.sleep(600)
"""


def _node_pid(node: RabbitBroker, connection: str) -> str:
    """The Erlang pid of the node's connection named ``connection`` (``rabbitmqctl
    close_connection`` takes it)."""
    listed = node.ctl_ok("list_connections", "pid", "name", "--quiet", "--no-table-headers")
    pids = [line.split("\t") for line in listed.splitlines() if line.strip()]
    (pid,) = [pid for pid, name in pids if name == connection]
    return pid


def test_a_real_blocked_publisher_closed_by_the_node_ends_at_its_line(
    node: RabbitBroker, tmp_path: Path
) -> None:
    """Two blocked publishers: one whose process is killed (the node notices at its next
    heartbeat and logs ``closing AMQP connection``), one an operator closes (``rabbitmqctl
    close_connection``: ``Error on AMQP connection``, and the API lists it, still blocked, until
    its client answers the close). Each block ends at its line's microsecond, not at the next
    sample (up to --sample-interval later), and the API's statistics, which still show them
    blocked, do not block them again."""
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    make = _collector_of(node, raw, state)
    _connect(node, "declarer").channel().queue_declare(QUEUE)
    publishers = []
    try:
        with collecting(make) as collector:
            node.ctl_ok("set_vm_memory_high_watermark", TINY_WATERMARK)
            until(lambda: _alarm_set(collector), "the alarm line")
            for name in ("dropped", "forced"):
                publisher = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        BLOCKED_PUBLISHER,
                        LOOPBACK,
                        str(node.port),
                        QUEUE,
                        name,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                publishers.append(publisher)
                assert publisher.stdout is not None
                assert publisher.stdout.readline() == "published\n"
            until(lambda: len(collector.node.blocked) == 2, "both publishers blocked")
            # When each opened, which tells a connection the log closed from a new one on the
            # same client port (collectors/rabbitmq.py), is in the node's API.
            listed = ManagementReader(node.management_url, "guest", "guest").read().connections
            assert all(
                isinstance(listed[name]["connected_at"], int) for name in collector.node.blocked
            )
            publishers[0].kill()
            until(lambda: bool(_log_stamp(node, "closing AMQP connection", "dropped")), "a close")
            until(lambda: "forced" in str(committed_rows(raw)), "the block committed")
            forced = _connection_of(committed_rows(raw), "forced")
            node.ctl_ok("close_connection", _node_pid(node, forced), "go")
            until(lambda: bool(_log_stamp(node, "Error on AMQP connection", "forced")), "closed")
            until(lambda: not collector.node.blocked, "the closes read")
            # Samples after the closes, past the API's statistics (500 ms behind) that still
            # show them blocked: until one taken 2 s after the close line is committed (a fixed
            # 2 s sleep could end before any, the collector's thread held up by a loaded machine).
            closed_at = _log_stamp(node, "Error on AMQP connection", "forced")[0]
            after = (datetime.strptime(closed_at, STAMP) + timedelta(seconds=2)).strftime(STAMP)
            until(lambda: _sampled_after(raw, after), "a sample 2 s after the closes")
            node.ctl_ok("set_vm_memory_high_watermark", "0.4")
            until(lambda: not _alarm_set(collector), "the alarm cleared")
    finally:
        for publisher in publishers:
            publisher.kill()
            publisher.wait()

    rows = [r for r in committed_rows(raw) if r["event_type"].startswith("connection_")]
    for name, said in (("dropped", "closing AMQP connection"), ("forced", "Error on AMQP")):
        blocks = [r for r in rows if r["connection"] == _connection_of(rows, name)]
        assert [r["event_type"] for r in blocks] == ["connection_blocked", "connection_unblocked"]
        detail = json.loads(blocks[1]["detail"])
        assert (detail["reason"], detail["held_by"], detail["origin"]) == (
            "closed",
            "alarm",
            "rabbitmq-log",
        )
        assert _stamp(blocks[1]) == _log_stamp(node, said, name)[0]


def _sampled_after(raw: Path, stamp: str) -> bool:
    """Whether a sample (a ``queue_declared`` row) taken after ``stamp`` is committed."""
    rows = committed_rows(raw)
    return any(r["event_type"] == "queue_declared" and _stamp(r) > stamp for r in rows)


def _connection_of(rows: list[dict[str, Any]], client_name: str) -> str:
    (connection,) = {
        r["connection"] for r in rows if json.loads(r["detail"]).get("client_name") == client_name
    }
    return str(connection)

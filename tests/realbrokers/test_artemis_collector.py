"""The Artemis collector on a real Artemis 2.40 (DESIGN §6): a BLOCK address that CORE producers
fill three times, drained once by a consumer, once by a clean stop of the broker and once by a
crash (SIGKILL), with the collector itself stopped and started again in between. The session is
one run whose events are the broker's block / unblock lines, in order, none lost or repeated,
and Jolokia samples that see the address past max-size-bytes while it blocks (seed 003's
overshoot)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.artemis import ArtemisCollector, JolokiaReader
from collectors.artemis_log import BLOCKING, BOOTSTRAP, DISK_BLOCKING, UNBLOCKING
from collectors.base import (
    REASON_BROKER_RESTARTED,
    REASON_BROKER_STOPPED,
    SAMPLER_ERRORS,
)
from conformance.brokers import (
    ARTEMIS_USER,
    LOOPBACK,
    ArtemisAddress,
    ArtemisBroker,
    BrokerUnavailable,
)
from conformance.cases import ADDRESS_LIMIT, REJECT_THRESHOLD
from schemas.broker_events import ORIGIN_ARTEMIS_LOG, ORIGIN_JOLOKIA
from tests.collectors.session_setup import committed_rows
from tests.realbrokers.collecting import answered, collecting, polled, until

pytestmark = pytest.mark.realbroker

ADDRESS = "collected"
MAX_SIZE = 100_000
MESSAGE_BYTES = 1000


@pytest.fixture
def broker() -> Iterator[ArtemisBroker]:
    broker = ArtemisBroker([ArtemisAddress(ADDRESS, max_size_bytes=MAX_SIZE)])
    try:
        broker.start()
    except BrokerUnavailable as error:
        pytest.skip(f"ActiveMQ Artemis unavailable: {error}")
    try:
        yield broker
    finally:
        broker.stop()


def _fill(broker: ArtemisBroker, blocked: Callable[[], bool], what: str) -> None:
    """200 messages of 1 KB into a 100 KB address from a CORE producer, stopped once ``blocked``
    holds (``what`` names it): its messages past max-size-bytes are held by the broker.

    The producer is the Artemis CLI, a JVM of its own: it is given until the block is seen
    rather than a fixed time, which on a loaded machine its start alone can exceed (a 6 s run
    once ended before it sent a message, and no block line came)."""
    producer = broker.start_cli(
        "producer",
        "--url",
        broker.core_url,
        "--destination",
        f"queue://{ADDRESS}",
        "--message-count",
        "200",
        "--message-size",
        str(MESSAGE_BYTES),
        "--non-persistent",
        "--user",
        ARTEMIS_USER,
        "--password",
        ARTEMIS_USER,
    )
    try:
        until(lambda: blocked() or producer.poll() is not None, what)
        assert blocked(), f"the producer ended (exit {producer.returncode}) and never blocked"
    finally:
        producer.kill()
        producer.wait()


def _drain(broker: ArtemisBroker, count: int) -> None:
    done = broker.run_cli(
        "consumer",
        "--url",
        broker.core_url,
        "--destination",
        f"queue://{ADDRESS}",
        "--message-count",
        str(count),
        "--user",
        ARTEMIS_USER,
        "--password",
        ARTEMIS_USER,
        timeout_s=60,
    )
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]


def _blocked(collector: ArtemisCollector) -> bool:
    address = collector.addresses.get(ADDRESS)
    return address is not None and address.blocked


def test_a_real_artemis_blocks_collected_across_restarts(
    broker: ArtemisBroker, tmp_path: Path
) -> None:
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    log = broker.instance / "log" / "artemis.log"
    jolokia = JolokiaReader(
        f"http://{LOOPBACK}:{broker.http_port}/console/jolokia", ARTEMIS_USER, ARTEMIS_USER
    )

    def make() -> ArtemisCollector:
        return ArtemisCollector(
            log_path=log,
            raw_dir=raw,
            state_path=state,
            broker="artemis-real",
            jolokia=jolokia,
            sample_interval_s=0.5,
            flush_interval_s=0.2,
        )

    with collecting(make) as first:
        _fill(broker, lambda: _blocked(first), "the first block line")
        _drain(broker, 60)
        until(lambda: not _blocked(first), "the unblock line")
    with collecting(make) as second:  # the collector restarted: the same run goes on
        assert second.resumed and second.state.run_id == first.state.run_id
        _fill(broker, lambda: _blocked(second), "the second block line")
        time.sleep(1.0)  # a few samples while blocked
        broker.restart_process()
        until(lambda: not _blocked(second), "the broker's stop line")
        _fill(broker, lambda: _blocked(second), "the third block line")
        broker.restart_process(crash=True)
        until(lambda: not _blocked(second), "the start after the crash")
        time.sleep(0.5)

    rows = committed_rows(raw)
    assert [r["seq"] for r in rows] == list(range(len(rows)))  # none lost, none repeated
    assert {r["run_id"] for r in rows} == {first.state.run_id}
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(rows))
    flow = [r for r in rows if r["event_type"] in ("flow_stopped", "flow_resumed")]
    details = [json.loads(r["detail"]) for r in flow]
    assert [(r["event_type"], r["flow_stopped_count"]) for r in flow] == [
        ("flow_stopped", 1),
        ("flow_resumed", 1),
        ("flow_stopped", 2),
        ("flow_resumed", 2),
        ("flow_stopped", 3),
        ("flow_resumed", 3),
    ]
    assert [d.get("log_code") or d.get("reason") for d in details] == [
        BLOCKING,
        UNBLOCKING,
        BLOCKING,
        REASON_BROKER_STOPPED,
        BLOCKING,
        REASON_BROKER_RESTARTED,
    ]
    assert all(d["origin"] == ORIGIN_ARTEMIS_LOG for d in details)
    # The broker's own figures: it blocks past max-size-bytes and unblocks below it.
    stops = [r for r in flow if r["event_type"] == "flow_stopped"]
    assert all(r["depth_bytes"] >= MAX_SIZE and r["flow_stop_size"] == MAX_SIZE for r in stops)
    assert flow[1]["depth_bytes"] < MAX_SIZE
    # The log's lines, read independently: each event is at its line's millisecond.
    stamps = [
        line[:23]
        for line in log.read_text().splitlines()
        if f"address '{ADDRESS}'" in line and (BLOCKING in line or UNBLOCKING in line)
    ]
    # (the log is in this machine's zone, as the collector reads it by default)
    logged = [r["ts"].astimezone().strftime("%Y-%m-%d %H:%M:%S,%f")[:23] for r in flow]
    assert [logged[i] for i in (0, 1, 2, 4)] == stamps
    # The crash's unblock is at the last line before the broker started again, not after.
    starts = [line[:23] for line in log.read_text().splitlines() if BOOTSTRAP in line]
    assert len(starts) == 3  # the first start, the clean restart, the one after the crash
    assert logged[4] <= logged[5] < starts[2]
    # Samples while blocked see the producers' overshoot past max-size-bytes.
    samples = [
        r
        for r in rows
        if r["event_type"] == "queue_declared"
        and r["queue"] == ADDRESS
        and json.loads(r["detail"])["origin"] == ORIGIN_JOLOKIA
    ]
    assert samples and all(r["flow_stop_size"] == MAX_SIZE for r in samples)
    assert max(r["depth_bytes"] for r in samples if r["flow_stopped"]) > MAX_SIZE


def _values(answers: list[Any]) -> list[Any]:
    """The reads of :func:`polled`'s ``answers`` that returned, not raised."""
    return [answer for answer in answers if answered(answer)]


def test_a_real_artemis_being_stopped_or_started_is_never_sampled(broker: ArtemisBroker) -> None:
    """Jolokia polled without a pause through two stops (SIGTERM) and starts: every sample the
    reader returns is the broker's, its address listed with its figures and its settings, and
    anything else is one sampling waits through. A real 2.40 being stopped answers for a moment
    with its settings unread, then with no address at all (its MBeans unregistered) before its
    web server stops: sampled, two of those ended a block as an address removed, ahead of the
    stop line (an experiment polling it every 20 ms)."""
    jolokia = JolokiaReader(
        f"http://{LOOPBACK}:{broker.http_port}/console/jolokia", ARTEMIS_USER, ARTEMIS_USER
    )
    with polled(jolokia.addresses, SAMPLER_ERRORS) as answers:
        until(lambda: len(_values(answers)) >= 3, "samples of the running broker")
        for _ in range(2):
            broker.restart_process()
            sampled = len(_values(answers))  # up to its start: the next is after it
            until(lambda n=sampled: len(_values(answers)) > n, "a sample after the start")
    samples = _values(answers)
    for observed in samples:
        address = observed.get(ADDRESS)
        assert address is not None, observed
        assert (address["max_size_bytes"], address["policy"]) == (MAX_SIZE, "BLOCK"), observed
    assert len(samples) < len(answers)  # the broker was down for seconds: some samples waited


FILLER_BYTES = 3 << 30  # the disk's free space, less min-disk-free's, plus 2 GiB


def test_a_real_artemis_full_disk_is_collected_as_its_disk_alarm(tmp_path: Path) -> None:
    """min-disk-free set 1 GiB under the disk's free space, then a 3 GiB file: the broker finds
    its disk full (scanned every 200 ms), blocks a CORE producer, and once the file is gone
    unblocks. The session holds the disk alarm from the full line to the free one, and no flow
    event of the address (max-size-bytes never blocked it)."""
    if shutil.which("fallocate") is None:
        pytest.skip("no fallocate to fill the disk with")
    free = shutil.disk_usage(tmp_path).free
    if free < 3 * FILLER_BYTES:
        pytest.skip(f"{free >> 30} GiB free: too little to fill {FILLER_BYTES >> 30} GiB of")
    limit_mib = (free - (1 << 30)) >> 20
    broker = ArtemisBroker(
        [ArtemisAddress(ADDRESS, max_size_bytes=MAX_SIZE)],
        core_settings={"min-disk-free": f"{limit_mib}M", "disk-scan-period": "200"},
    )
    try:
        broker.start()
    except BrokerUnavailable as error:
        pytest.skip(f"ActiveMQ Artemis unavailable: {error}")
    filler = broker.instance / "filler"
    raw, state = tmp_path / "raw", tmp_path / "state.json"
    try:

        def make() -> ArtemisCollector:
            return ArtemisCollector(
                log_path=broker.instance / "log" / "artemis.log",
                raw_dir=raw,
                state_path=state,
                broker="artemis-real",
                flush_interval_s=0.2,
            )

        with collecting(make) as collector:
            subprocess.run(["fallocate", "-l", str(FILLER_BYTES), str(filler)], check=True)
            until(lambda: collector.disk_full, "the disk-full line")
            # Blocked at once: by the disk, not by max-size-bytes.
            _fill(
                broker,
                lambda: DISK_BLOCKING in broker.log_text(),
                "the address's disk block line",
            )
            filler.unlink()
            until(lambda: not collector.disk_full, "the disk-free line")
            until(lambda: UNBLOCKING in broker.log_text(), "the address's unblocking line")
            time.sleep(0.5)
        log_text = broker.log_text()
    finally:
        filler.unlink(missing_ok=True)
        broker.stop()

    rows = committed_rows(raw)
    assert [r["event_type"] for r in rows] == ["alarm_raised", "alarm_cleared"]
    details = [json.loads(r["detail"]) for r in rows]
    assert [(d["resource"], d["limit"], d["log_code"]) for d in details] == [
        ("disk", "min-disk-free", "AMQ224128"),
        ("disk", "min-disk-free", "AMQ224129"),
    ]
    # Each at its line's millisecond (the log in this machine's zone, read independently), and
    # the address blocked by the disk in between.
    stamps = [
        line[:23] for line in log_text.splitlines() if "AMQ224128" in line or "AMQ224129" in line
    ]
    logged = [r["ts"].astimezone().strftime("%Y-%m-%d %H:%M:%S,%f")[:23] for r in rows]
    assert logged == stamps
    disk_blocks = [line[:23] for line in log_text.splitlines() if DISK_BLOCKING in line]
    assert disk_blocks and stamps[0] <= disk_blocks[0] <= stamps[1]


def test_a_real_artemis_reject_threshold_is_in_its_samples(
    artemis: ArtemisBroker, tmp_path: Path
) -> None:
    """max-size-bytes-reject-threshold, as Jolokia's getAddressSettingsAsJSON reports it
    (maxSizeBytesRejectThreshold), is in the sampled address's detail under the engine's key
    (``reject_threshold``), and absent from an address without one (-1), as the engine logs
    it; the Artemis advice reads it there (a walk-through found it missing)."""
    with_threshold, without = "reject-sync", "block-amqp-recorded"  # conformance/cases.py
    jolokia = JolokiaReader(
        f"http://{LOOPBACK}:{artemis.http_port}/console/jolokia", ARTEMIS_USER, ARTEMIS_USER
    )
    observed = jolokia.addresses()
    assert observed[with_threshold]["reject_threshold"] == REJECT_THRESHOLD
    assert observed[without]["reject_threshold"] == -1
    raw = tmp_path / "raw"
    ArtemisCollector(
        log_path=artemis.instance / "log" / "artemis.log",
        raw_dir=raw,
        state_path=tmp_path / "state.json",
        broker="artemis-real",
        jolokia=jolokia,
        sampled_addresses=frozenset({with_threshold, without}),
    ).run(stop=lambda: False, once=True)
    samples = {
        row["queue"]: json.loads(row["detail"])
        for row in committed_rows(raw)
        if row["event_type"] == "queue_declared"
    }
    assert samples[with_threshold]["reject_threshold"] == REJECT_THRESHOLD
    assert samples[with_threshold]["max_size_bytes"] == ADDRESS_LIMIT
    assert "reject_threshold" not in samples[without]


def test_a_real_artemis_multicast_address_is_sampled_with_each_message_once(
    artemis: ArtemisBroker,
) -> None:
    """An address's MessageCount sums its queues: a multicast address of 3 queues holding 7
    messages reads 21, and its max-size-messages counts 7 (a review measured an overshoot of
    103 messages read where Artemis's was 1). The sample takes the largest of its queues'
    counts: 7, and still 7 once one queue is emptied (the sum would read 14)."""
    address, queues = "multicast-sampled", ["multicast-sampled.a", "multicast-sampled.b", "c"]
    (servers,) = artemis.jolokia(
        [{"type": "search", "mbean": "org.apache.activemq.artemis:broker=*"}]
    )
    server = servers[0]
    artemis.jolokia(
        [
            {
                "type": "exec",
                "mbean": server,
                "operation": "createAddress(java.lang.String,java.lang.String)",
                "arguments": [address, "MULTICAST"],
            },
            *(
                {
                    "type": "exec",
                    "mbean": server,
                    # (address, queue, routing type)
                    "operation": "createQueue(java.lang.String,java.lang.String,java.lang.String)",
                    "arguments": [address, queue, "MULTICAST"],
                }
                for queue in queues
            ),
        ]
    )
    send = (
        "sendMessage(java.util.Map,int,java.lang.String,boolean,java.lang.String,java.lang.String)"
    )
    artemis.jolokia(
        [
            {
                "type": "exec",
                "mbean": artemis.address_mbean(address),
                "operation": send,
                "arguments": [{}, 3, f"message {n}", False, ARTEMIS_USER, ARTEMIS_USER],
            }
            for n in range(7)
        ]
    )
    jolokia = JolokiaReader(
        f"http://{LOOPBACK}:{artemis.http_port}/console/jolokia", ARTEMIS_USER, ARTEMIS_USER
    )
    read_summed = {
        "type": "read",
        "mbean": artemis.address_mbean(address),
        "attribute": "MessageCount",
    }
    try:
        # A queue adds a routed message on its own executor, so the count lags the send (CI
        # once read 17 of the 21): wait for the broker's sum before reading the collector's.
        until(lambda: artemis.jolokia([read_summed]) == [21], "the address's MessageCount of 21")
        assert jolokia.addresses()[address]["messages"] == 7
        queue_c = 'subcomponent=queues,routing-type="multicast",queue="c"'
        emptied = f"{artemis.address_mbean(address)},{queue_c}"
        artemis.jolokia([{"type": "exec", "mbean": emptied, "operation": "removeAllMessages()"}])
        assert jolokia.addresses()[address]["messages"] == 7
    finally:
        artemis.jolokia(
            [
                {
                    "type": "exec",
                    "mbean": server,
                    "operation": "deleteAddress(java.lang.String,boolean)",
                    "arguments": [address, True],
                }
            ]
        )

"""Workloads on the real brokers, driven by real clients.

- AMQP 1.0: python-qpid-proton's event-driven :class:`~proton.reactor.Container`
  (:func:`collectors.probe.amqp_send`, ``flowctl probe publish``'s sender): a sender that sends
  whenever it has credit and records what the broker tells it (dispositions and their error
  conditions, credit withheld).
- CORE: Artemis's own ``artemis producer --protocol core`` (:func:`core_block_peak`), a Java
  client with a byte window (``producerWindowSize``).
- AMQP 0.9.1: pika (:mod:`conformance.rabbit` has those workloads).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.probe import AmqpSendResult, amqp_send
from conformance.brokers import (
    ArtemisBroker,
    BrokerNotAsExpected,
    BrokerUnavailable,
    artemis_installed,
    reaped,
    spawn,
    stop_pid,
)

# -- AMQP 1.0 (python-qpid-proton): collectors/probe.py's sender ---------------------------


# -- CORE (artemis producer) -------------------------------------------------------------------
@dataclass
class CoreRun:
    """A CORE producer run that blocked: the address size over time and where it settled."""

    peak_size: int
    final_size: int
    messages: int
    encoded_size: int  # bytes per message as the queue counts them (PersistentSize / messages)
    samples: int
    seconds: float
    stopped_by_us: bool  # the producers were still blocked when we ended them


def core_producer_command(
    broker: ArtemisBroker,
    address: str,
    *,
    threads: int,
    count: int,
    size: int,
    window: int,
    rate: int | None = None,
    multicast: bool = False,
) -> list[str]:
    """``artemis producer`` over CORE; ``rate``: its ``producerMaxRate`` (messages/s);
    ``multicast``: to a multicast address (a JMS topic), each of its queues getting a copy."""
    url = f"{broker.core_url}?producerWindowSize={window}"
    if rate is not None:
        url += f"&producerMaxRate={rate}"
    return [
        str(artemis_installed()),
        "producer",
        "--protocol",
        "core",
        "--url",
        url,
        "--destination",
        f"{'topic' if multicast else 'queue'}://{address}",
        "--threads",
        str(threads),
        "--message-count",
        str(count),
        "--message-size",
        str(size),
        "--non-persistent",
        "--silent",
    ]


@dataclass(frozen=True)
class RateRun:
    """A rate-limited CORE client's run: (seconds since it started, messages) samples of the
    queue over Jolokia, and the messages the client itself reports it sent or took (its own
    ``Produced: N`` / ``Consumed: N`` line, once it ended; 0 when it never said)."""

    samples: list[tuple[float, int]]
    client_count: int


_CLIENT_COUNT = re.compile(r"(?:Produced|Consumed): (\d+) messages")


def _client_count(pid: int, log: Path, *, wait_s: float = 10.0) -> int:
    """What the ``artemis producer`` / ``consumer`` of ``pid`` reports in ``log`` once it has
    ended (stopped after ``wait_s``: then what it said so far)."""
    deadline = time.monotonic() + wait_s
    while not reaped(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not reaped(pid):
        stop_pid(pid, grace_s=2.0)
    counts = _CLIENT_COUNT.findall(log.read_text(errors="replace")) if log.exists() else []
    return int(counts[-1]) if counts else 0


def core_rate_arrivals(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    size: int,
    rate: int,
    timeout_s: float = 60.0,
) -> RateRun:
    """One CORE producer with ``producerMaxRate=rate`` sends ``count`` messages into an address
    without a consumer; its queue's message count sampled over Jolokia every 50 ms until all are
    in (or ``timeout_s`` passed)."""
    command = core_producer_command(
        broker, address, threads=1, count=count, size=size, window=1024 * 1024, rate=rate
    )
    log = broker.instance / "log" / f"producer-{address}.log"
    pid = spawn(command, env=dict(os.environ), log=log, what="artemis producer")
    samples = _sampled(lambda: broker.queue_attribute(address, "MessageCount"), count, timeout_s)
    return RateRun(samples, _client_count(pid, log))


def _sampled(read: Callable[[], int], count: int, timeout_s: float) -> list[tuple[float, int]]:
    """(seconds, ``read()``) every 50 ms until it reads ``count`` or ``timeout_s`` passed. A
    read is stamped at the middle of its call: the broker counted somewhere inside it, and
    under load a Jolokia read takes from 0.1 to over 1 s (stamped before the call, a slow
    read's count was placed up to its whole length early). So ``read`` is one Jolokia read,
    not :meth:`ArtemisBroker.address_stats`, which reads until two reads 0.2 s apart agree:
    its count is its last read's, and while messages arrived each of its calls took 0.2-0.4
    s on an idle machine (a rate case's samples 0.3-0.4 s apart, each stamped up to half its
    call before its count was read)."""
    started = time.monotonic()
    samples: list[tuple[float, int]] = []
    while not samples or (samples[-1][1] < count and samples[-1][0] < timeout_s):
        time.sleep(0.05)
        called = time.monotonic()
        value = read()
        samples.append(((called + time.monotonic()) / 2 - started, value))
    return samples


def core_consumer_acks(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    size: int,
    rate: int,
    timeout_s: float = 60.0,
) -> RateRun:
    """``count`` CORE messages sent to an address, then one ``artemis consumer`` with
    ``consumerMaxRate=rate`` takes them; the messages it has acknowledged (the queue's message
    count gone down) sampled over Jolokia every 50 ms until all are (or ``timeout_s`` passed)."""
    core_send_all(broker, address, count=count, size=size)
    # All of them in the queue before the consumer starts: its queue adds a routed message on
    # its executor after the send, and a count read short would be taken for acknowledgements.
    held = int(broker.address_stats(address)["queue.MessageCount"])
    if held != count:
        raise BrokerNotAsExpected(f"{address} holds {held} of the {count} messages sent")
    command = core_consumer_command(
        broker,
        address,
        count=count,
        url_options=f"consumerMaxRate={rate}",
        wait_ms=int(timeout_s * 1000),
    )
    log = broker.instance / "log" / f"consumer-{address}.log"
    pid = spawn(command, env=dict(os.environ), log=log, what="artemis consumer")
    samples = _sampled(
        lambda: count - broker.queue_attribute(address, "MessageCount"), count, timeout_s
    )
    return RateRun(samples, _client_count(pid, log))


@dataclass(frozen=True)
class SlowFastSplit:
    slow: int
    fast: int
    send_ms: int | None
    #: Each consumer's milliseconds from one message to the next as it received them (the
    #: median gap; None below two messages): the slow one's sleep plus what the machine adds to
    #: each, the fast one's credit round trip with window 0 (or the producer's pace if faster).
    slow_pace_ms: float | None = None
    fast_pace_ms: float | None = None


def core_consumer_command(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    url_options: str,
    sleep_ms: int = 0,
    wait_ms: int = 3000,
    verbose: bool = False,
) -> list[str]:
    """``artemis consumer`` over CORE with ``url_options`` (e.g. ``consumerWindowSize=0``),
    ``sleep_ms`` between messages, until ``count`` messages or ``wait_ms`` without one;
    ``verbose``: a ``Received`` line for each message, as it comes."""
    command = [
        str(artemis_installed()),
        "consumer",
        "--protocol",
        "core",
        "--url",
        f"{broker.core_url}?{url_options}",
        "--destination",
        f"queue://{address}",
        "--message-count",
        str(count),
        "--receive-timeout",
        str(wait_ms),
        "--break-on-null",
        "--verbose" if verbose else "--silent",
    ]
    return command + (["--sleep", str(sleep_ms)] if sleep_ms else [])


def core_slow_fast_split(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    size: int,
    window: int,
    slow_sleep_ms: int,
    idle_ms: int = 10_000,
    timeout_s: float = 60.0,
) -> SlowFastSplit:
    """Seed 003's slow consumers: a slow ``artemis consumer`` (``slow_sleep_ms`` per message)
    and a fast one attach to an empty queue with ``consumerWindowSize=window``; once the queue
    counts both, ``count`` messages are sent. The messages each took, by its own report, and
    the milliseconds the producer took to send them, by its own report.

    Each consumer ends after ``idle_ms`` without a message, which must outlast the start of the
    other consumer's JVM and the producer's: with 3 s, on a loaded machine the first consumer
    gave up before the first message and the other one took all of them (real 0 and 200)."""
    consumers = []
    received: dict[str, list[float]] = {"slow": [], "fast": []}
    for name, sleep_ms in (("slow", slow_sleep_ms), ("fast", 0)):
        command = core_consumer_command(
            broker,
            address,
            count=count,
            url_options=f"consumerWindowSize={window}",
            sleep_ms=sleep_ms,
            wait_ms=idle_ms,
            verbose=True,
        )
        log = broker.instance / "log" / f"{name}-consumer-{address}.log"
        # Each one's pace as it runs: on a loaded machine each of the slow one's messages took
        # ~2x its sleep (12 taken where a consumer at exactly 50 ms would have taken 23), and
        # with window 0 the fast one's credit round trips keep messages queued after the last
        # is sent (14 taken by the slow one where 5 would have been taken while they were sent).
        stamp = (" Received ", received[name])
        pid = spawn(command, env=dict(os.environ), log=log, what=name, stamp=stamp)
        consumers.append((pid, log))
    try:
        _wait_for_consumers(broker, address, 2, timeout_s=timeout_s)
        sent = core_send_all(broker, address, count=count, size=size)
        slow, fast = (_client_count(pid, log, wait_s=timeout_s) for pid, log in consumers)
    finally:
        for pid, _ in consumers:
            if not reaped(pid):
                stop_pid(pid, grace_s=2.0)
    elapsed = re.findall(r"Elapsed time in milli second : (\d+)", sent.stdout)
    return SlowFastSplit(
        slow,
        fast,
        int(elapsed[-1]) if elapsed else None,
        _median_gap_ms(received["slow"]),
        _median_gap_ms(received["fast"]),
    )


def _median_gap_ms(times: list[float]) -> float | None:
    """The median of the milliseconds between successive ``times`` (None below two)."""
    gaps = sorted(later - earlier for earlier, later in itertools.pairwise(times))
    return gaps[len(gaps) // 2] * 1000 if gaps else None


def core_send(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    size: int,
    window: int = 1024 * 1024,
    multicast: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``count`` CORE messages of a ``size``-byte BytesMessage body, one producer, to the end."""
    command = core_producer_command(
        broker, address, threads=1, count=count, size=size, window=window, multicast=multicast
    )
    return broker.run_cli(*command[1:], timeout_s=120)


def core_send_all(
    broker: ArtemisBroker, address: str, *, count: int, size: int
) -> subprocess.CompletedProcess[str]:
    """:func:`core_send` for a workload that needs the messages there: a producer that failed
    raises :class:`BrokerUnavailable` with the end of its output."""
    sent = core_send(broker, address, count=count, size=size)
    if sent.returncode != 0:
        raise BrokerUnavailable(f"`artemis producer` failed: {sent.stdout[-300:]}")
    return sent


def _wait_for_consumers(
    broker: ArtemisBroker, address: str, consumers: int, *, timeout_s: float
) -> None:
    """Until the address's queue counts ``consumers`` consumers (BrokerUnavailable after
    ``timeout_s``): the CLI clients' JVMs take seconds to attach."""
    deadline = time.monotonic() + timeout_s
    while broker.queue_attribute(address, "ConsumerCount") < consumers:
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"{consumers} CORE consumer(s) did not attach to {address}")
        time.sleep(0.1)


def core_window_filled(
    broker: ArtemisBroker, address: str, *, window: int, size: int, count: int = 200
) -> int:
    """The messages the broker sends a CORE consumer with ``consumerWindowSize=window`` that
    takes its first message and then sleeps (so it returns no credit), ``count`` messages of
    ``size`` bytes being sent once it is attached: its queue's DeliveringCount plus the one it
    acknowledged, once both hold still for 3 s (reads 0.25 s apart)."""
    log = broker.instance / "log" / f"window-consumer-{address}.log"
    command = core_consumer_command(
        broker,
        address,
        count=count,
        url_options=f"consumerWindowSize={window}",
        sleep_ms=600_000,
        wait_ms=600_000,
    )
    pid = spawn(command, env=dict(os.environ), log=log, what="window consumer")
    attributes = ["DeliveringCount", "MessagesAcknowledged"]

    def read() -> tuple[int, int]:
        mbean = broker.queue_mbean(address)
        (value,) = broker.jolokia([{"type": "read", "mbean": mbean, "attribute": attributes}])
        return int(value["DeliveringCount"]), int(value["MessagesAcknowledged"])

    try:
        _wait_for_consumers(broker, address, 1, timeout_s=60)
        core_send_all(broker, address, count=count, size=size)
        last: tuple[int, int] | None = None
        since = time.monotonic()
        deadline = since + 60
        while True:
            time.sleep(0.25)
            held = read()
            if held != last:
                last, since = held, time.monotonic()
            elif time.monotonic() - since > 3:
                return sum(held)
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"{address}: deliveries never held still")
    finally:
        stop_pid(pid, grace_s=3.0)


def core_block_peak(
    broker: ArtemisBroker,
    address: str,
    *,
    threads: int,
    count: int,
    size: int,
    window: int,
    settle_s: float = 2.0,
    timeout_s: float = 60.0,
) -> CoreRun:
    """Run ``threads`` CORE producers (one ``artemis producer`` process) into a BLOCK address
    with no consumer, sample the address size over Jolokia until it has not moved for
    ``settle_s`` (every producer blocked) or the producers are done, then end them."""
    command = core_producer_command(
        broker, address, threads=threads, count=count, size=size, window=window
    )
    log = broker.instance / "log" / f"producer-{address}.log"
    pid = spawn(command, env=dict(os.environ), log=log, what="artemis producer")
    started = time.monotonic()
    peak = last = samples = 0
    last_change = time.monotonic()
    stopped_by_us = True
    try:
        while True:
            time.sleep(0.1)
            size_now = broker.address_size(address)
            samples += 1
            peak = max(peak, size_now)
            if size_now != last:
                last, last_change = size_now, time.monotonic()
            if reaped(pid):
                stopped_by_us = False
                break
            if last and time.monotonic() - last_change > settle_s:
                break
            if time.monotonic() - started > timeout_s:
                raise BrokerUnavailable(
                    f"CORE producers into {address} neither blocked nor finished in {timeout_s} s"
                )
    finally:
        if stopped_by_us:
            stop_pid(pid, grace_s=2.0)
    stats = broker.address_stats(address)
    return CoreRun(
        peak_size=peak,
        final_size=int(stats["address.AddressSize"]),
        messages=int(stats["queue.MessageCount"]),
        encoded_size=_encoded_size(stats),
        samples=samples,
        seconds=time.monotonic() - started,
        stopped_by_us=stopped_by_us,
    )


def _encoded_size(stats: dict[str, Any]) -> int:
    """A message's encoded size as the address's queue counts it (its PersistentSize over its
    messages), from :meth:`ArtemisBroker.address_stats`."""
    return round(int(stats["queue.PersistentSize"]) / max(1, int(stats["queue.MessageCount"])))


@dataclass(frozen=True)
class DrainedBlock:
    """A BLOCK address filled by one CORE producer, then drained by a consumer: the address
    when it had blocked (messages, size, a message's encoded size) and how long the run took."""

    held: int
    size: int
    encoded_size: int
    seconds: float


def core_block_drained(
    broker: ArtemisBroker,
    address: str,
    *,
    count: int,
    size: int,
    window: int,
    consumer_sleep_ms: int,
    timeout_s: float = 60.0,
) -> DrainedBlock:
    """One CORE producer of ``count`` messages into a BLOCK address with no consumer until the
    broker logs the block (AMQ222183) and a second more; then a CORE consumer with
    ``consumerWindowSize=0`` (one message at a time) sleeping ``consumer_sleep_ms`` after each,
    until the producer has sent them all and the consumer has taken them (it stops 5 s after
    its last). The block / unblock lines are in the broker's log."""
    started = time.monotonic()
    logs = broker.instance / "log"
    producer = spawn(
        core_producer_command(broker, address, threads=1, count=count, size=size, window=window),
        env=dict(os.environ),
        log=logs / f"producer-{address}.log",
        what="artemis producer",
    )
    pids = [producer]
    try:
        while f"production on address '{address}'" not in broker.log_text():
            if reaped(producer) or time.monotonic() - started > timeout_s:
                raise BrokerUnavailable(f"{address}: the producer never blocked")
            time.sleep(0.1)
        time.sleep(1.0)  # the producer's last half window lands
        reading = time.monotonic()
        stats = broker.address_stats(address)
        settling_s = time.monotonic() - reading  # not the run's: left out of its seconds
        held = int(stats["queue.MessageCount"])
        consumer = core_consumer_command(
            broker,
            address,
            count=count,
            url_options="consumerWindowSize=0",
            sleep_ms=consumer_sleep_ms,
            wait_ms=5000,
        )
        pids.append(
            spawn(
                consumer,
                env=dict(os.environ),
                log=logs / f"consumer-{address}.log",
                what="consumer",
            )
        )
        while not all(reaped(pid) for pid in pids):
            if time.monotonic() - started > timeout_s:
                raise BrokerUnavailable(f"{address}: not drained in {timeout_s:.0f} s")
            time.sleep(0.2)
    finally:
        for pid in pids:
            if not reaped(pid):
                stop_pid(pid, grace_s=2.0)
    return DrainedBlock(
        held=held,
        size=int(stats["address.AddressSize"]),
        encoded_size=_encoded_size(stats),
        seconds=time.monotonic() - started - settling_s,
    )


__all__ = ["AmqpSendResult", "amqp_send"]

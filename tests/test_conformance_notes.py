"""The notes a real-broker disagreement prints: enough to tell a broker's behaviour from a
measurement that went wrong on a loaded machine (conformance/cases.py), without a broker."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from conformance import cases, engine, rabbit, real

RESUMED = rabbit.AlarmRun(
    intake_before=40_000.0,
    intake_during=0.0,
    intake_after=30_000.0,
    delivered_before=500.0,
    delivered_during=480.0,
    publisher_blocked=True,
    publisher_unblocked=True,
    consumer_blocked=False,
    consumer_state="blocking",
    alarm_s=4.8,
    resumed_after_s=0.05,
    publisher_events=[(-0.02, "blocked"), (4.74, "unblocked")],
    publisher_closed=None,
    writer_stopped=None,
    after_depths=[(0.32, 162_329), (3.33, 272_440)],
)


def test_a_publisher_that_resumed_is_said_so_briefly():
    assert cases._resumption(RESUMED) == ". Real: alarm-in grew again 0.05 s after unblocked"


def test_no_intake_after_the_alarm_names_the_depths_the_events_and_the_writer():
    stalled = dataclasses.replace(
        RESUMED,
        intake_after=0.0,
        after_depths=[(0.32, 162_329), (3.33, 162_329)],
        writer_stopped="BrokenPipeError(32, 'Broken pipe')",
    )
    note = cases._resumption(stalled)
    assert "0.32 s 162,329, 3.33 s 162,329" in note
    assert "blocked at -0.02 s, unblocked at 4.74 s" in note
    assert "writer stopped: BrokenPipeError(32, 'Broken pipe')" in note
    assert "broker's close: None" in note


def test_a_publisher_that_never_resumed_names_the_wait():
    never = dataclasses.replace(RESUMED, resumed_after_s=None, intake_after=0.0)
    assert cases._resumption(never) == (
        f". Real: alarm-in did not grow within {rabbit.RESUME_TIMEOUT_S:.0f} s of unblocked"
    )


# The CI run of stop 30 (4 CORE producers, 64 KiB windows, BLOCK 100 KB): the real address held
# 138 messages, 295,320 B; the engine, its producers all starting at once, 184 and 393,760 B.
def _core_run(messages: int, peak_size: int) -> real.CoreRun:
    return real.CoreRun(
        peak_size=peak_size,
        final_size=peak_size,
        messages=messages,
        encoded_size=1397,
        samples=30,
        seconds=3.0,
        stopped_by_us=True,
    )


def _engine_address(stored: int, peak_size: int) -> engine.EngineAddress:
    return engine.EngineAddress(
        accepted=stored,
        paged=0,
        dropped=0,
        failed=0,
        rejected=0,
        peak_size=peak_size,
        final_size=peak_size,
        in_memory=stored,
        stored=stored,
        errors=Counter(),
        flow_stopped=1,
        flow_resumed=0,
        credit_zero_with_work=True,
        credit_granted={},
        told_refused=0,
    )


def _held(real_messages: int, real_peak: int) -> list[cases.Row]:
    return cases._half_windows_held(
        "w",
        _core_run(real_messages, real_peak),
        _engine_address(184, 393_760),
        4,
        65_536,
        102_400,
        "",
        "",
    )


def test_a_producer_that_asked_after_the_address_filled_holds_whole_half_windows():
    rows = _held(138, 295_320)  # 6 of the 8 half windows
    assert [row.ok for row in rows] == [True, True, True]
    assert rows[1].real == "6"
    # The peak, compared too: 4 to 11 of the engine's 49,220 B half windows, ± 20 %.
    assert rows[2].tolerance == "4 to 11 engine half windows ± 20 % (157,504 to 649,704)"


def test_a_count_between_half_windows_or_an_oversized_peak_disagrees():
    assert [row.ok for row in _held(150, 320_000)] == [True, False, True]  # 6.5 half windows
    assert [row.ok for row in _held(138, 400_000)] == [False, True, True]  # 66,667 B a half
    assert [row.ok for row in _held(0, 0)] == [False, False, False]


def test_fewer_half_windows_than_fill_the_address_disagree():
    """Nothing is withheld before the 100 KB address is full, so the half windows granted
    reach it: ceil(102,400 / 32,768) = 4 of 64 KiB windows at least, however late threads
    start (beside the full suite two of four 1 MiB threads once asked after the address was
    full). 3 half windows (70 messages) disagree, and so does their peak; 4 (93) agree."""
    assert [row.ok for row in _held(70, 146_440)] == [True, False, False]
    assert [row.ok for row in _held(93, 194_556)] == [True, True, True]
    assert [row.ok for row in _held(117, 244_764)] == [True, True, True]


def test_two_of_four_1_mib_threads_asking_after_the_fill_hold_four_half_windows() -> None:
    """The fresh-clone run of 77840cd, beside the full suite: four CORE threads with 1 MiB
    windows, 1,504 messages and 3,209,536 B held, 4 half windows of 376 (two threads' two; the
    other two asked once one half window, 512 KiB, had filled the 100 KB address). A whole
    number of half windows reaching the limit: agrees; 2.5 half windows does not."""
    run = real.CoreRun(3_209_536, 3_209_536, 1_504, 1393, 30, 3.0, True)
    model = _engine_address(3_008, 6_419_072)
    rows = cases._half_windows_held("w", run, model, 4, 1_048_576, 102_400, "", "")
    assert [row.ok for row in rows] == [True, True, True]
    assert rows[1].real == "4" and "2 to 9" in rows[1].tolerance
    between = real.CoreRun(2_000_000, 2_000_000, 940, 1393, 30, 3.0, True)
    assert not cases._half_windows_held("w", between, model, 4, 1_048_576, 102_400, "", "")[1].ok


# The fresh-clone run of cd34d54: a thread that started early spent a half window while the
# 100 KB address was far from full and was granted a third: 208 messages, 445,120 B.
def test_a_producer_granted_a_half_window_before_the_address_filled_holds_more_than_eight():
    rows = _held(208, 445_120)  # 9 half windows: 3 + 2 + 2 + 2 (70 + 46 + 46 + 46 messages)
    assert [row.ok for row in rows] == [True, True, True]
    assert rows[1].real == "9"
    # 102,400 B / 49,220 B an engine half window -> at most 3 beyond the 8.
    assert "4 to 11" in rows[1].tolerance


def test_more_half_windows_than_the_limit_lets_a_staggered_start_grant_disagrees():
    # The checkout `make test` of 2026-12-01: 256 messages, 547,840 B (3 + 3 + 3 + 2 half windows).
    assert [row.ok for row in _held(256, 547_840)] == [True, True, True]
    assert [row.ok for row in _held(280, 598_360)] == [True, False, True]  # 12: 3 + 3 + 3 + 3


def test_a_producer_sends_its_byte_credit_and_carries_the_rest_over():
    """64 KiB windows, 1,397 B a message: a half window is 23.45 messages, so a producer
    granted h half windows sends floor(23.45 h): 23, 46, 70, 93, ... The engine's 184 is its
    four producers' whole windows; 253 (11 x 23) is no split of half windows, 256 is."""
    held = functools.partial(cases.halves_held, producers=4, window=65_536, encoded_size=1397)
    assert [held(m, most=11) for m in (23, 46, 70, 184, 256)] == [1, 2, 3, 8, 11]
    assert [held(m, most=11) for m in (0, 24, 150, 253, 280)] == [None] * 5
    assert held(280, most=12) == 12


def test_a_rate_is_read_from_the_first_sample_that_counts_each_message():
    # A token bucket's bursts of 20 a second, sampled every 50 ms: message 20 is first counted at
    # 1 s, message 100 at 5 s, so 80 messages in 4 s; samples that never count the last message
    # give no rate.
    samples = [(0.05 * i, 20 * int(0.05 * i)) for i in range(1, 102)]
    assert cases.steady_rate(samples, 20, 100) == 20.0
    assert cases.steady_rate([(0.5, 20), (1.0, 60), (1.5, 100)], 20, 100) == 80.0
    with pytest.raises(ValueError, match="never count 100"):
        cases.steady_rate([(0.5, 20), (1.0, 60)], 20, 100)


def _window_zero_split(monkeypatch: pytest.MonkeyPatch, split: real.SlowFastSplit) -> list[bool]:
    """Seed 003's window-0 case on a real broker that measured ``split``."""
    monkeypatch.setattr(real, "core_slow_fast_split", lambda *args, **kwargs: split)
    return [row.ok for row in cases.slow_fast_consumers(0, "slow-fast-0")(None)]  # type: ignore[arg-type]


def test_the_window_zero_split_is_modelled_at_the_paces_the_consumers_were_seen_to_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkout `make test` of 2026-11-30 on a loaded machine: the producer took 1,169 ms for
    the 200, the slow consumer 12 of them, ~97 ms each. A model whose slow consumer takes
    exactly its 50 ms sleep gives it 23 (outside the tolerance of 10); at the pace it was seen to
    take its messages the engine agrees. Quiet (176 ms of sending, 56.8 and 3.28 ms a message):
    15 real, and the engine agrees at those paces too."""
    loaded = real.SlowFastSplit(12, 188, 1169, 97.4, 3.3)
    assert _window_zero_split(monkeypatch, loaded) == [True, True, True]
    unmeasured = dataclasses.replace(loaded, slow_pace_ms=None, fast_pace_ms=None)
    assert _window_zero_split(monkeypatch, unmeasured) == [False, False, True]
    quiet = real.SlowFastSplit(15, 185, 176, 56.8, 3.28)
    assert _window_zero_split(monkeypatch, quiet) == [True, True, True]


def test_a_stamped_spawn_times_each_line_with_its_phrase_as_it_comes(tmp_path: Path) -> None:
    """What the slow/fast case reads a consumer's pace from: the time each ``Received`` line
    reached us, while the process runs (not all at its end), every line in the log once the
    process is reaped."""
    from conformance.brokers import reaped, spawn

    script = (
        "import time\n"
        "for i in range(3):\n"
        "    print(f'x Received {i}', flush=True)\n"
        "    time.sleep(0.5)\n"
        "print('done', flush=True)\n"
    )
    log, times = tmp_path / "client.log", []
    pid = spawn(
        [sys.executable, "-c", script],
        env=dict(os.environ),
        log=log,
        what="client",
        stamp=(" Received ", times),
    )
    deadline = time.monotonic() + 30
    while not reaped(pid):
        assert time.monotonic() < deadline, "the client did not end"
        time.sleep(0.05)
    # Once reaped, its log holds every line (the count a consumer prints last is read from it).
    lines = ["x Received 0", "x Received 1", "x Received 2", "done"]
    assert log.read_text().splitlines() == lines
    assert len(times) == 3 and times == sorted(times)
    assert times[-1] - times[0] >= 0.5  # 1 s apart as printed: stamped as they came
    assert real._median_gap_ms([0.0, 0.05, 0.1, 0.4]) == 50.0
    assert real._median_gap_ms([1.0]) is None


def test_a_two_senders_queue_that_read_nothing_is_a_disagreement_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkout `make test` of 2026-11-30: the calibration (a connection per queue) read an
    intake of 0 for a queue, and the case raised ZeroDivisionError."""

    def measured(broker: object, queues: dict[str, str], *, shared_connection: bool) -> object:
        rates = {"classic-queue-amqp-091": 40_000.0, "quorum-queue-amqp-091": 0.0}
        return rabbit.TwoSendersRun(shared_connection, 3.0, rates, rates, {})

    monkeypatch.setattr(rabbit, "two_senders", measured)
    (row,) = cases.two_senders(None)  # type: ignore[arg-type]
    assert not row.ok
    assert row.real == "none read by quorum-queue-amqp-091 alone, quorum-queue-amqp-091 sharing"


def test_the_two_senders_window_waits_for_every_publisher_to_write() -> None:
    """The window of rabbitmq-two-senders-091 opens once each queue's writer is writing: a
    writer held by the broker (one queue's count standing still) is not yet ready."""

    class Writer(threading.Thread):
        def __init__(self, queues: list[str], moving: set[str]) -> None:
            super().__init__(daemon=True)
            self.written = dict.fromkeys(queues, 0)
            self.moving = moving
            self.stop = threading.Event()

        def run(self) -> None:
            while not self.stop.wait(0.01):
                for queue in list(self.moving):
                    self.written[queue] += 1

    held = Writer(["classic", "quorum"], {"classic"})
    both = Writer(["classic", "quorum"], {"classic", "quorum"})
    for writer in (held, both):
        writer.start()
    try:
        assert not rabbit._all_writing([held], probe_s=0.1)  # type: ignore[list-item]
        assert rabbit._all_writing([both], probe_s=0.1)  # type: ignore[list-item]
        held.moving.add("quorum")  # the broker lets it write
        assert rabbit._all_writing([held], probe_s=0.1)  # type: ignore[list-item]
        # The window closes once each queue's writer wrote in it (the CI-like run of
        # 2026-11-30: the quorum queue's writer, writing before the window, was held through
        # all of its 3 s).
        held.moving.discard("quorum")
        time.sleep(0.05)
        opened = dict(held.written)
        time.sleep(0.1)
        assert not rabbit._all_wrote_since([held], opened)  # type: ignore[list-item]
        held.moving.add("quorum")
        time.sleep(0.1)
        assert rabbit._all_wrote_since([held], opened)  # type: ignore[list-item]
    finally:
        for writer in (held, both):
            writer.stop.set()


def _paced_run(prefetch: int, *, busy_s: float, wait_s: float) -> rabbit.PacedRun:
    """A paced worker's run as the real broker reports it, a message taking ``busy_s`` and
    waiting ``wait_s`` for the next: the ready counts the engine has."""
    ready = {2: 150 - 1 - prefetch, 75: 150 - 74 - prefetch, 150: 0}
    return rabbit.PacedRun(
        prefetch=prefetch,
        messages=150,
        round_trip_s=0.0002,
        ready_while=ready,
        median_busy_s=busy_s,
        median_wait_s=wait_s,
    )


@pytest.mark.parametrize(
    ("busy_s", "prefetch_20_wait_s", "agrees"),
    [
        # CI of stop 58: time.sleep(0.01) took 11.6 ms on the loaded machine; the worker, with
        # its prefetch 20, never waited.
        (0.0116, 0.0, True),
        (0.010, 0.0002, True),
        # A worker that waits 3 ms a message on its prefetch-20 buffer: it is not the engine's.
        (0.010, 0.003, False),
    ],
)
def test_the_paced_consumer_reads_its_time_against_the_workers_measured_busy_time(
    monkeypatch: pytest.MonkeyPatch, busy_s: float, prefetch_20_wait_s: float, agrees: bool
) -> None:
    """The paced worker's times are ratios to its measured busy time, and the engine's worker
    takes that time, so a sleep that overshoots on a loaded machine does not read as a broker
    that held the worker back, while a worker that waited does."""

    def measured(broker: object, queue: str, *, prefetch: int, **_: object) -> rabbit.PacedRun:
        # Prefetch 1 waits a round trip a message, as the engine has it.
        wait_s = 0.0002 if prefetch == 1 else prefetch_20_wait_s
        return _paced_run(prefetch, busy_s=busy_s, wait_s=wait_s)

    monkeypatch.setattr(rabbit, "paced_consumer", measured)
    rows = cases.paced_consumer(None)  # type: ignore[arg-type]
    assert len(rows) == 8
    timed = [row for row in rows if "busy time" in row.figure]
    assert [row.ok for row in timed] == [True, agrees]
    assert all(row.ok for row in rows if row not in timed)


def test_a_sampled_count_is_stamped_at_the_middle_of_its_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Jolokia read that takes 0.4 s (a loaded machine) counts somewhere inside it: its
    sample is stamped 0.2 s in, not at its start, so a rate read off the samples is not
    stretched by the reads' lengths."""

    class Clock:
        now = 0.0

        def monotonic(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.now += seconds

    clock = Clock()
    monkeypatch.setattr(real, "time", clock)
    counts = iter([10, 20, 30])

    def slow_read() -> int:
        clock.now += 0.4
        return next(counts)

    samples = real._sampled(slow_read, 30, timeout_s=60.0)
    assert [count for _, count in samples] == [10, 20, 30]
    # Each read: 50 ms of pause, then 0.4 s of call, stamped at its middle.
    assert [round(at, 3) for at, _ in samples] == [0.25, 0.7, 1.15]


@pytest.mark.parametrize(
    ("quorum_written", "agrees"),
    [(400, True), (2_000, False)],
)
def test_the_two_senders_ratio_is_read_to_a_batch(
    monkeypatch: pytest.MonkeyPatch, quorum_written: int, agrees: bool
) -> None:
    """The writer counts whole batches of 50, so a window's edges may hold a batch more of
    either queue: with 400 of the slow quorum queue's written (a disk slowed by the suite) that
    is 0.125 of the ratio, and 1.1 agrees; with 2,000 it is 0.025, and 1.1 is a disagreement."""
    window_s = 3.0

    def measured(broker: object, queues: dict[str, str], *, shared_connection: bool) -> object:
        quorum = quorum_written / window_s
        classic = 1.1 * quorum if shared_connection else 40_000.0
        rates = {"classic-queue-amqp-091": classic, "quorum-queue-amqp-091": quorum}
        states = {"two-senders-classic+quorum": {"flow"}} if shared_connection else {}
        return rabbit.TwoSendersRun(shared_connection, window_s, rates, rates, states)

    monkeypatch.setattr(rabbit, "two_senders", measured)
    rows = {row.figure: row for row in cases.two_senders(None)}  # type: ignore[arg-type]
    ratio = rows["one connection: classic intake ÷ quorum intake, same run"]
    assert (ratio.real, ratio.ok) == ("1.1", agrees)


def test_a_count_is_read_once_it_holds_still() -> None:
    """The memory alarm's "during" window opens, and a paced worker's ready count is read,
    once three reads agree: what was in flight is processed first, however long that takes
    on a loaded machine; a count that never settles is read at the deadline."""
    counts = iter([5, 7, 9, 9, 9, 12])
    _, count = rabbit._held_still(lambda: (0.0, next(counts)), every_s=0.0, for_s=60.0)
    assert count == 9 and next(counts) == 12  # the fifth read, no more
    rising = iter(range(1_000_000))
    _, last = rabbit._held_still(lambda: (0.0, next(rising)), every_s=0.001, for_s=0.05)
    assert 3 <= last < 1_000_000


def _batching_client_on(sock: object, already_read: bytes) -> rabbit.BatchingClient:
    """A BatchingClient over one end of a socket pair, its set-up done: ``already_read`` is
    what the set-up's reads left in its buffer."""
    client = object.__new__(rabbit.BatchingClient)
    client.__dict__.update(
        sock=sock,
        _buffer=already_read,
        _stop=threading.Event(),
        closed_by_broker=None,
        delivered=0,
        confirmed_upto=0,
        _batch_end=10,
        _batch_confirmed=threading.Event(),
        _deliveries=rabbit.queue_module.SimpleQueue(),
    )
    return client


def test_the_benchmark_client_reads_deliveries_and_confirms_whatever_came_with_its_set_up() -> None:
    """Deliveries that came in the same read as consume-ok are the prefetch: the broker sends
    nothing more until they are acknowledged, so a reader that waited for the socket first took
    none, and the case's consumer alone read 0 a second (a flaky run). Frames split across reads
    are read once whole; a confirm up to 10 ends the batch of 10."""
    import socket

    pika = pytest.importorskip("pika")
    spec = pika.spec

    def deliver(tag: int) -> bytes:
        method = spec.Basic.Deliver("c", tag, exchange="", routing_key="q")
        return b"".join(
            (
                pika.frame.Method(1, method).marshal(),
                pika.frame.Header(1, 12, spec.BasicProperties()).marshal(),
                pika.frame.Body(1, b"some payload").marshal(),
            )
        )

    confirm = pika.frame.Method(1, spec.Basic.Ack(delivery_tag=10, multiple=True)).marshal()
    ours, broker = socket.socketpair()
    client = _batching_client_on(ours, deliver(1) + deliver(2))
    reader = threading.Thread(target=client._read_loop, daemon=True)
    reader.start()
    deadline = time.monotonic() + 5.0
    while client.delivered < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.delivered == 2  # with nothing more sent
    later = deliver(3) + confirm
    broker.sendall(later[:7])  # a frame's head alone, then the rest
    time.sleep(0.05)
    broker.sendall(later[7:])
    assert client._batch_confirmed.wait(5.0)
    assert (client.delivered, client.confirmed_upto) == (3, 10)
    assert [client._deliveries.get_nowait() for _ in range(3)] == [1, 2, 3]
    client._stop.set()
    broker.close()
    reader.join(5.0)
    ours.close()

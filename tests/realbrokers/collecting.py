"""What the real-broker collector tests share: a collector (or a bare API reader) polling in a
thread while the test drives the broker, and waiting for what it has seen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from collectors.base import LogCollector

CollectorT = TypeVar("CollectorT", bound=LogCollector)
WAIT_S = 40.0


@contextmanager
def collecting(make: Callable[[], CollectorT]) -> Iterator[CollectorT]:
    """A collector polling in a thread for the block's length, then committing and stopping."""
    collector = make()
    stop = threading.Event()
    worker = threading.Thread(target=lambda: collector.run(stop=stop.is_set), daemon=True)
    worker.start()
    try:
        yield collector
    finally:
        stop.set()
        worker.join(timeout=30)
        assert not worker.is_alive()


#: How often :func:`polled` reads: fast enough to catch a state a broker holds for 20 ms.
POLL_EVERY_S = 0.02


@contextmanager
def polled(read: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> Iterator[list[Any]]:
    """``read()`` every :data:`POLL_EVERY_S` in a thread for the block's length: the list of
    its answers, each the value read or the error of ``errors`` the read raised, growing while
    the block runs."""
    answers: list[Any] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                answers.append(read())
            except errors as error:
                answers.append(error)
            time.sleep(POLL_EVERY_S)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield answers
    finally:
        done.set()
        poller.join(timeout=30)
    assert not poller.is_alive()


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:.0f} s: {what}"
        time.sleep(0.1)

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
def _in_thread(loop: Callable[[Callable[[], bool]], None]) -> Iterator[None]:
    """``loop(stopped)`` in a thread for the block's length; then ``stopped()`` turns true and
    the thread must end within 30 s."""
    stop = threading.Event()
    worker = threading.Thread(target=lambda: loop(stop.is_set), daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()


@contextmanager
def collecting(make: Callable[[], CollectorT]) -> Iterator[CollectorT]:
    """A collector polling in a thread for the block's length, then committing and stopping."""
    collector = make()
    with _in_thread(lambda stopped: collector.run(stop=stopped)):
        yield collector


#: How often :func:`polled` reads: fast enough to catch a state a broker holds for 20 ms.
POLL_EVERY_S = 0.02


@contextmanager
def polled(read: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> Iterator[list[Any]]:
    """``read()`` every :data:`POLL_EVERY_S` in a thread for the block's length: the list of
    its answers, each the value read or the error of ``errors`` the read raised, growing while
    the block runs."""
    answers: list[Any] = []

    def poll(stopped: Callable[[], bool]) -> None:
        while not stopped():
            try:
                answers.append(read())
            except errors as error:
                answers.append(error)
            time.sleep(POLL_EVERY_S)

    with _in_thread(poll):
        yield answers


def answered(answer: Any) -> bool:
    """Whether one of :func:`polled`'s answers is a value read, not the error a read raised."""
    return not isinstance(answer, Exception)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:.0f} s: {what}"
        time.sleep(0.1)

"""What the real-broker collector tests share: a collector polling in a thread while the test
drives the broker, and waiting for what the collector has seen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

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


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:.0f} s: {what}"
        time.sleep(0.1)

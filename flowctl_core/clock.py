"""A deterministic virtual-clock scheduler.

Time is an integer count of microseconds since the Unix epoch, so events convert to Parquet
timestamps without rounding. Callbacks due at the same instant run in the order they were
scheduled (a monotonically increasing tie-breaker), which makes every run reproducible.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from schemas.model import US_PER_SECOND


def seconds_to_us(seconds: float) -> int:
    return round(seconds * US_PER_SECOND)


class Scheduler:
    def __init__(self, start_us: int = 0) -> None:
        self.now_us = start_us
        self._queue: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._tiebreak = 0

    def call_at(self, when_us: int, callback: Callable[..., Any], *args: Any) -> None:
        if when_us < self.now_us:
            raise ValueError(f"cannot schedule in the past: {when_us} < now {self.now_us}")
        self._tiebreak += 1
        heapq.heappush(self._queue, (when_us, self._tiebreak, callback, args))

    def call_later(self, delay_us: int, callback: Callable[..., Any], *args: Any) -> None:
        self.call_at(self.now_us + delay_us, callback, *args)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run at the current instant, after everything already due now."""
        self.call_at(self.now_us, callback, *args)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def next_due_us(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def run_until(self, end_us: int) -> None:
        """Run every callback due at or before ``end_us``, then set the clock to ``end_us``."""
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= end_us:
            when_us, _, callback, args = pop(queue)
            self.now_us = when_us
            callback(*args)
        if end_us > self.now_us:
            self.now_us = end_us

    def run_due(self) -> None:
        """Run everything due at the current instant (including work it schedules for now)."""
        self.run_until(self.now_us)

    def advance(self, delta_us: int) -> None:
        self.run_until(self.now_us + delta_us)

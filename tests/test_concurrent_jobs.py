"""The independent Spark jobs of a job, submitted from several driver threads
(jobs/concurrent_jobs.py).

A fake SparkContext records the job description each call ran under, per thread: the calls'
outcome does not depend on Spark, and the tables episodes and daily_metrics write either way are
compared on Spark by tests/test_carried_state.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from jobs.concurrent_jobs import run_at_once, write_tables

LABEL = "episodes 2024-01-01..2024-01-02"


class FakeContext:
    """Records ``setJobDescription`` per thread, as Spark's thread-local property is."""

    def __init__(self) -> None:
        self.descriptions: dict[int, str | None] = {}
        self.lock = threading.Lock()

    def setJobDescription(self, value: str | None) -> None:
        with self.lock:
            self.descriptions[threading.get_ident()] = value

    def description(self) -> str | None:
        with self.lock:
            return self.descriptions.get(threading.get_ident())


class FakeSpark:
    def __init__(self) -> None:
        self.sparkContext = FakeContext()


def recording(
    spark: FakeSpark, seen: dict[str, tuple[int, str | None]], table: str, rows: int
) -> Callable[[], int]:
    def write() -> int:
        seen[table] = (threading.get_ident(), spark.sparkContext.description())
        return rows

    return write


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_every_write_runs_once_described_and_the_rows_come_back_in_order(threads: int) -> None:
    spark = FakeSpark()
    spark.sparkContext.setJobDescription("recommend 2024-01-01..2024-01-02: evidence")
    seen: dict[str, tuple[int, str | None]] = {}
    writes = [(name, recording(spark, seen, name, rows)) for name, rows in (("b", 2), ("a", 1))]
    result = write_tables(spark, LABEL, writes, threads)  # type: ignore[arg-type]
    assert list(result.items()) == [("b", 2), ("a", 1)]
    assert {table: description for table, (_, description) in seen.items()} == {
        "b": f"{LABEL}: write b",
        "a": f"{LABEL}: write a",
    }
    # Each thread's description is cleared after its write, the caller's too.
    assert set(spark.sparkContext.descriptions.values()) == {None}
    on_caller = {thread for thread, _ in seen.values()} == {threading.get_ident()}
    assert on_caller == (threads == 1)


def test_two_threads_run_two_writes_at_once() -> None:
    # Each write waits for the other to start: in turn, the first would time out.
    both_started = threading.Barrier(2, timeout=10)

    def write() -> int:
        both_started.wait()
        return 0

    result = write_tables(FakeSpark(), LABEL, [("a", write), ("b", write)], 2)  # type: ignore[arg-type]
    assert result == {"a": 0, "b": 0}


def test_a_failure_is_raised_after_every_write_has_finished() -> None:
    finished: list[str] = []
    release_slow = threading.Event()

    def failing() -> int:
        release_slow.set()
        raise RuntimeError("write a failed")

    def slow(name: str) -> Callable[[], int]:
        def write() -> int:
            release_slow.wait(10)
            finished.append(name)
            return 1

        return write

    writes: list[tuple[str, Any]] = [("b", slow("b")), ("a", failing), ("c", slow("c"))]
    with pytest.raises(RuntimeError, match="write a failed"):
        write_tables(FakeSpark(), LABEL, writes, 2)  # type: ignore[arg-type]
    # The writes after the failed one still ran and finished before the error was raised.
    assert sorted(finished) == ["b", "c"]


def test_the_first_failure_in_the_order_given_is_raised() -> None:
    def failing(message: str) -> Callable[[], int]:
        def write() -> int:
            raise ValueError(message)

        return write

    writes = [("a", failing("first")), ("b", failing("second"))]
    with pytest.raises(ValueError, match="first"):
        write_tables(FakeSpark(), LABEL, writes, 2)  # type: ignore[arg-type]


def test_any_call_runs_described_by_what_it_does() -> None:
    spark = FakeSpark()
    calls = [
        ("rows as of 2024-01-02", lambda: spark.sparkContext.description()),
        ("rows as of 2024-01-01", lambda: spark.sparkContext.description()),
    ]
    assert run_at_once(spark, "recommend", calls, 2) == {  # type: ignore[arg-type]
        "rows as of 2024-01-02": "recommend: rows as of 2024-01-02",
        "rows as of 2024-01-01": "recommend: rows as of 2024-01-01",
    }

"""The independent Spark jobs of one flowctl job, submitted from several driver threads at once.

The episodes and daily_metrics jobs each write several tables from the same span of events, none
reading another's output, and recommend computes each day's rows on its own. One after the other,
every query's planning, code generation and Delta commit on the driver leave the cores idle, and
so does each stage of a single task (adaptive execution coalesces a small shuffle into one
partition). Submitted from ``spark.concurrent_jobs`` driver threads (conf/pipeline.yaml), Spark's
FIFO scheduler gives the cores to the job submitted first and the others what it leaves; PySpark
pins each Python thread to a JVM thread of its own, so each keeps its own job description.

A table write is a Delta commit of its own table, atomic on its own, as when they ran in turn: a
failure of one leaves the others committed or not, and the job's rerun replaces them all. Every
call is waited for before the first failure is raised, so none outlives its job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from pyspark.sql import SparkSession

T = TypeVar("T")


def run_at_once(
    spark: SparkSession,
    label: str,
    calls: Sequence[tuple[str, Callable[[], T]]],
    threads: int,
) -> dict[str, T]:
    """Run ``calls`` (what each does, and the call) from up to ``threads`` threads, in the order
    given as threads free up, each Spark job described as ``<label>: <what>``; returns each
    call's result by what it does, in the order given. One thread (or one call) runs them in turn
    on the calling thread, stopping at the first failure. Either way the calling thread's job
    description is cleared."""
    sc = spark.sparkContext

    def described(what: str, call: Callable[[], T]) -> T:
        sc.setJobDescription(f"{label}: {what}")
        try:
            return call()
        finally:
            sc.setJobDescription(None)

    if threads <= 1 or len(calls) <= 1:
        return {what: described(what, call) for what, call in calls}
    with ThreadPoolExecutor(max_workers=min(threads, len(calls))) as pool:
        futures: list[tuple[str, Future[T]]] = [
            (what, pool.submit(described, what, call)) for what, call in calls
        ]
    # As in turn, the calling thread's later jobs are no longer described as this job's.
    sc.setJobDescription(None)
    # Leaving the pool waited for every call: the first failure in the order given is raised.
    return {what: future.result() for what, future in futures}


def write_tables(
    spark: SparkSession,
    label: str,
    writes: Sequence[tuple[str, Callable[[], int]]],
    threads: int,
) -> dict[str, int]:
    """:func:`run_at_once` of table writes (each table's name and the call writing it, returning
    the rows written), described as ``<label>: write <table>``; returns the rows per table."""
    written = run_at_once(spark, label, [(f"write {t}", w) for t, w in writes], threads)
    return {table: written[f"write {table}"] for table, _ in writes}

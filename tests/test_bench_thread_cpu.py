"""The bench's breakdown of the driver JVM's CPU by thread group (bench/pipeline_throughput.py):
differenced thread by thread, so threads that start or end between two samples cannot make a
group's figure negative (the warm ingest of one run printed "tasks -54.5 s")."""

from __future__ import annotations

import pytest

from bench.pipeline_throughput import ENDED, thread_cpu_spent


def test_a_thread_that_ended_is_counted_from_the_jvm_total_not_subtracted():
    before = {1: ("tasks", 60.0), 2: ("JIT", 10.0), 3: ("other", 1.0)}
    # Task thread 1 ended after spending 4 s more; task thread 4 started and spent 5 s.
    after = {2: ("JIT", 12.5), 3: ("other", 1.5), 4: ("tasks", 5.0)}
    spent = thread_cpu_spent(before, after, jvm_spent=4.0 + 2.5 + 0.5 + 5.0)
    assert spent == pytest.approx({"tasks": 5.0, "JIT": 2.5, "GC": 0.0, "other": 0.5, ENDED: 4.0})
    assert sum(spent.values()) == pytest.approx(12.0)


def test_living_threads_only():
    before = {1: ("GC", 2.0)}
    after = {1: ("GC", 3.0)}
    assert thread_cpu_spent(before, after, jvm_spent=1.0)[ENDED] == 0.0

"""Throughput of the Spark pipeline: raw Parquet -> bronze -> silver -> gold, events per second.

Generates a synthetic event log with numpy/pyarrow (not the Python engine: 10 million events must
take seconds, not minutes), then times ingest, episodes and daily_metrics in one session. JVM
start-up and data generation are excluded from the end-to-end figure. Also prints the CPU seconds
of each job (driver JVM and Python: in local mode, all of Spark's work), a figure that depends much
less than the wall time on other processes sharing the machine. Prints figures; asserts none.

    .venv/bin/python bench/pipeline_throughput.py                 # 10 million events
    .venv/bin/python bench/pipeline_throughput.py --events 200000 # a quick smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.config import PROJECT_ROOT, load_conf
from schemas.broker_events import BROKER_EVENTS
from schemas.model import US_PER_DAY, US_PER_SECOND

DAY1 = date(2024, 3, 1)
DAYS = 2
RUNS = 4
QUEUES = 40
PRODUCERS = 16
ROWS_PER_FILE = 1_000_000
#: Issue #4's end-to-end target (JVM start-up excluded); printed against, never asserted.
TARGET_EVENTS_PER_S = 500_000
# Event mix: mostly enqueue/dequeue, some link credit traffic, and frequent flow toggles so that
# episodes and starvations are plentiful.
EVENT_MIX = {
    "enqueue": 0.44,
    "dequeue": 0.40,
    "flow": 0.08,
    "flow_stopped": 0.02,
    "flow_resumed": 0.02,
    "transfer_completed": 0.04,
}


def generate_raw(raw_dir: Path, events: int, seed: int = 7, days: int = DAYS) -> int:
    """Write ``events`` synthetic events over ``days`` days as
    <raw>/date=D/part-<run>-NNNNN.parquet; returns files.

    A file's columns are drawn when it is written (only each run's timestamps are held whole,
    8 bytes an event), so 100 million events fit in a few GiB; the strings go to Arrow with a
    validity mask, never as Python objects."""
    rng = np.random.default_rng(seed)
    schema = BROKER_EVENTS.to_pyarrow()
    day_us = US_PER_DAY
    start_us = int(datetime.combine(DAY1, datetime.min.time(), UTC).timestamp() * US_PER_SECOND)
    per_run = events // RUNS
    kinds = np.array(list(EVENT_MIX))
    queues = np.array([f"q{number}" for number in range(QUEUES)])
    producers = np.array([f"p{number}" for number in range(PRODUCERS)])
    files = 0
    for run in range(RUNS):
        run_id = f"bench-{run}"
        n = per_run if run < RUNS - 1 else events - per_run * (RUNS - 1)
        # Evenly spread over the days, strictly ordered by seq.
        ts = start_us + np.sort(rng.integers(0, days * day_us, n))
        day_starts = np.searchsorted(ts, start_us + day_us * np.arange(days + 1))
        for day in range(days):
            folder = raw_dir / f"date={date.fromordinal(DAY1.toordinal() + day).isoformat()}"
            folder.mkdir(parents=True, exist_ok=True)
            first_of_day, end_of_day = int(day_starts[day]), int(day_starts[day + 1])
            for part, first in enumerate(range(first_of_day, end_of_day, ROWS_PER_FILE)):
                last = min(first + ROWS_PER_FILE, end_of_day)
                columns = _bench_columns(rng, kinds, queues, producers, first, last)
                columns["run_id"] = pa.array(np.full(last - first, run_id))
                columns["ts"] = pa.array(ts[first:last], type=schema.field("ts").type)
                arrays = [
                    columns[f.name].cast(f.type)
                    if f.name in columns
                    else pa.nulls(last - first, f.type)
                    for f in schema
                ]
                table = pa.Table.from_arrays(arrays, schema=schema)
                pq.write_table(table, folder / f"part-{run_id}-{part:05d}.parquet")
                files += 1
    return files


def _bench_columns(
    rng: np.random.Generator,
    kinds: np.ndarray,
    queues: np.ndarray,
    producers: np.ndarray,
    first: int,
    last: int,
) -> dict[str, pa.Array]:
    """The drawn columns of a run's events ``first`` .. ``last`` - 1 (seq first + 1 on)."""
    n = last - first
    kind = kinds[rng.choice(len(kinds), n, p=list(EVENT_MIX.values()))]
    queue_event = kind != "flow"
    enqueue, flow = kind == "enqueue", kind == "flow"
    depth = rng.integers(0, 200, n)
    credit = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 170, n))

    def where(values: np.ndarray, present: np.ndarray) -> pa.Array:
        return pa.array(values, mask=~present)

    return {
        "broker": pa.array(np.full(n, "broker-a")),
        "seq": pa.array(np.arange(first + 1, last + 1, dtype=np.int64)),
        "event_type": pa.array(kind),
        "queue": where(queues[rng.integers(0, len(queues), n)], queue_event),
        "link": where(producers[rng.integers(0, len(producers), n)], enqueue | flow),
        "depth_msgs": where(depth, queue_event),
        "depth_bytes": where(depth * 1024, queue_event),
        "flow_stop_count": where(np.full(n, 100), queue_event),
        "flow_resume_count": where(np.full(n, 70), queue_event),
        "capacity": where(np.full(n, 50), enqueue),
        "credit": where(credit, flow),
        "available": where(rng.integers(0, 10, n), flow),
        "link_role": where(np.full(n, "publisher"), flow),
    }


def mapped_class_archive(spark: Any) -> str:
    """The class-data-sharing archive of jobs/jvm_class_archive.py the driver JVM mapped (from
    /proc: in local mode, all of Spark), or why none: a cold round is faster with one."""
    maps = Path(f"/proc/{_jvm_pid(spark)}/maps")
    if not maps.is_file():
        return "unknown (no /proc)"
    found = {
        line.split()[-1] for line in maps.read_text().splitlines() if "/class-archive/" in line
    }
    return ", ".join(sorted(found)) or "none (python -m jobs.jvm_class_archive writes it)"


def jvm_peak_rss_gib(spark: Any) -> float:
    """The driver JVM's peak resident memory (``VmHWM`` of /proc): in local mode, all of Spark's."""
    for line in Path(f"/proc/{_jvm_pid(spark)}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--conf", help="pipeline YAML (default: conf/pipeline.yaml)")
    parser.add_argument(
        "--days",
        type=int,
        default=DAYS,
        help=f"days the events are spread over (default {DAYS}; 1 puts them all in one day)",
    )
    parser.add_argument(
        "--no-great-expectations",
        action="store_true",
        help="skip the Great Expectations checkpoint in ingest",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the three jobs this many times in the same session (a rerun replaces the same "
        "days, so later rounds show the JVM warm: JIT-compiled, classes loaded)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="then time what Spark needs at least: read every raw column, copy the raw "
        "events into a date-partitioned Delta table with no checks at all, and run the Great "
        "Expectations suite over that copy; and compare with the 500k events/s target",
    )
    args = parser.parse_args(argv)

    from jobs.daily_metrics import run_daily_metrics
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest
    from jobs.spark_session import build_spark_session

    work = PROJECT_ROOT / "var" / "bench"
    shutil.rmtree(work, ignore_errors=True)
    conf = dataclasses.replace(
        load_conf(args.conf),
        raw_dir=str(work / "raw"),
        warehouse_dir=str(work / "warehouse"),
        quality_dir=str(work / "quality"),
        validate_with_great_expectations=not args.no_great_expectations,
    )
    started = time.perf_counter()
    files = generate_raw(Path(conf.raw_dir), args.events, days=args.days)
    print(
        f"generated {args.events:,} events in {files} files: {time.perf_counter() - started:.1f} s"
    )

    started = time.perf_counter()
    spark = build_spark_session(conf, app_name="flowctl-bench")
    spark.range(1).count()
    print(f"Spark + Delta session start-up: {time.perf_counter() - started:.1f} s (excluded)")
    print(f"class-data-sharing archive: {mapped_class_archive(spark)}")

    date_to = date.fromordinal(DAY1.toordinal() + args.days - 1)
    jobs = (
        ("ingest", lambda: run_ingest(spark, conf, DAY1, date_to)),
        ("episodes", lambda: run_episodes(spark, conf, DAY1, date_to)),
        ("daily_metrics", lambda: run_daily_metrics(spark, conf, DAY1, date_to)),
    )
    for round_number in range(1, args.repeat + 1):
        if args.repeat > 1:
            print(
                f"round {round_number} of {args.repeat}"
                + (" (cold JVM)" if round_number == 1 else " (warm JVM)")
            )
        run_round(spark, jobs, args.events)
    if args.floor:  # after the jobs, so that it does not warm the JVM up for them
        print_floor(spark, conf.raw_dir, work / "floor", args.events)
    print(f"driver JVM peak resident memory: {jvm_peak_rss_gib(spark):.2f} GiB (VmHWM)")
    spark.stop()
    return 0


def print_floor(spark: Any, raw_dir: str, scratch: Path, events: int) -> None:
    """What any Spark pipeline over these files pays, before validating or computing anything:
    a scan of every column, and a bare copy into Delta (statistics on run_id/seq/ts, as bronze)."""
    from jobs.delta_io import TABLE_PROPERTIES

    def scan() -> None:
        spark.read.parquet(raw_dir).write.format("noop").mode("overwrite").save()

    # New tables take their properties' defaults from the session (prefix below, minus "delta.").
    defaults = {
        "spark.databricks.delta.properties.defaults." + name.removeprefix("delta."): value
        for name, value in TABLE_PROPERTIES["broker_events"].items()
    }

    def copy() -> None:
        for key, value in defaults.items():
            spark.conf.set(key, value)
        try:
            raw = spark.read.parquet(raw_dir)
            raw.write.format("delta").mode("overwrite").partitionBy("date").save(str(scratch))
        finally:
            for key in defaults:
                spark.conf.unset(key)

    def expectations() -> None:
        from jobs.quality import validate_accepted_events

        validate_accepted_events(spark.read.format("delta").load(str(scratch)), "floor")

    steps = (
        ("floor: scan every column", scan),
        ("floor: copy to Delta", copy),
        # The issue asks for both a Delta bronze and a Great Expectations checkpoint over it.
        ("floor: GE suite on the copy", expectations),
    )
    walls = {}
    for name, step in steps:
        cpu_before, started = cpu_seconds(spark), time.perf_counter()
        step()
        wall, cpu = time.perf_counter() - started, cpu_seconds(spark) - cpu_before
        walls[name] = wall
        print(f"{name:>28}: {wall:7.1f} s  {events / wall:>12,.0f} events/s  CPU {cpu:6.1f} s")
    mandatory = walls["floor: copy to Delta"] + walls["floor: GE suite on the copy"]
    print(
        f"{'floor vs. 500k events/s':>28}: the target allows {events / TARGET_EVENTS_PER_S:.1f} s "
        f"end to end; copy + suite alone take {mandatory:.1f} s, before any contract check, "
        "deduplication, quarantine, episode or daily metric"
    )
    from delta.tables import DeltaTable

    properties = DeltaTable.forPath(spark, str(scratch)).detail().first().properties
    print(f"{'floor table properties':>28}: {dict(properties)}")
    shutil.rmtree(scratch, ignore_errors=True)


def run_round(spark: Any, jobs: Any, events: int) -> None:
    """Run the jobs in order once, printing the wall and CPU time of each and end to end, and
    where the JVM's CPU went (Spark's task threads, the JIT compilers, GC, the rest)."""
    timings, cpu = {}, {}
    for name, job in jobs:
        cpu_before, threads_before = cpu_seconds(spark), jvm_thread_cpu(spark)
        jvm_before = jvm_cpu_seconds(spark)
        started = time.perf_counter()
        result = job()
        timings[name] = time.perf_counter() - started
        cpu[name] = cpu_seconds(spark) - cpu_before
        summary = {k: v for k, v in result.items() if not isinstance(v, dict | list)}
        rate = events / timings[name]
        print(f"{name:>14}: {timings[name]:7.1f} s  {rate:>12,.0f} events/s  "
              f"CPU {cpu[name]:6.1f} s  {summary}")  # fmt: skip
        threads = jvm_thread_cpu(spark)
        if threads:
            spent = thread_cpu_spent(threads_before, threads, jvm_cpu_seconds(spark) - jvm_before)
            print(" " * 16 + "JVM CPU: " + ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    total, total_cpu = sum(timings.values()), sum(cpu.values())
    print(f"{'end to end':>14}: {total:7.1f} s  {events / total:,.0f} events/s "
          f"(ingest alone {events / timings['ingest']:,.0f} events/s)")  # fmt: skip
    # On a shared machine the wall time depends on the other tenants; the CPU time much less.
    print(f"{'CPU':>14}: {total_cpu:7.1f} s  {events / total_cpu:,.0f} events/CPU-s; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip


#: JVM thread name prefixes -> what they do (Linux thread names are cut at 15 characters).
THREAD_GROUPS = (
    ("Executor task l", "tasks"),
    ("C1 CompilerThre", "JIT"),
    ("C2 CompilerThre", "JIT"),
    ("GC Thread", "GC"),
    ("G1 ", "GC"),
)


def _jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def _stat_cpu_seconds(stat: Path) -> float:
    """utime + stime of a /proc/<pid>[/task/<tid>]/stat file, in seconds (OSError if gone)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_thread_cpu(spark: Any) -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each living thread of the driver JVM: ``{thread id: (group,
    seconds)}``, the group as :data:`THREAD_GROUPS` ("other" for the rest); empty where /proc is
    missing. Spark generates new classes for each query, so the JIT compilers stay busy even in a
    warm JVM: this shows how much."""
    try:
        tasks = list(Path(f"/proc/{_jvm_pid(spark)}/task").iterdir())
    except OSError:
        return {}
    threads = {}
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            seconds = _stat_cpu_seconds(task / "stat")
        except OSError:  # the thread ended meanwhile
            continue
        group = next((g for prefix, g in THREAD_GROUPS if name.startswith(prefix)), "other")
        threads[int(task.name)] = (group, seconds)
    return threads


ENDED = "threads ended meanwhile"


def thread_cpu_spent(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], jvm_spent: float
) -> dict[str, float]:
    """CPU seconds per group between two :func:`jvm_thread_cpu` samples, thread by thread (a
    thread started meanwhile counts from 0). A thread that ended between them is in neither's
    difference: what the whole JVM spent (``jvm_spent``) beyond the living threads is theirs.
    (Grouped sums differenced as wholes went negative when Spark's idle task threads ended.)"""
    spent = {"tasks": 0.0, "JIT": 0.0, "GC": 0.0, "other": 0.0}
    for tid, (group, seconds) in after.items():
        spent[group] += seconds - before.get(tid, (group, 0.0))[1]
    spent[ENDED] = max(0.0, jvm_spent - sum(spent.values()))
    return spent


def jvm_cpu_seconds(spark: Any) -> float:
    """CPU seconds used so far by the driver JVM, threads that ended included (NaN without
    /proc)."""
    try:
        return _stat_cpu_seconds(Path(f"/proc/{_jvm_pid(spark)}/stat"))
    except OSError:
        return float("nan")


def cpu_seconds(spark: Any) -> float:
    """CPU seconds used so far by this Python process and the driver JVM (in local mode, all of
    Spark's work), from /proc (Linux; NaN elsewhere)."""
    times = os.times()
    return jvm_cpu_seconds(spark) + times.user + times.system


if __name__ == "__main__":
    sys.exit(main())

"""Engine throughput and memory benchmark: prints figures, asserts nothing.

Reference workload: 4 queues with default 80/70 thresholds, 40 producers (capacity 20, Poisson
arrivals, sizes 100..2000 bytes) and 4 consumers, written to Parquet through the real sink. Each
length runs in its own process so that its peak RSS is its own; a flat peak RSS across lengths is
what "memory does not grow with the run's length" means. A last run of the long length without
the sink shows what the engine alone does and so what writing Parquet costs on top. Each run is
pinned to one CPU (os.sched_setaffinity), Arrow's and Parquet's threads included, so events/s is
the one-core figure; events/cpu-s is the same work per CPU second, which moves less when other
processes share the machine.

    .venv/bin/python bench/engine_throughput.py                 # 5M events, plus a 1M run
    .venv/bin/python bench/engine_throughput.py --events 500000 # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ~800 events per virtual second: 40 producers x 10 msg/s, each message enqueued and dequeued.
EVENTS_PER_VIRTUAL_SECOND = 800


def reference_scenario(events: int) -> dict[str, object]:
    return {
        "name": "bench-reference",
        "kind": "workload",
        "start": "2026-01-01T00:00:00Z",
        "duration_s": max(1, events // EVENTS_PER_VIRTUAL_SECOND),
        "seed": 1,
        "queues": [
            {
                "name": f"bench-q{i}",
                "arguments": {"qpid.max_count": 2000, "qpid.max_size": 4_000_000},
            }
            for i in range(4)
        ],
        "producers": [
            {
                "name": f"bench-p{i:02d}",
                "capacity": 20,
                "routing_key": f"bench-q{i % 4}",
                "rate": 10,
                "arrival": "poisson",
                "size": 100,
                "size_max": 2000,
            }
            for i in range(40)
        ],
        "consumers": [
            {"name": f"bench-c{i}", "queue": f"bench-q{i}", "rate": 101} for i in range(4)
        ],
    }


def run_once(events: int, out: Path, sink_enabled: bool = True) -> dict[str, float]:
    import pyarrow as pa

    from flowctl_core.runner import run_scenario
    from flowctl_core.scenario import parse_scenario
    from flowctl_core.sink import ParquetSink

    # Library start-up is not throughput (as JVM start-up is excluded from the pipeline bench):
    # pyarrow's first conversion imports pandas, ~0.3 s once per process.
    pa.array([0])
    scenario = parse_scenario(reference_scenario(events))
    started, cpu_started = time.perf_counter(), time.process_time()
    sink = ParquetSink(out, "bench")
    with sink:
        result = run_scenario(scenario, [sink] if sink_enabled else [], run_id="bench")
    elapsed = time.perf_counter() - started
    # CPU seconds of this (single-threaded) process: the one-core figure, robust to a loaded box.
    cpu = time.process_time() - cpu_started
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "events": result.events,
        "seconds": elapsed,
        "events_per_s": result.events / elapsed,
        "events_per_cpu_s": result.events / cpu,
        "peak_rss_mb": peak_rss_mb,
        "parquet_mb": sum(p.stat().st_size for p in sink.files) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000, help="events in the long run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-sink", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_once(args.events, Path(tmp), sink_enabled=not args.no_sink)))
        return
    lengths = sorted({max(1, args.events // 5), args.events})
    print(
        f"{'events':>12} {'seconds':>9} {'events/s':>11} {'events/cpu-s':>13}"
        f" {'peak RSS MB':>12} {'parquet MB':>11}"
    )
    # The last line is the engine alone (no subscriber): what the Parquet sink costs on top.
    for length, flags in [(n, []) for n in lengths] + [(args.events, ["--no-sink"])]:
        child = subprocess.run(
            [sys.executable, __file__, "--child", "--events", str(length), *flags],
            check=True,
            capture_output=True,
            text=True,
        )
        figures = json.loads(child.stdout.strip().splitlines()[-1])
        print(
            f"{figures['events']:>12,} {figures['seconds']:>9.1f} {figures['events_per_s']:>11,.0f}"
            f" {figures['events_per_cpu_s']:>13,.0f}"
            f" {figures['peak_rss_mb']:>12.0f} {figures['parquet_mb']:>11.1f}"
            + ("  (engine only, no sink)" if flags else "")
        )
    print("target: >= 300,000 events/s on one core; peak RSS flat across lengths")


if __name__ == "__main__":
    main()

"""What one job call of the tests' size costs, and where: the suite's time (docs/testing.md).

The Spark tests process a few rows per call, so what they spend is Spark's and Delta's fixed
cost per query and per commit, not data. This runs the days of tests/test_processing_order.py's
module fixture (its rows, the tests' Spark settings) day after day, as its "forward" order does,
in one session: the first day warms the JVM and is not shown; each later call prints its wall
time, the Spark jobs it ran, the time in Catalyst's analyzer and optimizer rules and, of that,
Delta's ``PrepareDeltaScan`` (a file listing of the table, one small Spark job per scan), with
the JVM's and Python's CPU seconds.

    .venv/bin/python bench/job_call_cost.py
    .venv/bin/python bench/job_call_cost.py --setting spark.sql.autoBroadcastJoinThreshold=10MB
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pipeline_throughput import cpu_seconds
from jobs.config import load_conf
from jobs.daily_metrics import run_daily_metrics
from jobs.episodes import run_episodes
from jobs.ingest import run_ingest
from jobs.spark_session import build_spark_session
from tests.conftest import TEST_SPARK_SETTINGS, scratch_conf, write_raw
from tests.test_processing_order import DAYS, _run_crossing_midnights

JOBS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("ingest", run_ingest),
    ("episodes", run_episodes),
    ("daily_metrics", run_daily_metrics),
)
_TOTAL = re.compile(r"Total time: ([0-9.]+) seconds")
_SCAN = re.compile(r"\.PrepareDeltaScan\s+\d+ / (\d+)\s+(\d+) / \d+")


def spark_jobs_so_far(spark: Any) -> int:
    ids = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    return max(ids) + 1 if ids else 0


def rule_seconds(dump: str) -> tuple[float, float, int]:
    """(all rules' seconds, PrepareDeltaScan's seconds, scans it changed) from
    ``RuleExecutor.dumpTimeSpent()``."""
    total = _TOTAL.search(dump)
    scan = _SCAN.search(dump)
    return (
        float(total.group(1)) if total else 0.0,
        int(scan.group(1)) / 1e9 if scan else 0.0,
        int(scan.group(2)) if scan else 0,
    )


def main(extra_settings: dict[str, str]) -> int:
    root = Path(tempfile.mkdtemp(prefix="job-call-cost-"))
    conf = dataclasses.replace(load_conf(), warehouse_dir=str(root / "session"))
    settings = {
        **TEST_SPARK_SETTINGS,
        "spark.sql.warehouse.dir": str(root / "sql"),
        **extra_settings,
    }
    spark = build_spark_session(conf, app_name="job-call-cost", extra_settings=settings)
    rows = _run_crossing_midnights()
    for run in ("r2", "r3"):
        write_raw(root / "raw", [dict(r) for r in rows if r["run_id"] == run])
    conf = scratch_conf(root, "forward")
    rules = spark._jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
    print(f"{'day':10} {'job':14} {'wall s':>7} {'jobs':>5} {'rules s':>8} {'scan s':>7} "
          f"{'scans':>5} {'CPU s':>6}")  # fmt: skip
    sums = [0.0, 0.0, 0.0, 0.0]
    for index, day in enumerate(DAYS):
        for name, job in JOBS:
            rules.resetMetrics()
            jobs_before, cpu_before, started = (
                spark_jobs_so_far(spark),
                cpu_seconds(spark),
                time.time(),
            )
            job(spark, conf, day, day)
            wall, cpu = time.time() - started, cpu_seconds(spark) - cpu_before
            spark_jobs = spark_jobs_so_far(spark) - jobs_before
            in_rules, in_scans, scans = rule_seconds(rules.dumpTimeSpent())
            if index == 0:
                continue  # the JVM's warm-up
            for position, value in enumerate((wall, in_rules, in_scans, cpu)):
                sums[position] += value
            print(f"{day.isoformat():10} {name:14} {wall:7.1f} {spark_jobs:5d} {in_rules:8.1f} "
                  f"{in_scans:7.1f} {scans:5d} {cpu:6.1f}")  # fmt: skip
    wall, in_rules, in_scans, cpu = sums
    print(f"{'warm calls':25} {wall:7.1f} {'':5} {in_rules:8.1f} {in_scans:7.1f} {'':5} {cpu:6.1f}")
    print(f"PrepareDeltaScan: {in_scans / wall:.0%} of the warm calls' wall time; rules "
          f"{in_rules / wall:.0%}; CPU {cpu / wall:.2f} cores")  # fmt: skip
    spark.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="What one job call of the tests' size costs, and where (docs/testing.md): "
        "tests/test_processing_order.py's days, one warm call after another, in one session."
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting over the tests' (TEST_SPARK_SETTINGS), to measure a change; "
        "may be given more than once",
    )
    args = parser.parse_args()
    sys.exit(main(dict(setting.split("=", 1) for setting in args.setting)))

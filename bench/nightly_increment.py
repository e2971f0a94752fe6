"""One new day against a long bronze: does a nightly run cost what the day holds (issue 22)?

Runs that last the whole stretch (collector sessions: every run has events on every day) are
generated over ``--days`` + 1 days, the same number of events each day. Two warehouses, in one
Spark session, one sitting:

- long: the first ``--days`` days ingested and processed as one range (the backfill), then the
  nightly run of the last day;
- short: only the two days before the last ingested and processed, then the same nightly run.
  Two, not one: a nightly run recomputes the day before too (its episodes may close on the new
  day), so with the day before alone in bronze the short run would have no earlier day and read
  no carried state, while the long run reads the rows carried to the day before that; the
  comparison would then hold that read against nothing, not a long history against a short one.

The nightly run (ingest, episodes, daily_metrics of the one new day) is timed twice in both, in
the order short, long, long, short (a rerun replaces the same day): the first nightly run pays
the JIT for code the backfills did not run (the episodes job's first span that starts from
carried state and closes a day), whichever warehouse it is on, and this order gives both the same
share of it. Cost that follows the new day gives a ratio long / short near 1; cost that follows
the run's length gives about ``--days`` / 2. The episodes job's report says what it read
(carried state + span, or whole runs).

With ``--recommend`` each backfill and each nightly run also writes the recommendations as of
its last day (the default policy, conf/recommend.yaml), timed apart from the three jobs. They read
the policy's look-back window (7 days by default): the episodes and daily rows of the window, and
its bronze for the consumer links' steps and the Artemis addresses; the facts merged over days
come from the day rollup that recommend keeps (jobs/recommend_day_rollup.py), computed from
bronze for the new day only, as the backfill's recommend (the night before) kept the others. The
part of the window bronze holds is 3 days in the short warehouse, up to ``--days`` + 1 in the
long one.

    .venv/bin/python bench/nightly_increment.py                          # 10 days + 1, 1M a day
    .venv/bin/python bench/nightly_increment.py --per-day 200000 --days 3  # a quick smoke run
    .venv/bin/python bench/nightly_increment.py --recommend             # recommend's night too
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pipeline_throughput import DAY1, cpu_seconds, generate_raw, jvm_peak_rss_gib
from jobs.config import PROJECT_ROOT, load_conf
from jobs.recommend_policy import RecommendPolicy, load_policy

#: Days the short bronze holds before the new one (see the module docstring).
SHORT_DAYS = 2


def process(
    spark: Any, conf: Any, first: date, last: date, policy: RecommendPolicy | None = None
) -> dict[str, Any]:
    """Ingest, episodes and daily_metrics of [first, last]: seconds and CPU seconds per job,
    and the episodes job's read; with a recommendation ``policy``, the recommendations as of
    ``last`` too (written alone: the days before it are not redone)."""
    from jobs.daily_metrics import run_daily_metrics
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest

    figures: dict[str, Any] = {}
    for name, job in (
        ("ingest", run_ingest),
        ("episodes", run_episodes),
        ("daily_metrics", run_daily_metrics),
    ):
        started, cpu = time.perf_counter(), cpu_seconds(spark)
        report = job(spark, conf, first, last)
        figures[name] = (time.perf_counter() - started, cpu_seconds(spark) - cpu)
        if name == "episodes":
            figures["read"] = report.get("read", "whole runs (no carried state)")
    if policy is not None:
        from jobs.recommend import write_recommendations

        started, cpu = time.perf_counter(), cpu_seconds(spark)
        write_recommendations(spark, conf, policy, last, last)
        figures["recommend"] = (time.perf_counter() - started, cpu_seconds(spark) - cpu)
    return figures


def line(label: str, figures: dict[str, Any]) -> str:
    jobs = ("ingest", "episodes", "daily_metrics")
    total = sum(figures[j][0] for j in jobs)
    parts = "  ".join(f"{j} {figures[j][0]:6.1f} s" for j in jobs)
    shown = f"{label:<34} {parts}  total {total:6.1f} s  (episodes read {figures['read']})"
    if "recommend" in figures:
        shown += f"  recommend {figures['recommend'][0]:6.1f} s"
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000, help="events a day")
    parser.add_argument(
        "--days", type=int, default=10, help="days in bronze before the new one (at least 3)"
    )
    parser.add_argument("--conf", help="pipeline YAML (default: conf/pipeline.yaml)")
    parser.add_argument(
        "--recommend",
        action="store_true",
        help="also time the recommendations as of the new day in each nightly run",
    )
    args = parser.parse_args(argv)
    if args.days < SHORT_DAYS + 1:
        parser.error(f"--days: at least {SHORT_DAYS + 1}, the short bronze holds {SHORT_DAYS}")
    # Read before the events are generated and Spark starts: an unusable policy fails at once.
    policy = load_policy() if args.recommend else None

    from jobs.spark_session import build_spark_session

    work = PROJECT_ROOT / "var" / "bench-nightly"
    shutil.rmtree(work, ignore_errors=True)
    base = load_conf(args.conf)

    def conf_of(name: str) -> Any:
        return dataclasses.replace(
            base,
            raw_dir=str(work / "raw"),
            warehouse_dir=str(work / name / "warehouse"),
            quality_dir=str(work / name / "quality"),
        )

    total_days = args.days + 1
    started = time.perf_counter()
    files = generate_raw(work / "raw", args.per_day * total_days, days=total_days)
    print(
        f"generated {args.per_day * total_days:,} events over {total_days} days "
        f"({args.per_day:,} a day, every run on every day) in {files} files: "
        f"{time.perf_counter() - started:.1f} s"
    )
    spark = build_spark_session(base, app_name="flowctl-bench-nightly")
    spark.range(1).count()
    new_day = DAY1 + timedelta(days=args.days)
    day_before = new_day - timedelta(days=1)
    short_from = new_day - timedelta(days=SHORT_DAYS)

    long, short = conf_of("long"), conf_of("short")
    # With a policy, the backfills end with the recommendations as of their last day, as the
    # night before the new day would have: what recommend keeps of the window is then there.
    backfill = process(spark, long, DAY1, day_before, policy)
    print(line(f"long: backfill of {args.days} days", backfill))
    backfill_short = process(spark, short, short_from, day_before, policy)
    print(line(f"short: backfill of the {SHORT_DAYS} days before", backfill_short))
    runs: dict[str, list[dict[str, Any]]] = {"short": [], "long": []}
    for name in ("short", "long", "long", "short"):
        figures = process(spark, conf_of(name), new_day, new_day, policy)
        runs[name].append(figures)
        print(line(f"{name}: nightly run of the new day", figures))
    jobs = ("ingest", "episodes", "daily_metrics")

    def total(name: str, job: str, index: int) -> float:
        return sum(figures[job][index] for figures in runs[name])

    ratio = sum(total("long", j, 0) for j in jobs) / sum(total("short", j, 0) for j in jobs)
    cpu_ratio = sum(total("long", j, 1) for j in jobs) / sum(total("short", j, 1) for j in jobs)
    print(
        f"nightly run with {args.days} days in bronze / with {SHORT_DAYS}, both runs each: "
        f"{ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (1 = the new day's cost; "
        f"{args.days / SHORT_DAYS:g} = the run's length)"
    )
    for job in jobs:
        print(
            f"  {job:<14} long {total('long', job, 0):6.1f} s ({total('long', job, 1):6.1f} s CPU)"
            f"  short {total('short', job, 0):6.1f} s ({total('short', job, 1):6.1f} s CPU)"
            "  (both runs)"
        )
    if policy is not None:
        held = {
            "long": min(policy.lookback_days, args.days + 1),
            "short": min(policy.lookback_days, SHORT_DAYS + 1),
        }
        wall = {name: total(name, "recommend", 0) for name in runs}
        cpu = {name: total(name, "recommend", 1) for name in runs}
        print(
            f"  {'recommend':<14} long {wall['long']:6.1f} s ({cpu['long']:6.1f} s CPU)  short "
            f"{wall['short']:6.1f} s ({cpu['short']:6.1f} s CPU)  (both runs): "
            f"{wall['long'] / wall['short']:.2f}x wall, {cpu['long'] / cpu['short']:.2f}x CPU, "
            f"its look-back holding {held['long']} days of bronze against {held['short']}"
        )
    print(f"driver JVM peak resident memory: {jvm_peak_rss_gib(spark):.2f} GiB (VmHWM)")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Spark pipeline beside its peer, DuckDB, on the same raw files in the same run (issue 22).

One command, one sitting, one machine load: generate N synthetic events (the generator of
bench/pipeline_throughput.py), compute DESIGN.md §4 with the DuckDB peer (bench/duckdb_peer.py)
cold and warm, run the pipeline (ingest -> episodes -> daily_metrics) cold and warm, time
pipeline_throughput's floor, then compare the pipeline's silver and gold with the peer's row by
row. Prints figures and a markdown table for a closing note; asserts none.

Definitions:

- pipeline cold: the three jobs' first round in a fresh Spark session (JVM start-up excluded),
  into an empty warehouse, its driver mapping the class-data-sharing archive when it is written
  (jobs/jvm_class_archive.py; the table says which); warm: a second round in the same session
  over the same days, which replaces them (pipeline_throughput's ``--repeat 2``: the JVM has its
  classes loaded and JIT compiled, the warehouse holds the first round's tables);
- DuckDB cold: the peer's first computation in this process (a fresh in-memory database: reads
  every raw file, builds the four tables, writes them as Parquet); warm: a second one, a new
  database in the same process (library loaded, files in the OS cache);
- floor: pipeline_throughput's ``--floor`` step "copy to Delta", a bare copy of the raw events
  into a date-partitioned Delta table, no check at all;
- DuckDB after: the peer once more, warm, after the pipeline (its Spark session stopped). This
  machine's speed moves within minutes (the same peer run took 19.5 s, then 30.3 s ten minutes
  later, nothing else of ours running), so the peer is timed on both sides of the pipeline: the
  warm ratio is taken against the mean of the two warm peer runs, and their spread is printed;
- ratio: pipeline seconds / DuckDB seconds, cold with cold and warm with the warm peer's mean
  before and after;
- warm pairs (``--warm-rounds K``, K >= 2): K warm rounds of the pipeline, each followed at once
  by a warm peer run in the same process (the Spark session idle meanwhile), each round's ratio
  taken against the peer run right after it: a drift of the machine over minutes moves both
  sides of a pair alike, and the later rounds show the JVM still warming (an episodes job took
  74-80 s in a fresh JVM, 40-54 s in its next two calls and 35-46 s after that). The median of
  the pairs' ratios is printed beside the first warm round's.

    .venv/bin/python bench/pipeline_vs_duckdb.py                      # 10 million events
    .venv/bin/python bench/pipeline_vs_duckdb.py --events 200000      # a quick smoke run
    .venv/bin/python bench/pipeline_vs_duckdb.py --raw var/demo/raw   # an existing raw folder
    .venv/bin/python bench/pipeline_vs_duckdb.py --warm-rounds 3      # rounds paired with the peer
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
import shutil
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import duckdb_peer as peer
from bench.pipeline_throughput import (
    DAY1,
    DAYS,
    generate_raw,
    mapped_class_archive,
    print_floor,
    run_round,
)
from jobs.config import PROJECT_ROOT, load_conf

#: Silver and gold, in the order the comparison prints them.
COMPARED_TABLES = (
    "queue_flow_daily",
    "link_starvation_daily",
    "queue_flow_episodes",
    "link_starvation_episodes",
)


@dataclasses.dataclass
class Figures:
    """What the run measured, for the closing table."""

    events: int = 0
    raw_label: str = ""
    pipeline_cold_s: float = float("nan")
    pipeline_warm_s: float = float("nan")
    peer_cold_s: float = float("nan")
    peer_warm_s: float = float("nan")
    #: The peer's warm run after the pipeline: with ``peer_warm_s``, it brackets the pipeline's run.
    peer_after_s: float = float("nan")
    floor_copy_s: float = float("nan")
    #: ``--warm-rounds``: per warm round, (pipeline seconds, the peer's seconds right after it).
    warm_pairs: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    #: The class-data-sharing archive the driver mapped (jobs/jvm_class_archive.py), or "none".
    class_archive: str = ""
    bronze_rows: int = 0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    comparisons: list[peer.TableDifferences] = dataclasses.field(default_factory=list)


def raw_days(raw_dir: Path) -> tuple[date, date]:
    """The first and last day of a raw folder's ``date=YYYY-MM-DD`` partitions."""
    days = sorted(
        date.fromisoformat(p.name.removeprefix("date="))
        for p in raw_dir.glob("date=*")
        if any(p.glob("*.parquet"))
    )
    if not days:
        raise SystemExit(f"no raw files under {raw_dir}/date=*/")
    return days[0], days[-1]


def time_peer(raw_dir: Path, out_dir: Path, label: str, events: int) -> float:
    run = peer.run_peer(raw_dir, out_dir)
    run.con.close()
    print(
        f"{'DuckDB peer ' + label:>22}: {run.seconds:7.1f} s  "
        f"{events / run.seconds:>12,.0f} events/s  {run.events:,} events -> {run.rows}"
    )
    return run.seconds


def time_pipeline(spark: Any, jobs: Any, events: int, label: str) -> float:
    print(f"pipeline {label}:")
    started = time.perf_counter()
    run_round(spark, jobs, events)
    return time.perf_counter() - started


def time_floor(spark: Any, raw_dir: Path, scratch: Path, events: int) -> float:
    """pipeline_throughput's floor, printed as it prints it; returns its "copy to Delta" wall."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_floor(spark, str(raw_dir), scratch, events)
    print(printed.getvalue(), end="")
    found = re.search(r"floor: copy to Delta:\s+([0-9.]+) s", printed.getvalue())
    return float(found.group(1)) if found else float("nan")


def export_pipeline_tables(spark: Any, conf: Any, folder: Path) -> dict[str, str]:
    """The pipeline's silver and gold as plain Parquet (DuckDB reads them without Delta)."""
    from jobs.delta_io import read_table
    from schemas.tables import PIPELINE_TABLES

    paths = {}
    for name in COMPARED_TABLES:
        _, schema = PIPELINE_TABLES[name]
        paths[name] = str(folder / name)
        read_table(spark, conf, schema).write.mode("overwrite").parquet(paths[name])
    return paths


def compare_with_peer(
    peer_dir: Path, pipeline_paths: dict[str, str]
) -> list[peer.TableDifferences]:
    con = peer.connect()
    try:
        return [
            peer.differences(
                con,
                name,
                f"read_parquet('{peer_dir / (name + '.parquet')}')",
                f"read_parquet('{pipeline_paths[name]}/*.parquet')",
            )
            for name in COMPARED_TABLES
        ]
    finally:
        con.close()


def _seconds(value: float, events: int) -> str:
    return f"{value:,.1f} s ({events / value:,.0f} events/s)" if value == value else "n/a"


def _ratio(pipeline: float, duckdb: float) -> str:
    return f"{pipeline / duckdb:.1f}x" if pipeline == pipeline and duckdb == duckdb else "n/a"


def peer_warm_mean(f: Figures) -> float:
    """The warm peer's seconds around the pipeline: the mean of its runs before and after it,
    or the one before when there is none after."""
    if f.peer_after_s != f.peer_after_s:
        return f.peer_warm_s
    return (f.peer_warm_s + f.peer_after_s) / 2


def peer_spread(f: Figures) -> str:
    """How far the two warm peer runs are apart: the machine's drift over the pipeline's run."""
    if f.peer_after_s != f.peer_after_s or f.peer_warm_s != f.peer_warm_s:
        return "n/a"
    return f"after / before {f.peer_after_s / f.peer_warm_s:.2f}"


def pair_ratios(f: Figures) -> list[float]:
    """Each warm pair's pipeline seconds over the peer's right after it."""
    return [pipeline / duckdb for pipeline, duckdb in f.warm_pairs]


def median_pair_ratio(f: Figures) -> float:
    """The median of :func:`pair_ratios` (nan without pairs)."""
    return statistics.median(pair_ratios(f)) if f.warm_pairs else float("nan")


def markdown_table(f: Figures) -> str:
    cores = os.cpu_count()
    rows = [
        ("events", f"{f.events:,} ({f.raw_label}); bronze accepted {f.bronze_rows:,}"),
        ("pipeline cold (ingest, episodes, daily_metrics)", _seconds(f.pipeline_cold_s, f.events)),
        ("pipeline warm (same session, same days again)", _seconds(f.pipeline_warm_s, f.events)),
        ("DuckDB peer cold (raw to silver + gold)", _seconds(f.peer_cold_s, f.events)),
        ("DuckDB peer warm, before the pipeline", _seconds(f.peer_warm_s, f.events)),
        ("DuckDB peer warm, after the pipeline", _seconds(f.peer_after_s, f.events)),
        ("the machine's drift over the pipeline's run (peer)", peer_spread(f)),
        ("ratio pipeline / DuckDB, cold", _ratio(f.pipeline_cold_s, f.peer_cold_s)),
        ("ratio pipeline / DuckDB, warm (peer's mean before and after)",
         _ratio(f.pipeline_warm_s, peer_warm_mean(f))),
        *(
            (
                f"warm pair {number}: pipeline round / the peer right after",
                f"{pipeline:,.1f} s / {duckdb:,.1f} s: {pipeline / duckdb:.1f}x",
            )
            for number, (pipeline, duckdb) in enumerate(f.warm_pairs, start=1)
        ),
        *(
            [("ratio pipeline / DuckDB, warm pairs (median)", f"{median_pair_ratio(f):.1f}x")]
            if f.warm_pairs
            else []
        ),
        ("floor: bare copy of raw to Delta", _seconds(f.floor_copy_s, f.events)),
        ("pipeline warm / floor", _ratio(f.pipeline_warm_s, f.floor_copy_s)),
        ("class-data-sharing archive the driver mapped", f.class_archive or "n/a"),
        (
            "load average (1, 5, 15 min) before -> after",
            f"{', '.join(f'{v:.1f}' for v in f.load_before)} -> "
            f"{', '.join(f'{v:.1f}' for v in f.load_after)} on {cores} cores",
        ),
    ]  # fmt: skip
    for found in f.comparisons:
        verdict = "agree" if found.agree else (
            f"{found.differing} differ, {found.only_left} only in the peer, "
            f"{found.only_right} only in the pipeline"
        )  # fmt: skip
        counts = f"{found.right_rows:,} / {found.left_rows:,}"
        rows.append((f"{found.table}: rows pipeline / peer", f"{counts}: {verdict}"))
    lines = ["| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument(
        "--raw",
        type=Path,
        help="run on this existing raw folder (<raw>/date=YYYY-MM-DD/*.parquet) instead of "
        "generating one; for comparison only (it is read, never written)",
    )
    parser.add_argument("--conf", help="pipeline YAML (default: conf/pipeline.yaml)")
    parser.add_argument(
        "--no-great-expectations",
        action="store_true",
        help="skip the Great Expectations checkpoint in ingest",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the floor")
    parser.add_argument(
        "--warm-rounds",
        type=int,
        default=1,
        help="warm rounds of the pipeline; from 2, each is followed by a warm peer run and its "
        "ratio taken against that run (default 1: one warm round, the peer around it)",
    )
    args = parser.parse_args(argv)

    work = PROJECT_ROOT / "var" / "bench-vs-duckdb"
    shutil.rmtree(work, ignore_errors=True)
    raw_dir = args.raw.resolve() if args.raw else work / "raw"
    conf = dataclasses.replace(
        load_conf(args.conf),
        raw_dir=str(raw_dir),
        warehouse_dir=str(work / "warehouse"),
        quality_dir=str(work / "quality"),
        validate_with_great_expectations=not args.no_great_expectations,
    )
    figures = Figures(load_before=os.getloadavg())
    if args.raw:
        date_from, date_to = raw_days(raw_dir)
        figures.raw_label = f"raw folder {args.raw}"
    else:
        started = time.perf_counter()
        files = generate_raw(raw_dir, args.events)
        elapsed = time.perf_counter() - started
        print(f"generated {args.events:,} events in {files} files: {elapsed:.1f} s")
        date_from, date_to = DAY1, DAY1 + timedelta(days=DAYS - 1)
        figures.raw_label = "synthetic, bench/pipeline_throughput.py's generator"  # fmt: skip

    counting = peer.connect()
    figures.events = int(counting.execute(
        f"SELECT count(*) FROM read_parquet('{raw_dir}/date=*/*.parquet')"
    ).fetchall()[0][0])  # fmt: skip
    counting.close()
    # The peer first, while no JVM holds memory; its tables go to Parquet for the comparison.
    figures.peer_cold_s = time_peer(raw_dir, work / "peer_cold", "cold", figures.events)
    figures.peer_warm_s = time_peer(raw_dir, work / "peer", "warm", figures.events)

    from jobs.daily_metrics import run_daily_metrics
    from jobs.delta_io import read_table
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest
    from jobs.spark_session import build_spark_session
    from schemas.tables import BRONZE_BROKER_EVENTS

    started = time.perf_counter()
    spark = build_spark_session(conf, app_name="flowctl-bench-vs-duckdb")
    spark.range(1).count()
    print(f"Spark + Delta session start-up: {time.perf_counter() - started:.1f} s (excluded)")
    figures.class_archive = mapped_class_archive(spark)
    print(f"class-data-sharing archive: {figures.class_archive}")
    jobs = (
        ("ingest", lambda: run_ingest(spark, conf, date_from, date_to)),
        ("episodes", lambda: run_episodes(spark, conf, date_from, date_to)),
        ("daily_metrics", lambda: run_daily_metrics(spark, conf, date_from, date_to)),
    )
    figures.pipeline_cold_s = time_pipeline(spark, jobs, figures.events, "cold (fresh session)")
    figures.pipeline_warm_s = time_pipeline(spark, jobs, figures.events, "warm (same days again)")
    for number in range(1, args.warm_rounds + 1) if args.warm_rounds >= 2 else ():
        # Pair 1 is the warm round above; each later round runs first, then its peer run.
        pipeline_s = figures.pipeline_warm_s
        if number > 1:
            pipeline_s = time_pipeline(spark, jobs, figures.events, f"warm round {number}")
        folder = work / f"peer_pair_{number}"
        peer_s = time_peer(raw_dir, folder, f"pair {number}", figures.events)
        figures.warm_pairs.append((pipeline_s, peer_s))
    figures.bronze_rows = read_table(spark, conf, BRONZE_BROKER_EVENTS).count()
    if not args.no_floor:
        figures.floor_copy_s = time_floor(spark, raw_dir, work / "floor", figures.events)
    pipeline_paths = export_pipeline_tables(spark, conf, work / "pipeline_tables")
    spark.stop()
    figures.load_after = os.getloadavg()
    figures.peer_after_s = time_peer(raw_dir, work / "peer_after", "warm, after", figures.events)

    figures.comparisons = compare_with_peer(work / "peer", pipeline_paths)
    print("\npipeline vs. peer, row by row (floats to 1e-9 relative):")
    for found in figures.comparisons:
        state = "agree" if found.agree else "DIFFER"
        print(
            f"  {found.table}: pipeline {found.right_rows:,} rows, peer {found.left_rows:,}: "
            f"{state} ({found.differing} differ, {found.only_left} only in the peer, "
            f"{found.only_right} only in the pipeline)"
        )
        for example in found.examples:
            print(f"    {example}")
    print("\n" + markdown_table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The flowctl dashboard: ONE self-contained HTML page over the gold and silver Delta tables.

This module reads the warehouse: Spark sums the gold tables over runs and days (DESIGN.md §4:
"dashboards sum over runs") into one row per broker and entity, and takes the downsampled depth
timelines and the starvation and blocking intervals from silver (those transforms are
jobs/transforms/dashboard.py); it collects them into plain records. jobs/dashboard_figures.py turns
those records into Plotly figures and jobs/dashboard_page.py lays them out in the page, with
plotly.js embedded once: no CDN, no external file, so the page can be mailed or archived as is.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.cli import EXIT_USAGE, JobArgumentParser
from jobs.config import ConfError, PipelineConf, load_conf
from jobs.dashboard_figures import INTERVAL_MIN_SHARE
from jobs.dashboard_page import render_page
from jobs.delta_io import local_table_missing, rows_frame, table_path
from jobs.episodes import depth_timeline_path
from jobs.recommend import recommendations_path
from jobs.transforms.dashboard import (
    ENTITY_KEYS,
    all_entities,
    blocking_entities,
    blocking_intervals,
    drawn_byte_stops,
    drawn_stopped_episodes,
    drawn_timeline_points,
    latest_recommendations,
    link_entities,
    queue_entities,
    timeline_runs,
)
from schemas.model import TableSchema
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from schemas.timelines import QUEUE_DEPTH_TIMELINE

#: Starvation or blocking intervals of one entity closer than this share of the broker's span
#: are drawn as one bar: a flapping link has thousands, a chart shows a few hundred. The
#: narrowest bar drawn is as wide.
MERGE_GAP_SHARE = INTERVAL_MIN_SHARE


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date | datetime) else value


def merge_close_intervals(intervals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per entity (rows in (broker, kind, entity, start) order), intervals closer than
    :data:`MERGE_GAP_SHARE` of their broker's span merged into one: what a chart can show."""
    spans: dict[str, tuple[datetime, datetime]] = {}
    for row in intervals:
        first, last = spans.get(row["broker"], (row["start"], row["end"]))
        spans[row["broker"]] = (min(first, row["start"]), max(last, row["end"]))
    merged: list[dict[str, Any]] = []
    for row in intervals:
        first, last = spans[row["broker"]]
        gap = (last - first) * MERGE_GAP_SHARE
        previous = merged[-1] if merged else None
        same = previous is not None and all(previous[k] == row[k] for k in ENTITY_KEYS)
        if previous is not None and same and row["start"] - previous["end"] <= gap:
            previous["end"] = max(previous["end"], row["end"])
        else:
            merged.append(dict(row))
    return merged


#: The gold tables the page shows (it also reads silver: episodes for the bounds and intervals,
#: queue_depth_timeline for the timelines).
GOLD_TABLES: tuple[TableSchema, ...] = (
    QUEUE_FLOW_DAILY,
    LINK_STARVATION_DAILY,
    BLOCKING_DAILY,
    THRESHOLD_RECOMMENDATIONS,
)


def no_gold_tables(conf: PipelineConf) -> str | None:
    """Why the dashboard of a local warehouse would be empty (none of its gold tables is a Delta
    table: a mistyped ``--warehouse``, or no pipeline run yet), else None. Checked on the file
    system, before Spark starts; a URI warehouse is not checked (its tables are never known
    missing here)."""
    paths = [
        table_path(conf, QUEUE_FLOW_DAILY),
        table_path(conf, LINK_STARVATION_DAILY),
        table_path(conf, BLOCKING_DAILY),
        recommendations_path(conf),
    ]
    if not all(local_table_missing(path) for path in paths):
        return None
    gold = Path(paths[0]).parent
    names = ", ".join(schema.name for schema in GOLD_TABLES)
    return f"no gold tables under {gold} ({names}); run flowctl pipeline first"


def _read(spark: SparkSession, path: str, schema: TableSchema) -> DataFrame:
    """The table at ``path`` with the schema's columns; read only: a local table that does not
    exist reads as empty and is not created, and a column an older table lacks reads as null
    (the table is not altered)."""
    if local_table_missing(path):
        return rows_frame(spark, schema)
    table = spark.read.format("delta").load(path)
    missing = [f for f in schema.to_spark().fields if f.name not in table.columns]
    return table.withColumns({f.name: F.lit(None).cast(f.dataType) for f in missing})


def dashboard_data(spark: SparkSession, conf: PipelineConf) -> dict[str, Any]:
    """Everything the page shows, as lists of plain records."""

    def read(schema: TableSchema) -> DataFrame:
        return _read(spark, table_path(conf, schema), schema)

    queue_daily = read(QUEUE_FLOW_DAILY)
    queue_episodes = read(QUEUE_FLOW_EPISODES)
    entities = all_entities(
        queue_entities(queue_daily, queue_episodes),
        link_entities(read(LINK_STARVATION_DAILY)),
        blocking_entities(read(BLOCKING_DAILY)),
    )
    runs = timeline_runs(queue_daily)
    points = drawn_timeline_points(
        _read(spark, depth_timeline_path(conf), QUEUE_DEPTH_TIMELINE), runs
    )
    stopped = merge_close_intervals(_records(drawn_stopped_episodes(queue_episodes, runs)))
    intervals = blocking_intervals(read(LINK_STARVATION_EPISODES), read(BLOCKING_EPISODES))
    recommendations = _records(
        latest_recommendations(_read(spark, recommendations_path(conf), THRESHOLD_RECOMMENDATIONS))
    )
    return {
        "entities": _records(entities),
        "timelines": timelines_of(
            _records(points), stopped, _records(drawn_byte_stops(queue_episodes, runs))
        ),
        "intervals": merge_close_intervals(_records(intervals)),
        "recommendations": recommendations,
        "recommendations_as_of": _plain(recommendations[0]["date"]) if recommendations else None,
        "warehouse": conf.warehouse_dir,
    }


def timelines_of(
    points: list[dict[str, Any]],
    stopped: Sequence[dict[str, Any]] = (),
    byte_stops: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Timeline points (in (broker, queue, bucket_start) order) grouped per queue, each with
    its ``stopped`` stretches (start, end) from ``stopped`` (:func:`drawn_stopped_episodes`) and
    its ``byte_stop`` from ``byte_stops`` (:func:`drawn_byte_stops`; None when it has none)."""
    stops = {(r["broker"], r["queue"]): r["byte_stop"] for r in byte_stops}
    stretches: dict[tuple[str, str], list[tuple[datetime, datetime]]] = {}
    for interval in stopped:
        key = (interval["broker"], interval["entity"])
        stretches.setdefault(key, []).append((interval["start"], interval["end"]))
    timelines: list[dict[str, Any]] = []
    for point in points:
        if not timelines or (timelines[-1]["broker"], timelines[-1]["queue"]) != (
            point["broker"],
            point["queue"],
        ):
            timelines.append(
                {key: point[key] for key in ("broker", "queue", "run_id", "runs")}
                | {
                    "points": [],
                    "stopped": stretches.get((point["broker"], point["queue"]), []),
                    "byte_stop": stops.get((point["broker"], point["queue"])),
                }
            )
        timelines[-1]["points"].append(point)
    return timelines


def out_file_problem(out_path: str | Path) -> str | None:
    """Why the page cannot be written to ``out_path`` (a folder, or under a file), else None:
    checked before Spark starts, so that a typo does not cost the whole read."""
    out = Path(out_path)
    if out.is_dir():
        return f"--out {out}: is a folder; give the page's file name (e.g. {out / 'report.html'})"
    for folder in out.parents:
        if folder.exists():
            return None if folder.is_dir() else f"--out {out}: {folder} is a file, not a folder"
    return None


def render_dashboard(spark: SparkSession, conf: PipelineConf, out_path: str | Path) -> Path:
    """Write the dashboard page to ``out_path`` (parent folders created); returns its path."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(dashboard_data(spark, conf)), encoding="utf-8")
    return out.resolve()


def default_dashboard_path(warehouse_dir: str) -> Path:
    """report.html beside the warehouse it shows (var/ by default), not wherever the shell is."""
    if "://" in warehouse_dir:  # a remote warehouse: the working directory
        return Path("report.html")
    return Path(warehouse_dir).parent / "report.html"


def main(argv: list[str] | None = None) -> int:
    from jobs.spark_session import build_spark_session

    parser = JobArgumentParser(description="Render the flowctl dashboard (one HTML file)")
    parser.add_argument(
        "--conf", help="pipeline YAML (default: $FLOWCTL_CONF or conf/pipeline.yaml)"
    )
    parser.add_argument(
        "--out", help="where to write the page (default: report.html beside the warehouse)"
    )
    args = parser.parse_args(argv)
    try:
        conf = load_conf(args.conf)
    except ConfError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    out = args.out or str(default_dashboard_path(conf.warehouse_dir))
    refused = no_gold_tables(conf) or out_file_problem(out)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    try:
        spark = build_spark_session(conf, app_name="flowctl-dashboard")
    except ConfError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"dashboard: {render_dashboard(spark, conf, out)}")
    return 0


if __name__ == "__main__":
    from jobs.failures import run_job_process

    sys.exit(run_job_process("dashboard", main))

"""The flowctl dashboard: ONE self-contained HTML page over the gold and silver Delta tables.

This module reads the warehouse: Spark sums the gold tables over runs and days (DESIGN.md §4:
"dashboards sum over runs") into one row per broker and entity, and takes the downsampled depth
timelines and the starvation and blocking intervals from silver. jobs/dashboard_figures.py turns
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

RECOMMENDATION_COLUMNS = (
    "broker",
    "entity_kind",
    "entity",
    "verdict",
    "broker_kind",
    "knob",
    "current_value",
    "recommended_value",
    "unit",
    "rule",
    "current_flow_stop_count",
    "recommended_flow_stop_count",
    "current_flow_resume_count",
    "recommended_flow_resume_count",
    "current_flow_stop_size",
    "recommended_flow_stop_size",
    "current_flow_resume_size",
    "recommended_flow_resume_size",
    "current_credit",
    "recommended_credit",
    "episodes",
    "time_stopped_s",
    "starved_s",
    "max_overshoot_msgs",
    "max_overshoot_bytes",
    "rejected_msgs",
    "peak_depth_msgs",
    "producer_capacity_sum",
    "rationale",
    "sample_interval_ms",
)

#: Starvation or blocking intervals of one entity closer than this share of the broker's span
#: are drawn as one bar: a flapping link has thousands, a chart shows a few hundred. The
#: narrowest bar drawn is as wide.
MERGE_GAP_SHARE = INTERVAL_MIN_SHARE

ENTITY_KEYS = ("broker", "kind", "entity")


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date | datetime) else value


def _share(blocked: str, observed: str) -> Any:
    return F.when(F.col(observed) > 0, F.col(blocked) / F.col(observed))


def queue_entities(queue_daily: DataFrame, episodes: DataFrame) -> DataFrame:
    """Per (broker, queue), over runs and days: time stopped and its share, episodes, the worst
    overshoot (messages, and bytes: an Artemis address's past max-size-bytes), the worst day's
    p95 producer delay, messages enqueued and lost (rejected + dropped + evicted; null while
    none of the three is filled); from the silver episodes, the largest bound and the worst
    overshoot / bound of an episode."""
    # The ratio per episode (DESIGN §4: overshoot / bound), as silver holds it: the worst of them.
    bounds = episodes.groupBy("broker", "queue").agg(
        F.max("overshoot_bound_msgs").alias("overshoot_bound_msgs"),
        F.max("overshoot_ratio").alias("max_overshoot_ratio"),
    )
    lost = F.when(
        F.coalesce("rejected", "dropped", "evicted").isNotNull(),
        F.coalesce(F.col("rejected"), F.lit(0))
        + F.coalesce(F.col("dropped"), F.lit(0))
        + F.coalesce(F.col("evicted"), F.lit(0)),
    )
    return (
        queue_daily.groupBy("broker", "queue")
        .agg(
            F.sum("time_stopped_s").alias("blocked_s"),
            F.sum("observed_s").alias("observed_s"),
            F.sum("episodes").alias("episodes"),
            F.max("max_overshoot_msgs").alias("max_overshoot_msgs"),
            F.max("max_overshoot_bytes").alias("max_overshoot_bytes"),
            F.max("completion_p95_us").alias("completion_p95_us"),
            F.sum("enqueued").alias("enqueued"),
            F.sum(lost).alias("lost"),
            F.max("max_depth_msgs").alias("max_depth_msgs"),
            F.max("sample_interval_ms").alias("sample_interval_ms"),
        )
        .join(bounds, ["broker", "queue"], "left")
        .withColumnRenamed("queue", "entity")
        .withColumn("kind", F.lit("queue"))
        .withColumn("share", _share("blocked_s", "observed_s"))
    )


def link_entities(link_daily: DataFrame) -> DataFrame:
    """Per (broker, link), over runs and days: starved seconds, starvations, share of the
    attached time."""
    return (
        link_daily.groupBy("broker", "link")
        .agg(
            F.max("link_role").alias("detail"),
            F.sum("starved_s").alias("blocked_s"),
            F.sum("attached_s").alias("observed_s"),
            F.sum("episodes").alias("episodes"),
        )
        .withColumnRenamed("link", "entity")
        .withColumn("kind", F.lit("link"))
        .withColumn("share", _share("blocked_s", "observed_s"))
    )


def blocking_entities(blocking_daily: DataFrame) -> DataFrame:
    """Per (broker, kind, entity), over runs and days: blocked seconds, episodes, share."""
    return (
        blocking_daily.groupBy(*ENTITY_KEYS)
        .agg(
            F.max("protocol").alias("detail"),
            F.sum("blocked_s").alias("blocked_s"),
            F.sum("observed_s").alias("observed_s"),
            F.sum("episodes").alias("episodes"),
            F.max("sample_interval_ms").alias("sample_interval_ms"),
        )
        .withColumn("share", _share("blocked_s", "observed_s"))
    )


def all_entities(queues: DataFrame, links: DataFrame, blockings: DataFrame) -> DataFrame:
    """The three kinds of entity rows in one frame, worst first (a column one kind lacks is
    null on its rows)."""
    return (
        queues.unionByName(links, allowMissingColumns=True)
        .unionByName(blockings, allowMissingColumns=True)
        .orderBy(F.desc("blocked_s"), *ENTITY_KEYS)
    )


def timeline_runs(queue_daily: DataFrame) -> DataFrame:
    """Per (broker, queue): the run whose timeline is drawn, the one stopped longest (ties: the
    last by name), and how many runs the queue has."""
    per_run = queue_daily.groupBy("broker", "queue", "run_id").agg(
        F.sum("time_stopped_s").alias("_stopped_s")
    )
    return per_run.groupBy("broker", "queue").agg(
        F.max_by("run_id", F.struct("_stopped_s", "run_id")).alias("run_id"),
        F.count(F.lit(1)).alias("runs"),
    )


def drawn_timeline_points(timeline: DataFrame, runs: DataFrame) -> DataFrame:
    """The timeline buckets of each queue's drawn run (:func:`timeline_runs`), in time order."""
    return timeline.join(runs, ["broker", "queue", "run_id"]).orderBy(
        "broker", "queue", "bucket_start"
    )


def of_drawn_runs(episodes: DataFrame, runs: DataFrame) -> DataFrame:
    """The queue episodes of each queue's drawn run (:func:`timeline_runs`)."""
    return episodes.join(runs.select("broker", "queue", "run_id"), ["broker", "queue", "run_id"])


def drawn_stopped_episodes(episodes: DataFrame, runs: DataFrame) -> DataFrame:
    """The stopped episodes of each queue's drawn run as (broker, kind, entity, start, end), an
    open one ending at its run's watermark: what its timeline shades. The buckets only say a
    queue was stopped at some moment of one, so shading them drew a queue stopped 38 % of its
    run as stopped 83 % (an audit)."""
    return (
        of_drawn_runs(episodes, runs)
        .select(
            "broker",
            F.lit("queue").alias("kind"),
            F.col("queue").alias("entity"),
            F.col("start_ts").alias("start"),
            F.coalesce("end_ts", "run_watermark_ts").alias("end"),
        )
        .orderBy(*ENTITY_KEYS, "start")
    )


def drawn_byte_stops(episodes: DataFrame, runs: DataFrame) -> DataFrame:
    """Per (broker, queue) whose drawn run's episodes stop on bytes alone (no count threshold):
    the largest stop size among them, ``byte_stop``. An Artemis address blocks at its
    max-size-bytes, which its flow events log as their stop size and its other events as 0
    (off), so its timeline's buckets, each taking its last event's, show it only where a block or
    an unblock ended one: its page was drawn in messages with no limit (a review)."""
    count_stop = F.coalesce(F.col("flow_stop_count"), F.lit(0))
    return (
        of_drawn_runs(episodes, runs)
        .groupBy("broker", "queue")
        .agg(F.max(count_stop).alias("_count_stop"), F.max("flow_stop_size").alias("byte_stop"))
        .where((F.col("_count_stop") == 0) & (F.col("byte_stop") > 0))
        .select("broker", "queue", "byte_stop")
    )


def blocking_intervals(starvations: DataFrame, blockings: DataFrame) -> DataFrame:
    """Every starvation and blocking episode as (broker, kind, entity, start, end), an open one
    ending at its run's watermark."""
    end = F.coalesce("end_ts", "run_watermark_ts").alias("end")
    return (
        starvations.select(
            "broker", F.lit("link").alias("kind"), F.col("link").alias("entity"),
            F.col("start_ts").alias("start"), end,
        )
        .unionByName(
            blockings.select(*ENTITY_KEYS, F.col("start_ts").alias("start"), end)
        )
        .orderBy(*ENTITY_KEYS, "start")
    )  # fmt: skip


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


def latest_recommendations(recommendations: DataFrame) -> DataFrame:
    """The rows of the latest as-of day in the table, the riskiest verdicts first."""
    latest = recommendations.agg(F.max("date").alias("latest"))
    return (
        recommendations.join(latest, F.col("date") == F.col("latest"))
        .select("date", *RECOMMENDATION_COLUMNS)
        .orderBy("broker", "entity_kind", "entity")
    )


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

"""The dashboard's rows, from the gold and silver tables jobs/dashboard.py reads.

- Per entity, over runs and days (DESIGN.md §4: "dashboards sum over runs"): a queue's time
  stopped, episodes, worst overshoot (and, from silver, its bound and worst overshoot / bound),
  p95 producer delay and messages enqueued and lost (:func:`queue_entities`); a link's starved
  time (:func:`link_entities`); every other blocking entity's blocked time
  (:func:`blocking_entities`); each with its share of the observed (or attached) time, in one
  frame worst first (:func:`all_entities`).
- Per queue, the run whose depth timeline is drawn (:func:`timeline_runs`: the one stopped
  longest), its timeline buckets, its stopped episodes and the stop size of episodes that stop on
  bytes alone.
- Every starvation and blocking episode as an interval, an open one ending at its run's
  watermark (:func:`blocking_intervals`).
- The threshold recommendations of the latest as-of day (:func:`latest_recommendations`).

Every function is DataFrame -> DataFrame without I/O; the job collects the frames into records.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

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

ENTITY_KEYS = ("broker", "kind", "entity")


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


def latest_recommendations(recommendations: DataFrame) -> DataFrame:
    """The rows of the latest as-of day in the table, by broker and entity (the page lists the
    at-risk ones again in a table of their own, first: jobs/dashboard_page.py)."""
    latest = recommendations.agg(F.max("date").alias("latest"))
    return (
        recommendations.join(latest, F.col("date") == F.col("latest"))
        .select("date", *RECOMMENDATION_COLUMNS)
        .orderBy("broker", "entity_kind", "entity")
    )

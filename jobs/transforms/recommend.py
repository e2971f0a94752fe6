"""Gold ``threshold_recommendations`` rows (DESIGN.md §4 "recommendation") as of a day: the
evidence of the policy's window, each entity's recommendation, the schema's columns in order.

The pieces, each DataFrame -> DataFrame without I/O:
- recommend_evidence.py: per-queue and per-consumer-link evidence from bronze, silver and gold;
- recommend_queues.py (with queue_thresholds.py): Qpid flow thresholds, ``QUEUE_RULES``;
- recommend_links.py: consumer-link credit (Kung & Morris), ``LINK_RULES``;
- verdict_rules.py: how a rule table becomes the verdict and rationale columns.
The policy (conf/recommend.yaml) is read and checked in jobs/recommend_policy.py.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.recommend_evidence import (
    consumer_link_evidence,
    queue_daily_evidence,
    queue_episode_evidence,
    queue_producers,
    queue_settings,
)
from jobs.transforms.recommend_links import recommend_consumer_links
from jobs.transforms.recommend_queues import recommend_queues
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS


def _between(column: str, first: date, last: date) -> Column:
    return F.col(column).between(F.lit(first), F.lit(last))


def threshold_recommendations(
    events: DataFrame,
    queue_episodes: DataFrame,
    queue_daily: DataFrame,
    link_starvations: DataFrame,
    link_daily: DataFrame,
    policy: RecommendPolicy,
    as_of: date,
) -> DataFrame:
    """Rows of ``threshold_recommendations`` as of ``as_of``, from the evidence window's rows.

    Each input may hold more days than the window (bronze ``events`` by ``date``, silver rows by
    ``start_date``, gold rows by ``date``); only the window's days are used.
    """
    first = policy.window_from(as_of)
    window_events = events.where(_between("date", first, as_of))
    window_episodes = queue_episodes.where(_between("start_date", first, as_of))
    queues = recommend_queues(
        queue_settings(window_events),
        queue_producers(window_events),
        queue_episode_evidence(window_episodes, policy),
        queue_daily_evidence(queue_daily.where(_between("date", first, as_of))),
        policy,
    )
    links = recommend_consumer_links(
        consumer_link_evidence(
            window_events,
            link_daily.where(_between("date", first, as_of)),
            link_starvations.where(_between("start_date", first, as_of)),
        ),
        policy,
    )
    rows = (
        queues.unionByName(links, allowMissingColumns=True)
        .withColumn("date", F.lit(as_of))
        .withColumn("window_from", F.lit(first))
        .withColumn("safety_margin", F.lit(policy.safety_margin))
        .withColumn("min_dwell_s", F.lit(policy.min_dwell_s))
    )
    spark_schema = THRESHOLD_RECOMMENDATIONS.to_spark()
    return rows.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in spark_schema.fields))

"""Gold ``threshold_recommendations`` rows (DESIGN.md §4 "recommendation") as of a day: the
evidence of the policy's window, each entity's recommendation in its own broker's knob, the
schema's columns in order.

The pieces, each DataFrame -> DataFrame without I/O:
- recommend_brokers.py: the broker kind of each queue and link (the one place it is told);
- recommend_evidence.py: per-queue and per-consumer-link evidence from bronze, silver and gold;
- recommend_queues.py (with queue_thresholds.py): Qpid flow thresholds, ``QUEUE_RULES``;
- recommend_artemis.py: Artemis addresses (max-size-bytes, reject threshold, producer windows),
  ``ARTEMIS_ADDRESS_RULES``, and the slow-consumer rule of consumerWindowSize;
- recommend_rabbitmq.py: RabbitMQ queues' x-max-length, ``RABBITMQ_QUEUE_RULES``;
- recommend_links.py: consumers (link credit, prefetch, consumerWindowSize; Kung & Morris),
  ``LINK_RULES`` and ``ARTEMIS_CONSUMER_RULES``;
- verdict_rules.py: how a rule table becomes the verdict, rationale, knob and value columns.
The policy (conf/recommend.yaml) is read and checked in jobs/recommend_policy.py.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.recommend_artemis import (
    address_evidence,
    address_producers,
    artemis_consumer_evidence,
    recommend_addresses,
)
from jobs.transforms.recommend_brokers import link_broker_kinds, queue_broker_kinds
from jobs.transforms.recommend_evidence import (
    LINK,
    QUEUE,
    consumer_link_evidence,
    queue_daily_evidence,
    queue_episode_evidence,
    queue_producers,
    queue_settings,
)
from jobs.transforms.recommend_links import recommend_consumer_links
from jobs.transforms.recommend_queues import recommend_queues
from jobs.transforms.recommend_rabbitmq import (
    alarm_spans,
    connection_blocking,
    queue_growth,
    recommend_rabbitmq_queues,
)
from jobs.transforms.recommend_rollup import day_rollup
from schemas.broker_events import BROKER_QPID, BROKER_RABBITMQ
from schemas.recommendations import (
    ENTITY_ADDRESS,
    ENTITY_QUEUE,
    THRESHOLD_RECOMMENDATIONS,
)
from schemas.tables import BLOCKING_EPISODES


def _between(column: str, first: date, last: date) -> Column:
    return F.col(column).between(F.lit(first), F.lit(last))


def sampled_entities(rollup: DataFrame) -> DataFrame:
    """Per (broker, entity) of a queue or an address, from the window's day rollup: the longest
    sample interval of its collector samples (``queue_declared`` rows with
    ``detail.sample_interval_ms``; an Artemis collector's samples name the address in
    ``detail.address``). Entities without samples are absent."""
    return (
        rollup.where(F.col("sample_interval_ms").isNotNull())
        .groupBy("broker", F.coalesce("address", "queue").alias("entity"))
        .agg(F.max("sample_interval_ms").alias("sample_interval_ms"))
    )


def with_sample_marks(rows: DataFrame, sampled: DataFrame) -> DataFrame:
    """``rows`` with ``sample_interval_ms`` set on a queue's or address's row whose evidence
    holds samples (DESIGN §6: approximate, never silently exact). A consumer's evidence is its
    link's frames, never sampled."""
    of_queue = F.col("entity_kind").isin(ENTITY_QUEUE, ENTITY_ADDRESS)
    marks = sampled.withColumnRenamed("sample_interval_ms", "_sampled_ms")
    return (
        rows.join(marks, ["broker", "entity"], "left")
        .withColumn("sample_interval_ms", F.when(of_queue, F.col("_sampled_ms")))
        .drop("_sampled_ms")
    )


def threshold_recommendations(
    events: DataFrame,
    queue_episodes: DataFrame,
    queue_daily: DataFrame,
    link_starvations: DataFrame,
    link_daily: DataFrame,
    policy: RecommendPolicy,
    as_of: date,
    blocking_episodes: DataFrame | None = None,
    rollup: DataFrame | None = None,
) -> DataFrame:
    """Rows of ``threshold_recommendations`` as of ``as_of``, from the evidence window's rows.

    Each input may hold more days than the window (bronze ``events`` by ``date``, silver rows by
    ``start_date``, gold rows by ``date``); only the window's days are used. Without silver
    ``blocking_episodes`` no queue is known to have blocked a connection. ``rollup`` is the day
    rollup of those events (recommend_rollup.py, kept day by day by jobs/recommend_day_rollup.py);
    without it, it is computed from ``events``.
    """
    first = policy.window_from(as_of)
    window_events = events.where(_between("date", first, as_of))
    if rollup is None:
        window_rollup = day_rollup(window_events)
    else:
        window_rollup = rollup.where(_between("date", first, as_of))
    window_episodes = queue_episodes.where(_between("start_date", first, as_of))
    if blocking_episodes is None:
        blocking_episodes = events.sparkSession.createDataFrame([], BLOCKING_EPISODES.to_spark())
    queue_kinds = queue_broker_kinds(window_rollup)
    settings = queue_settings(window_rollup).join(
        queue_kinds.select(*QUEUE, "broker_kind"), list(QUEUE), "left"
    )
    daily = queue_daily_evidence(queue_daily.where(_between("date", first, as_of)))

    def of_kind(kind: str) -> DataFrame:
        return settings.where(F.col("broker_kind") == kind).drop("broker_kind")

    qpid_queues = recommend_queues(
        of_kind(BROKER_QPID),
        queue_producers(window_rollup),
        queue_episode_evidence(window_episodes, policy),
        daily,
        policy,
    )
    rabbitmq_queues = recommend_rabbitmq_queues(
        of_kind(BROKER_RABBITMQ),
        queue_growth(window_rollup, alarm_spans(blocking_episodes)),
        connection_blocking(blocking_episodes.where(_between("start_date", first, as_of))),
        daily,
        policy,
    )
    addresses = recommend_addresses(
        address_evidence(window_rollup), address_producers(window_rollup), daily, policy
    )
    link_kinds = link_broker_kinds(window_rollup, queue_kinds)
    links = recommend_consumer_links(
        consumer_link_evidence(
            window_events,
            link_daily.where(_between("date", first, as_of)),
            link_starvations.where(_between("start_date", first, as_of)),
        )
        .join(link_kinds, list(LINK), "left")
        .join(artemis_consumer_evidence(window_events), list(LINK), "left"),
        policy,
    )
    rows = with_sample_marks(
        qpid_queues.unionByName(rabbitmq_queues, allowMissingColumns=True)
        .unionByName(addresses, allowMissingColumns=True)
        .unionByName(links, allowMissingColumns=True),
        sampled_entities(window_rollup),
    )
    rows = (
        rows.withColumn("date", F.lit(as_of))
        .withColumn("window_from", F.lit(first))
        .withColumn("safety_margin", F.lit(policy.safety_margin))
        .withColumn("min_dwell_s", F.lit(policy.min_dwell_s))
    )
    spark_schema = THRESHOLD_RECOMMENDATIONS.to_spark()
    return rows.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in spark_schema.fields))

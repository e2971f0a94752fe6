"""Recommend's day rollup of bronze: the facts its queue, address and link evidence read,
aggregated per (date, broker, run_id, queue, link, address, publisher_address) in one pass over
the events (``address``: an Artemis address's, ``detail.address``; ``publisher_address``: the
address a client-recorded AMQP 1.0 publisher sends to).

Every fact merges exactly over days (the look-back window is a union of days, and ``date`` is a
key): maxima, minima, counts, and the latest value by an order (``<fact>`` with its order's
fields ``<fact>__ts`` / ``<fact>__seq``, merged by :func:`latest`). So the evidence of a window is
the merge of its days' rollups, whether they were computed from the window's bronze at once or
kept day by day (silver ``recommend_day_rollup``, jobs/recommend_day_rollup.py): a night then
reads the new day's bronze for these facts, not the whole window's.

The rules of what an event says live here; the merges (which rows count, how they add up) live
with the evidence that reads them (recommend_brokers.py, recommend_evidence.py,
recommend_rabbitmq.py, recommend_artemis.py, recommend.py).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.transforms.detail import detail_field, detail_whole_number
from jobs.transforms.episodes import queue_sample_interval
from jobs.transforms.message_log import client_recorded, messages_recorded
from jobs.transforms.recommend_brokers import (
    evidence_flags,
    qpid_thresholds_on,
    rabbitmq_for_certain,
)
from jobs.transforms.timeutil import micros
from schemas.broker_events import AMQP_1_0, ARTEMIS_FQQN_SEPARATOR, REFUSAL_OUTCOMES
from schemas.tables import QUEUE_SETTINGS

#: The rollup's grain, ``date`` first.
ROLLUP_KEYS = ("date", "broker", "run_id", "queue", "link", "address", "publisher_address")

#: What the kept rollup was computed by (jobs/recommend_day_rollup.py digests it with each day's
#: files): raise it when what a fact means changes, so that no day kept by the old rules is read.
ROLLUP_RULES_VERSION = 2

BY_TS_SEQ = ("ts", "seq")
BY_SEQ = ("seq",)


def _is(event_type: str) -> Column:
    return F.col("event_type") == event_type


def _latest_parts(name: str, value: Column, where: Column, order: tuple[str, ...]) -> list[Column]:
    """Aggregates: ``value`` at the group's latest event (by ``order``) where ``where`` holds, and
    that event's order fields (``<name>__<field>``, null when no event holds)."""
    at = F.when(where, F.struct(*order))
    return [
        F.max_by(value, at).alias(name),
        *(F.max(at)[field].alias(f"{name}__{field}") for field in order),
    ]


def latest(name: str, order: tuple[str, ...] = BY_TS_SEQ) -> Column:
    """Aggregate over rollup rows: fact ``name`` at the latest of their events that held it."""
    last = F.col(f"{name}__{order[-1]}")
    at = F.when(last.isNotNull(), F.struct(*(F.col(f"{name}__{field}") for field in order)))
    return F.max_by(name, at).alias(name)


def client_publisher_address() -> Column:
    """The address a client-recorded AMQP 1.0 publisher's messages count on (null on any other
    event): the queue it names, or the address of a fully qualified queue name (ADDRESS::QUEUE,
    whose messages count on ADDRESS's size) in ``detail.amqp_address``."""
    publisher = (
        (F.col("link_role") == "publisher")
        & (F.col("protocol") == AMQP_1_0)
        & F.col("queue").isNotNull()
        & F.col("link").isNotNull()
        & client_recorded()
    )
    amqp_address = detail_field("amqp_address")
    fqqn_address = F.when(
        amqp_address.contains(ARTEMIS_FQQN_SEPARATOR),
        F.substring_index(amqp_address, ARTEMIS_FQQN_SEPARATOR, 1),
    )
    return F.when(publisher, F.coalesce(fqqn_address, F.col("queue")))


def day_rollup(events: DataFrame) -> DataFrame:
    """Per (date, broker, run_id, queue, link, address, publisher_address) of bronze
    ``events``: the facts below, one pass."""
    enqueue_us = F.when(_is("enqueue"), micros("ts"))
    outcome = detail_field("outcome")
    address_size = detail_whole_number("address_size")
    max_size_bytes = detail_whole_number("max_size_bytes")
    grouped = events.withColumns(
        {"address": detail_field("address"), "publisher_address": client_publisher_address()}
    ).groupBy(*ROLLUP_KEYS)
    return grouped.agg(
        # What the events say of the broker they live on (recommend_brokers.py).
        *evidence_flags(),
        F.max(qpid_thresholds_on()).alias("qpid_thresholds"),
        F.max(F.coalesce(rabbitmq_for_certain(), F.lit(False))).alias("rabbitmq_for_certain"),
        F.max(F.col("credit").isNotNull()).alias("carries_credit"),
        *_latest_parts("protocol", F.col("protocol"), F.col("protocol").isNotNull(), BY_SEQ),
        F.max(F.when(F.col("queue").isNotNull(), F.col("seq"))).alias("queue__seq"),
        # The queue's settings and limits (recommend_evidence.queue_settings).
        *(
            part
            for column in QUEUE_SETTINGS
            for part in _latest_parts(column, F.col(column), F.col(column).isNotNull(), BY_TS_SEQ)
        ),
        *_latest_parts(
            "limit_policy",
            detail_field("policy"),
            _is("queue_declared") & F.col("detail").isNotNull(),
            BY_TS_SEQ,
        ),
        F.max(_is("ring_evicted")).alias("evicts"),
        # Whether any event is the broker's own, its messages logged (message_log.py).
        messages_recorded().alias("messages_recorded"),
        F.count(F.when(_is("message_rejected"), 1)).alias("rejections"),
        # Enqueues: producers, their windows and the intake (queue_producers, queue_growth).
        F.count(F.when(_is("enqueue"), 1)).alias("enqueues"),
        F.count(F.when(_is("dequeue"), 1)).alias("dequeues"),
        F.max(F.when(_is("enqueue"), F.col("size_bytes"))).alias("max_enqueue_bytes"),
        F.max(F.when(_is("enqueue"), F.col("capacity"))).alias("enqueue_capacity"),
        F.min(enqueue_us).alias("first_enqueue_us"),
        F.max(enqueue_us).alias("last_enqueue_us"),
        *_latest_parts(
            "depth_msgs", F.col("depth_msgs"), F.col("depth_msgs").isNotNull(), BY_TS_SEQ
        ),
        # The latest event of the group, whatever it logs (an address's queue).
        *_latest_parts("last_queue", F.col("queue"), F.lit(True), BY_TS_SEQ),
        # Artemis addresses (recommend_artemis.address_evidence, address_producers).
        *_latest_parts(
            "address_policy", detail_field("policy"), detail_field("policy").isNotNull(), BY_TS_SEQ
        ),
        *_latest_parts("max_size_bytes", max_size_bytes, max_size_bytes.isNotNull(), BY_TS_SEQ),
        # As of the latest event that logs the address's settings (max_size_bytes' order).
        F.max_by(
            detail_whole_number("reject_threshold"),
            F.when(max_size_bytes.isNotNull(), F.struct(*BY_TS_SEQ)),
        ).alias("reject_threshold"),
        F.max(address_size).alias("peak_address_bytes"),
        *(
            F.count(F.when(_is("message_rejected") & (outcome == kind), 1)).alias(f"{kind}_msgs")
            for kind in REFUSAL_OUTCOMES
        ),
        F.count(F.when(_is("enqueue") & (detail_field("paged") == "true"), 1)).alias("paged_msgs"),
        F.count(F.when(_is("flow_stopped"), 1)).alias("flow_stops"),
        # Without enqueues (a collector's samples), the most bytes a message took in a sample.
        F.max(F.when(F.col("depth_msgs") > 0, F.ceil(address_size / F.col("depth_msgs")))).alias(
            "max_sampled_message_bytes"
        ),
        F.min(F.when(_is("enqueue"), address_size - F.col("size_bytes"))).alias(
            "min_message_overhead_bytes"
        ),
        F.max(F.when(_is("enqueue"), detail_whole_number("producer.window"))).alias(
            "producer_window"
        ),
        F.max(F.when(_is("enqueue"), detail_whole_number("producer.credit"))).alias(
            "producer_credit"
        ),
        F.max("credit").alias("max_credit"),
        # A collector's queue samples (recommend.sampled_entities).
        F.max(queue_sample_interval()).alias("sample_interval_ms"),
    )

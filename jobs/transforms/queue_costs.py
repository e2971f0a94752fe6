"""What flow control costs the producers, per queue and day (DESIGN.md §4): messages enqueued,
dequeued, rejected, dropped, paged and evicted, and the completion delay of held transfers.

The counts are events of the queue in the day, sorted by one rule table (``MESSAGE_COUNTS``):

- ``rejected`` is a ``message_rejected`` the producer hears of (Qpid's reject policy, Artemis's
  FAIL and its AMQP reject threshold), ``dropped`` one it does not (Artemis's DROP policy,
  ``detail.outcome == 'dropped'``), so the two never overlap;
- ``paged`` counts the enqueues an Artemis PAGE address wrote to its page store
  (``detail.paged``); they are enqueued messages as well;
- a day whose events of the queue are all a collector's or a client's has no counts (null): they
  log no message (jobs/transforms/message_log.py).

A ``transfer_completed`` names its producer (``link``) and message but not the queue: its delay
is the queue's when the queue enqueued that message (same run, broker, producer and
``message_id``: each broker numbers its own messages, and a run may log several brokers). A
message routed to several queues counts on each of them, since the producer waited for all of
them (DESIGN §2: a transfer completes when no destination holds it). Only held transfers
(``latency_us > 0``) count: an immediate completion logged with ``log_immediate_completions``
cost nothing. A completion counts on the day it happened.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.transforms.daily import in_days
from jobs.transforms.detail import detail_field
from jobs.transforms.episodes import QUEUE_KEYS
from jobs.transforms.message_log import recorded_count
from schemas.broker_events import OUTCOME_DROPPED


def _is(event_type: str) -> Column:
    return F.col("event_type") == F.lit(event_type)


def _outcome_is(outcome: str) -> Column:
    return F.coalesce(detail_field("outcome") == F.lit(outcome), F.lit(False))


def _paged() -> Column:
    return F.coalesce(detail_field("paged") == F.lit("true"), F.lit(False))


#: (column, the events it counts): one rule per count, in the order of the gold table. Rules are
#: functions because a Column needs a running Spark session.
MESSAGE_COUNTS: tuple[tuple[str, Callable[[], Column]], ...] = (
    ("enqueued", lambda: _is("enqueue")),
    ("dequeued", lambda: _is("dequeue")),
    ("rejected", lambda: _is("message_rejected") & ~_outcome_is(OUTCOME_DROPPED)),
    ("dropped", lambda: _is("message_rejected") & _outcome_is(OUTCOME_DROPPED)),
    ("paged", lambda: _is("enqueue") & _paged()),
    ("evicted", lambda: _is("ring_evicted")),
)

#: Percentiles of the completion delay: (column, fraction), exact with linear interpolation.
COMPLETION_PERCENTILES: tuple[tuple[str, float], ...] = (
    ("completion_p50_us", 0.5),
    ("completion_p95_us", 0.95),
    ("completion_p99_us", 0.99),
)

QUEUE_COST_COLUMNS: tuple[str, ...] = (
    *(name for name, _ in MESSAGE_COUNTS),
    "held_completions",
    *(name for name, _ in COMPLETION_PERCENTILES),
    "completion_max_us",
)

#: Columns of bronze the costs read, beside ``run_id, broker, date, event_type, queue, link``.
QUEUE_COST_INPUT_COLUMNS = ("message_id", "latency_us", "detail")


def message_counts(events: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Per queue and day in range with an event: :data:`MESSAGE_COUNTS`, null (unknown) on a
    day whose events are all a collector's or a client's (jobs/transforms/message_log.py), and
    ``_counted`` true."""
    return (
        events.where(in_days("date", date_from, date_to) & F.col("queue").isNotNull())
        .groupBy(*QUEUE_KEYS, "date")
        .agg(
            *(recorded_count(rule()).alias(name) for name, rule in MESSAGE_COUNTS),
            F.lit(True).alias("_counted"),
        )
    )


def held_completions(events: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Per queue and day in range: the held transfers completed that day whose message the queue
    enqueued, with their delay's percentiles and maximum.

    ``events`` must hold the enqueues of every earlier day of the runs (a transfer held over
    midnight completes the next day).

    A message is its run, broker, producer ``link`` and ``message_id`` (a run logging two
    brokers whose producers have the same name has two messages of each id: without the broker,
    an audit found one broker's completion counted on the other's queue too). In a log that
    names no producer (a hand-written one: the engine always names it), a completion without a
    link matches the enqueue without one, as the oracle does (tests/metrics_oracle.py): an
    equi-join on ``link`` dropped those held transfers.
    """
    message = ["run_id", "broker", "link", "message_id"]
    completed = (
        events.where(
            _is("transfer_completed")
            & (F.col("latency_us") > 0)
            & in_days("date", date_from, date_to)
        )
        .select(*message, "date", "latency_us")
        .alias("completed")
    )
    enqueued_on = (
        events.where(_is("enqueue") & F.col("queue").isNotNull() & (F.col("date") <= date_to))
        .select(*message, "queue")
        .distinct()
        .alias("enqueued")
    )
    same_message = [
        F.col("completed.run_id") == F.col("enqueued.run_id"),
        F.col("completed.broker") == F.col("enqueued.broker"),
        F.col("completed.link").eqNullSafe(F.col("enqueued.link")),
        F.col("completed.message_id") == F.col("enqueued.message_id"),  # none without an id
    ]
    latency = F.col("latency_us")
    fractions = [fraction for _, fraction in COMPLETION_PERCENTILES]
    return (
        completed.join(enqueued_on, same_message)
        .select(*(F.col(f"enqueued.{key}") for key in QUEUE_KEYS), "date", "latency_us")
        .groupBy(*QUEUE_KEYS, "date")
        .agg(
            F.count(F.lit(1)).alias("held_completions"),
            F.percentile(latency, fractions).alias("_percentiles"),
            F.max(latency).alias("completion_max_us"),
        )
        .select(
            *QUEUE_KEYS,
            "date",
            "held_completions",
            *(
                F.col("_percentiles")[index].alias(name)
                for index, (name, _) in enumerate(COMPLETION_PERCENTILES)
            ),
            "completion_max_us",
        )
    )


def with_queue_costs(
    queue_daily: DataFrame, events: DataFrame, date_from: date, date_to: date
) -> DataFrame:
    """``queue_daily`` (rows of ``queue_flow_daily``) with :data:`QUEUE_COST_COLUMNS`: counts 0
    and delays null on a day without such events; counts null where the log does not record
    the queue's messages (:func:`message_counts`)."""
    keys = [*QUEUE_KEYS, "date"]
    costs = message_counts(events, date_from, date_to).join(
        held_completions(events, date_from, date_to), keys, "full_outer"
    )
    # 0 on a day without events of the queue; an unknown count stays unknown.
    counts = {
        name: F.when(F.col("_counted").isNull(), F.lit(0)).otherwise(F.col(name)).alias(name)
        for name, _ in MESSAGE_COUNTS
    }
    counts["held_completions"] = F.coalesce("held_completions", F.lit(0)).alias("held_completions")
    return queue_daily.join(costs, keys, "left").select(
        *queue_daily.columns, *(counts.get(name, F.col(name)) for name in QUEUE_COST_COLUMNS)
    )

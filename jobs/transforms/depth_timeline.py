"""Silver ``queue_depth_timeline`` (schemas/timelines.py): a queue's depth against its thresholds
and its flow state, downsampled to at most a few hundred time buckets per run.

The dashboard's per-queue timeline reads this table instead of the event log: a run logs an event
per enqueue and dequeue, far more points than a chart can show or a page should carry.

:func:`depth_timeline` is the rule: a window over each queue's events in ``seq`` order. The
episodes job computes the same rows from per-bucket aggregates (:func:`bucket_summaries`,
:func:`timeline_of_buckets`), which sort no event, and uses the rule only for the queues whose
buckets are not in seq order (:func:`seq_disordered_queues`, :func:`timeline_of_queues`); the
two put together are :func:`timeline_from_summaries`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.episodes import QUEUE_KEYS, THRESHOLD_COLUMNS
from jobs.transforms.timeutil import micros, utc_date
from schemas.model import US_PER_DAY, US_PER_SECOND
from schemas.timelines import MAX_BUCKETS, MIN_BUCKET_US

#: Round bucket widths in microseconds, 1, 2 and 5 x 10^k from 1 ms to 200 s, then 5 minutes:
#: each divides a day, so buckets counted from the epoch never straddle midnight and a day's
#: buckets can be recomputed from that day's events alone (jobs/episodes.py). 5 minutes is the
#: first that cuts a day into at most :data:`MAX_BUCKETS` (288).
ROUND_WIDTHS_US = (
    *(m * 10**k for k in range(3, 9) for m in (1, 2, 5) if m * 10**k <= 200 * US_PER_SECOND),
    300 * US_PER_SECOND,
)

#: The columns whose latest non-null value, by seq, is the queue's state after an event.
CARRIED_COLUMNS = ("depth_msgs", "depth_bytes", *THRESHOLD_COLUMNS)


def bucket_width_us(span_us: Column) -> Column:
    """The smallest round width (:data:`ROUND_WIDTHS_US`, at least :data:`MIN_BUCKET_US`) that
    cuts ``span_us``, or a day if longer, into at most :data:`MAX_BUCKETS` buckets: a run's
    width stops growing once it has lasted a day, so its earlier days' buckets stay valid."""
    capped = F.least(span_us, F.lit(US_PER_DAY))
    needed = F.greatest(F.ceil(capped / F.lit(MAX_BUCKETS)).cast("long"), F.lit(MIN_BUCKET_US))
    # least() skips nulls: the widths too narrow for the span drop out.
    return F.least(*(F.when(F.lit(width) >= needed, F.lit(width)) for width in ROUND_WIDTHS_US))


def run_buckets(bounds: DataFrame) -> DataFrame:
    """Per run (``bounds``: run_id, first_event_ts, run_watermark_ts, as
    :func:`jobs.transforms.episodes.run_bounds` gives them): its bucket width, ``_width_us``."""
    span_us = micros("run_watermark_ts") - micros("first_event_ts")
    return bounds.select("run_id", bucket_width_us(span_us).alias("_width_us"))


def flow_change() -> Column:
    """True on a flow_stopped, False on a flow_resumed, null on other events: the queue's flow
    state after its latest non-null one."""
    return F.when(F.col("event_type") == "flow_stopped", True).when(
        F.col("event_type") == "flow_resumed", False
    )


def with_bucket(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """``events`` with their run's bucket width ``_width_us`` and their bucket ``_bucket``,
    counted from the epoch: a width divides a day, so a bucket lies within one day."""
    return events.join(F.broadcast(run_buckets(bounds)), "run_id").withColumn(
        "_bucket", F.floor(micros("ts") / F.col("_width_us")).cast("long")
    )


def bucket_columns(buckets: DataFrame) -> DataFrame:
    """Rows per bucket (``_bucket``, ``_width_us``) -> their ``bucket_start``, ``date`` and
    ``bucket_s``, without the two."""
    bucket_start = F.timestamp_micros(F.col("_bucket") * F.col("_width_us"))
    return (
        buckets.withColumn("bucket_start", bucket_start)
        .withColumn("date", utc_date("bucket_start"))
        .withColumn("bucket_s", F.col("_width_us") / F.lit(float(US_PER_SECOND)))
        .drop("_bucket", "_width_us")
    )


def queue_states(events: DataFrame) -> DataFrame:
    """A queue's events with its state after each (queue keys, seq, ts): the latest logged depth
    and thresholds (:data:`CARRIED_COLUMNS`), ``flow_stopped`` (its latest flow_stopped /
    flow_resumed is a flow_stopped) and ``_stopped_before`` (the same before the event)."""
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        events.where(F.col("queue").isNotNull())
        .select(
            *QUEUE_KEYS,
            "seq",
            "ts",
            *(F.last(c, ignorenulls=True).over(upto_here).alias(c) for c in CARRIED_COLUMNS),
            F.coalesce(F.last(flow_change(), ignorenulls=True).over(upto_here), F.lit(False)).alias(
                "flow_stopped"
            ),
        )
        .withColumn(
            "_stopped_before", F.coalesce(F.lag("flow_stopped").over(in_order), F.lit(False))
        )
    )


def depth_timeline(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """The ``queue_depth_timeline`` rows of the runs in ``events`` (bronze events of whole runs;
    ``bounds``: their :func:`~jobs.transforms.episodes.run_bounds`): one per queue and bucket of
    its run in which the queue had events. Columns of schemas/timelines.py, in any order."""
    at_bucket_end = {c: F.max_by(c, "seq").alias(c) for c in (*THRESHOLD_COLUMNS, "flow_stopped")}
    buckets = (
        with_bucket(queue_states(events), bounds)
        .groupBy(*QUEUE_KEYS, "_bucket", "_width_us")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.max("depth_msgs").alias("max_depth_msgs"),
            F.max_by("depth_msgs", "seq").alias("last_depth_msgs"),
            F.max("depth_bytes").alias("max_depth_bytes"),
            F.max_by("depth_bytes", "seq").alias("last_depth_bytes"),
            *at_bucket_end.values(),
            # Stopped at the bucket's start (before its first event) or after one of its events.
            F.max(F.col("flow_stopped") | F.col("_stopped_before")).alias("stopped_in_bucket"),
        )
    )
    return bucket_columns(buckets)


#: The depth columns whose largest value in a bucket is reported with it.
DEPTH_COLUMNS = ("depth_msgs", "depth_bytes")


def bucket_summaries(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """Per queue and bucket (``events`` and ``bounds`` as :func:`depth_timeline` takes them):
    what a bucket's row needs, from one hash aggregation of the events and a window over the
    buckets (a few hundred per queue and day) instead of a window over every event in ``seq``
    order, which sorts them all. :func:`depth_timeline` stays the rule; this is its fast path
    (jobs/episodes.py), kept equal to it by tests/test_depth_timeline_buckets.py.

    The state carried into a bucket is the latest of the buckets before it (``_in_<c>``,
    ``_in_flow``), which holds when each bucket's events follow one another in the queue's
    ``seq`` order, i.e. when the buckets' seq ranges do not overlap (ts follows seq).
    ``_seq_ordered`` says so per queue; a queue whose clock stepped back across a bucket edge
    has overlapping ranges, and its rows are :func:`depth_timeline`'s
    (:func:`seq_disordered_queues`)."""
    seq = F.col("seq")
    latest = {c: F.col(c) for c in CARRIED_COLUMNS} | {"flow": flow_change()}
    aggregated = (
        with_bucket(events.where(F.col("queue").isNotNull()), bounds)
        .groupBy(*QUEUE_KEYS, "_bucket", "_width_us")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.min(seq).alias("_min_seq"),
            F.max(seq).alias("_max_seq"),
            *(F.max(c).alias(f"_max_{c}") for c in DEPTH_COLUMNS),
            *(
                F.min(F.when(F.col(c).isNotNull(), seq)).alias(f"_first_seq_{c}")
                for c in DEPTH_COLUMNS
            ),
            *(
                F.max_by(value, F.when(value.isNotNull(), seq)).alias(f"_last_{name}")
                for name, value in latest.items()
            ),
            F.max(F.col("event_type") == "flow_stopped").alias("_any_stop"),
        )
    )
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("_min_seq")
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    overlaps = F.coalesce(F.lag("_max_seq").over(in_order) > F.col("_min_seq"), F.lit(False))
    return aggregated.select(
        "*",
        *(
            F.last(f"_last_{name}", ignorenulls=True).over(before).alias(f"_in_{name}")
            for name in latest
        ),
        overlaps.alias("_overlaps"),
    ).withColumn("_seq_ordered", ~F.max("_overlaps").over(Window.partitionBy(*QUEUE_KEYS)))


def timeline_of_buckets(summaries: DataFrame) -> DataFrame:
    """The ``queue_depth_timeline`` rows of the seq-ordered queues of :func:`bucket_summaries`,
    as :func:`depth_timeline` gives them: a value carried in counts towards a bucket's largest
    depth when some of its events come before its first logged one."""

    def largest(c: str) -> Column:
        first_logged = F.col(f"_first_seq_{c}")
        carried_in = first_logged.isNull() | (F.col("_min_seq") < first_logged)
        return F.greatest(f"_max_{c}", F.when(carried_in, F.col(f"_in_{c}")))

    def at_end(c: str) -> Column:
        return F.coalesce(f"_last_{c}", f"_in_{c}")

    stopped_in = F.coalesce(F.col("_in_flow"), F.lit(False))
    rows = summaries.where(F.col("_seq_ordered")).select(
        *QUEUE_KEYS,
        "events",
        *(largest(c).alias(f"max_{c}") for c in DEPTH_COLUMNS),
        *(at_end(c).alias(f"last_{c}") for c in DEPTH_COLUMNS),
        *(at_end(c).alias(c) for c in THRESHOLD_COLUMNS),
        (stopped_in | F.col("_any_stop")).alias("stopped_in_bucket"),
        F.coalesce("_last_flow", "_in_flow", F.lit(False)).alias("flow_stopped"),
        "_bucket",
        "_width_us",
    )
    return bucket_columns(rows)


def seq_disordered_queues(summaries: DataFrame) -> DataFrame:
    """The queue keys of :func:`bucket_summaries` whose buckets are not in seq order."""
    return summaries.where(~F.col("_seq_ordered")).select(*QUEUE_KEYS).distinct()


def timeline_of_queues(events: DataFrame, bounds: DataFrame, queues: DataFrame) -> DataFrame:
    """:func:`depth_timeline` of the ``queues`` (queue keys) only."""
    return depth_timeline(events.join(F.broadcast(queues), list(QUEUE_KEYS), "left_semi"), bounds)


def timeline_from_summaries(
    events: DataFrame, bounds: DataFrame, summaries: DataFrame
) -> DataFrame:
    """:func:`depth_timeline`'s rows from ``summaries`` (:func:`bucket_summaries` of ``events``
    and ``bounds``, best cached: read twice): those of the seq-ordered queues, plus the rule's rows
    of the others, if any (one small Spark job to know)."""
    timeline = timeline_of_buckets(summaries)
    disordered = seq_disordered_queues(summaries)
    if disordered.isEmpty():
        return timeline
    return timeline.unionByName(timeline_of_queues(events, bounds, disordered))

"""Silver ``queue_depth_timeline`` (schemas/timelines.py): a queue's depth against its thresholds
and its flow state, downsampled to at most a few hundred time buckets per run.

The dashboard's per-queue timeline reads this table instead of the event log: a run logs an event
per enqueue and dequeue, far more points than a chart can show or a page should carry.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.episodes import QUEUE_KEYS, THRESHOLD_COLUMNS
from jobs.transforms.timeutil import US_PER_DAY, US_PER_SECOND, micros, utc_date
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
            F.coalesce(
                F.last(_flow_change(), ignorenulls=True).over(upto_here), F.lit(False)
            ).alias("flow_stopped"),
        )
        .withColumn(
            "_stopped_before", F.coalesce(F.lag("flow_stopped").over(in_order), F.lit(False))
        )
    )


def _flow_change() -> Column:
    """True on a flow_stopped, False on a flow_resumed, else null."""
    return F.when(F.col("event_type") == "flow_stopped", True).when(
        F.col("event_type") == "flow_resumed", False
    )


def _bucketed(frame: DataFrame, bounds: DataFrame) -> DataFrame:
    """``frame`` (run_id, ts, ...) with its run's ``_width_us`` and its ``_bucket`` number."""
    bucket = F.floor(micros("ts") / F.col("_width_us")).cast("long")
    return frame.join(F.broadcast(run_buckets(bounds)), "run_id").withColumn("_bucket", bucket)


def _timeline_columns(frame: DataFrame) -> DataFrame:
    """Bucket rows (queue keys, ``_bucket``, ``_width_us``, the aggregates) -> the table's
    columns: the bucket's start, its UTC day and its width in seconds."""
    bucket_start = F.timestamp_micros(F.col("_bucket") * F.col("_width_us"))
    return (
        frame.withColumn("bucket_start", bucket_start)
        .withColumn("date", utc_date("bucket_start"))
        .withColumn("bucket_s", F.col("_width_us") / F.lit(float(US_PER_SECOND)))
        .drop("_bucket", "_width_us")
    )


def timeline_of_states(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """The timeline as the table defines it: every queue event's state (:func:`queue_states`,
    one sort of the queue's events by seq), grouped into its bucket. Exact whatever the order of
    ``ts``; :func:`depth_timeline` uses it only for queues whose clock stepped back across a
    bucket boundary."""
    states = _bucketed(queue_states(events), bounds)
    at_bucket_end = {c: F.max_by(c, "seq").alias(c) for c in (*THRESHOLD_COLUMNS, "flow_stopped")}
    return _timeline_columns(
        states.groupBy(*QUEUE_KEYS, "_bucket", "_width_us").agg(
            F.count(F.lit(1)).alias("events"),
            F.max("depth_msgs").alias("max_depth_msgs"),
            F.max_by("depth_msgs", "seq").alias("last_depth_msgs"),
            F.max("depth_bytes").alias("max_depth_bytes"),
            F.max_by("depth_bytes", "seq").alias("last_depth_bytes"),
            *at_bucket_end.values(),
            F.max(F.col("flow_stopped") | F.col("_stopped_before")).alias("stopped_in_bucket"),
        )
    )


def _last_logged(column: str) -> Column:
    """The bucket's last non-null ``column`` by seq (null if none was logged in it)."""
    return F.max_by(column, F.when(F.col(column).isNotNull(), F.col("seq")))


def bucket_summaries(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per queue and bucket with what the bucket's own events say: their count and seq
    range, the last value logged in it of each carried column (``_last_<c>``), the largest depths
    logged and the seq of the first event logging one (``_max_<c>``, ``_first_<c>``), its last
    flow change and whether it holds a flow_stopped. A hash aggregation: no sort of the events."""
    queue_events = _bucketed(events.where(F.col("queue").isNotNull()), bounds)
    depths = ("depth_msgs", "depth_bytes")
    return (
        queue_events.withColumn("_flow", _flow_change())
        .groupBy(*QUEUE_KEYS, "_bucket", "_width_us")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.min("seq").alias("_min_seq"),
            F.max("seq").alias("_max_seq"),
            *(_last_logged(c).alias(f"_last_{c}") for c in CARRIED_COLUMNS),
            *(F.max(c).alias(f"_max_{c}") for c in depths),
            *(
                F.min(F.when(F.col(c).isNotNull(), F.col("seq"))).alias(f"_first_{c}")
                for c in depths
            ),
            _last_logged("_flow").alias("_last_flow"),
            F.max(F.col("event_type") == "flow_stopped").alias("_any_stop"),
        )
    )


def timeline_of_buckets(summaries: DataFrame) -> DataFrame:
    """The timeline from :func:`bucket_summaries`, carrying each queue's state from bucket to
    bucket in time order (a window over a few hundred rows a run and day, not over the events).

    Equal to :func:`timeline_of_states` when each bucket's events come after (by seq) those of
    the queue's earlier buckets: then the state before a bucket's first event is the state at the
    end of the queue's previous bucket (``_in``). A depth carried into the bucket counts towards
    its maximum when events precede the bucket's first logged depth; the queue is stopped in the
    bucket if it was at its start or a flow_stopped is in it."""
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("_bucket")
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    carried_in = {
        f"_in_{c}": F.last(f"_last_{c}", ignorenulls=True).over(before)
        for c in (*CARRIED_COLUMNS, "flow")
    }
    at_end = {c: F.coalesce(F.col(f"_last_{c}"), F.col(f"_in_{c}")) for c in THRESHOLD_COLUMNS}
    depth_columns: dict[str, Column] = {}
    for c in ("depth_msgs", "depth_bytes"):
        before_first_logged = F.coalesce(F.col(f"_first_{c}") > F.col("_min_seq"), F.lit(True))
        depth_columns[f"max_{c}"] = F.greatest(
            F.col(f"_max_{c}"), F.when(before_first_logged, F.col(f"_in_{c}"))
        )
        depth_columns[f"last_{c}"] = F.coalesce(F.col(f"_last_{c}"), F.col(f"_in_{c}"))
    stopped_at_start = F.coalesce(F.col("_in_flow"), F.lit(False))
    return _timeline_columns(
        summaries.withColumns(carried_in).select(
            *QUEUE_KEYS,
            "_bucket",
            "_width_us",
            "events",
            *(column.alias(name) for name, column in depth_columns.items()),
            *(column.alias(name) for name, column in at_end.items()),
            (stopped_at_start | F.col("_any_stop")).alias("stopped_in_bucket"),
            F.coalesce(F.col("_last_flow"), stopped_at_start).alias("flow_stopped"),
        )
    )


def interleaved_queues(summaries: DataFrame) -> DataFrame:
    """The queues (their keys) with a bucket holding an event that comes before (by seq) an event
    of an earlier bucket: their clock stepped back across a bucket boundary."""
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("_bucket")
    return (
        summaries.withColumn("_before", F.lag("_max_seq").over(in_order))
        .where(F.col("_before") > F.col("_min_seq"))
        .select(*QUEUE_KEYS)
        .distinct()
    )


def depth_timeline(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """The ``queue_depth_timeline`` rows of the runs in ``events`` (their bronze events, or the
    state carried to a span and its events; ``bounds``: their
    :func:`~jobs.transforms.episodes.run_bounds`): one per queue and bucket of its run in which
    the queue had events. Columns of schemas/timelines.py, in any order.

    Computed per bucket (:func:`timeline_of_buckets`), without sorting the events; a queue whose
    clock stepped back across a bucket boundary is computed from its events' states instead
    (:func:`timeline_of_states`), so the rows are those of the table's definition either way."""
    summaries = bucket_summaries(events, bounds)
    stepped_back = F.broadcast(interleaved_queues(summaries))
    in_order = timeline_of_buckets(summaries.join(stepped_back, list(QUEUE_KEYS), "left_anti"))
    out_of_order = timeline_of_states(
        events.join(stepped_back, list(QUEUE_KEYS), "left_semi"), bounds
    )
    return in_order.unionByName(out_of_order)

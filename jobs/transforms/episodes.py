"""Silver episodes (DESIGN.md §4): queue flow-stopped episodes and link credit starvations.

Inputs are bronze events of whole runs: an episode may start days before the range being processed
and end days after it, and the watermark is the run's last event.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.detail import detail_whole_number
from jobs.transforms.intervals import true_intervals
from jobs.transforms.timeutil import micros, seconds_between, utc_date

QUEUE_KEYS = ("run_id", "broker", "queue")
LINK_KEYS = ("run_id", "broker", "link")
THRESHOLD_COLUMNS = ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")


def run_bounds(events: DataFrame) -> DataFrame:
    """Per run: the earliest ts (where its observation starts) and its watermark, the ts of its
    last event by ``seq`` (DESIGN §4; seq is the total order of events, and ts need not follow
    it, e.g. a collector's clock stepping back)."""
    return events.groupBy("run_id").agg(
        F.min("ts").alias("first_event_ts"),
        F.max_by("ts", "seq").alias("run_watermark_ts"),
    )


def _carried(column: str, in_order: Window) -> Column:
    """The latest non-null value of ``column`` up to and including this event."""
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return F.last(column, ignorenulls=True).over(upto_here)


#: Columns whose latest non-null value up to an episode's start is reported with the episode.
CARRIED_COLUMNS = (*THRESHOLD_COLUMNS, "flow_stopped_count")


def flow_changes(queue_events: DataFrame) -> DataFrame:
    """The events where a queue's flow state changes: queue keys, ``seq`` and ``is_start``.

    The queue is stopped after an event when its latest flow_stopped / flow_resumed (by seq) is a
    flow_stopped. So a flow_stopped while not stopped starts an episode (``is_start``), a
    flow_resumed while stopped ends it, and a repeated one changes nothing. Only the transition
    events (a few per cent of a log) are sorted.
    """
    in_order = Window.partitionBy(*QUEUE_KEYS).orderBy("seq")
    is_stop = F.col("event_type") == "flow_stopped"
    was_stopped = F.coalesce(F.lag("event_type").over(in_order) == "flow_stopped", F.lit(False))
    return (
        queue_events.where(F.col("event_type").isin("flow_stopped", "flow_resumed"))
        .select(*QUEUE_KEYS, "seq", is_stop.alias("is_start"), was_stopped.alias("_was_stopped"))
        .where(F.col("is_start") != F.col("_was_stopped"))
        .drop("_was_stopped")
    )


#: A queue with flow changes, numbered within its run: windows and aggregations key on
#: (``_qid``, run_id) rather than on three strings.
QUEUE_ID = ("_qid", "run_id")


def _numbered_queues(changes: DataFrame) -> DataFrame:
    """The queues with flow changes, one row each: the queue keys and ``_qid``."""
    numbered = Window.partitionBy("run_id").orderBy("broker", "queue")
    return changes.select(*QUEUE_KEYS).distinct().withColumn("_qid", F.row_number().over(numbered))


def queue_sample_interval() -> Column:
    """A collector's queue sample (DESIGN §6): its ``detail.sample_interval_ms``. Only
    ``queue_declared`` rows are samples of a queue, so no other event's detail is parsed."""
    return F.when(
        F.col("event_type") == "queue_declared",
        detail_whole_number("sample_interval_ms"),
    )


def _segment_input() -> list[str | Column]:
    """The columns of a queue event that the segments' stats read (both paths)."""
    enqueue = (F.col("event_type") == "enqueue").alias("_enqueue")
    dequeue = (F.col("event_type") == "dequeue").alias("_dequeue")
    fields = ("link", "capacity", "depth_msgs", "depth_bytes", "size_bytes", *CARRIED_COLUMNS)
    return ["seq", "ts", enqueue, dequeue, *fields, queue_sample_interval().alias("_sampled_ms")]


def _dequeue_counts() -> list[Column]:
    """A group's dequeues (``dequeued_msgs``), their sizes summed (``_dequeued_size``) and how
    many of them log no size (``_unsized_dequeues``): fixed-width sums, merged by summing."""
    dequeue = F.col("_dequeue")
    return [
        F.count(F.when(dequeue, 1)).alias("dequeued_msgs"),
        F.sum(F.when(dequeue, F.col("size_bytes"))).alias("_dequeued_size"),
        F.count(F.when(dequeue & F.col("size_bytes").isNull(), 1)).alias("_unsized_dequeues"),
    ]


#: The columns of :func:`_dequeue_counts`.
_DEQUEUE_COUNTS = ("dequeued_msgs", "_dequeued_size", "_unsized_dequeues")


def _segment_rows(queue_events: DataFrame, queues: DataFrame, changes: DataFrame) -> DataFrame:
    """Queue events tagged with their segment and producer: one sort, two window functions.

    ``_seg`` is the seq of the queue's latest flow change (:func:`flow_changes`) up to the
    event, null before the first: an episode's segment holds its start and every event up to its
    end, the ending flow_resumed opening the next segment. The enqueue that triggered an episode
    (the queue's event right before its start) is moved into the episode's segment. ``_producer``
    is the link of an enqueue of an episode, else null. Queues without flow changes have no
    episode: their events are dropped (inner join with ``queues``) before the shuffle.
    """
    in_order = Window.partitionBy(*QUEUE_ID).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    numbered_changes = changes.join(queues, list(QUEUE_KEYS)).select(
        *QUEUE_ID, "seq", "is_start", F.lit(True).alias("_change")
    )
    latest_change = F.when(F.col("_change"), F.struct(F.col("seq"), F.col("is_start")))
    # Flow goes ON on an enqueue; the engine logs both at the same ts, other logs may stamp the
    # transition a little later, so only the order (seq) is relied on.
    triggers = F.col("_enqueue") & F.coalesce(F.col("_next.is_start"), F.lit(False))
    triggers = triggers & ~F.col("_stopped")
    return (
        queue_events.join(F.broadcast(queues), list(QUEUE_KEYS))
        .select(*QUEUE_ID, *_segment_input())
        .join(F.broadcast(numbered_changes), [*QUEUE_ID, "seq"], "left")
        .select(
            "*",
            F.last(latest_change, ignorenulls=True).over(upto_here).alias("_latest"),
            F.lead(F.struct("seq", "is_start")).over(in_order).alias("_next"),
        )
        .withColumn("_stopped", F.coalesce(F.col("_latest.is_start"), F.lit(False)))
        .withColumn("_trigger", triggers)
        .withColumns(
            {
                "_seg": F.when(F.col("_trigger"), F.col("_next.seq")).otherwise(
                    F.col("_latest.seq")
                ),
                "_producer": F.when(
                    (F.col("_stopped") | F.col("_trigger"))
                    & F.col("_enqueue")
                    & F.col("link").isNotNull(),
                    F.col("link"),
                ),
            }
        )
    )


def _start_fields() -> dict[str, Column]:
    """The fields of a segment's opening event (its flow change), aggregated as the ``max`` of
    the value at that event (``seq == _seg``), null elsewhere."""
    return {
        "_is_start": F.col("is_start"),
        "_start_ts": F.col("ts"),
        "_start_depth_msgs": F.col("depth_msgs"),
        "_start_depth_bytes": F.col("depth_bytes"),
        **{f"_start_{c}": F.col(c) for c in CARRIED_COLUMNS},
    }


def _latest_non_null(c: str) -> list[Column]:
    """``_seq_<c>`` / ``_val_<c>``: seq and value of the latest non-null ``c`` of a group."""
    seq = F.col("seq")
    return [
        F.max(F.when(F.col(c).isNotNull(), seq)).alias(f"_seq_{c}"),
        F.max_by(c, F.when(F.col(c).isNotNull(), seq)).alias(f"_val_{c}"),
    ]


def _merged_stats() -> list[Column]:
    """A segment's stats merged from several partial rows of it (per producer in the rule; the
    segment's own and the trigger handed to it in the fast path): each field by the aggregate
    that combines its partial values (max, a sum, the value of the latest seq)."""
    return [
        *(
            F.max(name).alias(name)
            for name in (*_start_fields(), "peak_depth_msgs", "peak_depth_bytes", "_sampled_ms")
        ),
        *(F.sum(name).alias(name) for name in _DEQUEUE_COUNTS),
        *(F.max(f"_pre_{c}").alias(f"_pre_{c}") for c in CARRIED_COLUMNS),
        *(F.max(f"_seq_{c}").alias(f"_seq_{c}") for c in CARRIED_COLUMNS),
        *(F.max_by(f"_val_{c}", f"_seq_{c}").alias(f"_val_{c}") for c in CARRIED_COLUMNS),
    ]


def _producer_stats() -> list[Column]:
    """A segment's ``producers`` and ``overshoot_bound_msgs``, aggregated over one row per
    (segment, producer) with its ``capacity`` (``_producer`` null on rows that are no
    producer's): both paths state them here."""
    return [
        F.count("_producer").alias("producers"),
        overshoot_bound(F.col("_producer"), F.col("capacity")).alias("overshoot_bound_msgs"),
    ]


def _segments_of_producers(per_producer: DataFrame) -> DataFrame:
    """Per queue segment, from its rows per (segment, producer) (``_producer`` null for the
    events that are no producer's enqueue): the segment's stats (:func:`queue_segment_stats`)."""
    return per_producer.groupBy(*QUEUE_ID, "_seg").agg(*_merged_stats(), *_producer_stats())


def queue_segment_stats(
    queue_events: DataFrame, queues: DataFrame, changes: DataFrame
) -> DataFrame:
    """Per queue segment (see :func:`_segment_rows`): two hash aggregations with fixed-width
    buffers, per (segment, producer) then per segment. The rule: a sort of every queue event;
    :func:`queue_segment_stats_by_lookup` is its fast path, and a test keeps the episodes of
    the two equal.

    Columns: run_id, ``_qid``, ``_seg`` and: ``_is_start`` (the segment opens an episode),
    ``_start_ts``, ``_start_depth_msgs``, ``_start_depth_bytes`` and ``_start_<c>`` of the
    event that opens it; ``peak_depth_msgs``, ``peak_depth_bytes`` over its events;
    ``producers`` and ``overshoot_bound_msgs`` (sum of each producer's max capacity, null when
    a producer has none: :func:`overshoot_bound`);
    ``_pre_<c>``, the value of the trigger moved into it; ``_seq_<c>`` / ``_val_<c>``, seq and
    value of the latest non-null ``c`` among its events.
    """
    rows = _segment_rows(queue_events, queues, changes)
    seq, at_start = F.col("seq"), F.col("seq") == F.col("_seg")
    per_producer = rows.groupBy(*QUEUE_ID, "_seg", "_producer").agg(
        *(F.max(F.when(at_start, value)).alias(name) for name, value in _start_fields().items()),
        F.max("depth_msgs").alias("peak_depth_msgs"),
        F.max("depth_bytes").alias("peak_depth_bytes"),
        F.max("_sampled_ms").alias("_sampled_ms"),
        F.max("capacity").alias("capacity"),
        *_dequeue_counts(),
        *(F.max(F.when(seq < F.col("_seg"), F.col(c))).alias(f"_pre_{c}") for c in CARRIED_COLUMNS),
        *(column for c in CARRIED_COLUMNS for column in _latest_non_null(c)),
    )
    return _segments_of_producers(per_producer)


#: A lookup key is the queue's number (``_qkey``) shifted by this many bits plus the block of the
#: seq in the queue: a queue has fewer blocks than flow changes, far below 2^32.
_BLOCK_BITS = 32


def _change_stretches(queues: DataFrame, changes: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The queues' stretches between flow changes, keyed for the lookup, and per queue its
    lookup fields.

    Per queue (``lookup``, with the queue keys): ``_qkey`` (the queues of all runs numbered,
    so that the hash join and the aggregations key on fixed-width values only), its first and
    last change and ``_width``, the mean seq gap between its changes. A stretch runs from a
    change (``_seg``; ``_seg_stopped``: it starts an episode) up to the next (``_seg_next``,
    null after the last); it is listed on each block of ``_width`` seq it covers, counted from
    the queue's first change, under ``_key`` = queue and block in one long. So there are as
    many stretch rows as changes plus blocks, about twice the changes (400,917 rows for 200,534
    changes on the 10M bench), and an event meets the stretches of its block only. An
    event after the last change is put in the last change's block; one before the first has no
    key (it is in no stretch).
    """
    numbered = changes.join(queues, list(QUEUE_KEYS)).select(*QUEUE_ID, "seq", "is_start")
    per_queue = numbered.groupBy(*QUEUE_ID).agg(
        F.min("seq").alias("_first_change"),
        F.max("seq").alias("_last_change"),
        F.count(F.lit(1)).alias("_changes"),
    )
    # The queues of all runs numbered without a window over them all (Spark warns of one, once a
    # task, though it holds a row per queue): the run's place among the runs' sorted ids times
    # the most queues a run has, plus the queue's number in its run (from 1). Deterministic, as
    # each use of the frame computes it again; below 2^31 for, say, 10^4 runs of 10^5 queues.
    runs = per_queue.agg(
        F.sort_array(F.collect_set("run_id")).alias("_runs"), F.max("_qid").alias("_most_queues")
    )
    run_place = F.array_position("_runs", F.col("run_id")) - 1
    lookup = per_queue.crossJoin(F.broadcast(runs)).select(
        *QUEUE_ID,
        (run_place * F.col("_most_queues") + F.col("_qid")).cast("long").alias("_qkey"),
        "_first_change",
        "_last_change",
        F.greatest(
            F.lit(1),
            F.ceil((F.col("_last_change") - F.col("_first_change") + 1) / F.col("_changes")),
        ).alias("_width"),
    )
    in_order = Window.partitionBy(*QUEUE_ID).orderBy("seq")
    stretches = numbered.join(lookup, list(QUEUE_ID)).select(
        "_qkey",
        F.col("seq").alias("_seg"),
        F.col("is_start").alias("_seg_stopped"),
        F.lead("seq").over(in_order).alias("_seg_next"),
        "_first_change",
        "_width",
    )
    first = _block_key(F.col("_seg"))
    last = _block_key(F.coalesce(F.col("_seg_next"), F.col("_seg") + 1) - 1)
    on_blocks = stretches.select(
        "_seg", "_seg_stopped", "_seg_next", F.explode(F.sequence(first, last)).alias("_key")
    )
    return on_blocks, queues.join(lookup, list(QUEUE_ID))


def _block_key(seq: Column) -> Column:
    """The lookup key of ``seq`` in its queue (the ``_qkey``, ``_first_change`` and ``_width``
    columns): the queue's number and the seq's block, one long; null before the first change."""
    block = F.floor((seq - F.col("_first_change")) / F.col("_width"))
    return F.when(seq >= F.col("_first_change"), F.shiftleft("_qkey", _BLOCK_BITS) + block)


def queue_segment_stats_by_lookup(
    queue_events: DataFrame, queues: DataFrame, changes: DataFrame
) -> DataFrame:
    """:func:`queue_segment_stats` without sorting the queue events: the fast path.

    Each event finds its segment, the stretch from its queue's latest flow change, by a hash
    join on one long (queue and seq block, :func:`_change_stretches`) with a seq range
    condition, against a table of about twice as many rows as there are flow changes. Then one
    hash aggregation per segment for its stats, and a narrow one per (segment, producer) for
    ``producers`` and ``overshoot_bound_msgs`` (the rule's one wide aggregation per producer
    held 1.13 million groups on the 10M bench, against 0.2 million per segment: the write,
    alternated warm in one JVM, medians 12.6 -> 10.7 s and 23.1 -> 19.5 JVM CPU-s). An
    event is a producer's when it is an enqueue naming a link in a stopped segment. Producers
    are keyed by a 64-bit hash of their link: the episodes count and sum them, never name them
    (two links of one episode sharing a hash, a chance below 10^-15 for a hundred links, would
    count as one).

    The enqueue that triggered an episode (the queue's event right before its start) is the last
    event of the segment before it, a segment not stopped (changes alternate): that segment's
    group keeps its last event's fields and hands them, as a row of its own, to the next
    segment (``_seg_next``): its depth and carried values to the segment's stats, its producer
    and capacity to the producers, merged there with that producer's enqueues. The trigger also
    stays counted in the segment before: that changes no episode, as that segment's peak and
    producers are read by none, and its latest carried values only by later episodes, for which
    both segments lie before the start.
    """
    on_blocks, lookup = _change_stretches(queues, changes)
    at = F.least(F.col("seq"), F.col("_last_change"))
    events = queue_events.join(F.broadcast(lookup), list(QUEUE_KEYS)).select(
        "_qkey", "_first_change", *_segment_input(), _block_key(at).alias("_key")
    )
    s = on_blocks.alias("s")
    within = (
        (events["_key"] == F.col("s._key"))
        & (events["seq"] >= F.col("s._seg"))
        & (F.col("s._seg_next").isNull() | (events["seq"] < F.col("s._seg_next")))
    )
    rows = events.join(F.broadcast(s), within, "left").select(
        events["*"],
        F.col("s._seg").alias("_seg"),
        F.coalesce(F.col("s._seg_stopped"), F.lit(False)).alias("_stopped"),
        # The null segment (before the first change) is followed by the first change.
        F.when(F.col("s._seg").isNull(), F.col("_first_change"))
        .otherwise(F.col("s._seg_next"))
        .alias("_seg_next"),
    )
    # A link's enqueue, by its hash: a fixed-width value in the buffers and keys.
    enqueuer = F.when(F.col("_enqueue") & F.col("link").isNotNull(), F.xxhash64("link"))
    seq, at_start = F.col("seq"), F.col("seq") == F.col("_seg")
    starts = {**_start_fields(), "_is_start": F.col("_stopped")}
    last_fields = ("_enqueue", "capacity", "depth_msgs", "depth_bytes", *CARRIED_COLUMNS)
    groups = rows.groupBy("_qkey", "_seg", "_stopped", "_seg_next").agg(
        *(F.max(F.when(at_start, value)).alias(name) for name, value in starts.items()),
        F.max("depth_msgs").alias("peak_depth_msgs"),
        F.max("depth_bytes").alias("peak_depth_bytes"),
        F.max("_sampled_ms").alias("_sampled_ms"),
        *_dequeue_counts(),
        *(column for c in CARRIED_COLUMNS for column in _latest_non_null(c)),
        F.max("seq").alias("_last_seq"),
        F.max_by(enqueuer, seq).alias("_last_producer"),
        *(F.max_by(c, seq).alias(f"_last_{c.lstrip('_')}") for c in last_fields),
    )
    is_trigger = ~F.col("_stopped") & F.col("_last_enqueue") & F.col("_seg_next").isNotNull()
    carried = [f"_{kind}_{c}" for c in CARRIED_COLUMNS for kind in ("pre", "seq", "val")]
    itself = F.struct(
        F.col("_seg").alias("_seg"),
        F.lit(None).cast("long").alias("_producer"),
        F.lit(None).cast("long").alias("capacity"),
        *(F.col(name).alias(name) for name in (*starts, "peak_depth_msgs", "peak_depth_bytes")),
        F.col("_sampled_ms").alias("_sampled_ms"),
        *(F.col(name).alias(name) for name in _DEQUEUE_COUNTS),
        *(
            (F.lit(None) if name.startswith("_pre_") else F.col(name)).alias(name)
            for name in carried
        ),
    )
    trigger = F.struct(
        F.col("_seg_next").alias("_seg"),
        F.col("_last_producer").alias("_producer"),
        F.col("_last_capacity").alias("capacity"),
        *(F.lit(None).alias(name) for name in starts),
        F.col("_last_depth_msgs").alias("peak_depth_msgs"),
        F.col("_last_depth_bytes").alias("peak_depth_bytes"),
        F.lit(None).cast("long").alias("_sampled_ms"),  # an enqueue: never a sample
        *(F.lit(0).cast("long").alias(name) for name in _DEQUEUE_COUNTS),  # an enqueue
        *(_trigger_value(name) for name in carried),
    )
    both = F.when(is_trigger, F.array(itself, trigger)).otherwise(F.array(itself))
    # Both reads of these rows keep the whole array, so the aggregation above and its shuffle
    # are planned once: a read that pruned its fields would plan (and scan for) another.
    per_row = groups.select("_qkey", F.explode(both).alias("_r")).select("_qkey", "_r.*")
    stats = per_row.groupBy("_qkey", "_seg").agg(*_merged_stats())
    enqueued = rows.where(F.col("_stopped") & enqueuer.isNotNull()).select(
        "_qkey", "_seg", enqueuer.alias("_producer"), "capacity"
    )
    handed = per_row.where(F.col("_producer").isNotNull()).select(*enqueued.columns)
    per_producer = (
        enqueued.unionByName(handed)
        .groupBy("_qkey", "_seg", "_producer")
        .agg(F.max("capacity").alias("capacity"))
    )
    producers = per_producer.groupBy("_qkey", "_seg").agg(*_producer_stats())
    # A segment no producer enqueued to: none, and no bound (the empty sum is not a bound of 0).
    segments = stats.join(producers, ["_qkey", "_seg"], "left").withColumn(
        "producers", F.coalesce(F.col("producers"), F.lit(0))
    )
    keys = F.broadcast(lookup.select(*QUEUE_ID, "_qkey"))
    return segments.join(keys, "_qkey").drop("_qkey")


def _trigger_value(name: str) -> Column:
    """A trigger's ``_pre_<c>`` / ``_seq_<c>`` / ``_val_<c>``: its own value of ``c``, and the
    seq of that value when it has one."""
    kind, c = name[1:4], name[5:]
    value = F.col(f"_last_{c}")
    if kind == "seq":
        return F.when(value.isNotNull(), F.col("_last_seq")).alias(name)
    return value.alias(name)


def overshoot_bound(producer: Column, capacity: Column) -> Column:
    """DESIGN §4's ``overshoot_bound_msgs``, an aggregate over one row per producer of an episode
    (``producer`` null on the rows of other events): the sum of their capacities, or null when
    any of them has no capacity, i.e. no window, so there is no guarantee to hold (a sum of the
    others' windows would read as Qpid breaking it).

    "No capacity" in the log is a null ``capacity`` on every enqueue of that producer in the
    episode (``capacity`` is the max over them): the engine logs null for a producer without a
    window (an AMQP 0-10 client with ``capacity: None``, an Artemis CORE producer with a -1
    window), and one enqueue of a windowed producer that misses the column does not make its
    window go away. A ``capacity`` of 0 is a window of 0, not a missing one: the ``prefill``
    producer logs 0 (messages written before the run by nobody who can send more), and it adds
    0. An episode no named producer enqueued to keeps a
    null bound (the empty sum is not read as a bound of 0), and a bound of 0 gives no ratio.
    Enqueues that name no producer are no producer's and are not counted.
    """
    is_producer = producer.isNotNull()
    uncapped = F.count(F.when(is_producer & capacity.isNull(), 1))
    return F.when(uncapped == 0, F.sum(F.when(is_producer, capacity)))


#: How a queue's segment stats are computed: :func:`queue_segment_stats` (the rule) or its fast
#: path, :func:`queue_segment_stats_by_lookup`.
SegmentStats = Callable[[DataFrame, DataFrame, DataFrame], DataFrame]


def queue_flow_episodes(
    events: DataFrame,
    bounds: DataFrame,
    segment_stats: SegmentStats = queue_segment_stats,
) -> DataFrame:
    """One row per stopped episode, in the ``queue_flow_episodes`` layout.

    The queue is stopped after an event when its latest flow_stopped / flow_resumed (by seq) is a
    flow_stopped; an episode is a maximal stretch of stopped events, so a repeated flow_stopped
    while already stopped does not start a second episode. Its events are those from the
    flow_stopped through the flow_resumed, plus the enqueue that triggered it (the queue's event
    right before the flow_stopped).

    The queue events are tagged with their segment and aggregated per segment
    (``segment_stats``: by default :func:`queue_segment_stats`, the rule, which sorts them;
    :func:`queue_segment_stats_by_lookup`, hash joins and aggregations, for large spans); the
    episodes are assembled from those few rows: an episode's segment, plus the flow_resumed that
    opens the next one (its end). Carried thresholds and counter are the latest non-null values
    up to the start: the start's own, else the trigger's, else the latest of earlier segments.
    """
    queue_events = events.where(F.col("queue").isNotNull())
    changes = flow_changes(queue_events)
    queues = _numbered_queues(changes)
    segments = segment_stats(queue_events, queues, changes)
    in_order = Window.partitionBy(*QUEUE_ID).orderBy(F.col("_seg").asc_nulls_first())
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    following = {
        "_end_seq": "_seg",
        "_end_ts": "_start_ts",
        "_end_depth_msgs": "_start_depth_msgs",
        "_end_depth_bytes": "_start_depth_bytes",
    }
    starts = segments.select(
        "*",
        *(F.lead(column).over(in_order).alias(name) for name, column in following.items()),
        *(
            F.last(f"_val_{c}", ignorenulls=True).over(before).alias(f"_{c}_before")
            for c in CARRIED_COLUMNS
        ),
    ).where(F.col("_is_start"))
    episodes = starts.select(
        *QUEUE_ID,
        F.col("_seg").alias("start_seq"),
        F.col("_start_ts").alias("start_ts"),
        *(F.coalesce(f"_start_{c}", f"_pre_{c}", f"_{c}_before").alias(c) for c in CARRIED_COLUMNS),
        F.col("_end_seq").alias("end_seq"),
        F.col("_end_ts").alias("end_ts"),
        F.greatest("peak_depth_msgs", "_end_depth_msgs").alias("peak_depth_msgs"),
        F.greatest("peak_depth_bytes", "_end_depth_bytes").alias("peak_depth_bytes"),
        "producers",
        "overshoot_bound_msgs",
        F.col("_sampled_ms").alias("sample_interval_ms"),
        "dequeued_msgs",
        F.when(
            F.col("_unsized_dequeues") == 0, F.coalesce(F.col("_dequeued_size"), F.lit(0))
        ).alias("dequeued_bytes"),
    )
    episodes = episodes.join(F.broadcast(queues), list(QUEUE_ID)).join(
        bounds.select("run_id", "run_watermark_ts"), "run_id"
    )
    overshoot_msgs = _overshoot("peak_depth_msgs", "flow_stop_count")
    overshoot_bytes = _overshoot("peak_depth_bytes", "flow_stop_size")
    bound = F.col("overshoot_bound_msgs")
    return episodes.select(
        *QUEUE_KEYS,
        *episode_span(),
        "flow_stopped_count",
        "peak_depth_msgs",
        "peak_depth_bytes",
        *THRESHOLD_COLUMNS,
        overshoot_msgs.alias("overshoot_msgs"),
        overshoot_bytes.alias("overshoot_bytes"),
        "producers",
        bound.alias("overshoot_bound_msgs"),
        F.when(bound > 0, overshoot_msgs / bound).alias("overshoot_ratio"),
        # A collector's sample among its events: its peak may be a sample's (DESIGN §6).
        "sample_interval_ms",
        "dequeued_msgs",
        "dequeued_bytes",
    )


def _overshoot(peak: str, stop_threshold: str) -> Column:
    """max(0, peak - threshold) for a threshold that is on; null when it is off (0 or unknown)
    or when no event of the episode carries the depth (an unknown peak is not a 0 overshoot:
    ``greatest`` alone would skip the null)."""
    on = (F.coalesce(F.col(stop_threshold), F.lit(0)) > 0) & F.col(peak).isNotNull()
    return F.when(on, F.greatest(F.col(peak) - F.col(stop_threshold), F.lit(0)))


def link_starvation_episodes(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per credit starvation, in the ``link_starvation_episodes`` layout.

    A link's state is the credit and available of its latest event carrying a credit (by seq),
    that event's own available (DESIGN §4, to the letter: a credit logged without an available
    is not known to starve). The link starves while credit == 0 and available > 0; a
    link_detached ends every starvation.
    """
    in_order = Window.partitionBy(*LINK_KEYS).orderBy("seq")
    detached = F.col("event_type") == "link_detached"
    # Only events that carry link state (or detach) matter; dropping the rest (enqueues name their
    # producer's link but carry no credit) before the shuffle changes no carried value.
    carries_state = F.col("credit").isNotNull() | F.col("link_role").isNotNull() | detached
    state_events = (
        events.where(F.col("link").isNotNull() & carries_state)
        .withColumn("link_role", _carried("link_role", in_order))
        .where(F.col("credit").isNotNull() | detached)
        .withColumn(
            "starved",
            ~detached & (F.col("credit") == 0) & (F.coalesce(F.col("available"), F.lit(0)) > 0),
        )
    )
    starvations = true_intervals(
        state_events, LINK_KEYS, "starved", carry=("link_role", "available")
    ).join(bounds.select("run_id", "run_watermark_ts"), "run_id")
    return starvations.select(
        *LINK_KEYS,
        "link_role",
        "start_seq",
        "start_ts",
        utc_date("start_ts").alias("start_date"),
        "end_seq",
        "end_ts",
        F.when(F.col("end_event_type") == "link_detached", F.lit("detached"))
        .when(F.col("end_seq").isNotNull(), F.lit("credit"))
        .alias("end_reason"),
        F.col("end_seq").isNull().alias("is_open"),
        duration_seconds("start_ts", "end_ts").alias("duration_s"),
        open_watermark(),
        F.col("available").alias("available_at_start"),
    )


def episode_span() -> list[str | Column]:
    """The columns an episode table takes from its interval: start and end events, whether it is
    still open at the run's watermark, and its length (null while open)."""
    return [
        "start_seq",
        "start_ts",
        utc_date("start_ts").alias("start_date"),
        "end_seq",
        "end_ts",
        F.col("end_seq").isNull().alias("is_open"),
        duration_seconds("start_ts", "end_ts").alias("duration_s"),
        open_watermark(),
    ]


def open_watermark() -> Column:
    """``run_watermark_ts`` of an episode row: the run's watermark while the episode is open (it
    ends there for now), null once it closed. A closed episode is not rewritten by later nights
    (jobs/scope.py ``Scope``), so a watermark kept on it would be that of the night that last
    wrote it, and the table would depend on the order the days were processed in."""
    return F.when(F.col("end_seq").isNull(), F.col("run_watermark_ts")).alias("run_watermark_ts")


def duration_seconds(start_ts: str, end_ts: str) -> Column:
    """Seconds from start to end (null while open), 0 when a clock stepping back stamped the end
    before the start: the episode is then an instant, as it counts in the daily tables."""
    seconds = seconds_between(micros(start_ts), micros(end_ts))
    return F.when(seconds.isNotNull(), F.greatest(seconds, F.lit(0.0)))  # greatest skips nulls


def day_bounds(date_from: date, date_to: date) -> tuple[datetime, datetime]:
    """[00:00 UTC of date_from, 00:00 UTC of the day after date_to)."""
    start = datetime.combine(date_from, time(0), tzinfo=UTC)
    end = datetime.combine(date_to + timedelta(days=1), time(0), tzinfo=UTC)
    return start, end


def overlapping(episodes: DataFrame, date_from: date, date_to: date) -> DataFrame:
    """Episodes overlapping the days [date_from, date_to]; open ones until their run's watermark."""
    return episodes.where(overlap_predicate(date_from, date_to))


def overlap_predicate(date_from: date, date_to: date) -> str:
    """SQL predicate selecting the episodes a run over [date_from, date_to] (re)computes.

    Used both to filter what is written and as Delta's replaceWhere, so that every episode a rerun
    replaces is also one it rewrites. An open episode lasts until its run's watermark (as of when
    it was computed): a run that ended stopped or starved does not overlap every later day. One
    that may have closed since has new events, so its run is processed and its open episodes are
    replaced with it (:class:`jobs.scope.Scope`). An episode whose end a clock stepping back
    stamped before its start is the instant it started.
    """
    start, end = day_bounds(date_from, date_to)
    fmt = "%Y-%m-%d %H:%M:%S"
    range_start = f"TIMESTAMP '{start.strftime(fmt)}+00:00'"
    # COALESCE(end_ts, run_watermark_ts) >= range_start, spelled so that Delta's per-file
    # min / max / null-count statistics skip the files of episodes that ended earlier (a scan of
    # every earlier day otherwise), and start_date bounding the partitions read.
    ends_after = (
        f"(end_ts >= {range_start} OR (end_ts IS NULL AND run_watermark_ts >= {range_start}))"
    )
    return (
        f"start_date <= DATE '{date_to.isoformat()}' AND "
        f"start_ts < TIMESTAMP '{end.strftime(fmt)}+00:00' AND "
        f"({ends_after} OR start_ts >= {range_start})"
    )

"""Silver ``queue_depth_timeline`` v1: a queue's depth and flow state, downsampled for charts.

The dashboard draws a queue's depth against its stop and resume thresholds over a run. The event
log has one row per enqueue and dequeue (hundreds of thousands per run), so the episodes job
(jobs/episodes.py) writes this table, computed by jobs/transforms/depth_timeline.py: one row per
(run, queue, time bucket) in which the queue had events.

The bucket width is one per run, the smallest of 1, 2 or 5 x 10^k seconds (1 ms to 200 s) or
5 minutes that cuts the run's observed span (first event to watermark), or one day if the run is
longer, into at most :data:`MAX_BUCKETS` buckets, counted from the epoch (00:00 UTC): a queue gets
at most that many points plus one per day of its run, a chart's time axis has round steps, and
every width divides a day, so no bucket straddles midnight and a day's buckets are computed from
that day's events and the state carried into it (silver ``carried_events``).
"""

from __future__ import annotations

from schemas.model import Column, TableSchema

SCHEMA_VERSION = 1

#: Buckets of a run's span, or of each day of a run longer than a day, at most (a queue's chart:
#: at most this many points per day, plus one).
MAX_BUCKETS = 300

#: The narrowest bucket, in microseconds: finer than the engine's timer resolution is noise.
MIN_BUCKET_US = 1_000

QUEUE_DEPTH_TIMELINE = TableSchema(
    name="queue_depth_timeline",
    version=SCHEMA_VERSION,
    partition_by=("date",),
    doc=(
        "A queue's depth, thresholds and flow state per time bucket of its run (buckets with "
        "events only; between two rows the state is the earlier row's at its end)."
    ),
    columns=(
        Column("date", "date", nullable=False, doc="UTC date of bucket_start (partition)"),
        Column("run_id", "string", nullable=False),
        Column("broker", "string", nullable=False),
        Column("queue", "string", nullable=False),
        Column(
            "bucket_start",
            "timestamp",
            nullable=False,
            doc="the epoch + n x width (00:00 UTC + n x width)",
        ),
        Column("bucket_s", "float64", nullable=False, doc="the run's bucket width in seconds"),
        Column("events", "int64", nullable=False, doc="the queue's events in the bucket"),
        Column("max_depth_msgs", "int64", doc="largest depth_msgs logged in the bucket"),
        Column("last_depth_msgs", "int64", doc="depth_msgs at the bucket's last event"),
        Column("max_depth_bytes", "int64", doc="largest depth_bytes logged in the bucket"),
        Column("last_depth_bytes", "int64", doc="depth_bytes at the bucket's last event"),
        Column("flow_stop_count", "int64", doc="threshold in force at the bucket's end, 0 = off"),
        Column("flow_resume_count", "int64", doc="threshold in force at the bucket's end"),
        Column("flow_stop_size", "int64", doc="threshold in force at the bucket's end, 0 = off"),
        Column("flow_resume_size", "int64", doc="threshold in force at the bucket's end"),
        Column(
            "stopped_in_bucket",
            "bool",
            nullable=False,
            doc="flow was stopped at some moment of the bucket (at its start or after an event)",
        ),
        Column("flow_stopped", "bool", nullable=False, doc="flow stopped at the bucket's end"),
    ),
)

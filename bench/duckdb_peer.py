"""The bench's peer: DESIGN.md §4 computed by DuckDB SQL straight from the raw event files.

This module owns an independent reading of §4 (and of the README's "Where DESIGN.md leaves room"):
it shares no code with jobs/ (from schemas/ it takes only the event log's named values, such as
the collectors' origins) and reads the raw Parquet files (``<raw>/date=YYYY-MM-DD/*.parquet``),
not bronze. It builds the two silver tables (``queue_flow_episodes``, ``link_starvation_episodes``)
and the two gold ones (``queue_flow_daily`` with what flow control costs the producers,
``link_starvation_daily``) with the columns of schemas/tables.py, so that the bench can time it
beside the Spark pipeline and compare their gold row by row (:func:`differences`).

What it does not do is bronze's validation: it reads clean logs. Identical copies of an event
(same ``run_id, seq``, same columns) are kept once, as bronze keeps them; two copies that differ
make :func:`load_events` refuse the log rather than guess which one bronze would keep. Rows that
bronze would quarantine for a broken contract rule are not looked for.

Times are integer microseconds since the epoch throughout (``*_us``), days integer day numbers
since 1970-01-01 (UTC); the tables convert them to TIMESTAMP and DATE at the end. DuckDB is a
bench and test dependency only: the pipeline does not use it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from schemas.broker_events import COLLECTOR_ORIGINS, RECORDED_BY_CLIENT_LINKS
from schemas.model import US_PER_DAY, US_PER_SECOND

#: Floats agree when they differ by at most this much relative to the larger.
RELATIVE_TOLERANCE = 1e-9
#: The tables the peer computes, with the key of one row.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "queue_flow_episodes": ("run_id", "broker", "queue", "start_seq"),
    "link_starvation_episodes": ("run_id", "broker", "link", "start_seq"),
    "queue_flow_daily": ("date", "broker", "run_id", "queue"),
    "link_starvation_daily": ("date", "broker", "run_id", "link"),
}


def _sql_text(value: str) -> str:
    """A SQL string literal holding ``value``."""
    return "'" + value.replace("'", "''") + "'"


def _count(con: duckdb.DuckDBPyConnection, relation: str) -> int:
    """Rows of a relation (a table or view name, optionally with a WHERE clause)."""
    ((count,),) = con.execute(f"SELECT count(*) FROM {relation}").fetchall()
    return int(count)


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose clock is UTC (DESIGN §4's days are UTC calendar days)."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    # No result depends on row order; letting DuckDB drop it saves memory and time.
    con.execute("SET preserve_insertion_order = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


# --- the event log ---------------------------------------------------------------------------

_RAW_EVENTS = """
CREATE OR REPLACE TEMP TABLE raw_events AS
SELECT * EXCLUDE (date), epoch_us(ts) AS ts_us, epoch_us(ts) // {us_per_day} AS day
FROM read_parquet($files, hive_partitioning = true, union_by_name = true)
"""

#: Keys that appear more than once, with how many different rows they hold.
_REPEATED_KEYS = """
CREATE OR REPLACE TEMP TABLE repeated_keys AS
WITH repeated AS (
    SELECT run_id, seq FROM raw_events GROUP BY run_id, seq HAVING count(*) > 1
),
distinct_copies AS (
    SELECT DISTINCT * FROM raw_events SEMI JOIN repeated USING (run_id, seq)
)
SELECT run_id, seq, count(*) AS versions FROM distinct_copies GROUP BY run_id, seq
"""

_DEDUPLICATED_EVENTS = """
CREATE OR REPLACE TEMP TABLE events AS
SELECT * FROM raw_events ANTI JOIN repeated_keys USING (run_id, seq)
UNION ALL
SELECT DISTINCT * FROM raw_events SEMI JOIN repeated_keys USING (run_id, seq)
"""

#: A run's span: its earliest ts, and its watermark, the ts of its last event by seq (§4; the
#: README: not the latest ts when a clock steps back).
_RUN_BOUNDS = """
CREATE OR REPLACE TEMP TABLE run_bounds AS
SELECT run_id, min(ts_us) AS first_us, arg_max(ts_us, seq) AS watermark_us
FROM events
GROUP BY run_id
"""


def load_events(con: duckdb.DuckDBPyConnection, raw_dir: str | Path) -> int:
    """Read every raw file under ``raw_dir`` into the temp table ``events`` (one row per
    ``run_id, seq``) and the runs' spans into ``run_bounds``; returns the number of events.
    Raises ValueError when two copies of an event differ (a log the peer does not judge)."""
    files = sorted(str(p) for p in Path(raw_dir).glob("date=*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"no raw files under {raw_dir}/date=*/")
    con.execute(_RAW_EVENTS.format(us_per_day=US_PER_DAY), {"files": files})
    con.execute(_REPEATED_KEYS)
    conflicting = _count(con, "repeated_keys WHERE versions > 1")
    if conflicting:
        raise ValueError(
            f"{conflicting} (run_id, seq) keys have copies that differ: bronze would "
            "quarantine them, and the peer reads clean logs only"
        )
    if not _count(con, "repeated_keys"):
        con.execute("CREATE OR REPLACE TEMP VIEW events AS SELECT * FROM raw_events")
    else:
        con.execute(_DEDUPLICATED_EVENTS)
    con.execute(_RUN_BOUNDS)
    return _count(con, "events")


# --- silver: queue flow episodes --------------------------------------------------------------

#: A queue's timeline is its events in one run on one broker, by seq. It is stopped after its
#: latest flow_stopped / flow_resumed when that is a flow_stopped; a flow_stopped while stopped
#: opens nothing and a flow_resumed while running closes nothing. An episode's events run from
#: the enqueue that triggered it (the queue's event right before the flow_stopped, if it is an
#: enqueue) through the flow_resumed that ends it, or the queue's last event while open.
_QUEUE_EPISODE_MEMBERS = """
CREATE OR REPLACE TEMP TABLE queue_episode_members AS
WITH queue_timeline AS (
    SELECT
        run_id, broker, queue, seq, ts_us, event_type, link, capacity, size_bytes,
        depth_msgs, depth_bytes,
        CASE WHEN event_type = 'queue_declared' AND json_valid(detail)
             THEN TRY_CAST(json_extract_string(detail, '$.sample_interval_ms') AS BIGINT)
             END AS sampled_ms,
        coalesce(
            last_value(CASE WHEN event_type IN ('flow_stopped', 'flow_resumed')
                            THEN event_type = 'flow_stopped' END IGNORE NULLS)
                OVER (timeline ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
            false
        ) AS stopped_before,
        -- thresholds and counter in force: the latest value logged, this event's included
        last_value(flow_stop_count IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS flow_stop_count_in_force,
        last_value(flow_resume_count IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS flow_resume_count_in_force,
        last_value(flow_stop_size IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS flow_stop_size_in_force,
        last_value(flow_resume_size IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS flow_resume_size_in_force,
        last_value(flow_stopped_count IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS counter_in_force
    FROM events
    WHERE queue IS NOT NULL
    WINDOW timeline AS (PARTITION BY run_id, broker, queue ORDER BY seq)
),
episode_openings AS (
    SELECT *, event_type = 'flow_stopped' AND NOT stopped_before AS opens_episode
    FROM queue_timeline
),
numbered AS (
    SELECT
        *,
        sum(opens_episode::INTEGER) OVER (timeline ROWS UNBOUNDED PRECEDING) AS episodes_so_far,
        coalesce(lead(opens_episode) OVER timeline, false) AS precedes_opening
    FROM episode_openings
    WINDOW timeline AS (PARTITION BY run_id, broker, queue ORDER BY seq)
)
SELECT
    * EXCLUDE (episodes_so_far, precedes_opening),
    CASE
        WHEN opens_episode OR stopped_before THEN episodes_so_far
        WHEN precedes_opening AND event_type = 'enqueue' THEN episodes_so_far + 1  -- trigger
    END AS episode_number
FROM numbered
WHERE opens_episode OR stopped_before OR (precedes_opening AND event_type = 'enqueue')
"""

_QUEUE_FLOW_EPISODES = """
CREATE OR REPLACE TEMP TABLE peer_queue_flow_episodes AS
WITH episode_spans AS (
    SELECT
        run_id, broker, queue, episode_number,
        max(seq) FILTER (opens_episode) AS start_seq,
        max(ts_us) FILTER (opens_episode) AS start_us,
        -- the only flow_resumed among an episode's events is the one that ends it
        max(seq) FILTER (event_type = 'flow_resumed') AS end_seq,
        max(ts_us) FILTER (event_type = 'flow_resumed') AS end_us,
        max(depth_msgs) AS peak_depth_msgs,
        max(depth_bytes) AS peak_depth_bytes,
        max(sampled_ms) AS sample_interval_ms,  -- a collector's samples (DESIGN §6)
        max(counter_in_force) FILTER (opens_episode) AS flow_stopped_count,
        max(flow_stop_count_in_force) FILTER (opens_episode) AS flow_stop_count,
        max(flow_resume_count_in_force) FILTER (opens_episode) AS flow_resume_count,
        max(flow_stop_size_in_force) FILTER (opens_episode) AS flow_stop_size,
        max(flow_resume_size_in_force) FILTER (opens_episode) AS flow_resume_size,
        count(*) FILTER (event_type = 'dequeue') AS dequeued_msgs,
        CASE WHEN count(*) FILTER (event_type = 'dequeue' AND size_bytes IS NULL) = 0
             THEN coalesce(sum(size_bytes) FILTER (event_type = 'dequeue'), 0)::BIGINT
             END AS dequeued_bytes
    FROM queue_episode_members
    GROUP BY run_id, broker, queue, episode_number
),
episode_producers AS (
    -- a producer's window is the largest capacity its enqueues in the episode carry; none of
    -- them carrying one means it has no window
    SELECT run_id, broker, queue, episode_number, link, max(capacity) AS capacity
    FROM queue_episode_members
    WHERE event_type = 'enqueue' AND link IS NOT NULL
    GROUP BY run_id, broker, queue, episode_number, link
),
overshoot_bounds AS (
    SELECT
        run_id, broker, queue, episode_number,
        count(*) AS producers,
        CASE WHEN count(capacity) = count(*) THEN sum(capacity)::BIGINT END AS overshoot_bound_msgs
    FROM episode_producers
    GROUP BY run_id, broker, queue, episode_number
),
overshoots AS (
    SELECT
        s.*,
        coalesce(b.producers, 0) AS producers,
        b.overshoot_bound_msgs,
        CASE WHEN s.flow_stop_count > 0 AND s.peak_depth_msgs IS NOT NULL
             THEN greatest(0, s.peak_depth_msgs - s.flow_stop_count) END AS overshoot_msgs,
        CASE WHEN s.flow_stop_size > 0 AND s.peak_depth_bytes IS NOT NULL
             THEN greatest(0, s.peak_depth_bytes - s.flow_stop_size) END AS overshoot_bytes
    FROM episode_spans AS s
    LEFT JOIN overshoot_bounds AS b USING (run_id, broker, queue, episode_number)
)
SELECT
    o.run_id, o.broker, o.queue,
    o.start_seq, o.start_us, o.start_us // {us_per_day} AS start_day,
    o.end_seq, o.end_us,
    o.end_seq IS NULL AS is_open,
    greatest(0, o.end_us - o.start_us) / {us_per_second} AS duration_s,
    r.watermark_us AS run_watermark_us,
    o.flow_stopped_count, o.peak_depth_msgs, o.peak_depth_bytes,
    o.flow_stop_count, o.flow_resume_count, o.flow_stop_size, o.flow_resume_size,
    o.overshoot_msgs, o.overshoot_bytes, o.producers, o.overshoot_bound_msgs,
    CASE WHEN o.overshoot_bound_msgs > 0
         THEN o.overshoot_msgs / o.overshoot_bound_msgs::DOUBLE END AS overshoot_ratio,
    o.sample_interval_ms, o.dequeued_msgs, o.dequeued_bytes
FROM overshoots AS o
JOIN run_bounds AS r USING (run_id)
"""


# --- silver: link starvation episodes ---------------------------------------------------------

#: A link's events: link_attached, link_detached, flow, transfer, or any event carrying credit
#: or available (README: an enqueue naming its producer is not one). Its state is the credit of
#: its latest event carrying a credit and that event's own available; a detach ends a
#: starvation whatever it carries. A link is attached from its link_attached, or from its first
#: event unless that is a detach (it attached before the log began), to its link_detached.
_LINK_TIMELINE = """
CREATE OR REPLACE TEMP TABLE link_timeline AS
WITH link_events AS (
    SELECT run_id, broker, link, seq, ts_us, event_type, link_role, credit, available
    FROM events
    WHERE link IS NOT NULL
      AND (event_type IN ('link_attached', 'link_detached', 'flow', 'transfer')
           OR credit IS NOT NULL OR available IS NOT NULL)
),
link_states AS (
    SELECT
        *,
        coalesce(
            last_value(CASE WHEN event_type = 'link_detached' THEN false
                            WHEN credit IS NOT NULL
                            THEN credit = 0 AND coalesce(available > 0, false) END IGNORE NULLS)
                OVER (timeline ROWS UNBOUNDED PRECEDING),
            false
        ) AS starved_after,
        coalesce(
            last_value(CASE WHEN event_type = 'link_attached' THEN true
                            WHEN event_type = 'link_detached' THEN false END IGNORE NULLS)
                OVER (timeline ROWS UNBOUNDED PRECEDING),
            true
        ) AS attached_after,
        last_value(link_role IGNORE NULLS) OVER (timeline ROWS UNBOUNDED PRECEDING)
            AS role_so_far
    FROM link_events
    WINDOW timeline AS (PARTITION BY run_id, broker, link ORDER BY seq)
)
SELECT
    *,
    coalesce(lag(starved_after) OVER timeline, false) AS starved_before,
    coalesce(lag(attached_after) OVER timeline, false) AS attached_before
FROM link_states
WINDOW timeline AS (PARTITION BY run_id, broker, link ORDER BY seq)
"""

#: Intervals of a link state from the events that change it: they alternate (begin, end, begin,
#: ...), so each beginning's end is the next change.
_STATE_INTERVALS = """
CREATE OR REPLACE TEMP TABLE {name} AS
WITH changes AS (
    SELECT *,
        lead(seq) OVER timeline AS end_seq,
        lead(ts_us) OVER timeline AS end_us,
        lead(event_type) OVER timeline AS ending_event
    FROM link_timeline
    WHERE {state}_after <> {state}_before
    WINDOW timeline AS (PARTITION BY run_id, broker, link ORDER BY seq)
)
SELECT
    c.run_id, c.broker, c.link, c.role_so_far AS link_role,
    c.seq AS start_seq, c.ts_us AS start_us, c.ts_us // {us_per_day} AS start_day,
    c.end_seq, c.end_us,
    CASE WHEN c.ending_event = 'link_detached' THEN 'detached'
         WHEN c.end_seq IS NOT NULL THEN 'credit' END AS end_reason,
    c.end_seq IS NULL AS is_open,
    -- README: an end a clock stepping back stamped before the start lasts 0 s, at the start
    greatest(0, c.end_us - c.ts_us) / {us_per_second} AS duration_s,
    r.watermark_us AS run_watermark_us,
    c.available AS available_at_start
FROM changes AS c
JOIN run_bounds AS r USING (run_id)
WHERE c.{state}_after
"""


# --- gold -------------------------------------------------------------------------------------

#: An interval [start, end) cut at midnights: one row per day it touches with the seconds it
#: holds there (an open one ends at its run's watermark; a zero-length one belongs to the day it
#: starts on). Expects a relation ``intervals(key..., start_us, end_us)`` with end >= start.
_DAY_PIECES = """
SELECT
    *,
    greatest(0, least(end_us, (day + 1) * {us_per_day}) - greatest(start_us, day * {us_per_day}))
        / {us_per_second} AS seconds,
    start_us < day * {us_per_day} AND end_us > day * {us_per_day} AS held_at_midnight
FROM (
    SELECT *, unnest(generate_series(start_us // {us_per_day},
                                     greatest(start_us, end_us - 1) // {us_per_day})) AS day
    FROM intervals
)
"""

_QUEUE_FLOW_DAILY = """
CREATE OR REPLACE TEMP TABLE peer_queue_flow_daily AS
WITH queue_events_per_day AS (
    SELECT
        run_id, broker, queue, day,
        min(ts_us) AS first_us,
        count(*) FILTER (event_type = 'flow_stopped') AS flow_stopped_count,
        max(depth_msgs) AS max_depth_msgs,
        max(depth_bytes) AS max_depth_bytes,
        max(sampled_ms) AS sample_interval_ms,  -- a collector's samples (DESIGN §6)
        -- the day's latest counter by seq, and the counter before its first logged one
        arg_max(flow_stopped_count, seq) FILTER (flow_stopped_count IS NOT NULL) AS last_counter,
        max(seq) FILTER (flow_stopped_count IS NOT NULL) AS last_counter_seq,
        arg_min(flow_stopped_count - (event_type = 'flow_stopped')::INTEGER, seq)
            FILTER (flow_stopped_count IS NOT NULL) AS counter_before_first,
        -- what flow control costs the producers (jobs/transforms/queue_costs.py's reading)
        count(*) FILTER (event_type = 'enqueue') AS enqueued,
        count(*) FILTER (event_type = 'dequeue') AS dequeued,
        count(*) FILTER (event_type = 'message_rejected'
                         AND outcome IS DISTINCT FROM 'dropped') AS rejected,
        count(*) FILTER (event_type = 'message_rejected' AND outcome = 'dropped') AS dropped,
        count(*) FILTER (event_type = 'enqueue' AND paged = 'true') AS paged,
        count(*) FILTER (event_type = 'ring_evicted') AS evicted,
        bool_or(NOT from_outside) AS messages_recorded
    FROM (
        SELECT
            *,
            CASE WHEN event_type = 'message_rejected' AND json_valid(detail)
                 THEN json_extract_string(detail, '$.outcome') END AS outcome,
            CASE WHEN event_type = 'enqueue' AND json_valid(detail)
                 THEN json_extract_string(detail, '$.paged') END AS paged,
            CASE WHEN event_type = 'queue_declared' AND json_valid(detail)
                 THEN TRY_CAST(json_extract_string(detail, '$.sample_interval_ms') AS BIGINT)
                 END AS sampled_ms,
            -- a collector's row or a client's record of its own link: neither logs the broker's
            -- messages (the text test spares parsing most details)
            coalesce(CASE WHEN contains(detail, 'origin') AND json_valid(detail)
                          THEN json_extract_string(detail, '$.origin') IN ({collector_origins})
                          END, false)
                OR coalesce(CASE WHEN contains(detail, 'recorded_by') AND json_valid(detail)
                                 THEN json_extract_string(detail, '$.recorded_by')
                                      = {recorded_by_client_links}
                                 END, false) AS from_outside
        FROM events
        WHERE queue IS NOT NULL
    )
    GROUP BY run_id, broker, queue, day
),
intervals AS (
    SELECT run_id, broker, queue, start_us,
           greatest(start_us, coalesce(end_us, run_watermark_us)) AS end_us
    FROM peer_queue_flow_episodes
),
stopped_pieces AS ({day_pieces}),
time_stopped AS (
    SELECT run_id, broker, queue, day,
           sum(seconds) AS time_stopped_s,
           bool_or(held_at_midnight) AS stopped_at_day_start
    FROM stopped_pieces
    GROUP BY run_id, broker, queue, day
),
queue_days AS (
    -- every day from the queue's earliest event through its run's watermark day, idle days
    -- included, and any other day it has an event on or is stopped in (a clock stepping back
    -- stamps them past the watermark's day)
    SELECT run_id, broker, queue,
           unnest(generate_series(min(e.first_us) // {us_per_day},
                                  any_value(r.watermark_us) // {us_per_day})) AS day
    FROM queue_events_per_day AS e
    JOIN run_bounds AS r USING (run_id)
    GROUP BY run_id, broker, queue
    UNION
    SELECT run_id, broker, queue, day FROM queue_events_per_day
    UNION
    SELECT run_id, broker, queue, day FROM time_stopped
),
counters AS (
    -- the counter at 00:00 is the latest by seq among earlier days' events, else the day's
    -- first less its own flow_stopped; at 24:00 the latest by seq among this and earlier days
    SELECT
        d.run_id, d.broker, d.queue, d.day,
        arg_max(e.last_counter, e.last_counter_seq) OVER (
            PARTITION BY d.run_id, d.broker, d.queue ORDER BY d.day
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS counter_carried,
        arg_max(e.last_counter, e.last_counter_seq) OVER (
            PARTITION BY d.run_id, d.broker, d.queue ORDER BY d.day
            ROWS UNBOUNDED PRECEDING) AS counter_at_day_end,
        e.counter_before_first
    FROM queue_days AS d
    LEFT JOIN queue_events_per_day AS e USING (run_id, broker, queue, day)
),
episodes_started AS (
    -- episodes count on the day they start
    SELECT
        run_id, broker, queue, start_day AS day,
        count(*) AS episodes,
        max(overshoot_msgs) AS max_overshoot_msgs,
        quantile_cont(overshoot_msgs, 0.95) AS p95_overshoot_msgs,
        max(overshoot_bytes) AS max_overshoot_bytes,
        quantile_cont(overshoot_bytes, 0.95) AS p95_overshoot_bytes,
        max(overshoot_ratio) AS max_overshoot_ratio
    FROM peer_queue_flow_episodes
    GROUP BY run_id, broker, queue, start_day
),
enqueued_messages AS (
    SELECT DISTINCT run_id, link, message_id, broker, queue
    FROM events
    WHERE event_type = 'enqueue' AND queue IS NOT NULL
),
held_transfer_delays AS (
    -- a held transfer's delay is each queue's that enqueued its message (same run, broker,
    -- producer and message), on the day it completed
    SELECT
        m.run_id, m.broker, m.queue, c.day,
        count(*) AS held_completions,
        quantile_cont(c.latency_us, [0.5, 0.95, 0.99]) AS percentiles,
        max(c.latency_us) AS completion_max_us
    FROM events AS c
    -- a log that names no producer: a completion without a link is the enqueue's without one
    JOIN enqueued_messages AS m
      ON c.run_id = m.run_id AND c.broker = m.broker AND c.link IS NOT DISTINCT FROM m.link
         AND c.message_id = m.message_id
    WHERE c.event_type = 'transfer_completed' AND c.latency_us > 0
    GROUP BY m.run_id, m.broker, m.queue, c.day
),
observed AS (
    SELECT d.run_id, d.broker, d.queue, d.day,
           greatest(0, least(r.watermark_us, (d.day + 1) * {us_per_day})
                       - greatest(r.first_us, d.day * {us_per_day})) / {us_per_second} AS observed_s
    FROM queue_days AS d
    JOIN run_bounds AS r USING (run_id)
)
SELECT
    d.day, d.broker, d.run_id, d.queue,
    coalesce(e.flow_stopped_count, 0) AS flow_stopped_count,
    c.counter_at_day_end - coalesce(c.counter_carried, c.counter_before_first)
        AS flow_stopped_counter_delta,
    coalesce(e.flow_stopped_count, 0)
        = c.counter_at_day_end - coalesce(c.counter_carried, c.counter_before_first)
        AS counter_check_ok,
    coalesce(t.stopped_at_day_start, false) AS stopped_at_day_start,
    coalesce(t.time_stopped_s, 0.0) AS time_stopped_s,
    o.observed_s,
    CASE WHEN o.observed_s > 0 THEN coalesce(t.time_stopped_s, 0.0) / o.observed_s END
        AS stopped_share,
    coalesce(s.episodes, 0) AS episodes,
    e.max_depth_msgs, e.max_depth_bytes,
    s.max_overshoot_msgs, s.p95_overshoot_msgs,
    s.max_overshoot_bytes, s.p95_overshoot_bytes,
    s.max_overshoot_ratio,
    e.sample_interval_ms,
    -- 0 on a day without events of the queue; unknown (null) when none of them is the broker's
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.enqueued, 0) END AS enqueued,
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.dequeued, 0) END AS dequeued,
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.rejected, 0) END AS rejected,
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.dropped, 0) END AS dropped,
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.paged, 0) END AS paged,
    CASE WHEN e.messages_recorded IS NOT FALSE THEN coalesce(e.evicted, 0) END AS evicted,
    coalesce(h.held_completions, 0) AS held_completions,
    h.percentiles[1] AS completion_p50_us,
    h.percentiles[2] AS completion_p95_us,
    h.percentiles[3] AS completion_p99_us,
    h.completion_max_us
FROM queue_days AS d
JOIN observed AS o USING (run_id, broker, queue, day)
JOIN counters AS c USING (run_id, broker, queue, day)
LEFT JOIN queue_events_per_day AS e USING (run_id, broker, queue, day)
LEFT JOIN time_stopped AS t USING (run_id, broker, queue, day)
LEFT JOIN episodes_started AS s USING (run_id, broker, queue, day)
LEFT JOIN held_transfer_delays AS h USING (run_id, broker, queue, day)
"""

#: Rows for the days a link's attached time or a starvation touches.
_LINK_STARVATION_DAILY = """
CREATE OR REPLACE TEMP TABLE peer_link_starvation_daily AS
WITH intervals AS (
    SELECT run_id, broker, link, 'starved' AS state, start_seq, link_role, start_us,
           greatest(start_us, coalesce(end_us, run_watermark_us)) AS end_us
    FROM peer_link_starvation_episodes
    UNION ALL
    SELECT run_id, broker, link, 'attached' AS state, start_seq, link_role, start_us,
           greatest(start_us, coalesce(end_us, run_watermark_us)) AS end_us
    FROM link_attachments
),
pieces AS ({day_pieces}),
link_days AS (
    SELECT
        run_id, broker, link, day,
        coalesce(sum(seconds) FILTER (state = 'starved'), 0.0) AS starved_s,
        count(*) FILTER (state = 'starved' AND start_us // {us_per_day} = day) AS episodes,
        coalesce(sum(seconds) FILTER (state = 'attached'), 0.0) AS attached_s,
        -- the role of the day's latest starvation, else of its latest attached interval
        coalesce(arg_max(link_role, start_seq) FILTER (state = 'starved'),
                 arg_max(link_role, start_seq) FILTER (state = 'attached')) AS link_role
    FROM pieces
    GROUP BY run_id, broker, link, day
)
SELECT
    day, broker, run_id, link, link_role, starved_s, episodes, attached_s,
    CASE WHEN attached_s > 0 THEN starved_s / attached_s END AS starved_share
FROM link_days
"""

#: The peer's tables in the column order and types of schemas/tables.py.
_OUTPUT = {
    "queue_flow_episodes": """
        SELECT run_id, broker, queue, start_seq, make_timestamp(start_us) AS start_ts,
               DATE '1970-01-01' + start_day::INTEGER AS start_date,
               end_seq, make_timestamp(end_us) AS end_ts, is_open,
               CASE WHEN NOT is_open THEN duration_s END AS duration_s,
               CASE WHEN is_open THEN make_timestamp(run_watermark_us) END AS run_watermark_ts,
               flow_stopped_count, peak_depth_msgs, peak_depth_bytes, flow_stop_count,
               flow_resume_count, flow_stop_size, flow_resume_size, overshoot_msgs,
               overshoot_bytes, producers, overshoot_bound_msgs, overshoot_ratio,
               sample_interval_ms, dequeued_msgs, dequeued_bytes
        FROM peer_queue_flow_episodes""",
    "link_starvation_episodes": """
        SELECT run_id, broker, link, link_role, start_seq, make_timestamp(start_us) AS start_ts,
               DATE '1970-01-01' + start_day::INTEGER AS start_date,
               end_seq, make_timestamp(end_us) AS end_ts, end_reason, is_open,
               CASE WHEN NOT is_open THEN duration_s END AS duration_s,
               CASE WHEN is_open THEN make_timestamp(run_watermark_us) END AS run_watermark_ts,
               available_at_start
        FROM peer_link_starvation_episodes""",
    "queue_flow_daily": """
        SELECT DATE '1970-01-01' + day::INTEGER AS date, * EXCLUDE (day)
        FROM peer_queue_flow_daily""",
    "link_starvation_daily": """
        SELECT DATE '1970-01-01' + day::INTEGER AS date, * EXCLUDE (day)
        FROM peer_link_starvation_daily""",
}


def compute(con: duckdb.DuckDBPyConnection) -> None:
    """From ``events`` and ``run_bounds`` (:func:`load_events`), create the views
    ``queue_flow_episodes``, ``link_starvation_episodes``, ``queue_flow_daily`` and
    ``link_starvation_daily`` (the schemas/tables.py columns) over temp tables."""
    day_pieces = _DAY_PIECES.format(us_per_day=US_PER_DAY, us_per_second=US_PER_SECOND)
    statements = (
        _QUEUE_EPISODE_MEMBERS,
        _QUEUE_FLOW_EPISODES,
        _LINK_TIMELINE,
        _STATE_INTERVALS.replace("{name}", "peer_link_starvation_episodes").replace(
            "{state}", "starved"
        ),
        _STATE_INTERVALS.replace("{name}", "link_attachments").replace("{state}", "attached"),
        _QUEUE_FLOW_DAILY.replace("{day_pieces}", day_pieces),
        _LINK_STARVATION_DAILY.replace("{day_pieces}", day_pieces),
    )
    constants = {
        "{us_per_day}": str(US_PER_DAY),
        "{us_per_second}": str(US_PER_SECOND),
        "{collector_origins}": ", ".join(_sql_text(origin) for origin in COLLECTOR_ORIGINS),
        "{recorded_by_client_links}": _sql_text(RECORDED_BY_CLIENT_LINKS),
    }
    for statement in statements:
        for placeholder, value in constants.items():
            statement = statement.replace(placeholder, value)
        con.execute(statement)
    for name, select in _OUTPUT.items():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {select}")


@dataclass(frozen=True)
class PeerRun:
    """One computation of the peer: its connection (holding the tables) and its figures."""

    con: duckdb.DuckDBPyConnection
    events: int
    seconds: float
    rows: dict[str, int]


def run_peer(
    raw_dir: str | Path, out_dir: str | Path | None = None, threads: int | None = None
) -> PeerRun:
    """Load the raw files, compute the four tables and, with ``out_dir``, write each as
    ``<out_dir>/<table>.parquet`` (the pipeline persists what it computes, so the timed peer
    does too); timed from connecting to the last file written."""
    started = time.perf_counter()
    con = connect(threads)
    events = load_events(con, raw_dir)
    compute(con)
    rows = {}
    for name in TABLE_KEYS:
        if out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            target = Path(out_dir) / f"{name}.parquet"
            con.execute(f"COPY (SELECT * FROM {name}) TO '{target}' (FORMAT parquet)")
        rows[name] = _count(con, f"'{target}'" if out_dir is not None else name)
    return PeerRun(con, events, time.perf_counter() - started, rows)


# --- comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableDifferences:
    """How two versions of one table differ: row counts, keys on one side only, rows whose
    values differ (with the columns that do), the first few of each."""

    table: str
    left_rows: int
    right_rows: int
    only_left: int
    only_right: int
    differing: int
    examples: list[str]

    @property
    def agree(self) -> bool:
        return not (self.only_left or self.only_right or self.differing)


def _same_value(column: str, column_type: str) -> str:
    left, right = f"l.{column}", f"r.{column}"
    if column_type.startswith("TIMESTAMP"):
        left, right = f"epoch_us({left})", f"epoch_us({right})"
    if column_type in ("DOUBLE", "FLOAT", "REAL") or column_type.startswith("DECIMAL"):
        return (
            f"({left} IS NOT DISTINCT FROM {right} OR abs({left} - {right}) <= "
            f"{RELATIVE_TOLERANCE} * greatest(abs({left}), abs({right})))"
        )
    return f"{left} IS NOT DISTINCT FROM {right}"


def differences(
    con: duckdb.DuckDBPyConnection,
    table: str,
    left: str,
    right: str,
    keys: tuple[str, ...] | None = None,
    examples: int = 5,
    columns: tuple[str, ...] | None = None,
) -> TableDifferences:
    """Compare relations ``left`` and ``right`` (names DuckDB knows: views, tables, or
    ``read_parquet(...)``) holding ``table``'s rows, keyed by its :data:`TABLE_KEYS`, on
    ``columns`` (default: every column of the right side; the left must have them all)."""
    keys = keys or TABLE_KEYS[table]
    left_types = {row[0]: row[1] for row in con.sql(f"DESCRIBE SELECT * FROM {left}").fetchall()}
    right_columns = [row[0] for row in con.sql(f"DESCRIBE SELECT * FROM {right}").fetchall()]
    values = [c for c in columns or right_columns if c not in keys]
    missing = [c for c in values if c not in left_types]
    if missing:
        raise ValueError(f"{table}: the left side lacks {missing}")

    join_keys = ", ".join(keys)
    key_text = " || ' ' || ".join(f"{k}::VARCHAR" for k in keys)  # USING merges the keys
    unequal = [
        f"CASE WHEN NOT {_same_value(c, left_types[c])} THEN "
        f"'{c}: ' || coalesce(l.{c}::VARCHAR, 'null') || ' vs ' || coalesce(r.{c}::VARCHAR, 'null')"
        " END"
        for c in values
    ]
    compared = f"""
        SELECT
            {key_text} AS key,
            l._present IS NULL AS only_right,
            r._present IS NULL AS only_left,
            concat_ws('; ', {", ".join(unequal) or "NULL"}) AS changes
        FROM (SELECT *, true AS _present FROM {left}) AS l
        FULL OUTER JOIN (SELECT *, true AS _present FROM {right}) AS r USING ({join_keys})
    """
    summary = con.execute(f"""
        WITH compared AS ({compared})
        SELECT count(*) FILTER (only_left), count(*) FILTER (only_right),
               count(*) FILTER (NOT only_left AND NOT only_right AND changes <> '')
        FROM compared
    """).fetchall()
    only_left, only_right, differing = (int(v) for v in summary[0])
    first = con.execute(f"""
        WITH compared AS ({compared})
        SELECT key, CASE WHEN only_left THEN 'only left' WHEN only_right THEN 'only right'
                         ELSE changes END
        FROM compared
        WHERE only_left OR only_right OR changes <> ''
        ORDER BY key
        LIMIT {int(examples)}
    """).fetchall()
    return TableDifferences(
        table=table,
        left_rows=_count(con, left),
        right_rows=_count(con, right),
        only_left=only_left,
        only_right=only_right,
        differing=differing,
        examples=[f"{key}: {what}" for key, what in first],
    )


def table_rows(con: duckdb.DuckDBPyConnection, name: str) -> list[dict[str, Any]]:
    """A peer table as plain dicts (for tests and small logs)."""
    relation = con.sql(f"SELECT * FROM {name}")
    columns = relation.columns
    return [dict(zip(columns, row, strict=True)) for row in relation.fetchall()]

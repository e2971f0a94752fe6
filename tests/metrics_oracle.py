"""A pure-Python reference implementation of the DESIGN.md §4 metrics, written from the text.

It shares no code with jobs/ and walks each timeline event by event, in ``seq`` order, the way the
definitions read. Times are integer microseconds since the epoch (UTC); rows are plain dicts with
the broker_events columns (``ts`` a datetime, aware or naive-UTC).

Interpretations (DESIGN.md leaves them open; the project documented the same choices):

* Queue flow state: the queue is stopped after its latest ``flow_stopped`` / ``flow_resumed``
  event (by seq) when that is a ``flow_stopped``. A ``flow_stopped`` while stopped is no new
  episode (time is the union), a ``flow_resumed`` while not stopped changes nothing.
* Episode events: from its ``flow_stopped`` through the ``flow_resumed`` that ends it (or the
  queue's last event while open), plus the triggering enqueue: the queue's event right before
  the ``flow_stopped`` (by seq) when that event is an ``enqueue``. The peak depth is the max over
  those events; the producers are the distinct non-null ``link`` of its enqueues. A producer's
  capacity is its max ``capacity`` among those enqueues; it has none (no window) when none of
  them carries one. The bound is the sum of the producers' capacities, and None when any producer
  has none ("there is no guarantee to hold") or when no producer enqueued; a capacity of 0 (the
  engine's ``prefill``) is a window of 0 and adds 0. The ratio is overshoot / bound, None when
  either is None or the bound is 0.
* Thresholds and counter of an episode: the latest non-null value of the queue's events up to
  and including the ``flow_stopped``.
* An interval never closed ends at the run's watermark (its last event's ts, any event type); an
  episode row carries that watermark while open, none once closed.
  Intervals are half-open ``[start, end)``: one ending at 00:00 does not touch the next day; one
  of zero length still belongs to the day it starts on (so it is counted there).
* Observed seconds of a run in a day: the day ∩ [run's first event ts, watermark].
* Counter change across a day: the last counter of the day minus the counter at 00:00, which is
  the last counter before the day (by seq); a queue without one starts from its first counter of
  the day, less one when that event is itself a ``flow_stopped`` (the counter is after the event).
  A day without counter values has a change of 0, unless the queue has events that day and no
  counter value was ever logged up to then: the change (and the check) is unknown, None.
* Link state: credit and ``available`` of the latest event carrying a credit (its own
  ``available``: one logged without it is not known to starve). Starved when
  ``credit == 0 and available > 0``; ``link_detached`` ends a starvation whatever it carries.
* A link is attached from its ``link_attached`` (or its first event of the log, unless that is a
  ``link_detached``: it attached before the log started) to its ``link_detached`` or the watermark.
  Its events are its link events: ``link_attached``, ``link_detached``, ``flow``, ``transfer``, or
  any event carrying ``credit`` or ``available`` (an enqueue naming its producer is not one; a
  producer named on enqueues only has no link rows).
* ``link_role`` is the latest non-null role of the link's events up to an interval's start. A daily
  link row reports the role of the starvation touching that day with the greatest start seq, else
  that of the attached interval touching the day with the greatest start seq.
* A daily queue row exists for every day from the queue's declaration through the day of its
  run's watermark ("idle days included"), and for any other day it has an event or an episode
  touches; a link row when an attached interval or a starvation touches it. The declaration is
  the queue's ``queue_declared``; a queue never declared in the log, or with events stamped
  before its declaration (it existed then), starts at its earliest event. The watermark's day
  counts even when the watermark is 00:00 (observed seconds 0, share None). An idle day's row:
  no stopped events, a counter change of 0, nothing stopped, the run's observed seconds, no
  episode, and None for the depths and overshoots (nothing was measured).
* The daily max overshoot ratio is over the day's episodes that have a ratio.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from schemas.model import US_PER_DAY, US_PER_SECOND

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DAY = date(1970, 1, 1)
THRESHOLDS = ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")
CARRIED = (*THRESHOLDS, "flow_stopped_count")

Row = dict[str, Any]


def to_us(ts: datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return (ts - EPOCH) // timedelta(microseconds=1)


def day_of(us: int) -> date:
    return EPOCH_DAY + timedelta(days=us // US_PER_DAY)


def day_start(day: date) -> int:
    return (day - EPOCH_DAY).days * US_PER_DAY


def days_touched(start: int, end: int) -> list[date]:
    """The UTC days [start, end) touches; a zero-length interval touches its own day."""
    first = start // US_PER_DAY
    last = max(first, (end - 1) // US_PER_DAY)
    return [EPOCH_DAY + timedelta(days=d) for d in range(first, last + 1)]


def clipped_seconds(start: int, end: int, day: date) -> float:
    lo, hi = day_start(day), day_start(day) + US_PER_DAY
    return max(0, min(end, hi) - max(start, lo)) / US_PER_SECOND


def percentile(values: list[float], q: float) -> float | None:
    """Exact percentile with linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _timelines(rows: Iterable[Row], entity: str) -> dict[tuple[str, str, str], list[Row]]:
    """Rows naming ``entity`` grouped per (run_id, broker, entity), each sorted by seq."""
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in rows:
        if row.get(entity) is not None:
            groups[(row["run_id"], row["broker"], row[entity])].append(row)
    for events in groups.values():
        events.sort(key=lambda r: r["seq"])
    return groups


def run_bounds(rows: Iterable[Row]) -> dict[str, tuple[int, int]]:
    """run_id -> (earliest ts, watermark = ts of the run's last event by seq) in microseconds
    (DESIGN §3: seq is the total order; ts need not follow it)."""
    earliest: dict[str, int] = {}
    last: dict[str, Row] = {}
    for row in rows:
        run = row["run_id"]
        earliest[run] = min(earliest.get(run, to_us(row["ts"])), to_us(row["ts"]))
        if run not in last or row["seq"] > last[run]["seq"]:
            last[run] = row
    return {run: (earliest[run], to_us(last[run]["ts"])) for run in earliest}


# --- silver: queue flow episodes ------------------------------------------------------------


def _overshoot(peak: int | None, threshold: int | None) -> int | None:
    if threshold is None or threshold <= 0 or peak is None:
        return None
    return max(0, peak - threshold)


def _close_episode(ep: Row, members: list[Row], end: Row | None, watermark: int) -> Row:
    depths = [m["depth_msgs"] for m in members if m.get("depth_msgs") is not None]
    sizes = [m["depth_bytes"] for m in members if m.get("depth_bytes") is not None]
    capacities: dict[str, int | None] = {}
    for m in members:
        if m["event_type"] == "enqueue" and m.get("link") is not None:
            seen = [c for c in (capacities.get(m["link"]), m.get("capacity")) if c is not None]
            capacities[m["link"]] = max(seen) if seen else None
    # "When any of those producers has no capacity (no window), the bound and the ratio are null"
    caps = list(capacities.values())
    bound = sum(c for c in caps if c is not None) if caps and None not in caps else None
    peak_msgs = max(depths) if depths else None
    peak_bytes = max(sizes) if sizes else None
    # DESIGN §6: figures resting on a collector's sample (a queue_declared with an interval).
    # What the consumers took while it was stopped: the dequeues among its events.
    dequeues = [m for m in members if m["event_type"] == "dequeue"]
    sampled = [
        int(_detail(m)["sample_interval_ms"])
        for m in members
        if m["event_type"] == "queue_declared" and "sample_interval_ms" in _detail(m)
    ]
    over_msgs = _overshoot(peak_msgs, ep["flow_stop_count"])
    ep.update(
        end_seq=None if end is None else end["seq"],
        end_us=None if end is None else to_us(end["ts"]),
        is_open=end is None,
        # Where an open episode ends for now; a closed one carries none (schemas/tables.py).
        run_watermark_us=watermark if end is None else None,
        peak_depth_msgs=peak_msgs,
        peak_depth_bytes=peak_bytes,
        overshoot_msgs=over_msgs,
        overshoot_bytes=_overshoot(peak_bytes, ep["flow_stop_size"]),
        producers=len(capacities),
        overshoot_bound_msgs=bound,
        overshoot_ratio=(
            over_msgs / bound if over_msgs is not None and bound is not None and bound > 0 else None
        ),
        sample_interval_ms=max(sampled) if sampled else None,
        dequeued_msgs=len(dequeues),
        dequeued_bytes=(
            sum(m["size_bytes"] for m in dequeues)
            if all(m.get("size_bytes") is not None for m in dequeues)
            else None
        ),
    )
    ep["duration_s"] = (
        None if end is None else max(0, ep["end_us"] - ep["start_us"]) / US_PER_SECOND
    )
    return ep


def queue_flow_episodes(rows: list[Row]) -> list[Row]:
    bounds = run_bounds(rows)
    episodes = []
    for (run_id, broker, queue), events in _timelines(rows, "queue").items():
        watermark = bounds[run_id][1]
        carried: dict[str, Any] = dict.fromkeys(CARRIED)
        current: Row | None = None
        members: list[Row] = []
        previous: Row | None = None
        for e in events:
            for c in CARRIED:
                if e.get(c) is not None:
                    carried[c] = e[c]
            kind = e["event_type"]
            if current is None and kind == "flow_stopped":
                current = {
                    "run_id": run_id,
                    "broker": broker,
                    "queue": queue,
                    "start_seq": e["seq"],
                    "start_us": to_us(e["ts"]),
                    "start_date": day_of(to_us(e["ts"])),
                    **carried,
                }
                trigger = previous is not None and previous["event_type"] == "enqueue"
                members = [previous, e] if trigger else [e]
            elif current is not None:
                members.append(e)
                if kind == "flow_resumed":
                    episodes.append(_close_episode(current, members, e, watermark))
                    current, members = None, []
            previous = e
        if current is not None:
            episodes.append(_close_episode(current, members, None, watermark))
    return episodes


# --- silver: link starvations ---------------------------------------------------------------


def link_starvation_episodes(rows: list[Row]) -> list[Row]:
    bounds = run_bounds(rows)
    starvations = []
    for (run_id, broker, link), events in _timelines(rows, "link").items():
        role = available = None
        current: Row | None = None
        for e in events:
            if e.get("link_role") is not None:
                role = e["link_role"]
            if e["event_type"] == "link_detached":
                starved = False
            elif e.get("credit") is not None:
                available = e.get("available")
                starved = e["credit"] == 0 and available is not None and available > 0
            else:
                continue  # carries no credit: the state is unchanged
            if starved and current is None:
                current = {
                    "run_id": run_id,
                    "broker": broker,
                    "link": link,
                    "link_role": role,
                    "start_seq": e["seq"],
                    "start_us": to_us(e["ts"]),
                    "start_date": day_of(to_us(e["ts"])),
                    "available_at_start": available,
                    "run_watermark_us": bounds[run_id][1],
                }
            elif not starved and current is not None:
                end = to_us(e["ts"])
                current.update(
                    end_seq=e["seq"],
                    end_us=end,
                    end_reason="detached" if e["event_type"] == "link_detached" else "credit",
                    is_open=False,
                    duration_s=max(0, end - current["start_us"]) / US_PER_SECOND,
                    run_watermark_us=None,
                )
                starvations.append(current)
                current = None
        if current is not None:
            current.update(end_seq=None, end_us=None, end_reason=None, is_open=True)
            current["duration_s"] = None
            starvations.append(current)
    return starvations


def link_attachments(rows: list[Row]) -> list[Row]:
    """Attached intervals: run_id, broker, link, link_role, start_seq, start_us, end_us|None."""
    intervals = []
    link_events = [
        r
        for r in rows
        if r["event_type"] in ("link_attached", "link_detached", "flow", "transfer")
        or r.get("credit") is not None
        or r.get("available") is not None
    ]
    for (run_id, broker, link), events in _timelines(link_events, "link").items():
        role = None
        attached = False
        current: Row | None = None
        for i, e in enumerate(events):
            if e.get("link_role") is not None:
                role = e["link_role"]
            kind = e["event_type"]
            if kind == "link_attached" or (i == 0 and kind != "link_detached"):
                now = True
            elif kind == "link_detached":
                now = False
            else:
                now = attached
            if now and not attached:
                current = {
                    "run_id": run_id,
                    "broker": broker,
                    "link": link,
                    "link_role": role,
                    "start_seq": e["seq"],
                    "start_us": to_us(e["ts"]),
                    "end_us": None,
                }
            elif attached and not now and current is not None:
                current["end_us"] = to_us(e["ts"])
                intervals.append(current)
                current = None
            attached = now
        if current is not None:
            intervals.append(current)
    return intervals


# --- gold: daily ----------------------------------------------------------------------------


def _days(date_from: date, date_to: date) -> list[date]:
    return [date_from + timedelta(days=i) for i in range((date_to - date_from).days + 1)]


def observed_seconds(bounds: dict[str, tuple[int, int]], run_id: str, day: date) -> float:
    first, last = bounds[run_id]
    return clipped_seconds(first, last, day) if day in days_touched(first, last) else 0.0


def _known(rows: list[Row], column: str) -> list[Any]:
    return [r[column] for r in rows if r[column] is not None]


def queue_flow_daily(rows: list[Row], date_from: date, date_to: date) -> list[Row]:
    bounds = run_bounds(rows)
    wanted = set(_days(date_from, date_to))
    episodes_of: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for ep in queue_flow_episodes(rows):
        episodes_of[(ep["run_id"], ep["broker"], ep["queue"])].append(ep)
    timelines = _timelines(rows, "queue")
    out = []
    for key in set(timelines) | set(episodes_of):
        run_id, broker, queue = key
        events = timelines.get(key, [])
        by_day: dict[date, list[Row]] = defaultdict(list)
        for e in events:
            by_day[day_of(to_us(e["ts"]))].append(e)
        pieces: dict[date, list[tuple[Row, int]]] = defaultdict(list)
        for ep in episodes_of[key]:
            end = ep["end_us"] if ep["end_us"] is not None else bounds[run_id][1]
            for day in days_touched(ep["start_us"], end):
                pieces[day].append((ep, end))
        counters = [e for e in events if e.get("flow_stopped_count") is not None]
        # "a row for every day of its run's observed span from its declaration on, idle days
        # included", through the watermark's day. From its queue_declared; a queue not declared
        # in the log, or seen before its declaration (it existed then), from its earliest event:
        # either way, its earliest ts.
        span: set[date] = set()
        if events:
            first = min(to_us(e["ts"]) for e in events) // US_PER_DAY
            last = bounds[run_id][1] // US_PER_DAY
            span = {EPOCH_DAY + timedelta(days=d) for d in range(first, last + 1)}
        for day in sorted(wanted & (set(by_day) | set(pieces) | span)):
            todays = by_day.get(day, [])
            stops = sum(e["event_type"] == "flow_stopped" for e in todays)
            before = [e for e in counters if day_of(to_us(e["ts"])) < day]
            during = [e for e in counters if day_of(to_us(e["ts"])) == day]
            if before:
                at_start = before[-1]["flow_stopped_count"]
            elif during:
                first = during[0]
                at_start = first["flow_stopped_count"] - (first["event_type"] == "flow_stopped")
            else:
                at_start = None
            if during:
                delta = during[-1]["flow_stopped_count"] - at_start
            elif todays and at_start is None:
                delta = None  # events but no counter ever logged: the change is unknown
            else:
                delta = 0  # no counter value today: it has not moved
            time_stopped = sum(clipped_seconds(ep["start_us"], end, day) for ep, end in pieces[day])
            observed = observed_seconds(bounds, run_id, day)
            starting = [ep for ep, _ in pieces[day] if ep["start_date"] == day]
            over_msgs = _known(starting, "overshoot_msgs")
            over_bytes = _known(starting, "overshoot_bytes")
            ratios = _known(starting, "overshoot_ratio")
            depths = [e["depth_msgs"] for e in todays if e.get("depth_msgs") is not None]
            sizes = [e["depth_bytes"] for e in todays if e.get("depth_bytes") is not None]
            sampled = [
                int(_detail(e)["sample_interval_ms"])
                for e in todays
                if e["event_type"] == "queue_declared"
                and _detail(e).get("sample_interval_ms") is not None
            ]
            out.append(
                {
                    "date": day,
                    "broker": broker,
                    "run_id": run_id,
                    "queue": queue,
                    "flow_stopped_count": stops,
                    "flow_stopped_counter_delta": delta,
                    "counter_check_ok": None if delta is None else stops == delta,
                    "stopped_at_day_start": any(
                        ep["start_us"] < day_start(day) for ep, _ in pieces[day]
                    ),
                    "time_stopped_s": time_stopped,
                    "observed_s": observed,
                    "stopped_share": time_stopped / observed if observed > 0 else None,
                    "episodes": len(starting),
                    "max_depth_msgs": max(depths) if depths else None,
                    "max_depth_bytes": max(sizes) if sizes else None,
                    "max_overshoot_msgs": max(over_msgs) if over_msgs else None,
                    "p95_overshoot_msgs": percentile([float(v) for v in over_msgs], 0.95),
                    "max_overshoot_bytes": max(over_bytes) if over_bytes else None,
                    "p95_overshoot_bytes": percentile([float(v) for v in over_bytes], 0.95),
                    "max_overshoot_ratio": max(ratios) if ratios else None,
                    "sample_interval_ms": max(sampled) if sampled else None,
                }
            )
    return out


def link_starvation_daily(rows: list[Row], date_from: date, date_to: date) -> list[Row]:
    bounds = run_bounds(rows)
    wanted = set(_days(date_from, date_to))

    def split(intervals: list[Row]) -> dict[tuple[Any, ...], list[tuple[Row, int]]]:
        pieces: dict[tuple[Any, ...], list[tuple[Row, int]]] = defaultdict(list)
        for iv in intervals:
            end = iv["end_us"] if iv["end_us"] is not None else bounds[iv["run_id"]][1]
            for day in days_touched(iv["start_us"], end):
                if day in wanted:
                    pieces[(iv["run_id"], iv["broker"], iv["link"], day)].append((iv, end))
        return pieces

    attached = split(link_attachments(rows))
    starved = split(link_starvation_episodes(rows))
    out = []
    for key in set(attached) | set(starved):
        run_id, broker, link, day = key

        def total(pieces: list[tuple[Row, int]], day: date = day) -> float:
            return sum(clipped_seconds(iv["start_us"], end, day) for iv, end in pieces)

        def latest_role(pieces: list[tuple[Row, int]]) -> str | None:
            return max(pieces, key=lambda p: p[0]["start_seq"])[0]["link_role"] if pieces else None

        attached_s, starved_s = total(attached.get(key, [])), total(starved.get(key, []))
        out.append(
            {
                "date": day,
                "broker": broker,
                "run_id": run_id,
                "link": link,
                "link_role": latest_role(starved.get(key, []))
                or latest_role(attached.get(key, [])),
                "starved_s": starved_s,
                "episodes": sum(iv["start_date"] == day for iv, _ in starved.get(key, [])),
                "attached_s": attached_s,
                "starved_share": starved_s / attached_s if attached_s > 0 else None,
            }
        )
    return out


# --- what flow control costs the producers (queue, day) -------------------------------------
#
# Readings (README, "Where DESIGN.md leaves room"): counts are the queue's events of the day;
# ``rejected`` is a ``message_rejected`` whose detail outcome is not ``dropped``, ``dropped`` one
# whose outcome is; ``paged`` an enqueue whose detail says ``paged: true``. A completion counts
# for a queue when it has ``latency_us > 0`` and the queue enqueued that message (same run,
# producer ``link`` and ``message_id``), on the completion's day.

COST_COUNTS = ("enqueued", "dequeued", "rejected", "dropped", "paged", "evicted")


def _detail(row: Row) -> dict[str, Any]:
    import json

    text = row.get("detail")
    return json.loads(text) if text else {}


def _cost_kind(row: Row) -> list[str]:
    kind, detail = row["event_type"], _detail(row)
    if kind == "enqueue":
        return ["enqueued", "paged"] if detail.get("paged") is True else ["enqueued"]
    if kind == "dequeue":
        return ["dequeued"]
    if kind == "message_rejected":
        return ["dropped"] if detail.get("outcome") == "dropped" else ["rejected"]
    if kind == "ring_evicted":
        return ["evicted"]
    return []


def queue_costs_daily(
    rows: list[Row], keys: Iterable[tuple[str, str, str, date]]
) -> dict[tuple[str, str, str, date], Row]:
    """The cost columns of ``queue_flow_daily`` for each (run_id, broker, queue, date) key."""
    counts: dict[tuple[str, str, str, date], dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(COST_COUNTS, 0)
    )
    # A message is its run, broker, producer and id: each broker numbers its own.
    enqueued_on: dict[tuple[str, str, str, int], set[str]] = defaultdict(set)
    for row in rows:
        if row.get("queue") is None:
            continue
        key = (row["run_id"], row["broker"], row["queue"], day_of(to_us(row["ts"])))
        for name in _cost_kind(row):
            counts[key][name] += 1
        if row["event_type"] == "enqueue" and row.get("message_id") is not None:
            message = (row["run_id"], row["broker"], row.get("link"), row["message_id"])
            enqueued_on[message].add(row["queue"])
    delays: dict[tuple[str, str, str, date], list[int]] = defaultdict(list)
    for row in rows:
        latency = row.get("latency_us")
        if row["event_type"] != "transfer_completed" or latency is None or latency <= 0:
            continue
        day = day_of(to_us(row["ts"]))
        message = (row["run_id"], row["broker"], row.get("link"), row["message_id"])
        for queue in enqueued_on.get(message, ()):
            delays[(row["run_id"], row["broker"], queue, day)].append(latency)
    out = {}
    for key in keys:
        held = delays.get(key, [])
        out[key] = {
            **counts.get(key, dict.fromkeys(COST_COUNTS, 0)),
            "held_completions": len(held),
            "completion_p50_us": percentile(held, 0.5),
            "completion_p95_us": percentile(held, 0.95),
            "completion_p99_us": percentile(held, 0.99),
            "completion_max_us": max(held) if held else None,
        }
    return out

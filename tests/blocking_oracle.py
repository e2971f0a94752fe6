"""A pure-Python reference for the blocking tables (DESIGN.md §4, "blocking episodes of every
other kind"), written from the text: silver ``blocking_episodes`` and gold ``blocking_daily``.

It shares no code with jobs/. It reads the log once, keeps the events that say something about a
blocking state, then walks each entity's events in ``seq`` order, opening an episode when the
entity becomes blocked and closing it when it stops being blocked. Times are integer microseconds
since the epoch (UTC).

Readings (DESIGN.md leaves them open; README "Where DESIGN.md leaves room" and the docstrings of
jobs/transforms/blocking.py document the same choices):

* Entities are per (run_id, broker, kind, entity). Kinds and their entity names:
  ``connection`` (the ``connection`` column), ``alarm`` (``detail.resource``, or ``"alarm"``
  when the event names none), ``session_window`` (the ``session``), ``producer_window`` (the
  producer's ``link``).
* ``connection``: a ``connection_blocked`` naming a connection blocks it, a
  ``connection_unblocked`` unblocks it. A second ``connection_blocked`` while blocked (an alarm
  joining a credit-flow stall) starts no second episode. The protocol column is not checked: only
  AMQP 0.9.1 has these frames.
* ``alarm``: ``alarm_raised`` blocks the resource, ``alarm_cleared`` of the same resource ends it.
* ``session_window``: a ``session_window`` event blocks its session when ``detail.incoming_window``
  is 0, unless ``detail.reason`` is ``ended`` (a session that ended is gone, not blocked); any
  other ``session_window`` (a window above 0, or none logged) leaves it open. Whatever closed it:
  a 0 logged without a reason (a collector's frame) counts as closed. Only a publishing session
  is blocked, one with a publisher link attached; one that only consumes is not held back by an
  alarm. A link is attached to a session from the first event naming both with ``link_role``
  ``publisher`` (other than a ``session_window`` or a ``link_detached``) to the link's next
  ``link_detached``, which need not name the session; a later such event attaches it again.
  A window closed before the session's first publisher attaches blocks it from that attach,
  and the detach of its last publisher ends the episode; an episode started at an attach
  reports the closing event's ``protocol``, ``reason`` and ``sample_interval_ms``.
* ``producer_window``, two kinds of producer:
  - a Qpid producer (``protocol`` ``amqp-0-10``, or none logged: DESIGN §2's producer with a
    capacity window, whatever carries it) with a window: each of its events carrying
    ``outstanding`` and a ``capacity`` above 0 (an enqueue, a completion) gives its state,
    blocked when ``outstanding >= capacity``. The log carries no backlog for it, so a full window
    is blocked until a completion reopens it; a completion logged at the same instant makes an
    episode of 0 s. A capacity of 0 or none is no window: no state.
  - an Artemis CORE producer (``protocol`` ``artemis-core``, a ``publisher`` link): its link
    events carrying a ``credit`` give its state, blocked when ``credit == 0`` and
    ``available > 0`` (a credit logged without ``available`` is not known to block), the same
    seconds as its link starvation (README). So, as a link starvation does, its
    ``link_detached`` ends it whatever it carries, and the link is a publisher when the latest
    ``link_role`` logged for it so far (its own, else an earlier event's) is ``publisher``.
  Other protocols' publishers (AMQP 1.0, 0.9.1) wait for link credit or for their connection:
  no producer_window rows, even where their enqueues carry a ``capacity``.
* Episode columns: ``protocol`` and ``reason`` (``detail.reason``) and ``sample_interval_ms``
  (``detail.sample_interval_ms`` when an integer) of the event that started it; an open episode
  has no end and carries its run's watermark (the ts of the run's last event by seq), a closed
  one carries none; ``duration_s`` is end - start, floored at 0 (a clock stepping back).
* Daily: an episode covers [start, end), or [start, watermark) while open; it gives a row to each
  day it touches within the range (a zero-length one its start day, with 0 s), and counts as an
  episode on its start day only. A row's ``protocol`` is that of the touching episode that started
  last (greatest start seq), ``sample_interval_ms`` the largest among them. ``blocked_share`` is
  blocked_s / the run's observed seconds of the day (the day within [run's earliest ts,
  watermark]), None when that is 0. No row for a day an entity was not blocked.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from schemas.broker_events import AMQP_0_10, ARTEMIS_CORE
from schemas.model import US_PER_DAY, US_PER_SECOND

Row = dict[str, Any]
Entity = tuple[str, str, str, str]  # run_id, broker, kind, entity

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(ts: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is UTC (as Spark returns them)."""
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(microseconds=1)


def day_of(us: int) -> date:
    return (EPOCH + timedelta(microseconds=us)).date()


def _midnight(day: date) -> int:
    return to_us(datetime(day.year, day.month, day.day, tzinfo=UTC))


def days_touched(start: int, end: int) -> list[date]:
    """The UTC days [start, end) overlaps; an empty (or reversed) interval touches its start's
    day, so that an episode of 0 s is still counted there."""
    first, last = day_of(start), day_of(max(start, end - 1))
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def clipped_seconds(start: int, end: int, day: date) -> float:
    lo = _midnight(day)
    return max(0, min(end, lo + US_PER_DAY) - max(start, lo)) / US_PER_SECOND


def _detail(row: Row) -> dict[str, Any]:
    text = row.get("detail")
    if not text:
        return {}
    parsed = json.loads(text)
    return parsed if isinstance(parsed, dict) else {}


class _Log:
    """What the blocking tables need from a log, read in one pass: the run bounds and the events
    that may carry a blocking state (a CORE link's every event, for its role; an event naming a
    session's publisher), in seq order."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self.earliest: dict[str, int] = {}
        self.last: dict[str, tuple[int, int]] = {}  # run -> (seq, ts) of its last event by seq
        self.candidates: list[Row] = []
        for row in rows:
            run, ts = row["run_id"], to_us(row["ts"])
            self.earliest[run] = min(self.earliest.get(run, ts), ts)
            if run not in self.last or row["seq"] > self.last[run][0]:
                self.last[run] = (row["seq"], ts)
            if self._may_matter(row):
                self.candidates.append(row)
        self.candidates.sort(key=lambda r: (r["run_id"], r["seq"]))

    @staticmethod
    def _may_matter(row: Row) -> bool:
        kind = row["event_type"]
        return (
            kind.startswith(("connection_", "alarm_"))
            or kind == "session_window"
            or (row.get("link_role") == "publisher" and row.get("session") is not None)
            or (kind == "link_detached" and row.get("link") is not None)
            or (
                row.get("link") is not None
                and row.get("protocol") in (AMQP_0_10, None, ARTEMIS_CORE)
            )
        )

    def watermark(self, run: str) -> int:
        return self.last[run][1]

    def observed_seconds(self, run: str, day: date) -> float:
        first, last = self.earliest[run], self.watermark(run)
        return clipped_seconds(first, last, day) if day in days_touched(first, last) else 0.0


def _states(log: _Log) -> Iterable[tuple[Entity, bool, Row]]:
    """(entity, blocked after the event, event) for every event that tells a blocking state, in
    seq order within each run."""
    roles: dict[tuple[str, str, str], str] = {}
    attached: dict[tuple[str, str, str], set[str | None]] = defaultdict(set)  # session -> links
    sessions_of: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # link -> sessions
    windows: dict[tuple[str, str, str], tuple[bool, Row]] = {}  # the latest session_window

    def session_state(key: tuple[str, str, str], row: Row) -> tuple[Entity, bool, Row]:
        """The session's state as of ``row``: the row of its latest window, at ``row``'s place."""
        closed, window = windows.get(key, (False, row))
        entity = (key[0], key[1], "session_window", key[2])
        return entity, closed, {**window, "seq": row["seq"], "ts": row["ts"]}

    for row in log.candidates:
        run, broker, kind = row["run_id"], row["broker"], row["event_type"]
        detail = _detail(row)
        publisher = row.get("link_role") == "publisher"
        if kind in ("connection_blocked", "connection_unblocked"):
            if row.get("connection") is not None:
                yield (run, broker, "connection", row["connection"]), kind.endswith("_blocked"), row
        elif kind in ("alarm_raised", "alarm_cleared"):
            resource = detail.get("resource")
            name = "alarm" if resource is None else str(resource)
            yield (run, broker, "alarm", name), kind == "alarm_raised", row
        session, link = row.get("session"), row.get("link")
        if kind == "session_window" and session is not None:
            key = (run, broker, session)
            closed = detail.get("incoming_window") == 0 and detail.get("reason") != "ended"
            windows[key] = (closed, row)
            if attached[key]:
                yield (run, broker, "session_window", session), closed, row
        elif kind == "link_detached":  # never an attach; one naming no link detaches nothing
            for other in sorted(sessions_of[(run, broker, link)] if link is not None else ()):
                key = (run, broker, other)
                if link in attached[key]:
                    attached[key].discard(link)
                    if not attached[key]:  # its last publisher gone: held back no more
                        entity, _, state_row = session_state(key, row)
                        yield entity, False, state_row
        elif publisher and session is not None:
            key = (run, broker, session)
            if link not in attached[key]:
                attached[key].add(link)
                if link is not None:
                    sessions_of[(run, broker, link)].add(session)
                if len(attached[key]) == 1:  # it publishes from here: blocked if closed
                    yield session_state(key, row)
        if link is None:
            continue
        if row.get("protocol") in (AMQP_0_10, None):
            capacity, outstanding = row.get("capacity"), row.get("outstanding")
            if capacity is not None and capacity > 0 and outstanding is not None:
                yield (run, broker, "producer_window", link), outstanding >= capacity, row
        elif row.get("protocol") == ARTEMIS_CORE:
            key = (run, broker, link)
            if row.get("link_role") is not None:
                roles[key] = row["link_role"]
            if roles.get(key) != "publisher":
                continue
            if kind == "link_detached":
                yield (run, broker, "producer_window", link), False, row
            elif row.get("credit") is not None:
                available = row.get("available")
                starved = row["credit"] == 0 and available is not None and available > 0
                yield (run, broker, "producer_window", link), starved, row


def blocking_episodes(rows: Iterable[Row]) -> list[Row]:
    """Silver rows, one per episode, with ``*_us`` times (the oracle's convention)."""
    return _episodes(_Log(rows))


def _episodes(log: _Log) -> list[Row]:
    open_episodes: dict[Entity, Row] = {}
    episodes: list[Row] = []
    for entity, blocked, row in _states(log):
        current = open_episodes.get(entity)
        if blocked and current is None:
            run, broker, kind, name = entity
            start = to_us(row["ts"])
            interval = _detail(row).get("sample_interval_ms")
            if isinstance(interval, bool) or not isinstance(interval, int):
                interval = None  # only an integer is an interval
            open_episodes[entity] = {
                "run_id": run,
                "broker": broker,
                "kind": kind,
                "entity": name,
                "protocol": row.get("protocol"),
                "reason": _detail(row).get("reason"),
                "start_seq": row["seq"],
                "start_us": start,
                "start_date": day_of(start),
                "sample_interval_ms": interval,
            }
        elif not blocked and current is not None:
            end = to_us(row["ts"])
            current.update(
                end_seq=row["seq"],
                end_us=end,
                is_open=False,
                duration_s=max(0, end - current["start_us"]) / US_PER_SECOND,
                run_watermark_us=None,
            )
            episodes.append(open_episodes.pop(entity))
    for current in open_episodes.values():
        current.update(
            end_seq=None,
            end_us=None,
            is_open=True,
            duration_s=None,
            run_watermark_us=log.watermark(current["run_id"]),
        )
        episodes.append(current)
    return episodes


def blocking_daily(rows: Iterable[Row], date_from: date, date_to: date) -> list[Row]:
    """Gold rows for the days [date_from, date_to]."""
    log = _Log(rows)
    wanted = {date_from + timedelta(days=i) for i in range((date_to - date_from).days + 1)}
    touching: dict[tuple[Entity, date], list[tuple[Row, int]]] = defaultdict(list)
    for episode in _episodes(log):
        entity = (episode["run_id"], episode["broker"], episode["kind"], episode["entity"])
        end = episode["end_us"]
        if end is None:
            end = log.watermark(episode["run_id"])
        for day in days_touched(episode["start_us"], end):
            if day in wanted:
                touching[(entity, day)].append((episode, end))
    out = []
    for ((run, broker, kind, name), day), pieces in touching.items():
        blocked = sum(clipped_seconds(ep["start_us"], end, day) for ep, end in pieces)
        observed = log.observed_seconds(run, day)
        latest = max((ep for ep, _ in pieces), key=lambda ep: ep["start_seq"])
        sampled = [
            ep["sample_interval_ms"] for ep, _ in pieces if ep["sample_interval_ms"] is not None
        ]
        out.append(
            {
                "date": day,
                "broker": broker,
                "run_id": run,
                "kind": kind,
                "entity": name,
                "protocol": latest["protocol"],
                "blocked_s": blocked,
                "episodes": sum(ep["start_date"] == day for ep, _ in pieces),
                "observed_s": observed,
                "blocked_share": blocked / observed if observed > 0 else None,
                "sample_interval_ms": max(sampled) if sampled else None,
            }
        )
    return out

"""Blocking episodes of every kind (jobs/transforms/blocking.py), DESIGN.md §4: "an AMQP 0.9.1
connection from connection_blocked to connection_unblocked; a publishing session whose incoming
window is closed (0) by an alarm; an alarm from alarm_raised to alarm_cleared; a producer whose
capacity window ... is exhausted", with time_stopped_s's interval rules: clipped per day, carried
over midnight, closed at the watermark, counted on the day they start."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from jobs.transforms.blocking import BLOCKING_KINDS, blocking_daily, blocking_episodes
from jobs.transforms.daily import observed_seconds
from jobs.transforms.episodes import run_bounds
from tests.conftest import at, event, naive

pytestmark = pytest.mark.spark

DAY1, DAY2 = date(2024, 1, 1), date(2024, 1, 2)


def _window(
    seq: int, ts: Any, frames: object, reason: str | None, session: str = "s1"
) -> dict[str, Any]:
    given = {"incoming_window": frames, "reason": reason}
    detail = json.dumps({k: v for k, v in given.items() if v is not None})
    return event(seq, ts, "session_window", session=session, connection="c10", protocol="amqp-1.0",
                 detail=detail)  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    c091 = {"connection": "c091", "session": "c091/channel-1", "protocol": "amqp-0-9-1"}
    qpid = {"queue": "q", "link": "p", "link_role": "publisher", "protocol": "amqp-0-10"}
    return [
        # The 0.9.1 connection stalls on credit flow at 23:00; an alarm joins at 23:30 (logged
        # again, as RabbitMQ does, but the interval runs from the first) until 01:00.
        event(1, at(1, 23), "connection_blocked", **c091, detail='{"reason": "credit_flow:q"}'),
        event(2, at(1, 23, 30), "connection_blocked", **c091, detail='{"reason": "alarm"}'),
        event(3, at(2, 1), "connection_unblocked", **c091, detail='{"reason": "alarm"}'),
        # A Qpid producer fills its window of 3 at 09:00 and gets a completion 30 s later.
        event(4, at(2, 8, 59), "enqueue", **qpid, outstanding=2, capacity=3),
        event(5, at(2, 9), "enqueue", **qpid, outstanding=3, capacity=3),
        event(6, at(2, 9, 0, 30), "transfer_completed", **qpid, outstanding=2, capacity=3),
        # A memory alarm at 10:00 closes the 1.0 sessions' windows for an hour; the alarm itself
        # is never cleared: open at the watermark (12:00). Session s1 has a publisher link (s2
        # only consumes: RabbitMQ closes its window too, but nothing of it is held back).
        event(7, at(2, 9, 30), "link_attached", link="pub", link_role="publisher", session="s1",
              connection="c10", protocol="amqp-1.0", credit=170, available=0),
        event(8, at(2, 9, 30), "link_attached", link="sub", link_role="consumer", session="s2",
              connection="c10", protocol="amqp-1.0", credit=10, available=0),
        event(9, at(2, 10), "alarm_raised", detail='{"resource": "memory"}'),
        _window(10, at(2, 10), 0, "alarm"),
        _window(11, at(2, 10), 0, "alarm", session="s2"),
        _window(12, at(2, 11), 400, "alarm_cleared"),
        _window(13, at(2, 11), 400, "alarm_cleared", session="s2"),
        # A producer with a window of 1 whose transfers complete at once: each enqueue fills its
        # window, and the completion logged at the same instant reopens it: two episodes of 0 s
        # (not one from its first enqueue to the watermark, as without the completions).
        event(14, at(2, 11, 30), "enqueue", queue="q", link="p1", link_role="publisher",
              protocol="amqp-0-10", outstanding=1, capacity=1),
        event(15, at(2, 11, 30), "transfer_completed", queue="q", link="p1",
              link_role="publisher", protocol="amqp-0-10", outstanding=0, capacity=1),
        event(16, at(2, 11, 40), "enqueue", queue="q", link="p1", link_role="publisher",
              protocol="amqp-0-10", outstanding=1, capacity=1),
        event(17, at(2, 11, 40), "transfer_completed", queue="q", link="p1",
              link_role="publisher", protocol="amqp-0-10", outstanding=0, capacity=1),
        # An Artemis CORE producer's byte credit cannot cover its next message from 11:45 to
        # 11:55 (logged as credit 0) while it has messages: its window is exhausted (DESIGN §4).
        # Its enqueue's message window columns are not its state; its link events are.
        event(18, at(2, 11, 44), "flow", link="pc", link_role="publisher",
              protocol="artemis-core", credit=2000, available=6),
        event(19, at(2, 11, 45), "enqueue", queue="a", link="pc", link_role="publisher",
              protocol="artemis-core", outstanding=2, capacity=2),
        event(20, at(2, 11, 45), "transfer", link="pc", link_role="publisher",
              protocol="artemis-core", credit=0, available=5),
        event(21, at(2, 11, 55), "flow", link="pc", link_role="publisher",
              protocol="artemis-core", credit=32000, available=5),
        # A producer whose log names no protocol (hand-written) fills its window of 2 at 11:56
        # and gets a completion at 11:58: DESIGN §2's producer window all the same. An AMQP 1.0
        # publisher whose enqueue fills its window is not: it waits for link credit (starvation).
        event(22, at(2, 11, 56), "enqueue", queue="q", link="pn", link_role="publisher",
              outstanding=2, capacity=2),
        event(23, at(2, 11, 56), "enqueue", queue="q", link="pa", link_role="publisher",
              protocol="amqp-1.0", outstanding=5, capacity=5),
        event(24, at(2, 11, 58), "transfer_completed", queue="q", link="pn",
              link_role="publisher", outstanding=1, capacity=2),
        event(25, at(2, 12), "enqueue", queue="q", link="p", protocol="amqp-0-10", outstanding=2,
              capacity=3),
    ]  # fmt: skip


@pytest.fixture
def results(make_events: Any) -> dict[str, Any]:
    events = make_events(_rows())
    bounds = run_bounds(events)
    episodes = blocking_episodes(events, bounds).cache()
    daily = blocking_daily(episodes, observed_seconds(bounds, DAY1, DAY2), bounds, DAY1, DAY2)
    return {
        "episodes": {(r.kind, r.entity): r.asDict() for r in episodes.collect()},
        "daily": {(r.kind, r.entity, r.date): r.asDict() for r in daily.collect()},
    }


def test_each_kind_gives_one_episode_from_the_event_that_blocks_to_the_one_that_unblocks(results):
    episodes = results["episodes"]
    assert set(episodes) == {
        ("connection", "c091"),
        ("producer_window", "p"),
        ("producer_window", "pc"),
        ("producer_window", "p1"),
        ("producer_window", "pn"),
        ("alarm", "memory"),
        ("session_window", "s1"),
    }
    connection = episodes[("connection", "c091")]
    assert (connection["start_seq"], connection["end_seq"]) == (1, 3)  # not restarted at seq 2
    assert (connection["reason"], connection["protocol"]) == ("credit_flow:q", "amqp-0-9-1")
    assert (connection["start_date"], connection["duration_s"]) == (DAY1, 7200.0)
    producer = episodes[("producer_window", "p")]
    assert (producer["start_seq"], producer["end_seq"], producer["duration_s"]) == (5, 6, 30.0)
    unnamed = episodes[("producer_window", "pn")]
    assert (unnamed["start_seq"], unnamed["end_seq"], unnamed["duration_s"]) == (22, 24, 120.0)
    core = episodes[("producer_window", "pc")]
    assert (core["start_seq"], core["end_seq"], core["duration_s"]) == (20, 21, 600.0)
    assert core["protocol"] == "artemis-core"
    window = episodes[("session_window", "s1")]
    assert (window["start_ts"], window["duration_s"], window["reason"]) == (
        naive(at(2, 10)),
        3600.0,
        "alarm",
    )
    alarm = episodes[("alarm", "memory")]
    assert alarm["is_open"] and alarm["end_ts"] is None and alarm["duration_s"] is None
    assert alarm["run_watermark_ts"] == naive(at(2, 12))


def test_daily_rows_clip_to_each_day_carry_over_midnight_and_close_at_the_watermark(results):
    daily = results["daily"]
    day1 = daily[("connection", "c091", DAY1)]
    day2 = daily[("connection", "c091", DAY2)]
    # Observed: day 1 from the run's first event (23:00), day 2 until the watermark (12:00).
    assert (day1["blocked_s"], day1["episodes"], day1["observed_s"]) == (3600.0, 1, 3600.0)
    assert day1["blocked_share"] == 1.0
    assert (day2["blocked_s"], day2["episodes"], day2["observed_s"]) == (3600.0, 0, 43200.0)
    alarm = daily[("alarm", "memory", DAY2)]
    assert (alarm["blocked_s"], alarm["episodes"]) == (7200.0, 1)  # open: ends at the watermark
    assert daily[("session_window", "s1", DAY2)]["blocked_s"] == 3600.0
    assert daily[("producer_window", "p", DAY2)]["blocked_share"] == pytest.approx(30 / 43200)
    # The window of 1 filled twice, for no time each: never held back.
    assert (
        daily[("producer_window", "p1", DAY2)]["blocked_s"],
        daily[("producer_window", "p1", DAY2)]["episodes"],
    ) == (0.0, 2)
    # Rows only for the days an entity was blocked.
    assert ("producer_window", "p", DAY1) not in daily


def test_every_kind_of_design_section_4_has_one_rule() -> None:
    assert [rule.kind for rule in BLOCKING_KINDS] == [
        "connection",
        "alarm",
        "session_window",
        "producer_window",
    ]


def test_a_closed_session_window_whose_detail_gives_no_reason_blocks_its_publishers(
    make_events: Any,
) -> None:
    """A session_window frame as a collector may log it, ``{"incoming_window": 0}`` with no
    reason, closes the session as the engine's alarm-closed one does (an audit: the missing
    reason compared as null, and the episode was lost); only a session that ended is not."""
    publisher = {"link": "pub", "link_role": "publisher", "connection": "c10",
                 "protocol": "amqp-1.0"}  # fmt: skip
    events = make_events(
        [
            event(1, at(2, 9), "link_attached", session="s1", credit=170, available=0, **publisher),
            event(2, at(2, 9), "link_attached", session="s3", credit=170, available=0, **publisher),
            _window(3, at(2, 10), 0, None),
            _window(4, at(2, 10), 0, None, session="s3"),
            _window(5, at(2, 10, 30), 0, "ended", session="s3"),
            _window(6, at(2, 11), 400, None),
            event(7, at(2, 12), "flow", session="s1", credit=170, available=0, **publisher),
        ]
    )
    episodes = {r.entity: r for r in blocking_episodes(events, run_bounds(events)).collect()}
    assert set(episodes) == {"s1", "s3"}
    assert (episodes["s1"].start_seq, episodes["s1"].end_seq) == (3, 6)
    assert episodes["s1"].duration_s == 3600.0
    assert (episodes["s3"].start_seq, episodes["s3"].end_seq) == (4, 5)  # ended: gone


def test_a_window_given_as_a_float_counts_and_one_that_is_no_number_is_unknown(
    make_events: Any,
) -> None:
    """Ingest accepts any JSON detail: a window of ``0.0`` (a hand-written log) is a closed
    window, and one of ``"closed"`` or ``true`` holds no number, so it closes nothing, instead of
    a strict cast failing the whole job (an audit: CAST_INVALID_INPUT on '0.0')."""
    publisher = {"link": "pub", "link_role": "publisher", "connection": "c10",
                 "protocol": "amqp-1.0"}  # fmt: skip
    events = make_events(
        [
            *(
                event(n, at(2, 9), "link_attached", session=s, credit=170, available=0, **publisher)
                for n, s in ((1, "s1"), (2, "s2"), (3, "s3"))
            ),
            _window(4, at(2, 10), 0.0, "alarm"),
            _window(5, at(2, 10), "closed", "alarm", session="s2"),
            _window(6, at(2, 10), True, "alarm", session="s3"),
            _window(7, at(2, 11), 400.0, "alarm"),
        ]
    )
    episodes = blocking_episodes(events, run_bounds(events)).collect()
    assert [(r.entity, r.start_seq, r.end_seq, r.duration_s) for r in episodes] == [
        ("s1", 4, 7, 3600.0)
    ]

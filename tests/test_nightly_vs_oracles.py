"""The jobs run NIGHT AFTER NIGHT against the independent oracles (tests/metrics_oracle.py,
tests/blocking_oracle.py), on random multi-day logs.

The oracle tests compare the transforms with the oracles on a whole log in one DataFrame. A
night's span is computed from the rows carried into it (silver ``carried_events``) plus its own
bronze days, so a rule that reads an earlier event the carry does not keep is wrong only when
days are processed one at a time. Here the log's days are ingested and processed one at a time,
in date order, into one warehouse, and as one range into another; both must give every silver
and gold row the oracles compute over the whole log. A difference in the nightly warehouse only
is a carry / scope difference; one in both is a transform (or oracle) difference.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from jobs.daily_metrics import run_daily_metrics
from jobs.delta_io import read_table
from jobs.episodes import run_episodes
from jobs.ingest import run_ingest
from schemas.broker_events import BROKER_EVENTS
from schemas.tables import (
    BLOCKING_DAILY,
    BLOCKING_EPISODES,
    LINK_STARVATION_DAILY,
    LINK_STARVATION_EPISODES,
    QUEUE_FLOW_DAILY,
    QUEUE_FLOW_EPISODES,
)
from tests import blocking_oracle, metrics_oracle
from tests import test_blocking_oracle as blocking_logs
from tests import test_metrics_oracle as metrics_logs
from tests import test_queue_costs_oracle as cost_logs
from tests.conftest import at, event, scratch_conf, write_raw_runs
from tests.oracle_rows import oracle_row, row_differences
from tests.test_carried_state import COMPARED

pytestmark = pytest.mark.spark

SEED = 20261202
DAYS = [date(2024, 1, 1) + timedelta(days=n) for n in range(4)]
LOG_END = datetime(2024, 1, 5, tzinfo=UTC)  # runs are cut at the end of the fourth day
RELATIVE = 1e-6
Rows = list[dict[str, Any]]

#: Per table, the key of a row and the oracle that computes it.
KEYS = {
    QUEUE_FLOW_EPISODES.name: ("run_id", "broker", "queue", "start_seq"),
    LINK_STARVATION_EPISODES.name: ("run_id", "broker", "link", "start_seq"),
    BLOCKING_EPISODES.name: ("run_id", "broker", "kind", "entity", "start_seq"),
    QUEUE_FLOW_DAILY.name: ("date", "run_id", "broker", "queue"),
    LINK_STARVATION_DAILY.name: ("date", "run_id", "broker", "link"),
    BLOCKING_DAILY.name: ("date", "run_id", "broker", "kind", "entity"),
}
#: The tables both oracles compute: those tests/test_carried_state.py compares.
TABLES = COMPARED


# --- random multi-day logs, from the oracle tests' generators ---------------------------------


def _stretched(rows: Rows, factor: int) -> Rows:
    """A generated run lasting ``factor`` times as long (equal instants stay equal, a clock step
    back stays one), cut at the log's end: the oracle tests' runs last one or two days."""
    start = min(r["ts"] for r in rows)
    stretched = [{**r, "ts": start + (r["ts"] - start) * factor} for r in rows]
    return [r for r in stretched if r["ts"] < LOG_END]


def _thresholds_logged_once(rows: Rows, queue: str) -> Rows:
    """The queue's thresholds only on the first event that logs them: a night must carry them."""
    columns = metrics_oracle.THRESHOLDS
    seen = False
    out = []
    for row in sorted(rows, key=lambda r: r["seq"]):
        if row.get("queue") == queue and any(row.get(c) is not None for c in columns):
            if seen:
                row = {k: v for k, v in row.items() if k not in columns}
            seen = True
        out.append(row)
    return out


def metrics_run(rng: random.Random, run_id: str) -> Rows:
    """Queues and links of tests/test_metrics_oracle.py over 3-4 days, plus an idle queue
    declared at the start and never seen again, and one queue whose thresholds are logged once."""
    start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randint(0, 14), seconds=7)
    log = metrics_logs.RunLog(rng, run_id, rng.choice(("b1", "b2")), start)
    log.emit("queue_declared", queue="qidle", depth_msgs=0, flow_stopped_count=0,
             flow_stop_count=5, flow_resume_count=2)  # fmt: skip
    names = rng.sample(metrics_logs.QUEUES, 3)
    queues = [metrics_logs.QueueSim(log, q) for q in names]
    links = [
        metrics_logs.LinkSim(log, name, metrics_logs.LINKS[name])
        for name in sorted(metrics_logs.LINKS)
    ]
    while log.t < LOG_END - timedelta(hours=rng.randint(1, 20)):
        log.tick()
        if rng.random() < 0.03:
            log.t += timedelta(hours=rng.randint(1, 5))
        if rng.random() < 0.65:
            rng.choice(queues).step()
        else:
            rng.choice(links).step()
    rows = [r for r in log.rows if r["ts"] < LOG_END]
    return _thresholds_logged_once(rows, names[0])


def blocking_run(rng: random.Random, run_id: str) -> Rows:
    """tests/test_blocking_oracle.py's run (every kind), stretched over 3-4 days."""
    return _stretched(blocking_logs.random_run(rng, run_id, rng.choice(("b1", "b2"))), 3)


def cost_run(rng: random.Random, run_id: str) -> Rows:
    """tests/test_queue_costs_oracle.py's run (completions held for hours, some over midnight),
    its delays stretched with it: a delay runs from the receipt (DESIGN §3), so it is never
    shorter than the time since the enqueue, and the jobs read back that far only."""
    return [
        {**r, "latency_us": r["latency_us"] * 2} if r.get("latency_us") else r
        for r in _stretched(cost_logs.random_run(rng, run_id), 2)
    ]


def session_run(rng: random.Random, run_id: str) -> Rows:
    """Links whose role and session are logged on some of their events only, over 3-4 days:
    AMQP 1.0 publishers whose attach names their session (later events may name it, or their
    role, or neither), detached and attached again; the sessions' windows closed and opened by
    alarms; an Artemis CORE producer whose role is on its attach only; a consumer session."""
    rows: Rows = []
    ts = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randint(6, 20))
    seq = 0

    def emit(kind: str, **fields: Any) -> None:
        nonlocal seq
        seq += 1
        rows.append({"run_id": run_id, "broker": "b1", "seq": seq, "ts": ts,
                     "event_type": kind, **fields})  # fmt: skip

    amqp = {"protocol": "amqp-1.0"}
    publishers = {"w5": "s5", "w6": "s6"}
    for link, session in publishers.items():
        emit("link_attached", link=link, link_role="publisher", session=session, credit=10,
             available=0, **amqp)  # fmt: skip
    emit("link_attached", link="r7", link_role="consumer", session="s7", credit=10, available=0,
         **amqp)  # fmt: skip
    emit("link_attached", link="pc", link_role="publisher", protocol="artemis-core",
         credit=1000, available=0)  # fmt: skip
    while ts < LOG_END - timedelta(hours=2):
        ts += timedelta(seconds=rng.choice((0, 1, 60, 900, 3600, 3 * 3600)))
        pick = rng.random()
        if pick < 0.35:
            link = rng.choice(sorted(publishers))
            fields: dict[str, Any] = {}
            if rng.random() < 0.5:
                fields["link_role"] = "publisher"
            if rng.random() < 0.3:
                fields["session"] = publishers[link]
            kind = rng.choice(("transfer", "transfer", "flow", "link_detached", "link_attached"))
            if kind != "link_detached":
                fields.update(credit=rng.choice((0, 3, 10)), available=rng.choice((0, 2)))
            emit(kind, link=link, **fields, **amqp)
        elif pick < 0.6:
            session = rng.choice(("s5", "s6", "s7"))
            window = rng.choice((0, 0, 400))
            emit("session_window", session=session, detail=json.dumps(
                {"incoming_window": window, "reason": "alarm" if window == 0 else "cleared"}),
                **amqp)  # fmt: skip
        elif pick < 0.7:
            kind = rng.choice(("alarm_raised", "alarm_cleared"))
            emit(kind, detail=json.dumps({"resource": "memory"}))
        elif pick < 0.85:
            emit(rng.choice(("transfer", "flow")), link="pc", protocol="artemis-core",
                 credit=rng.choice((0, 0, 4000)), available=rng.choice((0, 3)))  # fmt: skip
        else:
            emit(rng.choice(("connection_blocked", "connection_unblocked")), connection="k1",
                 protocol="amqp-0-9-1")  # fmt: skip
    return [r for r in rows if r["ts"] < LOG_END]


def _in_ts_order(rows: Rows) -> Rows:
    """The rows numbered 1, 2, ... in ts order (listed order among equal ts)."""
    ordered = sorted(rows, key=lambda r: r["ts"])
    return [{**r, "seq": seq} for seq, r in enumerate(ordered, start=1)]


def _closed(window: int) -> str:
    return json.dumps({"incoming_window": window, "reason": "alarm" if window == 0 else "cleared"})


def session_named_on_one_publisher_event() -> Rows:
    """Run ta: publisher w attaches on day 1 naming no session, names its session s on one
    transfer only, then gets credit naming its role only; publisher w2 attaches to s and
    detaches later on day 1. So no latest event of w names s, and the session's latest
    publisher event is w2's detach: w's transfer must be carried. s's window is closed by an
    alarm on day 3 for 2 h, while w is still attached. The run has rows on day 2, so day 3's
    night spans days 2-3 from the rows carried to day 1."""
    run = {"run_id": "ta", "protocol": "amqp-1.0"}
    return [
        event(1, at(1, 9), "queue_declared", run_id="ta", queue="q", depth_msgs=0),
        event(0, at(1, 9), "link_attached", **run, link="c", link_role="consumer", credit=1,
              available=0),
        event(2, at(1, 10), "link_attached", **run, link="w", link_role="publisher", credit=5,
              available=0),
        event(3, at(1, 11), "transfer", **run, link="w", link_role="publisher", session="s",
              credit=4, available=0),
        event(4, at(1, 12), "flow", **run, link="w", link_role="publisher", credit=5,
              available=0),
        event(10, at(1, 12, 30), "link_attached", **run, link="w2", link_role="publisher",
              session="s", credit=5, available=0),
        event(11, at(1, 13), "link_detached", **run, link="w2", link_role="publisher",
              session="s"),
        event(5, at(2, 12), "enqueue", run_id="ta", queue="q", depth_msgs=1),
        event(9, at(2, 13), "flow", **run, link="c", link_role="consumer", credit=1,
              available=0),
        event(6, at(3, 10), "session_window", **run, session="s", detail=_closed(0)),
        event(7, at(3, 12), "session_window", **run, session="s", detail=_closed(400)),
        event(8, at(3, 13), "dequeue", run_id="ta", queue="q", depth_msgs=0),
    ]  # fmt: skip


def session_publishing_from_day_3() -> Rows:
    """Run tb: sessions s, s2 and s3 have their windows closed on day 1. s's publisher link first
    shows on day 3 at 10:30, while its window is still closed (opened at 12:00); s2's at 11:00,
    after its window opened at 10:00; s3's on day 2 at 08:00, its window opening on day 3 at
    09:00. A session is blocked from its first publisher event on: s from 10:30 to 12:00 on day
    3, s2 never, which the nights of days 1 and 2 need not know, and s3 from day 2 08:00, an
    episode night 2 leaves open and night 3 closes."""
    run = {"run_id": "tb", "protocol": "amqp-1.0"}
    return [
        event(1, at(1, 9), "queue_declared", run_id="tb", queue="q", depth_msgs=0),
        event(2, at(1, 10), "session_window", **run, session="s", detail=_closed(0)),
        event(3, at(1, 10), "session_window", **run, session="s2", detail=_closed(0)),
        event(4, at(1, 11), "enqueue", run_id="tb", queue="q", depth_msgs=1),
        event(5, at(1, 11), "session_window", **run, session="s3", detail=_closed(0)),
        event(6, at(2, 8), "link_attached", **run, link="w3", link_role="publisher",
              session="s3", credit=5, available=0),
        event(7, at(2, 12), "enqueue", run_id="tb", queue="q", depth_msgs=2),
        event(8, at(3, 9), "session_window", **run, session="s3", detail=_closed(400)),
        event(9, at(3, 9, 30), "enqueue", run_id="tb", queue="q", depth_msgs=3),
        event(10, at(3, 10), "session_window", **run, session="s2", detail=_closed(400)),
        event(11, at(3, 10, 30), "link_attached", **run, link="w", link_role="publisher",
              session="s", credit=5, available=0),
        event(12, at(3, 11), "link_attached", **run, link="w2", link_role="publisher",
              session="s2", credit=5, available=0),
        event(13, at(3, 12), "session_window", **run, session="s", detail=_closed(400)),
        event(14, at(3, 13), "dequeue", run_id="tb", queue="q", depth_msgs=0),
    ]  # fmt: skip


def publisher_detached_and_attached_again() -> Rows:
    """Run te: session s's publisher w attaches on day 1 and its window closes at 11:00 (an
    alarm); w detaches on day 2 at 08:00 (the detach naming no session) and shows again on day
    3 at 09:00 (a transfer naming s, with no attach logged); the window opens at 10:00. So s is
    blocked from day 1 11:00 to the detach (13 h + 8 h) and from 09:00 to 10:00 on day 3. Session
    s2's only publisher detaches before its window closes: never blocked."""
    run = {"run_id": "te", "protocol": "amqp-1.0"}
    return [
        event(1, at(1, 9), "queue_declared", run_id="te", queue="q", depth_msgs=0),
        event(2, at(1, 10), "link_attached", **run, link="w", link_role="publisher", session="s",
              credit=5, available=0),
        event(3, at(1, 10), "link_attached", **run, link="w9", link_role="publisher",
              session="s2", credit=5, available=0),
        event(4, at(1, 10, 30), "link_detached", **run, link="w9", link_role="publisher",
              session="s2"),
        event(5, at(1, 11), "session_window", **run, session="s", detail=_closed(0)),
        event(6, at(1, 11), "session_window", **run, session="s2", detail=_closed(0)),
        event(7, at(2, 8), "link_detached", **run, link="w"),
        event(8, at(2, 12), "enqueue", run_id="te", queue="q", depth_msgs=1),
        event(9, at(3, 9), "transfer", **run, link="w", link_role="publisher", session="s",
              credit=4, available=0),
        event(10, at(3, 10), "session_window", **run, session="s", detail=_closed(400)),
        event(11, at(3, 10), "session_window", **run, session="s2", detail=_closed(400)),
        event(12, at(3, 13), "dequeue", run_id="te", queue="q", depth_msgs=0),
    ]  # fmt: skip


def role_before_a_reattach() -> Rows:
    """Run tc: consumer l's role is logged on its first flow and on a flow after it detaches and
    attaches again (the attach logs none); it stays attached to the end, day 3."""
    run = {"run_id": "tc", "link": "l"}
    return [
        event(1, at(1, 9), "queue_declared", run_id="tc", queue="q", depth_msgs=0),
        event(2, at(1, 10), "flow", **run, link_role="consumer", credit=5, available=0),
        event(3, at(1, 11), "link_detached", **run),
        event(4, at(1, 12), "link_attached", **run, credit=5, available=0),
        event(5, at(1, 13), "flow", **run, link_role="consumer", credit=4, available=0),
        event(6, at(2, 12), "flow", **run, credit=3, available=0),
        event(7, at(3, 12), "flow", **run, credit=2, available=0),
    ]  # fmt: skip


def _full(rows: Rows) -> Rows:
    """Every column of every row, as a Parquet read gives them (the cost oracle reads a
    completion's message_id as a key)."""
    return [{**dict.fromkeys(BROKER_EVENTS.names), **r} for r in rows]


def random_log(seed: int = SEED) -> Rows:
    rng = random.Random(seed)
    rows: Rows = []
    for index in range(3):
        rows += metrics_run(rng, f"m{index}")
    for index in range(3):
        rows += blocking_run(rng, f"b{index}")
    for index in range(2):
        rows += cost_run(rng, f"c{index}")
    rows += session_run(rng, "s0")
    return _full(rows)


def targeted_log() -> Rows:
    """Runs whose nights 3 and 4 start from the rows carried to day 1 or 2: a night's span
    reaches back, for every run of the night, to the earliest start of an open episode and to
    each run's latest gold day of each table, so the random runs (episodes open for days, links
    detached days ago) make every night start on day 1 and read no carried row."""
    rows: Rows = []
    for hand in (session_named_on_one_publisher_event, session_publishing_from_day_3,
                 publisher_detached_and_attached_again, role_before_a_reattach):  # fmt: skip
        rows += _in_ts_order(hand())
    # A run on day 4 alone: the fourth night has raw files to ingest.
    rows.append(event(1, at(4, 9), "queue_declared", run_id="td", queue="q", depth_msgs=0))
    return _full(rows)


def clock_stepping_back_over_midnight() -> Rows:
    """Runs whose clock steps back over the midnight of day 2, so that an event dated day 1 is
    logged after some dated day 2; they have rows on day 2, so night 3 would start from the
    rows carried to day 1, which are then not the runs' state at day 2's start (it reads whole
    runs instead, jobs/span_events.py). Run sx: session s's publisher w names it on one day-1
    transfer; the window closes at 00:10 on day 2 and w detaches at 00:20; w's next transfer
    is stamped 23:59 on day 1; the window opens at 01:00. Run sy: consumer link l starves from
    10:00 on day 1, still at 00:05 on day 2; its credit comes in an event stamped 23:59 on day
    1; it starves again from 01:00 to 02:00."""
    session = {"run_id": "sx", "protocol": "amqp-1.0"}
    link = {"run_id": "sy", "link": "l", "link_role": "consumer", "protocol": "amqp-1.0"}
    publisher = {"link": "w", "link_role": "publisher"}
    return [
        event(1, at(1, 9), "queue_declared", run_id="sx", queue="q", depth_msgs=0),
        event(2, at(1, 10), "link_attached", **session, **publisher, credit=5, available=0),
        event(3, at(1, 11), "transfer", **session, **publisher, session="s", credit=4,
              available=0),
        event(4, at(2, 0, 10), "session_window", **session, session="s", detail=_closed(0)),
        event(5, at(2, 0, 20), "link_detached", **session, link="w"),
        event(6, at(1, 23, 59), "transfer", **session, **publisher, session="s", credit=4,
              available=0),
        event(7, at(2, 1), "session_window", **session, session="s", detail=_closed(400)),
        event(8, at(2, 12), "enqueue", run_id="sx", queue="q", depth_msgs=1),
        event(9, at(3, 12), "dequeue", run_id="sx", queue="q", depth_msgs=0),
        event(1, at(1, 9), "queue_declared", run_id="sy", queue="q", depth_msgs=0),
        event(2, at(1, 9, 30), "flow", **link, credit=5, available=0),
        event(3, at(1, 10), "flow", **link, credit=0, available=2),
        event(4, at(2, 0, 5), "flow", **link, credit=0, available=2),
        event(5, at(1, 23, 59), "flow", **link, credit=5, available=0),
        event(6, at(2, 1), "flow", **link, credit=0, available=1),
        event(7, at(2, 2), "flow", **link, credit=5, available=0),
        event(8, at(2, 12), "enqueue", run_id="sy", queue="q", depth_msgs=1),
        event(9, at(3, 12), "dequeue", run_id="sy", queue="q", depth_msgs=0),
        # A run on day 4 alone: the fourth night has raw files to ingest.
        event(1, at(4, 9), "queue_declared", run_id="sz", queue="q", depth_msgs=0),
        # Run sw begins on day 2 and steps back over the midnight of day 3, so night 4 (its
        # span from day 3) reaches back to day 2; run sv, in the scope since day 1, is then read
        # from its rows carried to day 1, not whole. sw lasts a day by night 3 (its depth
        # timeline's buckets then keep their width: jobs/transforms/depth_timeline.py).
        event(1, at(2, 0, 5), "queue_declared", run_id="sw", queue="q", depth_msgs=0),
        event(2, at(3, 0, 10), "flow_stopped", run_id="sw", queue="q", depth_msgs=5),
        event(3, at(2, 23, 59), "enqueue", run_id="sw", queue="q", depth_msgs=6),
        event(4, at(3, 1), "flow_resumed", run_id="sw", queue="q", depth_msgs=1),
        event(5, at(3, 12), "enqueue", run_id="sw", queue="q", depth_msgs=2),
        event(6, at(4, 12), "dequeue", run_id="sw", queue="q", depth_msgs=1),
        event(1, at(1, 9), "queue_declared", run_id="sv", queue="q", depth_msgs=0),
        event(2, at(1, 10), "flow_stopped", run_id="sv", queue="q", depth_msgs=5),
        event(3, at(2, 10), "flow_resumed", run_id="sv", queue="q", depth_msgs=1),
        event(4, at(3, 12), "enqueue", run_id="sv", queue="q", depth_msgs=2),
        event(5, at(4, 12), "dequeue", run_id="sv", queue="q", depth_msgs=1),
    ]  # fmt: skip


def clock_jumping_forward_and_back() -> Rows:
    """Runs whose clock jumps forward over two midnights and steps back: an event dated day 3
    (or 4) is logged before some dated day 1 or 2, so rows of days before a night's span depend
    on an event the night brings (which event ends an episode, the watermark). A night that
    finds such a run reads it whole and recomputes its days from its first (jobs/span_events.py).
    In qa, la, ca and sa a queue stops, a link starves, a connection and a session are blocked
    at 10:00 on day 1; the event that ends it is stamped day 3, and a second one logged after
    it, stamped day 1, ends nothing (a day-2 row of each table keeps night 3's span from day 2
    on, as the latest gold day before it). In wa the clock jumps to day 4 and back to day 1,
    with no episode: day 1's observed seconds run to the watermark. In qb the queue stops on
    day 2 and the step back from day 4 lands on days 1 and 2."""
    queue, memory = {"queue": "q"}, json.dumps({"resource": "memory"})
    link = {"link": "l", "link_role": "consumer", "protocol": "amqp-1.0"}
    connection = {"connection": "k1", "protocol": "amqp-0-9-1"}
    window = {"session": "s", "protocol": "amqp-1.0"}
    publisher = {"link": "w", "link_role": "publisher", "protocol": "amqp-1.0"}

    def run(run_id: str, events: list[tuple[datetime, str, dict[str, Any]]]) -> Rows:
        return [
            event(seq, ts, kind, run_id=run_id, **columns)
            for seq, (ts, kind, columns) in enumerate(events, start=1)
        ]

    def declared(day: int = 1) -> tuple[datetime, str, dict[str, Any]]:
        return at(day, 9), "queue_declared", {**queue, "depth_msgs": 0}

    def quiet_days(first: int, last: int) -> list[tuple[datetime, str, dict[str, Any]]]:
        return [(at(first, 9), "enqueue", {**queue, "depth_msgs": 1}),
                (at(last, 12), "dequeue", {**queue, "depth_msgs": 0})]  # fmt: skip

    return [
        *run("qa", [declared(), (at(1, 10), "flow_stopped", {**queue, "depth_msgs": 5}),
                    (at(3, 10), "flow_resumed", {**queue, "depth_msgs": 1}),
                    (at(1, 11), "flow_resumed", {**queue, "depth_msgs": 1}), *quiet_days(2, 3)]),
        *run("la", [declared(), (at(1, 9, 30), "flow", {**link, "credit": 5, "available": 0}),
                    (at(1, 10), "flow", {**link, "credit": 0, "available": 2}),
                    (at(3, 10), "flow", {**link, "credit": 5, "available": 0}),
                    (at(1, 11), "flow", {**link, "credit": 5, "available": 0}),
                    (at(2, 9), "flow", {**link, "credit": 5, "available": 0}),
                    (at(3, 12), "flow", {**link, "credit": 5, "available": 0})]),
        *run("ca", [declared(), (at(1, 10), "connection_blocked", connection),
                    (at(3, 10), "connection_unblocked", connection),
                    (at(1, 11), "connection_unblocked", connection), *quiet_days(2, 3),
                    (at(2, 9, 30), "connection_blocked", {**connection, "connection": "k2"}),
                    (at(2, 9, 40), "connection_unblocked", {**connection, "connection": "k2"})]),
        *run("sa", [declared(),
                    (at(1, 9, 30), "link_attached",
                     {**publisher, "session": "s", "credit": 5, "available": 0}),
                    (at(1, 10), "session_window", {**window, "detail": _closed(0)}),
                    (at(3, 10), "session_window", {**window, "detail": _closed(400)}),
                    (at(1, 11), "session_window", {**window, "detail": _closed(400)}),
                    *quiet_days(2, 3), (at(2, 9, 30), "alarm_raised", {"detail": memory}),
                    (at(2, 9, 40), "alarm_cleared", {"detail": memory})]),
        *run("wa", [declared(), (at(2, 9), "enqueue", {**queue, "depth_msgs": 1}),
                    (at(4, 9), "enqueue", {**queue, "depth_msgs": 2}),
                    (at(1, 12), "enqueue", {**queue, "depth_msgs": 3}),
                    (at(4, 10), "dequeue", {**queue, "depth_msgs": 2})]),
        *run("qb", [declared(), (at(2, 10), "flow_stopped", {**queue, "depth_msgs": 5}),
                    (at(4, 10), "flow_resumed", {**queue, "depth_msgs": 1}),
                    (at(1, 11), "queue_declared", {"queue": "q2", "depth_msgs": 0}),
                    (at(2, 11), "flow_resumed", {**queue, "depth_msgs": 1}),
                    (at(3, 9), "enqueue", {**queue, "depth_msgs": 2}),
                    (at(4, 12), "dequeue", {**queue, "depth_msgs": 1})]),
    ]  # fmt: skip


LOGS = {
    "random": random_log,
    "targeted": targeted_log,
    "stepped": lambda: _full(clock_stepping_back_over_midnight()),
    "jumping": lambda: _full(clock_jumping_forward_and_back()),
}


# --- the warehouses -----------------------------------------------------------------------


def _tables(spark: Any, conf: Any) -> dict[str, Rows]:
    return {
        table.name: [oracle_row(r.asDict()) for r in read_table(spark, conf, table).collect()]
        for table in TABLES
    }


def processed_nightly(spark: Any, rows: Rows, root: Any) -> dict[str, Any]:
    """The tables after the days processed one at a time in date order ("nightly"); each
    night's read, span and runs carried in."""
    write_raw_runs(root / "raw", rows)
    out: dict[str, Any] = {"reads": [], "spans": [], "history": []}
    nightly = scratch_conf(root, "nightly")
    for day in DAYS:
        run_ingest(spark, nightly, day, day)
        for job in (run_episodes, run_daily_metrics):
            report = job(spark, nightly, day, day)
            out["reads"].append(report["read"])
            out["spans"].append(report["span"])
            out["history"].append(tuple(report["carried_in"]))
    out["nightly"] = _tables(spark, nightly)
    return out


@pytest.fixture(scope="module")
def range_tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rows]:
    """The tables after one range over the days of every log, all in one warehouse: their run
    ids are apart and a run is one timeline (DESIGN §4), so a log's rows there are those of a
    range over it alone (a range reads each run whole; only the nightly warehouses, whose
    reads and spans the claims name, need a log each). Three job calls instead of twelve."""
    root = tmp_path_factory.mktemp("nightly_vs_oracles_range")
    logs = [make() for make in LOGS.values()]
    runs_of_logs = [{r["run_id"] for r in log_rows} for log_rows in logs]
    assert sum(map(len, runs_of_logs)) == len(set().union(*runs_of_logs)), "a run id in two logs"
    write_raw_runs(root / "raw", [r for log_rows in logs for r in log_rows])
    whole = scratch_conf(root, "range")
    run_ingest(spark, whole, DAYS[0], DAYS[-1])
    run_episodes(spark, whole, DAYS[0], DAYS[-1])
    run_daily_metrics(spark, whole, DAYS[0], DAYS[-1])
    tables = _tables(spark, whole)
    # Each log takes its runs' rows: a row of no log's run (a null run_id) would be left out of
    # every comparison, so there must be none.
    runs = set().union(*runs_of_logs)
    for table, table_rows in tables.items():
        strays = [r for r in table_rows if r["run_id"] not in runs]
        assert not strays, f"{table}: rows of no log's run: {strays[:3]}"
    return tables


@pytest.fixture(scope="module", params=sorted(LOGS))
def log(request: pytest.FixtureRequest) -> tuple[str, Rows]:
    return request.param, LOGS[request.param]()


@pytest.fixture(scope="module")
def rows(log: tuple[str, Rows]) -> Rows:
    return log[1]


@pytest.fixture(scope="module")
def warehouses(
    spark: Any,
    log: tuple[str, Rows],
    range_tables: dict[str, Rows],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """The log's nightly warehouse (:func:`processed_nightly`), and its runs' rows of the
    range over every log (:func:`range_tables`) as "range"."""
    name, rows = log
    out = processed_nightly(spark, rows, tmp_path_factory.mktemp(f"nightly_vs_oracles_{name}"))
    runs = {r["run_id"] for r in rows}
    out["range"] = {
        table: [r for r in table_rows if r["run_id"] in runs]
        for table, table_rows in range_tables.items()
    }
    return out


# --- the oracles over the whole log -----------------------------------------------------------


@pytest.fixture(scope="module")
def expected(rows: Rows) -> dict[str, Rows]:
    return oracle_tables(rows)


def oracle_tables(rows: Rows) -> dict[str, Rows]:
    queue_daily = metrics_oracle.queue_flow_daily(rows, DAYS[0], DAYS[-1])
    costs = metrics_oracle.queue_costs_daily(
        rows, [(r["run_id"], r["broker"], r["queue"], r["date"]) for r in queue_daily]
    )
    for r in queue_daily:
        r.update(costs[(r["run_id"], r["broker"], r["queue"], r["date"])])
    return {
        QUEUE_FLOW_EPISODES.name: metrics_oracle.queue_flow_episodes(rows),
        LINK_STARVATION_EPISODES.name: metrics_oracle.link_starvation_episodes(rows),
        BLOCKING_EPISODES.name: blocking_oracle.blocking_episodes(rows),
        QUEUE_FLOW_DAILY.name: queue_daily,
        LINK_STARVATION_DAILY.name: metrics_oracle.link_starvation_daily(rows, DAYS[0], DAYS[-1]),
        BLOCKING_DAILY.name: blocking_oracle.blocking_daily(rows, DAYS[0], DAYS[-1]),
    }


def _differences(actual: Rows, wanted: Rows, table: str) -> list[str]:
    """:func:`row_differences` on the columns the oracles compute (a table has more)."""
    return row_differences(
        actual, wanted, KEYS[table], RELATIVE, side="jobs", expected_columns_only=True
    )


# --- the claims -------------------------------------------------------------------------------


def test_the_random_log_has_what_nightly_processing_must_carry():
    rows = random_log()
    expected = oracle_tables(rows)
    by_run: dict[str, list[datetime]] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r["ts"])
    # Runs cross midnights and last 3-4 days.
    assert sum(len({t.date() for t in ts}) >= 3 for ts in by_run.values()) >= 6
    assert {t.date() for r in rows for t in [r["ts"]]} == set(DAYS)
    blocking = expected[BLOCKING_EPISODES.name]
    assert {e["kind"] for e in blocking} == {
        "connection",
        "alarm",
        "session_window",
        "producer_window",
    }

    def crosses(e: dict[str, Any], end: str = "end_us") -> bool:
        stop = e[end] if e[end] is not None else e["run_watermark_us"]
        return metrics_oracle.day_of(stop) > e["start_date"]

    for table in (QUEUE_FLOW_EPISODES, LINK_STARVATION_EPISODES, BLOCKING_EPISODES):
        episodes = expected[table.name]
        assert sum(crosses(e) for e in episodes) >= 3, table.name
        assert any(e["is_open"] for e in episodes), table.name
    queue_daily = expected[QUEUE_FLOW_DAILY.name]
    idle = [r for r in queue_daily if r["queue"] == "qidle"]
    assert len(idle) >= 9 and all(r["time_stopped_s"] == 0 for r in idle)
    held = [r for r in rows if r["event_type"] == "transfer_completed" and r.get("latency_us")]
    over_midnight = [
        r
        for r in held
        if (r["ts"] - timedelta(microseconds=r["latency_us"])).date() < r["ts"].date()
    ]
    assert len(over_midnight) >= 3 and sum(r["held_completions"] for r in queue_daily) >= 20


def test_later_nights_read_the_carried_state_of_the_targeted_runs_only(log, warehouses):
    """The targeted runs' nights 3 and 4 start after day 1, from the rows carried to the day
    before: without that the nightly warehouse would test nothing the range one does not. The
    random runs' nights all start on day 1 (an episode open since then), so that log checks the
    jobs against the oracles, not the carry ("carried state" is said of a span even when no run
    of it has rows before it)."""
    if log[0] in ("stepped", "jumping"):
        pytest.skip("the runs whose clock steps back are read from their first day (next tests)")
    assert all(read.startswith("carried state + span") for read in warehouses["reads"][2:6])
    starts = {span.split("..")[0] for span in warehouses["spans"][2:]}
    if log[0] == "targeted":
        assert warehouses["spans"][4:6] == ["2024-01-02..2024-01-03"] * 2
    else:
        assert starts == {"2024-01-01"}


def test_a_night_after_a_clock_stepped_back_over_its_midnight_reads_it_whole(log, warehouses):
    """Night 3 of runs sx and sy spans days 2-3; an event dated day 1 was logged after some dated
    day 2, so the rows carried to day 1 are not the runs' state at day 2's start: the night reads
    the whole runs and recomputes them from their first day, day 1, which no run has rows carried
    to before (their tables then match the oracles, the test above). Night 4 of run sw, which
    began on day 2, spans days 3-4 and finds its step over day 3's midnight: it reaches back to
    day 2, from where sw is read whole and run sv from the rows carried to day 1 (before, the
    night read sv whole too)."""
    if log[0] != "stepped":
        pytest.skip("runs sx and sy are in the stepped log")
    assert warehouses["reads"][4:6] == ["carried state + span (2024-01-01..2024-01-03)"] * 2
    assert warehouses["reads"][6:8] == ["carried state + span (2024-01-02..2024-01-04)"] * 2
    assert warehouses["history"][6:8] == [("sv",)] * 2


def test_a_night_after_a_clock_jumped_forward_and_back_recomputes_the_runs_from_their_first_day(
    log, warehouses
):
    """Nights 3 and 4 of the jumping runs find an event dated in them logged before some dated
    day 1 or 2: both jobs recompute those days too, from the runs' first day (their tables then
    match the oracles, the test above), their events all read (no run has rows carried to a day
    before day 1). Nights 1 and 2 read carried state."""
    if log[0] != "jumping":
        pytest.skip("the runs whose clock jumps forward and back are in the jumping log")
    assert all(read.startswith("carried state + span") for read in warehouses["reads"][:4])
    assert warehouses["reads"][4] == "carried state + span (2024-01-01..2024-01-03)"
    assert warehouses["spans"][4:] == [
        *["2024-01-01..2024-01-03"] * 2,
        *["2024-01-01..2024-01-04"] * 2,
    ]


SESSION_LATER_RUN = "tb"
BLOCKING_TABLES = (BLOCKING_EPISODES.name, BLOCKING_DAILY.name)


def _split_off(rows: Rows, run: str) -> tuple[Rows, Rows]:
    """The rows of the other runs, and those of ``run``."""
    return [r for r in rows if r["run_id"] != run], [r for r in rows if r["run_id"] == run]


@pytest.mark.parametrize("order", ["nightly", "range"])
@pytest.mark.parametrize("table", [t.name for t in TABLES])
def test_the_tables_match_the_oracles(log, warehouses, expected, order, table):
    problems = _differences(warehouses[order][table], expected[table], table)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])


@pytest.mark.parametrize("order", ["nightly", "range"])
def test_a_session_is_blocked_from_its_first_publisher_event_night_after_night_as_in_a_range(
    log, warehouses, order
):
    """Run tb: s blocked from its publisher's attach on day 3 to its window's opening, s2 (its
    window opened before its publisher showed) never, s3 from its publisher's attach on day 2
    to its window's opening on day 3 (open after night 2, closed by night 3): night after night
    as in one range (the oracle's agreement is the test above)."""
    if log[0] != "targeted":
        pytest.skip("run tb is in the targeted log")
    _, episodes = _split_off(warehouses[order][BLOCKING_EPISODES.name], SESSION_LATER_RUN)
    assert sorted((e["entity"], e["start_seq"], e["end_seq"]) for e in episodes) == [
        ("s", 11, 13),
        ("s3", 6, 8),
    ]
    _, daily = _split_off(warehouses[order][BLOCKING_DAILY.name], SESSION_LATER_RUN)
    assert sorted((d["entity"], str(d["date"]), d["blocked_s"]) for d in daily) == [
        ("s", "2024-01-03", 5400.0),
        ("s3", "2024-01-02", 57600.0),
        ("s3", "2024-01-03", 32400.0),
    ]


@pytest.mark.parametrize("order", ["nightly", "range"])
def test_a_session_is_blocked_while_a_publisher_is_attached_night_after_night_as_in_a_range(
    log, warehouses, order
):
    """Run te: s blocked from its window's closing on day 1 to its publisher's detach on day 2,
    then again from the publisher's next transfer on day 3 to the window's opening (the nights
    of days 2 and 3 carry the attach and the detach); s2, whose only publisher detached before
    its window closed, never. Run ta: s's publisher, named with its session on one day-1 transfer
    only, still makes s publishing on day 3."""
    if log[0] != "targeted":
        pytest.skip("runs te and ta are in the targeted log")
    tables = warehouses[order]
    _, episodes = _split_off(tables[BLOCKING_EPISODES.name], "te")
    assert sorted((e["entity"], e["start_seq"], e["end_seq"]) for e in episodes) == [
        ("s", 5, 7),
        ("s", 9, 10),
    ]
    blocked = sorted(
        (d["run_id"], d["entity"], str(d["date"]), d["blocked_s"])
        for d in tables[BLOCKING_DAILY.name]
        if d["run_id"] in ("te", "ta") and d["kind"] == "session_window"
    )
    assert blocked == [
        ("ta", "s", "2024-01-03", 7200.0),
        ("te", "s", "2024-01-01", 13 * 3600.0),
        ("te", "s", "2024-01-02", 8 * 3600.0),
        ("te", "s", "2024-01-03", 3600.0),
    ]

"""Blocking episodes of every kind other than queue flow and link credit (DESIGN.md §4), silver
``blocking_episodes`` and gold ``blocking_daily``.

Each kind is one rule of :data:`BLOCKING_KINDS`: which events carry the state, which entity they
concern, and when that entity is blocked after the event. An episode runs from the event that
blocks the entity to the next that unblocks it (only flips count: a second ``connection_blocked``
while blocked, as when an alarm joins a credit-flow stall, does not start another), or stays
open until the run's watermark; the daily rows clip it to each day, as time_stopped_s does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.daily import episodes_per_day
from jobs.transforms.detail import detail_field, detail_whole_number
from jobs.transforms.episodes import episode_span
from jobs.transforms.intervals import true_intervals
from schemas.broker_events import AMQP_0_10, ARTEMIS_CORE

BLOCKING_KEYS = ("run_id", "broker", "kind", "entity")

#: The bronze columns the blocking transforms read.
BLOCKING_INPUT_COLUMNS = (
    "run_id", "broker", "seq", "ts", "event_type", "protocol", "connection", "session", "link",
    "link_role", "capacity", "outstanding", "credit", "available", "detail",
)  # fmt: skip


def _is(*event_types: str) -> Column:
    return F.col("event_type").isin(*event_types)


#: The state a session's window leaves as of an event: closed (its latest ``session_window`` up to
#: the event), whether the session publishes by then, and the seq of that window event
#: (:func:`session_window_events`).
WINDOW_CLOSED, PUBLISHES, WINDOW_SEQ = "_window_closed", "_publishes", "_window_seq"


def attaches_publisher() -> Column:
    """An event that shows a publisher link in its session: one naming both, other than the
    session's own window event or the link's detach. The link is attached to the session from
    its first such event, and again from the first after each of its detaches."""
    return (
        (F.col("link_role") == "publisher")
        & F.col("session").isNotNull()
        & ~_is("session_window", "link_detached")
    )


def _closes_window() -> Column:
    """A ``session_window`` event that closes its session's window: 0 logged, unless the session
    ended (it is gone, not blocked). A 0 whose detail gives no reason (a collector's frame, a
    hand-written log) is closed all the same: RabbitMQ closes it for an alarm only."""
    return (detail_whole_number("incoming_window") == 0) & F.coalesce(
        detail_field("reason") != "ended", F.lit(True)
    )


#: A row's change to its session's count of attached publisher links (:func:`_publisher_changes`).
_PUBLISHERS_CHANGE = "_publishers_change"


def _publisher_changes(events: DataFrame, read: list[str]) -> DataFrame:
    """The events at which a session's publisher links attach or detach: per (session, link), its
    first :func:`attaches_publisher` event and the first after each of the link's detaches, and
    those detaches, each with :data:`_PUBLISHERS_CHANGE` (+1 where the link attaches, -1 where
    an attached one detaches, else 0). A link's detach may not name its session: it is the
    link's, for every session the link was shown in. The publishers' events are aggregated, not
    sorted: once per (session, link), and those after a detach once per detach."""
    pair = ["run_id", "broker", "session", "link"]
    link = ["run_id", "broker", "link"]
    publishers = events.where(attaches_publisher()).select(*read)
    detached = events.where(_is("link_detached") & F.col("link").isNotNull())
    first = F.min_by(F.struct(*read), "seq").alias("_first")
    firsts = publishers.groupBy(*pair).agg(first).select("_first.*")
    after_detaches = (
        publishers.join(F.broadcast(detached.select(*link, F.col("seq").alias("_after"))), link)
        .where(F.col("seq") > F.col("_after"))
        .groupBy(*pair, "_after")
        .agg(first)
        .select("_first.*")
    )
    attaches = (
        firsts.unionByName(after_detaches)
        .dropDuplicates([*pair, "seq"])  # the first after two detaches, or after none
        .withColumn("_attaches", F.lit(True))
    )
    detaches = (
        detached.select(*[c for c in read if c != "session"])
        .join(F.broadcast(firsts.where(F.col("link").isNotNull()).select(*pair)), link)
        .withColumn("_attaches", F.lit(False))
    )
    in_order = Window.partitionBy(*pair).orderBy("seq")
    attached = F.col("_attaches")
    was_attached = F.coalesce(F.lag(attached).over(in_order), F.lit(False))
    return (
        attaches.unionByName(detaches)
        .withColumn(_PUBLISHERS_CHANGE, attached.cast("int") - was_attached.cast("int"))
        .drop("_attaches")
    )


def session_window_events(events: DataFrame) -> DataFrame:
    """The events that tell a session's blocking state, each with :data:`WINDOW_CLOSED`,
    :data:`PUBLISHES` and :data:`WINDOW_SEQ` as of it: the session's ``session_window`` events,
    and the events at which its publisher links attach (an attach, a flow, a transfer: its first
    event naming the link as a ``publisher`` of the session; a span's carried link event,
    jobs/transforms/carry.py) and detach (:func:`_publisher_changes`).

    A session is blocked while it publishes, at least one publisher link attached, and its window
    is closed: a window closed before the session has a publisher holds nothing back until the
    publisher shows, nor after its last publisher detached (RabbitMQ closes every session's
    window on an alarm; one that only consumes is not held back), and what a later event shows
    cannot change an earlier day, so a night computes the same rows as a run over the whole
    range. A publisher's attach or detach reports the window event it finds: its protocol and
    detail (the reason, a collector's sample interval)."""
    session = ["run_id", "broker", "session"]
    read = [*session, "link", "seq", "ts", "event_type", "protocol", "detail", "link_role"]
    windows = (
        events.where(_is("session_window") & F.col("session").isNotNull())
        .select(*read)
        .withColumn(_PUBLISHERS_CHANGE, F.lit(0))
    )
    in_order = Window.partitionBy(*session).orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    is_window = _is("session_window")
    window = F.struct(
        _closes_window().alias("closed"), "seq", "protocol", "detail"
    )  # a window event's, non-null even where its fields are
    latest_window = F.last(F.when(is_window, window), ignorenulls=True).over(upto_here)
    return (
        windows.unionByName(_publisher_changes(events, read))
        .withColumn("_window", latest_window)
        .withColumns(
            {
                WINDOW_CLOSED: F.coalesce(F.col("_window.closed"), F.lit(False)),
                WINDOW_SEQ: F.col("_window.seq"),
                PUBLISHES: F.sum(_PUBLISHERS_CHANGE).over(upto_here) > 0,
                # A window event's latest window is itself.
                "protocol": F.col("_window.protocol"),
                "detail": F.col("_window.detail"),
            }
        )
        .drop("_window", _PUBLISHERS_CHANGE)
    )


def _is_qpid_producer() -> Column:
    """An event of a Qpid producer with a window: outstanding and capacity (seed 001). A log
    that names no protocol (a hand-written one) gets the same rule: DESIGN §2's producer with a
    capacity window of uncompleted transfers, whatever the broker."""
    return (
        ((F.col("protocol") == AMQP_0_10) | F.col("protocol").isNull())
        & F.col("link").isNotNull()
        & (F.col("capacity") > 0)
        & F.col("outstanding").isNotNull()
    )


def _is_core_link_event() -> Column:
    """An Artemis CORE link event that may tell a producer's window: a credit, a detach, or the
    link's role. Only rows logged with the CORE protocol count here (link starvation reads every
    event of the link): a producer window is a CORE producer's, known by its protocol."""
    return (
        (F.col("protocol") == ARTEMIS_CORE)
        & F.col("link").isNotNull()
        & (
            F.col("credit").isNotNull()
            | (F.col("event_type") == "link_detached")
            | F.col("link_role").isNotNull()
        )
    )


#: The role logged for a CORE link up to its event, and the seq of the event that logged it
#: (:func:`producer_window_events`).
ROLE_SO_FAR, ROLE_SEQ = "_role_so_far", "_role_seq"


def _is_core_producer_state() -> Column:
    """A link event of an Artemis CORE producer with a window (seed 003): its byte credit, or its
    detach, on a link whose role so far is ``publisher``."""
    return (
        (F.col("protocol") == ARTEMIS_CORE)
        & (F.col(ROLE_SO_FAR) == "publisher")
        & (F.col("credit").isNotNull() | (F.col("event_type") == "link_detached"))
    )


def producer_window_events(events: DataFrame) -> DataFrame:
    """The events that may tell a producer window's state: a Qpid producer's as they are; a CORE
    link's with :data:`ROLE_SO_FAR`, the latest ``link_role`` logged for the link up to the event,
    as link starvation carries it (DESIGN §3 has link events carry credit and available, not the
    role: one logged on the attach only still makes the link's credits a publisher's). Only the
    CORE link events are sorted for it, not the Qpid producers' enqueues."""
    in_order = Window.partitionBy("run_id", "broker", "link").orderBy("seq")
    upto_here = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    role_seq = F.when(F.col("link_role").isNotNull(), F.col("seq"))
    qpid = events.where(_is_qpid_producer()).withColumns(
        {ROLE_SO_FAR: F.lit(None).cast("string"), ROLE_SEQ: F.lit(None).cast("long")}
    )
    core = events.where(_is_core_link_event()).withColumns(
        {
            ROLE_SO_FAR: F.last("link_role", ignorenulls=True).over(upto_here),
            ROLE_SEQ: F.last(role_seq, ignorenulls=True).over(upto_here),
        }
    )
    return qpid.unionByName(core)


@dataclass(frozen=True)
class BlockingKind:
    """One kind of blocking: its events, the entity they concern, and whether an event leaves the
    entity blocked (evaluated on those events only); ``source``, when the rule reads more than an
    event's own columns."""

    kind: str
    events: Callable[[], Column]
    entity: Callable[[], Column]
    blocked: Callable[[], Column]
    why: str
    #: When the rule reads a column the row alone does not give: the events it is evaluated on,
    #: with that column.
    source: Callable[[DataFrame], DataFrame] | None = None
    #: The seq of an earlier event a state rests on (read from ``source``), which a later span
    #: needs with the state (jobs/transforms/carry.py).
    rests_on: Callable[[], Column] | None = None


BLOCKING_KINDS: tuple[BlockingKind, ...] = (
    BlockingKind(
        "connection",
        lambda: _is("connection_blocked", "connection_unblocked") & F.col("connection").isNotNull(),
        lambda: F.col("connection"),
        lambda: F.col("event_type") == "connection_blocked",
        "an AMQP 0.9.1 connection from connection_blocked to connection_unblocked",
    ),
    BlockingKind(
        "alarm",
        lambda: _is("alarm_raised", "alarm_cleared"),
        lambda: F.coalesce(detail_field("resource"), F.lit("alarm")),
        lambda: F.col("event_type") == "alarm_raised",
        "an alarm (per resource) from alarm_raised to alarm_cleared",
    ),
    BlockingKind(
        "session_window",
        lambda: F.col("session").isNotNull(),
        lambda: F.col("session"),
        lambda: F.col(PUBLISHES) & F.col(WINDOW_CLOSED),
        "a publishing session whose incoming window is closed (0): RabbitMQ closes every "
        "session's on an alarm; a session is held back while a publisher link of it is attached "
        "(from its first event naming the session to its detach), one that only consumes is not",
        source=session_window_events,
        # The state at a publisher's attach or detach rests on the window event before it.
        rests_on=lambda: F.when(~_is("session_window"), F.col(WINDOW_SEQ)),
    ),
    BlockingKind(
        "producer_window",
        # Two windows (DESIGN §4: "capacity window (or CORE byte credit)"): a Qpid producer's of
        # uncompleted transfers (seed 001), on its events; an Artemis CORE producer's byte credit
        # (seed 003), on its link events, logged as 0 while it cannot cover the next message.
        # AMQP 1.0 publishers wait for link credit (link starvation) or their connection.
        # A CORE producer is blocked for the same seconds as its link starves: its detach ends
        # it, whatever credit it logs, and its role may be logged on its attach only.
        lambda: _is_qpid_producer() | _is_core_producer_state(),
        lambda: F.col("link"),
        lambda: F.when(_is_qpid_producer(), F.col("outstanding") >= F.col("capacity")).otherwise(
            (F.col("event_type") != "link_detached")
            & (F.col("credit") == 0)
            & (F.coalesce(F.col("available"), F.lit(0)) > 0)
        ),
        "a producer whose window is exhausted while it has work: a Qpid producer's "
        "(outstanding >= capacity; a transfer completed at once reopens the window at the "
        "instant it filled it, the engine logs that completion: an episode of 0 s) or an Artemis "
        "CORE producer's byte credit (credit 0 with messages available, until the link detaches)",
        source=producer_window_events,
        rests_on=lambda: F.col(ROLE_SEQ),
    ),
)


def blocking_states(events: DataFrame) -> DataFrame:
    """Every event that carries a blocking state: the keys, seq, ts, event_type, ``blocked``, the
    ``protocol`` and ``reason`` reported with an episode that starts there, and ``rests_on_seq``
    (:attr:`BlockingKind.rests_on`, else null)."""
    frames = [_states_of(rule, events) for rule in BLOCKING_KINDS]
    states = frames[0]
    for frame in frames[1:]:
        states = states.unionByName(frame)
    return states


def _states_of(rule: BlockingKind, events: DataFrame) -> DataFrame:
    """The events of one kind that carry its state (:func:`blocking_states`)."""
    source = events if rule.source is None else rule.source(events)
    return source.where(rule.events()).select(
        "run_id",
        "broker",
        F.lit(rule.kind).alias("kind"),
        rule.entity().alias("entity"),
        "seq",
        "ts",
        "event_type",
        F.coalesce(rule.blocked(), F.lit(False)).alias("blocked"),
        "protocol",
        detail_field("reason").alias("reason"),
        detail_whole_number("sample_interval_ms").alias("sample_interval_ms"),
        (F.lit(None).cast("long") if rule.rests_on is None else rule.rests_on()).alias(
            "rests_on_seq"
        ),
    )


def blocking_episodes(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per blocking episode, in the ``blocking_episodes`` layout."""
    episodes = true_intervals(
        blocking_states(events),
        BLOCKING_KEYS,
        "blocked",
        carry=("protocol", "reason", "sample_interval_ms"),
    ).join(bounds.select("run_id", "run_watermark_ts"), "run_id")
    return episodes.select(
        *BLOCKING_KEYS,
        "protocol",
        "reason",
        *episode_span(),
        "sample_interval_ms",  # begun on a collector's sample: approximate (DESIGN §6)
    )


def blocking_daily(
    episodes: DataFrame, observed: DataFrame, bounds: DataFrame, date_from: date, date_to: date
) -> DataFrame:
    """Rows of ``blocking_daily`` for the days [date_from, date_to] from the silver episodes that
    overlap them; ``observed`` is :func:`jobs.transforms.daily.observed_seconds` of the runs."""
    blocked = episodes_per_day(
        episodes,
        bounds,
        BLOCKING_KEYS,
        date_from,
        date_to,
        seconds="blocked_s",
        latest=F.max_by("protocol", "start_seq").alias("protocol"),
        more=(F.max("sample_interval_ms").alias("sample_interval_ms"),),
    )
    observed_s = F.coalesce(F.col("observed_s"), F.lit(0.0))
    return blocked.join(observed, ["run_id", "date"], "left").select(
        "date",
        "broker",
        "run_id",
        "kind",
        "entity",
        "protocol",
        "blocked_s",
        "episodes",
        observed_s.alias("observed_s"),
        F.when(observed_s > 0, F.col("blocked_s") / observed_s).alias("blocked_share"),
        "sample_interval_ms",
    )

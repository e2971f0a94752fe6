"""The events that carry a run's state over midnight: silver ``carried_events``.

Every rule of DESIGN §4 reads a run's events in ``seq`` order and asks of earlier days only for
the latest event of some kind: the latest flow_stopped / flow_resumed of a queue (is it stopped at
00:00?), the latest non-null threshold, counter or depth, the queue's event right before an
episode's start (its trigger), a link's latest credit, role, attach / detach and detach (and the
role in force at that attach or detach) and its first event, a session's latest event naming
each of its publisher links, a blocking entity's latest state (and the role it rests on), and the
run's first event (where its observation starts). Those events, per run and day, are this table.
A span of days is then computed from the rows carried to the day before it plus the span's own
bronze events: the same inputs to the same transforms, whatever the run's length (the stretch
before the span only yields episodes that start before it, which the jobs do not write; see
:mod:`jobs.episodes`).

The kinds are tables of rules (:data:`QUEUE_KINDS`, :data:`LINK_KINDS`,
:data:`LINK_FIRST_KINDS`, :data:`SESSION_KINDS`; a link's role at its attach needs its own pass):
adding a rule that reads another kind of earlier event means adding its kind here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.blocking import attaches_publisher, blocking_states
from jobs.transforms.daily import is_link_event
from jobs.transforms.depth_timeline import CARRIED_COLUMNS as TIMELINE_CARRIED_COLUMNS
from jobs.transforms.episodes import CARRIED_COLUMNS as EPISODE_CARRIED_COLUMNS
from jobs.transforms.timeutil import utc_date


def _not_null(column: str) -> Callable[[], Column]:
    return lambda: F.col(column).isNotNull()


#: Per queue, the latest event of each kind: any event (the trigger of an episode starting at the
#: span's first event; the queue's days, jobs/transforms/daily.py), its flow state, and each
#: column whose latest non-null value an episode or the depth timeline carries.
QUEUE_KINDS: dict[str, Callable[[], Column]] = {
    "queue_event": lambda: F.lit(True),
    "queue_flow_change": lambda: F.col("event_type").isin("flow_stopped", "flow_resumed"),
    **{
        f"queue_{column}": _not_null(column)
        for column in dict.fromkeys((*EPISODE_CARRIED_COLUMNS, *TIMELINE_CARRIED_COLUMNS))
    },
}

#: Per link, the latest event of each kind: its credit state (a starvation's start), its role,
#: its attach / detach, its detach, and any link event (its attached time,
#: jobs/transforms/daily.py). The detach too: the latest attach may be a re-attach, and an
#: earlier carried row (the link's first event, a role) would otherwise open an interval that
#: the re-attach does not end.
LINK_KINDS: dict[str, Callable[[], Column]] = {
    "link_event_any": lambda: F.lit(True),
    "link_credit_state": lambda: (
        F.col("credit").isNotNull() | (F.col("event_type") == "link_detached")
    ),
    "link_role": _not_null("link_role"),
    "link_attachment": lambda: F.col("event_type").isin("link_attached", "link_detached"),
    "link_detach": lambda: F.col("event_type") == "link_detached",
    "link_event": is_link_event,
}

#: Per link, its FIRST link event: a link seen before any attach is attached from it, with the
#: role logged up to it (jobs/transforms/daily.py ``link_attachments``).
LINK_FIRST_KINDS: dict[str, Callable[[], Column]] = {"link_first": is_link_event}

#: Per session and link (the session level's ``part``), the latest event showing the link as a
#: publisher of the session: with the link's latest detach (:data:`LINK_KINDS`), whether it is
#: still attached, so whether the session publishes and its closed window blocks
#: (jobs/transforms/blocking.py ``session_window_events``); the link's own latest events may
#: name its role without its session.
SESSION_KINDS: dict[str, Callable[[], Column]] = {
    "session_publisher": attaches_publisher,
}

#: The run's latest event (its watermark when the span has none) and first by ts.
RUN_KINDS = ("run_last", "run_first")


def _on_each_day_carried(per_day: DataFrame, first: date, last: date) -> DataFrame:
    """``per_day`` (rows with a ``date``) once for each day of [first, last] on or after that
    date, as ``carried_to``: what a day's rows tell still counts at each later day's end."""
    days = per_day.sparkSession.range(1).select(
        F.explode(F.sequence(F.lit(first), F.lit(last))).alias("carried_to")
    )
    return per_day.join(F.broadcast(days), F.col("date") <= F.col("carried_to"))


def _entity_seqs(events: DataFrame, first: date, last: date) -> DataFrame:
    """(run_id, seq, carried_to) of the latest event of each queue, link and session kind (and a
    link's first event) and of the run's first and last events, for each day of [first, last]:
    one aggregation over the events per (run, broker, queue, link, session, date), then one over
    those few rows per entity and day."""
    seq = F.col("seq")
    on_queue, on_link = F.col("queue").isNotNull(), F.col("link").isNotNull()
    on_session = F.col("session").isNotNull()
    per_day = events.groupBy("run_id", "broker", "queue", "link", "session", "date").agg(
        *(F.max(F.when(on_queue & kind(), seq)).alias(name) for name, kind in QUEUE_KINDS.items()),
        *(F.max(F.when(on_link & kind(), seq)).alias(name) for name, kind in LINK_KINDS.items()),
        *(
            F.min(F.when(on_link & kind(), seq)).alias(name)
            for name, kind in LINK_FIRST_KINDS.items()
        ),
        *(
            F.max(F.when(on_session & kind(), seq)).alias(name)
            for name, kind in SESSION_KINDS.items()
        ),
        F.max(seq).alias("run_last"),
        F.min_by(seq, "ts").alias("run_first"),
        F.min("ts").alias("_first_ts"),
    )
    none = F.lit(None).cast("string")

    def level(name: str, broker: Column, key: Column, part: Column = none) -> Column:
        return F.struct(
            F.lit(name).alias("level"), broker.alias("broker"), key.alias("key"), part.alias("part")
        )

    levels = F.explode(
        F.array(
            level("queue", F.col("broker"), F.col("queue")),
            level("link", F.col("broker"), F.col("link")),
            # A session's publishers are counted link by link (SESSION_KINDS).
            level("session", F.col("broker"), F.col("session"), F.col("link")),
            level("run", none, none),
        )
    )
    kinds = [*QUEUE_KINDS, *LINK_KINDS, *SESSION_KINDS, "run_last"]
    per_entity = (
        _on_each_day_carried(per_day, first, last)
        .select(
            "run_id",
            "carried_to",
            levels.alias("_entity"),
            *kinds,
            *LINK_FIRST_KINDS,
            "run_first",
            "_first_ts",
        )
        .where((F.col("_entity.level") == "run") | F.col("_entity.key").isNotNull())
        .groupBy("run_id", "carried_to", "_entity")
        .agg(
            *(F.max(name).alias(name) for name in kinds),
            *(F.min(name).alias(name) for name in LINK_FIRST_KINDS),
            F.min_by("run_first", "_first_ts").alias("run_first"),
        )
    )
    level_name = F.col("_entity.level")
    seqs = (
        F.when(level_name == "queue", F.array(*QUEUE_KINDS))
        .when(level_name == "link", F.array(*LINK_KINDS, *LINK_FIRST_KINDS))
        .when(level_name == "session", F.array(*SESSION_KINDS))
        .otherwise(F.array(*RUN_KINDS))
    )
    return per_entity.select("run_id", "carried_to", F.explode(seqs).alias("seq"))


def _role_at_attachment_seqs(events: DataFrame, first: date, last: date) -> DataFrame:
    """(run_id, seq, carried_to) of the role event in force at each link's latest attach or
    detach up to each day, for the links with an attach or detach that names no role: a link's
    attached interval takes the role logged up to its attach (jobs/transforms/daily.py
    ``link_attachments``), and the latest role event (:data:`LINK_KINDS`) may come after it.
    Only those links have their role events sorted."""
    keys = ["run_id", "broker", "link"]
    attachment = F.col("event_type").isin("link_attached", "link_detached")
    named = F.col("link").isNotNull()
    roleless = events.where(named & attachment & F.col("link_role").isNull()).select(*keys)
    in_order = Window.partitionBy(*keys).orderBy("seq")
    before = in_order.rowsBetween(Window.unboundedPreceding, -1)
    role_seq = F.last(F.when(F.col("link_role").isNotNull(), F.col("seq")), ignorenulls=True)
    per_day = (
        events.where(named & (attachment | F.col("link_role").isNotNull()))
        .join(F.broadcast(roleless.distinct()), keys, "left_semi")
        .select(
            *keys,
            "seq",
            "date",
            attachment.alias("_attachment"),
            role_seq.over(before).alias("_role_seq"),
        )
        .where(F.col("_attachment"))
        .groupBy(*keys, "date")
        .agg(F.max("seq").alias("_latest"), F.max_by("_role_seq", "seq").alias("_role_seq"))
    )
    return (
        _on_each_day_carried(per_day, first, last)
        .groupBy(*keys, "carried_to")
        .agg(F.max_by("_role_seq", "_latest").alias("seq"))
        .select("run_id", "seq", "carried_to")
    )


def _blocking_seqs(events: DataFrame, first: date, last: date) -> DataFrame:
    """(run_id, seq, carried_to) of each blocking entity's latest state event for each day, and
    of the earlier event that state rests on (``rests_on_seq``: a CORE producer's role)."""
    keys = ["run_id", "broker", "kind", "entity"]
    per_day = (
        blocking_states(events)
        .groupBy(*keys, utc_date("ts").alias("date"))
        .agg(F.max("seq").alias("seq"), F.max_by("rests_on_seq", "seq").alias("rests_on_seq"))
    )
    latest = (
        _on_each_day_carried(per_day, first, last)
        .groupBy(*keys, "carried_to")
        .agg(F.max("seq").alias("seq"), F.max_by("rests_on_seq", "seq").alias("rests_on_seq"))
    )
    return latest.select(
        "run_id", F.explode(F.array("seq", "rests_on_seq")).alias("seq"), "carried_to"
    )


def carried_events(events: DataFrame, first: date, last: date) -> DataFrame:
    """The ``carried_events`` rows of the days [first, last]: for each day, the events of
    ``events`` that carry each run's state over its end, with ``carried_to`` that day.

    ``events`` are a run's events up to ``last`` (bronze columns and ``date``), or the rows
    carried to the day before ``first`` plus the events of [first, last]: the latest event of a
    kind among those is the latest of the whole run."""
    seqs = (
        _entity_seqs(events, first, last)
        .unionByName(_role_at_attachment_seqs(events, first, last))
        .unionByName(_blocking_seqs(events, first, last))
        .where(F.col("seq").isNotNull())
        .distinct()
    )
    return events.join(F.broadcast(seqs), ["run_id", "seq"])

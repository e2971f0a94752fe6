"""The broker kind of every entity a recommendation is about (DESIGN.md §4: "Advice is given in the
knobs of the entity's own broker"), told from the event log in this one place.

An entity's events say which broker it lives on: Artemis address state in the detail
(``detail.address``, on every enqueue, rejection and flow event of an address), credit counted in
bytes (``detail.credit_unit``), the CORE protocol or a client's word for it
(``detail.broker_product``, collectors/proton_links.py) -> Artemis; AMQP 0-10 -> Qpid; AMQP 0.9.1,
and AMQP 1.0 without Artemis detail -> RabbitMQ. A queue with flow thresholds in force is
Qpid's when nothing but AMQP 1.0 says otherwise: Qpid speaks AMQP 1.0 too, but not 0.9.1, and
Artemis's addresses log a stop size of their own (their max-size-bytes). :data:`BROKER_KIND_RULES`
is the order in which the evidence counts: the first kind whose evidence an entity has is its kind.

Where an entity's own events say nothing:
- a queue (declared and never used, only prefilled, or a log written before protocols were logged)
  is its broker's when the broker's events say one kind only (a broker is one product), else
  Qpid's, whose queue front end the plain engine models;
- a link is its queue's (the queue it delivered from last) when that queue's kind is said (by its
  own events or its broker's); a link into an Artemis queue is Artemis's whatever its protocol;
- a link that carries a credit and of whose broker nothing in the log says anything is
  RabbitMQ's: a link credit is AMQP 1.0's knob, which of the brokers modelled RabbitMQ offers
  (the plain engine's Qpid consumers log no credit); any other such link is Qpid's. A queue's
  flow thresholds say Qpid for the queue only: a link takes the kind its queue's protocols say,
  as before (its credit is the receiving client's setting, advised in AMQP 1.0's terms).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.transforms.detail import detail_field
from schemas.broker_events import (
    AMQP_0_9_1,
    AMQP_0_10,
    AMQP_1_0,
    ARTEMIS_CORE,
    BROKER_ARTEMIS,
    BROKER_PRODUCT_ARTEMIS,
    BROKER_QPID,
    BROKER_RABBITMQ,
    RABBITMQ_ORIGINS,
)


def _artemis_evidence() -> Column:
    # Only Artemis counts credit in bytes (CORE windows), and says so in the detail; a client's
    # link recorder says so when it is told (collectors/proton_links.py).
    return (
        detail_field("address").isNotNull()
        | (detail_field("credit_unit") == "bytes")
        | (F.col("protocol") == ARTEMIS_CORE)
        | (detail_field("broker_product") == BROKER_PRODUCT_ARTEMIS)
    )


def qpid_thresholds_on() -> Column:
    """Whether an event logs a flow threshold in force (any of the four non-zero)."""
    # A Qpid queue whose clients speak AMQP 1.0 was read as RabbitMQ's and told to set an
    # x-max-length (an audit). RabbitMQ's queues log thresholds 0 (off) unless a scenario gives
    # them a default queue limit; Artemis's log their address's max-size-bytes as the stop size.
    return F.greatest(
        *(
            F.coalesce(F.col(c), F.lit(0))
            for c in ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")
        )
    ) > F.lit(0)


def rabbitmq_for_certain() -> Column:
    """Whether an event could only be RabbitMQ's."""
    # AMQP 0.9.1, or a RabbitMQ collector's alarm or queue sample (no protocol; its origin says
    # the broker, and only such rows' detail is parsed for it). Qpid's C++ broker speaks
    # neither, so flow thresholds do not outweigh it (a RabbitMQ scenario may give its queues a
    # default queue limit, and so thresholds: a review).
    return (F.col("protocol") == AMQP_0_9_1) | (
        F.col("protocol").isNull() & detail_field("origin").isin(*RABBITMQ_ORIGINS)
    )


#: (kind, what in an event says so), in the order the evidence counts.
BROKER_KIND_RULES: tuple[tuple[str, Callable[[], Column]], ...] = (
    (BROKER_ARTEMIS, _artemis_evidence),
    (BROKER_QPID, lambda: F.col("protocol") == AMQP_0_10),
    (
        BROKER_RABBITMQ,
        lambda: (F.col("protocol") == AMQP_1_0) | rabbitmq_for_certain(),
    ),
)

_FLAGS = [f"_says_{kind}" for kind, _ in BROKER_KIND_RULES]


def evidence_flags() -> list[Column]:
    """Aggregates over a group of events: whether any of them says each kind (``says_<kind>``,
    the day rollup's columns, recommend_rollup.py)."""
    return [
        F.max(F.coalesce(says(), F.lit(False))).alias(f"says_{kind}")
        for kind, says in BROKER_KIND_RULES
    ]


def _merged_flags() -> list[Column]:
    """Aggregates over day rollup rows: whether any of their events says each kind."""
    return [F.max(f"says_{kind}").alias(f"_says_{kind}") for kind, _ in BROKER_KIND_RULES]


def _kind(default: Column) -> Column:
    """The first kind of :data:`BROKER_KIND_RULES` the flags say, else ``default``."""
    chosen = default
    for kind, _ in reversed(BROKER_KIND_RULES):
        chosen = F.when(F.col(f"_says_{kind}"), F.lit(kind)).otherwise(chosen)
    return chosen


def queue_broker_kinds(rollup: DataFrame) -> DataFrame:
    """Per (broker, queue): ``broker_kind``, and ``_kind_said`` (false when neither the queue's
    events nor its broker's say a kind: the Qpid default). Artemis addresses log their name in
    ``queue`` (their queues' names, the address's by default) and the address in
    ``detail.address``.

    From the window's day rollup (recommend_rollup.py, whose facts apply this module's rules to
    each event): the flags per (broker, queue), the events without a queue in a group of their
    own, then per broker from those rows."""
    per_queue = rollup.groupBy("broker", "queue").agg(
        *_merged_flags(),
        F.max("qpid_thresholds").alias("_qpid_thresholds"),
        F.max("rabbitmq_for_certain").alias("_rabbitmq_for_certain"),
    )
    flags = [F.col(flag).cast("int") for flag in _FLAGS]
    one_kind = sum(flags[1:], flags[0]) == 1
    per_broker = (
        per_queue.groupBy("broker")
        .agg(
            *(F.max(flag).alias(flag) for flag in _FLAGS),
            F.max("_rabbitmq_for_certain").alias("_broker_rabbitmq_for_certain"),
        )
        .select(
            "broker",
            F.when(one_kind, _kind(F.lit(None))).alias("_broker_kind"),
            # A broker is one product: 0.9.1 anywhere on a broker that speaks no 0-10.
            (F.col("_broker_rabbitmq_for_certain") & ~F.col(f"_says_{BROKER_QPID}")).alias(
                "_broker_rabbitmq_for_certain"
            ),
        )
    )
    said = _kind(F.col("_broker_kind"))
    # Flow thresholds in force make a queue Qpid's over what AMQP 1.0 alone says (Qpid speaks it
    # too), not over Artemis evidence or 0.9.1's; the protocol alone still says the kind its
    # links take.
    qpid_by_thresholds = (
        F.col("_qpid_thresholds")
        & ~F.coalesce(said == BROKER_ARTEMIS, F.lit(False))
        & ~F.col("_rabbitmq_for_certain")
        & ~F.coalesce(F.col("_broker_rabbitmq_for_certain"), F.lit(False))
    )
    return (
        per_queue.where(F.col("queue").isNotNull())
        .join(F.broadcast(per_broker), "broker", "left")
        .select(
            "broker",
            "queue",
            F.when(qpid_by_thresholds, F.lit(BROKER_QPID))
            .otherwise(F.coalesce(said, F.lit(BROKER_QPID)))
            .alias("broker_kind"),
            said.isNotNull().alias("_kind_said"),
        )
    )


def link_broker_kinds(rollup: DataFrame, queue_kinds: DataFrame) -> DataFrame:
    """Per (broker, link): ``broker_kind`` and the link's ``protocol`` (its latest logged, by
    seq), by the rules of the module's docstring, from the window's day rollup."""
    per_link = (
        rollup.where(F.col("link").isNotNull())
        .groupBy("broker", "link")
        .agg(
            *_merged_flags(),
            F.max_by("protocol", F.col("protocol__seq")).alias("protocol"),
            # The queue it delivered from last: its events' queue at the latest seq naming one.
            F.max_by("queue", F.col("queue__seq")).alias("_queue"),
            F.max("carries_credit").alias("_carries_credit"),
        )
    )
    queue_kinds = queue_kinds.select(
        "broker",
        F.col("queue").alias("_queue"),
        F.col("broker_kind").alias("_queue_kind"),
        F.col("_kind_said").alias("_queue_kind_said"),
    )
    on_artemis = F.coalesce(F.col("_queue_kind") == BROKER_ARTEMIS, F.lit(False))
    nothing_said = F.when(
        F.coalesce(F.col("_carries_credit"), F.lit(False)), F.lit(BROKER_RABBITMQ)
    ).otherwise(F.lit(BROKER_QPID))
    queue_said = F.when(F.coalesce(F.col("_queue_kind_said"), F.lit(False)), F.col("_queue_kind"))
    return (
        per_link.join(queue_kinds, ["broker", "_queue"], "left")
        .withColumn(f"_says_{BROKER_ARTEMIS}", F.col(f"_says_{BROKER_ARTEMIS}") | on_artemis)
        .select(
            "broker",
            "link",
            "protocol",
            _kind(F.coalesce(queue_said, nothing_said)).alias("broker_kind"),
        )
    )

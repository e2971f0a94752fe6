"""The broker kind of every entity a recommendation is about (DESIGN.md §4: "Advice is given in the
knobs of the entity's own broker"), told from the event log in this one place.

An entity's events say which broker it lives on: Artemis address state in the detail
(``detail.address``, on every enqueue, rejection and flow event of an address), credit counted in
bytes (``detail.credit_unit``) or the CORE protocol -> Artemis; AMQP 0-10 -> Qpid; AMQP 0.9.1, and
AMQP 1.0 without Artemis detail -> RabbitMQ. A queue that logged no protocol at all (declared and
never used, only prefilled, or a log written before protocols were logged) is its broker's when
the broker's events say one kind only, else Qpid's, whose front end the plain engine models. A
consumer link takes its queue's kind when its own events say nothing.
:data:`BROKER_KIND_RULES` is the order in which the evidence counts: the first kind whose evidence
an entity has is its kind.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas.recommendations import BROKER_ARTEMIS, BROKER_QPID, BROKER_RABBITMQ

ARTEMIS_CORE = "artemis-core"
AMQP_0_10 = "amqp-0-10"
AMQP_0_9_1 = "amqp-0-9-1"
AMQP_1_0 = "amqp-1.0"


def _artemis_evidence() -> Column:
    # Only Artemis counts credit in bytes (CORE windows), and says so in the detail.
    return (
        F.get_json_object("detail", "$.address").isNotNull()
        | (F.get_json_object("detail", "$.credit_unit") == "bytes")
        | (F.col("protocol") == ARTEMIS_CORE)
    )


#: (kind, what in an event says so), in the order the evidence counts.
BROKER_KIND_RULES: tuple[tuple[str, Callable[[], Column]], ...] = (
    (BROKER_ARTEMIS, _artemis_evidence),
    (BROKER_QPID, lambda: F.col("protocol") == AMQP_0_10),
    (BROKER_RABBITMQ, lambda: F.col("protocol").isin(AMQP_0_9_1, AMQP_1_0)),
)


def _evidence_flags() -> list[Column]:
    """Per group of events: whether any of them says each kind (``_says_<kind>``)."""
    return [
        F.max(F.coalesce(says(), F.lit(False))).alias(f"_says_{kind}")
        for kind, says in BROKER_KIND_RULES
    ]


def _kind(default: Column) -> Column:
    """The first kind of :data:`BROKER_KIND_RULES` the flags say, else ``default``."""
    chosen = default
    for kind, _ in reversed(BROKER_KIND_RULES):
        chosen = F.when(F.col(f"_says_{kind}"), F.lit(kind)).otherwise(chosen)
    return chosen


def _broker_default_kinds(events: DataFrame) -> DataFrame:
    """Per broker: ``_broker_kind``, the kind its events say when exactly one kind is said (a
    broker is one product), else null: what a queue that logged no protocol of its own takes."""
    flags = [F.col(f"_says_{kind}").cast("int") for kind, _ in BROKER_KIND_RULES]
    one_kind = sum(flags[1:], flags[0]) == 1
    return (
        events.groupBy("broker")
        .agg(*_evidence_flags())
        .select("broker", F.when(one_kind, _kind(F.lit(None))).alias("_broker_kind"))
    )


def queue_broker_kinds(events: DataFrame) -> DataFrame:
    """Per (broker, queue): ``broker_kind``. Artemis addresses log their name in ``queue`` (their
    queues' names, the address's by default) and the address in ``detail.address``. A queue whose
    own events say no kind (declared and never used, or only prefilled) is its broker's when the
    broker's events say one kind only (a RabbitMQ queue otherwise read as Qpid's), else Qpid's."""
    default = F.coalesce(F.col("_broker_kind"), F.lit(BROKER_QPID))
    return (
        events.where(F.col("queue").isNotNull())
        .groupBy("broker", "queue")
        .agg(*_evidence_flags())
        .join(F.broadcast(_broker_default_kinds(events)), "broker", "left")
        .select("broker", "queue", _kind(default).alias("broker_kind"))
    )


def link_broker_kinds(events: DataFrame, queue_kinds: DataFrame) -> DataFrame:
    """Per (broker, link): ``broker_kind`` and the link's ``protocol`` (its latest logged): the
    kind its own events say, else its queue's (the queue it delivered from last). A link on an
    Artemis queue is Artemis's whatever its protocol (an AMQP 1.0 link into an address)."""
    per_link = (
        events.where(F.col("link").isNotNull())
        .groupBy("broker", "link")
        .agg(
            *_evidence_flags(),
            F.max_by("protocol", F.when(F.col("protocol").isNotNull(), F.col("seq"))).alias(
                "protocol"
            ),
            F.max_by("queue", F.when(F.col("queue").isNotNull(), F.col("seq"))).alias("_queue"),
        )
    )
    queue_kinds = queue_kinds.withColumnRenamed("queue", "_queue").withColumnRenamed(
        "broker_kind", "_queue_kind"
    )
    on_artemis = F.coalesce(F.col("_queue_kind") == BROKER_ARTEMIS, F.lit(False))
    return (
        per_link.join(queue_kinds, ["broker", "_queue"], "left")
        .withColumn(f"_says_{BROKER_ARTEMIS}", F.col(f"_says_{BROKER_ARTEMIS}") | on_artemis)
        .select(
            "broker",
            "link",
            "protocol",
            _kind(F.coalesce(F.col("_queue_kind"), F.lit(BROKER_QPID))).alias("broker_kind"),
        )
    )

"""Rule tables (jobs/transforms/verdict_rules.py): the first rule that holds gives both the verdict
and the rationale; findings are quoted in table order; the recommendation tables as declared."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.transforms.recommend_links import LINK_RULES
from jobs.transforms.recommend_queues import QUEUE_RULES
from jobs.transforms.verdict_rules import Facts, Finding, Rule, always, decide, stated
from schemas.recommendations import (
    VERDICT_AT_RISK,
    VERDICT_FLAPPING,
    VERDICT_KEEP,
    VERDICT_LOWER,
    VERDICT_RAISE,
    VERDICTS,
)

#: A toy table over the facts ``level`` and ``limit``.
TOY_RULES: tuple[Rule, ...] = (
    Rule("over", lambda f: f.level > f.limit, "shed", lambda f: F.lit("over the limit")),
    # Also true of every row over the limit: it must never win for them.
    Rule("high", lambda f: f.level * 2 > f.limit, "watch", lambda f: F.lit("over half the limit")),
    Rule("fine", always, "keep", lambda f: F.format_string("level %d", f.level)),
)

TOY_FINDINGS: tuple[Finding, ...] = (
    Finding("odd", lambda f: f.level % 2 == 1, lambda f: F.lit("odd")),
    Finding("big", lambda f: f.level > 5, lambda f: F.format_string("%d > 5", f.level)),
)


@pytest.mark.spark
def test_the_first_rule_that_holds_gives_the_verdict_and_its_rationale(spark: Any) -> None:
    frame = spark.createDataFrame([(1, 12), (7, 12), (13, 12), (None, 12)], "level int, limit int")
    facts = Facts(level=F.col("level"), limit=F.col("limit"))
    decision = decide(TOY_RULES, facts, notes=F.lit("."))
    rows = frame.select(
        "level",
        decision.rule.alias("rule"),
        decision.verdict.alias("verdict"),
        decision.rationale.alias("rationale"),
        stated(TOY_FINDINGS, facts).alias("findings"),
    ).collect()
    assert sorted((tuple(row) for row in rows), key=lambda row: row[0] or 0) == [
        # A predicate that is null (unknown level) does not hold: the table falls through, and
        # the "fine" template formats the null level as Spark does.
        (None, "fine", "keep", "keep: level null.", ""),
        (1, "fine", "keep", "keep: level 1.", "odd"),
        (7, "high", "watch", "watch: over half the limit.", "odd; 7 > 5"),
        (13, "over", "shed", "shed: over the limit.", "odd; 13 > 5"),
    ]


def test_a_rule_table_needs_a_rule() -> None:
    with pytest.raises(ValueError, match="at least one rule"):
        decide((), Facts())


def test_facts_are_added_or_replaced_without_changing_the_original() -> None:
    facts = Facts(level=1, limit=12)
    assert vars(facts.but(limit=20, unit="msgs")) == {"level": 1, "limit": 20, "unit": "msgs"}
    assert vars(facts) == {"level": 1, "limit": 12}


def test_the_recommendation_tables_in_priority_order() -> None:
    """DESIGN §4's order: a ring queue is exempt before anything else; risk outranks a lowered
    stop, which outranks flapping (the change is then protective), which outranks a raise; a
    consumer link is assessed only with message sizes and a round trip. Each table ends in a rule
    that always holds, and together they give every verdict of the schema."""
    assert [(rule.name, rule.verdict) for rule in QUEUE_RULES] == [
        ("ring queue", VERDICT_KEEP),
        ("overflow possible", VERDICT_AT_RISK),
        ("margin eaten", VERDICT_LOWER),
        ("flapping", VERDICT_FLAPPING),
        ("room to spare", VERDICT_RAISE),
        ("thresholds fit", VERDICT_KEEP),
    ]
    assert [(rule.name, rule.verdict) for rule in LINK_RULES] == [
        ("byte credit without message sizes", VERDICT_KEEP),
        ("starved without a credit round trip", VERDICT_KEEP),
        ("starved for want of credit", VERDICT_RAISE),
        ("starved with about the credit it needs", VERDICT_KEEP),
        ("starved with the credit it needs", VERDICT_KEEP),
        ("over-provisioned, starved within tolerance", VERDICT_LOWER),
        ("over-provisioned", VERDICT_LOWER),
        ("over-provisioned by a rate that counts idle time", VERDICT_KEEP),
        ("starved within tolerance", VERDICT_KEEP),
        ("never attached", VERDICT_KEEP),
        ("credit suffices", VERDICT_KEEP),
    ]
    assert QUEUE_RULES[-1].predicate is always and LINK_RULES[-1].predicate is always
    assert {rule.verdict for rule in (*QUEUE_RULES, *LINK_RULES)} == set(VERDICTS)


def test_each_broker_table_in_priority_order_in_its_own_knobs() -> None:
    """Artemis: no limit to advise on first; lost messages outrank rejections, which outrank an
    overshoot (AMQP credits without a hard limit, then CORE windows without a bound, seen
    overshooting, AMQP credits bounded by a hard limit, CORE windows that could overshoot, producers
    not in the log); a DROP or FAIL address that reached its limit where the log holds no message
    is at risk of losses it cannot show; paging is kept. RabbitMQ: a limit in force is
    kept; a growing queue that blocks its connection before one that only grows. Every rule
    names the knob it acts on, and no rule of either gives Qpid's."""
    from jobs.transforms.recommend_artemis import ARTEMIS_ADDRESS_RULES
    from jobs.transforms.recommend_links import ARTEMIS_CONSUMER_RULES
    from jobs.transforms.recommend_rabbitmq import RABBITMQ_QUEUE_RULES

    assert [(r.name, r.verdict, r.knob) for r in ARTEMIS_ADDRESS_RULES] == [
        ("no address limit", VERDICT_KEEP, "max-size-bytes"),
        ("messages dropped at the limit", VERDICT_RAISE, "max-size-bytes"),
        ("producers failed at the limit", VERDICT_AT_RISK, "max-size-bytes"),
        ("AMQP rejections inside the credit overshoot", VERDICT_RAISE,
         "max-size-bytes-reject-threshold"),
        ("AMQP overshoot without a hard limit", VERDICT_AT_RISK,
         "max-size-bytes-reject-threshold"),
        ("CORE windows unbounded", VERDICT_AT_RISK, "producerWindowSize"),
        ("CORE windows already at one message", VERDICT_AT_RISK, "producerWindowSize"),
        ("CORE windows overshoot the address", VERDICT_LOWER, "producerWindowSize"),
        ("AMQP credits overshoot the address", VERDICT_KEEP, "max-size-bytes-reject-threshold"),
        ("CORE windows could overshoot the address", VERDICT_AT_RISK, "producerWindowSize"),
        ("overshoot by producers not in the log", VERDICT_AT_RISK, "max-size-bytes"),
        ("losses not in the log", VERDICT_AT_RISK, "max-size-bytes"),
        ("paging", VERDICT_KEEP, "max-size-bytes"),
        ("within its limit", VERDICT_KEEP, "max-size-bytes"),
    ]  # fmt: skip
    assert [(r.name, r.verdict, r.knob) for r in RABBITMQ_QUEUE_RULES] == [
        ("length limit in force", VERDICT_KEEP, "x-max-length"),
        ("blocks its connection and grows", VERDICT_AT_RISK, "x-max-length"),
        ("grows without bound", VERDICT_AT_RISK, "x-max-length"),
        ("blocks its connection, drains", VERDICT_KEEP, "x-max-length"),
        ("grows, intake rate unknown", VERDICT_KEEP, "x-max-length"),
        ("drains", VERDICT_KEEP, "x-max-length"),
        ("below its peak at the end", VERDICT_KEEP, "x-max-length"),
        ("does not grow", VERDICT_KEEP, "x-max-length"),
    ]
    # An Artemis consumer: a slow one loses its buffer (or keeps none), and an unbounded one
    # whose pace is unknown beside others is not assessed, before Kung & Morris size it.
    assert [(r.name, r.verdict, r.knob) for r in ARTEMIS_CONSUMER_RULES[:3]] == [
        ("slow consumer hogs its buffer", VERDICT_LOWER, "consumerWindowSize"),
        ("slow consumer without a buffer", VERDICT_KEEP, "consumerWindowSize"),
        ("unbounded window on a shared queue, pace unknown", VERDICT_KEEP, "consumerWindowSize"),
    ]
    assert ARTEMIS_CONSUMER_RULES[3:] == LINK_RULES
    for table in (ARTEMIS_ADDRESS_RULES, RABBITMQ_QUEUE_RULES):
        assert table[-1].predicate is always


@pytest.mark.spark
def test_the_winning_rule_gives_its_knob_and_value(spark: Any) -> None:
    rules = (
        Rule("over", lambda f: f.level > f.limit, "lower", lambda f: F.lit("over"), "stop",
             lambda f: f.limit - 1),
        Rule("fine", always, "keep", lambda f: F.lit("fine")),  # no knob of its own
    )  # fmt: skip
    frame = spark.createDataFrame([(13, 12), (1, 12)], "level int, limit int")
    decision = decide(rules, Facts(level=F.col("level"), limit=F.col("limit")))
    rows = frame.select(
        "level", decision.rule, decision.knob.alias("knob"), decision.value.alias("value")
    ).collect()
    assert sorted(tuple(row) for row in rows) == [(1, "fine", None, None), (13, "over", "stop", 11)]

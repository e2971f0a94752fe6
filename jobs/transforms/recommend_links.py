"""Consumer recommendations (DESIGN.md §4 "recommendation") in each broker's knob: AMQP 1.0 link
credit, a RabbitMQ 0.9.1 consumer's prefetch (basic.qos), an Artemis CORE consumer's
consumerWindowSize (:data:`CONSUMER_KNOBS`).

Credit >= consumption rate x round trip + top-up batch (Kung & Morris, "Credit-based flow control
for ATM networks"), the rate being the one the link runs at while it has traffic to carry
(deliveries per second of its backlogged time, per attached second when the log gives none), in
the link's credit unit (messages, or bytes for Artemis CORE consumers: rate x mean message size);
a starved link that already had that much credit is kept, its consumer replenishing late. A
receiver whose every top-up comes once its credit has run out grants all of it at once: the
top-up batch is then the credit itself and no credit satisfies the formula (each raise would
raise the need by as much), so its need is what topping up at half would take, twice the
messages in flight over a round trip plus one, and the rationale says to top up earlier.

The verdict and what the rationale says of the link's situation are the first rule of its
broker's table that holds (:data:`ARTEMIS_CONSUMER_RULES` for Artemis: a slow consumer first, then
an unbounded window on a shared queue whose pace the log does not give, then :data:`LINK_RULES`;
:data:`LINK_RULES` for RabbitMQ; Qpid's consumers get none, see
:data:`CONSUMER_RULES`, nor do Artemis's AMQP 1.0 consumers, see
:data:`CONSUMER_KNOBS_OF_BROKER`); the notes of :data:`LINK_NOTES` that hold
follow (the formula and its rate, RabbitMQ's queue credit cap, a byte need under one message,
a policy round trip standing in).
DataFrame -> DataFrame without I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.recommend_policy import RecommendPolicy
from jobs.transforms.recommend_artemis import (
    SLOW_CONSUMER_RULE,
    SLOW_CONSUMER_WITHOUT_BUFFER_RULE,
    UNBOUNDED_SHARED_RULE,
    current_value,
)
from jobs.transforms.saturating import saturating_add, saturating_multiply
from jobs.transforms.verdict_rules import Facts, Finding, Rule, always, decide, staged, stated
from schemas.broker_events import AMQP_0_9_1, BROKER_ARTEMIS, BROKER_RABBITMQ
from schemas.recommendations import (
    ENTITY_CONSUMER,
    ENTITY_CONSUMER_LINK,
    KNOB_CONSUMER_WINDOW,
    KNOB_HIGHEST,
    KNOB_LINK_CREDIT,
    KNOB_PREFETCH,
    TOP_UP_AT_HALF_ADVICE,
    UNIT_BYTES,
    UNIT_CREDITS,
    UNIT_MESSAGES,
    VERDICT_KEEP,
    VERDICT_LOWER,
    VERDICT_RAISE,
)

#: Why a link starves although its credit is large enough.
REPLENISHES_LATE = "the consumer replenishes late (grants credit only as it processes messages)"


def _within_tolerance(k: Facts) -> Column:
    """A link not starved past the tolerance, in words: how little it starved, or that it never
    did, with the credit it had."""
    return F.when(
        F.coalesce(k.starved_share, F.lit(0.0)) > 0,
        F.format_string(
            "starved only %.2f%% of its attached time (up to %.2f%% is tolerated) with %s",
            k.starved_share * 100,
            F.lit(k.policy.starved_share_tolerance * 100),
            k.held_text,
        ),
    ).otherwise(F.format_string("never starved with %s", k.held_text))


def _over_what_it_needs(k: Facts) -> Column:
    return F.format_string(", over %.0fx what it needs", F.lit(k.policy.over_provision_factor))


#: A consumer link's verdict, and what its rationale says of its situation: the first rule that
#: holds.
LINK_RULES: tuple[Rule, ...] = (
    Rule(
        "byte credit without message sizes",
        lambda k: k.sizes_unknown,
        VERDICT_KEEP,
        lambda k: F.format_string(
            "credit is counted in bytes (%,d in force) and the link logged no message "
            "sizes: credit not assessed",
            k.held,
        ),
    ),
    Rule(
        "starved without a credit round trip",
        lambda k: k.no_round_trip,
        VERDICT_KEEP,
        lambda k: F.concat(
            k.starved_with,
            F.format_string(
                "; its median starvation of %.6fs is under %.3fs and no evidence of a credit "
                "round trip: credit need not assessed; credit came back within moments of "
                "running out, so the starvation is not caused by the credit size: "
                + REPLENISHES_LATE,
                k.observed_round_trip,
                F.lit(k.policy.min_round_trip_s),
            ),
        ),
    ),
    Rule("starved for want of credit", lambda k: k.raise_, VERDICT_RAISE, lambda k: k.starved_with),
    Rule(
        "starved with about the credit it needs",
        lambda k: k.short_within_band,
        VERDICT_KEEP,
        lambda k: F.concat(
            k.starved_with,
            F.format_string(
                "; it needs %,d %s, within %.0f%% of what it has: not worth a change",
                k.needed,
                k.unit,
                F.lit(k.policy.credit_keep_band_share * 100),
            ),
        ),
    ),
    Rule(
        "starved with the credit it needs",
        lambda k: k.not_the_size,
        VERDICT_KEEP,
        lambda k: F.concat(
            k.starved_with,
            F.format_string(
                "; starvation is not caused by the credit size: it already had %,d >= needed "
                "%,d %s; " + REPLENISHES_LATE,
                k.held,
                k.needed,
                k.unit,
            ),
        ),
    ),
    Rule(
        "over-provisioned, starved within tolerance",
        lambda k: k.lower & (F.coalesce(k.starved_share, F.lit(0.0)) > 0),
        VERDICT_LOWER,
        lambda k: F.concat(_within_tolerance(k), _over_what_it_needs(k)),
    ),
    Rule(
        "over-provisioned",
        lambda k: k.lower,
        VERDICT_LOWER,
        lambda k: F.concat(_within_tolerance(k), _over_what_it_needs(k)),
    ),
    # A rate per attached second counts the link's idle time too, so it is a floor of the rate
    # the link runs at when it has work: a need sized on it may hold back a burst (an audit: a
    # 0.9.1 consumer that took 30 prefilled messages at once was told prefetch 1000 -> 2, and
    # its replay received them later).
    Rule(
        "over-provisioned by a rate that counts idle time",
        lambda k: k.lower_unproven,
        VERDICT_KEEP,
        lambda k: F.concat(
            _within_tolerance(k),
            F.format_string(
                ", over %.0fx the need below; but that need is sized on a rate per attached "
                "second, which counts idle time, and %,d messages were once ready for it at "
                "once, more than that need covers: not lowered",
                F.lit(k.policy.over_provision_factor),
                F.col("_most_ready"),
            ),
        ),
    ),
    Rule(
        "starved within tolerance",
        lambda k: k.short_tolerated,
        VERDICT_KEEP,
        lambda k: F.format_string(
            "starved %.2f%% of its attached time with %s, within the %.2f%% tolerated: kept, "
            "though the formula below asks for more",
            k.starved_share * 100,
            k.held_text,
            F.lit(k.policy.starved_share_tolerance * 100),
        ),
    ),
    Rule(
        "never attached",
        lambda k: k.rate.isNull(),
        VERDICT_KEEP,
        lambda k: F.lit("no attached time observed"),
    ),
    Rule("credit suffices", always, VERDICT_KEEP, lambda k: k.starved_with),
)


#: An Artemis CORE consumer: a slow one gets (or keeps) no buffer, an unbounded one beside
#: others whose pace the log does not give is not assessed, the others get Kung & Morris's
#: window.
ARTEMIS_CONSUMER_RULES: tuple[Rule, ...] = (
    SLOW_CONSUMER_RULE,
    SLOW_CONSUMER_WITHOUT_BUFFER_RULE,
    UNBOUNDED_SHARED_RULE,
    *LINK_RULES,
)

#: The consumer rule table of each broker that has a consumer knob. Qpid has none (DESIGN §4: its
#: advice is its flow thresholds, and "a broker that has no such knob gets no such advice"), so
#: its consumer links get no row.
CONSUMER_RULES: dict[str, tuple[Rule, ...]] = {
    BROKER_ARTEMIS: ARTEMIS_CONSUMER_RULES,
    BROKER_RABBITMQ: LINK_RULES,
}

#: The consumer knobs each broker has (DESIGN §4). An AMQP 1.0 consumer of Artemis (a client's own
#: record of its links) is sized by its client's link credit, which is no Artemis setting: Artemis
#: offers consumerWindowSize to CORE consumers only, so such a link gets no row, as Qpid's do.
CONSUMER_KNOBS_OF_BROKER: dict[str, tuple[str, ...]] = {
    BROKER_ARTEMIS: (KNOB_CONSUMER_WINDOW,),
    BROKER_RABBITMQ: (KNOB_PREFETCH, KNOB_LINK_CREDIT),
}


def _is_prefetch() -> Column:
    return F.coalesce(F.col("protocol") == AMQP_0_9_1, F.lit(False))


def _in_bytes() -> Column:
    return F.coalesce(F.col("_credit_in_bytes"), F.lit(False))


#: A consumer's knob: the first whose predicate holds gives its entity kind, knob and unit.
CONSUMER_KNOBS: tuple[tuple[Callable[[], Column], str, str, str], ...] = (
    (_in_bytes, ENTITY_CONSUMER, KNOB_CONSUMER_WINDOW, UNIT_BYTES),
    (_is_prefetch, ENTITY_CONSUMER, KNOB_PREFETCH, UNIT_MESSAGES),
    (lambda: F.lit(True), ENTITY_CONSUMER_LINK, KNOB_LINK_CREDIT, UNIT_CREDITS),
)


def _knob_part(part: int) -> Column:
    """Part ``part`` (1 entity kind, 2 knob, 3 unit) of the first of :data:`CONSUMER_KNOBS` that
    holds."""
    chosen = F.lit(None).cast("string")
    for knob in reversed(CONSUMER_KNOBS):
        chosen = F.when(knob[0](), F.lit(knob[part])).otherwise(chosen)
    return chosen


#: A consumer's knob value now: a consumerWindowSize as configured (-1 unbounded, 0 no buffer),
#: else the credit in force (for a 0.9.1 consumer its prefetch, see recommend_consumer_links).
_CURRENT_CONSUMER_VALUE: dict[str, Callable[[Facts], Column]] = {
    KNOB_CONSUMER_WINDOW: lambda k: F.coalesce(F.col("consumer_window"), k.current),
    KNOB_PREFETCH: lambda k: k.current,
    KNOB_LINK_CREDIT: lambda k: k.current,
}


def _seconds(seconds: Column) -> Column:
    """Seconds as the formula's text prints them: three decimals, more where the value has them
    (to the microsecond), so that the product can be worked out again from the text (a review:
    a 0.0022 s round trip printed 0.002 gave 4,393 where the row said 4,833)."""
    return F.regexp_replace(F.format_string("%.6f", seconds), r"(\.\d{3}\d*?)0+$", "$1")


#: The rules that judge an Artemis consumer by its pace (its window's returns), not its rate.
_PACE_RULES = (SLOW_CONSUMER_RULE.name, SLOW_CONSUMER_WITHOUT_BUFFER_RULE.name)


def _formula(k: Facts) -> Column:
    """The need, in the link's credit unit, as the formula computes it."""
    rate, needed = F.coalesce(k.rate, F.lit(0.0)), F.coalesce(k.needed, F.lit(0))
    refill = F.format_string(
        "every top-up (%,d) came once its credit had run out, so the top-up batch is the credit "
        "itself and no credit covers it; topped up at half (again once fewer than half are "
        "left) it needs 2 x %,d in flight (%,.1f msgs/s x %ss round trip%s) + 1 = %,d %s: "
        + TOP_UP_AT_HALF_ADVICE,
        k.batch,
        ((needed - 1) / 2).cast("long"),
        rate,
        _seconds(k.round_trip),
        F.when(
            k.in_bytes, F.format_string(" x %,.0f bytes/msg", F.col("_mean_message_bytes"))
        ).otherwise(F.lit("")),
        needed,
        F.when(k.in_bytes, F.lit("bytes of credit")).otherwise(F.lit("credits")),
    )
    return (
        F.when(k.refills_at_empty, refill)
        .when(
            k.in_bytes,
            F.format_string(
                "needs %,.1f msgs/s x %,.0f bytes/msg x %ss round trip + %,d bytes top-up "
                "= %,d bytes of credit",
                rate,
                F.col("_mean_message_bytes"),
                _seconds(k.round_trip),
                k.batch,
                needed,
            ),
        )
        .otherwise(
            F.format_string(
                "needs %,.1f msgs/s x %ss round trip + %,d top-up = %,d credits",
                rate,
                _seconds(k.round_trip),
                k.batch,
                needed,
            )
        )
    )


def _rate_evidence(k: Facts) -> Column:
    """Which rate the formula used, and its evidence (the schema has no column for it)."""
    attached = F.coalesce(F.col("attached_s"), F.lit(0.0))
    return F.when(
        k.per_backlogged,
        F.format_string(
            "; the rate is per backlogged second: %,d deliveries in %.1fs with messages available "
            "and credit, of %.1fs attached",
            F.col("_backlogged_deliveries"),
            F.col("_backlogged_s"),
            attached,
        ),
    ).otherwise(
        F.format_string(
            "; the rate is per attached second: %,d deliveries in %.1fs attached (the log gives no "
            "time with messages available)",
            F.col("deliveries"),
            attached,
        )
    )


#: What follows a link's situation in its rationale: every note that holds, in this order.
LINK_NOTES: tuple[Finding, ...] = (
    Finding(
        "the need by the formula",
        lambda k: k.assessed & k.needed.isNotNull(),
        lambda k: F.concat(F.lit("; "), _formula(k), _rate_evidence(k)),
    ),
    # RabbitMQ caps the credit a queue sees per consumer (DESIGN §2, 256 by default); a need above
    # it is not capped (see recommend_consumer_links).
    Finding(
        "a need above RabbitMQ's queue credit cap",
        lambda k: k.assessed & (k.needed > F.col("_max_queue_credit")),
        lambda k: F.format_string(
            "; %,d credits is above the %,d the queue sees per consumer at a time "
            "(max_queue_credit): not capped, as the session grants the queue its next batch once "
            "it has sent the last one out, so credit above the cap still covers the round trip "
            "(the cap bounds what the session buffers, not what the link delivers)",
            k.needed,
            F.col("_max_queue_credit"),
        ),
    ),
    # A byte need under one message read as too little (the demo's window-0 consumer was told
    # 153 bytes for 1,390-byte messages, a review); it is not: Artemis sends while any credit
    # is left and takes the message's size off after (ServerConsumerImpl), so a window above 0
    # lets one whole message through, and a larger one would only buffer more.
    Finding(
        "a byte need under one message",
        lambda k: (
            k.assessed
            & k.in_bytes
            & (F.coalesce(k.rate, F.lit(0.0)) > 0)
            & (k.needed < F.col("_mean_message_bytes"))
        ),
        lambda k: F.format_string(
            "; %,d bytes is under one %,.0f-byte message, and enough: the broker sends a whole "
            "message while any credit is left, so any window above 0 lets one through",
            k.needed,
            F.col("_mean_message_bytes"),
        ),
    ),
    # The policy round trip stood in for an observed one too short to be evidence.
    Finding(
        "the policy round trip stands in",
        lambda k: k.too_short & ~k.no_round_trip,
        lambda k: F.format_string(
            "; its median starvation of %.6fs is under %.3fs and no evidence of a round trip: "
            "the policy round trip is used",
            k.observed_round_trip,
            F.lit(k.policy.min_round_trip_s),
        ),
    ),
    Finding(
        "a 0.9.1 consumer's starvations are no round trip",
        lambda k: k.assessed & _is_prefetch() & (F.coalesce(F.col("starved_s"), F.lit(0.0)) > 0),
        lambda k: F.lit(
            "; a 0.9.1 consumer's starvations end at each single ack (its prefetch frees one "
            "message at a time), so they are no round trip: the policy round trip is used"
        ),
    ),
)


def _basis(evidence: DataFrame, policy: RecommendPolicy) -> tuple[DataFrame, dict[str, Column]]:
    """``evidence`` with the rate, round trip, batch and starvation of each link staged, and the
    facts they give (see :func:`_link_facts`)."""
    attached = F.col("attached_s")
    backlogged = F.col("_backlogged_s")
    # Kung & Morris size credit for the rate the link runs at while it has traffic to carry:
    # deliveries per backlogged second, or per attached second when the log gives no backlog.
    per_backlogged = F.coalesce(backlogged > 0, F.lit(False))
    rate = F.when(per_backlogged, F.col("_backlogged_deliveries") / backlogged).when(
        attached > 0, F.col("deliveries") / attached
    )
    in_bytes = F.coalesce(F.col("_credit_in_bytes"), F.lit(False))
    message_bytes = F.col("_mean_message_bytes")
    # Credit units per message: 1 for message credit, the mean message size for byte credit.
    per_message = F.when(in_bytes, message_bytes).otherwise(F.lit(1.0))
    # A 0.9.1 consumer's starvations end at each single ack (its prefetch frees one message at a
    # time), not after a round trip: they are no evidence of one, and the policy's stands in.
    observed = F.when(~_is_prefetch(), F.col("_observed_round_trip_s"))
    too_short = F.coalesce(observed < policy.min_round_trip_s, F.lit(False))
    starved_share = F.when(attached > 0, F.coalesce(F.col("starved_s"), F.lit(0.0)) / attached)
    starved = F.coalesce(starved_share, F.lit(0.0)) > policy.starved_share_tolerance
    no_round_trip = too_short & starved
    observed_ok = observed.isNotNull() & ~too_short
    round_trip = F.when(
        ~no_round_trip,
        F.coalesce(F.when(observed_ok, observed), F.lit(policy.default_round_trip_s)),
    )
    # A top-up lets at least one message through: the server sends while a byte credit is above
    # 0, so a window-0 consumer's 1-byte request is one message's bytes, not one byte.
    top_up = F.col("_median_top_up")
    batch = F.coalesce(
        F.ceil(F.when(top_up.isNotNull(), F.greatest(top_up, per_message))).cast("long"),
        F.ceil(F.lit(policy.default_top_up_batch) * per_message).cast("long"),
    )
    sizes_unknown = in_bytes & ~F.coalesce(message_bytes > 0, F.lit(False))
    # Every top-up (the attach's grant and at least one more) came once the credit had run out.
    # Not a 0.9.1 prefetch: each ack frees one message, so a backlogged consumer's every "top-up"
    # comes at 0 whatever its prefetch, and it has no top-up point to move (an audit: prefetch
    # 10 was told 101 and to top up at half).
    top_ups = F.coalesce(F.col("_top_ups"), F.lit(0))
    # And each restored the whole credit: a receiver topping up at half whose grants reach the
    # sender at 0 restores less (an audit: credit 10 topped up below 5 was told to "top up
    # before the credit runs out").
    refills_at_empty = (
        ~_is_prefetch()
        & (top_ups >= 2)
        & (F.col("_top_ups_from_empty") == top_ups)
        & F.coalesce(F.col("_least_refill") >= F.col("_largest_grant"), F.lit(False))
    )
    evidence, columns = staged(
        evidence,
        {
            "_rate": rate,
            "_round_trip": round_trip,
            "_batch": batch,
            "_refills_at_empty": refills_at_empty,
            "_starved_share": starved_share,
            "_starved": starved,
            "_assessed": ~sizes_unknown & ~no_round_trip,
        },
    )
    return evidence, {
        "per_backlogged": per_backlogged,
        "in_bytes": in_bytes,
        "sizes_unknown": sizes_unknown,
        "per_message": per_message,
        "observed_round_trip": observed,
        "too_short": too_short,
        "no_round_trip": no_round_trip,
        **{name.lstrip("_"): column for name, column in columns.items()},
    }


def _link_facts(evidence: DataFrame, policy: RecommendPolicy) -> tuple[DataFrame, Facts]:
    """``evidence`` with each link's decisions staged, and the facts :data:`LINK_RULES` and
    :data:`LINK_NOTES` read: ``policy``; the ``rate`` (``per_backlogged`` or per attached
    second), the ``round_trip`` (``observed_round_trip`` unless ``too_short`` to be evidence of
    one) and the top-up ``batch``; the credit unit (``in_bytes``; ``per_message``, the credit
    units of a message; ``unit``, its name) and ``sizes_unknown`` (byte credit, no message size
    logged); ``starved_share``, ``starved`` (over the tolerance), ``no_round_trip`` (starved,
    and the round trip too short to be one), ``starved_with`` (the text) and ``assessed``
    (neither sizes unknown nor no round trip); the credit ``current``ly granted (``held``: 0 when
    unknown; ``held_text``: it in words, an unbounded window as configured) and ``needed``; and
    the decisions ``raise_`` (short of the need by more than ``credit_keep_band_share`` of what
    it holds), ``short_within_band`` (short by less: kept),
    ``not_the_size`` (starved although it already had what it needs: more credit would not help),
    ``lower`` (over ``over_provision_factor`` times the need, on a rate per backlogged second,
    or per attached second unless more messages were once ready for it at once than the need
    covers), ``lower_unproven`` (as much over, with such a burst: kept) and
    ``short_tolerated`` (short of the need, starved within the tolerance: kept)."""
    evidence, basis = _basis(evidence, policy)
    rate, per_message, round_trip = basis["rate"], basis["per_message"], basis["round_trip"]
    assessed, starved = basis["assessed"], basis["starved"]
    # Kung & Morris's top-up batch is what is consumed between two grants: all of the credit
    # for a receiver that refills at empty, half of it once it tops up at half.
    in_flight = F.ceil(rate * per_message * round_trip)
    # A receiver told to top up at half grants again once fewer than half its credit C are left
    # (the what-if replays it so: flowctl_core/whatif_knobs.py half_credit, (C + 1) // 2), so
    # (C - 1) // 2 are left at each grant, and they must cover the round trip's in flight:
    # C = 2 x in flight + 1 (3 for any traffic; an audit: 2 x rate x round trip rounded up left
    # one credit short, and 2 for a slow link topped up only at 0). At least 1 credit whatever
    # the rate: 0 stops the link, and no broker or scenario takes it (an idle link was told
    # 100 -> 0).
    # Held at a long: a bad log's sizes must not fail every broker's advice (a review).
    need = F.when(
        basis["refills_at_empty"],
        saturating_add(saturating_multiply(F.lit(2), in_flight), F.lit(1)),
    ).otherwise(saturating_add(in_flight, basis["batch"]))
    need = F.when(need.isNotNull(), F.greatest(need.cast("long"), F.lit(1)))  # null: no rate
    evidence, columns = staged(evidence, {"_needed": F.when(assessed, need)})
    needed = columns["_needed"]
    current = F.col("current_credit")
    held = F.coalesce(current, F.lit(0))
    short = assessed & starved & (held < needed)
    beyond_band = needed > held * (1 + policy.credit_keep_band_share)
    evidence, decided = staged(
        evidence,
        {
            "_raise_": short & beyond_band,
            "_short_within_band": short & ~beyond_band,
            "_not_the_size": assessed & starved & (held >= needed),
            # No delivery in its attached time measures no rate: nothing to size credit by.
            "_over_provisioned": assessed
            & ~starved
            & (rate > 0)
            & (current > needed * policy.over_provision_factor),
            "_short_tolerated": assessed
            & ~starved
            & (F.coalesce(basis["starved_share"], F.lit(0.0)) > 0)
            & (held < needed),
        },
    )
    decisions = {name[1:]: column for name, column in decided.items()}
    over_provisioned = decisions.pop("over_provisioned")
    # A rate per attached second counts idle time: lowered on it unless the log shows a burst
    # the need would hold back (more ready for the link at once than the need covers). A log
    # that gives no count of the messages ready (a client's own record of its links) shows none.
    burst_fits = F.coalesce(F.col("_most_ready") * per_message <= needed, F.lit(True))
    proven = basis["per_backlogged"] | burst_fits
    decisions["lower"] = over_provisioned & proven
    decisions["lower_unproven"] = over_provisioned & ~proven
    facts = Facts(policy=policy, needed=needed, current=current, held=held, **basis, **decisions)
    unit = (
        F.when(facts.in_bytes, F.lit("bytes of credit"))
        .when(_is_prefetch(), F.lit("messages of prefetch"))
        .otherwise(F.lit("credits"))
    )
    # An unbounded Artemis window logs a credit of 2^31 - 1 bytes: a figure no one configured.
    held_text = F.when(
        F.coalesce(F.col("consumer_window"), F.lit(0)) < 0,
        F.lit("an unbounded window (consumerWindowSize -1)"),
    ).otherwise(F.format_string("%,d %s", held, unit))
    starved_with = F.format_string(
        "starved %.1f%% of its attached time with %s",
        F.coalesce(facts.starved_share * 100, F.lit(0.0)),
        held_text,
    )
    return evidence, facts.but(unit=unit, held_text=held_text, starved_with=starved_with)


def recommend_consumer_links(evidence: DataFrame, policy: RecommendPolicy) -> DataFrame:
    """One credit recommendation per consumer link of a broker with a consumer knob (Kung &
    Morris; :data:`CONSUMER_RULES`: none for Qpid's links).

    Credit is counted in the link's own unit: messages, or bytes for links whose events say
    ``credit_unit: bytes`` (Artemis CORE consumers). In bytes the need is rate x mean message
    size x round trip + top-up (bytes); without logged message sizes a byte link is not assessed.
    A median starvation under ``min_round_trip_s`` is no evidence of a round trip: a starved link
    with one is not assessed (credit came back within moments, so its size is not what starves the
    link), a link that did not starve falls back on the policy round trip. A starved link that
    already had the credit the formula needs is kept: the shortage is not the credit size.

    The rate is the one the link runs at while it has traffic to carry: the deliveries made in its
    backlogged time (see :func:`~jobs.transforms.recommend_evidence.consumer_link_evidence`) per
    backlogged second, not per attached second, which would give a consumer idle half the time
    for want of messages half the credit it needs. When the log gives no backlogged time (no
    ``available`` logged at all, or only instants with some) it falls back on the deliveries per
    attached second; the rationale says which rate was used (the schema has no column for it).

    RabbitMQ's cap on the credit a queue sees per consumer (DESIGN §2, 256 by default; its AMQP 1.0
    consumer links log it as ``detail.max_queue_credit``) does not cap the recommendation: seed
    004, "Once these 256 messages have been sent out by the server session process, the server
    session process will grant the next batch of 256 credits to the queue". The cap bounds what
    the session buffers, not what the link delivers per round trip, so credit above it still
    covers the client's round trip (the engine delivers 4x as much with 1024 credits as with 256
    under the cap, and the same with any cap). A need above the cap is said in the rationale.
    """
    # A 0.9.1 consumer's credit is its prefetch less the unacknowledged: the prefetch is the
    # credit it attached with (basic.consume).
    evidence = evidence.withColumn(
        "current_credit",
        F.when(
            _is_prefetch(), F.coalesce(F.col("_attached_credit"), F.col("current_credit"))
        ).otherwise(F.col("current_credit")),
    )
    evidence, facts = _link_facts(evidence, policy)
    evidence, knob = staged(
        evidence, {"_entity_kind": _knob_part(1), "_knob": _knob_part(2), "_unit": _knob_part(3)}
    )
    decided = [
        _consumer_rows(
            evidence.where(
                (F.col("broker_kind") == broker)
                & knob["_knob"].isin(*CONSUMER_KNOBS_OF_BROKER[broker])
            ),
            facts,
            knob,
            rules,
        )
        for broker, rules in CONSUMER_RULES.items()
    ]
    rows = decided[0]
    for more in decided[1:]:
        rows = rows.unionByName(more)
    return rows


def within_highest(knob: Column, value: Column) -> tuple[Column, Column]:
    """``value`` capped at the most its broker takes for ``knob`` (schemas KNOB_HIGHEST: a
    prefetch is a short, link credit a uint, a window a Java int), and the note saying so where
    it was capped (null elsewhere): a recommendation the broker would refuse helps no one."""
    highest, why = F.lit(None).cast("long"), F.lit(None).cast("string")
    for name, (most, reason) in KNOB_HIGHEST.items():
        highest = F.when(knob == name, F.lit(most)).otherwise(highest)
        why = F.when(knob == name, F.lit(reason)).otherwise(why)
    over = value > highest
    note = F.when(
        over,
        F.format_string("; capped at %,d, the most the broker takes (%s)", highest, why),
    )
    return F.when(over, highest).otherwise(value), note


def _consumer_rows(
    evidence: DataFrame, facts: Facts, knob: dict[str, Column], rules: tuple[Rule, ...]
) -> DataFrame:
    """The schema's consumer columns, the verdict from ``rules`` (a rule without a value of its
    own recommends the Kung & Morris credit)."""
    decision = decide(rules, facts)
    # The notes explain the Kung & Morris need: they follow a rule that recommends it (one
    # without a value of its own), not one that sets its own (a slow consumer's window 0).
    notes = F.when(decision.value.isNull(), stated(LINK_NOTES, facts, separator=""))
    changes = facts.raise_ | facts.lower
    needed, capped_note = within_highest(knob["_knob"], facts.needed)
    rationale = F.concat(
        decision.rationale,
        F.coalesce(notes, F.lit("")),
        F.coalesce(F.when(changes & decision.value.isNull(), capped_note), F.lit("")),
    )
    now = current_value(knob["_knob"], _CURRENT_CONSUMER_VALUE, facts)
    # A kept knob is recommended as it is now, in the knob's terms (an unbounded window -1, not
    # the credit it logs), and keeps its credit.
    recommended = F.coalesce(decision.value, F.when(changes, needed).otherwise(now))
    kept = decision.verdict == VERDICT_KEEP
    recommended_credit = F.when(kept, facts.current).otherwise(recommended)
    return evidence.select(
        "broker",
        knob["_entity_kind"].alias("entity_kind"),
        F.col("link").alias("entity"),
        "queue",
        "runs",
        decision.verdict.alias("verdict"),
        rationale.alias("rationale"),
        F.col("broker_kind"),
        knob["_knob"].alias("knob"),
        now.alias("current_value"),
        recommended.alias("recommended_value"),
        knob["_unit"].alias("unit"),
        decision.rule.alias("rule"),
        F.coalesce(F.col("episodes"), F.lit(0)).alias("episodes"),
        facts.current.alias("current_credit"),
        recommended_credit.alias("recommended_credit"),
        # A slow consumer's rules quote its pace from its window's returns: the row carries that
        # (slow-no-buffer read 0.27 msgs/s, per attached second, beside "processes 5.0": review).
        F.when(decision.rule.isin(*_PACE_RULES), F.col("processing_rate_msgs_s"))
        .otherwise(facts.rate)
        .alias("consumption_rate_msgs_s"),
        facts.round_trip.alias("round_trip_s"),
        F.when(
            ~facts.no_round_trip,
            F.when(
                facts.observed_round_trip.isNotNull() & ~facts.too_short, F.lit("observed")
            ).otherwise(F.lit("policy")),
        ).alias("round_trip_source"),
        facts.batch.alias("top_up_batch"),
        F.coalesce(F.col("starved_s"), F.lit(0.0)).alias("starved_s"),
        facts.starved_share.alias("starved_share"),
    )

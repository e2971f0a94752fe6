"""Verdicts as ordered rule tables: the one way a recommendation turns evidence into a verdict.

A rule table is a tuple of :class:`Rule` in priority order. :func:`decide` turns it into the
verdict column and the rationale column of a DataFrame: the first rule whose predicate holds gives
both, so a row's verdict and its rationale come from the same rule, and why a verdict won is one
line of the table. A :class:`Finding` table lists the evidence statements a rationale quotes;
:func:`stated` joins every finding that holds, in table order.

Predicates and texts are functions of an entity's :class:`Facts`: the named Columns (mostly staged,
see :func:`staged`) that a recommendation builds once per DataFrame, so a table is declared once
at module level and applied to any frame; each broker's knobs can declare their own tables over
their own facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


class Facts(SimpleNamespace):
    """An entity's facts by name (``facts.rate``): Columns, and the values their texts quote
    (the policy). The function that builds them says what each one is."""

    def but(self, **facts: Any) -> Facts:
        """These facts with ``facts`` added or replaced."""
        return Facts(**{**vars(self), **facts})


@dataclass(frozen=True)
class Rule:
    """When ``predicate`` holds (and no earlier rule of its table does): ``verdict``, because
    ``rationale``. A table whose rules act on different settings names each rule's ``knob``
    (as the broker's config spells it) and the ``value`` it recommends for it."""

    name: str
    predicate: Callable[[Facts], Column]
    verdict: str
    rationale: Callable[[Facts], Column]
    knob: str | None = None
    value: Callable[[Facts], Column] | None = None


@dataclass(frozen=True)
class Finding:
    """A statement of evidence, quoted in a rationale when ``predicate`` holds."""

    name: str
    predicate: Callable[[Facts], Column]
    text: Callable[[Facts], Column]


def counted(count: Column, one: str, many: str | None = None) -> Column:
    """``count`` and its noun for a rationale: ``one`` for 1 ("1 episode", not "1 episodes"),
    else ``many`` (``one`` + "s" unless given); thousands grouped ("2,875 messages"), as
    flowctl_core.wording.counted says it and as the rationales' other figures are."""
    noun = F.when(count == 1, F.lit(one)).otherwise(F.lit(many or f"{one}s"))
    return F.format_string("%,d %s", count, noun)


def always(_facts: object) -> Column:
    """The predicate of a table's last rule: what holds when nothing before it does."""
    return F.lit(True)


@dataclass(frozen=True)
class Decision:
    """The columns :func:`decide` builds: the winning rule's name, its verdict, the rationale
    ``"<verdict>: <its rationale><notes>"``, and its knob and recommended value (null for a rule
    that names none)."""

    rule: Column
    verdict: Column
    rationale: Column
    knob: Column
    value: Column


def _first_match(
    rules: Sequence[Rule], predicates: Sequence[Column], value: Callable[[Rule], Column]
) -> Column:
    """``value`` of the first rule whose predicate (``predicates``, in the same order) holds."""
    (first, *rest), (holds, *others) = rules, predicates
    chosen = F.when(holds, value(first))
    for rule, predicate in zip(rest, others, strict=True):
        chosen = chosen.when(predicate, value(rule))
    return chosen


def decide(rules: Sequence[Rule], facts: Facts, notes: Column | None = None) -> Decision:
    """The verdict and rationale of the first rule of ``rules`` that holds (null when none does:
    end a table with an :func:`always` rule). ``notes`` follow the rationale of every rule."""
    if not rules:
        raise ValueError("a rule table needs at least one rule")
    # Built once and shared by the five columns: each predicate is a tree of Columns, and
    # building one is a round trip to the JVM per node (the same expressions as built five times).
    predicates = [rule.predicate(facts) for rule in rules]
    verdict = _first_match(rules, predicates, lambda rule: F.lit(rule.verdict))
    because = _first_match(rules, predicates, lambda rule: rule.rationale(facts))
    return Decision(
        rule=_first_match(rules, predicates, lambda rule: F.lit(rule.name)),
        verdict=verdict,
        rationale=F.concat(verdict, F.lit(": "), because, *([] if notes is None else [notes])),
        knob=_first_match(rules, predicates, lambda rule: F.lit(rule.knob).cast("string")),
        value=_first_match(
            rules,
            predicates,
            lambda rule: (F.lit(None) if rule.value is None else rule.value(facts)).cast("long"),
        ),
    )


def stated(findings: Sequence[Finding], facts: Facts, separator: str = "; ") -> Column:
    """The texts of the findings that hold, in table order, joined by ``separator`` ("" when none
    holds)."""
    return F.concat_ws(
        separator, *(F.when(finding.predicate(facts), finding.text(facts)) for finding in findings)
    )


def staged(frame: DataFrame, columns: Mapping[str, Column]) -> tuple[DataFrame, dict[str, Column]]:
    """``frame`` with ``columns`` computed once, and references to them.

    A Column is an expression tree that Spark copies into every expression built on it; the
    verdict, the recommended values and the rationale each build on the same decisions, so
    unstaged they made a plan of hundreds of kilobytes that took Spark longer to optimise (again
    after each stage of adaptive execution) than the data took to process. Spark does not merge a
    staged expression back into the several expressions that use it.
    """
    return frame.withColumns(dict(columns)), {name: F.col(name) for name in columns}

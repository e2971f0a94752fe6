"""Sweep: one knob of one entity run over a grid of values on the engine, and the best value.

What-if (flowctl_core/whatif.py, whatif_knobs.py) replays one recommended change; a sweep asks the
engine instead: the scenario runs once as written and once per value (same seed, so the same
arrivals), each run measured with the metrics the what-if reads for that knob, and a value is
chosen by the knob's objective (:data:`OBJECTIVES`): criteria in priority order, each keeping the
values within its tolerance of the best of those still in, the knob's own cost (the memory a
window, a credit or a limit lets the broker or client hold) last. Every value that drops out
gets the criterion it failed, so the table says why the winner won.

The module owns the objectives, the value grammar (:func:`parse_values`) and the choice
(:func:`choose`); applying a knob and measuring a run stay in the what-if modules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from flowctl_core.errors import ConfigurationError, FlowctlError
from flowctl_core.flowlimit import (
    DEFAULT_FLOW_RESUME_RATIO,
    DEFAULT_FLOW_STOP_RATIO,
    FlowThresholds,
)
from flowctl_core.scenario import Scenario
from flowctl_core.whatif import queue_outcome, with_thresholds
from flowctl_core.whatif_knobs import KNOB_APPLIERS, KnobChange, current_knob_value, measure_knob
from schemas.recommendations import (
    KNOB_CONSUMER_WINDOW,
    KNOB_LINK_CREDIT,
    KNOB_MAX_LENGTH,
    KNOB_MAX_SIZE_BYTES,
    KNOB_PREFETCH,
    KNOB_PRODUCER_WINDOW,
    KNOB_QPID_FLOW_STOP_COUNT,
    KNOB_REJECT_THRESHOLD,
)


class SweepError(ConfigurationError):
    """A sweep that cannot run as asked: an unknown knob or entity, or a value grid that does
    not parse; the message names which."""


LOWER, HIGHER = "lower", "higher"
#: The criterion that reads the knob's own value (what it lets the broker or client hold).
KNOB_VALUE = "knob value"


@dataclass(frozen=True)
class Criterion:
    """``metric`` should be ``better`` (:data:`LOWER` or :data:`HIGHER`); values within
    ``tolerance_share`` of the best still in count as equal to it (so that a later criterion
    can choose among them: a 1 % lower rate for half the memory)."""

    metric: str
    better: str
    tolerance_share: float = 0.0

    def ties(self, value: float, best: float) -> bool:
        slack = abs(best) * self.tolerance_share
        return value <= best + slack if self.better == LOWER else value >= best - slack

    def text(self) -> str:
        within = f" (within {self.tolerance_share:.0%})" if self.tolerance_share else ""
        return f"{self.metric} {self.better}{within}"


_NO_LOSS = Criterion("lost msgs (dropped, failed)", LOWER)
_NO_REJECT = Criterion("rejected msgs", LOWER)
#: Messages the address's consumers processed: the work done. Not the producers' sends, which
#: a larger buffer raises by what it holds at the end of the run, not by a faster flow.
_PROCESSED = Criterion("queue msgs processed", HIGHER, 0.01)
_SMALLEST = Criterion(KNOB_VALUE, LOWER)

#: What "best" means for each knob: criteria in priority order (a table of rules; README,
#: "Sweep"). Loss first; then the work done (messages processed or received, within 1 %) or the
#: time producers were held; then what the setting costs to hold.
OBJECTIVES: dict[str, tuple[Criterion, ...]] = {
    # Qpid: no rejections at the queue limit, then the least time stopped and fewest episodes,
    # then the lowest peak depth (stop thresholds only raise it).
    KNOB_QPID_FLOW_STOP_COUNT: (
        _NO_REJECT,
        Criterion("time stopped s", LOWER, 0.01),
        Criterion("episodes", LOWER),
        Criterion("peak depth msgs", LOWER),
    ),
    KNOB_MAX_SIZE_BYTES: (_NO_LOSS, _NO_REJECT, _PROCESSED, Criterion("peak address bytes", LOWER)),
    KNOB_REJECT_THRESHOLD: (
        _NO_LOSS,
        _NO_REJECT,
        _PROCESSED,
        Criterion("peak address bytes", LOWER),
    ),
    # Seed 003's bound: overshoot grows with producers x window; the smallest window that keeps
    # the producers' pace.
    KNOB_PRODUCER_WINDOW: (
        _NO_LOSS,
        _NO_REJECT,
        _PROCESSED,
        Criterion("max overshoot bytes", LOWER),
    ),
    KNOB_CONSUMER_WINDOW: (
        Criterion("queue msgs processed", HIGHER),
        Criterion("queue processed by s", LOWER, 0.01),
        _SMALLEST,
    ),
    # Kung & Morris: credit beyond rate x round trip buys nothing but messages held at the client.
    KNOB_LINK_CREDIT: (Criterion("consumer msgs received", HIGHER, 0.01), _SMALLEST),
    KNOB_PREFETCH: (Criterion("consumer msgs received", HIGHER, 0.01), _SMALLEST),
    # RabbitMQ reject-publish: a limit that stops a slow queue blocking its whole connection,
    # rejecting as little as that allows, holding as little as that allows.
    KNOB_MAX_LENGTH: (
        Criterion("connection blocked s", LOWER, 0.01),
        _NO_REJECT,
        Criterion("peak depth msgs", LOWER),
    ),
}

_CRITERION = re.compile(
    r"(?P<metric>[^:]+):(?P<better>lower|higher)(?::(?P<share>\d+(?:\.\d+)?)%)?"
)


def parse_objective(text: str) -> tuple[Criterion, ...]:
    """``--objective``: criteria in priority order, ``METRIC:lower`` or ``METRIC:higher``, with
    an optional tolerance (``:1%``), separated by commas; metrics are checked by the sweep."""
    criteria = []
    for part in (p.strip() for p in text.split(",")):
        matched = _CRITERION.fullmatch(part)
        if not matched:
            raise SweepError(
                f"--objective: {part!r} is not METRIC:lower or METRIC:higher[:N%] "
                "(e.g. 'rejected msgs:lower,time stopped s:lower:1%')"
            )
        share = float(matched["share"]) / 100 if matched["share"] else 0.0
        criteria.append(Criterion(matched["metric"].strip(), matched["better"], share))
    return tuple(criteria)


#: Values the broker reads as "off" (Artemis: -1 switches a window or a limit off).
_UNBOUNDED = -1
_MOST_VALUES = 200
_RANGE = re.compile(r"(-?\d+)\.\.(\d+)([+*])(\d+)")


def parse_values(text: str) -> list[int]:
    """The values of ``--values``: integers and ranges separated by commas, sorted, each once.

    ``START..STOP+STEP`` counts up by STEP, ``START..STOP*FACTOR`` multiplies by FACTOR; STOP is
    included when a step lands on it. ``-1`` is Artemis's "off". At most 200 values.
    """
    values: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        ranged = _RANGE.fullmatch(part)
        if ranged:
            values.update(_range_values(part, *ranged.groups()))
        elif re.fullmatch(r"-?\d+", part):
            values.add(int(part))
        else:
            raise SweepError(
                f"--values: {part!r} is neither an integer nor a range like 100..1000+100 or "
                "1024..65536*2"
            )
        if len(values) > _MOST_VALUES:
            raise SweepError(f"--values: more than {_MOST_VALUES} values")
    bad = sorted(v for v in values if v < _UNBOUNDED)
    if bad:
        raise SweepError(f"--values: {bad[0]} is negative (only -1, 'off', is allowed)")
    return sorted(values)


def _range_values(part: str, start: str, stop: str, op: str, step: str) -> list[int]:
    first, last, by = int(start), int(stop), int(step)
    if first > last:
        raise SweepError(f"--values: {part!r} starts above its end")
    if (op == "+" and by < 1) or (op == "*" and (by < 2 or first < 1)):
        raise SweepError(
            f"--values: {part!r} never grows (a step of at least 1, a factor of at least 2 "
            "from a start of at least 1)"
        )
    out, value = [], first
    while value <= last:
        out.append(value)
        if len(out) > _MOST_VALUES:
            raise SweepError(f"--values: {part!r} has more than {_MOST_VALUES} values")
        value = value + by if op == "+" else value * by
    return out


@dataclass(frozen=True)
class Candidate:
    """One value of the knob: its run's metrics, or why the engine refused the value."""

    value: int
    metrics: dict[str, float] | None
    refused: str | None = None

    def measure(self, criterion: Criterion) -> float:
        assert self.metrics is not None
        if criterion.metric == KNOB_VALUE:
            return _magnitude(self.value)
        return self.metrics[criterion.metric]


def _magnitude(value: int) -> float:
    """A knob value as an amount: Artemis's -1 ("off") is no bound at all."""
    return math.inf if value == _UNBOUNDED else float(value)


def _nearness(value: int, current: int | None) -> tuple[float, float]:
    """Sort key of a value among equals: nearest the value as written first (when it is "off",
    the largest bound is the nearest), then the lowest."""
    amount = _magnitude(value)
    if current is None or value == current:
        return (0.0, amount)
    if current == _UNBOUNDED:
        return (1.0, -amount)
    return (abs(amount - current), amount)


@dataclass(frozen=True)
class Choice:
    """The value :func:`choose` kept, and for every other one why it dropped out."""

    best: Candidate | None
    dropped: dict[int, str] = field(default_factory=dict)


def _number(value: float) -> str:
    if math.isinf(value):
        return "off"
    return f"{value:,.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value):,}"


def choose(
    candidates: Sequence[Candidate], objective: Sequence[Criterion], current: int | None
) -> Choice:
    """The best candidate by ``objective``: each criterion in turn keeps those within its
    tolerance of the best still in. Among the values left, the one nearest ``current`` (a
    change the measurements do not ask for is not made; :func:`_nearness`)."""
    dropped = {c.value: f"refused: {c.refused}" for c in candidates if c.metrics is None}
    left = [c for c in candidates if c.metrics is not None]
    for criterion in objective:
        if len(left) < 2:
            break
        scores = [c.measure(criterion) for c in left]
        best = min(scores) if criterion.better == LOWER else max(scores)
        kept = []
        for candidate, score in zip(left, scores, strict=True):
            if criterion.ties(score, best):
                kept.append(candidate)
            else:
                dropped[candidate.value] = (
                    f"{criterion.metric}: {_number(score)} against {_number(best)}"
                )
        left = kept
    if not left:
        return Choice(None, dropped)
    winner = min(left, key=lambda c: _nearness(c.value, current))
    for candidate in left:
        if candidate is not winner:
            dropped[candidate.value] = (
                f"as good; {_number(winner.value)} is nearer the value as written"
            )
    return Choice(winner, dropped)


@dataclass(frozen=True)
class Sweep:
    """A sweep's runs: as written (``baseline``), then one per value, and the choice."""

    scenario: str
    seed: int
    knob: str
    entity: str
    current: int | None
    objective: tuple[Criterion, ...]
    baseline: dict[str, float]
    candidates: tuple[Candidate, ...]
    choice: Choice

    def metric_names(self) -> list[str]:
        return list(self.baseline)

    def verdict(self) -> str:
        """One line: the value to set and why, or why there is none."""
        best = self.choice.best
        if best is None:
            return f"no value of {self.knob} for {self.entity} ran: each was refused"
        now = "as written" if self.current is None else f"now {_number(self.current)}"
        if best.value == self.current:
            return f"keep {self.knob} of {self.entity} at {_number(best.value)} ({now})"
        return f"best {self.knob} for {self.entity}: {_number(best.value)} ({now})"

    def as_dict(self) -> dict[str, Any]:
        """The sweep as JSON-able data (``flowctl sweep --json``)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "knob": self.knob,
            "entity": self.entity,
            "current": self.current,
            "objective": [c.text() for c in self.objective],
            "baseline": self.baseline,
            "candidates": [
                {
                    "value": c.value,
                    "metrics": c.metrics,
                    "refused": c.refused,
                    "dropped": self.choice.dropped.get(c.value),
                    "best": self.choice.best is c,
                }
                for c in self.candidates
            ],
            "best": None if self.choice.best is None else self.choice.best.value,
            "verdict": self.verdict(),
        }


def _with_stop_count(written: FlowThresholds, stop: int) -> FlowThresholds:
    """``written`` with a stop count of ``stop`` and its resume count at the same share of the
    stop (Qpid's default 70 / 80 when the count threshold is off); sizes unchanged."""
    share = (
        Fraction(written.resume_count, written.stop_count)
        if written.stop_count
        else Fraction(DEFAULT_FLOW_RESUME_RATIO, DEFAULT_FLOW_STOP_RATIO)
    )
    return FlowThresholds(
        stop_count=stop,
        resume_count=int(stop * share),
        stop_size=written.stop_size,
        resume_size=written.resume_size,
    )


#: Runs a function over values, e.g. a process pool's ``map``; the built-in ``map`` by default.
Mapper = Callable[[Callable[[int], Candidate], Iterable[int]], Iterable[Candidate]]


@dataclass(frozen=True)
class _Measure:
    """One run of the sweep: the scenario with the knob at ``value`` (None: as written),
    measured. A class rather than a closure, so that a process pool can send it."""

    scenario: Scenario
    seed: int
    knob: str
    entity: str
    #: Qpid: the queue's thresholds as written, whose resume share a swept stop count keeps.
    written: FlowThresholds | None = None

    def metrics(self, value: int) -> dict[str, float]:
        if self.knob == KNOB_QPID_FLOW_STOP_COUNT:
            assert self.written is not None
            thresholds = {self.entity: _with_stop_count(self.written, value)}
            outcome = queue_outcome(
                with_thresholds(self.scenario, thresholds), self.seed, self.entity
            )
            return outcome.metrics()
        change = KnobChange("", self.entity, self.knob, None, value, "", "sweep")
        changed = KNOB_APPLIERS[self.knob](self.scenario, self.entity, value)
        return measure_knob(changed, self.seed, change)

    def __call__(self, value: int) -> Candidate:
        try:
            return Candidate(value, self.metrics(value))
        except (FlowctlError, ValueError) as error:
            return Candidate(value, None, str(error).splitlines()[0])


def sweep_knobs() -> list[str]:
    return list(OBJECTIVES)


def run_sweep(
    scenario: Scenario,
    knob: str,
    entity: str,
    values: Sequence[int],
    *,
    seed: int | None = None,
    objective: Sequence[Criterion] | None = None,
    mapper: Mapper = map,
) -> Sweep:
    """Run ``scenario`` as written and with ``knob`` of ``entity`` at each of ``values``; choose.

    A Qpid stop count keeps the queue's resume share (:func:`_with_stop_count`; the thresholds
    as written are those in force at the end of the run as written). A value the engine
    refuses is listed with its reason and takes no part in the choice. ``objective`` replaces
    the knob's own (:data:`OBJECTIVES`). SweepError for an unknown knob, entity or metric.
    """
    if knob not in OBJECTIVES:
        raise SweepError(f"no sweep for knob {knob!r}; knobs: {', '.join(sweep_knobs())}")
    if not values:
        raise SweepError("--values: no value to sweep")
    seed = scenario.seed if seed is None else seed
    try:
        if knob == KNOB_QPID_FLOW_STOP_COUNT:
            outcome = queue_outcome(scenario, seed, entity)
            measure = _Measure(scenario, seed, knob, entity, outcome.thresholds)
            current: int | None = outcome.thresholds.stop_count
            baseline = outcome.metrics()
        else:
            measure = _Measure(scenario, seed, knob, entity)
            current = current_knob_value(scenario, knob, entity)
            change = KnobChange("", entity, knob, current, current or 0, "", "sweep")
            baseline = measure_knob(scenario, seed, change)
    except KeyError as error:
        raise SweepError(str(error.args[0])) from None
    objective = tuple(OBJECTIVES[knob] if objective is None else objective)
    unknown = [c.metric for c in objective if c.metric not in {*baseline, KNOB_VALUE}]
    if unknown:
        raise SweepError(
            f"--objective: no metric {unknown[0]!r} for {knob}; metrics: "
            f"{', '.join([*baseline, KNOB_VALUE])}"
        )
    # The value as written is one of the candidates: a sweep that cannot beat it says keep.
    grid = sorted({*values, current} if current is not None else set(values))
    candidates = tuple(mapper(measure, grid))
    return Sweep(
        scenario=scenario.name,
        seed=seed,
        knob=knob,
        entity=entity,
        current=current,
        objective=objective,
        baseline=baseline,
        candidates=candidates,
        choice=choose(candidates, objective, current),
    )

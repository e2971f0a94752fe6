"""Sweep: one knob of one entity run over a grid of values on the engine, and the best value.

What-if (flowctl_core/whatif.py, whatif_knobs.py) replays one recommended change; a sweep asks the
engine instead: the scenario runs as written and once per value (same seed, so the same
arrivals), each run measured with the metrics the what-if reads for that knob, and the best run
is chosen by the knob's objective (:data:`SWEEP_KNOBS`): criteria in priority order, each
keeping the runs within its tolerance of the best of those still in; loss first, the knob's
own cost (the memory a window, a credit or a limit lets the broker or client hold) last. The
run as written is one of the candidates, so a sweep that cannot beat it says keep, and every
run that drops out gets the criterion it failed.

The module owns the knobs' objectives and bounds, the value grammar (:func:`parse_values`) and
the choice (:func:`choose`); applying a knob and measuring a run stay in the what-if modules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from flowctl_core.broker import MAX_COUNT_KEY, POLICY_TYPE_KEY
from flowctl_core.errors import ConfigurationError, FlowctlError, closest_name, did_you_mean
from flowctl_core.flowlimit import (
    DEFAULT_FLOW_RESUME_RATIO,
    DEFAULT_FLOW_STOP_RATIO,
    FLOW_KEYS,
    FLOW_STOP_KEYS,
    FlowThresholds,
    integer_argument,
)
from flowctl_core.queue import QPID_POLICY_SPELLINGS
from flowctl_core.scenario import Scenario
from flowctl_core.whatif import (
    declared_arguments,
    declared_queues,
    metrics_shown,
    queue_outcome,
    queues_with_threshold_steps,
    with_thresholds,
)
from flowctl_core.whatif_knobs import (
    KNOB_APPLIERS,
    SOONER_SHARE,
    KnobChange,
    current_knob_value,
    measure_knob,
)
from schemas.broker_events import BROKER_ARTEMIS, BROKER_QPID, BROKER_RABBITMQ
from schemas.recommendations import (
    KNOB_CONSUMER_WINDOW,
    KNOB_HIGHEST,
    KNOB_LINK_CREDIT,
    KNOB_MAX_LENGTH,
    KNOB_MAX_SIZE_BYTES,
    KNOB_PREFETCH,
    KNOB_PRODUCER_WINDOW,
    KNOB_QPID_FLOW_STOP_COUNT,
    KNOB_REJECT_THRESHOLD,
)


class SweepError(ConfigurationError):
    """A sweep that cannot run as asked: an unknown knob or entity, an entity of another broker,
    or a value grid that does not parse; the message names which."""


LOWER, HIGHER = "lower", "higher"
#: The criterion that reads the knob's own value (what it lets the broker or client hold).
KNOB_VALUE = "knob value"


@dataclass(frozen=True)
class Criterion:
    """``metric`` should be ``better`` (:data:`LOWER` or :data:`HIGHER`); values within
    ``tolerance_share`` of the best still in count as equal to it (so that a later criterion
    can choose among them: a 1 % lower rate for half the memory). A best of 0 or of no bound
    at all is matched only by itself."""

    metric: str
    better: str
    tolerance_share: float = 0.0

    def ties(self, value: float, best: float) -> bool:
        if math.isinf(best):
            return value == best
        slack = abs(best) * self.tolerance_share
        return value <= best + slack if self.better == LOWER else value >= best - slack

    def text(self) -> str:
        within = f" (within {self.tolerance_share:.0%})" if self.tolerance_share else ""
        return f"{self.metric} {self.better}{within}"


@dataclass(frozen=True)
class SweepKnob:
    """What a sweep of a knob needs to know: its broker, its objective, the values its broker
    takes (``lowest`` .. ``highest``, with the reason for the bound) and the value that
    switches it off (no bound at all), if any."""

    broker: str
    objective: tuple[Criterion, ...]
    lowest: int
    off: int | None = None
    highest: int | None = None
    bound_reason: str = ""
    #: Why a value below ``lowest`` is not run, when the broker takes it (and means something
    #: the engine does not model).
    lowest_reason: str = ""


def _highest(knob: str) -> dict[str, Any]:
    """The most the broker takes for ``knob`` and why (schemas KNOB_HIGHEST), as SweepKnob's."""
    most, reason = KNOB_HIGHEST[knob]
    return {"highest": most, "bound_reason": reason}


_NO_LOSS = Criterion("lost msgs (dropped, failed)", LOWER)
_NO_REJECT = Criterion("rejected msgs", LOWER)
#: A ring queue's loss at its limit: it takes a message by dropping its oldest (DESIGN §2), and
#: counts both among those enqueued (a review: flow control off won a sweep of a ring queue by
#: 250 enqueued against 200, 150 of them evicted against none). Always 0 on a reject queue.
_NO_EVICTION = Criterion("evicted msgs", LOWER)
#: Messages the address's consumers processed: the work done. Not the producers' sends, which a
#: larger buffer raises by what it holds at the end of a finite run, not by a faster flow.
_PROCESSED = Criterion("queue msgs processed", HIGHER, 0.01)
_SMALLEST = Criterion(KNOB_VALUE, LOWER)
#: The work done before rejections: a limit at which the address takes nothing rejects nothing
#: either (an audit: max-size-bytes 0 won a sweep, its consumers processing 0 messages).
_ARTEMIS_LIMIT = (
    _NO_LOSS,
    _PROCESSED,
    _NO_REJECT,
    Criterion("peak address bytes", LOWER),
    _SMALLEST,
)
_RECEIVED = Criterion("consumer msgs received", HIGHER, 0.01)
#: A finite backlog is received whole with any credit; what more credit buys is receiving it sooner.
_RECEIVED_BY = Criterion("consumer received by s", LOWER, SOONER_SHARE)

#: The knobs a sweep can turn (a table of rules; README, "Sweeping a knob"): loss first, then
#: the work done (within 1 %) or the time producers were held, then what the setting costs.
SWEEP_KNOBS: dict[str, SweepKnob] = {
    # Qpid: no loss at the queue limit (rejected, or evicted from a ring), then as many messages
    # taken in, the least time stopped and fewest episodes, then the lowest peak depth. 0
    # switches the threshold off.
    KNOB_QPID_FLOW_STOP_COUNT: SweepKnob(
        BROKER_QPID,
        (
            _NO_REJECT,
            _NO_EVICTION,
            Criterion("enqueued", HIGHER, 0.01),
            Criterion("time stopped s", LOWER, 0.01),
            Criterion("episodes", LOWER),
            Criterion("peak depth msgs", LOWER),
        ),
        lowest=0,
        off=0,
    ),
    # The tightest limit that loses nothing, slows no consumer and rejects nothing.
    KNOB_MAX_SIZE_BYTES: SweepKnob(
        BROKER_ARTEMIS, _ARTEMIS_LIMIT, lowest=-1, off=-1, **_highest(KNOB_MAX_SIZE_BYTES)
    ),
    KNOB_REJECT_THRESHOLD: SweepKnob(
        BROKER_ARTEMIS, _ARTEMIS_LIMIT, lowest=-1, off=-1, **_highest(KNOB_REJECT_THRESHOLD)
    ),
    # Seed 003's bound: overshoot grows with producers x window; the smallest window that keeps
    # the consumers' pace.
    KNOB_PRODUCER_WINDOW: SweepKnob(
        BROKER_ARTEMIS,
        (_NO_LOSS, _PROCESSED, _NO_REJECT, Criterion("max overshoot bytes", LOWER), _SMALLEST),
        lowest=-1,
        off=-1,
        **_highest(KNOB_PRODUCER_WINDOW),
    ),
    KNOB_CONSUMER_WINDOW: SweepKnob(
        BROKER_ARTEMIS,
        (
            Criterion("queue msgs processed", HIGHER),
            Criterion("queue processed by s", LOWER, 0.01),
            _SMALLEST,
        ),
        lowest=-1,
        off=-1,
        **_highest(KNOB_CONSUMER_WINDOW),
    ),
    # Kung & Morris: credit beyond rate x round trip buys nothing but messages held at the client.
    KNOB_LINK_CREDIT: SweepKnob(
        BROKER_RABBITMQ,
        (_RECEIVED, _RECEIVED_BY, _SMALLEST),
        lowest=1,
        **_highest(KNOB_LINK_CREDIT),
    ),
    KNOB_PREFETCH: SweepKnob(
        BROKER_RABBITMQ,
        (_RECEIVED, _RECEIVED_BY, _SMALLEST),
        lowest=1,
        lowest_reason="0 is no limit in RabbitMQ, which the engine does not model",
        **_highest(KNOB_PREFETCH),
    ),
    # RabbitMQ reject-publish refuses what the queue will not hold, so that a slow queue does
    # not block its connection's other publishes (seed 004; the recommender's advice, which
    # the what-if validates by the blocking cut): the queue's deliveries kept (within 1 %),
    # then its connection blocked as little as possible, then the fewest refused (the largest
    # such limit), then the least held. Rejections first, no limit that acts could ever win
    # (an audit). 0 would hold no message in RabbitMQ (the engine reads it as no limit), so
    # the lowest is 1.
    KNOB_MAX_LENGTH: SweepKnob(
        BROKER_RABBITMQ,
        (
            Criterion("queue msgs delivered", HIGHER, 0.01),
            Criterion("connection blocked s", LOWER, 0.01),
            _NO_REJECT,
            Criterion("peak depth msgs", LOWER),
        ),
        lowest=1,
        lowest_reason="0 holds no message in RabbitMQ (the engine reads it as no limit)",
    ),
}

_CRITERION = re.compile(
    r"\s*(?P<metric>[^:]*?)\s*:\s*(?P<better>lower|higher)\s*"
    r"(?::\s*(?P<share>\d+(?:\.\d+)?)\s*%)?\s*"
)


def parse_objective(text: str) -> tuple[Criterion, ...]:
    """``--objective``: criteria in priority order, ``METRIC:lower`` or ``METRIC:higher``, with
    an optional tolerance (``:1%``), separated by commas; metrics are checked by the sweep."""
    criteria = []
    # A comma inside parentheses is part of a metric's name ("lost msgs (dropped, failed)").
    for part in re.split(r",(?![^()]*\))", text):
        matched = _CRITERION.fullmatch(part)
        if not matched or not matched["metric"]:
            raise SweepError(
                f"--objective: {part.strip()!r} is not METRIC:lower or METRIC:higher[:N%] "
                "(e.g. 'rejected msgs:lower,time stopped s:lower:1%')"
            )
        share = float(matched["share"]) / 100 if matched["share"] else 0.0
        criteria.append(Criterion(matched["metric"], matched["better"], share))
    return tuple(criteria)


_MOST_VALUES = 200
_INTEGER = re.compile(r"-?\d+")
_RANGE = re.compile(r"(-?\d+)\.\.(\d+)(?:([+*])(\d+))?")


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
        elif _INTEGER.fullmatch(part):
            values.add(int(part))
        else:
            raise SweepError(
                f"--values: {part!r} is neither an integer nor a range like 100..1000+100 or "
                "1024..65536*2"
            )
        if len(values) > _MOST_VALUES:
            raise SweepError(f"--values: more than {_MOST_VALUES} values")
    if not values:
        raise SweepError("--values: no value to sweep")
    return sorted(values)


def _range_values(part: str, start: str, stop: str, op: str | None, step: str | None) -> list[int]:
    if op is None or step is None:
        raise SweepError(f"--values: {part!r} needs a step (+N) or a factor (*N) after its end")
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
    """One run: the knob at ``value`` (the run as written: ``as_written``, its value None when
    the scenario gives the knob no single value), its metrics, or why it was not run."""

    value: int | None
    metrics: dict[str, float] | None
    refused: str | None = None
    as_written: bool = False


@dataclass(frozen=True)
class Choice:
    """The candidate :func:`choose` kept (its index), and for every other one (by index) why
    it dropped out: in full (``dropped``) and in a word or two (``cause``: the criterion's
    metric, ``refused`` or ``as good``)."""

    best: int | None
    dropped: dict[int, str] = field(default_factory=dict)
    cause: dict[int, str] = field(default_factory=dict)


def _number(value: float) -> str:
    if math.isinf(value):
        return "off"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _magnitude(value: int | None, off: int | None) -> float:
    """A knob value as an amount: its "off" (and a scenario without one value) is no bound."""
    return math.inf if value is None or value == off else float(value)


def _nearness(candidate: Candidate, current: int | None, off: int | None) -> tuple[float, ...]:
    """Sort key among equal candidates: the run as written first (a change the runs do not ask
    for is not made), then the value nearest it (when it is off, the largest bound), then the
    lowest."""
    if candidate.as_written:
        return (0.0, 0.0, 0.0)
    amount = _magnitude(candidate.value, off)
    if current is None:
        return (1.0, 0.0, amount)
    if _magnitude(current, off) == math.inf:
        return (1.0, -amount, amount)
    return (1.0, abs(amount - current), amount)


def choose(
    candidates: Sequence[Candidate],
    objective: Sequence[Criterion],
    current: int | None,
    off: int | None = None,
) -> Choice:
    """The best candidate by ``objective``: each criterion in turn keeps those within its
    tolerance of the best still in; among those left, :func:`_nearness` decides. ``off`` is
    the knob's value that switches it off (the largest amount)."""

    def measure(candidate: Candidate, criterion: Criterion) -> float:
        assert candidate.metrics is not None
        if criterion.metric == KNOB_VALUE:
            return _magnitude(candidate.value, off)
        return candidate.metrics[criterion.metric]

    dropped: dict[int, str] = {}
    cause: dict[int, str] = {}
    for index, candidate in enumerate(candidates):
        if candidate.metrics is None:
            dropped[index], cause[index] = f"refused: {candidate.refused}", "refused"
    left = [index for index, c in enumerate(candidates) if c.metrics is not None]
    for criterion in objective:
        if len(left) < 2:
            break
        scores = {index: measure(candidates[index], criterion) for index in left}
        best = min(scores.values()) if criterion.better == LOWER else max(scores.values())
        for index in left:
            if not criterion.ties(scores[index], best):
                dropped[index] = (
                    f"{criterion.metric}: {_number(scores[index])} against {_number(best)}"
                )
                cause[index] = criterion.metric
        left = [index for index in left if index not in dropped]
    if not left:
        return Choice(None, dropped, cause)
    winner = min(left, key=lambda index: _nearness(candidates[index], current, off))
    kept = candidates[winner]
    if kept.as_written:
        why = "the run as written is kept"
    elif current is None:
        why = f"{_number(_magnitude(kept.value, off))} is lower"
    else:
        why = f"{_number(_magnitude(kept.value, off))} is nearer the value as written"
    for index in left:
        if index != winner:
            dropped[index], cause[index] = f"as good; {why}", "as good"
    return Choice(winner, dropped, cause)


@dataclass(frozen=True)
class Sweep:
    """A sweep's runs, the run as written first, and the choice."""

    scenario: str
    seed: int
    knob: str
    entity: str
    current: int | None
    off: int | None
    objective: tuple[Criterion, ...]
    candidates: tuple[Candidate, ...]
    choice: Choice
    #: A flow stop count sweep: the queue's qpid.max_count (0: none). A stop count there or above
    #: never acts (the limit refuses before the count passes the stop).
    count_limit: int = 0
    #: The same: the sum of the windows of the queue's producers in the run as written (None: one
    #: had none). A stop count plus it is how far the queue can go (seed 001's bound).
    producers_capacity: int | None = 0
    #: The same: the queue's thresholds as written, whose resume share each run keeps.
    written: FlowThresholds | None = None
    #: The same: what the queue does at its qpid.max_count (reject, ring or ring-strict).
    limit_policy: str = "reject"

    @property
    def stop_size(self) -> int:
        """A flow stop count sweep: the queue's byte stop threshold (0: off), which every run
        keeps; 0 for any other knob."""
        return self.written.stop_size if self.written is not None else 0

    def resume_count(self, value: int | None) -> int | None:
        """A flow stop count sweep: the resume count the run at ``value`` used (it keeps the
        share of the stop written; the table showed none, so a resume of 80 under a stop of 100
        becoming 48 under a stop of 60 went unsaid: a review); None for any other knob."""
        if self.written is None or value is None:
            return None
        return _with_stop_count(self.written, value).resume_count or None

    @property
    def refused_all(self) -> bool:
        """Values were given and the broker or the engine refused each: nothing was compared
        with the run as written."""
        swept = self.candidates[1:]
        return bool(swept) and all(c.metrics is None for c in swept)

    def kept_text(self) -> str:
        """A flow stop count sweep: the thresholds every run keeps as written (a sweep and the
        what-if of a recommendation that also moved the byte stop disagreed on the same count,
        and nothing said why: a review); "" for any other knob."""
        if self.written is None:
            return ""
        stop, resume = self.written.stop_size, self.written.resume_size
        sizes = f"stop {stop:,}, resume {resume:,} bytes" if stop else "off"
        return f"every run keeps the byte thresholds of {self.entity} as written: {sizes}"

    def metric_names(self) -> list[str]:
        measured = next((c.metrics for c in self.candidates if c.metrics is not None), {})
        return list(measured)

    def figures(self, candidate: Candidate) -> dict[str, float | str]:
        """A run's figures as shown: a flow stop count sweep's overshoot past a threshold that
        is off is "off" (DESIGN §4: undefined, not 0; as the what-if prints it)."""
        measured = candidate.metrics or {}
        if self.written is None or candidate.value is None:
            return dict(measured)
        return metrics_shown(measured, _with_stop_count(self.written, candidate.value))

    def shown_metrics(self, *, all_metrics: bool = False) -> list[str]:
        """The table's metrics: the objective's in its order (then every other one measured,
        with ``all_metrics``); the evictions of a queue that rejects at its limit (always 0)
        only with ``all_metrics``."""
        names = self.metric_names()
        never = {_NO_EVICTION.metric} if self.limit_policy == "reject" else set()
        shown = [c.metric for c in self.objective if c.metric in names and c.metric not in never]
        if all_metrics:
            shown += [m for m in names if m not in shown]
        return shown

    def value_text(self, value: int | None) -> str:
        if value is None:
            return "none"
        return f"{value:,} (off)" if value == self.off else f"{value:,}"

    def verdict(self) -> str:
        """One line: the value to set, or to keep, or why there is none."""
        if self.choice.best is None:
            return f"no value of {self.knob} for {self.entity} ran: each was refused"
        best = self.candidates[self.choice.best]
        written = self.value_text(self.current)
        if self.refused_all:
            return (
                f"no value of {self.knob} for {self.entity} ran: each was refused, so none "
                f"was compared with the value as written ({written})"
            )
        warning = (
            self._limit_warning(best.value, best.metrics or {})
            if self.count_limit and best.value is not None
            else ""
        )
        if best.as_written:
            return f"keep {self.knob} of {self.entity} as written ({written}){warning}"
        value = self.value_text(best.value)
        line = f"best {self.knob} for {self.entity}: {value} (as written: {written})"
        line += self._bytes_stopped(best)
        peak = "peak address bytes"
        as_written = self.candidates[0].metrics or {}
        if best.value == self.off and best.metrics and peak in best.metrics and peak in as_written:
            # Nothing bounds the address then: its peak is what this run's producers got ahead
            # of its consumers, and a longer run gets further (an audit: 1.99 GB, unsaid).
            line += (
                f"; with no limit the address reached {best.metrics[peak]:,.0f} bytes in this "
                f"run (as written: {as_written[peak]:,.0f}), more in a longer one while the "
                "producers outpace the consumers"
            )
        return line + warning

    def _bytes_stopped(self, best: Candidate) -> str:
        """A count that the queue never passed in a run that stopped (flow stops above the
        count, DESIGN §2): its byte threshold stopped it each time, and a higher count changes
        nothing (a review: 4,508 won over 5,000 as the nearer of equal runs, and nothing said
        that the count never acted)."""
        metrics = best.metrics or {}
        if not (self.stop_size and best.value and metrics.get("episodes")):
            return ""
        peak = int(metrics.get("peak depth msgs", 0))
        if peak > best.value:
            return ""
        return (
            f"; the queue never passed {best.value:,} msgs (peak {peak:,}): its byte threshold "
            "stopped it each time"
        )

    def _limit_warning(self, stop: int, metrics: dict[str, float]) -> str:
        """What the queue's qpid.max_count leaves of a stop count: nothing when the count is off
        or at or above it, and below it a bounded overshoot only while the stop plus the
        producers' windows stays under it (seed 001: stop 100, windows 50 + 15, up to 165
        queued); when that run itself met the limit, it says so."""
        limit = self.count_limit
        # A ring queue takes a message at its limit by dropping its oldest (DESIGN §2).
        ring = self.limit_policy != "reject"
        acts, lost = ("evicts its oldest messages", "evicted") if ring else ("refuses", "refused")
        if stop == 0 or stop >= limit:
            rest = (
                f"; only its byte threshold ({self.stop_size:,} bytes) can stop the queue"
                if self.stop_size
                else ""
            )
            if stop == 0:
                return (
                    f"; with the count threshold off, the queue's qpid.max_count ({limit:,}) "
                    f"{acts} first{rest}"
                )
            return (
                f"; at or above the queue's qpid.max_count ({limit:,}) the count threshold "
                f"never acts: the limit {acts} first{rest}"
            )
        refused = int(metrics.get("evicted msgs" if ring else "rejected msgs", 0))
        met = (
            f"this run met the limit before flow control held the producers ({refused:,} {lost})"
            if refused
            else "a busier run than this one can meet the limit before flow control holds the "
            "producers"
        )
        windows = self.producers_capacity
        if windows is None:
            return (
                "; a producer without a window (capacity) never waits for its held transfers, so "
                f"nothing keeps the queue below its qpid.max_count ({limit:,}): {met}"
            )
        if stop + windows > limit:
            return (
                f"; the stop plus the producers' windows ({stop:,} + {windows:,} = "
                f"{stop + windows:,}) passes the queue's qpid.max_count ({limit:,}): {met}"
            )
        return ""

    def as_dict(self) -> dict[str, Any]:
        """The sweep as JSON-able data (``flowctl sweep --json``)."""
        best = self.choice.best
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "knob": self.knob,
            "entity": self.entity,
            "current": self.current,
            "objective": [c.text() for c in self.objective],
            "candidates": [
                {
                    "value": c.value,
                    **(
                        {"resume_count": self.resume_count(c.value) if c.metrics else None}
                        if self.written
                        else {}
                    ),
                    "as_written": c.as_written,
                    "metrics": None
                    if c.metrics is None
                    else {k: None if v == "off" else v for k, v in self.figures(c).items()},
                    "refused": c.refused,
                    "dropped": self.choice.dropped.get(index),
                    "best": index == best,
                }
                for index, c in enumerate(self.candidates)
            ],
            "best": None if best is None else self.candidates[best].value,
            "keep": best is not None and self.candidates[best].as_written,
            "refused_all": self.refused_all,
            **(
                {
                    "byte_thresholds": {
                        "stop_size": self.written.stop_size,
                        "resume_size": self.written.resume_size,
                    }
                }
                if self.written
                else {}
            ),
            "verdict": self.verdict(),
        }


def _with_stop_count(written: FlowThresholds, stop: int) -> FlowThresholds:
    """``written`` with a stop count of ``stop`` and its resume count at the same share of the
    stop (Qpid's default 70 / 80 when the count threshold is off), at least 1: a resume of 0
    reads as "resume at the stop". Sizes unchanged; a stop of 0 switches the count off."""
    if stop == 0:
        return FlowThresholds(0, 0, written.stop_size, written.resume_size)
    share = (
        Fraction(written.resume_count, written.stop_count)
        if written.stop_count
        else Fraction(DEFAULT_FLOW_RESUME_RATIO, DEFAULT_FLOW_STOP_RATIO)
    )
    return FlowThresholds(
        stop_count=stop,
        resume_count=max(1, int(stop * share)),
        stop_size=written.stop_size,
        resume_size=written.resume_size,
    )


#: Runs a function over values, e.g. a process pool's ``map``; the built-in ``map`` by default.
Mapper = Callable[[Callable[[int], Candidate], Iterable[int]], Iterable[Candidate]]


@dataclass(frozen=True)
class _Measure:
    """One run of the sweep: the scenario with the knob at a value, measured. A class rather
    than a closure, so that a process pool can send it."""

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
            changed = with_thresholds(self.scenario, thresholds)
            return queue_outcome(changed, self.seed, self.entity).metrics()
        change = KnobChange("", self.entity, self.knob, None, value, "", "sweep")
        changed = KNOB_APPLIERS[self.knob](self.scenario, self.entity, value)
        return measure_knob(changed, self.seed, change)

    def __call__(self, value: int) -> Candidate:
        knob = SWEEP_KNOBS[self.knob]
        if value < knob.lowest:
            takes = f"{self.knob} takes {knob.lowest:,} and above"
            why = f"{knob.lowest_reason}: {takes}" if value == 0 and knob.lowest_reason else takes
            return Candidate(value, None, why)
        if knob.highest is not None and value > knob.highest:
            return Candidate(value, None, f"{knob.bound_reason}: at most {knob.highest:,}")
        try:
            return Candidate(value, self.metrics(value))
        except (FlowctlError, ValueError) as error:
            return Candidate(value, None, str(error).splitlines()[0])


def _changes(measure: _Measure, value: int) -> bool:
    """Whether setting the knob to ``value`` changes the scenario as written (the x-max-length
    of a queue with another overflow policy does, at the same limit)."""
    if measure.knob == KNOB_QPID_FLOW_STOP_COUNT:
        assert measure.written is not None
        return _with_stop_count(measure.written, value) != measure.written
    try:
        changed = KNOB_APPLIERS[measure.knob](measure.scenario, measure.entity, value)
    except KeyError:
        return True
    if measure.knob == KNOB_MAX_LENGTH:
        # Spelled with its flow thresholds as four 0s, which a RabbitMQ queue now has without
        # them: the value as written ran twice, "as good" as itself (a review).
        return _queue_limit(changed, measure.entity) != _queue_limit(
            measure.scenario, measure.entity
        )
    return bool(changed != measure.scenario)


def _queue_limit(scenario: Scenario, queue: str) -> tuple[object, ...]:
    """What x-max-length sets of a RabbitMQ queue, as the engine declares it: its count limit,
    what it does there, and its flow thresholds (none when its stops are 0, whatever else)."""
    spec = next((q for q in scenario.queues if q.name == queue), None)
    arguments = {} if spec is None else scenario.queue_arguments(spec)
    flow = {
        key: integer_argument(queue, key, arguments[key]) for key in FLOW_KEYS if key in arguments
    }
    off = not any(flow.get(key) for key in FLOW_STOP_KEYS)
    return _count_limit(scenario, queue), _limit_policy(scenario, queue), None if off else flow


def sweep_knobs() -> list[str]:
    return list(SWEEP_KNOBS)


def _check_entity(scenario: Scenario, knob: str, entity: str) -> None:
    """SweepError unless ``entity`` is one of the scenario's, of the knob's broker, and a sweep
    of it is not overridden by the scenario itself."""
    broker = SWEEP_KNOBS[knob].broker
    rabbit_queues = scenario.rabbitmq_queues()
    if broker == BROKER_QPID:
        rabbit = entity in rabbit_queues
        queues = declared_queues(scenario)
        if entity not in queues or rabbit:
            where = "a RabbitMQ queue (a connection's link names it)" if rabbit else "no Qpid queue"
            hint = "" if rabbit else did_you_mean(entity, queues)
            raise SweepError(f"{scenario.name}: {entity!r} is {where}: {knob} is Qpid's{hint}")
        if entity in queues_with_threshold_steps(scenario):
            raise SweepError(
                f"{scenario.name}: a set_thresholds step changes the thresholds of "
                f"{entity!r} during the run, over any value swept: sweep a copy without it"
            )
    elif broker == BROKER_RABBITMQ and not scenario.connections:
        raise SweepError(f"{scenario.name}: no RabbitMQ connections: {knob} is RabbitMQ's")
    elif knob == KNOB_MAX_LENGTH and entity not in rabbit_queues:
        # Beside connections, a queue no link names is Qpid's (Scenario.rabbitmq_queues): a
        # reject-publish limit there would also have zeroed its Qpid flow thresholds.
        raise SweepError(
            f"{scenario.name}: {entity!r} is no RabbitMQ queue (no connection's link names it): "
            f"{knob} is RabbitMQ's{did_you_mean(entity, sorted(rabbit_queues))}"
        )
    elif broker == BROKER_ARTEMIS and scenario.artemis is None:
        raise SweepError(f"{scenario.name}: no artemis section: {knob} is Artemis's")


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

    A Qpid stop count keeps the queue's resume share (:func:`_with_stop_count`). A value the
    broker would not take, or the engine refuses, is listed with the reason and takes no part
    in the choice. ``objective`` replaces the knob's own. SweepError for an unknown knob,
    entity or metric, or an entity of another broker.
    """
    rule = SWEEP_KNOBS.get(knob)
    if rule is None:
        close = closest_name(knob, sweep_knobs())
        hint = f"did you mean {close!r}? " if close else ""
        raise SweepError(f"no sweep for knob {knob!r}; {hint}knobs: {', '.join(sweep_knobs())}")
    seed = scenario.seed if seed is None else seed
    _check_entity(scenario, knob, entity)
    try:
        if knob == KNOB_QPID_FLOW_STOP_COUNT:
            outcome = queue_outcome(scenario, seed, entity)
            measure = _Measure(scenario, seed, knob, entity, outcome.thresholds)
            current: int | None = outcome.thresholds.stop_count
            baseline = outcome.metrics()
            windows, written = outcome.producers_capacity, outcome.thresholds
        else:
            measure = _Measure(scenario, seed, knob, entity)
            current = current_knob_value(scenario, knob, entity)
            change = KnobChange("", entity, knob, current, current or 0, "", "sweep")
            baseline = measure_knob(scenario, seed, change)
            windows, written = 0, None
    except KeyError as error:
        raise SweepError(str(error.args[0])) from None
    criteria = rule.objective if objective is None else tuple(objective)
    unknown = [c.metric for c in criteria if c.metric not in {*baseline, KNOB_VALUE}]
    if unknown:
        raise SweepError(
            f"--objective: no metric {unknown[0]!r} for {knob}; metrics: "
            f"{', '.join([*baseline, KNOB_VALUE])}"
        )
    as_written = Candidate(current, baseline, as_written=True)
    # The value as written, applied again, is the run as written: run once.
    grid = [v for v in sorted(set(values)) if v != current or _changes(measure, v)]
    candidates = (as_written, *mapper(measure, grid))
    return Sweep(
        scenario=scenario.name,
        seed=seed,
        knob=knob,
        entity=entity,
        current=current,
        off=rule.off,
        objective=criteria,
        candidates=candidates,
        choice=choose(candidates, criteria, current, rule.off),
        count_limit=_count_limit(scenario, entity) if knob == KNOB_QPID_FLOW_STOP_COUNT else 0,
        producers_capacity=windows,
        written=written,
        limit_policy=_limit_policy(scenario, entity) if written else "reject",
    )


def _count_limit(scenario: Scenario, queue: str) -> int:
    """The queue's ``qpid.max_count`` as the scenario declares it, by its queues or a declare
    step (0: none)."""
    limit = declared_arguments(scenario, queue).get(MAX_COUNT_KEY, 0)
    return limit if isinstance(limit, int) else 0


def _limit_policy(scenario: Scenario, queue: str) -> str:
    """What the queue does at its limit, as the engine reads its ``qpid.policy_type``."""
    policy = declared_arguments(scenario, queue).get(
        POLICY_TYPE_KEY, scenario.broker.default_limit_policy
    )
    return QPID_POLICY_SPELLINGS.get(str(policy), str(policy))

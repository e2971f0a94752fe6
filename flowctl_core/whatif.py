"""What-if: rerun a scenario with other Qpid flow thresholds, and compare.

A recommendation is only worth deploying if the engine agrees: :func:`run_whatif` runs the same
scenario (same seed, so the same arrivals) twice, as written and with thresholds overridden per
queue from the start, and reports overshoot, time stopped, episodes and rejected messages of both
runs. Everything is measured on the engine itself (its queue state and its own events), without the
event log or Spark. :func:`overrides_from_recommendations` turns recommendation rows into the
overrides; reading them from the gold Delta table lives above the engine (``flowctl.whatif``).

Every other broker knob (Artemis, RabbitMQ) replays one recommendation row at a time in
:mod:`flowctl_core.whatif_knobs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flowctl_core.events import TS_AT, EventRow, capacity_of, event_type_of, link_of, queue_of
from flowctl_core.flowlimit import (
    FLOW_KEYS,
    FLOW_RESUME_COUNT_KEY,
    FLOW_RESUME_SIZE_KEY,
    FLOW_STOP_COUNT_KEY,
    FLOW_STOP_SIZE_KEY,
    FlowThresholds,
)
from flowctl_core.runner import RunResult, run_scenario
from flowctl_core.scenario import DeclareStep, QueueSpec, Scenario, Step
from flowctl_core.wording import shown_overshoot
from schemas.model import US_PER_SECOND
from schemas.recommendations import KNOB_QPID_FLOW_STOP_COUNT


@dataclass(frozen=True)
class QueueOutcome:
    """What one queue went through in one run."""

    thresholds: FlowThresholds
    enqueued: int
    rejected: int
    episodes: int
    time_stopped_s: float
    max_overshoot_msgs: int
    max_overshoot_bytes: int
    peak_depth_msgs: int
    peak_depth_bytes: int
    #: Messages a ring queue dropped, oldest first, to take new ones at its limit.
    evicted: int = 0
    #: The sum of the windows (capacities) of the producers that enqueued to the queue in the run
    #: or were refused by it (a refused producer sends to it too: not DESIGN's per-episode bound,
    #: which counts the enqueues of an episode), what a stop threshold can be passed by (seed
    #: 001); None when one of them had no window.
    producers_capacity: int | None = 0

    def metrics(self) -> dict[str, float]:
        """The figures of the run, by the names the what-if table prints."""
        return {
            "rejected msgs": self.rejected,
            "evicted msgs": self.evicted,
            "max overshoot msgs": self.max_overshoot_msgs,
            "max overshoot bytes": self.max_overshoot_bytes,
            "time stopped s": round(self.time_stopped_s, 3),
            "episodes": self.episodes,
            "peak depth msgs": self.peak_depth_msgs,
            "peak depth bytes": self.peak_depth_bytes,
            "enqueued": self.enqueued,
        }


AIM_PROTECT, AIM_RELIEVE, AIM_STEADY = "protect", "relieve", "steady"
_AIM_TEXT = {
    AIM_PROTECT: "to keep room below the limit",
    AIM_RELIEVE: "to stop less",
    AIM_STEADY: "to stop less often",
}


@dataclass(frozen=True)
class QueueComparison:
    queue: str
    before: QueueOutcome
    after: QueueOutcome

    @property
    def aim(self) -> str:
        """What the threshold change is for, read from the change itself, as the recommender
        means it: ``protect`` (a stop threshold lowered or switched on: room below the limit for
        the overshoot, the lower / at-risk verdicts), ``relieve`` (stop thresholds only raised or
        switched off: the queue stopped with room to spare, the raise verdict) or ``steady``
        (resume thresholds only: fewer, longer episodes, the flapping verdict)."""
        before, after = self.before.thresholds, self.after.thresholds
        stops = ((before.stop_count, after.stop_count), (before.stop_size, after.stop_size))
        if any(new != 0 and (old == 0 or new < old) for old, new in stops):
            return AIM_PROTECT
        if any(old != 0 and (new == 0 or new > old) for old, new in stops):
            return AIM_RELIEVE
        return AIM_STEADY

    @property
    def overshoot_or_rejections_cut(self) -> bool:
        """Less overshoot, or fewer messages lost at the limit (rejected, or evicted from a
        ring)."""
        before, after = self.before, self.after
        return (
            after.rejected < before.rejected
            or after.evicted < before.evicted
            or after.max_overshoot_msgs < before.max_overshoot_msgs
            or after.max_overshoot_bytes < before.max_overshoot_bytes
        )

    @property
    def room_made_below_the_limit(self) -> bool:
        """A preventive change (a run that never reached its limit has no rejections to cut, and
        overshoot over a lower stop is measured from a lower base): no rejections either way and
        the peak depth cut, which is the room below the limit the change is for (DESIGN §4)."""
        before, after = self.before, self.after
        none_lost = before.rejected == after.rejected == before.evicted == after.evicted == 0
        return none_lost and (
            after.peak_depth_msgs < before.peak_depth_msgs
            or after.peak_depth_bytes < before.peak_depth_bytes
        )

    @property
    def _stopped_s(self) -> tuple[float, float]:
        """Time stopped before and after as the table prints and the verdict judges it: to the
        millisecond (a difference below it read "80 s either way" beside "more time stopped")."""
        return (self.before.metrics()["time stopped s"], self.after.metrics()["time stopped s"])

    @property
    def time_stopped_not_raised(self) -> bool:
        before, after = self._stopped_s
        return after <= before

    @property
    def stopping_cut(self) -> bool:
        before, after = self._stopped_s
        return after < before or self.after.episodes < self.before.episodes

    @property
    def rejections_not_raised(self) -> bool:
        return self.after.rejected <= self.before.rejected

    @property
    def evictions_not_raised(self) -> bool:
        """A ring queue's loss at its limit, as rejections are a reject queue's."""
        return self.after.evicted <= self.before.evicted

    def failures(self) -> list[str]:
        """Why the change is not validated for its aim (empty when it is):

        - protect: fewer rejections or less overshoot (or, with no rejections either way, a lower
          peak: room below the limit), and no more time stopped (issue #5's bar);
        - relieve: less time stopped or fewer episodes, and no more rejections or evictions;
        - steady: fewer episodes, and no more rejections or evictions.
        """
        checks = {
            AIM_PROTECT: (
                (
                    "neither overshoot, rejections nor the peak depth cut",
                    self.overshoot_or_rejections_cut or self.room_made_below_the_limit,
                ),
                ("more time stopped", self.time_stopped_not_raised),
            ),
            AIM_RELIEVE: (
                ("neither time stopped nor episodes cut", self.stopping_cut),
                ("more rejections", self.rejections_not_raised),
                ("more evictions", self.evictions_not_raised),
            ),
            AIM_STEADY: (
                ("episodes not cut", self.after.episodes < self.before.episodes),
                ("more rejections", self.rejections_not_raised),
                ("more evictions", self.evictions_not_raised),
            ),
        }[self.aim]
        return [reason for reason, ok in checks if not ok]

    @property
    def validated(self) -> bool:
        return not self.failures()

    def evidence(self) -> str:
        """The figures the aim is judged on, before -> after (a bare "validated to stop less"
        read as less time stopped where only the episodes fell, 5 -> 4, a README walk-through
        found): those it is decided on always, the others judged when they moved."""
        before, after = self.before.metrics(), self.after.metrics()
        decided, also = {
            AIM_PROTECT: (
                ("peak depth msgs", "time stopped s"),
                (
                    "rejected msgs",
                    "evicted msgs",
                    "max overshoot msgs",
                    "max overshoot bytes",
                    "peak depth bytes",
                ),
            ),
            AIM_RELIEVE: (("episodes", "time stopped s"), ("rejected msgs", "evicted msgs")),
            AIM_STEADY: (("episodes",), ("rejected msgs", "evicted msgs", "time stopped s")),
        }[self.aim]

        def figure(name: str) -> str:
            was, now = figure_text(before[name]), figure_text(after[name])
            label, unit = ("time stopped", " s") if name == "time stopped s" else (name, "")
            if was == now:
                return f"{label} {was}{unit} either way"
            return f"{label} {was} -> {now}{unit}"

        shown = [*decided, *(name for name in also if before[name] != after[name])]
        return ", ".join(figure(name) for name in shown)


@dataclass(frozen=True)
class WhatIfComparison:
    scenario: str
    seed: int
    duration_s: float
    queues: tuple[QueueComparison, ...]
    #: Overridden queues the scenario does not declare (a table covers many scenarios).
    ignored_overrides: tuple[str, ...] = field(default=())

    def queue(self, name: str) -> QueueComparison:
        for comparison in self.queues:
            if comparison.queue == name:
                return comparison
        raise KeyError(f"what-if of {self.scenario}: no queue {name!r}")

    def rows(self) -> list[dict[str, Any]]:
        """One row per (queue, metric) with before, after and the change: for a printed table."""
        rows: list[dict[str, Any]] = []
        for comparison in self.queues:
            for metric, before, after in _metrics(comparison):
                rows.append(
                    {
                        "queue": comparison.queue,
                        "metric": metric,
                        "before": before,
                        "after": after,
                        "change": change_text(before, after),
                    }
                )
        return rows

    def printed_rows(self) -> list[dict[str, Any]]:
        """:meth:`rows` with before and after as the change and the verdicts print figures
        (182.072, not 182.07 beside a change of -182.072: a review)."""
        return [
            {**row, "before": figure_text(row["before"]), "after": figure_text(row["after"])}
            for row in self.rows()
        ]


def _thresholds_text(thresholds: FlowThresholds) -> str:
    """The thresholds as printed, "900/500 msgs, bytes off": a unit whose stop is 0 is off, its
    resume then unused; "off" when both are."""
    counts, sizes = (
        f"{stop:,}/{resume:,} {unit}" if stop else f"{unit} off"
        for stop, resume, unit in (
            (thresholds.stop_count, thresholds.resume_count, "msgs"),
            (thresholds.stop_size, thresholds.resume_size, "bytes"),
        )
    )
    return "off" if not thresholds.enabled else f"{counts}, {sizes}"


def metrics_shown(metrics: Mapping[str, float], thresholds: FlowThresholds) -> dict[str, Any]:
    """A queue's figures (:meth:`QueueOutcome.metrics`, or those of them measured) as printed
    under ``thresholds``: an overshoot past a threshold that is off is "off" (the what-if's
    table and the sweep's)."""
    shown: dict[str, Any] = dict(metrics)
    for name, stop in (
        ("max overshoot msgs", thresholds.stop_count),
        ("max overshoot bytes", thresholds.stop_size),
    ):
        if name in shown:
            shown[name] = shown_overshoot(int(shown[name]), stop)
    return shown


def _shown(outcome: QueueOutcome) -> dict[str, Any]:
    """The outcome's figures as printed."""
    return metrics_shown(outcome.metrics(), outcome.thresholds)


def _metrics(comparison: QueueComparison) -> list[tuple[str, Any, Any]]:
    before, after = _shown(comparison.before), _shown(comparison.after)
    thresholds = (
        "thresholds (stop/resume)",
        _thresholds_text(comparison.before.thresholds),
        _thresholds_text(comparison.after.thresholds),
    )
    return [thresholds, *((name, before[name], after[name]) for name in before)]


def figure_text(value: Any) -> str:
    """A before or after figure as printed: thousands separated, at most three decimals (as
    :func:`change_text` prints the change, so "1,389,088 -> 1,112,944 (-276,144)")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{value:,}"


def change_text(before: Any, after: Any) -> str:
    """The change from ``before`` to ``after`` as printed: a signed difference for numbers
    (``=`` when none), else ``=`` or ``changed``."""
    if isinstance(before, int | float) and isinstance(after, int | float):
        delta = after - before
        if delta == 0:
            return "="
        return (
            f"{delta:+,.3f}".rstrip("0").rstrip(".") if isinstance(delta, float) else f"{delta:+,}"
        )
    return "=" if before == after else "changed"


def queue_verdicts(comparison: WhatIfComparison) -> list[tuple[str, str, bool]]:
    """Per queue of the scenario: (queue, what the what-if shows, whether a recommendation
    failed). A queue whose thresholds the recommendations leave as they are (or do not cover) has
    nothing to validate; one they change must do what the change is for
    (:meth:`QueueComparison.failures`)."""
    verdicts = []
    for queue in comparison.queues:
        if queue.before.thresholds == queue.after.thresholds:
            verdicts.append((queue.queue, "thresholds unchanged: nothing to validate", False))
            continue
        failed = queue.failures()
        aim = _AIM_TEXT[queue.aim]
        text = (
            f"validated {aim}: {queue.evidence()}"
            if not failed
            else f"NOT validated {aim}: {', '.join(failed)} ({queue.evidence()})"
        )
        verdicts.append((queue.queue, text, bool(failed)))
    return verdicts


def format_comparison(comparison: WhatIfComparison) -> str:
    """The comparison as a plain-text table, before and after side by side."""
    header = ("queue", "metric", "before", "after", "change")
    figures = ("before", "after")
    table = [header] + [
        tuple(figure_text(row[k]) if k in figures else str(row[k]) for k in header)
        for row in comparison.rows()
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [
        f"what-if {comparison.scenario} (seed {comparison.seed}, {comparison.duration_s:g} s):"
        " as written -> with the overrides"
    ]
    for number, line in enumerate(table):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines.extend(f"{queue}: {verdict}" for queue, verdict, _ in queue_verdicts(comparison))
    if comparison.ignored_overrides:
        lines.append(f"not in this scenario, ignored: {', '.join(comparison.ignored_overrides)}")
    return "\n".join(lines)


# -- running ----------------------------------------------------------------------------------


class _StoppedTimer:
    """Sums each queue's stopped time from its flow_stopped / flow_resumed events."""

    def __init__(self) -> None:
        self.stopped_since_us: dict[str, int] = {}
        self.stopped_us: dict[str, int] = {}

    def __call__(self, row: EventRow) -> None:
        event_type = event_type_of(row)
        queue = queue_of(row)
        if queue is None:
            return
        if event_type == "flow_stopped":
            self.stopped_since_us[queue] = row[TS_AT]
        elif event_type == "flow_resumed":
            since = self.stopped_since_us.pop(queue, None)
            if since is not None:
                self.stopped_us[queue] = self.stopped_us.get(queue, 0) + row[TS_AT] - since

    def seconds(self, queue: str, end_us: int) -> float:
        """Stopped time of ``queue``; an episode still open at the end counts up to ``end_us``."""
        open_us = end_us - self.stopped_since_us.get(queue, end_us)
        return (self.stopped_us.get(queue, 0) + open_us) / US_PER_SECOND


class _ProducerWindows:
    """Each queue's producers (named on its enqueues, and on the messages it refused: a producer
    the limit refused whole sends to it too) and their windows, over the whole run.

    The rule is DESIGN §4's bound, ``jobs/transforms/episodes.py`` :func:`overshoot_bound`, over
    the run's rows rather than an episode's (what a stop threshold can be passed by, seed 001):
    a producer's window is the largest it logged (one row without a capacity does not take its
    window away), a producer that never logged one has none (the sum is None), and rows that name
    no producer are no producer's. A queue no producer sent to has 0 (nothing can pass its stop),
    where an episode's bound is null. tests/test_whatif_producer_windows.py keeps the two equal."""

    def __init__(self) -> None:
        self.windows: dict[str, dict[str, int | None]] = {}

    def __call__(self, row: EventRow) -> None:
        queue, link = queue_of(row), link_of(row)
        if queue is None or link is None or event_type_of(row) not in PRODUCER_EVENTS:
            return
        windows = self.windows.setdefault(queue, {})
        known, window = windows.get(link), capacity_of(row)
        windows[link] = window if known is None else known if window is None else max(known, window)

    def total(self, queue: str) -> int | None:
        windows = self.windows.get(queue, {}).values()
        return None if None in windows else sum(w for w in windows if w is not None)


#: The events whose ``link`` names a producer of the queue, for :class:`_ProducerWindows`.
PRODUCER_EVENTS = ("enqueue", "message_rejected")


def _outcomes(
    result: RunResult, timer: _StoppedTimer, producers: _ProducerWindows
) -> dict[str, QueueOutcome]:
    outcomes = {}
    for name, queue in result.broker.queues.items():
        stats = queue.stats
        outcomes[name] = QueueOutcome(
            thresholds=queue.flow.thresholds,
            enqueued=stats.enqueued,
            rejected=stats.rejected,
            evicted=stats.evicted,
            episodes=queue.flow.flow_stopped_count,
            time_stopped_s=timer.seconds(name, result.end_us),
            max_overshoot_msgs=stats.max_overshoot_msgs,
            max_overshoot_bytes=stats.max_overshoot_bytes,
            peak_depth_msgs=stats.peak_depth_msgs,
            peak_depth_bytes=stats.peak_depth_bytes,
            producers_capacity=producers.total(name),
        )
    return outcomes


def _run(scenario: Scenario, seed: int) -> dict[str, QueueOutcome]:
    timer, producers = _StoppedTimer(), _ProducerWindows()
    result = run_scenario(scenario, [timer, producers], run_id=f"{scenario.name}-whatif", seed=seed)
    return _outcomes(result, timer, producers)


def queue_outcome(scenario: Scenario, seed: int, queue: str) -> QueueOutcome:
    """One run of ``scenario``: what ``queue`` went through (KeyError when it has none such)."""
    outcomes = _run(scenario, seed)
    if queue not in outcomes:
        raise KeyError(f"{scenario.name}: no queue {queue!r}")
    return outcomes[queue]


def _with_flow_arguments(
    arguments: Mapping[str, int | str], thresholds: FlowThresholds
) -> dict[str, int | str]:
    kept = {key: value for key, value in arguments.items() if key not in FLOW_KEYS}
    return {
        **kept,
        FLOW_STOP_COUNT_KEY: thresholds.stop_count,
        FLOW_RESUME_COUNT_KEY: thresholds.resume_count,
        FLOW_STOP_SIZE_KEY: thresholds.stop_size,
        FLOW_RESUME_SIZE_KEY: thresholds.resume_size,
    }


def without_artemis_queues(
    scenario: Scenario, overrides: Mapping[str, FlowThresholds]
) -> tuple[dict[str, FlowThresholds], list[str]]:
    """The overrides minus those for the scenario's Artemis queues, and those queues' names.

    An Artemis queue's flow control is its address's max-size-bytes and policy, not queue flow
    thresholds, so a threshold recommendation for one has nothing to change in the engine.
    """
    artemis = (
        {q for a in scenario.artemis.addresses for q in a.queue_names}
        if scenario.artemis
        else set()
    )
    kept = {queue: t for queue, t in overrides.items() if queue not in artemis}
    return kept, sorted(set(overrides) & artemis)


def queues_with_threshold_steps(scenario: Scenario) -> set[str]:
    """The queues whose thresholds a ``set_thresholds`` step changes during the run: thresholds
    given at the declaration are overridden there, so a what-if or sweep cannot test them."""
    return {s.set_thresholds.queue for s in scenario.steps if s.set_thresholds is not None}


def declared_queues(scenario: Scenario) -> list[str]:
    return [q.name for q in scenario.queues] + [
        s.declare.queue for s in scenario.steps if s.declare is not None
    ]


def declared_arguments(scenario: Scenario, queue: str) -> Mapping[str, int | str]:
    """The arguments ``queue`` is declared with, by the scenario's queues or a declare step
    (one of :func:`declared_queues`; KeyError for another)."""
    declared = [q.arguments for q in scenario.queues if q.name == queue] + [
        s.declare.arguments
        for s in scenario.steps
        if s.declare is not None and s.declare.queue == queue
    ]
    if not declared:
        raise KeyError(f"{scenario.name}: no queue {queue!r}")
    return declared[0]


def with_thresholds(scenario: Scenario, overrides: Mapping[str, FlowThresholds]) -> Scenario:
    """The scenario with each overridden queue declared with those thresholds.

    The thresholds are in force from the queue's declaration. A scripted ``set_thresholds`` step
    still changes them later, as an operator's change would. Queues not declared are ignored.
    """

    def queue_spec(spec: QueueSpec) -> QueueSpec:
        if spec.name not in overrides:
            return spec
        arguments = _with_flow_arguments(spec.arguments, overrides[spec.name])
        return spec.model_copy(update={"arguments": arguments})

    def step(spec: Step) -> Step:
        declare = spec.declare
        if declare is None or declare.queue not in overrides:
            return spec
        arguments = _with_flow_arguments(declare.arguments, overrides[declare.queue])
        new_declare: DeclareStep = declare.model_copy(update={"arguments": arguments})
        return spec.model_copy(update={"declare": new_declare})

    return scenario.model_copy(
        update={
            "queues": [queue_spec(q) for q in scenario.queues],
            "steps": [step(s) for s in scenario.steps],
        }
    )


def run_whatif(
    scenario: Scenario,
    overrides: Mapping[str, FlowThresholds],
    *,
    seed: int | None = None,
) -> WhatIfComparison:
    """Run ``scenario`` as written and with ``overrides`` (queue -> thresholds); compare.

    Both runs use the same seed, so producers generate the same arrivals. Invalid thresholds (e.g.
    a stop above the queue's max) raise :class:`~flowctl_core.flowlimit.FlowConfigError`.
    """
    seed = scenario.seed if seed is None else seed
    declared = set(declared_queues(scenario))
    applicable = {queue: t for queue, t in overrides.items() if queue in declared}
    before = _run(scenario, seed)
    after = _run(with_thresholds(scenario, applicable), seed)
    duration_s = scenario.duration_s or 0.0
    return WhatIfComparison(
        scenario=scenario.name,
        seed=seed,
        duration_s=duration_s,
        queues=tuple(
            QueueComparison(name, before[name], after[name]) for name in before if name in after
        ),
        ignored_overrides=tuple(sorted(set(overrides) - declared)),
    )


# -- overrides from the recommendations table -------------------------------------------------


def overrides_from_recommendations(rows: Iterable[Mapping[str, Any]]) -> dict[str, FlowThresholds]:
    """queue -> recommended thresholds, from ``threshold_recommendations`` rows (as dicts).

    Link rows are skipped. Two rows for one queue must agree (e.g. the same queue name on two
    brokers with different recommendations is ambiguous: filter on the broker first).
    """
    overrides: dict[str, FlowThresholds] = {}
    for row in rows:
        if row.get("entity_kind") != "queue":
            continue
        # Another broker's queue (a RabbitMQ length limit): no Qpid thresholds to replay.
        if row.get("knob") not in (None, KNOB_QPID_FLOW_STOP_COUNT):
            continue
        queue = str(row["entity"])
        thresholds = FlowThresholds(
            stop_count=int(row.get("recommended_flow_stop_count") or 0),
            resume_count=int(row.get("recommended_flow_resume_count") or 0),
            stop_size=int(row.get("recommended_flow_stop_size") or 0),
            resume_size=int(row.get("recommended_flow_resume_size") or 0),
        )
        known = overrides.setdefault(queue, thresholds)
        if known != thresholds:
            raise ValueError(
                f"recommendations disagree for queue {queue!r} ({known} vs {thresholds}); "
                "choose one broker"
            )
    return overrides

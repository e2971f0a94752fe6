"""What-if: rerun a scenario with other flow thresholds, or another broker knob, and compare.

A recommendation is only worth deploying if the engine agrees: :func:`run_whatif` runs the same
scenario (same seed, so the same arrivals) twice, as written and with thresholds overridden per
queue from the start, and reports overshoot, time stopped, episodes and rejected messages of both
runs. Everything is measured on the engine itself (its queue state and its own events), without the
event log or Spark. :func:`overrides_from_recommendations` turns recommendation rows into the
overrides; reading them from the gold Delta table lives above the engine (``flowctl.whatif``).

Every other broker's knob (Artemis max-size-bytes, reject threshold, producer and consumer
windows; RabbitMQ link credit, prefetch, x-max-length) replays one recommendation row at a time:
:func:`knob_changes_from_recommendations` reads the rows, :func:`run_knob_whatif` applies one to the
scenario part that spells it and compares the metric its verdict is about (:func:`knob_failures`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flowctl_core.broker import MAX_COUNT_KEY, POLICY_TYPE_KEY
from flowctl_core.clock import seconds_to_us
from flowctl_core.events import TS_AT, EventRow, as_dict, event_type_of, queue_of
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

_US_PER_S = seconds_to_us(1)


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


AIM_PROTECT, AIM_RELIEVE, AIM_STEADY = "protect", "relieve", "steady"
_AIM_TEXT = {
    AIM_PROTECT: "to cut overshoot or rejections",
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
        before, after = self.before, self.after
        return (
            after.rejected < before.rejected
            or after.max_overshoot_msgs < before.max_overshoot_msgs
            or after.max_overshoot_bytes < before.max_overshoot_bytes
        )

    @property
    def time_stopped_not_raised(self) -> bool:
        return self.after.time_stopped_s <= self.before.time_stopped_s

    @property
    def stopping_cut(self) -> bool:
        before, after = self.before, self.after
        return after.time_stopped_s < before.time_stopped_s or after.episodes < before.episodes

    @property
    def rejections_not_raised(self) -> bool:
        return self.after.rejected <= self.before.rejected

    def failures(self) -> list[str]:
        """Why the change is not validated for its aim (empty when it is):

        - protect: fewer rejections or less overshoot, and no more time stopped (issue #5's bar);
        - relieve: less time stopped or fewer episodes, and no more rejections;
        - steady: fewer episodes, and no more rejections.
        """
        checks = {
            AIM_PROTECT: (
                ("neither overshoot nor rejections cut", self.overshoot_or_rejections_cut),
                ("more time stopped", self.time_stopped_not_raised),
            ),
            AIM_RELIEVE: (
                ("neither time stopped nor episodes cut", self.stopping_cut),
                ("more rejections", self.rejections_not_raised),
            ),
            AIM_STEADY: (
                ("episodes not cut", self.after.episodes < self.before.episodes),
                ("more rejections", self.rejections_not_raised),
            ),
        }[self.aim]
        return [reason for reason, ok in checks if not ok]

    @property
    def validated(self) -> bool:
        return not self.failures()


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
                        "change": _change(before, after),
                    }
                )
        return rows


def _thresholds_text(thresholds: FlowThresholds) -> str:
    return (
        f"{thresholds.stop_count}/{thresholds.resume_count} msgs, "
        f"{thresholds.stop_size}/{thresholds.resume_size} B"
    )


def _metrics(comparison: QueueComparison) -> list[tuple[str, Any, Any]]:
    before, after = comparison.before, comparison.after
    return [
        (
            "thresholds (stop/resume)",
            _thresholds_text(before.thresholds),
            _thresholds_text(after.thresholds),
        ),
        ("rejected msgs", before.rejected, after.rejected),
        ("max overshoot msgs", before.max_overshoot_msgs, after.max_overshoot_msgs),
        ("max overshoot bytes", before.max_overshoot_bytes, after.max_overshoot_bytes),
        ("time stopped s", round(before.time_stopped_s, 3), round(after.time_stopped_s, 3)),
        ("episodes", before.episodes, after.episodes),
        ("peak depth msgs", before.peak_depth_msgs, after.peak_depth_msgs),
        ("peak depth bytes", before.peak_depth_bytes, after.peak_depth_bytes),
        ("enqueued", before.enqueued, after.enqueued),
    ]


def _change(before: Any, after: Any) -> str:
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
        text = f"validated {aim}" if not failed else f"NOT validated {aim}: {', '.join(failed)}"
        verdicts.append((queue.queue, text, bool(failed)))
    return verdicts


def format_comparison(comparison: WhatIfComparison) -> str:
    """The comparison as a plain-text table, before and after side by side."""
    header = ("queue", "metric", "before", "after", "change")
    table = [header] + [tuple(str(row[key]) for key in header) for row in comparison.rows()]
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
        return (self.stopped_us.get(queue, 0) + open_us) / _US_PER_S


def _outcomes(result: RunResult, timer: _StoppedTimer) -> dict[str, QueueOutcome]:
    outcomes = {}
    for name, queue in result.broker.queues.items():
        stats = queue.stats
        outcomes[name] = QueueOutcome(
            thresholds=queue.flow.thresholds,
            enqueued=stats.enqueued,
            rejected=stats.rejected,
            episodes=queue.flow.flow_stopped_count,
            time_stopped_s=timer.seconds(name, result.end_us),
            max_overshoot_msgs=stats.max_overshoot_msgs,
            max_overshoot_bytes=stats.max_overshoot_bytes,
            peak_depth_msgs=stats.peak_depth_msgs,
            peak_depth_bytes=stats.peak_depth_bytes,
        )
    return outcomes


def _run(scenario: Scenario, seed: int) -> dict[str, QueueOutcome]:
    timer = _StoppedTimer()
    result = run_scenario(scenario, [timer], run_id=f"{scenario.name}-whatif", seed=seed)
    return _outcomes(result, timer)


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


def declared_queues(scenario: Scenario) -> list[str]:
    return [q.name for q in scenario.queues] + [
        s.declare.queue for s in scenario.steps if s.declare is not None
    ]


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


# -- every broker in its own knobs ------------------------------------------------------------
#
# A recommendation row names its broker's knob (``knob``), the entity it is set on and the value
# (``recommended_value``). Qpid's thresholds replay through the overrides above; every other knob
# is applied to the scenario part that spells it (an Artemis address-setting, its producers' or a
# consumer's window, a protocol consumer's credit or prefetch, a queue's length limit), and the
# re-run is compared on the metric the verdict is about.


@dataclass(frozen=True)
class KnobChange:
    """One recommendation row's change: ``knob`` of ``entity`` from ``current`` to ``value``."""

    broker_kind: str
    entity: str
    knob: str
    current: int | None
    value: int
    verdict: str
    rule: str


def knob_changes_from_recommendations(rows: Iterable[Mapping[str, Any]]) -> list[KnobChange]:
    """The rows that change a knob other than Qpid's thresholds (those replay through
    :func:`overrides_from_recommendations`), as :class:`KnobChange`. Rows that keep their knob, or
    recommend no value, have nothing to validate."""
    changes = []
    for row in rows:
        knob, value = row.get("knob"), row.get("recommended_value")
        if knob in (None, KNOB_QPID_FLOW_STOP_COUNT) or value is None:
            continue
        if value == row.get("current_value"):
            continue
        changes.append(
            KnobChange(
                broker_kind=str(row.get("broker_kind")),
                entity=str(row["entity"]),
                knob=str(knob),
                current=row.get("current_value"),
                value=int(value),
                verdict=str(row.get("verdict")),
                rule=str(row.get("rule")),
            )
        )
    return changes


def _artemis_part(scenario: Scenario) -> Any:
    if scenario.artemis is None:
        raise KeyError(f"{scenario.name} has no artemis section")
    return scenario.artemis


def _address_setting(scenario: Scenario, address: str, **update: int) -> Scenario:
    artemis = _artemis_part(scenario)
    if address not in {a.name for a in artemis.addresses}:
        raise KeyError(f"{scenario.name}: no artemis address {address!r}")
    addresses = [a.model_copy(update=update) if a.name == address else a for a in artemis.addresses]
    return scenario.model_copy(
        update={"artemis": artemis.model_copy(update={"addresses": addresses})}
    )


def _producer_windows(scenario: Scenario, address: str, window: int) -> Scenario:
    artemis = _artemis_part(scenario)
    producers = [
        p.model_copy(update={"window": window}) if p.address == address and p.protocol == "core"
        else p
        for p in artemis.producers
    ]  # fmt: skip
    if producers == list(artemis.producers):
        raise KeyError(f"{scenario.name}: no CORE producer on artemis address {address!r}")
    return scenario.model_copy(
        update={"artemis": artemis.model_copy(update={"producers": producers})}
    )


def _consumer_window(scenario: Scenario, consumer: str, window: int) -> Scenario:
    artemis = _artemis_part(scenario)
    if consumer not in {c.name for c in artemis.consumers}:
        raise KeyError(f"{scenario.name}: no artemis consumer {consumer!r}")
    consumers = [
        c.model_copy(update={"window": window}) if c.name == consumer else c
        for c in artemis.consumers
    ]
    return scenario.model_copy(
        update={"artemis": artemis.model_copy(update={"consumers": consumers})}
    )


def _consumer_credit(scenario: Scenario, consumer: str, credit: int) -> Scenario:
    """A protocol consumer's link credit (1.0) or prefetch (0.9.1); a 1.0 consumer tops up below
    the same share of its credit as before."""
    connections = []
    found = False
    for connection in scenario.connections:
        consumers = []
        for spec in connection.consumers:
            if spec.name == consumer:
                found = True
                top_up = spec.top_up_below * credit // spec.credit
                spec = spec.model_copy(update={"credit": credit, "top_up_below": top_up})
            consumers.append(spec)
        connections.append(connection.model_copy(update={"consumers": consumers}))
    if not found:
        raise KeyError(f"{scenario.name}: no protocol consumer {consumer!r}")
    return scenario.model_copy(update={"connections": connections})


def _max_length(scenario: Scenario, queue: str, length: int) -> Scenario:
    """x-max-length with overflow reject-publish: the engine's queue limit in messages with the
    reject policy, and no Qpid flow thresholds (all four given as 0: none by default either)."""
    limit = {
        MAX_COUNT_KEY: length,
        POLICY_TYPE_KEY: "reject",
        **dict.fromkeys(
            (FLOW_STOP_COUNT_KEY, FLOW_RESUME_COUNT_KEY, FLOW_STOP_SIZE_KEY, FLOW_RESUME_SIZE_KEY),
            0,
        ),
    }
    if queue not in {q.name for q in scenario.queues}:
        raise KeyError(f"{scenario.name}: no queue {queue!r}")
    queues = [
        q.model_copy(update={"arguments": {**q.arguments, **limit}}) if q.name == queue else q
        for q in scenario.queues
    ]
    return scenario.model_copy(update={"queues": queues})


#: How each knob is spelled in a scenario: (scenario, entity, value) -> the changed scenario.
KNOB_APPLIERS: dict[str, Any] = {
    KNOB_MAX_SIZE_BYTES: lambda s, e, v: _address_setting(s, e, max_size_bytes=v),
    KNOB_REJECT_THRESHOLD: lambda s, e, v: _address_setting(
        s, e, max_size_bytes_reject_threshold=v
    ),
    KNOB_PRODUCER_WINDOW: _producer_windows,
    KNOB_CONSUMER_WINDOW: _consumer_window,
    KNOB_LINK_CREDIT: _consumer_credit,
    KNOB_PREFETCH: _consumer_credit,
    KNOB_MAX_LENGTH: _max_length,
}


def knob_applies(scenario: Scenario, change: KnobChange) -> bool:
    """Whether the scenario has the entity and knob of ``change`` (a table covers many)."""
    try:
        with_knob(scenario, change)
    except KeyError:
        return False
    return True


def with_knob(scenario: Scenario, change: KnobChange) -> Scenario:
    """The scenario with ``change`` applied from the start (KeyError when the scenario has no such
    entity or knob)."""
    apply = KNOB_APPLIERS.get(change.knob)
    if apply is None:
        raise KeyError(f"no what-if for knob {change.knob!r}")
    changed: Scenario = apply(scenario, change.entity, change.value)
    return changed


class _EntityMeter:
    """Counts, from the events of one run, what the knobs' verdicts are about: per queue (an
    Artemis address writes its name there) messages lost by outcome and the peak address size;
    per queue the seconds its credit flow blocked 0.9.1 connections."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], int] = {}
        self.peak_address_bytes: dict[str, int] = {}
        self.blocked_since_us: dict[tuple[str, str], int] = {}
        self.blocked_us: dict[str, int] = {}

    def __call__(self, row: EventRow) -> None:
        event_type = event_type_of(row)
        if event_type not in _METERED:
            return
        event = as_dict(row)
        queue = event["queue"]
        if queue is None:
            return
        detail = json.loads(event["detail"]) if event["detail"] else {}
        if event_type == "message_rejected":
            key = (queue, str(detail.get("outcome", "rejected")))
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
        elif event_type in ("connection_blocked", "connection_unblocked"):
            self._blocking(event, queue, event_type == "connection_blocked")
        size = detail.get("address_size")
        if size is not None:
            self.peak_address_bytes[queue] = max(self.peak_address_bytes.get(queue, 0), size)

    def _blocking(self, event: Mapping[str, Any], queue: str, blocked: bool) -> None:
        key = (str(event["connection"]), queue)
        ts_us = _ts_us(event["ts"])
        if blocked:
            self.blocked_since_us.setdefault(key, ts_us)
        elif key in self.blocked_since_us:
            since = self.blocked_since_us.pop(key)
            self.blocked_us[queue] = self.blocked_us.get(queue, 0) + ts_us - since

    def lost(self, queue: str, *outcomes: str) -> int:
        return sum(self.outcomes.get((queue, outcome), 0) for outcome in outcomes)

    def blocked_s(self, queue: str, end_us: int) -> float:
        open_us = sum(
            end_us - since for (_, q), since in self.blocked_since_us.items() if q == queue
        )
        return (self.blocked_us.get(queue, 0) + open_us) / _US_PER_S


_METERED = frozenset(
    {"message_rejected", "enqueue", "flow_stopped", "connection_blocked", "connection_unblocked"}
)


def _ts_us(ts: Any) -> int:
    return ts if isinstance(ts, int) else seconds_to_us(ts.timestamp())


def _knob_metrics(change: KnobChange, result: RunResult, meter: _EntityMeter) -> dict[str, float]:
    """The metrics of ``change``'s entity in one run (see :data:`KNOB_CHECKS`)."""
    entity = change.entity
    if change.knob in (KNOB_MAX_SIZE_BYTES, KNOB_REJECT_THRESHOLD, KNOB_PRODUCER_WINDOW):
        assert result.artemis is not None
        address = result.artemis.addresses[entity]
        peak = meter.peak_address_bytes.get(entity, 0)
        return {
            "lost msgs (dropped, failed)": meter.lost(entity, "dropped", "failed"),
            "rejected msgs": meter.lost(entity, "rejected"),
            "peak address bytes": peak,
            "max overshoot bytes": max(peak - address.config.settings.max_size_bytes, 0),
        }
    if change.knob == KNOB_CONSUMER_WINDOW:
        assert result.artemis is not None
        queue = result.artemis.consumers[entity].config.queue
        siblings = [c for c in result.artemis.consumers.values() if c.config.queue == queue]
        last_us = max((c.processed_at_us[-1] for c in siblings if c.processed_at_us), default=0)
        return {
            "queue msgs processed": sum(c.processed for c in siblings),
            "queue processed by s": (last_us - result.start_us) / _US_PER_S,
            "consumer msgs processed": result.artemis.consumers[entity].processed,
        }
    if change.knob in (KNOB_LINK_CREDIT, KNOB_PREFETCH):
        received = {
            name: count for c in result.connections.values() for name, count in c.received().items()
        }
        return {"consumer msgs received": received[entity]}
    stats = result.broker.queues[entity].stats
    return {
        "peak depth msgs": stats.peak_depth_msgs,
        "rejected msgs": stats.rejected,
        "connection blocked s": round(meter.blocked_s(entity, result.end_us), 6),
    }


@dataclass(frozen=True)
class KnobComparison:
    """A knob change replayed: the metrics of its entity before and after, and whether the
    re-run shows what the verdict promised (:func:`knob_failures`)."""

    change: KnobChange
    before: dict[str, float]
    after: dict[str, float]

    def failures(self) -> list[str]:
        return knob_failures(self)

    @property
    def validated(self) -> bool:
        return not self.failures()


def knob_failures(comparison: KnobComparison) -> list[str]:
    """Why the re-run does not show what the change is for (empty when it does):

    - max-size-bytes (messages lost at the limit): fewer messages lost;
    - reject threshold: the peak address size within it, no more rejections, and fewer when some
      were rejected;
    - producerWindowSize: less overshoot past max-size-bytes, no more messages lost;
    - consumerWindowSize 0 (slow consumer): the queue's messages processed sooner or more of them;
      another window: no fewer messages processed by the consumer;
    - link credit / prefetch raised: more messages received; lowered: no fewer;
    - x-max-length: the peak depth within it, and less time blocked for the connections its
      credit flow blocked.
    """
    change, before, after = comparison.change, comparison.before, comparison.after
    lowered = change.current is not None and change.value < change.current
    checks: list[tuple[str, bool]]
    if change.knob == KNOB_MAX_SIZE_BYTES:
        key = "lost msgs (dropped, failed)"
        checks = [("messages lost not cut", after[key] < before[key] or before[key] == 0)]
    elif change.knob == KNOB_REJECT_THRESHOLD:
        rejected = "rejected msgs"
        checks = [
            ("peak address size above the threshold", after["peak address bytes"] <= change.value),
            ("more rejections", after[rejected] <= before[rejected]),
            ("rejections not cut", before[rejected] == 0 or after[rejected] < before[rejected]),
        ]
    elif change.knob == KNOB_PRODUCER_WINDOW:
        overshoot = "max overshoot bytes"
        lost = "lost msgs (dropped, failed)"
        checks = [
            ("overshoot not cut", after[overshoot] < before[overshoot]),
            ("more messages lost", after[lost] <= before[lost]),
        ]
    elif change.knob == KNOB_CONSUMER_WINDOW and change.value == 0:
        done, processed = "queue processed by s", "queue msgs processed"
        checks = [
            (
                "the queue's messages processed neither sooner nor more",
                after[processed] > before[processed]
                or (after[processed] == before[processed] and after[done] < before[done]),
            )
        ]
    elif change.knob == KNOB_CONSUMER_WINDOW:
        key = "consumer msgs processed"
        checks = [("fewer messages processed", after[key] >= before[key])]
    elif change.knob in (KNOB_LINK_CREDIT, KNOB_PREFETCH):
        key = "consumer msgs received"
        checks = [
            ("fewer messages received", after[key] >= before[key])
            if lowered
            else ("no more messages received", after[key] > before[key])
        ]
    else:  # x-max-length
        blocked = "connection blocked s"
        checks = [
            ("peak depth above the limit", after["peak depth msgs"] <= change.value),
            (
                "connection blocked no less",
                before[blocked] == 0 or after[blocked] < before[blocked],
            ),
        ]
    return [reason for reason, ok in checks if not ok]


def _run_metered(scenario: Scenario, seed: int, change: KnobChange) -> dict[str, float]:
    meter = _EntityMeter()
    result = run_scenario(scenario, [meter], run_id=f"{scenario.name}-whatif", seed=seed)
    return _knob_metrics(change, result, meter)


def run_knob_whatif(
    scenario: Scenario, change: KnobChange, *, seed: int | None = None
) -> KnobComparison:
    """Run ``scenario`` as written and with ``change`` applied (same seed); compare the metrics
    of the changed entity. KeyError when the scenario has no such entity."""
    seed = scenario.seed if seed is None else seed
    changed = with_knob(scenario, change)
    return KnobComparison(
        change, _run_metered(scenario, seed, change), _run_metered(changed, seed, change)
    )


def format_knob_comparison(comparison: KnobComparison) -> str:
    """One change's what-if: a line naming it, its metrics before -> after, and the verdict."""
    change = comparison.change
    lines = [
        f"{change.entity} ({change.broker_kind}): {change.knob} {change.current} -> "
        f"{change.value} [{change.verdict}, rule {change.rule!r}]"
    ]
    for metric, before in comparison.before.items():
        after = comparison.after[metric]
        lines.append(f"  {metric}: {before} -> {after} ({_change(before, after)})")
    failed = comparison.failures()
    lines.append("  validated" if not failed else f"  NOT validated: {', '.join(failed)}")
    return "\n".join(lines)

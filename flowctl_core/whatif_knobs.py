"""What-if for every broker knob but Qpid's flow thresholds, one recommendation row at a time.

A recommendation row names its broker's knob (``knob``), the entity it is set on and the value
(``recommended_value``): Artemis max-size-bytes, reject threshold, producer and consumer windows;
RabbitMQ link credit, prefetch, x-max-length. Qpid's thresholds replay together through
:mod:`flowctl_core.whatif`. This module owns the rest: :func:`knob_changes_from_recommendations`
reads the rows, :func:`with_knob` applies one to the scenario part that spells it (an Artemis
address-setting, its producers' or a consumer's window, a protocol consumer's credit or prefetch,
a queue's length limit), :func:`run_knob_whatif` reruns the scenario with the same seed, and
:func:`knob_failures` says whether the metric the verdict is about moved as promised.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flowctl_core.broker import MAX_COUNT_KEY, POLICY_TYPE_KEY
from flowctl_core.clock import seconds_to_us
from flowctl_core.errors import did_you_mean
from flowctl_core.events import (
    PREFILL_LINK,
    TS_AT,
    EventRow,
    connection_of,
    detail_of,
    event_type_of,
    link_of,
    queue_of,
)
from flowctl_core.flowlimit import (
    FLOW_RESUME_COUNT_KEY,
    FLOW_RESUME_SIZE_KEY,
    FLOW_STOP_COUNT_KEY,
    FLOW_STOP_SIZE_KEY,
)
from flowctl_core.protocols.artemis import CORE as ARTEMIS_CLIENT_CORE
from flowctl_core.protocols.artemis_flow import UNBOUNDED
from flowctl_core.runner import RunResult, run_scenario
from flowctl_core.scenario import INT64_MAX, Scenario
from flowctl_core.whatif import change_text, figure_text
from schemas.broker_events import (
    AMQP_0_9_1,
    AMQP_1_0,
    OUTCOME_DROPPED,
    OUTCOME_FAILED,
    OUTCOME_REJECTED,
)
from schemas.model import US_PER_SECOND
from schemas.recommendations import (
    KNOB_CONSUMER_WINDOW,
    KNOB_LINK_CREDIT,
    KNOB_MAX_LENGTH,
    KNOB_MAX_SIZE_BYTES,
    KNOB_PREFETCH,
    KNOB_PRODUCER_WINDOW,
    KNOB_QPID_FLOW_STOP_COUNT,
    KNOB_REJECT_THRESHOLD,
    TOP_UP_AT_HALF_ADVICE,
    VERDICT_AT_RISK,
)


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
    #: Link credit only: the advice also tops the consumer up at half its new credit (its
    #: receiver refilled only at empty; :data:`~schemas.recommendations.TOP_UP_AT_HALF_ADVICE`).
    top_up_at_half: bool = False
    #: The row's unit ('messages', 'bytes', 'credits'), printed after the value; None: none.
    unit: str | None = None


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
                top_up_at_half=knob == KNOB_LINK_CREDIT
                and TOP_UP_AT_HALF_ADVICE in str(row.get("rationale") or ""),
                unit=row.get("unit"),
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


def _max_size(scenario: Scenario, address: str, max_size: int) -> Scenario:
    """``max-size-bytes`` set to ``max_size``; a reject threshold in force at or below the new
    limit moves up with it, the same gap above it as before (at most to a long's largest, and
    off above a limit of that): Artemis takes no threshold at or below the limit, and the
    advice that raises the limit says so (jobs/transforms/recommend_artemis.py, "messages
    dropped at the limit", a copy a test keeps equal)."""
    spec = _address_spec(scenario, address)
    threshold = spec.max_size_bytes_reject_threshold
    if max_size == UNBOUNDED and threshold != UNBOUNDED:
        # No limit at all: the threshold, a hard limit above the soft one, goes off with it
        # (the engine takes none above an unbounded address; a sweep's -1 was refused).
        return _address_setting(
            scenario, address, max_size_bytes=max_size, max_size_bytes_reject_threshold=UNBOUNDED
        )
    if threshold < 0 or threshold > max_size:
        return _address_setting(scenario, address, max_size_bytes=max_size)
    gap = max(1, threshold - spec.max_size_bytes)
    # A threshold is a long: held at the most it holds, and off when the limit is that already
    # (none is above it, and the engine takes none at or below the limit).
    moved = min(max_size + gap, INT64_MAX) if max_size < INT64_MAX else UNBOUNDED
    return _address_setting(
        scenario, address, max_size_bytes=max_size, max_size_bytes_reject_threshold=moved
    )


def _producer_windows(scenario: Scenario, address: str, window: int) -> Scenario:
    artemis = _artemis_part(scenario)
    _producer_window(scenario, address)  # KeyError without a CORE producer there
    producers = [
        p.model_copy(update={"window": window})
        if p.address == address and p.protocol == ARTEMIS_CLIENT_CORE
        else p
        for p in artemis.producers
    ]  # fmt: skip
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


def _credit_in_force(spec: Any) -> int:
    """A protocol consumer's credit at the run's end: its last credit change's, else its own."""
    return int(spec.credit_changes[-1].credit if spec.credit_changes else spec.credit)


def _consumer_credit(
    scenario: Scenario, consumer: str, credit: int, top_up_below: int | None = None
) -> Scenario:
    """A protocol consumer's link credit (1.0) or prefetch (0.9.1), from the start: its credit
    changes are dropped (the credit granted is the knob's value throughout). A 1.0 consumer tops
    up below ``top_up_below``, by default the same share of its credit as before."""
    connections = []
    found = False
    for connection in scenario.connections:
        consumers = []
        for spec in connection.consumers:
            if spec.name == consumer:
                found = True
                top_up = top_up_below
                if top_up is None:
                    # At least 1 when it topped up before: below 1 of a credit of 1 is 0 left.
                    top_up = spec.top_up_below * credit // spec.credit
                    if spec.top_up_below:
                        top_up = max(1, top_up)
                update = {"credit": credit, "top_up_below": min(top_up, credit)}
                spec = spec.model_copy(update={**update, "credit_changes": []})
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
    KNOB_MAX_SIZE_BYTES: _max_size,
    KNOB_REJECT_THRESHOLD: lambda s, e, v: _address_setting(
        s, e, max_size_bytes_reject_threshold=v
    ),
    KNOB_PRODUCER_WINDOW: _producer_windows,
    KNOB_CONSUMER_WINDOW: _consumer_window,
    KNOB_LINK_CREDIT: _consumer_credit,
    KNOB_PREFETCH: _consumer_credit,
    KNOB_MAX_LENGTH: _max_length,
}


def _no_such(
    scenario: Scenario,
    what: str,
    name: str,
    names: Iterable[str],
    plural: str = "",
    *,
    hint: str = "",
) -> KeyError:
    """The error for an entity a knob has none such of: the names it has (a review: "no
    artemis address" for a consumer's name left the user to find both), and another knob's
    entity of that name said with its knob."""
    names = sorted(set(names))
    listed = ", ".join(repr(n) for n in names) if names else "none"
    hint = hint or _other_knob(scenario, name) or did_you_mean(name, names)
    return KeyError(
        f"{scenario.name}: no {what} {name!r} (its {plural or what + 's'}: {listed}){hint}"
    )


def _other_knob(scenario: Scenario, name: str) -> str:
    """``"; 'x' is an artemis consumer (consumerWindowSize)"`` when ``name`` is an entity of
    another knob, else ""."""
    kinds: list[tuple[str, str]] = []
    if scenario.artemis is not None:
        if name in {a.name for a in scenario.artemis.addresses}:
            kinds.append(("an artemis address", f"{KNOB_MAX_SIZE_BYTES}, {KNOB_PRODUCER_WINDOW}"))
        if name in {c.name for c in scenario.artemis.consumers}:
            kinds.append(("an artemis consumer", KNOB_CONSUMER_WINDOW))
    for connection in scenario.connections:
        for spec in connection.consumers:
            if spec.name == name:
                knob = KNOB_LINK_CREDIT if connection.protocol == AMQP_1_0 else KNOB_PREFETCH
                kinds.append((f"an {connection.protocol} consumer", repr(knob)))
    if not kinds:
        return ""
    kind, knobs = kinds[0]
    return f"; {name!r} is {kind} ({knobs})"


def _address_spec(scenario: Scenario, address: str) -> Any:
    addresses = _artemis_part(scenario).addresses
    for spec in addresses:
        if spec.name == address:
            return spec
    names = (a.name for a in addresses)
    raise _no_such(scenario, "artemis address", address, names, "artemis addresses")


def _producer_window(scenario: Scenario, address: str) -> int | None:
    """The window of the address's CORE producers; None when they differ."""
    windows = {
        p.window
        for p in _artemis_part(scenario).producers
        if p.address == address and p.protocol == ARTEMIS_CLIENT_CORE
    }
    if not windows:
        producers = _artemis_part(scenario).producers
        core = (p.address for p in producers if p.protocol == ARTEMIS_CLIENT_CORE)
        others = sorted({p.protocol.upper() for p in producers if p.address == address})
        # The address's own knob is this one: say why it does not apply (a review: the hint
        # named producerWindowSize, the knob that had just refused it).
        hint = (
            f"; the producers of {address!r} are {' and '.join(others)}: {KNOB_PRODUCER_WINDOW} is "
            "a CORE producer's window"
            if others
            else ""
        )
        raise _no_such(
            scenario,
            "artemis address with CORE producers",
            address,
            core,
            "CORE producers' addresses",
            hint=hint,
        )
    return windows.pop() if len(windows) == 1 else None


def _consumer_spec(scenario: Scenario, consumer: str) -> Any:
    consumers = _artemis_part(scenario).consumers
    for spec in consumers:
        if spec.name == consumer:
            return spec
    raise _no_such(scenario, "artemis consumer", consumer, (c.name for c in consumers))


def _protocol_consumer(scenario: Scenario, consumer: str, protocol: str) -> Any:
    for connection in scenario.connections:
        for spec in connection.consumers:
            if spec.name == consumer and connection.protocol == protocol:
                return spec
    names = (
        spec.name
        for connection in scenario.connections
        if connection.protocol == protocol
        for spec in connection.consumers
    )
    raise _no_such(scenario, f"{protocol} consumer", consumer, names)


def _queue_max_length(scenario: Scenario, queue: str) -> int | None:
    """x-max-length with reject-publish as the engine spells it (:func:`_max_length`); None
    without one (no limit, or a limit with another overflow)."""
    for spec in scenario.queues:
        if spec.name == queue:
            limit = spec.arguments.get(MAX_COUNT_KEY)
            policy = spec.arguments.get(POLICY_TYPE_KEY, scenario.broker.default_limit_policy)
            rejects = policy == "reject"
            return int(limit) if limit and rejects else None
    raise KeyError(f"{scenario.name}: no queue {queue!r}")


#: How each knob's value as written is read from a scenario (the readers of
#: :data:`KNOB_APPLIERS`): (scenario, entity) -> the value, None when it is not one value.
KNOB_READERS: dict[str, Any] = {
    KNOB_MAX_SIZE_BYTES: lambda s, e: _address_spec(s, e).max_size_bytes,
    KNOB_REJECT_THRESHOLD: lambda s, e: _address_spec(s, e).max_size_bytes_reject_threshold,
    KNOB_PRODUCER_WINDOW: _producer_window,
    KNOB_CONSUMER_WINDOW: lambda s, e: _consumer_spec(s, e).window,
    KNOB_LINK_CREDIT: lambda s, e: _credit_in_force(_protocol_consumer(s, e, AMQP_1_0)),
    KNOB_PREFETCH: lambda s, e: _credit_in_force(_protocol_consumer(s, e, AMQP_0_9_1)),
    KNOB_MAX_LENGTH: _queue_max_length,
}


def current_knob_value(scenario: Scenario, knob: str, entity: str) -> int | None:
    """The value of ``knob`` of ``entity`` as the scenario writes it (KeyError when it has no
    such entity; None for a knob it does not read, Qpid's thresholds, which the broker derives
    from the queue's limits)."""
    read = KNOB_READERS.get(knob)
    if read is None:
        return None
    value: int | None = read(scenario, entity)
    return value


def knob_applies(scenario: Scenario, change: KnobChange) -> bool:
    """Whether the scenario has the entity and knob of ``change`` (a table covers many) and the
    change changes it: one the scenario already has leaves nothing to replay."""
    try:
        return with_knob(scenario, change) != scenario
    except KeyError:
        return False


def with_knob(scenario: Scenario, change: KnobChange) -> Scenario:
    """The scenario with ``change`` applied from the start (KeyError when the scenario has no such
    entity or knob)."""
    apply = KNOB_APPLIERS.get(change.knob)
    if apply is None:
        raise KeyError(f"no what-if for knob {change.knob!r}")
    if change.top_up_at_half:
        return _consumer_credit(scenario, change.entity, change.value, half_credit(change.value))
    changed: Scenario = apply(scenario, change.entity, change.value)
    return changed


def half_credit(credit: int) -> int:
    """The top-up point of a consumer topping up at half ``credit``: it grants again once fewer
    than half are left (at least 1: at 0 left)."""
    return max(1, (credit + 1) // 2)


class _EntityMeter:
    """Counts, from the events of one run, what the knobs' verdicts are about: per queue (an
    Artemis address writes its name there) messages lost by outcome and the peak address size;
    per queue the seconds its credit flow blocked 0.9.1 connections."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], int] = {}
        self.peak_address_bytes: dict[str, int] = {}
        self.blocked_since_us: dict[tuple[str, str], int] = {}
        self.blocked_us: dict[str, int] = {}
        #: Per queue, the prefill's messages refused (among the rejections): written before the
        #: run by no publisher of it, which a what-if says (an audit: "it refuses 4,000 more
        #: publishes" of a prefill).
        self.prefill_refused: dict[str, int] = {}

    def __call__(self, row: EventRow) -> None:
        # Every event of a run passes here (what-if and sweep runs): read the few columns needed
        # straight from the row, and parse a detail only where it can hold what is counted.
        event_type = event_type_of(row)
        if event_type not in _METERED:
            return
        queue = queue_of(row)
        if queue is None:
            return
        text = detail_of(row)
        rejected = event_type == "message_rejected"
        detail = json.loads(text) if text and (rejected or _ADDRESS_SIZE in text) else {}
        if rejected:
            key = (queue, str(detail.get("outcome", OUTCOME_REJECTED)))
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
            if link_of(row) == PREFILL_LINK:
                self.prefill_refused[queue] = self.prefill_refused.get(queue, 0) + 1
        elif event_type in ("connection_blocked", "connection_unblocked"):
            self._blocking(row, queue, event_type == "connection_blocked")
        size = detail.get(_ADDRESS_SIZE)
        if size is not None:
            self.peak_address_bytes[queue] = max(self.peak_address_bytes.get(queue, 0), size)

    def _blocking(self, row: EventRow, queue: str, blocked: bool) -> None:
        key = (str(connection_of(row)), queue)
        ts_us = _ts_us(row[TS_AT])
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
        return (self.blocked_us.get(queue, 0) + open_us) / US_PER_SECOND


#: The detail key of an Artemis address's size after the event (the peak the verdicts quote).
_ADDRESS_SIZE = "address_size"
_METERED = frozenset(
    {"message_rejected", "enqueue", "flow_stopped", "connection_blocked", "connection_unblocked"}
)


def _ts_us(ts: Any) -> int:
    return ts if isinstance(ts, int) else seconds_to_us(ts.timestamp())


@dataclass(frozen=True)
class MeteredRun:
    """One run of a scenario with what every knob's verdict is about, for every entity: the run
    as written serves each change a what-if replays on the same scenario and seed."""

    result: RunResult
    meter: _EntityMeter


def metered_run(scenario: Scenario, seed: int) -> MeteredRun:
    meter = _EntityMeter()
    result = run_scenario(scenario, [meter], run_id=f"{scenario.name}-whatif", seed=seed)
    return MeteredRun(result, meter)


def _address_metrics(change: KnobChange, run: MeteredRun) -> dict[str, float]:
    """An Artemis address's messages lost and rejected, its peak size and overshoot, and the
    work its producers and its queues' consumers did."""
    entity, result, meter = change.entity, run.result, run.meter
    assert result.artemis is not None
    address = result.artemis.addresses[entity]
    peak = meter.peak_address_bytes.get(entity, 0)
    limit = address.config.settings.max_size_bytes
    producers = result.artemis.producers.values()
    queues = set(address.config.queue_names)
    consumers = result.artemis.consumers.values()
    return {
        "lost msgs (dropped, failed)": meter.lost(entity, OUTCOME_DROPPED, OUTCOME_FAILED),
        "rejected msgs": meter.lost(entity, OUTCOME_REJECTED),
        "peak address bytes": peak,
        "max overshoot bytes": 0 if limit == UNBOUNDED else max(peak - limit, 0),
        # The work the setting leaves the clients (a sweep trades it against memory).
        "producers' msgs sent": sum(p.sent for p in producers if p.config.address == entity),
        "queue msgs processed": sum(c.processed for c in consumers if c.config.queue in queues),
    }


def _consumer_window_metrics(change: KnobChange, run: MeteredRun) -> dict[str, float]:
    """An Artemis consumer's queue: its messages processed, and by when, by all its consumers."""
    entity, result = change.entity, run.result
    assert result.artemis is not None
    queue = result.artemis.consumers[entity].config.queue
    siblings = [c for c in result.artemis.consumers.values() if c.config.queue == queue]
    # Nothing processed: as late as the run's end, not the epoch.
    last_us = max(
        (c.processed_at_us[-1] for c in siblings if c.processed_at_us), default=result.end_us
    )
    return {
        "queue msgs processed": sum(c.processed for c in siblings),
        "queue processed by s": (last_us - result.start_us) / US_PER_SECOND,
        "consumer msgs processed": result.artemis.consumers[entity].processed,
    }


def _credit_metrics(change: KnobChange, run: MeteredRun) -> dict[str, float]:
    """A protocol consumer's messages received, and by when."""
    entity, result = change.entity, run.result
    received = {
        name: count for c in result.connections.values() for name, count in c.received().items()
    }
    received_at_us = {
        name: at for c in result.connections.values() for name, at in c.last_received_us().items()
    }
    # A finite backlog is received whole with any credit: then more credit shows as the same
    # messages received sooner. Nothing received: as late as the run's end.
    done_us = received_at_us[entity]
    done_us = result.end_us if done_us is None else done_us
    return {
        "consumer msgs received": received[entity],
        "consumer received by s": (done_us - result.start_us) / US_PER_SECOND,
    }


def _max_length_metrics(change: KnobChange, run: MeteredRun) -> dict[str, float]:
    """A queue's work, peak depth, refusals and the time its credit flow blocked connections."""
    entity, result, meter = change.entity, run.result, run.meter
    stats = result.broker.queues[entity].stats
    prefill_refused = meter.prefill_refused.get(entity, 0)
    return {
        # The queue's own work (its consumers' pace): a limit must not starve it (a sweep).
        "queue msgs delivered": stats.dequeued,
        "peak depth msgs": stats.peak_depth_msgs,
        "rejected msgs": stats.rejected,
        "prefill refused msgs": prefill_refused,
        "connection blocked s": round(meter.blocked_s(entity, result.end_us), 6),
    }


#: The metrics of a change's entity in one run, by knob: what :data:`KNOB_CHECKS` reads.
KNOB_METRICS: dict[str, Callable[[KnobChange, MeteredRun], dict[str, float]]] = {
    KNOB_MAX_SIZE_BYTES: _address_metrics,
    KNOB_REJECT_THRESHOLD: _address_metrics,
    KNOB_PRODUCER_WINDOW: _address_metrics,
    KNOB_CONSUMER_WINDOW: _consumer_window_metrics,
    KNOB_LINK_CREDIT: _credit_metrics,
    KNOB_PREFETCH: _credit_metrics,
    KNOB_MAX_LENGTH: _max_length_metrics,
}


def knob_metrics(change: KnobChange, run: MeteredRun) -> dict[str, float]:
    """The metrics of ``change``'s entity in ``run`` (:data:`KNOB_METRICS`); a knob without
    metrics is an error, not another knob's metrics."""
    if change.knob not in KNOB_METRICS:
        raise KeyError(f"no what-if metrics for knob {change.knob!r}")
    return KNOB_METRICS[change.knob](change, run)


@dataclass(frozen=True)
class KnobComparison:
    """A knob change replayed: the metrics of its entity before and after, and whether the
    re-run shows what the verdict promised (:func:`knob_failures`)."""

    change: KnobChange
    before: dict[str, float]
    after: dict[str, float]

    def failures(self) -> list[str]:
        return [] if self.unexercised() else knob_failures(self)

    def unexercised(self) -> str | None:
        return knob_unexercised(self)

    @property
    def validated(self) -> bool:
        return not self.unexercised() and not self.failures()


#: A backlog received sooner by less than this share of the time it took is not sooner: the
#: what-if's and the sweep's tolerance (flowctl_core/sweep.py ``_RECEIVED_BY``).
SOONER_SHARE = 0.01


def knob_unexercised(comparison: KnobComparison) -> str | None:
    """Why the re-run cannot judge the change either way (None when it can): an x-max-length
    the queue never reaches in the replay acts on nothing in it (a limit sized for a backlog
    longer than the run lasts); it is neither validated nor failed."""
    change, before, after = comparison.change, comparison.before, comparison.after
    if change.knob != KNOB_MAX_LENGTH:
        return None
    # A limit in force as written that the run reached acts there: taking it away is exercised.
    reached_as_written = change.current is not None and before["peak depth msgs"] >= change.current
    if after["peak depth msgs"] < change.value and not reached_as_written:
        return (
            f"the queue's peak of {after['peak depth msgs']:,.0f} stays under {change.value:,} "
            "in this run, so the limit never acts in it (replay a longer run to judge it)"
        )
    return None


@dataclass(frozen=True)
class KnobCheck:
    """One thing a re-run must show for a change: said as ``held`` when it does, as ``failed``
    when it does not."""

    held: str
    failed: str
    ok: bool


def _lost_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """max-size-bytes (messages lost at the limit): fewer messages lost."""
    before, after = comparison.before, comparison.after
    key = "lost msgs (dropped, failed)"
    return [
        KnobCheck(
            "messages lost cut" if before[key] else "no messages lost either way",
            "messages lost not cut",
            after[key] < before[key] or before[key] == 0,
        )
    ]


def _reject_threshold_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """The reject threshold: the peak address size within it, no more rejections, and fewer when
    some were rejected."""
    change, before, after = comparison.change, comparison.before, comparison.after
    rejected = "rejected msgs"
    return [
        KnobCheck(
            "peak address size within the threshold",
            "peak address size above the threshold",
            after["peak address bytes"] <= change.value,
        ),
        KnobCheck("no more rejections", "more rejections", after[rejected] <= before[rejected]),
        KnobCheck(
            "rejections cut" if before[rejected] else "no rejections either way",
            "rejections not cut",
            before[rejected] == 0 or after[rejected] < before[rejected],
        ),
    ]


def _producer_window_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """producerWindowSize: less overshoot past max-size-bytes (at risk, a bound not yet reached:
    no more), no more messages lost."""
    change, before, after = comparison.change, comparison.before, comparison.after
    overshoot, lost = "max overshoot bytes", "lost msgs (dropped, failed)"
    # An at-risk change is preventive (seed 003's bound, not yet reached): no more overshoot;
    # a lowering of windows that overshot must cut it.
    limits = (
        KnobCheck("no more overshoot", "more overshoot", after[overshoot] <= before[overshoot])
        if change.verdict == VERDICT_AT_RISK
        else KnobCheck("overshoot cut", "overshoot not cut", after[overshoot] < before[overshoot])
    )
    return [
        limits,
        KnobCheck("no more messages lost", "more messages lost", after[lost] <= before[lost]),
    ]


def _consumer_window_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """consumerWindowSize 0 (slow consumer): the queue's messages processed sooner or more of
    them; another window raised: the queue's messages processed more, or as many sooner by more
    than :data:`SOONER_SHARE`; lowered: no fewer of them processed (by any of its consumers)."""
    change, before, after = comparison.change, comparison.before, comparison.after
    # The queue's, not the consumer's own: a smaller buffer leaves a slow consumer fewer
    # messages to hold, which the others then take (seed 003).
    key, done = "queue msgs processed", "queue processed by s"
    if change.value == 0:
        return [
            KnobCheck(
                "the queue's messages processed sooner or more",
                "the queue's messages processed neither sooner nor more",
                _more_or_sooner(before, after, key, done, share=0.0),
            )
        ]
    if _window_raised(change):
        # A raise is for a consumer starved for credit (Kung & Morris): it must show, as a link
        # credit raise does (an audit saw 100 KiB -> 200 KiB validated, nothing moved).
        return [
            KnobCheck(
                "the queue's messages processed more or sooner",
                "the queue's messages processed neither more nor sooner",
                _more_or_sooner(before, after, key, done),
            )
        ]
    return [
        KnobCheck(
            "the queue's consumers processed no fewer",
            "the queue's consumers processed fewer",
            after[key] >= before[key],
        )
    ]


def _credit_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """Link credit / prefetch raised: more messages received, or as many sooner by more than
    :data:`SOONER_SHARE` (a finite backlog drained faster); lowered: no fewer, and (as many) no
    later by more than that share."""
    change, before, after = comparison.change, comparison.before, comparison.after
    key, done = "consumer msgs received", "consumer received by s"
    if change.current is not None and change.value < change.current:
        # Credit past rate x round trip only holds messages at the client, so less of it must
        # not slow the consumer down (an audit saw 200 -> 10 validated, received 3.7x later):
        # no fewer received, and no later beyond the same share.
        return [
            KnobCheck(
                "no fewer messages received", "fewer messages received", after[key] >= before[key]
            ),
            KnobCheck(
                "received no later",
                "received later",
                after[key] > before[key] or after[done] <= before[done] * (1 + SOONER_SHARE),
            ),
        ]
    return [
        KnobCheck(
            "messages received more or sooner",
            "messages received neither more nor sooner",
            _more_or_sooner(before, after, key, done),
        )
    ]


def _max_length_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """x-max-length: the peak depth within it, and less time blocked for the connections its
    credit flow blocked."""
    change, before, after = comparison.change, comparison.before, comparison.after
    # The time the queue's credit flow blocked its connection (a connection_blocked names the
    # queue that blocks it). Another queue may block the same connection: "no connection
    # blocked" beside one another queue blocked 1.74 s read as false (a review).
    blocked = "connection blocked s"
    return [
        KnobCheck(
            "peak depth within the limit",
            "peak depth above the limit",
            after["peak depth msgs"] <= change.value,
        ),
        KnobCheck(
            "its connection blocked less" if before[blocked] else "it blocked no connection",
            "connection blocked no less",
            before[blocked] == 0 or after[blocked] < before[blocked],
        ),
    ]


#: What the re-run of a change must show for it to be what it is for, by knob: each function's
#: docstring says what.
KNOB_CHECKS: dict[str, Callable[[KnobComparison], list[KnobCheck]]] = {
    KNOB_MAX_SIZE_BYTES: _lost_checks,
    KNOB_REJECT_THRESHOLD: _reject_threshold_checks,
    KNOB_PRODUCER_WINDOW: _producer_window_checks,
    KNOB_CONSUMER_WINDOW: _consumer_window_checks,
    KNOB_LINK_CREDIT: _credit_checks,
    KNOB_PREFETCH: _credit_checks,
    KNOB_MAX_LENGTH: _max_length_checks,
}


def knob_checks(comparison: KnobComparison) -> list[KnobCheck]:
    """What the re-run must show for the change to be what it is for (:data:`KNOB_CHECKS`); a
    knob without checks is an error, not another knob's checks."""
    knob = comparison.change.knob
    if knob not in KNOB_CHECKS:
        raise KeyError(f"no what-if checks for knob {knob!r}")
    return KNOB_CHECKS[knob](comparison)


def _more_or_sooner(
    before: Mapping[str, float],
    after: Mapping[str, float],
    count: str,
    done: str,
    share: float = SOONER_SHARE,
) -> bool:
    """More of ``count``, or as many with ``done`` (seconds) sooner by more than ``share``."""
    return after[count] > before[count] or (
        after[count] == before[count] and after[done] < before[done] * (1 - share)
    )


def _window_raised(change: KnobChange) -> bool:
    """Whether a consumerWindowSize change gives the consumer more buffer: a larger bounded
    window, or -1 (unbounded) for a bounded one."""
    if change.current is None or change.current == -1:
        return False
    return change.value == -1 or change.value > change.current


def knob_failures(comparison: KnobComparison) -> list[str]:
    """Why the re-run does not show what the change is for (empty when it does):
    :func:`knob_checks` that fail."""
    return [check.failed for check in knob_checks(comparison) if not check.ok]


def measure_knob(scenario: Scenario, seed: int, change: KnobChange) -> dict[str, float]:
    """One run of ``scenario``: the metrics of ``change``'s entity that its knob is judged on
    (what-if and sweep, flowctl_core/sweep.py)."""
    return knob_metrics(change, metered_run(scenario, seed))


def run_knob_whatif(
    scenario: Scenario, change: KnobChange, *, seed: int | None = None
) -> KnobComparison:
    """Run ``scenario`` as written and with ``change`` applied (same seed); compare the metrics
    of the changed entity. KeyError when the scenario has no such entity."""
    (comparison,) = run_knob_whatifs(scenario, [change], seed=seed)
    return comparison


def run_knob_whatifs(
    scenario: Scenario, changes: Iterable[KnobChange], *, seed: int | None = None
) -> list[KnobComparison]:
    """:func:`run_knob_whatif` of each change, the scenario as written run once for all of them
    (a run is deterministic in its scenario and seed). KeyError, before any run, when the
    scenario lacks a change's entity."""
    seed = scenario.seed if seed is None else seed
    changed = [(change, with_knob(scenario, change)) for change in changes]
    if not changed:
        return []
    as_written = metered_run(scenario, seed)
    comparisons = []
    for change, scenario_changed in changed:
        before = knob_metrics(change, as_written)
        comparisons.append(
            KnobComparison(change, before, measure_knob(scenario_changed, seed, change))
        )
    return comparisons


def format_knob_comparison(comparison: KnobComparison) -> str:
    """One change's what-if: a line naming it, its metrics before -> after, and the verdict."""
    change = comparison.change
    half = f", topped up at half (below {half_credit(change.value)})"
    unit = f" {change.unit}" if change.unit else ""
    lines = [
        f"{change.entity} ({change.broker_kind}): {change.knob} "
        f"{'none' if change.current is None else figure_text(change.current)} -> "
        f"{figure_text(change.value)}{unit}{half if change.top_up_at_half else ''} "
        f"[{change.verdict}, rule {change.rule!r}]"
    ]
    for metric, before in comparison.before.items():
        after = comparison.after[metric]
        lines.append(
            f"  {metric}: {figure_text(before)} -> {figure_text(after)} "
            f"({change_text(before, after)})"
        )
    failed, unexercised = comparison.failures(), comparison.unexercised()
    if unexercised:
        lines.append(f"  not exercised: {unexercised}")
    elif failed:
        lines.append(f"  NOT validated: {', '.join(failed)}")
    else:
        held = ", ".join(check.held for check in knob_checks(comparison))
        lines.append(f"  validated: {held}{_refused_note(comparison)}")
    return "\n".join(lines)


def _refused_note(comparison: KnobComparison) -> str:
    """A length limit validated with more messages refused says that this is what it is for;
    on a prefilled queue, how the refusals split, each side's own: publishes of the run, and the
    prefill, written before the run by none of its publishers."""
    before, after = comparison.before, comparison.after
    if (
        comparison.change.knob != KNOB_MAX_LENGTH
        or after["rejected msgs"] <= before["rejected msgs"]
    ):
        return ""
    more = after["rejected msgs"] - before["rejected msgs"]
    prefill = "prefill refused msgs"
    if not before.get(prefill) and not after.get(prefill):
        return (
            f"; it refuses {more:,.0f} more publishes at the limit (reject-publish), the backlog "
            "it keeps from growing"
        )
    run_before = before["rejected msgs"] - before[prefill]
    run_after = after["rejected msgs"] - after[prefill]
    return (
        f"; it refuses {more:,.0f} more messages at the limit (reject-publish), the backlog it "
        f"keeps from growing (publishes of the run {run_before:,.0f} -> {run_after:,.0f}, the "
        f"prefill written before it {before[prefill]:,.0f} -> {after[prefill]:,.0f})"
    )

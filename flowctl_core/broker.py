"""The broker: queues, exchanges, producers and consumers wired to one event bus and clock."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowctl_core.clock import Scheduler
from flowctl_core.events import EventBus, LinkColumns, link_fields
from flowctl_core.exchange import Exchange, ExchangeType
from flowctl_core.flowlimit import (
    DEFAULT_FLOW_RESUME_RATIO,
    DEFAULT_FLOW_STOP_RATIO,
    FLOW_KEYS,
    FlowConfigError,
    FlowDefaults,
    FlowThresholds,
    ThresholdChange,
    integer_argument,
)
from flowctl_core.protocols.config import CLASSIC_QUEUE, QUEUE_TYPE_ARGUMENT, QUEUE_TYPES
from flowctl_core.queue import (
    LIMIT_POLICIES,
    QPID_POLICY_SPELLINGS,
    EnqueueOutcome,
    LimitPolicy,
    Message,
    Queue,
    Transfer,
)

MAX_COUNT_KEY = "qpid.max_count"
MAX_SIZE_KEY = "qpid.max_size"
POLICY_TYPE_KEY = "qpid.policy_type"
DEFAULT_EXCHANGE = ""
ALARM_RESOURCES: tuple[str, ...] = ("memory", "disk")


#: Qpid's broker-wide default queue limit (its --default-queue-limit): 100 MiB.
QPID_DEFAULT_QUEUE_LIMIT_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class BrokerConfig:
    name: str = "broker-1"
    # Qpid's --default-flow-stop-threshold / --default-flow-resume-threshold, in percent.
    default_flow_stop_ratio: float = DEFAULT_FLOW_STOP_RATIO
    default_flow_resume_ratio: float = DEFAULT_FLOW_RESUME_RATIO
    # Qpid's --default-queue-limit in bytes, for queues declared without qpid.max_size (0: none);
    # DESIGN §2: 100 MiB, so such a queue still gets byte thresholds (80 % / 70 % of it).
    default_queue_limit_bytes: int = QPID_DEFAULT_QUEUE_LIMIT_BYTES
    default_limit_policy: LimitPolicy = "reject"
    # Log transfer_completed for transfers completed at once too (doubles the log; off by default).
    log_immediate_completions: bool = False

    @property
    def flow_defaults(self) -> FlowDefaults:
        return FlowDefaults(self.default_flow_stop_ratio, self.default_flow_resume_ratio)


class Broker:
    def __init__(
        self, bus: EventBus, scheduler: Scheduler, config: BrokerConfig | None = None
    ) -> None:
        self.config = config or BrokerConfig()
        self.flow_defaults = self.config.flow_defaults  # validates the ratios up front
        self.name = self.config.name
        self.bus = bus
        self.scheduler = scheduler
        self.queues: dict[str, Queue] = {}
        # RabbitMQ's queue type per queue, from its x-queue-type argument (classic by default).
        self.queue_types: dict[str, str] = {}
        self.exchanges: dict[str, Exchange] = {
            DEFAULT_EXCHANGE: Exchange(DEFAULT_EXCHANGE, "direct")
        }
        # A C-level counter: one message id per transfer costs no Python frame.
        self.next_message_id: Callable[[], int] = itertools.count(1).__next__
        self._route_cache: dict[tuple[str, str], list[Queue]] = {}
        # Resource alarms in force ("memory", "disk") and whoever must react to them.
        self.alarms: set[str] = set()
        self.alarm_listeners: list[Callable[[bool], None]] = []

    # -- events --------------------------------------------------------------------------------
    def emit(self, event_type: str, fields: Mapping[str, Any]) -> None:
        """An event given as column name -> value (see :meth:`EventBus.emit`)."""
        self.bus.emit(self.name, event_type, fields)

    # -- declarations --------------------------------------------------------------------------
    def declare_queue(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        service_time_us: int = 0,
    ) -> Queue:
        """Declare a queue from Qpid declare arguments (``qpid.max_count``, ``qpid.flow_*``...).

        ``service_time_us`` makes the queue confirm each transfer only after processing it.
        """
        arguments = dict(arguments or {})
        if service_time_us < 0:
            raise FlowConfigError(f"queue {name!r}: service_time_us must be >= 0")
        if not name:
            raise FlowConfigError("a queue needs a non-empty name")
        if name in self.queues:
            raise FlowConfigError(f"queue {name!r} is already declared")
        queue_type = arguments.get(QUEUE_TYPE_ARGUMENT, CLASSIC_QUEUE)
        if queue_type not in QUEUE_TYPES:
            raise FlowConfigError(
                f"queue {name!r}: {QUEUE_TYPE_ARGUMENT} must be one of {', '.join(QUEUE_TYPES)} "
                f"(the queue types the engine models), got {queue_type!r}"
            )
        max_count = integer_argument(name, MAX_COUNT_KEY, arguments.get(MAX_COUNT_KEY, 0))
        max_size = integer_argument(
            name, MAX_SIZE_KEY, arguments.get(MAX_SIZE_KEY, self.config.default_queue_limit_bytes)
        )
        policy = arguments.get(POLICY_TYPE_KEY, self.config.default_limit_policy)
        if isinstance(policy, str):
            policy = QPID_POLICY_SPELLINGS.get(policy, policy)
        if policy not in LIMIT_POLICIES:
            spellings = ", ".join((*LIMIT_POLICIES, *QPID_POLICY_SPELLINGS))
            raise FlowConfigError(
                f"queue {name!r}: {POLICY_TYPE_KEY} must be one of {spellings}, got {policy!r}"
            )
        explicit = FlowThresholds.from_arguments(name, arguments)
        # Resume keys without a stop key are ignored (Qpid: only a stop makes them explicit).
        ignored = [] if explicit is not None else [key for key in FLOW_KEYS if key in arguments]
        for key in ignored:  # still checked: a malformed value is an error, not a silent pass
            integer_argument(name, key, arguments[key])
        if explicit is not None and not explicit.enabled:
            thresholds = FlowThresholds()  # stops 0: flow control off, any resume aside
        elif explicit is not None:
            explicit.validate(name, max_count, max_size)
            thresholds = explicit
        elif policy in ("ring", "ring-strict"):
            # Seed 001: ring queues replace their oldest message instead; no default thresholds.
            thresholds = FlowThresholds()
        else:
            thresholds = self.flow_defaults.thresholds_for(max_count, max_size)
            thresholds.validate(name, max_count, max_size)
        queue = Queue(
            self,
            name,
            max_count=max_count,
            max_size=max_size,
            policy=policy,
            thresholds=thresholds,
            service_time_us=service_time_us,
        )
        self.queues[name] = queue
        self.queue_types[name] = queue_type
        self.exchanges[DEFAULT_EXCHANGE].bind(name, name)
        self._route_cache.clear()
        source = "arguments" if explicit is not None else "defaults"
        detail: dict[str, Any] = {"policy": policy, "thresholds": source}
        if ignored:
            detail["ignored"] = ignored
        queue.emit("queue_declared", detail=json.dumps(detail))
        return queue

    def set_thresholds(self, queue: str, thresholds: FlowThresholds | ThresholdChange) -> None:
        """Change a queue's thresholds at run time; the next transition uses them.

        :class:`FlowThresholds` replaces all four. A :class:`ThresholdChange` replaces the ones it
        gives and keeps the others at the queue's values in force; the merged thresholds are
        validated like a declaration's, and a refusal names the values that were kept.
        """
        target = self.queue(queue)
        if isinstance(thresholds, FlowThresholds):
            target.set_thresholds(thresholds)
            return
        merged = thresholds.applied_to(target.flow.thresholds)
        try:
            target.set_thresholds(merged)
        except FlowConfigError as error:
            kept = ", ".join(f"flow_{name}={getattr(merged, name)}" for name in thresholds.kept)
            if not kept:
                raise
            raise FlowConfigError(
                f"{error}; not given, so kept at the queue's current values: {kept}"
            ) from None

    def declare_exchange(self, name: str, exchange_type: ExchangeType) -> Exchange:
        if name in self.exchanges:
            existing = self.exchanges[name]
            if existing.type != exchange_type:
                raise FlowConfigError(
                    f"exchange {name!r} exists with type {existing.type}, not {exchange_type}"
                )
            return existing
        exchange = Exchange(name, exchange_type)
        self.exchanges[name] = exchange
        return exchange

    def bind(self, exchange: str, queue: str, binding_key: str = "") -> None:
        self.queue(queue)
        self.exchange(exchange).bind(queue, binding_key)
        self._route_cache.clear()

    def queue_type(self, name: str) -> str:
        """RabbitMQ's type of the queue (``x-queue-type``): classic or quorum."""
        self.queue(name)
        return self.queue_types[name]

    def queue(self, name: str) -> Queue:
        try:
            return self.queues[name]
        except KeyError:
            raise FlowConfigError(f"no queue named {name!r}") from None

    def exchange(self, name: str) -> Exchange:
        try:
            return self.exchanges[name]
        except KeyError:
            raise FlowConfigError(f"no exchange named {name!r}") from None

    # -- resource alarms ------------------------------------------------------------------------
    def raise_alarm(self, resource: str) -> None:
        """A memory or disk alarm: protocol front ends stop reading publishes (seed 004)."""
        if resource not in ALARM_RESOURCES:
            raise ValueError(f"unknown alarm resource {resource!r}; one of {ALARM_RESOURCES}")
        if resource in self.alarms:
            return
        was_clear = not self.alarms
        self.alarms.add(resource)
        self.emit("alarm_raised", {"detail": json.dumps({"resource": resource})})
        if was_clear:
            for listener in list(self.alarm_listeners):
                listener(True)

    def clear_alarm(self, resource: str) -> None:
        if resource not in self.alarms:
            return
        self.alarms.discard(resource)
        self.emit("alarm_cleared", {"detail": json.dumps({"resource": resource})})
        if not self.alarms:
            for listener in list(self.alarm_listeners):
                listener(False)

    @property
    def alarmed(self) -> bool:
        return bool(self.alarms)

    # -- message flow --------------------------------------------------------------------------
    def route(self, exchange: str, routing_key: str) -> list[Queue]:
        # Bindings change rarely and routing happens per message: memoise per (exchange, key).
        cache_key = (exchange, routing_key)
        destinations = self._route_cache.get(cache_key)
        if destinations is None:
            names = self.exchange(exchange).route(routing_key)
            destinations = [self.queues[name] for name in names]
            self._route_cache[cache_key] = destinations
        return destinations

    def publish(
        self,
        transfer: Transfer,
        destinations: list[Queue],
        link: LinkColumns,
    ) -> int:
        """Enqueue one transfer on every destination; complete it now unless a queue holds it.

        Returns how many destinations accepted the message.
        """
        accepted = 0
        if len(destinations) == 1:
            # The transfer is the message of its one queue: no second object per send.
            if destinations[0].enqueue(transfer, link) == EnqueueOutcome.ACCEPTED:
                accepted = 1
        else:
            refresh = transfer.refresh_link
            for queue in destinations:
                message = Message(transfer.message_id, transfer.size, transfer)
                if refresh is not None:  # an earlier destination may have completed transfers
                    link = refresh()
                if queue.enqueue(message, link) == EnqueueOutcome.ACCEPTED:
                    accepted += 1
        if not destinations:
            fields = link_fields(link)
            fields.update(
                message_id=transfer.message_id,
                size_bytes=transfer.size,
                detail='{"reason":"unroutable"}',
            )
            self.emit("message_rejected", fields)
        if transfer.held_by == 0:
            self.complete_transfer(transfer)
        return accepted

    def complete_transfer(self, transfer: Transfer) -> None:
        if transfer.on_complete is not None:
            transfer.on_complete(transfer)

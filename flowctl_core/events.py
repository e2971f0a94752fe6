"""Event emission: the engine's only output.

An event is a plain ``dict`` keyed by the ``broker_events`` column names; absent keys are null.
Dicts are the cheapest record CPython builds, and pyarrow turns a batch of them into columns in C.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowctl_core.clock import Scheduler
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES

Event = dict[str, Any]
Subscriber = Callable[[Event], None]

_EVENT_TYPES = frozenset(EVENT_TYPES)
_COLUMNS = frozenset(BROKER_EVENTS.names)


class EventBus:
    """Stamps events with run, broker, sequence number and virtual time, and fans them out."""

    def __init__(self, run_id: str, scheduler: Scheduler, *, validate: bool = False) -> None:
        self.run_id = run_id
        self.scheduler = scheduler
        self.seq = 0
        self._subscribers: list[Subscriber] = []
        # Validation costs a set lookup per field; tests switch it on, benchmarks leave it off.
        self._validate = validate

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def emit(self, broker: str, event_type: str, fields: Event) -> Event:
        """Stamp ``fields`` in place and hand it to every subscriber; returns it."""
        if self._validate:
            self._check(event_type, fields)
        self.seq += 1
        fields["run_id"] = self.run_id
        fields["broker"] = broker
        fields["seq"] = self.seq
        fields["ts"] = self.scheduler.now_us
        fields["event_type"] = event_type
        for subscriber in self._subscribers:
            subscriber(fields)
        return fields

    @staticmethod
    def _check(event_type: str, fields: Event) -> None:
        if event_type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        unknown = fields.keys() - _COLUMNS
        if unknown:
            raise ValueError(f"{event_type}: unknown columns {sorted(unknown)}")


class EventCollector:
    """Keeps every event in memory: for tests and small runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of_type(self, *event_types: str) -> list[Event]:
        wanted = set(event_types)
        return [e for e in self.events if e["event_type"] in wanted]

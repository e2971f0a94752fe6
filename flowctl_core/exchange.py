"""Exchanges route one message to zero, one or several queues."""

from __future__ import annotations

import re
from typing import Literal

ExchangeType = Literal["direct", "fanout", "topic"]
EXCHANGE_TYPES: tuple[str, ...] = ("direct", "fanout", "topic")


class Exchange:
    def __init__(self, name: str, exchange_type: ExchangeType) -> None:
        if exchange_type not in EXCHANGE_TYPES:
            raise ValueError(f"exchange {name!r}: unknown type {exchange_type!r}")
        self.name = name
        self.type = exchange_type
        self._bindings: list[tuple[str, str]] = []  # (binding key, queue), in bind order
        self._topic_patterns: dict[str, re.Pattern[str]] = {}

    def bind(self, queue: str, binding_key: str = "") -> None:
        if (binding_key, queue) not in self._bindings:
            self._bindings.append((binding_key, queue))
            if self.type == "topic":
                self._topic_patterns[binding_key] = _topic_regex(binding_key)

    def route(self, routing_key: str) -> list[str]:
        """Destination queues in bind order, each once."""
        if self.type == "fanout":
            matched = [queue for _, queue in self._bindings]
        elif self.type == "direct":
            matched = [queue for key, queue in self._bindings if key == routing_key]
        else:
            matched = [
                queue
                for key, queue in self._bindings
                if self._topic_patterns[key].fullmatch(routing_key)
            ]
        return list(dict.fromkeys(matched))


def _topic_regex(binding_key: str) -> re.Pattern[str]:
    """AMQP topic matching: ``*`` is exactly one word, ``#`` zero or more words."""
    parts: list[str] = []
    for word in binding_key.split("."):
        if word == "#":
            parts.append(r"(?:[^.]+(?:\.[^.]+)*)?")
        elif word == "*":
            parts.append(r"[^.]+")
        else:
            parts.append(re.escape(word))
    pattern = r"\.".join(parts)
    # "#" may swallow its neighbouring dots: a.# matches "a", #.b matches "b".
    pattern = pattern.replace(r"\.(?:[^.]+(?:\.[^.]+)*)?", r"(?:\.[^.]+)*")
    pattern = pattern.replace(r"(?:[^.]+(?:\.[^.]+)*)?\.", r"(?:[^.]+\.)*")
    return re.compile(pattern)

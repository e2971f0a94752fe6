"""Qpid-style queue flow limits (seeds 000 and 001; DESIGN.md §2).

Flow goes ON ("stopped") on an enqueue when the depth, counted after the enqueue, is strictly
above any non-zero stop threshold; it goes OFF on a dequeue when the depth is strictly below every
non-zero resume threshold. ``flowStoppedCount`` counts OFF->ON transitions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from flowctl_core.errors import ConfigurationError

FLOW_STOP_COUNT_KEY = "qpid.flow_stop_count"
FLOW_RESUME_COUNT_KEY = "qpid.flow_resume_count"
FLOW_STOP_SIZE_KEY = "qpid.flow_stop_size"
FLOW_RESUME_SIZE_KEY = "qpid.flow_resume_size"
FLOW_KEYS = (FLOW_STOP_COUNT_KEY, FLOW_RESUME_COUNT_KEY, FLOW_STOP_SIZE_KEY, FLOW_RESUME_SIZE_KEY)
FLOW_STOP_KEYS = (FLOW_STOP_COUNT_KEY, FLOW_STOP_SIZE_KEY)


class FlowConfigError(ConfigurationError):
    """Invalid flow thresholds or ratios; the message names the queue and the setting."""


_DIGITS = re.compile(r"[0-9]+")


def integer_argument(queue: str, key: str, raw: object) -> int:
    """One numeric ``qpid.*`` declare argument as a non-negative int.

    Seed 001 gives each threshold argument as an "integer". An ``int`` or a string of decimal
    digits (as ``qpid-config`` passes it) is accepted; a bool (``int(True)`` is 1, but ``true`` is
    no message count), a float (even ``100.0``), a negative number and any other string are
    refused with an error naming the queue and the argument. The engine and scenario validation
    both call this, so they accept the same values.
    """
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and _DIGITS.fullmatch(raw.strip()):
        value = int(raw)
    if value is None or value < 0:
        raise FlowConfigError(f"queue {queue!r}: {key} must be a non-negative integer, got {raw!r}")
    return value


def _ratio(value: float | int | str) -> Fraction:
    # Fractions keep 0.1-style percentages exact, so rounding never depends on binary floats.
    return Fraction(str(value))


def _round_half_up(value: Fraction) -> int:
    return int((value + Fraction(1, 2)) // 1)


#: Qpid's broker-wide default flow thresholds (--default-flow-stop-threshold and
#: --default-flow-resume-threshold), in percent of a queue's maximum count and size. The one home
#: of these defaults: the broker config and the scenario format take theirs from here.
DEFAULT_FLOW_STOP_RATIO = 80
DEFAULT_FLOW_RESUME_RATIO = 70


@dataclass(frozen=True)
class FlowDefaults:
    """Broker-wide default ratios, in percent of a queue's maximum count and size."""

    stop_ratio: float = DEFAULT_FLOW_STOP_RATIO
    resume_ratio: float = DEFAULT_FLOW_RESUME_RATIO

    def __post_init__(self) -> None:
        for name, value in (("stop_ratio", self.stop_ratio), ("resume_ratio", self.resume_ratio)):
            if not 0 <= value <= 100:
                raise FlowConfigError(f"default flow {name} must be within 0..100 %, got {value}")
        if self.resume_ratio > self.stop_ratio:
            raise FlowConfigError(
                f"default flow resume ratio ({self.resume_ratio} %) is above the stop ratio "
                f"({self.stop_ratio} %)"
            )

    @property
    def disabled(self) -> bool:
        return self.stop_ratio == 0 and self.resume_ratio == 0

    def thresholds_for(self, max_count: int, max_size: int) -> FlowThresholds:
        """Stop = round(max x stop%), resume = floor(max x resume%), per dimension with a max."""
        if self.disabled:
            return FlowThresholds()
        stop, resume = _ratio(self.stop_ratio) / 100, _ratio(self.resume_ratio) / 100
        return FlowThresholds(
            stop_count=_round_half_up(max_count * stop),
            resume_count=int(max_count * resume // 1),
            stop_size=_round_half_up(max_size * stop),
            resume_size=int(max_size * resume // 1),
        ).normalized()


@dataclass(frozen=True)
class FlowThresholds:
    """Thresholds in force; 0 switches a threshold off."""

    stop_count: int = 0
    resume_count: int = 0
    stop_size: int = 0
    resume_size: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.stop_count or self.stop_size)

    def normalized(self) -> FlowThresholds:
        """A resume of 0 under a non-zero stop means "resume at the stop value"."""
        return FlowThresholds(
            stop_count=self.stop_count,
            resume_count=self.resume_count or self.stop_count,
            stop_size=self.stop_size,
            resume_size=self.resume_size or self.stop_size,
        )

    def validate(self, queue: str, max_count: int = 0, max_size: int = 0) -> None:
        for field_name in ("stop_count", "resume_count", "stop_size", "resume_size"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise FlowConfigError(
                    f"queue {queue!r}: flow {field_name} must be a non-negative integer, "
                    f"got {value!r}"
                )
        if self.resume_count > self.stop_count:
            raise FlowConfigError(
                f"queue {queue!r}: flow_resume_count ({self.resume_count}) must not exceed "
                f"flow_stop_count ({self.stop_count})"
            )
        if self.resume_size > self.stop_size:
            raise FlowConfigError(
                f"queue {queue!r}: flow_resume_size ({self.resume_size}) must not exceed "
                f"flow_stop_size ({self.stop_size})"
            )
        if max_count and self.stop_count > max_count:
            raise FlowConfigError(
                f"queue {queue!r}: flow_stop_count ({self.stop_count}) exceeds max_count "
                f"({max_count})"
            )
        if max_size and self.stop_size > max_size:
            raise FlowConfigError(
                f"queue {queue!r}: flow_stop_size ({self.stop_size}) exceeds max_size ({max_size})"
            )

    @classmethod
    def from_arguments(cls, queue: str, arguments: Mapping[str, Any]) -> FlowThresholds | None:
        """Explicit thresholds from ``qpid.flow_*`` declare arguments; None when no stop
        threshold is given.

        As in Qpid's broker (``QueueFlowLimit::createLimit``), a stop key makes the thresholds
        explicit (the keys not given are 0), and resume keys alone are not: they are ignored and
        the queue gets the defaults. All given stops 0 means no flow control (seed 001: "disable
        flow control on a per queue basis by setting the flow-stop-size and flow-stop-count to
        zero"), whatever resume is given with them.
        """
        if not any(key in arguments for key in FLOW_STOP_KEYS):
            return None
        values = {
            key.removeprefix("qpid.flow_"): integer_argument(queue, key, arguments.get(key, 0))
            for key in FLOW_KEYS
        }
        return cls(
            stop_count=values["stop_count"],
            resume_count=values["resume_count"],
            stop_size=values["stop_size"],
            resume_size=values["resume_size"],
        )


THRESHOLD_FIELDS = ("stop_count", "resume_count", "stop_size", "resume_size")


@dataclass(frozen=True)
class ThresholdChange:
    """A run-time change of some of a queue's thresholds (seed 000: "allow run-time
    modification").

    A field given replaces that threshold (0 switches it off); a field left ``None`` keeps the
    value the queue has in force. At least one field is needed. :meth:`applied_to` gives the
    merged thresholds, which the queue validates as it does a declaration's.
    """

    stop_count: int | None = None
    resume_count: int | None = None
    stop_size: int | None = None
    resume_size: int | None = None

    def __post_init__(self) -> None:
        if not self.given:
            raise FlowConfigError(
                "a threshold change needs at least one of "
                + ", ".join(f"flow_{name}" for name in THRESHOLD_FIELDS)
            )

    @property
    def given(self) -> tuple[str, ...]:
        return tuple(name for name in THRESHOLD_FIELDS if getattr(self, name) is not None)

    @property
    def kept(self) -> tuple[str, ...]:
        return tuple(name for name in THRESHOLD_FIELDS if getattr(self, name) is None)

    def applied_to(self, current: FlowThresholds) -> FlowThresholds:
        """The thresholds after the change: the fields given, the others from ``current``."""
        values = {name: getattr(self, name) for name in self.given}
        return FlowThresholds(**{name: getattr(current, name) for name in self.kept}, **values)


_NEVER = float("inf")


class FlowLimit:
    """The ON/OFF state machine of one queue. Pure: it answers, the queue emits the events.

    ``stop_above_msgs`` / ``stop_above_bytes`` are the depths above which the queue stops: the
    non-zero stop thresholds while flowing, infinite otherwise. Every method that changes the
    state keeps them current, so the enqueue path tests them without calling :meth:`should_stop`.
    """

    __slots__ = (
        "flow_stopped",
        "flow_stopped_count",
        "resume_count",
        "resume_size",
        "stop_above_bytes",
        "stop_above_msgs",
        "stop_count",
        "stop_size",
    )

    def __init__(self, thresholds: FlowThresholds) -> None:
        self.flow_stopped = False
        self.flow_stopped_count = 0
        self.stop_count = self.resume_count = self.stop_size = self.resume_size = 0
        self.stop_above_msgs = self.stop_above_bytes = _NEVER
        self.apply(thresholds)

    def apply(self, thresholds: FlowThresholds) -> None:
        normalized = thresholds.normalized()
        self.stop_count = normalized.stop_count
        self.resume_count = normalized.resume_count
        self.stop_size = normalized.stop_size
        self.resume_size = normalized.resume_size
        self._set_stop_above()

    def _set_stop_above(self) -> None:
        # A zero threshold never stops; a stopped queue cannot stop again.
        stopped = self.flow_stopped
        self.stop_above_msgs = _NEVER if stopped or not self.stop_count else self.stop_count
        self.stop_above_bytes = _NEVER if stopped or not self.stop_size else self.stop_size

    @property
    def thresholds(self) -> FlowThresholds:
        return FlowThresholds(self.stop_count, self.resume_count, self.stop_size, self.resume_size)

    def should_stop(self, depth_msgs: int, depth_bytes: int) -> bool:
        """Checked after an enqueue is counted: strict ``>`` on either non-zero stop threshold."""
        return depth_msgs > self.stop_above_msgs or depth_bytes > self.stop_above_bytes

    def should_resume(self, depth_msgs: int, depth_bytes: int) -> bool:
        """Checked after a dequeue: strict ``<`` on every non-zero resume threshold."""
        if not self.flow_stopped:
            return False
        return (not self.resume_count or depth_msgs < self.resume_count) and (
            not self.resume_size or depth_bytes < self.resume_size
        )

    def stop(self) -> None:
        self.flow_stopped = True
        self.flow_stopped_count += 1
        self._set_stop_above()

    def resume(self) -> None:
        self.flow_stopped = False
        self._set_stop_above()

"""The recommendation policy (conf/recommend.yaml): its knobs, their allowed ranges, and reading
and checking the YAML into a :class:`RecommendPolicy`.

The recommendation transforms (jobs/transforms/recommend*.py) take a policy already checked; all the
I/O and validation of it is here, run before any Spark session starts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from flowctl_core.errors import closest_name
from jobs.config import PROJECT_ROOT, ConfError, read_yaml

DEFAULT_POLICY = PROJECT_ROOT / "conf" / "recommend.yaml"


@dataclass(frozen=True)
class _Range:
    """The values a policy knob may take: a lower and an upper bound, each open or closed."""

    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self, name: str) -> str:
        """``name >= 1``, ``0 <= name < 1``: the range as the error message shows it."""
        if self.low is not None and self.high is None:
            return f"{name} {'>' if self.low_open else '>='} {self.low:g}"
        low = "" if self.low is None else f"{self.low:g} {'<' if self.low_open else '<='} "
        high = "" if self.high is None else f" {'<' if self.high_open else '<='} {self.high:g}"
        return f"{low}{name}{high}"


#: Where each knob sits in conf/recommend.yaml (None: top level) and the values it may take.
_LAYOUT: dict[str, tuple[str | None, _Range]] = {
    # Ten years at most: a longer window is a typo, and a date that far back does not exist.
    "lookback_days": (None, _Range(low=1, high=3660)),
    "safety_margin": ("queue", _Range(low=0)),
    "min_dwell_s": ("queue", _Range(low=0)),
    "min_hysteresis_share": ("queue", _Range(low=0, high=1, high_open=True)),
    "drain_rate_quantile": ("queue", _Range(low=0, high=1)),
    "flapping_min_short_episodes": ("queue", _Range(low=1)),
    "flapping_short_share": ("queue", _Range(low=0, low_open=True, high=1)),
    "keep_band_share": ("queue", _Range(low=0, high=1, high_open=True)),
    "default_round_trip_s": ("consumer_link", _Range(low=0, low_open=True)),
    "default_top_up_batch": ("consumer_link", _Range(low=1)),
    "min_round_trip_s": ("consumer_link", _Range(low=0)),
    "starved_share_tolerance": ("consumer_link", _Range(low=0, high=1, high_open=True)),
    "over_provision_factor": ("consumer_link", _Range(low=1, low_open=True)),
    "slow_consumer_share": ("consumer_link", _Range(low=0, low_open=True, high=1, high_open=True)),
    "credit_keep_band_share": ("consumer_link", _Range(low=0, high=1, high_open=True)),
    "max_overshoot_share": ("address", _Range(low=0, low_open=True)),
    "max_backlog_s": ("rabbitmq_queue", _Range(low=0, low_open=True)),
}
_SECTIONS = ("queue", "consumer_link", "address", "rabbitmq_queue")


def _problem(name: str, value: Any, integer: bool) -> str | None:
    """Why ``value`` is no valid setting of knob ``name`` (None when it is one)."""
    kind = "an integer" if integer else "a number"
    # bool is an int in Python, and YAML reads yes/no/true/false as one: never a count or a share.
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return f"must be {kind}, got {type(value).__name__} {value!r}"
    if isinstance(value, float) and not math.isfinite(value):  # an int is finite, however long
        return f"must be a finite number, got {value!r}"
    allowed = _LAYOUT[name][1]
    if not allowed.admits(value):
        return f"= {value!r} is out of range (allowed: {allowed.describe(name)})"
    return None


@dataclass(frozen=True)
class RecommendPolicy:
    """The knobs of conf/recommend.yaml (see there for what each one means)."""

    lookback_days: int = 7
    safety_margin: float = 0.2
    min_dwell_s: float = 5.0
    min_hysteresis_share: float = 0.1
    drain_rate_quantile: float = 0.9
    flapping_min_short_episodes: int = 3
    flapping_short_share: float = 0.5
    keep_band_share: float = 0.05
    default_round_trip_s: float = 0.05
    default_top_up_batch: int = 85
    starved_share_tolerance: float = 0.01
    min_round_trip_s: float = 0.001
    over_provision_factor: float = 4.0
    slow_consumer_share: float = 0.1
    credit_keep_band_share: float = 0.05
    max_overshoot_share: float = 0.1
    max_backlog_s: float = 1.0

    def __post_init__(self) -> None:
        problems = [
            f"{f.name} {problem}"
            for f in fields(self)
            if (problem := _problem(f.name, getattr(self, f.name), f.type == "int"))
        ]
        if problems:
            raise ValueError("recommendation policy: " + "; ".join(problems))

    @classmethod
    def from_mapping(
        cls, raw: Mapping[str, Any], source: str | os.PathLike[str] | None = None
    ) -> RecommendPolicy:
        """From the YAML layout: top-level ``lookback_days``; ``queue:``, ``consumer_link:``,
        ``address:`` and ``rabbitmq_queue:``.

        Raises :class:`~jobs.config.ConfError` naming ``source`` (the file), every key that is
        unknown, misplaced, of the wrong type or out of range, and the range allowed.
        """
        where = f"recommendation policy {source}" if source is not None else "recommendation policy"
        if not isinstance(raw, Mapping):
            raise ConfError(f"{where}: expected a mapping of settings, got {raw!r}")
        known = [key for key in raw if key in _SECTIONS or key in _LAYOUT]
        if len(raw) >= 3 and not known:
            # Some other file (a scenario, the pipeline conf): a "did you mean" for each of its
            # keys said nothing of that, and one suggested slow_consumer_share for "consumers".
            # (One or two keys, none known, are read as typos, each named.)
            keys = ", ".join(map(str, list(raw)[:6])) + (", ..." if len(raw) > 6 else "")
            raise ConfError(
                f"{where}: none of its keys ({keys}) is a policy's: is it the recommendation "
                f"policy? (its keys: lookback_days, {', '.join(f'{s}:' for s in _SECTIONS)})"
            )
        types = {f.name: f.type for f in fields(cls)}
        problems: list[str] = []
        values: dict[str, Any] = {}

        def take(section: str | None, key: Any, value: Any) -> None:
            path = f"{section}.{key}" if section else str(key)
            home = _LAYOUT[key][0] if key in _LAYOUT else None
            if key not in _LAYOUT or home != section:
                if key in _LAYOUT:
                    where = "at the top level" if home is None else f"under {home}:"
                    belongs = f" (it belongs {where})"
                else:
                    close = closest_name(str(key), _LAYOUT)
                    belongs = f" (did you mean {close!r}?)" if close else ""
                problems.append(f"unknown key {path}{belongs}")
            elif problem := _problem(key, value, types[key] == "int"):
                problems.append(f"{path} {problem}")
            else:
                values[key] = value if types[key] == "int" else float(value)

        for key, value in raw.items():
            if key not in _SECTIONS:
                take(None, key, value)
            elif value is not None and not isinstance(value, Mapping):
                problems.append(f"{key}: expected a mapping of settings, got {value!r}")
            else:
                for inner, setting in (value or {}).items():
                    take(key, inner, setting)
        if problems:
            raise ConfError(f"{where}: " + "; ".join(problems))
        return cls(**values)

    def window_from(self, as_of: date) -> date:
        return as_of - timedelta(days=self.lookback_days - 1)


def load_policy(path: str | Path | None = None) -> RecommendPolicy:
    """The policy of ``path`` (default conf/recommend.yaml); a file that cannot be read, or a
    setting that is unknown, of the wrong type or out of range, raises :class:`ConfError`
    naming the file (and the key and its allowed range)."""
    source = Path(path or DEFAULT_POLICY)
    raw = read_yaml(source, "recommendation policy", "--policy")
    return RecommendPolicy.from_mapping(raw or {}, source=source)

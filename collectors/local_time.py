"""A broker log's local stamps read in UTC, the hour the clocks go back through included.

A stamp written without a zone offset is the broker's local time (``--log-timezone``, else this
machine's). In the hour lived twice when the clocks go back, such a stamp names two instants: a
line is read at the first, and at the second when the first would come before the line it
follows (the session never goes back in time, so an hour of lines would collapse onto the line
before them, and an episode in that hour last 0 s: an audit). The Artemis and RabbitMQ readers
both read their stamps so.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, tzinfo
from typing import Protocol, TypeVar


def readings_in_utc(local: datetime, zone: tzinfo | None) -> tuple[datetime, datetime | None]:
    """The instant a naive local stamp names in UTC, and its second instant when it is in the
    hour lived twice (None otherwise). ``zone`` None: this machine's."""
    first, second = (_in_utc(local, zone, fold) for fold in (0, 1))
    return first, (second if second > first else None)


def _in_utc(local: datetime, zone: tzinfo | None, fold: int) -> datetime:
    """``fold`` 1 reads a stamp of the hour lived twice as its second pass (PEP 495)."""
    local = local.replace(fold=fold)
    return (local.replace(tzinfo=zone) if zone is not None else local.astimezone()).astimezone(UTC)


class _TwiceReadable(Protocol):
    @property
    def ts(self) -> datetime: ...

    @property
    def ts_repeated(self) -> datetime | None: ...


LineT = TypeVar("LineT", bound=_TwiceReadable)


def in_repeated_hour(line: LineT, previous: datetime | None) -> LineT:
    """``line`` (a dataclass) at its second instant when its first comes before the line
    before it (``previous``) and its second does not: written in the hour lived again."""
    later = line.ts_repeated
    if later is None or previous is None or not line.ts < previous <= later:
        return line
    moved: LineT = dataclasses.replace(line, ts=later)  # type: ignore[type-var]
    return moved

"""How a count is said in the tool's messages: "1 row", "2 rows"; an overshoot past a
threshold that is off: "off"."""

from __future__ import annotations


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with ``noun``, or with its plural (``nouns``, else ``noun`` + "s") unless it
    is 1; thousands separated."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"


def shown_overshoot(overshoot: int, stop: int) -> int | str:
    """An overshoot as the tables print it: "off" past a stop threshold ``stop`` that is off (0)
    and was never passed, since an overshoot of a threshold that is off is undefined, not 0
    (DESIGN §4: null); the figure otherwise, one measured while the threshold was on included."""
    return overshoot if stop or overshoot else "off"

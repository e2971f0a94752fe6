"""How a count is said in the tool's messages: "1 row", "2 rows"."""

from __future__ import annotations


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with ``noun``, or with its plural (``nouns``, else ``noun`` + "s") unless it
    is 1; thousands separated."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"

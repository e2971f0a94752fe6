"""A table's rows against an oracle's (tests/metrics_oracle.py, tests/blocking_oracle.py): the
rows under the oracles' names, and their differences key by key. Shared by the oracle tests and
the nightly differential."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.metrics_oracle import to_us

Row = dict[str, Any]


def agree(a: Any, b: Any, relative: float) -> bool:
    """Whether a table's value ``a`` agrees with a reference's ``b``: both null, floats within
    ``relative`` of ``b`` (or of 1, near 0), anything else equal."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= relative * max(1.0, abs(float(b)))
    return bool(a == b)


def oracle_row(row: Mapping[str, Any]) -> Row:
    """A table row under the oracles' names: Spark's timestamps (naive UTC) as microseconds,
    ``*_ts`` as ``*_us``."""
    return {
        (name[:-3] + "_us" if name.endswith("_ts") else name): (
            to_us(value) if name.endswith("_ts") and value is not None else value
        )
        for name, value in row.items()
    }


def row_differences(
    actual: Iterable[Row],
    expected: Iterable[Row],
    keys: tuple[str, ...],
    relative: float,
    *,
    side: str = "Spark",
    expected_columns_only: bool = False,
) -> list[str]:
    """Rows of ``expected`` missing from ``actual`` (keyed by ``keys``, unique on both sides),
    rows only in ``actual``, and each column of ``expected`` that ``actual`` does not
    :func:`agree` with. ``actual`` has exactly the expected columns, unless
    ``expected_columns_only``: a table compared on the columns an oracle computes."""
    actual, expected = list(actual), list(expected)
    got = {tuple(r[k] for k in keys): r for r in actual}
    want = {tuple(r[k] for k in keys): r for r in expected}
    assert len(got) == len(actual), f"duplicate keys in the {side} rows"
    assert len(want) == len(expected), "duplicate keys in the oracle rows"
    problems = [f"missing in {side}: {k}" for k in sorted(set(want) - set(got), key=str)]
    problems += [f"unexpected in {side}: {k}" for k in sorted(set(got) - set(want), key=str)]
    for key in sorted(set(got) & set(want), key=str):
        if not expected_columns_only:
            assert set(got[key]) == set(want[key]), "columns differ: " + str(
                set(got[key]) ^ set(want[key])
            )
        problems += [
            f"{key} {column}: {side}={got[key].get(column, '<no column>')!r} oracle={value!r}"
            for column, value in want[key].items()
            if column not in got[key] or not agree(got[key][column], value, relative)
        ]
    return problems

"""Fields of an event's detail read as numbers (jobs/transforms/detail.py)."""

from __future__ import annotations

import pytest

from jobs.transforms.detail import detail_whole_number

pytestmark = pytest.mark.spark


def test_a_detail_field_reads_as_a_whole_number_or_as_unknown(spark) -> None:
    details = {
        '{"n": 0}': 0,
        '{"n": 0.0}': 0,
        '{"n": "12"}': 12,
        '{"n": 1e3}': 1000,
        '{"n": 9223372036854775807}': 9223372036854775807,  # a long's largest, not via a double
        '{"n": -4}': -4,
        '{"n": 1.5}': None,  # a fraction is no count
        '{"n": 1e300}': None,  # whole, but no long holds it
        '{"n": "closed"}': None,
        '{"n": true}': None,
        '{"n": null}': None,
        '{"m": 3}': None,
        "{}": None,
    }
    frame = spark.createDataFrame([(d,) for d in details], "detail string")
    got = dict(frame.select("detail", detail_whole_number("n").alias("n")).collect())
    assert got == details

"""Fields of an event's detail (jobs/transforms/detail.py): read as numbers, parsed only where
they may be."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from jobs.transforms.detail import detail_field, detail_whole_number

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


def test_a_detail_field_is_what_get_json_object_reads_where_the_parse_is_spared(spark) -> None:
    # detail_field parses only a text that may hold the path's last name: the same values as
    # parsing every text, whichever way a name can be written (escaped, single-quoted, nested,
    # only as a value, in another case) and on text that is no JSON at all.
    details = [
        None,
        "{}",
        '{"address": "orders"}',
        '{"address": null}',
        '{"address": {"depth": 3}}',
        '{"address": [1, 2]}',
        '{"address": 12.50}',
        '{"Address": "orders"}',
        '{"note": "address"}',
        '{"note": "\\"address\\""}',
        '{"addr\\u0065ss": "escaped"}',
        "{'address': 'single-quoted'}",
        '{"producer": {"window": 1024}}',
        '{"window": 7}',
        '{"producer": {"credit": 1}, "window": 7}',
        '{"producer": 5}',
        "not json",
        '{"address": "unterminated',
    ]
    paths = ["address", "producer.window", "window"]
    frame = spark.createDataFrame([(d,) for d in details], "detail string")
    columns = [detail_field(p).alias(f"spared_{n}") for n, p in enumerate(paths)] + [
        F.get_json_object("detail", f"$.{p}").alias(f"parsed_{n}") for n, p in enumerate(paths)
    ]
    rows = frame.select("detail", *columns).collect()
    assert len(rows) == len(details)
    for row in rows:
        for n, path in enumerate(paths):
            assert row[f"spared_{n}"] == row[f"parsed_{n}"], (row.detail, path)
    found = {row.detail: row.spared_0 for row in rows}
    assert found['{"address": "orders"}'] == "orders"
    assert found['{"addr\\u0065ss": "escaped"}'] == "escaped"
    assert found["{'address': 'single-quoted'}"] == "single-quoted"
    assert found['{"note": "address"}'] is None

"""Contract checks and de-duplication of raw events (jobs/transforms/validate.py)."""

from __future__ import annotations

import pytest

from jobs.transforms.validate import classify_events
from tests.conftest import at, event

pytestmark = pytest.mark.spark


def classified(make_events, rows, partially_read=()):
    frame = make_events(rows).withColumn("source_file", _file())
    return {
        (r.seq, r.source_file): (r.status, r.reason)
        for r in classify_events(frame, list(partially_read)).collect()
    }


def _file():
    from pyspark.sql import functions as F

    # Rows of even seq come from file b, odd from file a: deterministic, like a real listing.
    return F.when(F.col("seq") % 2 == 0, "date=2024-01-01/b.parquet").otherwise(
        "date=2024-01-01/a.parquet"
    )


def test_each_broken_rule_is_named_and_good_rows_are_accepted(make_events):
    good = event(1, at(1, 1), "enqueue", queue="q", depth_msgs=1, protocol="amqp-1.0")
    rows = [
        good,
        event(2, at(1, 1), "teleport", queue="q"),
        event(3, at(1, 1), "enqueue", queue="q", depth_msgs=-1, size_bytes=-5),
        event(5, at(1, 1), "flow_stopped"),  # a queue event without its queue
        event(7, at(1, 1), "enqueue", queue="q", protocol="smtp", link_role="sideways"),
        {**event(9, at(1, 1), "enqueue", queue="q"), "broker": None},
    ]
    got = classified(make_events, rows)
    reasons = {seq: reason for (seq, _), (_, reason) in got.items()}
    assert got[(1, "date=2024-01-01/a.parquet")] == ("accepted", None)
    assert reasons[2] == "unknown_event_type"
    assert reasons[3] == "negative_size_bytes;negative_depth_msgs"
    assert reasons[5] == "missing_queue"
    assert reasons[7] == "unknown_protocol;unknown_link_role"
    assert reasons[9] == "null_broker"


def test_bad_timestamp_outside_its_partition_day_is_quarantined(make_events):
    from pyspark.sql import functions as F

    rows = [event(1, at(1, 1), "enqueue", queue="q"), event(3, at(2, 1), "enqueue", queue="q")]
    frame = make_events(rows).withColumn("date", F.lit("2024-01-01").cast("date"))
    result = classify_events(frame.withColumn("source_file", _file()), []).collect()
    assert sorted((r.seq, r.reason) for r in result) == [
        (1, None),
        (3, "ts_outside_partition_date"),
    ]


def test_duplicates_and_conflicts_are_quarantined(make_events):
    original = event(1, at(1, 1), "enqueue", queue="q", depth_msgs=1)
    rows = [
        original,
        dict(original),  # identical copy in the same file
        event(4, at(1, 2), "dequeue", queue="q", depth_msgs=0),
        event(4, at(1, 2), "dequeue", queue="q", depth_msgs=9),  # same (run, seq), other content
        event(6, at(1, 3), "enqueue", queue="q", depth_msgs=2),
        event(6, at(1, 3), "bogus", queue="q", depth_msgs=2),  # a broken copy: no conflict
    ]
    result = classify_events(make_events(rows).withColumn("source_file", _file()), []).collect()
    by_seq: dict[int, list] = {}
    for row in result:
        by_seq.setdefault(row.seq, []).append((row.status, row.reason))
    assert sorted(by_seq[1], key=str) == [("accepted", None), ("quarantined", "duplicate")]
    assert by_seq[4] == [("quarantined", "conflicting_duplicate")] * 2
    assert sorted(by_seq[6], key=str) == [
        ("accepted", None),
        ("quarantined", "unknown_event_type"),
    ]


def test_rows_of_a_partially_read_file_are_quarantined(make_events):
    rows = [event(1, at(1, 1), "enqueue", queue="q"), event(2, at(1, 1), "enqueue", queue="q")]
    got = classified(make_events, rows, partially_read=["date=2024-01-01/b.parquet"])
    assert got[(1, "date=2024-01-01/a.parquet")] == ("accepted", None)
    assert got[(2, "date=2024-01-01/b.parquet")] == ("quarantined", "partially_read_file")


def test_blank_strings_count_as_missing(make_events):
    """Empty or whitespace-only run_id, broker, event_type, queue or link is no value at all."""
    rows = [
        {**event(1, at(1, 1), "enqueue", queue="q"), "run_id": ""},
        {**event(3, at(1, 1), "enqueue", queue="q"), "broker": " \t"},
        event(5, at(1, 1), "", queue="q"),
        event(7, at(1, 1), "enqueue", queue=""),
        event(9, at(1, 1), "flow", link="  "),
        event(11, at(1, 1), "enqueue", queue="q", link=""),  # an optional column may be blank
    ]
    got = {seq: reason for (seq, _), (_, reason) in classified(make_events, rows).items()}
    assert got == {
        1: "blank_run_id",
        3: "blank_broker",
        5: "blank_event_type",
        7: "missing_queue",
        9: "missing_link",
        11: None,
    }


def test_the_great_expectations_suite_rejects_blank_required_strings(make_events):
    from jobs import quality

    good = event(1, at(1, 1), "enqueue", queue="q")
    frame = make_events([good, {**event(2, at(1, 1), "enqueue", queue="q"), "broker": " "}])
    assert quality.validate_accepted_events(frame.where("seq = 1"), "ok")["success"] is True
    assert quality.validate_accepted_events(frame, "blank")["success"] is False


def test_a_column_required_for_some_event_types_is_checked_in_those_only(make_events):
    """missing_queue and missing_link are stated without Great Expectations' row conditions
    (jobs/quality.py ``required_value_column``): a queue event without its queue, null or blank,
    fails the suite; an event of a type that does not need a queue passes without one."""
    from jobs import quality

    link_event = event(1, at(1, 1), "flow", link="l")  # no queue, and needs none
    assert "queue" not in link_event
    frame = make_events(
        [
            link_event,
            event(2, at(1, 2), "enqueue", queue="q"),
            event(3, at(1, 3), "enqueue"),  # a queue event, queue null
            event(4, at(1, 4), "enqueue", queue=" \t"),  # a queue event, queue blank
        ]
    )
    assert quality.validate_accepted_events(frame.where("seq <= 2"), "needed")["success"] is True
    for seq in (3, 4):
        result = quality.validate_accepted_events(frame.where(f"seq in (1, 2, {seq})"), "missing")
        failed = [
            (e["kwargs"]["column"], e["result"]["unexpected_count"])
            for validation in result["result"]["validation_results"]
            for e in validation["expectations"]
            if not e["success"]
        ]
        # A null fails the not-null expectation only (a regex passes over nulls), a blank the
        # regex only: one failure each, of the queue, in the one row.
        assert failed == [(quality.required_value_column("queue"), 1)], seq


def test_the_great_expectations_suite_fails_rows_breaking_the_rules_it_used_to_miss(make_events):
    """The suite is built from the quarantine's rules: rows breaking ts_outside_partition_date,
    missing_queue, missing_link (which the hand-listed suite let through) or invalid_detail_json
    fail it, each on its own expectation, and the quarantine rejects the same rows for the same
    rules."""
    from datetime import date

    from pyspark.sql import functions as F

    from jobs import quality

    rows = [
        event(1, at(1, 1), "enqueue", queue="q"),  # keeps every rule
        event(2, at(1, 2), "enqueue", queue=" "),  # a blank queue
        event(3, at(1, 3), "flow"),  # a link event without its link
        event(4, at(1, 4), "enqueue", queue="q"),  # filed under the next day (below)
        # A detail cut off: Spark's JSON functions would read its fields as null (a DROP read
        # as a rejection). A blank or null detail is no detail.
        event(5, at(1, 5), "message_rejected", queue="q", detail='{"outcome": "dropped"'),
        event(6, at(1, 6), "message_rejected", queue="q", detail='{"outcome": "dropped"}'),
        event(7, at(1, 7), "enqueue", queue="q", detail=" "),
        # Trailing text, and two records run together: Spark's parser alone reads the first
        # value and drops the rest silently.
        event(8, at(1, 8), "message_rejected", queue="q", detail='{"outcome": "dropped"} x'),
        event(9, at(1, 9), "enqueue", queue="q", detail='{"a": 1}{"b": 2}'),
        event(10, at(1, 10), "enqueue", queue="q", detail=' {"a": [1, "]"]} '),
        event(11, at(1, 11), "enqueue", queue="q", detail='{"a": 1},{"b": 2}'),
        # JSON, but not an object, or not JSON (Python's str of a dict): Spark's parser takes
        # single quotes and read this one's outcome as dropped; any other reader, as nothing.
        event(12, at(1, 12), "message_rejected", queue="q", detail="{'outcome': 'dropped'}"),
        event(13, at(1, 13), "enqueue", queue="q", detail="[1, 2]"),
        event(14, at(1, 14), "enqueue", queue="q", detail='"dropped"'),
        event(15, at(1, 15), "enqueue", queue="q", detail="null"),
        # An apostrophe inside a string, and whitespace before the object: JSON objects.
        event(16, at(1, 16), "enqueue", queue="q", detail='{"note": "it\'s"}'),
        event(17, at(1, 17), "enqueue", queue="q", detail='\t{"a": {"b": [1, null]}}'),
        # An escaped double quote then an apostrophe, in the string; a single-quoted key.
        event(18, at(1, 18), "enqueue", queue="q", detail='{"a": "x\\"\'y"}'),
        event(19, at(1, 19), "enqueue", queue="q", detail="{\"a\": 1, 'b': 2}"),
        # Control characters as whitespace between tokens and escaped in a string: JSON.
        event(20, at(1, 20), "enqueue", queue="q", detail='{\n\t"a": 1,\r\n "b": "x\\ty"}'),
    ]
    next_day = F.lit(date(2024, 1, 2))
    frame = make_events(rows).withColumn(
        "date", F.when(F.col("seq") == 4, next_day).otherwise(F.col("date"))
    )
    result = quality.validate_accepted_events(frame, "missed")
    failed = sorted(
        (e["expectation_type"], e["kwargs"].get("column", e["kwargs"].get("column_A")))
        for validation in result["result"]["validation_results"]
        for e in validation["expectations"]
        if not e["success"]
    )
    assert failed == [
        ("expect_column_pair_values_to_be_equal", quality.partition_day_column("ts")),
        ("expect_column_values_to_be_in_set", quality.json_check_column("detail")),
        ("expect_column_values_to_not_be_null", quality.required_value_column("link")),
        ("expect_column_values_to_not_match_regex", quality.required_value_column("queue")),
    ]
    classified = classify_events(frame.withColumn("source_file", _file()), []).collect()
    assert {r.seq: r.reason for r in classified} == {
        1: None,
        2: "missing_queue",
        3: "missing_link",
        4: "ts_outside_partition_date",
        5: "invalid_detail_json",
        6: None,
        7: None,
        8: "invalid_detail_json",
        9: "invalid_detail_json",
        10: None,
        11: "invalid_detail_json",
        12: "invalid_detail_json",
        13: "invalid_detail_json",
        14: "invalid_detail_json",
        15: "invalid_detail_json",
        16: None,
        17: None,
        18: None,
        19: "invalid_detail_json",
        20: None,
    }


@pytest.mark.parametrize("with_position", [False, True], ids=["window", "aggregation"])
def test_of_copies_on_several_days_the_earliest_day_whose_copies_agree_is_kept(
    make_events, with_position
):
    """DESIGN §5: one row per (run_id, seq). Copies on different days always differ (their ts lie
    in their days), and seq is the run's total order: the earliest day's copy is the event, the
    other days' copies are quarantined as conflicting. A day whose own copies contradict each
    other keeps none, and then does not outrank a later day's copy."""
    from pyspark.sql import functions as F

    rows = [
        event(1, at(1, 1), "enqueue", queue="q", depth_msgs=1),
        event(1, at(2, 1), "enqueue", queue="q", depth_msgs=2),  # replayed on day 2
        event(2, at(1, 2), "enqueue", queue="q", depth_msgs=3),
        event(2, at(1, 2), "enqueue", queue="q", depth_msgs=4),  # contradicts it on day 1
        event(2, at(2, 2), "enqueue", queue="q", depth_msgs=5),
        event(3, at(2, 3), "enqueue", queue="q", depth_msgs=6),
        event(3, at(2, 3), "enqueue", queue="q", depth_msgs=6),  # identical copy on day 2
        event(3, at(3, 3), "enqueue", queue="q", depth_msgs=7),
    ]
    frame = make_events(rows).withColumn(
        "source_file", F.concat(F.lit("date="), F.col("date").cast("string"), F.lit("/a.parquet"))
    )
    if with_position:
        frame = frame.withColumn("pos", F.monotonically_increasing_id())
        result = classify_events(frame, [], position="pos").collect()
    else:
        result = classify_events(frame, []).collect()
    got = sorted((r.seq, r.depth_msgs, r.status, r.reason) for r in result)
    conflicting = ("quarantined", "conflicting_duplicate")
    assert got == [
        (1, 1, "accepted", None),
        (1, 2, *conflicting),
        (2, 3, *conflicting),
        (2, 4, *conflicting),
        (2, 5, "accepted", None),
        (3, 6, "accepted", None),
        (3, 6, "quarantined", "duplicate"),
        (3, 7, *conflicting),
    ]


# Characters around the edges of Java's \s and $: its six whitespace characters, the line
# terminators $ also stops before (U+0085, U+2028, U+2029), whitespace it does not match (NBSP,
# U+3000, U+1680, zero-width ones), the bounds of is_blank's shortcut (printable ASCII, "!" to
# DEL) and an ordinary character.
BLANK_EDGE_CHARACTERS = (
    " \t\n\x0b\f\r\x85\u2028\u2029\xa0\u3000\u1680\u200b\ufeff\x1c\x1f!a\x7f\x80"
)


def test_is_blank_matches_the_rule_it_copies_on_every_character_and_edge_strings(spark):
    """is_blank shortcuts BLANK_PATTERN (the hot-path copy): both, in Spark, over every character
    of the Basic Multilingual Plane alone and every string of two or three edge characters, must
    agree, null for null."""
    from itertools import product

    from pyspark.sql import functions as F

    from jobs.transforms.validate import BLANK_PATTERN, is_blank

    singles = [chr(code) for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF]
    combos = [
        "".join(chars)
        for length in (2, 3)
        for chars in product(BLANK_EDGE_CHARACTERS, repeat=length)
    ]
    values = [None, "", *singles, *combos, "  x  ", "x\u2028", "\u2028\u2028", " \r\n"]
    frame = spark.createDataFrame([(v,) for v in values], "value string")
    checked = frame.select(
        "value",
        F.col("value").rlike(BLANK_PATTERN).alias("rule"),
        is_blank("value").alias("copy"),
    )
    differing = checked.where(~F.col("rule").eqNullSafe(F.col("copy"))).collect()
    assert differing == []
    # The rule itself, as the tests above rely on it: a final U+2028 is blank, an inner one is not.
    expected = {
        "": True,
        " ": True,
        "x": False,
        "\u2028": True,
        " \u2028": True,
        "\u2028\u2028": False,
    }
    rows = checked.where(F.col("value").isin(*expected)).collect()
    assert {r.value: r.rule for r in rows} == expected

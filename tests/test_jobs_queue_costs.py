"""What flow control costs the producers per queue and day (jobs/transforms/queue_costs.py),
from hand-built events whose expected counts and delays are worked out in the comments."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from chispa import assert_df_equality

from jobs.transforms.daily import queue_flow_daily
from jobs.transforms.episodes import queue_flow_episodes, run_bounds
from jobs.transforms.queue_costs import QUEUE_COST_COLUMNS, with_queue_costs
from schemas.tables import QUEUE_FLOW_DAILY
from tests.conftest import at, event

pytestmark = pytest.mark.spark

DAY1, DAY2 = date(2024, 1, 1), date(2024, 1, 2)
#: Typed as the table types them (schemas/), not by a second spelling here.
COST_TYPES = QUEUE_FLOW_DAILY.to_spark(["date", "queue", *QUEUE_COST_COLUMNS])


def _enqueue(seq: int, ts: Any, queue: str, link: str, message_id: int, **more: Any) -> dict:
    return event(seq, ts, "enqueue", queue=queue, link=link, message_id=message_id, **more)


def _completed(seq: int, ts: Any, link: str, message_id: int, latency_us: int) -> dict:
    return event(
        seq, ts, "transfer_completed", link=link, message_id=message_id, latency_us=latency_us
    )


def _rows() -> list[dict[str, Any]]:
    return [
        event(1, at(1, 10), "queue_declared", queue="q"),
        event(2, at(1, 10), "queue_declared", queue="fan"),
        _enqueue(3, at(1, 10, 0, 1), "q", "P", 1),
        _enqueue(4, at(1, 10, 0, 2), "q", "P", 2),
        _enqueue(5, at(1, 10, 0, 3), "q", "P", 3, detail='{"paged": true, "policy": "PAGE"}'),
        # Message 4 goes to both queues: its delay counts on each.
        _enqueue(6, at(1, 10, 0, 4), "q", "P", 4),
        _enqueue(7, at(1, 10, 0, 4), "fan", "P", 4),
        event(
            8,
            at(1, 10, 0, 5),
            "message_rejected",
            queue="q",
            link="P",
            message_id=5,
            detail='{"reason": "max_count", "policy": "reject"}',
        ),
        event(
            9,
            at(1, 10, 0, 6),
            "message_rejected",
            queue="q",
            link="P",
            message_id=6,
            detail='{"outcome": "dropped", "policy": "DROP"}',
        ),
        event(
            10,
            at(1, 10, 0, 7),
            "message_rejected",
            queue="q",
            link="P",
            message_id=7,
            detail='{"outcome": "failed", "policy": "FAIL"}',
        ),
        # Unroutable: no queue, counted nowhere.
        event(11, at(1, 10, 0, 8), "message_rejected", link="P", message_id=8),
        event(12, at(1, 10, 0, 9), "ring_evicted", queue="q", message_id=1),
        event(13, at(1, 11), "dequeue", queue="q", message_id=2),
        _completed(14, at(1, 11), "P", 1, 1_000),
        _completed(15, at(1, 11), "P", 4, 500),
        # Completed at once: logged (log_immediate_completions) but not held.
        _completed(16, at(1, 11), "P", 3, 0),
        # Another producer's message 1 was never enqueued on q: not q's delay.
        _completed(17, at(1, 11), "Other", 1, 9_000),
        # Held over midnight: enqueued on day 1, completed (and counted) on day 2.
        _completed(18, at(2, 0, 30), "P", 2, 52_000_000_000),
        event(19, at(2, 1), "dequeue", queue="q", message_id=3),
    ]


def test_counts_and_completion_delays_per_queue_and_day(spark: Any, make_events: Any) -> None:
    events = make_events(_rows())
    bounds = run_bounds(events)
    daily = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY2)
    actual = with_queue_costs(daily, events, DAY1, DAY2).select(
        "date", "queue", *QUEUE_COST_COLUMNS
    )
    # q, day 1: enqueued 4 (the paged one too), 1 paged; rejected = the reject and the FAIL, the
    # DROP is dropped; held delays 1000 and 500 (message 4): p50 = 750, p95 = 500 + 0.95 * 500,
    # p99 = 500 + 0.99 * 500. fan, day 1: message 4's 500 alone. Day 2: q's message 2, 52,000 s;
    # fan's idle day has counts 0 and no delay.
    expected = spark.createDataFrame(
        [
            (DAY1, "fan", 1, 0, 0, 0, 0, 0, 1, 500.0, 500.0, 500.0, 500),
            (DAY1, "q", 4, 1, 2, 1, 1, 1, 2, 750.0, 975.0, 995.0, 1_000),
            (DAY2, "fan", 0, 0, 0, 0, 0, 0, 0, None, None, None, None),
            (DAY2, "q", 0, 1, 0, 0, 0, 0, 1, 52e9, 52e9, 52e9, 52_000_000_000),
        ],
        COST_TYPES,
    )
    assert_df_equality(
        actual,
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,  # the table's column docs
        ignore_column_order=False,
    )


def test_a_completion_counts_on_its_own_brokers_queue_only(spark: Any, make_events: Any) -> None:
    """Each broker numbers its own messages: in a run that logs two brokers, each with a queue q
    and a producer P, b1's held completion of its message 1 is b1's q's delay, not b2's (an
    audit found it on both, matched on run, producer and id alone); the oracle agrees."""
    from tests.metrics_oracle import queue_costs_daily

    rows = [
        event(1, at(1, 10), "queue_declared", queue="q"),
        event(2, at(1, 10), "queue_declared", queue="q", broker="b2"),
        _enqueue(3, at(1, 10, 0, 1), "q", "P", 1, capacity=5),
        _enqueue(4, at(1, 10, 0, 1), "q", "P", 1, capacity=5, broker="b2"),
        _completed(5, at(1, 10, 0, 2), "P", 1, 500),
        event(6, at(1, 11), "dequeue", queue="q", message_id=1),
    ]
    events = make_events(rows)
    bounds = run_bounds(events)
    daily = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY1)
    found = {
        row.broker: (row.held_completions, row.completion_max_us)
        for row in with_queue_costs(daily, events, DAY1, DAY1).collect()
    }
    assert found == {"b1": (1, 500), "b2": (0, None)}
    oracle = queue_costs_daily(rows, [("r1", b, "q", DAY1) for b in ("b1", "b2")])
    assert {
        key[1]: (row["held_completions"], row["completion_max_us"]) for key, row in oracle.items()
    } == found


def test_every_queue_flow_daily_row_is_kept_once(spark: Any, make_events: Any) -> None:
    """The costs are a left join on the daily rows: no row lost, none doubled."""
    events = make_events(_rows())
    bounds = run_bounds(events)
    daily = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY2)
    with_costs = with_queue_costs(daily, events, DAY1, DAY2)
    keys = ["run_id", "broker", "queue", "date"]
    assert sorted(map(tuple, with_costs.select(*keys).collect())) == sorted(
        map(tuple, daily.select(*keys).collect())
    )
    assert with_costs.columns == [*daily.columns, *QUEUE_COST_COLUMNS]


def test_a_queue_only_a_collector_or_a_client_logged_has_no_counts(
    spark: Any, make_events: Any
) -> None:
    """A collector's queue samples and log lines, or a client's record of its own link, log no
    message of the broker: their queue's counts are unknown (null), not 0 (an audit: a DROP
    address that had dropped messages read "nothing lost"). The engine's queue, idle or not,
    counts 0 where nothing happened."""
    sampled = '{"origin": "jolokia", "sample_interval_ms": 1000, "address": "a"}'
    rows = [
        event(1, at(1, 10), "queue_declared", queue="sampled", run_id="c1", detail=sampled),
        event(2, at(1, 10, 0, 5), "flow_stopped", queue="sampled", run_id="c1",
              detail='{"origin": "artemis-log", "address": "a"}'),
        event(3, at(1, 10), "link_attached", queue="linked", link="L", run_id="c2",
              detail='{"recorded_by": "client-links", "origin": "sender"}'),
        event(4, at(1, 10), "queue_declared", queue="engine", run_id="e1"),
        # The engine's own flow event of a sender names an origin too: still the broker's log.
        event(5, at(1, 10, 0, 1), "flow", queue="engine", link="S", run_id="e1",
              detail='{"origin": "sender"}'),
    ]  # fmt: skip
    events = make_events(rows)
    bounds = run_bounds(events)
    daily = queue_flow_daily(events, queue_flow_episodes(events, bounds), bounds, DAY1, DAY1)
    counts = {
        r.queue: (r.enqueued, r.dequeued, r.rejected, r.dropped, r.paged, r.evicted)
        for r in with_queue_costs(daily, events, DAY1, DAY1).collect()
    }
    unknown = (None,) * 6
    assert counts == {"sampled": unknown, "linked": unknown, "engine": (0,) * 6}

"""The bench's DuckDB peer (bench/duckdb_peer.py) agrees with the Spark transforms, column by
column.

The log is the metrics oracle's random one (tests/test_metrics_oracle.py: midnight crossings, open
episodes at the watermark, counters that start mid-log or step back with the clock, producers
without a window, links attached before the log) plus the cost oracle's runs (messages routed to
several queues, paged, rejected and dropped, held across midnight) and two hand-built runs
(:func:`peer_edge_runs`). The peer reads it as raw files, Hive-partitioned by date, with some
events written twice (identical copies, which it must keep once); the Spark side reads it once,
as the jobs' transforms are composed by jobs/episodes.py and jobs/daily_metrics.py.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import duckdb_peer as peer
from schemas.broker_events import BROKER_EVENTS, COLLECTOR_ORIGINS, RECORDED_BY_CLIENT_LINKS
from tests.test_metrics_oracle import _at, _run, events_frame, random_log
from tests.test_queue_costs_oracle import random_run as random_cost_run

pytestmark = pytest.mark.spark

SEED = 20261125
RUNS = 20
COST_RUNS = 3
#: Events written twice in the raw files (identical copies): one in this many.
DUPLICATE_EVERY = 17
#: Where the peer and Spark read DESIGN §4 differently (see the xfail test below).
COUNTER_CHANGE = ("flow_stopped_counter_delta", "counter_check_ok")


def peer_edge_runs() -> list[dict[str, Any]]:
    """Runs for two readings the random logs never hit, where the peer once read §4 otherwise."""
    collector = {"detail": json.dumps({"origin": COLLECTOR_ORIGINS[0], "sample_interval_ms": 5000})}
    client = {"detail": json.dumps({"recorded_by": RECORDED_BY_CLIENT_LINKS, "origin": "sender"})}
    qc, qr = {"queue": "qc"}, {"queue": "qr", "link": "p1"}
    return _run(
        "peer-outside",  # days whose events of a queue are all a collector's or a client's
        (_at(1, 8), "queue_declared", {**qc, "depth_msgs": 0, **collector}),
        (_at(1, 9), "flow_stopped", {**qc, "depth_msgs": 12, **collector}),  # counts unknown
        (_at(1, 9), "link_attached", {**qr, "credit": 10, **client}),  # counts unknown
        (_at(2, 9), "flow_resumed", {**qc, "depth_msgs": 3, **collector}),
        (_at(2, 10), "dequeue", {**qc, "depth_msgs": 2}),  # the broker's own: qc counted on day 2
        (_at(2, 11), "flow", {**qr, "credit": 9,
                              "detail": json.dumps({"origin": "sender"})}),  # the engine's: counted
    ) + _run(
        "peer-late",  # the clock steps back: q is stopped all day 4, days after the watermark's
        (_at(1, 8), "queue_declared", {"queue": "q", "depth_msgs": 0}),
        (_at(3, 10), "flow_stopped", {"queue": "q", "depth_msgs": 4}),
        (_at(5, 10), "flow_resumed", {"queue": "q", "depth_msgs": 1}),
        (_at(1, 9), "alarm_raised", {}),  # the last by seq: watermark on day 1
    )  # fmt: skip


def hard_log() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    costs = [row for i in range(COST_RUNS) for row in random_cost_run(rng, f"costs{i}")]
    return random_log(SEED, RUNS) + costs + peer_edge_runs()


def write_raw(rows: list[dict[str, Any]], raw_dir: Path) -> None:
    """``<raw>/date=D/part-0.parquet`` per UTC day of ``ts``, and a ``part-1`` repeating some
    of that day's events as they are."""
    schema = pa.schema([f.with_nullable(True) for f in BROKER_EVENTS.to_pyarrow()])
    by_day: dict[date, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_day[row["ts"].astimezone(UTC).date()].append(row)
    for day, day_rows in by_day.items():
        folder = raw_dir / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(day_rows, schema=schema), folder / "part-0.parquet")
        again = day_rows[::DUPLICATE_EVERY]
        pq.write_table(pa.Table.from_pylist(again, schema=schema), folder / "part-1.parquet")


def spark_tables(spark: Any, rows: list[dict[str, Any]], folder: Path) -> dict[str, str]:
    """The Spark transforms' four tables over the whole log, written as Parquet; their paths."""
    from jobs.transforms.daily import link_starvation_daily, queue_flow_daily
    from jobs.transforms.episodes import (
        link_starvation_episodes,
        overlapping,
        queue_flow_episodes,
        run_bounds,
    )
    from jobs.transforms.queue_costs import with_queue_costs

    days = sorted({row["ts"].astimezone(UTC).date() for row in rows})
    first, last = days[0], days[-1]
    events = events_frame(spark, rows, folder).cache()
    bounds = run_bounds(events).cache()
    episodes = queue_flow_episodes(events, bounds).cache()
    starvations = link_starvation_episodes(events, bounds).cache()
    tables = {
        "queue_flow_episodes": episodes,
        "link_starvation_episodes": starvations,
        "queue_flow_daily": with_queue_costs(
            queue_flow_daily(events, overlapping(episodes, first, last), bounds, first, last),
            events,
            first,
            last,
        ),
        "link_starvation_daily": link_starvation_daily(
            events, overlapping(starvations, first, last), bounds, first, last
        ),
    }
    paths = {}
    for name, frame in tables.items():
        paths[name] = str(folder / f"spark_{name}")
        frame.write.parquet(paths[name])
    for frame in (starvations, episodes, bounds, events):
        frame.unpersist()
    return paths


@pytest.fixture(scope="module")
def compared(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, peer.TableDifferences]:
    folder = tmp_path_factory.mktemp("peer")
    rows = hard_log()
    write_raw(rows, folder / "raw")
    spark_paths = spark_tables(spark, rows, folder)
    run = peer.run_peer(folder / "raw", threads=1)
    assert run.events == len(rows)  # the copies are kept once
    found = {}
    for name, path in spark_paths.items():
        spark_table = f"read_parquet('{path}/*.parquet')"
        columns = run.con.execute(f"DESCRIBE SELECT * FROM {spark_table}").fetchall()
        names = tuple(c[0] for c in columns)
        found[name] = peer.differences(
            run.con, name, name, spark_table, examples=20,
            columns=tuple(c for c in names if c not in COUNTER_CHANGE),
        )  # fmt: skip
        if name == "queue_flow_daily":
            found["counter_change"] = peer.differences(
                run.con, name, name, spark_table, examples=20, columns=COUNTER_CHANGE
            )
    return found


def _explain(found: peer.TableDifferences) -> str:
    return (
        f"{found.table}: peer {found.left_rows} rows, Spark {found.right_rows}; "
        f"{found.only_left} only in the peer, {found.only_right} only in Spark, "
        f"{found.differing} differ:\n" + "\n".join(found.examples)
    )


@pytest.mark.parametrize("table", list(peer.TABLE_KEYS))
def test_the_peer_agrees_with_the_spark_transforms(
    compared: dict[str, peer.TableDifferences], table: str
) -> None:
    found = compared[table]
    assert found.right_rows > 0
    assert found.agree, _explain(found)


@pytest.mark.xfail(
    strict=True,
    reason="DESIGN §4 leaves room, read two ways: the counter at 24:00 is, for the peer, the "
    "latest by seq of the events up to that day (the README's rule for 00:00, one day on), for "
    "Spark the day's own latest (run x2: ts steps back, Spark -1 and a failed check, the peer "
    "0); and an idle day of a queue that never logged a counter is, for the peer, an unknown "
    "change (null), for Spark 0",
)
def test_the_peer_reads_the_counter_change_as_spark_does(
    compared: dict[str, peer.TableDifferences],
) -> None:
    assert compared["counter_change"].agree, _explain(compared["counter_change"])


def test_the_peer_refuses_copies_of_an_event_that_differ(tmp_path: Path) -> None:
    row = {"run_id": "r", "broker": "b", "seq": 1, "event_type": "enqueue", "queue": "q"}
    rows = [{**row, "ts": random_log(1, 1)[0]["ts"]}]
    write_raw(rows, tmp_path)
    folder = next(tmp_path.iterdir())
    schema = pa.schema([f.with_nullable(True) for f in BROKER_EVENTS.to_pyarrow()])
    pq.write_table(
        pa.Table.from_pylist([{**rows[0], "queue": "other"}], schema=schema),
        folder / "part-2.parquet",
    )
    with pytest.raises(ValueError, match="copies that differ"):
        peer.load_events(peer.connect(), tmp_path)

"""Recommendations in each broker's own knobs (DESIGN.md §4, issue 21 item 2): the broker kind of an
entity told from the log, the Artemis and RabbitMQ rule tables (first match wins, the rationale
names the winning rule's evidence), and, per broker kind, a recommendation computed by the real
transforms on the engine's own event log and validated by re-simulation (``whatif``)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from flowctl_core.scenario import Scenario, load_scenario, parse_scenario
from flowctl_core.whatif_knobs import (
    KnobChange,
    format_knob_comparison,
    knob_changes_from_recommendations,
    run_knob_whatif,
    run_knob_whatifs,
    with_knob,
)
from jobs.recommend_policy import RecommendPolicy
from tests.scenario_gold import (
    compiled,
    recommendations_by_broker,
    with_first_artemis_address,
)

POLICY = RecommendPolicy(lookback_days=1)

#: A small RabbitMQ workload: a 0.9.1 consumer and an AMQP 1.0 consumer with 10 of prefetch /
#: credit across a 10 ms round trip (5 ms each way), and a 0.9.1 publisher writing flat out to a
#: slow queue (200 us a message) and a fast one on one connection, nothing consuming them.
RABBITMQ_SMALL_CREDIT = """
name: rabbitmq-small-credit
kind: workload
start: 2026-03-06T10:00:00Z
broker: {name: rabbitmq-small-credit}
duration_s: 0.5
queues:
  - {name: backlog-091, prefill: {count: 5000, size: 1024}}
  - {name: backlog-10, prefill: {count: 5000, size: 1024}}
  - {name: slow-sink, service_time_us: 200}
  - {name: fast-sink, service_time_us: 2}
connections:
  - name: reader-091-conn
    protocol: amqp-0-9-1
    latency_us: 5000
    consumers: [{name: reader-091, queue: backlog-091, credit: 10}]
  - name: reader-10-conn
    protocol: amqp-1.0
    latency_us: 5000
    consumers: [{name: reader-10, queue: backlog-10, credit: 10, top_up_below: 5}]
  - name: writer
    protocol: amqp-0-9-1
    frame_cost_us: 8
    publishers: [{name: to-slow, queue: slow-sink}, {name: to-fast, queue: fast-sink}]
"""


def _by_entity(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Recommendation rows of one broker by entity, each checked to name its broker's knob and
    the rule that decided it."""
    by_entity = {row["entity"]: row for row in rows}
    assert len(by_entity) == len(rows), "an entity with more than one row"
    for row in rows:
        assert row["broker_kind"] and row["knob"] and row["unit"] and row["rule"], row
    return by_entity


def all_validated(scenario: Scenario, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The what-ifs of recommendation rows of one scenario, run as written once for all of them:
    each must be validated; returns their metrics, in order."""
    comparisons = run_knob_whatifs(scenario, knob_changes_from_recommendations(rows))
    assert len(comparisons) == len(rows), "a row that changes no knob"
    for comparison in comparisons:
        print(format_knob_comparison(comparison))
        assert comparison.validated, format_knob_comparison(comparison)
    return [{"before": c.before, "after": c.after} for c in comparisons]


def validated(scenario: Scenario, row: dict[str, Any]) -> dict[str, Any]:
    """The what-if of one recommendation row: it must be validated; returns its metrics."""
    (metrics,) = all_validated(scenario, [row])
    return metrics


# -- the broker kind --------------------------------------------------------------------------


@pytest.mark.spark
def test_an_artemis_consumers_rate_counts_deliveries_from_its_first_return(
    spark: Any, make_events: Any
) -> None:
    """artemis_consumer_evidence: the credit a consumer returns as it takes messages, after its
    first return, in deliveries of the mean body + the attach's delivery overhead (0 when the log
    has none), over the span from the first return to the last. 1,000-byte bodies. A 10,000-byte
    window (its attach grant aside) returning 5,000 B at 10, 20 and 30 s: 10,000 B in 20 s, 10
    deliveries of 1,000 B (0.5/s) or 8 of 1,250 B (0.4/s); with the first return counted it read
    0.75 and 0.6. A window-0 consumer asking 1 byte before each message and returning 1,249 B
    as it takes one at 1, 3 and 5 s: 2 messages in 4 s (0.5/s), whenever its asks come."""
    from jobs.transforms.recommend_artemis import artemis_consumer_evidence

    batches = [(0, 10_000), (10, 5_000), (20, 5_000), (30, 5_000)]
    one_at_a_time = [(0, 1), (1, 1_249), (2, 1), (3, 1_249), (4, 1), (5, 1_249), (7, 1)]
    events = make_events(
        _artemis_consumer("old-log", 10_000, None, batches)
        + _artemis_consumer("engine", 10_000, 250, batches)
        + _artemis_consumer("no-buffer", 0, 250, one_at_a_time)
    )
    rates = {r.link: r.processing_rate_msgs_s for r in artemis_consumer_evidence(events).collect()}
    assert rates == pytest.approx({"old-log": 0.5, "engine": 0.4, "no-buffer": 0.5})


@pytest.mark.spark
def test_an_artemis_consumers_rate_is_taken_within_each_of_its_runs(
    spark: Any, make_events: Any
) -> None:
    """A consumer link that recurs in two runs takes its messages within each run's span of
    returns: the window of the test above, the same in two runs a day apart, and in two runs over
    the same seconds, reads 0.5/s as one run does. Taken across runs it read 10,000 B x 2 over a
    day and 20 s (0.0001/s), and 20,000 B over 20 s (1.0/s)."""
    from jobs.transforms.recommend_artemis import artemis_consumer_evidence

    batches = [(0, 10_000), (10, 5_000), (20, 5_000), (30, 5_000)]
    events = make_events(
        _artemis_consumer("days-apart", 10_000, None, batches, run_id="monday", day=3)
        + _artemis_consumer("days-apart", 10_000, None, batches, run_id="tuesday", day=4)
        + _artemis_consumer("same-clock", 10_000, None, batches, run_id="first")
        + _artemis_consumer("same-clock", 10_000, None, batches, run_id="second")
    )
    rates = {r.link: r.processing_rate_msgs_s for r in artemis_consumer_evidence(events).collect()}
    assert rates == pytest.approx({"days-apart": 0.5, "same-clock": 0.5})


def _artemis_consumer(
    link: str,
    window: int,
    overhead: int | None,
    flows: list[tuple[int, int]],
    run_id: str = "r",
    day: int = 3,
) -> list[dict[str, Any]]:
    """The events of an Artemis CORE consumer of queue q in one run on March ``day``: its attach
    (``window`` bytes), 8 transfers of 1,000-byte bodies at 1-8 s, and its client's flows
    (second, credits)."""
    base = {"run_id": run_id, "broker": "b", "queue": "q", "link": link, "link_role": "consumer"}
    attach: dict[str, Any] = {"credit_unit": "bytes", "window": window}
    if overhead is not None:
        attach["delivery_overhead_bytes"] = overhead

    def at(second: int) -> datetime:
        return datetime(2026, 3, day, 0, 0, second, tzinfo=UTC)

    rows = [{**base, "seq": 1, "ts": at(0), "event_type": "link_attached",
             "detail": json.dumps(attach)}]  # fmt: skip
    rows += [
        {**base, "seq": 10 + n, "ts": at(n), "event_type": "transfer", "size_bytes": 1_000,
         "detail": '{"credit_unit": "bytes"}'}
        for n in range(1, 9)
    ]  # fmt: skip
    for seq, (second, credits) in enumerate(flows, start=100):
        detail = {"origin": "client", "credits": credits, "credit_unit": "bytes"}
        rows.append({**base, "seq": seq, "ts": at(second), "event_type": "flow",
                     "detail": json.dumps(detail)})  # fmt: skip
    return rows


def test_the_broker_kind_is_told_from_the_log(spark: Any, make_events: Any) -> None:
    from jobs.transforms.recommend_brokers import link_broker_kinds, queue_broker_kinds
    from jobs.transforms.recommend_rollup import day_rollup

    base = {"run_id": "r", "broker": "b", "ts": datetime(2026, 3, 3, tzinfo=UTC)}
    artemis = json.dumps({"address": "orders", "address_size": 10, "policy": "BLOCK"})
    rows = [
        {**base, "seq": 1, "event_type": "enqueue", "queue": "q010", "protocol": "amqp-0-10"},
        {**base, "seq": 2, "event_type": "enqueue", "queue": "orders", "protocol": "amqp-1.0",
         "link": "amqp-in", "detail": artemis},
        {**base, "seq": 3, "event_type": "enqueue", "queue": "q091", "protocol": "amqp-0-9-1"},
        {**base, "seq": 4, "event_type": "enqueue", "queue": "q10", "protocol": "amqp-1.0"},
        {**base, "seq": 5, "event_type": "queue_declared", "queue": "quiet",
         "detail": '{"policy": "reject"}'},
        # An AMQP 1.0 consumer of an Artemis queue is Artemis's, whatever its own events say.
        {**base, "seq": 6, "event_type": "transfer", "queue": "orders", "protocol": "amqp-1.0",
         "link": "amqp-out", "link_role": "consumer"},
        {**base, "seq": 7, "event_type": "transfer", "queue": "q10", "protocol": "amqp-1.0",
         "link": "rabbit-out", "link_role": "consumer"},
        # A broker whose events say RabbitMQ only: its queue declared and never used (or only
        # prefilled: the engine logs no protocol for either) is RabbitMQ's, not Qpid's.
        {**base, "broker": "rmq", "seq": 8, "event_type": "enqueue", "queue": "busy",
         "protocol": "amqp-0-9-1"},
        {**base, "broker": "rmq", "seq": 9, "event_type": "queue_declared", "queue": "idle"},
        # A consumer whose own events say nothing takes its queue's kind when that is said...
        {**base, "broker": "rmq", "seq": 10, "event_type": "flow", "queue": "busy",
         "link": "rmq-quiet-out", "link_role": "consumer", "credit": 10},
        # ... and an AMQP 0-10 consumer with a credit is Qpid's (it gets no advice).
        {**base, "seq": 11, "event_type": "flow", "queue": "q010", "protocol": "amqp-0-10",
         "link": "qpid-out", "link_role": "consumer", "credit": 10},
        # Nothing in the log says a broker (no protocol, a queue of no kind): a link with a
        # credit is RabbitMQ's (link credit is its knob), one without is Qpid's.
        {**base, "broker": "plain", "seq": 12, "event_type": "enqueue", "queue": "p"},
        {**base, "broker": "plain", "seq": 13, "event_type": "flow", "queue": "p",
         "link": "credit-out", "link_role": "consumer", "credit": 10},
        {**base, "broker": "plain", "seq": 14, "event_type": "dequeue", "queue": "p",
         "link": "plain-out", "link_role": "consumer"},
        # A credit link on a queue that says Qpid takes Qpid's kind, its credit notwithstanding.
        {**base, "seq": 15, "event_type": "flow", "queue": "q010", "link": "q010-out",
         "link_role": "consumer", "credit": 10},
        # A RabbitMQ collector's alarm and queue sample carry no protocol: their origin says it.
        {**base, "broker": "real-rmq", "seq": 16, "event_type": "alarm_raised",
         "detail": '{"resource": "memory", "origin": "rabbitmq-log"}'},
        {**base, "broker": "real-rmq", "seq": 17, "event_type": "queue_declared",
         "queue": "sampled", "detail": '{"origin": "rabbitmq-management"}'},
        # A client's own AMQP 1.0 link says nothing of its broker unless the client says it.
        {**base, "broker": "client", "seq": 18, "event_type": "flow", "queue": "told",
         "protocol": "amqp-1.0", "link": "told-in", "link_role": "publisher", "credit": 5,
         "detail": '{"recorded_by": "client-links", "broker_product": "artemis"}'},
        {**base, "broker": "client2", "seq": 19, "event_type": "flow", "queue": "untold",
         "protocol": "amqp-1.0", "link": "untold-in", "link_role": "publisher", "credit": 5,
         "detail": '{"recorded_by": "client-links"}'},
        # Queue flow thresholds are Qpid's alone: a Qpid queue whose clients speak AMQP 1.0 is
        # Qpid's (an audit: told to set x-max-length), its links by their own events (a credit
        # is the client's knob); thresholds 0 (off, as RabbitMQ's and Artemis's queues log
        # them) say nothing.
        {**base, "seq": 20, "event_type": "queue_declared", "queue": "qpid10",
         "flow_stop_count": 80, "flow_resume_count": 70, "flow_stop_size": 0,
         "flow_resume_size": 0},
        {**base, "seq": 21, "event_type": "enqueue", "queue": "qpid10", "protocol": "amqp-1.0",
         "link": "qpid10-in", "flow_stop_count": 80, "flow_resume_count": 70},
        {**base, "seq": 22, "event_type": "transfer", "queue": "qpid10", "protocol": "amqp-1.0",
         "link": "qpid10-out", "link_role": "consumer", "credit": 9},
        {**base, "seq": 23, "event_type": "enqueue", "queue": "q10-off", "protocol": "amqp-1.0",
         "flow_stop_count": 0, "flow_resume_count": 0, "flow_stop_size": 0,
         "flow_resume_size": 0},
        # ... but not over 0.9.1 (RabbitMQ's queues log thresholds when a scenario gives them a
        # default queue limit; Qpid does not speak 0.9.1: a review), on the queue or on a broker
        # that speaks no 0-10, nor over Artemis's (an address logs its max-size-bytes as the
        # stop size).
        {**base, "broker": "rmq-limited", "seq": 24, "event_type": "enqueue", "queue": "r091",
         "protocol": "amqp-0-9-1", "flow_stop_size": 838860, "flow_resume_size": 734003},
        {**base, "broker": "rmq-limited", "seq": 25, "event_type": "enqueue", "queue": "r10",
         "protocol": "amqp-1.0", "flow_stop_size": 838860, "flow_resume_size": 734003},
        {**base, "seq": 26, "event_type": "enqueue", "queue": "q091-thr", "protocol": "amqp-0-9-1",
         "flow_stop_count": 80, "flow_resume_count": 70},
        {**base, "broker": "art", "seq": 27, "event_type": "enqueue", "queue": "a1",
         "protocol": "amqp-1.0", "flow_stop_size": 1048576, "detail": artemis},
    ]  # fmt: skip
    rollup = day_rollup(make_events(rows))
    queues = queue_broker_kinds(rollup)
    assert {r.queue: r.broker_kind for r in queues.collect()} == {
        "q010": "qpid",
        "orders": "artemis",
        "q091": "rabbitmq",
        "q10": "rabbitmq",
        "quiet": "qpid",  # no protocol logged on a broker of several kinds: the plain engine's
        "busy": "rabbitmq",
        "idle": "rabbitmq",  # no protocol logged, on a broker whose events say RabbitMQ only
        "p": "qpid",  # nothing said anywhere: the plain engine's
        "sampled": "rabbitmq",
        "told": "artemis",
        "untold": "rabbitmq",
        "qpid10": "qpid",
        "q10-off": "rabbitmq",
        "r091": "rabbitmq",
        "r10": "rabbitmq",
        "q091-thr": "rabbitmq",
        "a1": "artemis",
    }
    links = {r.link: r.broker_kind for r in link_broker_kinds(rollup, queues).collect()}
    assert links == {
        "amqp-in": "artemis",
        "amqp-out": "artemis",
        "rabbit-out": "rabbitmq",
        "rmq-quiet-out": "rabbitmq",
        "qpid-out": "qpid",
        "credit-out": "rabbitmq",
        "plain-out": "qpid",
        "q010-out": "qpid",
        "told-in": "artemis",
        "untold-in": "rabbitmq",
        "qpid10-in": "rabbitmq",
        "qpid10-out": "rabbitmq",
    }


# -- the rule tables --------------------------------------------------------------------------

ADDRESS_EVIDENCE = (
    "broker string, address string, queue string, runs long, address_policy string, "
    "max_size_bytes long, reject_threshold long, peak_address_bytes long, dropped_msgs long, "
    "failed_msgs long, rejected_msgs long, paged_msgs long, episodes long, "
    "max_message_bytes long, _message_overhead_bytes long"
)
ADDRESS_PRODUCERS = (
    "broker string, address string, core_producers long, core_window_bytes long, "
    "unbounded_windows long, producer_window long, amqp_producers long, amqp_credits long, "
    "core_window_msgs long, core_message_credit long"
)
QUEUE_DAILY = (
    "broker string, queue string, time_stopped_s double, _observed_s double, "
    "peak_depth_msgs long, peak_depth_bytes long"
)


def _address(name: str, policy: str, peak: int, **counts: int) -> tuple[Any, ...]:
    """A 262144-byte address of 1024-byte messages (1068 bytes of overhead each)."""
    return ("b", name, name, 1, policy, 262144, counts.get("reject_threshold"), peak,
            counts.get("dropped", 0), counts.get("failed", 0), counts.get("rejected", 0),
            counts.get("paged", 0), 1, 1024, 1068)  # fmt: skip


@pytest.mark.spark
def test_the_dropped_rule_and_the_whatif_move_a_reject_threshold_alike(spark: Any) -> None:
    """The advice that raises a DROP address's limit says where a reject threshold it reaches
    goes (jobs/transforms/recommend_artemis.py); the what-if that replays it moves it
    (flowctl_core/whatif_knobs.py ``_max_size``). Two copies of one rule: the same thresholds
    through both, the moved one read from the advice's text, must land alike; also where the
    moved threshold would pass a long (a review: the text said "from 2e12 to 2^63 - 1, the same
    1e12 above" and the what-if ran a threshold past a long) or the limit is a long's largest."""
    import re

    from jobs.transforms.recommend_artemis import LONG_MAX, recommend_addresses

    raised_to = -(-(300_000 + 100 * 2092) * 12 // 10)  # the raised limit: 614,208
    thresholds = [262_145, 300_000, raised_to - 1, raised_to, raised_to + 1, 900_000]
    # (name, max-size-bytes, peak, dropped, message bytes, reject threshold)
    cases = [(f"t{t}", 262144, 300_000, 100, 1024, t) for t in thresholds] + [
        # Raised to about 6e18, the gap of 4.6e18 above it passes a long.
        ("gap-past-a-long", 10**12, 5 * 10**18, 1, 1024, 2**62),
        # Raised to a long's largest: no threshold is above it.
        ("limit-a-long", 10**12, 10**12, 2**40, 2**31, 10**12 + 5),
    ]
    evidence = spark.createDataFrame(
        [
            ("b", name, name, 1, "DROP", limit, threshold, peak, dropped, 0, 0, 0, 1, message,
             1068)
            for name, limit, peak, dropped, message, threshold in cases
        ],
        ADDRESS_EVIDENCE,
    )  # fmt: skip
    producers = spark.createDataFrame(
        [("b", case[0], 1, 65536, 0, 65536, 0, 0, None, None) for case in cases],
        ADDRESS_PRODUCERS,
    )
    daily = spark.createDataFrame([], QUEUE_DAILY)
    advised = {
        r.entity: r for r in recommend_addresses(evidence, producers, daily, POLICY).collect()
    }
    base = load_scenario("artemis-address-full-policies")
    address = base.artemis.addresses[0]
    replayed_thresholds = {}
    for name, limit, _, _, _, threshold in cases:
        row = advised[name]
        assert (row.knob, row.current_value) == ("max-size-bytes", limit)
        said = re.search(r"reject-threshold from ([\d,]+) to ([\d,]+)", row.rationale)
        off = re.search(r"reject-threshold ([\d,]+) off \(-1\)", row.rationale)
        advice = threshold if said is None else _whole(said[2])
        assert said is None or _whole(said[1]) == threshold
        if off is not None:
            assert said is None and _whole(off[1]) == threshold
            advice = -1
        scenario = with_first_artemis_address(
            base, max_size_bytes=limit, max_size_bytes_reject_threshold=threshold
        )
        change = KnobChange(
            "artemis", address.name, "max-size-bytes", limit, row.recommended_value, "raise",
            row.rule,
        )  # fmt: skip
        replayed = with_knob(scenario, change).artemis.addresses[0]
        assert replayed.max_size_bytes_reject_threshold == advice, name
        # What the what-if runs is a scenario the engine takes.
        type(scenario).model_validate(with_knob(scenario, change).model_dump())
        replayed_thresholds[name] = replayed.max_size_bytes_reject_threshold
    assert advised[f"t{raised_to + 1}"].recommended_value == raised_to
    moved = [t for t in thresholds if "reject-threshold from" in advised[f"t{t}"].rationale]
    assert moved == [262_145, 300_000, raised_to - 1, raised_to]  # at or below the new limit
    assert replayed_thresholds["gap-past-a-long"] == LONG_MAX
    assert "a long's largest" in advised["gap-past-a-long"].rationale
    assert advised["limit-a-long"].recommended_value == LONG_MAX
    assert replayed_thresholds["limit-a-long"] == -1


@pytest.mark.spark
def test_artemis_bounds_past_a_long_are_held_at_a_long_not_a_failed_job(spark: Any) -> None:
    """Sums and products of logged sizes past a long failed the whole recommend job under ANSI
    SQL, every broker's advice with it (an audit). They are held at 2^63 - 1, the largest
    max-size-bytes or reject threshold Artemis takes; an unknown term stays unknown (Spark's
    ``least`` skips a null, and read a CORE bound without logged capacities as 2^63 - 1)."""
    from jobs.transforms.recommend_artemis import LONG_MAX, recommend_addresses

    near = LONG_MAX - 1000

    def address(name: str, policy: str, max_size: int, peak: int, **counts: int) -> tuple:
        return ("b", name, name, 1, policy, max_size, counts.get("reject_threshold"), peak,
                counts.get("dropped", 0), 0, counts.get("rejected", 0), 0, 1,
                counts.get("message", 1024), 1068)  # fmt: skip

    evidence = spark.createDataFrame(
        [
            # max-size-bytes near 2^63: its limit plus the credits' bound passes a long.
            address("near-a-long", "BLOCK", near, near - 10, rejected=5, reject_threshold=near + 5),
            # 2^40 dropped messages of 2 GiB: the room for them passes a long.
            address("dropped", "DROP", 10**12, 10**12, dropped=2**40, message=2**31),
            # 2^40 AMQP credits of 2 GiB messages: their bound passes a long.
            address("credits", "BLOCK", 10**12, 10**12 + 5, message=2**31),
            # A window of 2^31 - 1 bytes without logged capacities, under the tolerated 10^11.
            address("window", "BLOCK", 10**12, 10**12 + 10**11),
        ],
        ADDRESS_EVIDENCE,
    )
    producers = spark.createDataFrame(
        [
            ("b", "near-a-long", 0, None, 0, None, 2, 200, None, None),
            ("b", "dropped", 1, 65536, 0, 65536, 0, 0, None, None),
            ("b", "credits", 0, None, 0, None, 1, 2**40, None, None),
            ("b", "window", 1, 2**31 - 1, 0, 2**31 - 1, 0, 0, None, None),
        ],
        ADDRESS_PRODUCERS,
    )
    daily = spark.createDataFrame([], QUEUE_DAILY)
    rows = {
        r.entity: (r.verdict, r.knob, r.recommended_value)
        for r in recommend_addresses(evidence, producers, daily, POLICY).collect()
    }
    assert rows == {
        "near-a-long": ("raise", "max-size-bytes-reject-threshold", LONG_MAX),
        "dropped": ("raise", "max-size-bytes", LONG_MAX),
        "credits": ("keep", "max-size-bytes", 10**12),
        "window": ("keep", "max-size-bytes", 10**12),
    }


@pytest.fixture(scope="module")
def hand_built_advice(spark: Any) -> dict[str, dict[str, Any]]:
    """The recommendations of :func:`_logs_past_a_long` and :func:`_logs_a_collector_sees` in one
    ``recommended_together`` call (each log a broker and run of its own), by broker then entity:
    one computation where the two tests made one each (~7 s of Spark planning apiece).
    Read-only: the tests assert on it."""
    from tests.test_recommend import recommended_together

    logs = {**_logs_past_a_long(), **_logs_a_collector_sees()}
    assert len(logs) == len(_logs_past_a_long()) + len(_logs_a_collector_sees())
    return recommended_together(spark, logs)


def _logs_past_a_long() -> dict[str, Any]:
    """test_sums_of_logged_capacities_and_credits_past_a_long_do_not_fail_the_job's logs."""
    from jobs.transforms.saturating import LONG_MAX
    from tests.test_recommend import Log

    logs = {"qpid": Log()}
    logs["qpid"].queue("q", 800, 700, capacities=(2**62, 2**62))
    for name, capacities in (("artemis-2^62", (2**62, 2**62)), ("artemis-max", (LONG_MAX, 10))):
        logs[name] = Log()
        for n, capacity in enumerate(capacities, start=1):
            detail = {"address": "a", "address_size": 2000 * n, "max_size_bytes": 1_000_000,
                      "paged": False, "policy": "BLOCK",
                      "producer": {"credit_unit": "bytes", "window": 65536}}  # fmt: skip
            logs[name].event(1, "enqueue", queue="a", link=f"p{n}", protocol="artemis-core",
                             link_role="publisher", size_bytes=1024, capacity=capacity,
                             depth_msgs=n, detail=json.dumps(detail))  # fmt: skip
    logs["consumer"] = Log()
    logs["consumer"].consumer("c", credit=LONG_MAX, grant=LONG_MAX, deliveries=10, starved_s=50,
                              starvations=5, credit_unit="bytes", size_bytes=2**62)  # fmt: skip
    return logs


@pytest.mark.spark
def test_sums_of_logged_capacities_and_credits_past_a_long_do_not_fail_the_job(
    hand_built_advice: dict[str, dict[str, Any]],
) -> None:
    """Each of these logs failed the whole recommend job under ANSI SQL (a review): two Qpid
    producers of capacity 2^62 (their sum), two Artemis CORE producers of capacity 2^62 and one
    of 2^63 - 1 (the messages their windows cover, and capacity + 1), a CORE consumer of 2^62
    byte messages (its credit need, 2 x in flight + 1). Held at a long, each gets its advice."""
    mine = _logs_past_a_long().keys()  # the other test's brokers are its own
    advice = {
        broker: {entity: (r.broker_kind, r.knob) for entity, r in rows.items()}
        for broker, rows in hand_built_advice.items()
        if broker in mine
    }
    assert advice == {
        "qpid": {"q": ("qpid", "qpid.flow_stop_count")},
        "artemis-2^62": {"a": ("artemis", "producerWindowSize")},
        "artemis-max": {"a": ("artemis", "producerWindowSize")},
        "consumer": {"c": ("artemis", "consumerWindowSize")},
    }


def _logs_a_collector_sees() -> dict[str, Any]:
    """test_losses_a_collector_cannot_see_are_not_read_as_none's logs."""
    from tests.test_recommend import DAY, RUN, Log

    artemis = Log()
    for name, policy, peak in (
        ("drop-a", "DROP", 104_496),
        ("fail-a", "FAIL", 102_400),
        ("quiet-a", "DROP", 50_000),
        ("block-a", "BLOCK", 90_000),
    ):
        for at_s, size in ((1, 20_000), (2, peak), (3, 10_000)):
            detail = {
                "address": name,
                "address_size": size,
                "max_size_bytes": 102_400,
                "policy": policy,
                "origin": "jolokia",
                "sample_interval_ms": 1000,
            }
            artemis.event(at_s, "queue_declared", queue=name, depth_msgs=size // 1000,
                          depth_bytes=size, detail=json.dumps(detail))  # fmt: skip
    rabbitmq = Log()
    depths = {
        "bounded": (200, 500, 500),
        "work": (10_362, 4_000, 0),
        "growing": (100, 5_000, 9_000),
    }
    for name, series in depths.items():
        for at_s, depth in enumerate(series, start=1):
            rabbitmq.event(at_s, "queue_declared", queue=name, depth_msgs=depth,
                           max_count=500 if name == "bounded" else 0, max_size=0,
                           detail='{"origin": "rabbitmq-management", "sample_interval_ms": 1000, '
                           '"policy": "drop-head"}')  # fmt: skip
        rabbitmq.daily.append(
            {**RUN, "date": DAY, "queue": name, "flow_stopped_count": 0,
             "stopped_at_day_start": False, "time_stopped_s": 0.0, "observed_s": 3.0,
             "episodes": 0, "max_depth_msgs": max(series), "sample_interval_ms": 1000}
        )  # fmt: skip
    return {"artemis": artemis, "rabbitmq": rabbitmq}


@pytest.mark.spark
def test_losses_a_collector_cannot_see_are_not_read_as_none(
    hand_built_advice: dict[str, dict[str, Any]],
) -> None:
    """A collector sees sizes and depths, no message: a DROP or FAIL address at its limit, or a
    RabbitMQ queue at its x-max-length, lost or refused messages the log cannot count. Read as
    0 they gave "nothing lost or rejected" and "0 rejected" (a real-broker walk-through); a
    queue that drained read "(0 in, 0 out)", and one that grew read "it does not grow"."""
    advised = hand_built_advice["artemis"]
    assert {name: (r.broker_kind, r.verdict, r.rule) for name, r in advised.items()} == {
        "drop-a": ("artemis", "at_risk_of_overflow", "losses not in the log"),
        "fail-a": ("artemis", "at_risk_of_overflow", "losses not in the log"),
        "quiet-a": ("artemis", "keep", "within its limit"),
        "block-a": ("artemis", "keep", "within its limit"),
    }
    assert "max-size-bytes 102,400 (DROP) (peak 104,496 bytes), where Artemis drops messages" in (
        advised["drop-a"].rationale
    )
    assert "where Artemis fails sends" in advised["fail-a"].rationale
    assert "nothing lost" not in advised["quiet-a"].rationale
    assert "no sample showed it at a limit" in advised["quiet-a"].rationale

    advised = hand_built_advice["rabbitmq"]
    assert {name: (r.broker_kind, r.rule, r.rejected_msgs) for name, r in advised.items()} == {
        "bounded": ("rabbitmq", "length limit in force", None),
        "work": ("rabbitmq", "below its peak at the end", None),
        "growing": ("rabbitmq", "grows, intake rate unknown", None),
    }
    assert advised["bounded"].rationale.endswith(
        "x-max-length 500 in force (peak 500, at the limit, where the queue drops or refuses "
        "messages; a collector sees no message, so how many is not in the log)"
    )
    assert "0 in, 0 out" not in advised["work"].rationale
    assert "a collector sees no message" in advised["growing"].rationale


#: The address the AMQP publishers of each case of the test below send to (each case's log is a
#: broker of its own in amqp_publisher_advice).
AMQP_ADDRESSES = {"address": "amqp-block", "fully-qualified-queue-name": "amqp-block::orders"}


@pytest.fixture(scope="module")
def amqp_publisher_advice(spark: Any) -> dict[str, Any]:
    """Address amqp-block's row of each :data:`AMQP_ADDRESSES` case, by case: each case's
    collector samples and client-recorded links on a broker named by the case (runs named
    apart), all in one computation (each alone cost ~7 s of Spark planning). Read-only."""
    from collectors.proton_links import queue_of_address
    from tests.test_recommend import Log

    log = Log()
    for case, amqp_address in AMQP_ADDRESSES.items():
        for at_s, size in ((1, 20_000), (2, 248_800), (3, 10_000)):
            detail = {
                "address": "amqp-block",
                "address_size": size,
                "max_size_bytes": 102_400,
                "policy": "BLOCK",
                "origin": "jolokia",
                "sample_interval_ms": 1000,
            }
            log.event(at_s, "queue_declared", queue="amqp-block", depth_msgs=size // 2488,
                      depth_bytes=size, detail=json.dumps(detail), broker=case,
                      run_id=f"{case}-samples")  # fmt: skip
        # The link's queue as the recorder reads its address, so that the advice's reading of
        # an FQQN (recommend_artemis.address_producers) is checked against the recorder's.
        link_queue = queue_of_address(amqp_address, "artemis")
        assert link_queue is not None
        marks = {"recorded_by": "client-links", "broker_product": "artemis", "origin": "receiver"}
        if amqp_address != link_queue:
            marks["amqp_address"] = amqp_address
        recorded = json.dumps(marks)
        for at_s, credit in ((1, 100), (2, 40), (3, 0)):
            log.event(at_s, "flow", queue=link_queue, link="sender-1", protocol="amqp-1.0",
                      link_role="publisher", credit=credit, available=5, broker=case,
                      run_id=f"{case}-client-run", detail=recorded)  # fmt: skip
    rows = log.recommend(spark).where("entity = 'amqp-block'").collect()
    by_case = {row.broker: row for row in rows}
    assert len(by_case) == len(rows) and set(by_case) == set(AMQP_ADDRESSES)  # one row a case
    return by_case


@pytest.mark.spark
@pytest.mark.parametrize("case", list(AMQP_ADDRESSES))
def test_amqp_publishers_a_client_recorded_count_on_their_address(
    amqp_publisher_advice: dict[str, Any], case: str
) -> None:
    """A real Artemis's log has the address's size (the collector's samples) and its AMQP
    publishers only as their client recorded its links. Left out, an address they pushed past
    its limit was told to lower the CORE producers' producerWindowSize, with no CORE producer
    in sight (a real-broker walk-through). A link to a fully qualified queue name has the queue
    in ``queue`` and counts on the name's address."""
    row = amqp_publisher_advice[case]
    assert (row.broker_kind, row.verdict, row.rule) == (
        "artemis",
        "at_risk_of_overflow",
        "AMQP overshoot without a hard limit",
    )
    assert "producerWindowSize" not in row.rationale
    # 100 credits of the most a message took in a sample (20,000 bytes over 8 messages: 2,500)
    # allow 250,000 bytes past the limit; the hard limit above them with 20 % margin.
    assert "(their credits allow 250,000)" in row.rationale
    assert (row.knob, row.recommended_value) == (
        "max-size-bytes-reject-threshold",
        102_400 + 250_000 * 12 // 10,
    )


@pytest.mark.spark
def test_the_artemis_address_rules_compile_into_whole_stage_code(spark: Any) -> None:
    """The demo printed Janino's errors once the bounds were held at a long, until the held
    values were staged: compiled here, such a stage fails the test."""
    from jobs.transforms.recommend_artemis import recommend_addresses

    evidence = spark.createDataFrame(
        [_address("dropping", "DROP", 300_000, dropped=100, reject_threshold=300_000)],
        ADDRESS_EVIDENCE,
    )
    producers = spark.createDataFrame(
        [("b", "dropping", 1, 65536, 0, 65536, 2, 200, 11, 1366)], ADDRESS_PRODUCERS
    )
    daily = spark.createDataFrame([], QUEUE_DAILY)
    with compiled(spark):
        (row,) = recommend_addresses(evidence, producers, daily, POLICY).collect()
    assert (row.verdict, row.knob) == ("raise", "max-size-bytes")


@pytest.fixture(scope="module")
def recommendations_as_of_march_6(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    artemis_recommendations: dict[str, dict[str, dict[str, Any]]],
) -> dict[str, list[dict[str, Any]]]:
    """The recommendations of the bundled rabbitmq-paced-consumers (2026-03-04), of
    artemis-amqp-reject-threshold with its hard address's advice applied (2026-03-05), of
    PREFILLED_FOR_091 and of RABBITMQ_SMALL_CREDIT (2026-03-06), by broker, in one computation
    as of the last day (each alone cost a test ~15 s of Spark planning; the policy's 7-day
    look-back holds them all). Read-only: the tests assert on it."""
    from jobs.recommend import load_policy

    (change,) = knob_changes_from_recommendations(
        [artemis_recommendations["artemis-telemetry"]["telemetry-hard"]]
    )
    scenarios = [
        load_scenario("rabbitmq-paced-consumers"),
        with_knob(load_scenario("artemis-amqp-reject-threshold"), change),
        parse_scenario(yaml.safe_load(PREFILLED_FOR_091), "rmq-prefilled-091"),
        parse_scenario(yaml.safe_load(RABBITMQ_SMALL_CREDIT), "rabbitmq-small-credit"),
    ]
    brokers = [scenario.broker.name for scenario in scenarios]
    assert brokers == [
        "rabbitmq-paced",
        "artemis-telemetry",
        "rmq-prefilled-091",
        "rabbitmq-small-credit",
    ]
    # RABBITMQ_SMALL_CREDIT's run is 0.5 s: a backlog of 0.2 s is a limit it reaches. The
    # setting sizes RabbitMQ queues' x-max-length only, which the other tests do not read.
    policy = dataclasses.replace(load_policy(), max_backlog_s=0.2)
    return recommendations_by_broker(spark, scenarios, tmp_path_factory.mktemp("march-6"), policy)


@pytest.mark.spark
def test_rabbitmqs_recommendations_compile_into_whole_stage_code(
    recommendations_as_of_march_6: dict[str, list[dict[str, Any]]],
) -> None:
    """The whole recommend transform over a bundled RabbitMQ scenario, compiled with no fallback
    (as :func:`recommendation_rows` computes every scenario's, here the fixture's computation):
    every rule table's stage fits the JVM's method size. Qpid's (qpid-165-worst-case,
    tests/test_whatif.py) and Artemis's (artemis-address-full-policies,
    test_artemis_address_knobs_are_validated_by_whatif) are computed so by the tests that check
    their advice, which assert their knobs too."""
    rows = recommendations_as_of_march_6["rabbitmq-paced"]
    assert {"link credit", "prefetch"} <= {row["knob"] for row in rows}


@pytest.mark.spark
def test_the_first_artemis_address_rule_that_holds_wins(spark: Any) -> None:
    from jobs.transforms.recommend_artemis import ARTEMIS_ADDRESS_RULES, recommend_addresses

    evidence = spark.createDataFrame(
        [
            # Dropped messages and a window overshoot: the loss is what the row is about.
            _address("dropping", "DROP", 300_000, dropped=100),
            # The same with a reject threshold the raised limit passes (an audit: the advice was
            # a max-size-bytes Artemis and the engine refuse beside that threshold).
            _address(
                "dropping-under-threshold", "DROP", 300_000, dropped=100, reject_threshold=300_000
            ),
            _address("overshooting", "BLOCK", 299_156),
            _address("failing", "FAIL", 263_592, failed=7),
            _address("paging", "PAGE", 263_592, paged=5),
            _address("rejecting", "BLOCK", 154_256, rejected=10, reject_threshold=153_600),
            _address("fine", "BLOCK", 270_000),
            _address("fine-by-window-bytes-only", "BLOCK", 270_000),
            _address("unbounded", "BLOCK", 262_000),
            _address("could", "BLOCK", 265_000),
            _address("amqp-over", "BLOCK", 330_000, reject_threshold=400_000),
            # No reject threshold: the windows of four CORE producers, or two AMQP producers'
            # credits beside a small CORE window, made the overshoot.
            _address("mixed-core-over", "BLOCK", 330_000),
            _address("crowded", "BLOCK", 262_000),
            _address("amqp-over-no-hard", "BLOCK", 330_000),
            # A collector's address: its size sampled past the limit, no producer in the log.
            _address("collected", "BLOCK", 400_000),
            # Windows of 1024 bytes, under one message's 2092: seen past the limit, or forty of
            # them that could pass it.
            _address("tiny-window", "BLOCK", 299_156),
            _address("tiny-crowded", "BLOCK", 262_000),
        ],
        ADDRESS_EVIDENCE,
    )
    # Without the messages the windows cover and the credit one takes (a log without
    # capacities): the windows' bytes bound the overshoot.
    logged_no_capacity = [
        (*row, None, None)
        for row in (
            [
                ("b", name, 1, 65536, 0, 65536, 0, 0)
                for name in (
                    "dropping",
                    "dropping-under-threshold",
                    "overshooting",
                    "failing",
                    "paging",
                )
            ]
            + [
                ("b", "rejecting", 0, None, 0, None, 2, 200),
                # 16384 bytes x 1.2 fits in the 26214 tolerated.
                ("b", "fine", 1, 16384, 0, 16384, 0, 0),
                # One producer of two with window -1 (its bytes are in no sum).
                ("b", "unbounded", 2, 65536, 1, 65536, 0, 0),
                # Four 64 KiB windows: 262144 bytes may pass the limit, 2856 did.
                ("b", "could", 4, 262144, 0, 65536, 0, 0),
                # An 8 KiB CORE window (9830 with margin) cannot make a 67856-byte overshoot: the
                # two AMQP producers' 200 credits did.
                ("b", "amqp-over", 1, 8192, 0, 8192, 2, 200),
                ("b", "mixed-core-over", 4, 262144, 0, 65536, 1, 10),
                # Sixteen 64 KiB windows: 21845 / 16 = 1365 bytes each, less than one message.
                ("b", "crowded", 16, 1048576, 0, 65536, 0, 0),
                ("b", "amqp-over-no-hard", 1, 8192, 0, 8192, 2, 200),
                ("b", "tiny-window", 1, 1024, 0, 1024, 0, 0),
                ("b", "tiny-crowded", 40, 40960, 0, 1024, 0, 0),
            ]
        )
    ]
    # The "fine" window as the engine logs it: 16384 bytes of credit cover 11 messages of 1024 +
    # 357 encoded bytes, each 1024 + 1068 in the address: 23012 bytes past the limit with 1.2
    # margin is over the 26214 tolerated (an audit: the windows' bytes understate it). At least
    # (16384 - 1) // 12 + 1 = 1366 bytes of credit a message.
    in_messages = ("b", "fine-by-window-bytes-only", 1, 16384, 0, 16384, 0, 0, 11, 1366)
    producers = spark.createDataFrame([*logged_no_capacity, in_messages], ADDRESS_PRODUCERS)
    daily = spark.createDataFrame([], QUEUE_DAILY)
    rows = {r.entity: r.asDict() for r in recommend_addresses(
        evidence, producers, daily, POLICY).collect()}  # fmt: skip
    names = [rule.name for rule in ARTEMIS_ADDRESS_RULES]
    assert names.index("messages dropped at the limit") < names.index(
        "CORE windows overshoot the address"
    )
    dropping = rows["dropping"]
    assert (dropping["rule"], dropping["verdict"], dropping["knob"]) == (
        "messages dropped at the limit",
        "raise",
        "max-size-bytes",
    )
    # Room for the peak and 100 dropped messages of 1024 + 1068 bytes, 20 % margin.
    assert dropping["recommended_value"] == -(-(300_000 + 100 * 2092) * 12 // 10)
    assert dropping["rationale"].startswith("raise: 100 messages dropped at max-size-bytes 262,144")
    assert "reject-threshold" not in dropping["rationale"]  # none in force
    under = rows["dropping-under-threshold"]
    assert (under["rule"], under["recommended_value"]) == (
        "messages dropped at the limit",
        dropping["recommended_value"],
    )
    assert under["rationale"].endswith(
        f"; and max-size-bytes-reject-threshold from 300,000 to "
        f"{dropping['recommended_value'] + 37856:,}, the same 37,856 bytes above it (Artemis takes "
        "none at or below the limit)"
    )
    over = rows["overshooting"]
    assert (over["rule"], over["knob"], over["current_value"]) == (
        "CORE windows overshoot the address",
        "producerWindowSize",
        65536,
    )
    # Overshoot 37012 past 262144, tolerated 26214 (10 %): the observed overshoot scaled would
    # give 65536 x 26214 / (37012 x 1.2) = 38680, but the bound (producers x window) must fit
    # too: 26214 / 1.2 = 21845 for its one producer.
    assert 65536 * 26214 * 10 // (37012 * 12) == 38680
    assert over["recommended_value"] == 21845
    assert "pass max-size-bytes 262,144 by 37,012 bytes" in over["rationale"]
    unbounded = rows["unbounded"]
    assert (unbounded["rule"], unbounded["verdict"], unbounded["knob"]) == (
        "CORE windows unbounded",
        "at_risk_of_overflow",
        "producerWindowSize",
    )
    # No overshoot seen, but -1 is no producer flow control: 21845 / 2 producers each.
    assert (unbounded["current_value"], unbounded["recommended_value"]) == (-1, 10922)
    assert unbounded["rationale"].startswith(
        "at_risk_of_overflow: producerWindowSize -1 (no producer flow control) on 1 of 2 CORE "
        "producers: BLOCK cannot hold such a producer back"
    )
    could = rows["could"]
    assert (could["rule"], could["verdict"], could["current_value"]) == (
        "CORE windows could overshoot the address",
        "at_risk_of_overflow",
        65536,
    )
    assert could["recommended_value"] == 21845 // 4
    assert "may pass max-size-bytes 262,144 by about 262,144 bytes" in could["rationale"]
    assert "the overshoot seen was 2,856" in could["rationale"]
    amqp = rows["amqp-over"]
    # Not blamed on the CORE window: the reject threshold in force bounds the AMQP credits.
    assert (amqp["rule"], amqp["verdict"], amqp["knob"]) == (
        "AMQP credits overshoot the address",
        "keep",
        "max-size-bytes-reject-threshold",
    )
    assert amqp["recommended_value"] == amqp["current_value"] == 400_000
    assert "the CORE windows (8,192 bytes in all) cannot account for it" in amqp["rationale"]
    # Without a reject threshold: the CORE windows (262144 bytes, 4 x 64 KiB) account for the
    # 67856-byte overshoot, so they are lowered; a reject threshold would not touch them (an
    # audit found the hard limit advised, its text calling the windows "their credits").
    mixed = rows["mixed-core-over"]
    assert (mixed["rule"], mixed["knob"], mixed["current_value"]) == (
        "CORE windows overshoot the address",
        "producerWindowSize",
        65536,
    )
    # One message (1024 + 1068 bytes) is the smallest window: 16 of them still pass the 26214
    # tolerated, which the text says rather than "keep it within" (an audit).
    crowded = rows["crowded"]
    assert (crowded["rule"], crowded["recommended_value"]) == (
        "CORE windows could overshoot the address",
        2092,
    )
    assert "keep it within" not in crowded["rationale"]
    assert (
        "even windows of one message (2,092 bytes, the smallest) let 16 producers pass "
        "max-size-bytes by about 33,472 bytes, over the 26,214 tolerated (10%)"
    ) in crowded["rationale"]
    assert "windows of 5,461 bytes keep it within the 26,214 tolerated" in could["rationale"]
    # Where they cannot, the AMQP credits did: a hard limit, their credits' bytes named.
    no_hard = rows["amqp-over-no-hard"]
    assert (no_hard["rule"], no_hard["knob"]) == (
        "AMQP overshoot without a hard limit",
        "max-size-bytes-reject-threshold",
    )
    assert "by 67,856 bytes (their credits allow 418,400)" in no_hard["rationale"]
    failing = rows["failing"]
    assert (failing["rule"], failing["verdict"]) == (
        "producers failed at the limit",
        "at_risk_of_overflow",
    )
    assert failing["recommended_value"] == failing["current_value"] == 262144
    assert rows["paging"]["rule"] == "paging" and rows["paging"]["verdict"] == "keep"
    rejecting = rows["rejecting"]
    assert (rejecting["knob"], rejecting["current_value"]) == (
        "max-size-bytes-reject-threshold",
        153_600,
    )
    # Two AMQP producers' 200 credits x 2092 bytes past the limit, 20 % margin.
    assert rejecting["recommended_value"] == 262144 + -(-200 * 2092 * 12 // 10)
    assert "10 AMQP messages rejected above the reject threshold 153,600" in rejecting["rationale"]
    collected = rows["collected"]
    assert (collected["rule"], collected["verdict"], collected["recommended_value"]) == (
        "overshoot by producers not in the log",
        "at_risk_of_overflow",
        262144,
    )
    assert "pass max-size-bytes 262,144 by 137,856 bytes" in collected["rationale"]
    assert (rows["fine"]["rule"], rows["fine"]["verdict"]) == ("within its limit", "keep")
    counted_in_messages = rows["fine-by-window-bytes-only"]
    assert (counted_in_messages["rule"], counted_in_messages["knob"]) == (
        "CORE windows could overshoot the address",
        "producerWindowSize",
    )
    assert (
        "may pass max-size-bytes 262,144 by about 23,012 bytes"
        in (counted_in_messages["rationale"])
    )
    # 21845 bytes of room hold 10 messages of 2092: (10 + 1) x 1366 - 1 = 15025 bytes of credit,
    # which covers (2 x 7512 - 1) // 1381 = 10 of them (flowctl_core capacity_msgs).
    assert counted_in_messages["recommended_value"] == 15025
    assert rows["fine"]["recommended_value"] == rows["fine"]["current_value"] == 262144
    # A window no larger than one message cannot shrink: no "lower" that raises it to one
    # message's 2092 bytes (an audit: 1024 -> 2092), whether the overshoot was seen or could be.
    # One producer, one noun: "1 CORE producer", "1 message" (not "1 CORE producers").
    assert rows["tiny-window"]["rationale"].startswith(
        "at_risk_of_overflow: 1 CORE producer with windows of at most 1,024 bytes"
    )
    assert rows["overshooting"]["rationale"].startswith("lower: BLOCK let 1 CORE producer with")
    for name, seen, bound in (("tiny-window", 37012, 1024), ("tiny-crowded", 0, 40960)):
        tiny = rows[name]
        assert (tiny["rule"], tiny["verdict"], tiny["knob"]) == (
            "CORE windows already at one message",
            "at_risk_of_overflow",
            "producerWindowSize",
        ), tiny
        assert tiny["recommended_value"] == tiny["current_value"] == 1024
        assert (
            f"no larger than one message (~2,092 bytes, what a send takes whatever the window); "
            f"past max-size-bytes 262,144 the overshoot seen was {seen:,} bytes and producers x "
            f"window is {bound:,}, against the 26,214 tolerated (10%)"
        ) in tiny["rationale"], tiny["rationale"]


@pytest.mark.spark
def test_the_first_rabbitmq_queue_rule_that_holds_wins(spark: Any) -> None:
    from jobs.transforms.recommend_rabbitmq import recommend_rabbitmq_queues

    settings = spark.createDataFrame(
        [("b", q, limit, 0, 0, 1) for q, limit in
         (("blocking", 0), ("growing", 0), ("limited", 500), ("slow", 0), ("drained", 0),
          ("burst", 0), ("held", 0), ("steady", 0), ("ebbing", 0))]
        # x-max-length-bytes only (the collector logs it as max_size), 200 refused at it.
        + [("b", "bytes", 0, 1_000_000, 200, 1)],
        "broker string, queue string, max_count long, max_size long, rejected_msgs long, "
        "runs long",
    )  # fmt: skip
    growth = spark.createDataFrame(
        [
            ("b", "blocking", 3000, 0, 3000, 5000.0, 0.0),
            ("b", "growing", 3000, 0, 3000, 2000.0, 0.0),
            ("b", "limited", 3000, 2500, 500, 5000.0, 0.0),
            ("b", "slow", 3000, 2990, 10, 5000.0, 0.0),
            ("b", "drained", 3000, 3000, 0, 5000.0, 0.0),
            # 1000 enqueues at one instant, none dequeued: grown, with no intake rate.
            ("b", "burst", 1000, 0, 1000, None, 0.0),
            # Every enqueue while an alarm held the publishers: no intake rate either.
            ("b", "held", 1000, 0, 1000, None, 2.0),
            # Holds what it held (50 messages, none enqueued or taken in the window).
            ("b", "steady", 0, 0, 50, None, 0.0),
            # Grew to 150,000 and ends at 132,739: not growing at its end, nor drained.
            ("b", "ebbing", 150_000, 17_261, 132_739, 5000.0, 0.0),
            ("b", "bytes", 1200, 0, 1000, 10.0, 0.0),
        ],
        "broker string, queue string, enqueued long, dequeued long, last_depth_msgs long, "
        "intake_rate_msgs_s double, intake_alarm_s double",
    )
    blocking = spark.createDataFrame(
        [("b", "blocking", 0.25, 3, "writer"), ("b", "slow", 0.1, 1, "writer")],
        "broker string, queue string, connection_blocked_s double, connection_blocks long, "
        "_connections string",
    )
    daily = spark.createDataFrame(
        [("b", q, 0.0, 0.5, peak, None) for q, peak in
         (("blocking", 3000), ("growing", 3000), ("limited", 500), ("slow", 400), ("drained", 10),
          ("burst", 1000), ("held", 1000), ("steady", 50), ("ebbing", 150_000),
          ("bytes", 1000))],
        QUEUE_DAILY,
    )  # fmt: skip
    rows = {r.entity: r.asDict() for r in recommend_rabbitmq_queues(
        settings, growth, blocking, daily, POLICY).collect()}  # fmt: skip
    assert {q: (r["rule"], r["verdict"]) for q, r in rows.items()} == {
        "blocking": ("blocks its connection and grows", "at_risk_of_overflow"),
        "growing": ("grows without bound", "at_risk_of_overflow"),
        "limited": ("length limit in force", "keep"),
        "slow": ("blocks its connection, drains", "keep"),
        "drained": ("drains", "keep"),
        "burst": ("grows, intake rate unknown", "keep"),
        "held": ("grows, intake rate unknown", "keep"),
        "steady": ("does not grow", "keep"),
        "ebbing": ("below its peak at the end", "keep"),
        # Growing at its byte limit: bounded, not "no length limit" with an x-max-length.
        "bytes": ("length limit in force", "keep"),
    }
    assert rows["bytes"]["rationale"] == (
        "keep: x-max-length-bytes 1,000,000 in force (peak 1,000, 200 rejected)"
    )
    assert (rows["bytes"]["current_value"], rows["bytes"]["recommended_value"]) == (None, None)
    assert rows["bytes"]["max_size"] == 1_000_000
    assert rows["limited"]["rationale"] == "keep: x-max-length 500 in force (peak 500, 0 rejected)"
    assert rows["drained"]["rationale"] == (
        "keep: no length limit; it peaked at 10 and ends at 0, having delivered at least what it "
        "took in (3,000 in, 3,000 out): it does not grow without bound"
    )
    assert rows["ebbing"]["rationale"] == (
        "keep: no length limit; it gained messages (150,000 in, 17,261 out) but ends at 132,739, "
        "below its peak of 150,000: not growing at the end of the window, so no limit is sized "
        "from it"
    )
    assert rows["steady"]["rationale"] == (
        "keep: no length limit; peak 50, ends at 50: it does not grow"
    )
    # Not "it does not grow" of a queue that did (an audit).
    assert rows["burst"]["rationale"] == (
        "keep: no length limit; it gained messages (peak 1,000, ends at 1,000), but the log gives "
        "no intake rate to size a limit by (no two enqueues apart in time)"
    )
    assert rows["held"]["rationale"].endswith(
        "(it took its messages only while an alarm held its publishers)"
    )
    blocking_row = rows["blocking"]
    # 5000 msgs/s x max_backlog_s 1 s.
    assert (blocking_row["knob"], blocking_row["current_value"]) == ("x-max-length", None)
    assert blocking_row["recommended_value"] == 5000
    assert blocking_row["rationale"].startswith(
        "at_risk_of_overflow: its credit flow blocked 0.9.1 connection writer for 0.25s (50% "
    )
    # 5000 is above the window's peak of 3000: the rationale says the window never reached it.
    assert blocking_row["rationale"].endswith(
        "; the window's peak of 3,000 stays under it: it bounds the growth to come, not what the "
        "window saw"
    )
    assert rows["growing"]["recommended_value"] == 2000
    assert rows["growing"]["rationale"].endswith("(overflow reject-publish)")
    assert rows["limited"]["recommended_value"] == rows["limited"]["current_value"] == 500
    assert rows["drained"]["recommended_value"] is None  # no limit, and none recommended


# -- per broker kind: the real transforms on the engine's log, validated by re-simulation --------

#: The Artemis scenarios of the tests below, each on a broker of its own, all of 2026-03-05.
ARTEMIS_BROKERS = {
    "artemis-policies": "artemis-address-full-policies",
    "artemis-telemetry": "artemis-amqp-reject-threshold",
    "artemis-jobs": "artemis-slow-fast-consumers",
}


@pytest.fixture(scope="module")
def artemis_recommendations(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, dict[str, Any]]]:
    """The recommendations (:func:`recommendations_by_broker`) of the bundled Artemis
    scenarios and of LONE_UNBOUNDED fed and prefilled, by broker then entity, in one
    computation: each alone cost a test ~15 s of Spark planning. Read-only: the tests assert
    on it."""
    scenarios = [load_scenario(name) for name in ARTEMIS_BROKERS.values()] + [
        parse_scenario(yaml.safe_load(LONE_UNBOUNDED_FED), "artemis-lone-unbounded-fed"),
        parse_scenario(yaml.safe_load(LONE_UNBOUNDED), "artemis-lone-unbounded"),
    ]
    brokers = [scenario.broker.name for scenario in scenarios]
    assert brokers == [*ARTEMIS_BROKERS, "artemis-lone-fed", "artemis-lone"]
    by_broker = recommendations_by_broker(spark, scenarios, tmp_path_factory.mktemp("artemis"))
    return {broker: _by_entity(rows) for broker, rows in by_broker.items()}


@pytest.mark.spark
@pytest.mark.slow
def test_artemis_address_knobs_are_validated_by_whatif(
    artemis_recommendations: dict[str, dict[str, dict[str, Any]]],
) -> None:
    """artemis-address-full-policies: DROP loses 2875 messages at 256 KiB (max-size-bytes raised
    to hold them: none lost in the re-run); BLOCK with one 64 KiB CORE window passes the limit by
    more than the 10 % tolerated (producerWindowSize lowered: less overshoot); PAGE pages and is
    kept; FAIL's producer stops at the first failure, so no limit is sized from it."""
    scenario = load_scenario("artemis-address-full-policies")
    rows = artemis_recommendations["artemis-policies"]
    assert {r["broker_kind"] for r in rows.values()} == {"artemis"}
    assert not any(r["knob"].startswith("qpid.") for r in rows.values())
    # The address's knob and a consumer's, each rule table's stage compiled (recommendation_rows).
    assert {"max-size-bytes", "consumerWindowSize"} <= {r["knob"] for r in rows.values()}
    drop = rows["drop-address"]
    assert (drop["entity_kind"], drop["knob"], drop["rule"]) == (
        "address",
        "max-size-bytes",
        "messages dropped at the limit",
    )
    assert drop["current_value"] == 262144 < drop["recommended_value"]
    # Its figures grouped by thousands, the count of messages as the sizes (verdict_rules.counted).
    assert drop["rationale"].startswith(
        "raise: 2,875 messages dropped at max-size-bytes 262,144 (DROP)"
    ), drop["rationale"]
    block = rows["block-address"]
    assert (block["knob"], block["verdict"], block["current_value"]) == (
        "producerWindowSize",
        "lower",
        65536,
    )
    dropping, blocking = all_validated(scenario, [drop, block])
    assert dropping["before"]["lost msgs (dropped, failed)"] == 2875
    assert dropping["after"]["lost msgs (dropped, failed)"] == 0
    assert blocking["after"]["max overshoot bytes"] < blocking["before"]["max overshoot bytes"]
    assert (rows["page-address"]["verdict"], rows["page-address"]["rule"]) == ("keep", "paging")
    assert rows["fail-address"]["rule"] == "producers failed at the limit"


@pytest.mark.spark
@pytest.mark.slow
def test_artemis_reject_threshold_is_validated_by_whatif(
    artemis_recommendations: dict[str, dict[str, dict[str, Any]]],
    recommendations_as_of_march_6: dict[str, list[dict[str, Any]]],
) -> None:
    """artemis-amqp-reject-threshold: the hard address rejects 11,594 AMQP messages at a threshold
    inside the overshoot BLOCK allows two producers' 100 credits; raised above it, the re-run
    rejects none and stays under it. The soft address has no threshold: one is set above the
    credit overshoot, which the re-run never reaches."""
    scenario = load_scenario("artemis-amqp-reject-threshold")
    rows = artemis_recommendations["artemis-telemetry"]
    hard, soft = rows["telemetry-hard"], rows["telemetry-soft"]
    assert (hard["knob"], hard["current_value"], hard["verdict"]) == (
        "max-size-bytes-reject-threshold",
        153600,
        "raise",
    )
    assert (soft["knob"], soft["current_value"], soft["verdict"]) == (
        "max-size-bytes-reject-threshold",
        None,
        "at_risk_of_overflow",
    )
    raised, set_above = all_validated(scenario, [hard, soft])
    assert raised["before"]["rejected msgs"] == 11594 and raised["after"]["rejected msgs"] == 0
    assert set_above["after"]["peak address bytes"] <= soft["recommended_value"]
    # Applied, the advice holds: the address logs the threshold in force although it now rejects
    # nothing, so the recommender sees a hard limit above the credit overshoot and keeps it
    # (without it the log read "no reject threshold", and the advice was to set one).
    # recommendations_as_of_march_6 ran the scenario with hard's change applied.
    assert knob_changes_from_recommendations([hard])[0].value == hard["recommended_value"]
    again = _by_entity(recommendations_as_of_march_6["artemis-telemetry"])["telemetry-hard"]
    assert (again["rule"], again["verdict"]) == ("AMQP credits overshoot the address", "keep")
    assert again["current_value"] == again["recommended_value"] == hard["recommended_value"]


@pytest.mark.spark
@pytest.mark.slow
def test_artemis_slow_consumer_gets_no_buffer_validated_by_whatif(
    artemis_recommendations: dict[str, dict[str, dict[str, Any]]],
) -> None:
    """artemis-slow-fast-consumers: the slow consumer on the 100 KiB-window queue holds 74 of its
    400 messages (deliveries of 1,024 + 366 B) for 14.8 s while the fast one idles (seed 003);
    consumerWindowSize 0 lets the fast one take them: the queue is processed in well under a
    second."""
    scenario = load_scenario("artemis-slow-fast-consumers")
    rows = artemis_recommendations["artemis-jobs"]
    slow = rows["slow-100k"]
    assert (slow["entity_kind"], slow["knob"], slow["unit"]) == (
        "consumer",
        "consumerWindowSize",
        "bytes",
    )
    assert (slow["rule"], slow["current_value"], slow["recommended_value"]) == (
        "slow consumer hogs its buffer",
        102400,
        0,
    )
    assert rows["fast-100k"]["rule"] != "slow consumer hogs its buffer"
    # The slow one already at 0 keeps it (starved between every two messages, as a window-0
    # consumer is, it would otherwise be "raised" into the buffer the rule above takes away).
    no_buffer = rows["slow-no-buffer"]
    assert (no_buffer["rule"], no_buffer["verdict"]) == ("slow consumer without a buffer", "keep")
    assert no_buffer["current_value"] == no_buffer["recommended_value"] == 0
    # Its rationale is the rule's: no Kung & Morris need beside a window of 0.
    for entity in ("slow-no-buffer", "slow-100k"):
        assert "needs" not in rows[entity]["rationale"], rows[entity]["rationale"]
    assert "needs" in rows["fast-no-buffer"]["rationale"]
    # The rate counts deliveries (the body + the delivery overhead the attach logs), as the
    # credit it returns does, from its first return on: 5 a second, the slow ones' 200 ms a
    # message (slow-100k read 10.0 with its first half-window return counted in the span).
    for entity in ("slow-100k", "slow-no-buffer"):
        rationale = rows[entity]["rationale"]
        rate = float(rationale.split("processes ")[1].split(" msgs/s")[0])
        assert rate == pytest.approx(5.0, abs=0.2), rationale
        # The row's rate is the one its rule quotes (slow-no-buffer's was 0.27, per attached
        # second: a review).
        assert rows[entity]["consumption_rate_msgs_s"] == pytest.approx(rate, abs=0.05)
    assert rows["fast-no-buffer"]["rule"] != "slow consumer without a buffer"
    metrics = validated(scenario, slow)
    assert metrics["before"]["queue processed by s"] > 14.5
    assert metrics["after"]["queue processed by s"] < 1
    # The unbounded pair took 200 messages each in one instant and return no credit: the log
    # does not say which is slow, so neither window is sized from those pushes (bounding the
    # fast one alone hands its share to the slow one's buffer: its queue processes fewer).
    for entity in ("fast-unbounded", "slow-unbounded"):
        row = rows[entity]
        assert (row["rule"], row["verdict"]) == (
            "unbounded window on a shared queue, pace unknown",
            "keep",
        ), row
        assert row["current_value"] == row["recommended_value"] == -1
        assert row["rationale"].startswith(
            "keep: consumerWindowSize -1 on a queue it shares with another consumer: the broker "
            "sends it every message it has without waiting for credit, so its 200 deliveries are "
            "the broker's pushes"
        ), row["rationale"]
        assert "needs" not in row["rationale"]
    bounded = KnobChange(
        "artemis", "fast-unbounded", "consumerWindowSize", -1, 87_558, "lower", "over-provisioned"
    )
    assert not run_knob_whatif(scenario, bounded).validated


LONE_UNBOUNDED = """
name: artemis-lone-unbounded
kind: workload
start: 2026-03-05T11:00:00Z
broker: {name: artemis-lone}
duration_s: 3
artemis:
  latency_us: 500
  addresses:
    - {name: jobs, prefill: {count: 400, size: 1024}}
  consumers:
    - {name: only-reader, queue: jobs, window: -1, process_us: 1000}
"""

#: LONE_UNBOUNDED's queue fed by a producer through the run instead of a prefill, on a broker
#: of its own (artemis_recommendations computes both at once).
LONE_UNBOUNDED_FED = (
    LONE_UNBOUNDED.replace(
        "prefill: {count: 400, size: 1024}}",
        "}\n  producers:\n"
        "    - {name: job-writer, address: jobs, window: 65536, size: 1024, send_cost_us: 2000}",
    )
    .replace("name: artemis-lone-unbounded\n", "name: artemis-lone-unbounded-fed\n")
    .replace("broker: {name: artemis-lone}", "broker: {name: artemis-lone-fed}")
)


@pytest.mark.spark
@pytest.mark.slow
def test_an_unbounded_consumer_alone_on_its_queue_is_sized_by_kung_and_morris(
    artemis_recommendations: dict[str, dict[str, dict[str, Any]]],
) -> None:
    """Alone on its queue, an unbounded consumer's share goes to no one else's buffer: its window
    is judged by Kung & Morris as any other. Fed through the run it never starved, with over 4x
    what it needs: lowered. Given the queue's 400 in the instant it attached, the log's last
    event, it has no attached time: kept, and recommended as it is (-1, not the credit of
    2^31 - 1 it logs), with no formula of a rate it does not have."""
    row = artemis_recommendations["artemis-lone-fed"]["only-reader"]
    assert (row["rule"], row["verdict"], row["current_value"]) == ("over-provisioned", "lower", -1)
    assert 0 < row["recommended_value"] < 2**31 - 1
    # Said as configured, not as the 2^31 - 1 bytes of credit it logs (an audit).
    assert row["rationale"].startswith(
        "lower: never starved with an unbounded window (consumerWindowSize -1), over 4x"
    ), row["rationale"]
    row = artemis_recommendations["artemis-lone"]["only-reader"]
    assert (row["rule"], row["verdict"]) == ("never attached", "keep")
    assert row["current_value"] == row["recommended_value"] == -1
    assert row["current_credit"] == row["recommended_credit"] == 2**31 - 1
    assert row["rationale"] == "keep: no attached time observed"


#: A 0.9.1 consumer with a large prefetch that takes a queue's 30 prefilled messages at once,
#: and is idle for the rest of the run (which a draining consumer of an empty queue keeps
#: logging to its end).
PREFILLED_FOR_091 = """
name: rmq-prefilled-091
kind: workload
start: 2026-03-06T10:00:00Z
broker: {name: rmq-prefilled-091}
duration_s: 2
queues:
  - {name: small-q, prefill: {count: 30, size: 1024}}
  - {name: idle-q}
connections:
  - name: c-091
    protocol: amqp-0-9-1
    latency_us: 5000
    consumers: [{name: reader-091, queue: small-q, credit: 1000}]
  - name: c-idle
    protocol: amqp-1.0
    latency_us: 1000
    consumers: [{name: idle-drain, queue: idle-q, credit: 100, drain: true, drain_poll_us: 100000}]
"""


@pytest.mark.spark
def test_a_burst_consumer_is_not_lowered_on_its_rate_per_attached_second(
    recommendations_as_of_march_6: dict[str, list[dict[str, Any]]],
) -> None:
    """30 messages in the instant it attaches, then nothing: per attached second it reads 15
    msgs/s, which needs a prefetch of 2, but 30 were ready for it at once and a prefetch of 2
    would take them 15 round trips. Kept (an audit: 1000 -> 2, which its replay received later)."""
    row = _by_entity(recommendations_as_of_march_6["rmq-prefilled-091"])["reader-091"]
    assert (row["rule"], row["verdict"], row["knob"]) == (
        "over-provisioned by a rate that counts idle time",
        "keep",
        "prefetch",
    )
    assert row["current_value"] == row["recommended_value"] == 1000
    assert (
        "which counts idle time, and 30 messages were once ready for it at once, more than that "
        "need covers: not lowered; needs "
    ) in row["rationale"], row["rationale"]


@pytest.mark.spark
@pytest.mark.slow
def test_rabbitmq_knobs_are_validated_by_whatif(
    recommendations_as_of_march_6: dict[str, list[dict[str, Any]]],
) -> None:
    """A 0.9.1 consumer gets prefetch and an AMQP 1.0 consumer link credit (never each other's),
    each raised for its round trip (the 0.9.1 one the policy's: its starvations end at each
    single ack) and receiving more in the re-run; the slow queue that grows
    and blocks its 0.9.1 connection gets x-max-length, under which the connection is blocked less.
    No RabbitMQ queue gets Qpid thresholds."""
    scenario = parse_scenario(yaml.safe_load(RABBITMQ_SMALL_CREDIT), "rabbitmq-small-credit")
    # Computed with max_backlog_s 0.2 (the fixture's policy): a limit the 0.5 s run reaches.
    rows = _by_entity(recommendations_as_of_march_6["rabbitmq-small-credit"])
    assert {r["broker_kind"] for r in rows.values()} == {"rabbitmq"}
    prefetch, credit = rows["reader-091"], rows["reader-10"]
    assert (prefetch["entity_kind"], prefetch["knob"], prefetch["current_value"]) == (
        "consumer",
        "prefetch",
        10,
    )
    assert (credit["entity_kind"], credit["knob"], credit["current_value"]) == (
        "consumer_link",
        "link credit",
        10,
    )
    for row in (prefetch, credit):
        assert row["verdict"] == "raise" and row["recommended_value"] > 10, row["rationale"]
    # Each ack frees one message of a prefetch, so its grants all come at 0: no sign of a
    # receiver refilling at empty, and 0.9.1 has no top-up point to advise (an audit: 10 -> 101
    # "topped up at half").
    assert "top up" not in prefetch["rationale"] and "at half" not in prefetch["rationale"]
    assert f"+ 1 top-up = {prefetch['recommended_value']} credits" in prefetch["rationale"]
    # reader-10 tops up below 5 already; its grants reach the sender at 0 because the round trip
    # outlasts the 5 left, restoring less than its 10: no "refills at empty" (an audit: it was
    # told to top up before the credit runs out).
    assert "came once its credit had run out" not in credit["rationale"], credit["rationale"]
    assert "top up before the credit runs out" not in credit["rationale"]
    slow = rows["slow-sink"]
    assert (slow["entity_kind"], slow["knob"], slow["rule"]) == (
        "queue",
        "x-max-length",
        "blocks its connection and grows",
    )
    assert "writer" in slow["rationale"]
    *_, limited = all_validated(scenario, [prefetch, credit, slow])
    assert limited["after"]["peak depth msgs"] <= slow["recommended_value"]
    queues = [r for r in rows.values() if r["entity_kind"] == "queue"]
    assert all(r["knob"] == "x-max-length" for r in queues)
    assert all(r["current_flow_stop_count"] is None for r in queues)


def test_the_rows_knob_changes_skip_qpid_and_kept_rows() -> None:
    rows: list[dict[str, Any]] = [
        {"entity": "q", "knob": "qpid.flow_stop_count", "current_value": 100,
         "recommended_value": 80, "broker_kind": "qpid"},
        {"entity": "a", "knob": "max-size-bytes", "current_value": 10, "recommended_value": 10,
         "broker_kind": "artemis"},
        {"entity": "r", "knob": "x-max-length", "current_value": None,
         "recommended_value": None, "broker_kind": "rabbitmq"},
        {"entity": "c", "knob": "prefetch", "current_value": 10, "recommended_value": 20,
         "broker_kind": "rabbitmq", "verdict": "raise", "rule": "starved for want of credit"},
    ]  # fmt: skip
    (change,) = knob_changes_from_recommendations(rows)
    assert (change.entity, change.knob, change.current, change.value) == ("c", "prefetch", 10, 20)


def test_rabbitmq_length_limit_is_a_reject_limit_without_flow_thresholds() -> None:
    from flowctl_core.whatif_knobs import KnobChange, with_knob

    scenario = parse_scenario(yaml.safe_load(RABBITMQ_SMALL_CREDIT), "rabbitmq-small-credit")
    change = KnobChange("rabbitmq", "slow-sink", "x-max-length", None, 300, "v", "r")
    (queue,) = [q for q in with_knob(scenario, change).queues if q.name == "slow-sink"]
    assert queue.arguments == {
        "qpid.max_count": 300,
        "qpid.policy_type": "reject",
        "qpid.flow_stop_count": 0,
        "qpid.flow_resume_count": 0,
        "qpid.flow_stop_size": 0,
        "qpid.flow_resume_size": 0,
    }


@pytest.mark.spark
def test_a_producer_window_is_never_recommended_past_a_java_int(spark: Any) -> None:
    """An audit: a 32 GiB BLOCK address with one CORE producer of window -1 was told
    producerWindowSize 2,863,311,530, which Artemis cannot take (a Java int)."""
    from jobs.transforms.recommend_artemis import recommend_addresses

    gib = 1 << 30
    address = ("b", "big", "big", 1, "BLOCK", 32 * gib, None, gib, 0, 0, 0, 0, 1, 1024, 1068)
    evidence = spark.createDataFrame([address], ADDRESS_EVIDENCE)
    producers = spark.createDataFrame(
        [("b", "big", 1, None, 1, -1, 0, 0, None, None)], ADDRESS_PRODUCERS
    )
    daily = spark.createDataFrame([], QUEUE_DAILY)
    (row,) = recommend_addresses(evidence, producers, daily, POLICY).collect()
    assert (row.knob, row.current_value) == ("producerWindowSize", -1)
    assert row.recommended_value == 2**31 - 1, row.recommended_value


@pytest.mark.spark
def test_a_prefilled_backlog_is_no_intake(make_events: Any) -> None:
    """The engine's prefill writer puts the queue's backlog on it at the run's start: 1000
    enqueues at one instant, then 11 from a publisher over 1 s. Counted as intake, the backlog
    made the rate ~1011 msgs/s and the x-max-length sized from it ~100 times too large (an
    audit); the intake is the publisher's 11 msgs/s, the counts keep every enqueue."""
    from jobs.transforms.recommend_rabbitmq import queue_growth
    from jobs.transforms.recommend_rollup import day_rollup

    start = datetime(2026, 3, 10, 14, tzinfo=UTC)
    rows = [("prefill", start, n) for n in range(1000)] + [
        ("loader", start.replace(microsecond=100_000 * n) if n < 10 else start.replace(second=1),
         1000 + n) for n in range(11)
    ]  # fmt: skip
    events = make_events(
        [
            {"broker": "b", "run_id": "r", "queue": "q", "event_type": "enqueue", "link": link,
             "ts": ts, "seq": seq, "depth_msgs": seq + 1}
            for link, ts, seq in rows
        ]
    )  # fmt: skip
    growth = queue_growth(day_rollup(events)).collect()[0].asDict()
    assert growth["intake_rate_msgs_s"] == pytest.approx(11.0)
    assert (growth["enqueued"], growth["last_depth_msgs"]) == (1011, 1011)


def test_the_intake_leaves_out_the_time_an_alarm_held_the_publishers(make_events: Any) -> None:
    """20 publishes in 2 s, a memory alarm for 3 s (a disk alarm inside it), 10 more in 1 s:
    30 publishes over 5.9 s read as 5.1 msgs/s, half the 10 msgs/s the queue takes while it
    may, and a limit of a second of intake held half a second (a review: orders-091, blocked
    3 s of 6). Its intake is over the 2.9 s no alarm held them; overlapping alarms count once."""
    from jobs.transforms.recommend_rabbitmq import alarm_spans, queue_growth
    from jobs.transforms.recommend_rollup import day_rollup

    start = datetime(2026, 3, 10, 14, tzinfo=UTC)
    at = [start + timedelta(seconds=n / 10) for n in (*range(20), *range(50, 60))]
    events = make_events(
        [
            {"broker": "b", "run_id": "r", "queue": "q", "event_type": "enqueue",
             "link": "loader", "ts": ts, "seq": seq, "depth_msgs": seq + 1}
            for seq, ts in enumerate(at)
        ]
    )  # fmt: skip
    seconds = [(2, 5), (3, 4)]  # memory, then disk inside it
    alarms = events.sparkSession.createDataFrame(
        [("b", "r", "alarm", start + timedelta(seconds=a), start + timedelta(seconds=b), None)
         for a, b in seconds],
        "broker string, run_id string, kind string, start_ts timestamp, end_ts timestamp, "
        "run_watermark_ts timestamp",
    )  # fmt: skip
    growth = queue_growth(day_rollup(events), alarm_spans(alarms)).collect()[0].asDict()
    assert growth["intake_rate_msgs_s"] == pytest.approx(30 / 2.9)
    assert growth["intake_alarm_s"] == pytest.approx(3.0)
    without = queue_growth(day_rollup(events)).collect()[0].asDict()
    assert without["intake_rate_msgs_s"] == pytest.approx(30 / 5.9)
    # Every enqueue inside an alarm: no rate, and the alarm's seconds say why (a review: the
    # row said "no two enqueues apart in time").
    held = events.sparkSession.createDataFrame(
        [("b", "r", "alarm", start - timedelta(seconds=1), start + timedelta(seconds=9), None)],
        alarms.schema,
    )
    growth = queue_growth(day_rollup(events), alarm_spans(held)).collect()[0].asDict()
    assert growth["intake_rate_msgs_s"] is None
    assert growth["intake_alarm_s"] == pytest.approx(5.9)


@pytest.mark.spark
def test_a_reject_threshold_removed_by_a_later_run_is_not_in_force(make_events: Any) -> None:
    """The engine's address detail leaves the reject threshold out when there is none (-1):
    run r1 had one (153600), run r2 after it none. The latest non-null value said r1's was
    still in force (an audit); the settings are read at the latest event that logs them."""
    from jobs.transforms.recommend_artemis import address_evidence
    from jobs.transforms.recommend_rollup import day_rollup

    def detail(threshold: int | None) -> str:
        settings = {"address": "a", "max_size_bytes": 102_400, "policy": "BLOCK"}
        return json.dumps(
            {**settings, **({} if threshold is None else {"reject_threshold": threshold})}
        )

    def events(*runs: tuple[str, int, int | None]) -> Any:
        return make_events(
            [{"broker": "b", "run_id": run, "seq": seq, "event_type": "enqueue", "queue": "a",
              "ts": datetime(2026, 3, 10, hour, tzinfo=UTC), "size_bytes": 1000,
              "depth_msgs": 1, "detail": detail(threshold)}
             for run, hour, threshold in runs for seq in range(2)]
        )  # fmt: skip

    def threshold(*runs: tuple[str, int, int | None]) -> Any:
        return address_evidence(day_rollup(events(*runs))).collect()[0]["reject_threshold"]

    assert threshold(("r1", 10, 153_600)) == 153_600
    assert threshold(("r1", 10, 153_600), ("r2", 11, None)) is None
    assert threshold(("r1", 10, None), ("r2", 11, 153_600)) == 153_600


def _whole(number: str) -> int:
    """A whole number as a rationale writes it (thousands grouped: 262,145)."""
    return int(number.replace(",", ""))

"""DESIGN §2: "Every protocol rule a scenario can trigger, it can also configure (drain, echo,
available, windows, credits, rates): what the engine models is reachable from a scenario file,
not only from Python." Each knob here is set from a scenario's YAML and its effect read from the
event log the run writes."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import yaml

from flowctl_core import EventCollector
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import ScenarioError, parse_scenario
from schemas.model import US_PER_SECOND


def _run(text: str) -> list[dict[str, Any]]:
    log = EventCollector()
    run_scenario(parse_scenario(yaml.safe_load(text)), [log], validate=True)
    return list(log.events)


def _amqp10(consumer: str = "", publisher: str = "") -> str:
    """A 1.0 connection: a consumer granting 10 credits on a queue that holds 5 messages, and a
    publisher sending batches of 5 to another queue, each with the given extra settings."""
    return f"""
name: knobs
kind: workload
duration_s: 0.1
queues: [{{name: q, prefill: {{count: 5}}}}, {{name: other}}]
connections:
  - name: c
    protocol: amqp-1.0
    publishers: [{{name: p, queue: other, batch: 5{publisher}}}]
    consumers: [{{name: r, queue: q, credit: 10, top_up_below: 0{consumer}}}]
"""


def _flows(events: list[dict[str, Any]], link: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event_type"] == "flow" and e["link"] == link]


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(event["detail"] or "{}"))


def test_a_draining_consumer_gets_its_unused_credit_drained_and_polls_again() -> None:
    events = _run(_amqp10(consumer=", drain: true, drain_poll_us: 20000"))
    # The broker's sending end logs each grant it receives (drain true) and its answer: 5
    # messages sent on the first grant of 10, the other 5 credits drained (credit 0, the
    # delivery-count advanced by 10 in all); each later grant finds the queue empty and is
    # drained whole. The consumer grants again 20 ms after each drained answer: at 0, ~20, ~40,
    # ~60 and ~80 ms of the 100 ms run.
    grants = [e for e in _flows(events, "r") if _detail(e).get("drain")]
    assert len(grants) == 5
    times = [e["ts"] for e in grants]
    assert all(later - earlier >= 20_000 for earlier, later in itertools.pairwise(times))
    delivered = [e for e in events if e["event_type"] == "transfer" and e["link"] == "r"]
    assert len(delivered) == 5
    last = [e for e in events if e["link"] == "r" and e["credit"] is not None][-1]
    assert last["credit"] == 0
    assert last["delivery_count"] == 10 * len(grants)  # every credit sent or drained


def test_without_drain_the_unused_credit_stays() -> None:
    events = _run(_amqp10())
    assert not any(json.loads(e["detail"] or "{}").get("drain") for e in _flows(events, "r"))
    last = [e for e in events if e["link"] == "r" and e["credit"] is not None][-1]
    assert last["credit"] == 5  # 10 granted, 5 delivered, the rest kept


def test_an_echo_grant_gets_a_flow_reply() -> None:
    plain = _flows(_run(_amqp10()), "r")
    echoed = _flows(_run(_amqp10(consumer=", echo: true")), "r")
    assert [_detail(e).get("echo") for e in echoed][:1] == [True]
    assert not any(_detail(e).get("echo") for e in plain)
    # One grant (top_up_below 0): the echo adds the sender's reply, after the 5 deliveries the
    # grant allowed (credit 10 - 5, nothing left available).
    assert len(echoed) == len(plain) + 1
    reply = echoed[-1]
    assert _detail(reply)["reason"] == "echo" and (reply["credit"], reply["available"]) == (5, 0)


def test_a_publisher_that_reports_nothing_advertises_zero_available() -> None:
    reporting = [e for e in _run(_amqp10()) if e["link"] == "p" and e["available"] is not None]
    silent = [
        e
        for e in _run(_amqp10(publisher=", reports_available: false"))
        if e["link"] == "p" and e["available"] is not None
    ]
    assert any(e["available"] > 0 for e in reporting)
    assert silent and {e["available"] for e in silent} == {0}


@pytest.mark.parametrize(
    "link, field",
    [
        ("consumers: [{name: r, queue: q, drain: true}]", "consumers.0.drain"),
        ("consumers: [{name: r, queue: q, echo: true}]", "consumers.0.echo"),
        ("publishers: [{name: p, queue: q, reports_available: false}]", "publishers.0"),
        (
            "consumers: [{name: r, queue: q, credit_changes: [{after_s: 1, credit: 0}]}]",
            "consumers.0.credit_changes",
        ),
        # Connection settings and a delivery-count no 0.9.1 model reads: were silently ignored.
        ("max_frame_size: 4096", "max_frame_size"),
        ("client_incoming_window: 10", "client_incoming_window"),
        (
            "publishers: [{name: p, queue: q, initial_delivery_count: 4294967295}]",
            "publishers.0.initial_delivery_count",
        ),
        # A top-up point no 0.9.1 model reads (it was accepted and ignored), a small one too.
        ("consumers: [{name: r, queue: q, top_up_below: 100}]", "consumers.0.top_up_below"),
        ("consumers: [{name: r, queue: q, credit: 50, top_up_below: 25}]", "consumers.0.top_up"),
    ],
)
def test_amqp10_link_knobs_are_refused_on_0_9_1(link: str, field: str) -> None:
    text = f"""
name: knobs
kind: workload
duration_s: 0.1
queues: [{{name: q}}]
connections: [{{name: c, protocol: amqp-0-9-1, {link}}}]
"""
    with pytest.raises(ScenarioError, match=rf"{field}.*AMQP 0\.9\.1 has no such knob"):
        parse_scenario(yaml.safe_load(text))


@pytest.mark.parametrize("protocol", ["amqp-1.0", "amqp-0-9-1"])
def test_a_consumer_without_a_top_up_point_gets_the_default_on_either_protocol(
    protocol: str,
) -> None:
    """Not given, the top-up point is a default, not a setting of the user's: a 0.9.1 consumer
    with a small prefetch is not refused for it, and a 1.0 consumer granting less than the
    default point tops up at half its credit."""
    text = f"""
name: knobs
kind: workload
duration_s: 0.1
queues: [{{name: q}}]
connections:
  - {{name: c, protocol: {protocol}, consumers: [{{name: r, queue: q, credit: 50}},
      {{name: s, queue: q}}]}}
"""
    small, default = parse_scenario(yaml.safe_load(text)).connections[0].consumers
    assert (small.top_up_below, default.top_up_below) == (25, 100)
    assert "top_up_below" not in small.model_fields_set | default.model_fields_set


def test_a_credit_change_to_0_stops_the_queue_sending_and_a_later_one_resumes_it() -> None:
    """Seed 004: "Grant a link-credit of 0 (causing the queue to stop sending)", and "Granting
    link credit is not cumulative": set from a scenario (found missing by an audit: only Python
    could grant 0 or change the credit at run time). Half a second in, the consumer sets its
    credit to 0: the transfers already sent arrive, none after; a second later it grants 5 and
    tops up to 5 from then on (its top_up_below of 10 being above that credit)."""
    text = """
name: knobs
kind: workload
duration_s: 2
queues: [{name: q}]
connections:
  - name: c
    protocol: amqp-1.0
    publishers: [{name: p, queue: q, size: 100, batch: 4}]
    consumers:
      - name: r
        queue: q
        credit: 20
        top_up_below: 10
        credit_changes: [{after_s: 0.5, credit: 0}, {after_s: 1.5, credit: 5}]
"""
    events = [e for e in _run(text) if e["link"] == "r"]
    attached = events[0]["ts"]

    def transfers(from_s: float, to_s: float) -> int:
        window = (attached + from_s * US_PER_SECOND, attached + to_s * US_PER_SECOND)
        return sum(
            e["event_type"] == "transfer" and window[0] <= e["ts"] < window[1] for e in events
        )

    assert transfers(0, 0.5) > 1000 and transfers(1.5, 2) > 1000
    assert transfers(0.5, 0.51) <= 20  # in flight when the credit went to 0
    assert transfers(0.51, 1.5) == 0
    # The receiver's flows log the credit it holds once they are out: the first after 0.5 s
    # is its grant of 0; none after 1.5 s holds more than the 5 it tops up to.
    grants = [
        (e["ts"], e["credit"])
        for e in events
        if e["event_type"] == "flow" and _detail(e).get("origin") == "receiver"
    ]
    assert next(credit for ts, credit in grants if ts >= attached + 0.5 * US_PER_SECOND) == 0
    assert max(credit for ts, credit in grants if ts >= attached + 1.5 * US_PER_SECOND) == 5


def test_credit_changes_out_of_order_are_refused() -> None:
    text = _amqp10(consumer=", credit_changes: [{after_s: 2, credit: 1}, {after_s: 1, credit: 3}]")
    with pytest.raises(ScenarioError, match=r"credit_changes.*time order"):
        parse_scenario(yaml.safe_load(text))


def test_the_artemis_memory_overheads_are_set_from_the_scenario() -> None:
    text = """
name: overhead
kind: workload
duration_s: 0.01
artemis:
  core_message_overhead_bytes: 100
  amqp_message_overhead_bytes: 7
  addresses: [{name: a, max_size_bytes: -1}]
  producers:
    - {name: core, address: a, size: 1000, count: 1}
    - {name: amqp, address: a, protocol: amqp, size: 1000, count: 1, start_s: 0.005}
"""
    enqueues = [e for e in _run(text) if e["event_type"] == "enqueue"]
    sizes = [json.loads(e["detail"])["address_size"] for e in enqueues]
    assert sizes == [1_100, 1_100 + 1_007]  # body + 100 (CORE), then + body + 7 (AMQP)


def test_a_connection_opened_during_an_alarm_starts_blocked_from_a_scenario() -> None:
    """Connections had no start time, so each was open before any alarm: a 0.9.1 publishing
    connection blocked as it opens, and a 1.0 session begun with its window closed, were
    reachable from Python only (an audit; DESIGN §2: what the engine models is reachable from a
    scenario file). Opened at 0.5 s into a memory alarm of 0.2-1.0 s, both publish nothing
    until it clears; a consumer-only connection opened then consumes (only publishing
    connections are blocked)."""
    text = """
name: late-connections
kind: workload
duration_s: 1.5
queues: [{name: q91}, {name: q10}, {name: backlog, prefill: {count: 50, size: 100}}]
connections:
  - {name: c91, protocol: amqp-0-9-1, start_s: 0.5, publishers: [{name: p91, queue: q91}]}
  - {name: c10, protocol: amqp-1.0, start_s: 0.5, publishers: [{name: p10, queue: q10}]}
  - {name: reader, protocol: amqp-0-9-1, start_s: 0.5,
     consumers: [{name: r, queue: backlog, credit: 10}]}
alarms: [{resource: memory, raise_s: 0.2, clear_s: 1.0}]
"""
    events = _run(text)
    start = min(e["ts"] for e in events)

    def at_s(e: dict[str, Any]) -> float:
        return (e["ts"] - start) / US_PER_SECOND

    blocked = [e for e in events if e["event_type"] == "connection_blocked"]
    assert [(e["connection"], at_s(e)) for e in blocked] == [("c91", 0.5)]
    closed = [e for e in events if e["event_type"] == "session_window" and e["connection"] == "c10"]
    assert at_s(closed[0]) == 0.5 and json.loads(closed[0]["detail"])["begun_during_alarm"]
    enqueued = [
        at_s(e) for e in events if e["event_type"] == "enqueue" and e["queue"] in ("q91", "q10")
    ]
    assert enqueued and min(enqueued) >= 1.0
    delivered = [at_s(e) for e in events if e["event_type"] == "transfer" and e["link"] == "r"]
    assert len(delivered) == 50 and min(delivered) < 1.0


def test_a_connection_cannot_open_at_or_after_the_runs_end() -> None:
    text = """
name: late
kind: workload
duration_s: 1
queues: [{name: q}]
connections: [{name: c, protocol: amqp-1.0, start_s: 1, publishers: [{name: p, queue: q}]}]
"""
    with pytest.raises(
        ScenarioError, match=r"connections\.0\.start_s: .*at or after the run's end"
    ):
        parse_scenario(yaml.safe_load(text))


def test_the_brokers_counters_can_start_near_the_wrap_from_a_scenario() -> None:
    """A consumer link's delivery-count and the broker session's transfer-ids started at 0, so
    their RFC-1982 wrap (seed 004) needed 2**32 deliveries to reach from a scenario (an audit).
    RabbitMQ 4.0 and 4.1 start them at 2**32 - 5 and 2**32 - 4: set so, 20 deliveries cross the
    wrap, every one received: the delivery-count after each transfer goes 4294967292 ..
    4294967295, then 0 .. 15 (the session's transfer-ids wrap too, under its serial checks)."""
    text = """
name: near-the-wrap
kind: workload
duration_s: 0.5
rabbitmq: {initial_delivery_count: 4294967291, initial_outgoing_id: 4294967292}
queues: [{name: q, prefill: {count: 20, size: 100}}]
connections:
  - {name: c, protocol: amqp-1.0, consumers: [{name: r, queue: q, credit: 8, top_up_below: 4}]}
"""
    counts = [
        e["delivery_count"]
        for e in _run(text)
        if e["event_type"] == "transfer" and e["link"] == "r"
    ]
    assert counts == [*range(4294967292, 2**32), *range(0, 16)]

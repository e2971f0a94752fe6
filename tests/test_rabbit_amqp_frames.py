"""The RabbitMQ 4.0 AMQP 1.0 cases' reading of frames and grants, without a broker
(conformance/rabbit_amqp.py, conformance/engine.py): the figures tests/realbrokers compares."""

from __future__ import annotations

from conformance import engine
from conformance.rabbit_amqp import Frame, PublishRun, credit_left_at_grants, grants, parse_frame

# Lines as python-qpid-proton 0.40's frame tracer gives them on RabbitMQ 4.0.5.
BEGIN = (
    "FRAME: 0 <- @begin(17) [remote-channel=0x0, next-outgoing-id=0xfffffffc, "
    "incoming-window=0x190, outgoing-window=0xffffffff, handle-max=0xff]"
)
GRANT = (
    "FRAME: 0 <- @flow(19) [next-incoming-id=0x55, incoming-window=0x13b, "
    "next-outgoing-id=0xfffffffc, outgoing-window=0xffffffff, handle=0x0, delivery-count=0x55, "
    "link-credit=0xaa]"
)
WINDOW = "FRAME: 0 <- @flow(19) [next-incoming-id=0xc8, incoming-window=0x190]"
END = (
    'FRAME: 0 <- @end(23) [error=@error(29) [condition=:"amqp:session:window-violation", '
    'description="incoming window violation (tolerated excess tranfers: 400)"]]'
)


def test_a_trace_line_becomes_the_frame_it_shows_in_numbers() -> None:
    begin = parse_frame(BEGIN, 0.5)
    assert begin is not None and begin.received and begin.performative == "begin"
    assert begin.number("incoming-window") == 400
    assert begin.number("next-outgoing-id") == 2**32 - 4
    grant = parse_frame(GRANT, 1.0)
    assert grant is not None
    assert (grant.number("delivery-count"), grant.number("link-credit")) == (85, 170)
    sent = parse_frame(GRANT.replace("<-", "->"), 1.0)
    assert sent is not None and not sent.received
    end = parse_frame(END, 2.0)
    assert end is not None and "window-violation" in end.text
    assert parse_frame("[0x1]:  -> SASL", 0.0) is None
    assert parse_frame("FRAME:  -> AMQP", 0.0) is None


def test_link_flows_and_window_flows_are_told_apart() -> None:
    frames = [parse_frame(line, at) for at, line in enumerate((BEGIN, GRANT, WINDOW))]
    run = PublishRun(frames=[f for f in frames if isinstance(f, Frame)])
    assert [f.number("link-credit") for f in run.link_flows()] == [170]
    assert [f.number("next-incoming-id") for f in run.window_flows()] == [200]
    assert grants(run) == [(85, 170)]


def test_the_credit_left_at_a_grant_is_the_last_limit_minus_the_brokers_count() -> None:
    # Seed 002: 170 at attach, 170 again once 85 are left; a queue that lags: the next one late.
    assert credit_left_at_grants([(0, 170), (85, 170), (170, 170)]) == [85, 85]
    assert credit_left_at_grants([(0, 170), (85, 170), (255, 170)]) == [85, 0]
    assert credit_left_at_grants([(0, 170)]) == []


def test_the_engine_stops_granting_at_170_unconfirmed_as_seed_002_says() -> None:
    """A queue that confirms nothing in the run: 170 at attach, 170 more at 85 (85 unconfirmed),
    none at 170; 255 sent. The real broker's figures in tests/realbrokers are the same."""
    events = engine.run_rabbit_scenario(
        engine.amqp10_publisher_scenario(5_000_000, seconds=0.5, frame_cost_us=100)
    )
    assert engine.broker_grants(events) == [(0, 170), (85, 170)]
    assert engine.transfers_before(events, 0.5) == 255


def test_the_engines_session_window_closes_for_an_alarm_and_opens_at_its_clear() -> None:
    events = engine.run_rabbit_scenario(
        engine.amqp10_publisher_scenario(20, seconds=0.2, frame_cost_us=100, alarm=(0.05, 0.1))
    )
    windows = engine.session_windows(events)
    reasons = [(reason, window) for _, _, window, reason in windows]
    assert ("alarm", 0) in reasons and ("alarm_cleared", 400) in reasons
    refreshes = [nid for _, nid, _, reason in windows if reason == "reopened"]
    assert refreshes[:2] == [200, 400]
    assert all(credit == 170 for _, credit in engine.broker_grants(events))


def test_the_engine_on_rabbitmq_4_0s_counts_drains_across_the_wrap() -> None:
    """A drained grant of 120 with 25 ready, on 4.0's first delivery-count 2**32 - 5: 25 sent,
    then the sender's reply moves the count past the unused credit, to 115 (the real 4.0's
    figures in tests/realbrokers); a plain grant of 10 with 100 ready sends 10 and no more."""
    drained = engine.run_rabbit_scenario(engine.amqp10_consumer_scenario(25, 120, drain=True))
    attached = [e for e in drained if e["event_type"] == "link_attached"]
    assert [e["delivery_count"] for e in attached] == [2**32 - 5]
    replies = [
        (e["delivery_count"], e["credit"])
        for e in drained
        if e["event_type"] == "flow" and '"origin": "sender"' in e["detail"]
    ]
    assert replies[0] == (115, 0)
    assert sum(e["event_type"] == "transfer" for e in drained) == 25
    granted = engine.run_rabbit_scenario(engine.amqp10_consumer_scenario(100, 10, drain=False))
    assert sum(e["event_type"] == "transfer" for e in granted) == 10

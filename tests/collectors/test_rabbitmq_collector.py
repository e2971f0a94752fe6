"""The RabbitMQ collector on logs written in a real RabbitMQ 3.10's own lines (alarm set and
cleared, start, stop) and on management-API samples built by hand: alarms as the engine writes
them, blocked connections (alarm, credit flow, gone), queue samples with their limits, and the
node's state kept across a restart of the collector and closed by a stop or a crash."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collectors.base import (
    REASON_BROKER_RESTARTED,
    REASON_BROKER_STOPPED,
    SamplerRefused,
    http_refusal,
)
from collectors.rabbitmq import ManagementReader, ManagementSample, RabbitMQCollector
from collectors.rabbitmq_log import (
    ALARM_CLEARED,
    ALARM_SET,
    CONNECTION_CLOSING,
    STARTING,
    STOPPED,
    STOPPING,
    parse_line,
)
from collectors.session import CollectorStateError
from tests.collectors.session_setup import CollectorSetup, committed_rows

NODE = "rabbit@localhost"


def alarm(ts: str, resource: str = "memory", what: str = "set") -> str:
    text = f"{ts}+00:00 [warning] <0.320.0> {resource} resource limit alarm {what} on node {NODE}"
    return text + (".\n" if what == "set" else "\n")


def banner(ts: str) -> str:
    text = "*** Publishers will be blocked until this alarm clears ***"
    return f"{ts}+00:00 [warning] <0.320.0> {text}\n"


def cluster_cleared(ts: str) -> str:
    return (
        f"{ts}+00:00 [warning] <0.320.0> memory resource limit alarm cleared across the cluster\n"
    )


def starting(ts: str) -> str:
    return f"{ts}+00:00 [info] <0.223.0>  Starting RabbitMQ 3.10.8 on Erlang 25.2.3 [jit]\n"


def stopped(ts: str) -> str:
    return f"{ts}+00:00 [info] <0.743.0> Successfully stopped RabbitMQ and its dependencies\n"


def asked_to_stop(ts: str) -> str:
    return f"{ts}+00:00 [info] <0.1334.0> RabbitMQ is asked to stop...\n"


def other(ts: str) -> str:
    return f"{ts}+00:00 [info] <0.706.0> accepting AMQP connection <0.900.0>\n"


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class FakeManagement(ManagementReader):
    def __init__(self, samples: list[ManagementSample | Exception]) -> None:
        super().__init__("http://127.0.0.1:1", "u", "p")
        self.samples = samples

    def read(self) -> ManagementSample:
        sample = self.samples.pop(0)
        if isinstance(sample, Exception):
            raise sample
        return sample


Setup = CollectorSetup[RabbitMQCollector]


def _refused(code: int) -> SamplerRefused:
    """The refusal the management API's answer ``code`` raises, as http_json makes it."""
    phrase = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests"}
    return http_refusal("the management API", "http://127.0.0.1:1/api", code, phrase[code])


def _rabbitmq(**options: Any) -> RabbitMQCollector:
    return RabbitMQCollector(broker="rabbit-1", **options)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return CollectorSetup(tmp_path, "rabbit@localhost.log", _rabbitmq)


def test_the_lines_of_rabbitmq_3_10() -> None:
    set_ = parse_line(alarm("2026-11-27 22:17:58.054471"), None)
    assert set_ is not None
    assert (set_.kind, set_.resource, set_.node) == (ALARM_SET, "memory", NODE)
    assert set_.ts == _ts("2026-11-27 22:17:58.054471")
    cleared = parse_line(alarm("2026-11-27 22:18:16.111958", "disk", "cleared"), None)
    assert cleared is not None and (cleared.kind, cleared.resource) == (ALARM_CLEARED, "disk")
    start = parse_line(starting("2026-11-27 22:17:55.214486"), None)
    stop = parse_line(stopped("2026-11-27 22:18:28.509277"), None)
    assert start is not None and stop is not None and (start.kind, stop.kind) == (STARTING, STOPPED)
    asked = parse_line(asked_to_stop("2026-11-27 22:18:23.490131"), None)
    assert asked is not None and asked.kind == STOPPING
    banner_line = parse_line(banner("2026-11-27 22:17:58.054471"), None)
    assert banner_line is not None and banner_line.kind is None
    across = parse_line(cluster_cleared("2026-11-27 22:18:01.368579"), None)
    assert across is not None and across.kind is None  # the node's own line counts, once
    assert parse_line("  supervisor: {local,rabbit_sup}", None) is None
    shifted = parse_line("2026-11-27 23:17:58.5+01:00 [info] <0.1.0> x", None)
    assert shifted is not None and shifted.ts == _ts("2026-11-27 22:17:58.5")


def test_an_alarm_as_the_engine_writes_it(setup: Setup) -> None:
    setup.write(
        alarm("2026-11-27 22:17:58.054471"),
        banner("2026-11-27 22:17:58.054471"),
        alarm("2026-11-27 22:18:01.368550", what="cleared"),
        cluster_cleared("2026-11-27 22:18:01.368579"),
    )
    setup.collect()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows] == [
        ("alarm_raised", _ts("2026-11-27 22:17:58.054471")),
        ("alarm_cleared", _ts("2026-11-27 22:18:01.368550")),
    ]
    assert json.loads(rows[0]["detail"]) == {
        "resource": "memory",
        "node": NODE,
        "origin": "rabbitmq-log",
    }


def test_a_stop_and_a_crash_clear_the_alarms(setup: Setup) -> None:
    setup.write(
        alarm("2026-11-27 10:00:00.000000"),
        stopped("2026-11-27 10:05:00.000000"),
        starting("2026-11-27 10:06:00.000000"),
        alarm("2026-11-27 10:07:00.000000", "disk"),
        other("2026-11-27 10:08:00.000000"),
        starting("2026-11-27 11:00:00.000000"),  # no stop line: killed
    )
    setup.collect()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"]) for r in rows] == [
        ("alarm_raised", _ts("2026-11-27 10:00:00")),
        ("alarm_cleared", _ts("2026-11-27 10:05:00")),
        ("alarm_raised", _ts("2026-11-27 10:07:00")),
        ("alarm_cleared", _ts("2026-11-27 10:08:00")),
    ]
    reasons = [json.loads(r["detail"]).get("reason") for r in rows]
    assert reasons == [None, REASON_BROKER_STOPPED, None, REASON_BROKER_RESTARTED]
    assert [json.loads(r["detail"]).get("last_seen") for r in rows] == [
        None,
        None,
        None,
        "log_line",
    ]


def test_an_alarm_set_before_a_restart_of_the_collector_clears_after_it(setup: Setup) -> None:
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    setup.collect()
    setup.write(alarm("2026-11-27 10:00:03.000000"))  # said again: not a second alarm
    setup.write(alarm("2026-11-27 10:00:09.000000", what="cleared"))
    setup.collect()
    assert [(r["seq"], r["event_type"]) for r in setup.rows()] == [
        (0, "alarm_raised"),
        (1, "alarm_cleared"),
    ]


#: A damage of the node's state in a state file (the node's alarm set), and what is said of it.
DAMAGES: dict[str, tuple[dict[str, Any], str]] = {
    "alarms that are a number": ({"alarms": 5}, "entities.alarms: 5 is not an object"),
    "blocked that is a string": ({"blocked": "x"}, 'entities.blocked: "x" is not an object'),
    "stopping that is a string": ({"stopping": "no"}, 'entities.stopping: "no" is not true'),
    "an alarm that is a string": (
        {"alarms": {"memory@rabbit@localhost": "yes"}},
        'entities.alarms.memory@rabbit@localhost: "yes" is not true',
    ),
    "an alarm without its node": (
        {"alarms": {"memory": True}},
        "entities.alarms.memory: not an alarm's resource@node",
    ),
    "a close that is no time": (
        {"closed": {"c1": "yesterday"}},
        'entities.closed.c1: "yesterday" is not a time',
    ),
    "an unknown field": ({"addresses": {}}, "entities.addresses: not a field of RabbitMQ's"),
}


@pytest.mark.parametrize("new_session", [False, True])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_node_state_is_one_line_naming_the_file_and_field(
    setup: Setup, damage: str, new_session: bool
) -> None:
    """The Artemis collector's state is checked field by field (b81d20b), the RabbitMQ one's
    was not: ``"alarms": 5`` crashed (TypeError), ``"blocked": "x"`` too (ValueError), and
    ``"stopping": "no"`` was read as true (a review)."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    setup.collect()
    state = json.loads(setup.state.read_text())
    spoil, said = DAMAGES[damage]
    state["entities"].update(spoil)
    setup.state.write_text(json.dumps(state))
    with pytest.raises(CollectorStateError) as caught:
        setup.collect(new_session=new_session)  # a new session carries it over
    message = str(caught.value)
    assert message.startswith(f"{setup.state}: field {said}"), message
    assert "\n" not in message


def test_a_node_state_of_an_earlier_release_goes_on(setup: Setup) -> None:
    """A field left out (one added since) takes its default."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    setup.collect()
    state = json.loads(setup.state.read_text())
    state["entities"] = {"alarms": state["entities"]["alarms"]}
    setup.state.write_text(json.dumps(state))
    assert setup.collector().held_now() == ["memory@rabbit@localhost alarm"]


def _connections(**states: str) -> dict[str, dict[str, Any]]:
    return {name: {"state": state, "protocol": "AMQP 0-9-1"} for name, state in states.items()}


def test_connections_held_by_an_alarm(setup: Setup) -> None:
    samples = [
        ManagementSample(connections=_connections(pub="running", con="running")),
        ManagementSample(connections=_connections(pub="blocked", con="blocking")),
        ManagementSample(connections=_connections(pub="blocked", con="blocking")),
        ManagementSample(connections=_connections(pub="running", con="running", slow="flow")),
        ManagementSample(connections=_connections(pub="running", con="running", slow="blocked")),
        ManagementSample(connections=_connections(pub="running", con="running")),
    ]
    samples[0].connections["stomp"] = {"state": "blocked", "protocol": "STOMP 1.2"}
    times = iter(datetime(2026, 11, 27, 10, 0, n, tzinfo=UTC) for n in range(0, 60, 10))
    now = [datetime(2026, 11, 27, 10, tzinfo=UTC)]
    setup.write(alarm("2026-11-27 09:59:00.000000"))  # the node's memory alarm, set
    collector = setup.collector(
        management=FakeManagement(samples), sample_interval_s=10.0, clock=lambda: now[0]
    )
    collector.read_log()
    for _ in range(6):
        now[0] = next(times)
        collector.sample()
    collector.flush()
    rows = [r for r in setup.rows() if r["event_type"].startswith("connection_")]
    assert [
        (r["ts"].second, r["event_type"], r["connection"], json.loads(r["detail"])["reason"])
        for r in rows
    ] == [
        (10, "connection_blocked", "pub", "alarm"),
        (30, "connection_unblocked", "pub", "alarm"),
        # credit flow ("flow") is not a block a sample can time; "blocking" holds no publish
        (40, "connection_blocked", "slow", "alarm"),
        (50, "connection_unblocked", "slow", "closed"),  # gone from the sample
    ]
    assert json.loads(rows[-1]["detail"])["held_by"] == "alarm"
    assert {r["protocol"] for r in rows} == {"amqp-0-9-1"}
    detail = json.loads(rows[0]["detail"])
    assert (detail["origin"], detail["sample_interval_ms"]) == ("rabbitmq-management", 10_000)


def test_an_alarm_of_another_node_holds_this_nodes_publishers(setup: Setup) -> None:
    """RabbitMQ blocks publishers on every node while any node has an alarm: a connection of
    this node sampled blocked under another node's alarm was dropped as stale (an audit). The
    other node's alarm gets no row here (its own collector writes it); its clearing unblocks."""
    other_node = "rabbit@other"
    setup.write(alarm("2026-11-27 10:00:00.000000").replace(NODE, other_node))
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    samples = [ManagementSample(connections=_connections(pub="blocked"))]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    collector.read_log()
    collector.sample()
    setup.write(alarm("2026-11-27 10:05:00.000000", what="cleared").replace(NODE, other_node))
    collector.read_log()
    collector.flush()
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S")) for r in setup.rows()] == [
        ("connection_blocked", "10:00:30"),
        ("connection_unblocked", "10:05:00"),
    ]


def test_a_block_ends_when_the_node_is_asked_to_stop(setup: Setup) -> None:
    """A node asked to stop closes its connections at once and logs its stop line seconds later
    (5 s on a real 3.10: a blocked publisher's connection was closed at 21:23:55.045, the stop
    line at 21:24:00.059, and the block was held to the stop line, 9.3 s for 4.3). The block
    ends at the asked-to-stop line; a sample that lags still showing it blocked does not block
    it again; the alarm ends at the stop line."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    samples: list[ManagementSample | Exception] = [
        ManagementSample(connections=_connections(pub="blocked")),
        ManagementSample(connections=_connections(pub="blocked")),  # the API's last statistics
    ]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    collector.read_log()
    collector.sample()
    setup.write(asked_to_stop("2026-11-27 10:01:00.000000"))
    collector.read_log()
    now[0] = datetime(2026, 11, 27, 10, 1, 0, 500_000, tzinfo=UTC)
    collector.sample()
    setup.write(stopped("2026-11-27 10:01:05.000000"))
    collector.read_log()
    collector.flush()
    rows = setup.rows()
    assert [
        (r["event_type"], r["ts"].strftime("%H:%M:%S"), json.loads(r["detail"]).get("reason"))
        for r in rows
    ] == [
        ("alarm_raised", "10:00:00", None),
        ("connection_blocked", "10:00:30", "alarm"),
        ("connection_unblocked", "10:01:00", REASON_BROKER_STOPPED),
        ("alarm_cleared", "10:01:05", REASON_BROKER_STOPPED),
    ]
    assert json.loads(rows[2]["detail"])["origin"] == "rabbitmq-log"
    assert not collector.node.stopping  # stopped: the node's next samples count again


def test_a_stopping_node_is_remembered_across_a_restart_of_the_collector(setup: Setup) -> None:
    setup.write(alarm("2026-11-27 10:00:00.000000"), asked_to_stop("2026-11-27 10:01:00.000000"))
    setup.collect()
    now = [datetime(2026, 11, 27, 10, 1, 1, tzinfo=UTC)]
    samples: list[ManagementSample | Exception] = [
        ManagementSample(connections=_connections(pub="blocked"))
    ]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    assert collector.node.stopping
    collector.sample()
    setup.write(starting("2026-11-27 10:02:00.000000"))
    collector.read_log()
    collector.flush()
    assert not collector.node.stopping
    assert [r["event_type"] for r in setup.rows()] == ["alarm_raised", "alarm_cleared"]


def test_a_crash_after_a_later_sample_ends_there_and_says_so(setup: Setup) -> None:
    """The alarm set at 10:00 (the log's last line), the publisher sampled blocked at 10:00:30,
    then a boot with no stop line: the node went down after the sample, so the alarm and the
    block end at the sample's time (rows never go back in time) and detail.last_seen says it is
    a sample's, not the log's (the walk-through's D7)."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    samples = [ManagementSample(connections=_connections(pub="blocked"))]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    collector.read_log()
    collector.sample()
    setup.write(starting("2026-11-27 11:00:00.000000"))  # no stop line: killed
    collector.read_log()
    collector.flush()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S")) for r in rows] == [
        ("alarm_raised", "10:00:00"),
        ("connection_blocked", "10:00:30"),
        ("alarm_cleared", "10:00:30"),
        ("connection_unblocked", "10:00:30"),
    ]
    details = [json.loads(r["detail"]) for r in rows[2:]]
    assert [(d["reason"], d["last_seen"]) for d in details] == [
        (REASON_BROKER_RESTARTED, "sample"),
        (REASON_BROKER_RESTARTED, "sample"),
    ]


def _blocked_then_cleared(setup: Setup, after_clear: str, sampled_at: datetime) -> None:
    """The memory alarm set at 10:00:00, the publisher found blocked at 10:00:30, the alarm
    cleared at 10:05:00, then the publisher found ``after_clear`` at ``sampled_at``."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    samples = [
        ManagementSample(connections=_connections(pub="blocked")),
        ManagementSample(connections=_connections(pub=after_clear)),
    ]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    collector.read_log()
    collector.sample()
    setup.write(alarm("2026-11-27 10:05:00.000000", what="cleared"))
    now[0] = sampled_at
    collector.read_log()
    collector.sample()
    collector.flush()


def test_the_alarm_clearing_unblocks_its_connections_at_its_line(setup: Setup) -> None:
    _blocked_then_cleared(setup, "running", datetime(2026, 11, 27, 10, 5, 30, tzinfo=UTC))
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S")) for r in setup.rows()] == [
        ("alarm_raised", "10:00:00"),
        ("connection_blocked", "10:00:30"),
        ("alarm_cleared", "10:05:00"),
        ("connection_unblocked", "10:05:00"),  # the clear line's time, not the next sample's
    ]


def test_a_block_the_api_still_shows_after_the_clear_line_is_stale(setup: Setup) -> None:
    """The API's statistics lag the log: blocked in a sample taken after the alarm cleared."""
    _blocked_then_cleared(setup, "blocked", datetime(2026, 11, 27, 10, 5, 2, tzinfo=UTC))
    assert [r["event_type"] for r in setup.rows()] == [
        "alarm_raised",
        "connection_blocked",
        "alarm_cleared",
        "connection_unblocked",
    ]


def test_another_nodes_alarms_and_entities_are_its_own_collectors(tmp_path: Path) -> None:
    """rabbit@a.log holds node b's alarm lines too, and the API answers for the cluster."""
    log = tmp_path / "rabbit@a.log"
    log.write_text(
        "2026-11-27 10:00:00+00:00 [warning] <0.1.0> memory resource limit alarm set on node "
        "rabbit@b.\n"
        "2026-11-27 10:00:01+00:00 [warning] <0.1.0> memory resource limit alarm set on node "
        "rabbit@a.\n"
        "2026-11-27 10:00:02+00:00 [warning] <0.1.0> memory resource limit alarm cleared for "
        "dead node rabbit@b\n"
    )
    sample = ManagementSample(
        queues={
            "qa": {"messages": 1, "message_bytes": 10, "arguments": {}, "type": "classic",
                   "vhost": "/", "node": "rabbit@a"},
            "qb": {"messages": 2, "message_bytes": 20, "arguments": {}, "type": "classic",
                   "vhost": "/", "node": "rabbit@b"},
        },
        connections={
            "ca": {"state": "blocked", "protocol": "AMQP 0-9-1", "node": "rabbit@a"},
            "cb": {"state": "blocked", "protocol": "AMQP 0-9-1", "node": "rabbit@b"},
        },
    )  # fmt: skip
    collector = RabbitMQCollector(
        log_path=log,
        raw_dir=tmp_path / "raw",
        state_path=tmp_path / "state.json",
        broker="cluster-a",
        management=FakeManagement([sample]),
        clock=lambda: datetime(2026, 11, 27, 10, 0, 5, tzinfo=UTC),
    )
    assert collector.node_name == "rabbit@a"
    collector.run(stop=lambda: False, once=True)
    rows = committed_rows(tmp_path / "raw")
    assert [(r["event_type"], r["queue"] or r["connection"]) for r in rows] == [
        ("alarm_raised", None),
        ("connection_blocked", "ca"),
        ("queue_declared", "qa"),
    ]
    assert json.loads(rows[0]["detail"])["node"] == "rabbit@a"


def test_a_crash_ends_at_the_line_before_the_boot(setup: Setup) -> None:
    boot = "[notice] <0.44.0> Logging: configured log handlers are now ACTIVE"
    setup.write(
        alarm("2026-11-27 10:00:00.000000"),
        other("2026-11-27 10:01:00.000000"),
        f"2026-11-27 10:40:00.000000+00:00 {boot}\n",  # 40 minutes down, then the boot
        "2026-11-27 10:40:00.100000+00:00 [info] <0.222.0> ra: starting system quorum_queues\n",
        starting("2026-11-27 10:40:01.000000"),
    )
    setup.collect()
    rows = setup.rows()
    assert [(r["event_type"], r["ts"].strftime("%H:%M")) for r in rows] == [
        ("alarm_raised", "10:00"),
        ("alarm_cleared", "10:01"),
    ]


@pytest.mark.parametrize(
    ("status", "content_type", "body", "refusal"),
    [
        (401, None, b"", "HTTP 401"),
        # An audit's case: a wrong API path answered 200 with a console's HTML page, read as
        # "does not answer" and waited for forever. It is a wrong address, as a 401 is.
        (
            200,
            "text/html; charset=utf-8",
            b"<html><body>RabbitMQ Management</body></html>",
            r"HTTP 200 answered text/html, not JSON \(the",
        ),
    ],
)
def test_a_management_api_that_refuses_stops_the_collector(
    tmp_path: Path, status: int, content_type: str | None, body: bytes, refusal: str
) -> None:
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reader = ManagementReader(f"http://127.0.0.1:{server.server_port}", "guest", "wrong")
        collector = RabbitMQCollector(
            log_path=tmp_path / "rabbit@a.log",
            raw_dir=tmp_path / "raw",
            state_path=tmp_path / "state.json",
            broker="r",
            management=reader,
        )
        with pytest.raises(SamplerRefused, match=refusal):
            collector.run(stop=lambda: False)
    finally:
        server.shutdown()


def _serve(answers: dict[str, Any]) -> Any:
    """A management API on a loopback port answering ``answers[path]`` (401 for others)."""
    import http.server
    import threading

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path not in answers:
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps(answers[path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_management_api_read_a_policy_limit_is_the_queues_limit() -> None:
    server = _serve(
        {
            "/api/queues": [
                {"name": "orders", "vhost": "/", "node": "rabbit@a", "messages": 5,
                 "message_bytes": 50, "arguments": {}, "type": "quorum",
                 "effective_policy_definition": {"max-length": 100, "overflow": "reject-publish"}},
                {"name": "audit", "vhost": "shop", "node": "rabbit@a", "messages": 0,
                 "message_bytes": 0, "arguments": {"x-max-length": 7}, "type": "classic",
                 "effective_policy_definition": {"max-length": 100}},
                {"name": "a/b", "vhost": "/", "node": "rabbit@a", "messages": 0,
                 "message_bytes": 0, "arguments": {}, "type": "classic",
                 "effective_policy_definition": {}},
                # Half its statistics: the agent's timers collect the depth and the policy in
                # force apart, and the policy may be the limit (not sampled, as without both).
                {"name": "half", "vhost": "/", "node": "rabbit@a", "messages": 3,
                 "message_bytes": 30, "arguments": {}, "type": "classic"},
                {"name": "theirs", "vhost": "/", "node": "rabbit@b", "arguments": {},
                 "type": "classic"},
            ],
            "/api/connections": [
                {"name": "127.0.0.1:5 -> 127.0.0.1:5672", "node": "rabbit@a", "state": "blocked",
                 "protocol": "AMQP 0-9-1", "user_provided_name": "publisher"},
            ],
        }
    )  # fmt: skip
    try:
        sample = ManagementReader(f"http://127.0.0.1:{server.server_port}", "u", "p").read()
    finally:
        server.shutdown()
    assert sample.queues["orders"]["arguments"] == {
        "x-max-length": 100,
        "x-overflow": "reject-publish",
    }
    assert sample.queues["shop/audit"]["arguments"] == {"x-max-length": 7}  # its own argument
    assert sorted(sample.queues) == ["a%2Fb", "orders", "shop/audit"]
    assert sample.without_statistics == {"half": "rabbit@a", "theirs": "rabbit@b"}
    (connection,) = sample.connections.values()
    assert (connection["state"], connection["client_name"]) == ("blocked", "publisher")


#: What a real 3.10 just started lists (its API answering, its first statistics not yet in: 5 s
#: for a classic queue, 10 s for a quorum queue), then once they are, as an experiment saw it:
#: a policy's limit in force, known only with the statistics.
LISTED_BEFORE_STATISTICS = [
    {"arguments": {}, "name": "pol", "node": "rabbit@localhost", "type": "classic", "vhost": "/"},
    {"arguments": {"x-queue-type": "quorum"}, "name": "qq", "type": "quorum", "vhost": "/"},
    {"arguments": {"x-max-length": 500}, "name": "kept", "node": "rabbit@localhost",
     "type": "classic", "vhost": "/"},
]  # fmt: skip
LISTED_WITH_STATISTICS = [
    {"arguments": {}, "effective_policy_definition": {"max-length": 300}, "message_bytes": 15,
     "messages": 5, "name": "pol", "node": "rabbit@localhost", "policy": "lim",
     "type": "classic", "vhost": "/"},
    {"arguments": {"x-queue-type": "quorum"}, "name": "qq", "type": "quorum", "vhost": "/"},
    {"arguments": {"x-max-length": 500}, "effective_policy_definition": {},
     "message_bytes": 300, "messages": 100, "name": "kept", "node": "rabbit@localhost",
     "policy": None, "type": "classic", "vhost": "/"},
]  # fmt: skip


def test_a_queue_listed_without_its_statistics_is_not_sampled(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """An experiment on a real 3.10: for seconds after each start its API listed every queue
    without its statistics, its depth and the policy in force unknown; sampled, a queue whose
    limit a policy sets was written with none (``max_count`` 0), a wrong row after every
    restart. Such a queue is not sampled until the API has its statistics, and that is said
    once a run (a node whose statistics are disabled never has them)."""
    # Another node's queue (the API answers for the cluster) is neither sampled nor named.
    theirs = {
        "arguments": {},
        "name": "theirs",
        "node": "rabbit@b",
        "type": "classic",
        "vhost": "/",
    }
    answers: dict[str, Any] = {
        "/api/queues": [*LISTED_BEFORE_STATISTICS, theirs],
        "/api/connections": [],
    }
    server = _serve(answers)
    now = [datetime(2026, 11, 27, 10, 0, 10, tzinfo=UTC)]
    try:
        setup.write(starting("2026-11-27 10:00:00.000000"))
        reader = ManagementReader(f"http://127.0.0.1:{server.server_port}", "u", "p")
        collector = setup.collector(management=reader, sample_interval_s=0.0, clock=lambda: now[0])
        collector.read_log()
        with caplog.at_level(logging.INFO, logger="flowctl.collect"):
            assert collector.sample()  # the API answers: the node is up
            collector.flush()
            assert setup.rows() == []
            answers["/api/queues"] = LISTED_WITH_STATISTICS
            now[0] = datetime(2026, 11, 27, 10, 0, 20, tzinfo=UTC)
            collector.sample()
            collector.flush()
            answers["/api/queues"] = LISTED_BEFORE_STATISTICS  # the node restarted
            now[0] = datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)
            collector.sample()
            collector.flush()
        collector.close()
    finally:
        server.shutdown()
    rows = [(r["queue"], r["ts"], r["max_count"], r["depth_msgs"]) for r in setup.rows()]
    assert rows == [
        ("kept", _ts("2026-11-27 10:00:20"), 500, 100),
        ("pol", _ts("2026-11-27 10:00:20"), 300, 5),
    ]
    said = [r.getMessage() for r in caplog.records if "without their statistics" in r.getMessage()]
    assert len(said) == 1, said
    assert "lists 3 queue(s) without their statistics (kept, pol, qq): not sampled" in said[0]


def test_one_name_is_one_queue_whatever_its_vhost() -> None:
    """Queue ``b`` of vhost ``a`` and a queue named ``a/b`` in the default vhost are two
    queues: their names in the event log differ (``/`` and ``%`` inside a part encoded)."""
    from collectors.rabbitmq import queue_name

    assert queue_name("a", "b") == "a/b"
    assert queue_name("/", "a/b") == "a%2Fb"
    assert queue_name("/", "orders") == "orders"
    assert queue_name("a/x", "b%c") == "a%2Fx/b%25c"
    assert queue_name("/", "a%2Fb") == "a%252Fb"  # an encoded-looking name stays its own


def test_a_blocked_connection_that_is_gone_is_unblocked(setup: Setup) -> None:
    samples = [
        ManagementSample(connections=_connections(pub="blocked")),
        ManagementSample(connections={}),
    ]
    setup.write(alarm("2026-11-27 09:59:00.000000"))
    collector = setup.collector(management=FakeManagement(samples))
    collector.read_log()
    collector.sample()
    collector.sample()
    collector.flush()
    rows = setup.rows()[1:]  # after the alarm
    assert [r["event_type"] for r in rows] == ["connection_blocked", "connection_unblocked"]
    assert json.loads(rows[1]["detail"])["reason"] == "closed"


def closing(ts: str, connection: str, client: str = "") -> str:
    """The node's line as it closes a connection (RabbitMQ 3.10's words; its reason follows on
    the next line)."""
    named = f"{connection} - {client}" if client else connection
    text = f"closing AMQP connection <0.837.0> ({named}, vhost: '/', user: 'guest'):"
    return f"{ts}+00:00 [warning] <0.837.0> {text}\n"


PUBLISHER = "127.0.0.1:36690 -> 127.0.0.1:5672"


@pytest.mark.parametrize(
    ("connection", "client"),
    [
        (PUBLISHER, ""),
        (PUBLISHER, "orders, east - 2"),  # a client's name holds what it likes
        ("[::1]:36690 -> [::1]:5672", "app"),
    ],
)
def test_the_line_of_a_connection_closing_names_it_as_the_api_does(
    connection: str, client: str
) -> None:
    line = parse_line(closing("2026-12-06 23:52:05.526563", connection, client), None)
    assert line is not None
    assert (line.kind, line.connection) == (CONNECTION_CLOSING, connection)
    assert line.ts == _ts("2026-12-06 23:52:05.526563")


@pytest.mark.parametrize(
    "named",
    [
        PUBLISHER,  # RabbitMQ 3.10: a socket error, missed heartbeats
        f"{PUBLISHER} - orders, east - 2",
        f"{PUBLISHER}, duration: '41s'",  # RabbitMQ 4.x
    ],
)
def test_a_connection_closed_for_its_socket_names_no_vhost_and_is_read(named: str) -> None:
    """A blocked publisher whose host vanished is closed at a failed heartbeat, and the node's
    line then gives no vhost (it was not read before: the block ended at the next sample)."""
    text = (
        "2026-12-07 00:13:05.742569+00:00 [error] <0.795.0> closing AMQP connection "
        f"<0.795.0> ({named}):"
    )
    line = parse_line(text, None)
    assert line is not None and (line.kind, line.connection) == (CONNECTION_CLOSING, PUBLISHER)


@pytest.mark.parametrize(
    "text",
    [
        # RabbitMQ 4.x's clean close: no pid.
        f"closing AMQP connection ({PUBLISHER} - app, vhost: '/', user: 'guest', duration: '41s')",
        # A single-line formatter (log.file.formatter.single_line): the reason after ":".
        f"closing AMQP connection <0.795.0> ({PUBLISHER}): missed heartbeats from client, "
        "timeout: 2s",
    ],
)
def test_the_other_forms_of_a_close_line_are_read(text: str) -> None:
    line = parse_line(f"2026-12-07 00:13:05.742569+00:00 [info] <0.795.0> {text}", None)
    assert line is not None and (line.kind, line.connection) == (CONNECTION_CLOSING, PUBLISHER)


def test_the_closes_remembered_are_bounded(setup: Setup) -> None:
    """Closes of connections no sample saw blocked are remembered only while an alarm is set
    and a sampler may lag behind them, for at most CLOSED_KEPT: a busy node closes many during
    a long alarm, and each remembered one was copied into every checkpoint (a review: 8,000
    closes took 11.5 s to read, 1,000 took 0.8 s)."""
    other = "127.0.0.1:{} -> 127.0.0.1:5672"
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    log_only = setup.collector()
    setup.write(closing("2026-11-27 10:00:01.000000", other.format(1)))
    log_only.read_log()
    assert log_only.node.closed == {}  # no sampler: nothing lags behind the log
    log_only.close()
    sampled = setup.collector(management=FakeManagement([]))
    setup.write(
        closing("2026-11-27 10:00:02.000000", other.format(2)),
        closing("2026-11-27 10:11:00.000000", other.format(3)),
    )
    sampled.read_log()
    assert set(sampled.node.closed) == {other.format(3)}  # the other one, 10 min 58 s before
    setup.write(alarm("2026-11-27 10:12:00.000000", what="cleared"))
    sampled.read_log()
    assert sampled.node.closed == {}  # no sample is read as blocked now


def test_an_error_of_the_connection_closes_it_and_a_channels_does_not() -> None:
    """``rabbitmqctl close_connection`` on a blocked publisher (RabbitMQ 3.10's lines): an
    error on channel 0 closes the connection; a channel's error closes only the channel."""
    forced = (
        "2026-12-07 00:13:05.742569+00:00 [error] <0.795.0> Error on AMQP connection <0.795.0> "
        f"({PUBLISHER} - forced, vhost: '/', user: 'guest', state: blocked), channel 0:"
    )
    line = parse_line(forced, None)
    assert line is not None and (line.kind, line.connection) == (CONNECTION_CLOSING, PUBLISHER)
    channel = (
        "2026-12-07 00:13:05.742569+00:00 [error] <0.795.0> Channel error on connection "
        f"<0.795.0> ({PUBLISHER}, vhost: '/', user: 'guest'), channel 1:"
    )
    line = parse_line(channel, None)
    assert line is not None and line.kind is None
    refused = (
        "2026-12-07 00:13:05.742569+00:00 [error] <0.795.0> Error on AMQP connection <0.795.0> "
        f"({PUBLISHER}, state: starting):"
    )  # a login refused: never blocked, and its line names no vhost
    line = parse_line(refused, None)
    assert line is not None and line.kind is None


def _sampled_blocked(
    setup: Setup, samples: list[ManagementSample | Exception]
) -> tuple[RabbitMQCollector, list[datetime]]:
    """A collector over the node's memory alarm (set at 10:00:00) that has taken the first of
    ``samples`` at 10:00:30; ``now``, its clock, to move on."""
    setup.write(alarm("2026-11-27 10:00:00.000000"))
    now = [datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC)]
    collector = setup.collector(management=FakeManagement(samples), clock=lambda: now[0])
    collector.read_log()
    collector.sample()
    return collector, now


def _publisher_rows_sampled_at(
    setup: Setup, collector: RabbitMQCollector, now: list[datetime], times: list[str]
) -> list[dict[str, Any]]:
    """The publisher's rows once ``collector`` has read its log and sampled at each of
    ``times`` (HH:MM:SS on 2026-11-27) and committed."""
    collector.read_log()
    for at in times:
        now[0] = datetime.fromisoformat(f"2026-11-27T{at}+00:00")
        collector.sample()
    collector.flush()
    return [r for r in setup.rows() if r["connection"] == PUBLISHER]


def test_a_blocked_connection_the_node_closes_ends_at_its_line(setup: Setup) -> None:
    """A blocked publisher that drops its socket is closed by the node when it notices (its
    ``closing AMQP connection`` line); the block ended at the next sample, up to
    --sample-interval (30 s by default) later. It ends at the line, and the API's statistics,
    which lag and still show it blocked, do not block it again; once the API no longer lists
    it, its name (its client's port) may be a new connection's, sampled as any other."""
    both = ManagementSample(connections=_connections(**{PUBLISHER: "blocked", "other": "blocked"}))
    other = ManagementSample(connections=_connections(other="blocked"))
    collector, now = _sampled_blocked(setup, [both, both, other, both])
    setup.write(
        closing("2026-11-27 10:00:41.500000", PUBLISHER, "orders"),
        closing("2026-11-27 10:00:42.000000", "127.0.0.1:1 -> 127.0.0.1:5672"),  # not blocked
    )
    rows = _publisher_rows_sampled_at(setup, collector, now, ["10:00:45", "10:00:50", "10:00:55"])
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S.%f")) for r in rows] == [
        ("connection_blocked", "10:00:30.000000"),
        ("connection_unblocked", "10:00:41.500000"),
        ("connection_blocked", "10:00:55.000000"),  # a new connection on the same port
    ]
    assert json.loads(rows[1]["detail"]) == {
        "reason": "closed",
        "held_by": "alarm",
        "origin": "rabbitmq-log",
    }
    assert [r["event_type"] for r in setup.rows() if r["connection"] == "other"] == [
        "connection_blocked"
    ]


def test_a_name_listed_past_the_linger_of_a_close_is_a_new_connection(setup: Setup) -> None:
    """An operator's close waits 30 s for the client's answer, and the API lists the connection,
    blocked, until then (35.6 s on a real 3.10): those samples are not read. A name still
    listed blocked a minute after its close is a new connection on the same client port,
    blocked as any other (it was ignored for as long as it was listed)."""
    blocked = ManagementSample(connections=_connections(**{PUBLISHER: "blocked"}))
    collector, now = _sampled_blocked(setup, [blocked] * 4)
    setup.write(closing("2026-11-27 10:00:40.000000", PUBLISHER))
    rows = _publisher_rows_sampled_at(setup, collector, now, ["10:01:10", "10:01:39", "10:01:41"])
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S")) for r in rows] == [
        ("connection_blocked", "10:00:30"),
        ("connection_unblocked", "10:00:40"),
        ("connection_blocked", "10:01:41"),
    ]
    assert collector.node.closed == {}


def test_a_connection_closed_before_a_sample_saw_it_blocked_is_not_blocked_after(
    setup: Setup,
) -> None:
    """A publisher blocked by the alarm and closed within one sample interval: the samples after
    its close line, which lag, list it blocked; it was blocked from then until the API dropped
    it (a review)."""
    blocked = ManagementSample(connections=_connections(**{PUBLISHER: "blocked"}))
    collector, now = _sampled_blocked(setup, [ManagementSample(), blocked, blocked, blocked])
    setup.write(closing("2026-11-27 10:00:44.000000", PUBLISHER))
    rows = _publisher_rows_sampled_at(setup, collector, now, ["10:00:45", "10:01:00", "10:01:15"])
    assert rows == []
    assert collector.node.blocked == {}


def _connected_at(when: str, state: str = "blocked") -> ManagementSample:
    """The publisher listed in ``state``, opened at ``when`` (HH:MM:SS.ffffff on 2026-11-27)."""
    opened = datetime.fromisoformat(f"2026-11-27T{when}+00:00")
    connections = _connections(**{PUBLISHER: state})
    connections[PUBLISHER]["connected_at"] = int(opened.timestamp() * 1000)
    return ManagementSample(connections=connections)


def test_when_the_api_says_when_a_connection_opened_the_closed_one_is_told_from_a_new_one(
    setup: Setup,
) -> None:
    """With ``connected_at`` a sample tells the connection the log closed (opened before the
    close line) from a new one on the same client port (opened after it), whatever the time
    since the close: the API may list the closed one past a minute (its statistics interval
    raised), and a new one can be blocked seconds after."""
    old, new = _connected_at("09:59:00.000000"), _connected_at("10:00:41.000000")
    collector, now = _sampled_blocked(setup, [old, old, new])
    setup.write(closing("2026-11-27 10:00:40.000000", PUBLISHER))
    rows = _publisher_rows_sampled_at(setup, collector, now, ["10:02:30", "10:02:40"])
    assert [(r["event_type"], r["ts"].strftime("%H:%M:%S")) for r in rows] == [
        ("connection_blocked", "10:00:30"),
        ("connection_unblocked", "10:00:40"),
        ("connection_blocked", "10:02:40"),  # the new connection
    ]
    assert collector.node.closed == {}


def test_a_new_session_starts_with_what_the_last_one_left_open(setup: Setup) -> None:
    """--new-session while the node's alarm was set and a connection blocked: the new run knew
    neither, and their ends at the clear line were lone ``alarm_cleared`` /
    ``connection_unblocked`` rows the pipeline ignores (a review). Its first rows open them
    again at the old run's watermark (its last row, the sample), as the Artemis collector's
    do; the closes the old run remembered are kept (the next test)."""
    blocked = ManagementSample(connections=_connections(**{PUBLISHER: "blocked"}))
    first, _ = _sampled_blocked(setup, [blocked])
    setup.write(closing("2026-11-27 10:00:40.000000", "127.0.0.1:1 -> 127.0.0.1:5672"))
    first.read_log()
    first.flush()
    first.close()
    assert first.node.closed != {}
    setup.write(alarm("2026-11-27 10:45:00.000000", what="cleared"))
    second = setup.collector(
        new_session=True, clock=lambda: datetime(2026, 11, 27, 10, 50, tzinfo=UTC)
    )
    assert second.node.closed == first.node.closed != {}
    assert second.node.blocked == {PUBLISHER: "alarm"}
    second.run(stop=lambda: False, once=True)
    new_run = [
        (r["seq"], r["event_type"], r["connection"], r["ts"], json.loads(r["detail"]))
        for r in setup.rows()
        if r["run_id"] == second.state.run_id
    ]
    watermark = _ts("2026-11-27 10:00:30")
    log, sampled = {"origin": "rabbitmq-log"}, {"origin": "rabbitmq-management"}
    memory = {"resource": "memory", "node": NODE}
    assert new_run == [
        (0, "alarm_raised", None, watermark, {**memory, **log, "reason": "carried_over"}),
        (
            1,
            "connection_blocked",
            PUBLISHER,
            watermark,
            {**sampled, "reason": "carried_over", "held_by": "alarm", "sample_interval_ms": 30_000},
        ),
        (2, "alarm_cleared", None, _ts("2026-11-27 10:45:00"), {**memory, **log}),
        (
            3,
            "connection_unblocked",
            PUBLISHER,
            _ts("2026-11-27 10:45:00"),
            {**log, "reason": "alarm"},
        ),
    ]
    assert second.held_now() == []


def _closed_then_started_again(setup: Setup, *, new_session: bool) -> RabbitMQCollector:
    """A connection sampled blocked, then closed by the log at 10:00:41.5; the collector stopped
    and started again at 10:00:45 (on a new session or not), its API still listing it blocked."""
    blocked = ManagementSample(connections=_connections(**{PUBLISHER: "blocked"}))
    collector, now = _sampled_blocked(setup, [blocked])
    setup.write(closing("2026-11-27 10:00:41.500000", PUBLISHER))
    collector.read_log()
    collector.flush()
    collector.close()
    now[0] = datetime(2026, 11, 27, 10, 0, 45, tzinfo=UTC)
    return setup.collector(
        new_session=new_session, management=FakeManagement([blocked]), clock=lambda: now[0]
    )


def test_a_connection_closed_by_the_log_is_remembered_across_a_restart(setup: Setup) -> None:
    again = _closed_then_started_again(setup, new_session=False)
    assert again.node.closed == {PUBLISHER: "2026-11-27T10:00:41.500000+00:00"}
    again.sample()
    again.flush()
    assert [r["event_type"] for r in setup.rows()] == [
        "alarm_raised",
        "connection_blocked",
        "connection_unblocked",
    ]


def test_a_connection_closed_by_the_log_is_remembered_by_a_new_session(setup: Setup) -> None:
    """The closes were forgotten by --new-session: its first sample, which still listed a
    connection the log had closed seconds before as "blocked" (the API lags), opened a block in
    the new run that no line would end until the API dropped it (a review)."""
    second = _closed_then_started_again(setup, new_session=True)
    second.sample()
    second.flush()
    new_run = [r["event_type"] for r in setup.rows() if r["run_id"] == second.state.run_id]
    assert new_run == ["alarm_raised"]  # the alarm carried over; no block of the closed one
    assert second.node.blocked == {}


def test_a_queue_sample_with_its_limits(setup: Setup) -> None:
    queues = {
        "orders": {
            "messages": 15_200,
            "message_bytes": 1_520_000,
            "arguments": {"x-max-length": 20_000, "x-overflow": "reject-publish"},
            "type": "classic",
            "vhost": "/",
        },
        "shop/audit": {
            "messages": 3,
            "message_bytes": 30,
            "arguments": {},
            "type": "quorum",
            "vhost": "shop",
        },
    }
    collector = setup.collector(management=FakeManagement([ManagementSample(queues=queues)]))
    collector.sample()
    collector.flush()
    orders, audit = setup.rows()
    assert (orders["queue"], orders["depth_msgs"], orders["depth_bytes"]) == (
        "orders",
        15_200,
        1_520_000,
    )
    assert (orders["max_count"], orders["max_size"], orders["flow_stopped"]) == (20_000, 0, False)
    assert json.loads(orders["detail"])["policy"] == "reject"
    assert audit["queue"] == "shop/audit" and "policy" not in json.loads(audit["detail"])


def test_a_refusal_after_an_answer_waits_and_the_log_is_followed(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A 404 after an answer is a node restarting its web server, a 401 a password being
    changed, a 429 a proxy: sampling waits and goes on once the API answers again. A 401
    stopped the whole collector, its log tail included (an audit)."""
    answered = ManagementSample(connections=_connections(pub="running"))
    refusals = [_refused(code) for code in (404, 401, 429)]
    collector = setup.collector(
        management=FakeManagement([answered, refusals[0], answered, *refusals[1:], answered])
    )
    assert collector.sample() is True
    assert collector.sample() is False  # its web server not up yet: sampling waits
    assert collector.sample() is True
    with caplog.at_level(logging.INFO, logger="flowctl.collect"):
        assert [collector.sample(), collector.sample()] == [False, False]
        setup.write(alarm("2026-11-27 11:00:00.000000"))
        collector.read_log()  # the log is still followed
        assert collector.sample() is True
    said = [r.getMessage() for r in caplog.records]
    # Once when it stops answering (two refusals), once when it answers again; with the likely
    # cause of its code, not the configuration hint of a refusal from the start.
    waits = [line for line in said if "HTTP 401" in line]
    assert waits == [
        "the management API http://127.0.0.1:1 refuses (HTTP 401 Unauthorized) after answering "
        "(the user or the password changed?): sampling waits; the log is still followed"
    ], said
    assert sum("HTTP 429" in line for line in said) == 0
    again = [line for line in said if "answers again" in line]
    assert len(again) == 1 and again[0].endswith(" s: sampling goes on"), said


def test_a_server_error_is_said_as_an_answer_with_its_code(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A 5xx is the API answering that it cannot (a node still starting its statistics): said
    with its code, and sampling waits."""
    import urllib.error

    failing = urllib.error.HTTPError("http://127.0.0.1:1/api", 503, "Service Unavailable", {}, None)  # type: ignore[arg-type]
    collector = setup.collector(management=FakeManagement([failing]))
    with caplog.at_level(logging.INFO, logger="flowctl.collect"):
        assert collector.sample() is False
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "answers with an error (HTTP 503 Service Unavailable): sampling waits" in line
        for line in said
    ), said


def test_a_404_from_the_start_is_a_wrong_address_once_it_lasts(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong path answers 404 for good: the collector stops with it, once it has refused for
    FIRST_404_GRACE (a node starting answers one 404 as its port opens: below)."""
    from collectors.base import FIRST_404_GRACE

    now = [datetime(2026, 11, 27, 10, 0, tzinfo=UTC)]
    refusal = _refused(404)
    collector = setup.collector(management=FakeManagement([refusal] * 3), clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="flowctl.collect"):
        assert collector.sample() is False
        now[0] += FIRST_404_GRACE - timedelta(seconds=1)
        assert collector.sample() is False
        now[0] += timedelta(seconds=1)
        with pytest.raises(SamplerRefused, match="404"):
            collector.sample()
    said = [r.getMessage() for r in caplog.records]
    assert said == [  # the wait said once, not at every refusal
        "the management API http://127.0.0.1:1 refuses (HTTP 404 Not Found) before any answer: "
        "a node starting, or a wrong address? Sampling waits; a 404 still there 20 s from now "
        "(at the first sample after that) stops the collector"
    ]


def test_a_404s_grace_starts_again_after_another_failure(setup: Setup) -> None:
    """The grace is of 404s in a row: a node that answered a 404 as it started, then stopped
    (no answer for minutes) and answers a 404 as it starts again has a new grace; it stopped
    the collector at once (helper-114's review)."""
    import urllib.error

    now = [datetime(2026, 11, 27, 10, 0, tzinfo=UTC)]
    silent = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    answers: list[ManagementSample | Exception] = [_refused(404), silent, _refused(404)]
    answered = ManagementSample(connections=_connections(pub="running"))
    collector = setup.collector(
        management=FakeManagement([*answers, answered]), clock=lambda: now[0]
    )
    assert collector.sample() is False
    now[0] += timedelta(minutes=1)
    assert collector.sample() is False  # no answer
    now[0] += timedelta(minutes=2)
    assert collector.sample() is False  # a 404 again: its own grace
    assert collector.sample() is True


def test_a_starting_nodes_404_then_its_answer_goes_on(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A real RabbitMQ 3.10 answered one 404 as its port opened in 2 of 20 starts: a collector
    started beside it stopped with a configuration error. It waits, and samples once the node
    answers."""
    answered = ManagementSample(connections=_connections(pub="running"))
    refusal = _refused(404)
    collector = setup.collector(management=FakeManagement([refusal, answered]))
    with caplog.at_level(logging.INFO, logger="flowctl.collect"):
        assert collector.sample() is False
        assert collector.sample() is True
    said = [r.getMessage() for r in caplog.records]
    # It never answered before: "answers", not "answers again".
    assert len(said) == 2 and said[1].endswith(" answers after 0 s: sampling starts"), said


@pytest.mark.parametrize("code", [401, 403])
def test_any_other_refusal_from_the_start_stops_the_collector_at_once(
    setup: Setup, code: int
) -> None:
    """A wrong user or password is said at once: no node answers 401 while it starts."""
    refusal = _refused(code)
    collector = setup.collector(management=FakeManagement([refusal]))
    with pytest.raises(SamplerRefused, match=str(code)):
        collector.sample()


def test_a_once_run_takes_a_404_from_the_start_for_a_wrong_address(tmp_path: Path) -> None:
    """A --once run waits for nothing: its one sample's 404 is the answer."""
    collector = RabbitMQCollector(
        log_path=tmp_path / "rabbit@a.log",
        raw_dir=tmp_path / "raw",
        state_path=tmp_path / "state.json",
        broker="r",
        management=FakeManagement([_refused(404)]),
    )
    with pytest.raises(SamplerRefused, match="404"):
        collector.run(stop=lambda: True, once=True)


def test_a_length_limit_set_by_a_policy_and_an_argument_is_the_smaller() -> None:
    """RabbitMQ applies the smaller of a policy's max-length and the queue's argument (and the
    argument's overflow): an audit saw the argument's 10000 reported where the policy's 100 was
    in force, and the queue-length advice judged the wrong limit."""
    from collectors.rabbitmq import queue_arguments

    policy = {"max-length": 100, "max-length-bytes": 5_000_000, "overflow": "drop-head"}
    arguments = {
        "x-max-length": 10_000,
        "x-max-length-bytes": 1_000,
        "x-overflow": "reject-publish",
    }
    assert queue_arguments(policy, arguments) == {
        "x-max-length": 100,
        "x-max-length-bytes": 1_000,
        "x-overflow": "reject-publish",
    }
    assert queue_arguments(policy, {}) == {
        "x-max-length": 100,
        "x-max-length-bytes": 5_000_000,
        "x-overflow": "drop-head",
    }
    assert queue_arguments({}, {"x-max-length": 7, "x-queue-type": "quorum"}) == {
        "x-max-length": 7,
        "x-queue-type": "quorum",
    }


def test_stamps_without_an_offset_in_the_hour_lived_twice(setup: Setup) -> None:
    """Europe/Paris, 25 October 2026: 02:00-03:00 local is lived at 00:00Z and again at 01:00Z.
    A log format without offsets stamped an alarm set at 02:50 (00:50Z) and cleared at 02:10 of
    the second pass (01:10Z): both were read as the first, the clearing held at the setting's
    time, and a 20-minute alarm lasted 0 s (an audit; the Artemis reader had this already)."""
    from zoneinfo import ZoneInfo

    def naive(ts: str, what: str) -> str:
        return f"{ts} [warning] <0.320.0> memory resource limit alarm {what} on node {NODE}\n"

    setup.write(
        naive("2026-10-25 02:50:00.000000", "set"),
        naive("2026-10-25 02:10:00.000000", "cleared"),
        naive("2026-10-25 03:05:00.000000", "set"),  # 02:05Z: no longer ambiguous
    )
    setup.collect(log_zone=ZoneInfo("Europe/Paris"))
    assert [(r["event_type"], r["ts"]) for r in setup.rows()] == [
        ("alarm_raised", _ts("2026-10-25 00:50")),
        ("alarm_cleared", _ts("2026-10-25 01:10")),
        ("alarm_raised", _ts("2026-10-25 02:05")),
    ]


def test_a_refusal_and_a_silence_are_said_in_plain_words() -> None:
    """The console said "refuses (Jolokia http://...: HTTP 403 Forbidden (the user, ...?))" after
    the API's name and address, and "does not answer (<urlopen error [Errno 111] Connection
    refused>)" (a review): the reason alone, in the system's words."""
    import http.server
    import threading
    import urllib.error
    import urllib.request

    from collectors.base import http_json, unanswered_reason

    codes = [403, 503]

    class Answering(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(codes.pop(0))

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/api"
    try:
        with pytest.raises(SamplerRefused) as refused:
            http_json(urllib.request.Request(url), 5, "the management API")
        # A server error is an answer: its code is said (it read "Service Unavailable" after
        # "does not answer": a review).
        with pytest.raises(urllib.error.HTTPError) as failing:
            http_json(urllib.request.Request(url), 5, "the management API")
        assert unanswered_reason(failing.value) == "HTTP 503 Service Unavailable"
    finally:
        server.shutdown()
        server.server_close()
    reason = "HTTP 403 Forbidden: the user, the password, or the API's address?"
    assert str(refused.value) == f"the management API {url}: {reason}"
    assert refused.value.reason == reason
    assert refused.value.status == "HTTP 403 Forbidden"
    with pytest.raises(OSError) as silent:
        http_json(urllib.request.Request(url), 5, "the management API")
    assert unanswered_reason(silent.value) == "Connection refused"
    assert unanswered_reason(TimeoutError()) == "timed out"

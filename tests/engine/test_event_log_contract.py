"""The event-log contract of DESIGN.md §3 (and the Qpid flow rules of §2), checked on every event
of every bundled scenario.

Each scenario runs once (streamed through :class:`ContractChecker`, no events kept in memory);
every (scenario, rule) pair is then a test of its own, so a rule broken by a known engine bug is
an ``xfail(strict=True)`` on exactly that pair and every other rule keeps guarding the scenario.
Each rule's docstring quotes the DESIGN.md sentence it checks. Pure Python, no Spark.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import pytest

from flowctl_core.events import as_dict
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import bundled_scenarios, load_scenario

Event = dict[str, Any]

# DESIGN §3, spelled out here rather than imported from schemas/, so a change there cannot quietly
# widen what this test accepts.
EVENT_TYPES = frozenset(
    [
        "queue_declared",
        "thresholds_changed",
        "enqueue",
        "dequeue",
        "flow_stopped",
        "flow_resumed",
        "transfer_completed",
        "message_rejected",
        "ring_evicted",
        "link_attached",
        "link_detached",
        "flow",
        "transfer",
        "session_window",
        "connection_blocked",
        "connection_unblocked",
        "alarm_raised",
        "alarm_cleared",
    ]
)
PROTOCOLS = frozenset({"amqp-0-10", "amqp-1.0", "amqp-0-9-1", "artemis-core"})
LINK_ROLES = frozenset({"publisher", "consumer"})
NOT_NULL = ("run_id", "broker", "seq", "ts", "event_type")
# The event types that are about a link and its state; the other events that name a link
# (enqueue, dequeue, transfer_completed, message_rejected) are about a message or a queue.
LINK_EVENTS = frozenset({"link_attached", "link_detached", "flow", "transfer"})
THRESHOLDS = ("flow_stop_count", "flow_resume_count", "flow_stop_size", "flow_resume_size")
LIMITS = ("max_count", "max_size")
# How each message event moves its queue's depth (messages; bytes move by size_bytes times this).
DEPTH_STEP = {"enqueue": 1, "dequeue": -1, "ring_evicted": -1, "message_rejected": 0}
SERIAL_MOD = 2**32  # RFC-1982 serial numbers of 32 bits

# Workloads cut short to keep the whole module near 20 s on a busy 2-core machine; what they are
# about (prefill, blocking, session windows, credit top-ups) happens in the first fraction of a
# second, and their full runs were checked with the same rules (no further violations).
DURATION_S = {
    "rabbitmq-one-sender-one-receiver": 0.3,
    "rabbitmq-two-senders": 0.5,
    "fanout-three-queues": 300.0,
}

RULES: dict[str, str] = {
    "required_not_null": "`run_id`, `broker`, `seq`, `ts`, `event_type` are marked not null",
    "seq_strictly_increasing": "`seq` ... strictly increasing within a run: the total order",
    "ts_non_decreasing": "`ts` event time (virtual time for simulations): never goes back in a "
    "simulation (DESIGN does not say it for collectors, whose clocks may step back)",
    "event_type_known": "Event types: `queue_declared`, `thresholds_changed`, ... `alarm_cleared`",
    "protocol_known": "`protocol`: `amqp-0-10`, `amqp-1.0`, `amqp-0-9-1`, `artemis-core`",
    "link_role_known": "`link_role`: `publisher` (into the broker) or `consumer` (out of it)",
    "enqueue_names_producer": "Enqueue events name the producer in `link`",
    "enqueue_capacity_outstanding": "Enqueue events ... carry its `capacity` and `outstanding` "
    "(a null capacity: no window)",
    "link_event_credit": "link events carry the link's `credit` ... after the event",
    "link_event_available": "link events carry the link's ... `available` after the event",
    "link_change_on_link_event": "A link event is emitted whenever a link's `credit` or "
    "`available` changes (a change seen on another event type, or before the link's attach)",
    "consumer_available_logged": "A link event is emitted whenever a link's ... `available` "
    "changes: a consumer link's `available` is its queue's ready messages, so by the end of each "
    "instant its last link event shows the queue's depth",
    "credit_not_negative": "the sender's credit is `delivery_count_rcv + link_credit_rcv - "
    "delivery_count_snd`: the engine never logs a negative `credit`",
    "amqp10_transfer_spends_one_credit": "AMQP 1.0 ... the sender's credit is "
    "`delivery_count_rcv + link_credit_rcv - delivery_count_snd`: a transfer takes one credit",
    "delivery_count_serial": "delivery-count is a 32-bit RFC-1982 serial number that wraps: each "
    "transfer advances it by 1",
    "depth_consistent": "`depth_msgs`, `depth_bytes`: queue depth after the event",
    "flow_stopped_state": "`flow_stopped`: queue flow state after the event",
    "flow_stopped_count": "`flow_stopped_count`: the queue's cumulative counter after the event; "
    "`flowStoppedCount` increments on each OFF->ON transition only",
    "thresholds_in_force": "`flow_stop_count`, `flow_resume_count`, `flow_stop_size`, "
    "`flow_resume_size`: thresholds in force (0 = off); `max_count`, `max_size`: queue limits",
    "qpid_flow_on_rule": "Flow goes ON on an enqueue, while OFF, when `depth_msgs > "
    "flow_stop_count` (if that is non-zero) or `depth_bytes > flow_stop_size` (if non-zero)",
    "qpid_flow_off_rule": "Flow goes OFF on a dequeue, while ON, when every non-zero resume "
    "threshold is satisfied: `depth_msgs < flow_resume_count` and `depth_bytes < "
    "flow_resume_size` (strict `<`)",
    "qpid_missed_flow_on": "Flow goes ON on an enqueue, while OFF, when `depth_msgs > "
    "flow_stop_count` ... : strict `>`, after the enqueue is counted (an enqueue that should)",
    "qpid_missed_flow_off": "Flow goes OFF on a dequeue, while ON, when every non-zero resume "
    "threshold is satisfied (a dequeue that should)",
    "artemis_address_flow": "An address that blocks or unblocks writes `flow_stopped` / "
    "`flow_resumed` for the address (in `queue`) ... an address is full while its size >= "
    "`max-size-bytes` (its events alternate, stop when full, resume when not, count each stop)",
}


class _QueueState:
    __slots__ = (
        "address_measured", "depth", "expect", "first_seq", "last", "stopped", "stops", "thresholds"
    )  # fmt: skip

    def __init__(self) -> None:
        self.depth: tuple[int, int] | None = None
        self.stopped = False  # as implied by the flow_stopped / flow_resumed events so far
        self.stops = 0  # flow_stopped events so far
        self.thresholds: tuple[Any, ...] | None = None  # THRESHOLDS + LIMITS in force
        # The queue's previous event: (event_type, seq, stopped before it, depth_msgs, depth_bytes).
        self.last: tuple[str, int, bool, Any, Any] | None = None
        # (event type the queue's next event must be, seq of the event that requires it).
        self.expect: tuple[str, int] | None = None
        self.first_seq: int | None = None
        # The own queue of an Artemis BLOCK address: depth_bytes is the address size (the memory
        # estimate its max-size-bytes limits), as its enqueues' detail gives it.
        self.address_measured = False


class _LinkState:
    __slots__ = ("attached", "credit", "delivery_count", "detached", "logged", "queue", "state")

    def __init__(self, first_event_type: str) -> None:
        self.attached = first_event_type == "link_attached"
        self.logged = False  # a link event seen
        self.state: tuple[Any, Any] = (None, None)  # (credit, available) last logged
        self.credit: Any = None
        self.delivery_count: Any = None
        self.detached = False
        self.queue: str | None = None


class ContractChecker:
    """Feed it every event of one run in emission order (``feed``), then ``finish``.

    ``counts[rule]`` is the number of violations of a rule, ``examples[rule]`` the first few, each
    naming the seq, the event type, the queue and the link.
    """

    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self.counts: collections.Counter[str] = collections.Counter()
        self.examples: dict[str, list[str]] = collections.defaultdict(list)
        self._seq: int | None = None
        self._ts: Any = None
        self._queues: dict[str, _QueueState] = collections.defaultdict(_QueueState)
        # Artemis BLOCK addresses: (blocked now, blocks so far), kept apart from the queues (an
        # address and its one queue share a name, but not what depth_bytes counts).
        self._addresses: dict[str, tuple[bool, int]] = {}
        self._links: dict[tuple[Any, ...], _LinkState] = {}

    def _bad(self, rule: str, event: Event, why: str) -> None:
        assert rule in RULES, rule
        self.counts[rule] += 1
        if len(self.examples[rule]) < self.keep:
            self.examples[rule].append(
                f"seq={event.get('seq')} {event.get('event_type')} queue={event.get('queue')} "
                f"link={event.get('link')}: {why}"
            )

    def feed(self, event: Event) -> None:
        event_type = event["event_type"]
        for column in NOT_NULL:
            if event[column] is None:
                self._bad("required_not_null", event, f"{column} is null")
        seq, ts = event["seq"], event["ts"]
        if self._seq is not None and seq is not None and not seq > self._seq:
            self._bad("seq_strictly_increasing", event, f"seq {seq} after {self._seq}")
        if self._ts is not None and ts is not None and ts < self._ts:
            self._check_instant()
            self._bad("ts_non_decreasing", event, f"ts {ts} after {self._ts}")
        elif self._ts is not None and ts != self._ts:
            self._check_instant()
        self._seq, self._ts = seq, ts
        if event_type not in EVENT_TYPES:
            self._bad("event_type_known", event, f"unknown event type {event_type!r}")
        if event["protocol"] is not None and event["protocol"] not in PROTOCOLS:
            self._bad("protocol_known", event, f"protocol {event['protocol']!r}")
        if event["link_role"] is not None and event["link_role"] not in LINK_ROLES:
            self._bad("link_role_known", event, f"link_role {event['link_role']!r}")
        if event["credit"] is not None and event["credit"] < 0:
            self._bad("credit_not_negative", event, f"credit {event['credit']}")
        if event_type == "enqueue":
            self._enqueue_producer(event)
        if event["link"] is not None:
            self._link(event, event_type)
        if event["queue"] is not None:
            if '"kind": "address"' in (event["detail"] or ""):
                self._address(event, event_type)
            else:
                self._queue(event, event_type)

    def _address(self, event: Event, event_type: str) -> None:
        """DESIGN §2: an Artemis BLOCK address's own flow events, with its size (the broker's
        memory estimate) in depth_bytes and max-size-bytes as its stop and resume size."""
        blocked, stops = self._addresses.get(event["queue"], (False, 0))
        size, limit = event["depth_bytes"], event["flow_stop_size"]
        if event_type == "flow_stopped" and not blocked and size >= limit:
            blocked, stops = True, stops + 1
        elif event_type == "flow_resumed" and blocked and size < event["flow_resume_size"]:
            blocked = False
        else:
            why = f"{event_type} with size {size}, max-size-bytes {limit}, blocked={blocked}"
            self._bad("artemis_address_flow", event, why)
        if (event["flow_stopped"], event["flow_stopped_count"]) != (blocked, stops):
            why = f"carries {event['flow_stopped']}/{event['flow_stopped_count']}"
            self._bad("artemis_address_flow", event, f"{why}, implied {blocked}/{stops}")
        self._addresses[event["queue"]] = (blocked, stops)
        # The address's same-named queue carries the address's flow state on its own events.
        if event["queue"] in self._queues:
            queue = self._queues[event["queue"]]
            queue.stopped, queue.stops = blocked, stops

    def finish(self) -> None:
        self._check_instant()
        for name, queue in self._queues.items():
            if queue.expect is not None:
                want, at = queue.expect
                rule = "qpid_missed_flow_on" if want == "flow_stopped" else "qpid_missed_flow_off"
                end = {"seq": at, "event_type": "(end of run)", "queue": name, "link": None}
                self._bad(rule, end, f"the run ended before the {want} due after seq {at}")

    # -- producers on enqueues ---------------------------------------------------------------
    def _enqueue_producer(self, event: Event) -> None:
        if event["link"] is None:
            self._bad("enqueue_names_producer", event, "enqueue with a null link")
            return
        if event["link_role"] not in (None, "publisher"):
            self._bad("enqueue_names_producer", event, f"link_role {event['link_role']!r}")
        # A null capacity is a producer without a window (DESIGN §4: "has no capacity (no
        # window)"; Artemis's -1), whose outstanding may be null with it (a CORE producer's is
        # the part of its window spent); a window without its fill is the defect.
        if event["capacity"] is not None and event["outstanding"] is None:
            self._bad("enqueue_capacity_outstanding", event, "a capacity with a null outstanding")

    # -- links -------------------------------------------------------------------------------
    def _link(self, event: Event, event_type: str) -> None:
        key = (event["connection"], event["session"], event["link"], event["link_role"])
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = _LinkState(event_type)
        credit, available = event["credit"], event["available"]
        if event_type not in LINK_EVENTS:
            if credit is not None or available is not None:
                if not link.logged:
                    why = f"credit/available {(credit, available)} before any link event"
                    self._bad("link_change_on_link_event", event, why)
                elif (credit, available) != link.state:
                    why = f"credit/available {link.state} -> {(credit, available)}"
                    self._bad("link_change_on_link_event", event, why)
            return
        if not link.attached:
            why = "a link event of a link whose first event was not link_attached"
            self._bad("link_change_on_link_event", event, why)
            link.attached = True  # one report per link
        if credit is None:
            self._bad("link_event_credit", event, "link event with a null credit")
        if available is None:
            self._bad("link_event_available", event, "link event with a null available")
        delivery_count = event["delivery_count"]
        if event_type == "transfer":
            if delivery_count is not None and link.delivery_count is not None:
                want = (link.delivery_count + 1) % SERIAL_MOD
                if delivery_count != want:
                    why = f"delivery_count {delivery_count} after {link.delivery_count}"
                    self._bad("delivery_count_serial", event, why)
            if (
                event["protocol"] == "amqp-1.0"
                and credit is not None
                and link.credit is not None
                and credit != link.credit - 1
            ):
                why = f"credit {credit} after {link.credit} (a transfer takes exactly one)"
                self._bad("amqp10_transfer_spends_one_credit", event, why)
        link.logged = True
        link.state = (credit, available)
        if credit is not None:
            link.credit = credit
        if delivery_count is not None:
            link.delivery_count = delivery_count
        if event_type == "link_detached":
            link.detached = True
        if event["link_role"] == "consumer" and event["queue"] is not None:
            link.queue = event["queue"]

    def _check_instant(self) -> None:
        """At the end of each instant, every attached consumer link's last logged `available`
        is its queue's depth (DESIGN §2: "`available` is set by the sender"; the broker sends
        from the queue, whose ready messages are what it has available)."""
        for key, link in self._links.items():
            if link.detached or link.queue is None or link.state[1] is None:
                continue
            queue = self._queues.get(link.queue)
            if queue is None or queue.depth is None:
                continue
            if link.state[1] != queue.depth[0]:
                where = {"seq": self._seq, "event_type": "(end of instant)", "queue": link.queue}
                why = f"at ts {self._ts}: available {link.state[1]} but depth {queue.depth[0]}"
                self._bad("consumer_available_logged", {**where, "link": key[2]}, why)
                link.state = (link.state[0], queue.depth[0])  # one report per change

    # -- queues ------------------------------------------------------------------------------
    def _queue(self, event: Event, event_type: str) -> None:
        queue = self._queues[event["queue"]]
        depth_msgs, depth_bytes = event["depth_msgs"], event["depth_bytes"]
        if event_type in ("queue_declared", "thresholds_changed"):
            new = tuple(event[column] for column in THRESHOLDS + LIMITS)
            if event_type == "queue_declared" and queue.thresholds is not None:
                self._bad("thresholds_in_force", event, "queue declared twice")
            old = queue.thresholds
            if event_type == "thresholds_changed" and old is not None and new[4:] != old[4:]:
                why = f"limits {old[4:]} -> {new[4:]} on a thresholds change"
                self._bad("thresholds_in_force", event, why)
            queue.thresholds = new
        # An enqueue or dequeue that must turn the flow is followed by the transition.
        if queue.expect is not None:
            want, at = queue.expect
            queue.expect = None
            if event_type != want:
                rule = "qpid_missed_flow_on" if want == "flow_stopped" else "qpid_missed_flow_off"
                self._bad(rule, event, f"the queue's event after seq {at} is not {want}")
        if event_type == "flow_stopped":
            last = queue.last
            if last is None or last[0] != "enqueue" or last[2]:
                why = f"flow_stopped not on an enqueue while OFF (queue's previous event {last})"
                self._bad("qpid_flow_on_rule", event, why)
            elif not self._should_stop(queue, last[3], last[4]):
                why = f"depth {last[3]}/{last[4]} is not above the stop thresholds"
                self._bad("qpid_flow_on_rule", event, f"{why} {queue.thresholds}")
            queue.stopped = True
            queue.stops += 1
        elif event_type == "flow_resumed":
            last = queue.last
            if last is None or last[0] != "dequeue" or not last[2]:
                why = f"flow_resumed not on a dequeue while ON (queue's previous event {last})"
                self._bad("qpid_flow_off_rule", event, why)
            elif not self._should_resume(queue, last[3], last[4]):
                why = f"depth {last[3]}/{last[4]} does not satisfy every resume threshold"
                self._bad("qpid_flow_off_rule", event, f"{why} {queue.thresholds}")
            queue.stopped = False
        if event["flow_stopped"] is not None and event["flow_stopped"] != queue.stopped:
            why = f"flow_stopped={event['flow_stopped']}, the flow events imply {queue.stopped}"
            self._bad("flow_stopped_state", event, why)
        if event["flow_stopped_count"] is not None and event["flow_stopped_count"] != queue.stops:
            why = f"flow_stopped_count={event['flow_stopped_count']} after {queue.stops} stops"
            self._bad("flow_stopped_count", event, why)
        carried = tuple(event[column] for column in THRESHOLDS + LIMITS)
        if any(value is not None for value in carried):
            if queue.thresholds is None:
                self._bad("thresholds_in_force", event, "queue event before its queue_declared")
            elif carried != queue.thresholds:
                why = f"carries {carried}, declared/changed {queue.thresholds}"
                self._bad("thresholds_in_force", event, why)
        if depth_msgs is not None or depth_bytes is not None:
            self._depth(queue, event, event_type, depth_msgs, depth_bytes)
        if depth_msgs is not None and depth_bytes is not None:
            if event_type == "enqueue" and not queue.stopped:
                if self._should_stop(queue, depth_msgs, depth_bytes):
                    queue.expect = ("flow_stopped", event["seq"])
            elif (
                event_type == "dequeue"
                and queue.stopped
                and self._should_resume(queue, depth_msgs, depth_bytes)
            ):
                queue.expect = ("flow_resumed", event["seq"])
        queue.last = (event_type, event["seq"], queue.stopped, depth_msgs, depth_bytes)

    def _depth(
        self, queue: _QueueState, event: Event, event_type: str, depth_msgs: Any, depth_bytes: Any
    ) -> None:
        if depth_msgs is None or depth_bytes is None:
            self._bad("depth_consistent", event, "one of depth_msgs / depth_bytes is null")
            return
        if queue.depth is None:
            if event_type == "queue_declared" and (depth_msgs, depth_bytes) != (0, 0):
                why = f"declared with depth {depth_msgs}/{depth_bytes}"
                self._bad("depth_consistent", event, why)
            elif event_type != "queue_declared":
                self._bad("depth_consistent", event, "queue depth before its queue_declared")
        else:
            step = DEPTH_STEP.get(event_type, 0)
            size = event["size_bytes"] if step else 0
            before_msgs, before_bytes = queue.depth
            if self._address_measured(queue, event, event_type):
                # Counted by the address: it grows with each message's estimate as it is admitted
                # and shrinks when the message is acknowledged, not as it leaves the queue.
                before_bytes = depth_bytes - step * size
            if size is None:
                self._bad("depth_consistent", event, "message event with a null size_bytes")
            elif (depth_msgs, depth_bytes) != (before_msgs + step, before_bytes + step * size):
                why = f"depth {depth_msgs}/{depth_bytes} after {before_msgs}/{before_bytes}"
                self._bad("depth_consistent", event, f"{why}, size {size}")
        queue.depth = (depth_msgs, depth_bytes)

    def _address_measured(self, queue: _QueueState, event: Event, event_type: str) -> bool:
        """Whether the queue logs its address's size as depth_bytes (a BLOCK address's own
        queue); an enqueue's ``detail.address_size`` must then be its depth_bytes."""
        if event_type == "enqueue" and event["detail"]:
            detail = json.loads(event["detail"])
            if detail.get("address") == event["queue"] and detail.get("policy") == "BLOCK":
                queue.address_measured = True
                if event["depth_bytes"] != detail["address_size"]:
                    why = (
                        f"depth_bytes {event['depth_bytes']}, address size {detail['address_size']}"
                    )
                    self._bad("depth_consistent", event, why)
        return queue.address_measured

    @staticmethod
    def _should_stop(queue: _QueueState, depth_msgs: Any, depth_bytes: Any) -> bool:
        if queue.thresholds is None or depth_msgs is None or depth_bytes is None:
            return False
        stop_count, _, stop_size, _ = queue.thresholds[:4]
        return bool(
            (stop_count and depth_msgs > stop_count) or (stop_size and depth_bytes > stop_size)
        )

    @staticmethod
    def _should_resume(queue: _QueueState, depth_msgs: Any, depth_bytes: Any) -> bool:
        if queue.thresholds is None or depth_msgs is None or depth_bytes is None:
            return False
        stop_count, resume_count, stop_size, resume_size = queue.thresholds[:4]
        if not stop_count and not stop_size:
            return False  # Qpid flow control off (an Artemis queue stopped by its address)
        # DESIGN §2: "A resume of 0 with a non-zero stop means resume = stop."
        resume_count = resume_count or stop_count
        resume_size = resume_size or stop_size
        return (not resume_count or depth_msgs < resume_count) and (
            not resume_size or depth_bytes < resume_size
        )


def check_events(events: Iterable[Event]) -> ContractChecker:
    checker = ContractChecker()
    for event in events:
        checker.feed(event)
    checker.finish()
    return checker


SCENARIOS = [path.stem for path in bundled_scenarios()]


@functools.cache
def checked_run(name: str) -> ContractChecker:
    """Run a bundled scenario once and check each event as it is emitted."""
    scenario = load_scenario(name)
    if name in DURATION_S:
        scenario = scenario.model_copy(update={"duration_s": DURATION_S[name]})
    checker = ContractChecker()
    feed = checker.feed
    run_scenario(scenario, [lambda row: feed(as_dict(row))])
    checker.finish()
    return checker


# Engine bugs found by this checker: (scenario, rule) -> the bug. The engine's owner fixes them
# (or DESIGN.md gets a note); strict, so a fix turns the test red until the entry goes.
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def _cases() -> list[Any]:
    cases = []
    for name in SCENARIOS:
        for rule in RULES:
            bug = KNOWN_BUGS.get((name, rule))
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            cases.append(pytest.param(name, rule, marks=marks, id=f"{name}-{rule}"))
    return cases


def test_bundled_artemis_block_addresses_log_their_flow() -> None:
    """The address rule is not vacuous: the BLOCK scenario's address fills and drains."""
    checker = checked_run("artemis-block-core-producers")
    assert checker._addresses and all(stops > 0 for _, stops in checker._addresses.values())


def test_a_producer_without_a_window_keeps_the_contract() -> None:
    """A CORE producer with window -1 (no producer flow control) logs no capacity and no
    outstanding on its enqueues: no window, as DESIGN §4 reads a null capacity, not a gap in
    the log (the checker called it one: an audit)."""
    scenario = load_scenario("artemis-block-core-producers")
    artemis = scenario.artemis
    assert artemis is not None
    first, *others = artemis.producers
    producers = [first.model_copy(update={"window": -1}), *others]
    scenario = scenario.model_copy(
        update={"duration_s": 2, "artemis": artemis.model_copy(update={"producers": producers})}
    )
    checker = ContractChecker()
    enqueues: list[dict[str, Any]] = []

    def feed(row: Any) -> None:
        event = as_dict(row)
        if event["event_type"] == "enqueue" and event["link"] == first.name:
            enqueues.append(event)
        checker.feed(event)

    run_scenario(scenario, [feed])
    checker.finish()
    assert enqueues
    assert all(e["capacity"] is None and e["outstanding"] is None for e in enqueues)
    assert checker.counts == {}


def test_known_bugs_name_real_cases() -> None:
    assert {name for name, _ in KNOWN_BUGS} <= set(SCENARIOS)
    assert {rule for _, rule in KNOWN_BUGS} <= set(RULES)


@pytest.mark.parametrize(("name", "rule"), _cases())
def test_event_log_contract(name: str, rule: str) -> None:
    checker = checked_run(name)
    count = checker.counts[rule]
    examples = "\n  ".join(checker.examples[rule])
    assert count == 0, (
        f"{name}: {count} events break DESIGN.md: {RULES[rule]!r}; first ones:\n  {examples}"
    )


# -- the checker itself: each rule must catch a log that breaks it ----------------------------
_OTHER_COLUMNS = (
    *("queue", "link", "session", "connection", "protocol", "link_role", "message_id"),
    *("size_bytes", "depth_msgs", "depth_bytes", "flow_stopped", "flow_stopped_count"),
    *("credit", "delivery_count", "available", "outstanding", "capacity", "latency_us", "detail"),
)
_T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def _event(seq: int, event_type: str, **columns: Any) -> Event:
    event: Event = dict.fromkeys([*NOT_NULL, *THRESHOLDS, *LIMITS, *_OTHER_COLUMNS])
    event.update(run_id="r", broker="b", seq=seq, ts=_T0, event_type=event_type)
    event.update(columns)
    return event


def _qpid_log() -> list[Event]:
    """A queue stopping above 2 and resuming below 2, logged by the contract."""
    queue = {"queue": "q", "max_count": 10, "max_size": 0, "flow_stop_size": 0}
    queue |= {"flow_resume_size": 0, "flow_stop_count": 2, "flow_resume_count": 2}
    producer = {"link": "p", "link_role": "publisher", "capacity": 5, "protocol": "amqp-0-10"}
    events = [_event(1, "queue_declared", depth_msgs=0, depth_bytes=0, **queue)]
    stopped, stops, depth = False, 0, 0

    def add(event_type: str, **columns: Any) -> None:
        flow = {"flow_stopped": stopped, "flow_stopped_count": stops, "depth_msgs": depth}
        events.append(
            _event(len(events) + 1, event_type, **queue, **flow, depth_bytes=depth * 10, **columns)
        )

    for message_id in (1, 2, 3):
        depth += 1
        add("enqueue", message_id=message_id, size_bytes=10, outstanding=message_id, **producer)
    stopped, stops = True, 1
    add("flow_stopped")
    for message_id in (1, 2):
        depth -= 1
        add("dequeue", message_id=message_id, size_bytes=10, link="c", link_role="consumer")
    stopped = False
    add("flow_resumed")
    return events


def _amqp_log() -> list[Event]:
    link = {"link": "l", "link_role": "consumer", "protocol": "amqp-1.0", "connection": "c"}
    return [
        _event(1, "link_attached", credit=0, available=0, delivery_count=7, **link),
        _event(2, "flow", credit=2, available=0, delivery_count=7, **link),
        _event(3, "transfer", credit=1, available=0, delivery_count=8, **link),
        _event(4, "transfer", credit=0, available=0, delivery_count=9, **link),
    ]


def _address_log() -> list[Event]:
    """An Artemis BLOCK address of 1,000 bytes filling and draining (DESIGN §2)."""
    address = {"queue": "a", "flow_stop_size": 1000, "flow_resume_size": 1000}
    address |= {"detail": '{"address": "a", "kind": "address"}'}
    return [
        _event(
            1, "flow_stopped", depth_bytes=1000, flow_stopped=True, flow_stopped_count=1, **address
        ),
        _event(
            2, "flow_resumed", depth_bytes=999, flow_stopped=False, flow_stopped_count=1, **address
        ),
        _event(
            3, "flow_stopped", depth_bytes=1500, flow_stopped=True, flow_stopped_count=2, **address
        ),
    ]


def _address_queue_log() -> list[Event]:
    """The own queue of an Artemis BLOCK address: its depth_bytes is the address size (bodies
    plus the broker's per-message estimate), which a dequeue leaves until the acknowledgement."""
    queue = dict.fromkeys((*THRESHOLDS, *LIMITS), 0) | {"queue": "a"}
    producer = {"link": "p", "link_role": "publisher", "capacity": 4, "protocol": "artemis-core"}
    flow = {"flow_stopped": False, "flow_stopped_count": 0}

    def detail(size: int) -> str:
        return json.dumps({"address": "a", "address_size": size, "policy": "BLOCK"})

    return [
        _event(1, "queue_declared", depth_msgs=0, depth_bytes=0, **queue, **flow),
        _event(2, "enqueue", message_id=1, size_bytes=10, depth_msgs=1, depth_bytes=1078,
               outstanding=1, detail=detail(1078), **queue, **flow, **producer),
        _event(3, "dequeue", message_id=1, size_bytes=10, depth_msgs=0, depth_bytes=1078,
               link="c", link_role="consumer", **queue, **flow),
        _event(4, "enqueue", message_id=2, size_bytes=10, depth_msgs=1, depth_bytes=2156,
               outstanding=2, detail=detail(2156), **queue, **flow, **producer),
    ]  # fmt: skip


def _drop(index: int) -> Callable[[list[Event]], None]:
    def drop(events: list[Event]) -> None:
        del events[index]

    return drop


def _set(index: int, **columns: Any) -> Callable[[list[Event]], None]:
    return lambda events: events[index].update(columns)


CORRUPTIONS: list[tuple[Callable[[], list[Event]], Callable[[list[Event]], None], str]] = [
    (_qpid_log, _set(2, seq=1), "seq_strictly_increasing"),
    (_qpid_log, _set(0, ts=datetime(2026, 3, 3, tzinfo=UTC)), "ts_non_decreasing"),
    (_qpid_log, _set(1, broker=None), "required_not_null"),
    (_qpid_log, _set(1, event_type="enqueued"), "event_type_known"),
    (_qpid_log, _set(1, protocol="amqp-0-10-x"), "protocol_known"),
    (_qpid_log, _set(1, link_role="producer"), "link_role_known"),
    (_qpid_log, _set(1, link=None), "enqueue_names_producer"),
    (_qpid_log, _set(1, outstanding=None), "enqueue_capacity_outstanding"),
    (_qpid_log, _set(2, depth_msgs=3), "depth_consistent"),
    (_qpid_log, _set(2, depth_bytes=30), "depth_consistent"),
    (_qpid_log, _set(5, flow_stopped=False), "flow_stopped_state"),
    (_qpid_log, _set(5, flow_stopped_count=2), "flow_stopped_count"),
    (_qpid_log, _set(5, flow_resume_count=1), "thresholds_in_force"),
    (_qpid_log, _drop(4), "qpid_missed_flow_on"),
    (_qpid_log, _drop(7), "qpid_missed_flow_off"),
    (_qpid_log, _set(0, flow_stop_count=3, flow_resume_count=3), "qpid_flow_on_rule"),
    (_qpid_log, _set(0, flow_resume_count=1), "qpid_flow_off_rule"),
    (_address_queue_log, _set(1, depth_bytes=10), "depth_consistent"),
    (_address_queue_log, _set(2, depth_msgs=1), "depth_consistent"),
    (_address_log, _set(0, depth_bytes=999), "artemis_address_flow"),
    (_address_log, _set(1, depth_bytes=1000), "artemis_address_flow"),
    (_address_log, _drop(1), "artemis_address_flow"),
    (_address_log, _set(2, flow_stopped_count=1), "artemis_address_flow"),
    (_amqp_log, _set(2, delivery_count=9), "delivery_count_serial"),
    (_amqp_log, _set(3, credit=-1), "credit_not_negative"),
    (_amqp_log, _set(2, credit=2), "amqp10_transfer_spends_one_credit"),
    (_amqp_log, _set(1, credit=None), "link_event_credit"),
    (_amqp_log, _set(1, available=None), "link_event_available"),
    (_amqp_log, _drop(0), "link_change_on_link_event"),
    (
        _amqp_log,
        lambda events: events.insert(
            2,
            _event(
                0,
                "dequeue",
                link="l",
                connection="c",
                link_role="consumer",
                credit=5,
                available=0,
            ),
        ),
        "link_change_on_link_event",
    ),
]


@pytest.mark.parametrize(
    ("log", "corrupt", "rule"),
    CORRUPTIONS,
    ids=[f"{rule}-{index}" for index, (_, _, rule) in enumerate(CORRUPTIONS)],
)
def test_checker_catches(
    log: Callable[[], list[Event]], corrupt: Callable[[list[Event]], None], rule: str
) -> None:
    events = log()
    assert check_events(events).counts == {}, "the unbroken log must pass"
    corrupt(events)
    assert check_events(events).counts[rule] > 0


def test_checker_sees_delivery_count_wrap_and_consumer_available() -> None:
    link = {"link": "l", "link_role": "consumer", "protocol": "amqp-1.0", "connection": "c"}
    wrap = [
        _event(1, "link_attached", credit=1, available=0, delivery_count=SERIAL_MOD - 1, **link),
        _event(2, "transfer", credit=0, available=0, delivery_count=0, **link),
    ]
    assert check_events(wrap).counts == {}
    later = _T0.replace(second=1)
    queue = {"queue": "q", "max_count": 0, "max_size": 0, "flow_stop_count": 0}
    queue |= {"flow_resume_count": 0, "flow_stop_size": 0, "flow_resume_size": 0}
    stale = [
        _event(1, "queue_declared", depth_msgs=0, depth_bytes=0, **queue),
        _event(2, "link_attached", credit=0, available=0, delivery_count=0, **link, queue="q"),
        _event(3, "enqueue", depth_msgs=1, depth_bytes=10, size_bytes=10, **queue, link="p",
               link_role="publisher", capacity=1, outstanding=1),
        _event(4, "flow", credit=0, available=0, delivery_count=0, ts=later, **link, queue="q"),
    ]  # fmt: skip
    assert check_events(stale).counts["consumer_available_logged"] > 0
    stale[3]["ts"] = _T0
    stale[3]["available"] = 1
    assert check_events(stale).counts == {}

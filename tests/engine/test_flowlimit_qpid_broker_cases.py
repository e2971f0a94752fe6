"""Apache Qpid C++ broker's own flow-limit test cases, replayed against our engine.

Sources (apache/qpid):
- ``qpid/cpp/src/tests/QueueFlowLimitTest.cpp``: unit tests of ``QueueFlowLimit``; each test here
  named ``test_QueueFlowLimitTest_<case>`` replays one ``QPID_AUTO_TEST_CASE``.
- ``qpid/cpp/src/tests/queue_flow_limit_tests.py``: system tests against a running broker with
  ``qpid-send`` / ``qpid-receive``; each test named ``test_queue_flow_limit_tests_<case>`` replays
  one of them on the virtual clock.
- ``qpid/cpp/src/qpid/broker/QueueFlowLimit.cpp`` (``createLimit``, ``validateFlowConfig``,
  ``enqueued``, ``dequeued``) decides the expectations the tests leave implicit.

Only the facts carry over (thresholds, message sizes, the order of enqueues and dequeues, the
expected flow state and depth after each step); the code is ours.

Qpid's unit tests feed messages to a bare ``QueueFlowLimit`` and dequeue them in any order they
like. Our flow limit lives in a FIFO queue, so :class:`FlowDriver` takes a given message off by
moving it to the head of the queue before dequeuing it; the depth after each step is then the one
the Qpid test states in its comments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from flowctl_core import BrokerConfig, FlowConfigError, FlowThresholds
from flowctl_core.clients import Producer
from tests.engine.helpers import NO_DEFAULTS, Rig

pytestmark = pytest.mark.implementation_case

# Qpid's QueueFlowLimit::setDefaults(2950001, 80, 70) in testFlowDefaultArgs and
# testFlowOverrideArgs: a broker-wide default queue limit of 2950001 bytes, ratios 80 % / 70 %.
QPID_DEFAULTS_80_70 = BrokerConfig(
    default_flow_stop_ratio=80, default_flow_resume_ratio=70, default_queue_limit_bytes=2950001
)
# testFlowOverrideDefaults: QueueFlowLimit::setDefaults(2950001, 97, 73). The setting is static in
# Qpid, so testFlowDisable (which runs next) sees these defaults too.
QPID_DEFAULTS_97_73 = BrokerConfig(
    default_flow_stop_ratio=97, default_flow_resume_ratio=73, default_queue_limit_bytes=2950001
)


class FlowDriver:
    """One queue fed by an unwindowed producer; enqueue by size, dequeue a chosen message."""

    def __init__(self, arguments: Mapping[str, Any], config: BrokerConfig = NO_DEFAULTS) -> None:
        self.rig = Rig(config)
        self.queue = self.rig.queue("q", arguments)
        self.producer = self.rig.producer("p", capacity=None, routing_key="q")

    @property
    def stopped(self) -> bool:
        return bool(self.queue.flow.flow_stopped)

    @property
    def depth(self) -> tuple[int, int]:
        return self.queue.depth_msgs, self.queue.depth_bytes

    def enqueue(self, size: int) -> int:
        """Send one message of ``size`` bytes; returns its message id."""
        self.producer.send(size)
        message_id: int = self.queue.messages[-1].message_id
        return message_id

    def dequeue(self, message_id: int) -> None:
        """Dequeue the message ``message_id``, wherever it is in the queue."""
        messages = self.queue.messages
        position = next(i for i, m in enumerate(messages) if m.message_id == message_id)
        message = messages[position]
        del messages[position]
        messages.appendleft(message)
        taken = self.queue.dequeue()
        assert taken is message


# -- QueueFlowLimitTest.cpp ---------------------------------------------------------------------
def test_QueueFlowLimitTest_testFlowCount() -> None:
    # testFlowCount: stop 7 / resume 5 messages of 100 bytes. 7 on the queue is not yet ON
    # (strict >), the 8th turns it ON; it stays ON down to 5 (not < 5) and goes OFF at 4.
    flow = FlowDriver({"qpid.flow_stop_count": 7, "qpid.flow_resume_count": 5})
    assert flow.queue.flow.thresholds == FlowThresholds(7, 5, 0, 0)
    assert flow.queue.flow.thresholds.enabled and not flow.stopped

    ids = []
    for expected_count in range(1, 8):
        ids.append(flow.enqueue(100))
        assert flow.depth == (expected_count, expected_count * 100)
        assert not flow.stopped  # 1..7 on the queue
    ids.append(flow.enqueue(100))
    assert flow.depth[0] == 8 and flow.stopped  # 8 on the queue: ON
    ids.append(flow.enqueue(100))
    assert flow.depth[0] == 9 and flow.stopped  # 9: no change
    assert flow.queue.flow.flow_stopped_count == 1
    # QueueFlowLimit::enqueued holds every message enqueued while ON, the 8th included.
    assert flow.queue.held_count == 2

    for expected_count in (8, 7, 6, 5):
        flow.dequeue(ids.pop(0))
        assert flow.depth[0] == expected_count and flow.stopped
    flow.dequeue(ids.pop(0))
    assert flow.depth[0] == 4 and not flow.stopped  # 4 on the queue: OFF
    # QueueFlowLimit::dequeued releases every held message when flow goes OFF.
    assert flow.queue.held_count == 0
    assert flow.queue.flow.flow_stopped_count == 1


def test_QueueFlowLimitTest_testFlowSize() -> None:
    # testFlowSize: stop 700 / resume 460 bytes. 690 stays OFF, 730 turns ON; the dequeues (two
    # of them out of arrival order) keep it ON at 490 and turn it OFF at 450; the queue ends with
    # 2 messages, 200 bytes.
    flow = FlowDriver({"qpid.flow_stop_size": 700, "qpid.flow_resume_size": 460})
    assert flow.queue.flow.thresholds == FlowThresholds(0, 0, 700, 460)
    assert flow.queue.flow.thresholds.enabled and not flow.stopped

    hundreds = []
    for _ in range(6):
        hundreds.append(flow.enqueue(100))
        assert not flow.stopped
    assert flow.depth == (6, 600) and not flow.stopped

    msg_50 = flow.enqueue(50)
    assert flow.depth[1] == 650 and not flow.stopped
    tiny_1 = flow.enqueue(40)
    assert flow.depth[1] == 690 and not flow.stopped
    tiny_2 = flow.enqueue(40)
    assert flow.depth[1] == 730 and flow.stopped  # ON
    hundreds.append(flow.enqueue(100))
    assert flow.depth == (10, 830) and flow.stopped

    for expected_bytes in (730, 630, 530):
        flow.dequeue(hundreds.pop(0))
        assert flow.depth[1] == expected_bytes and flow.stopped

    flow.dequeue(tiny_1)
    assert flow.depth[1] == 490 and flow.stopped  # 490 is not below 460
    flow.dequeue(tiny_2)
    assert flow.depth[1] == 450 and not flow.stopped  # OFF

    flow.dequeue(msg_50)
    assert flow.depth[1] == 400 and not flow.stopped
    for expected_bytes in (300, 200):
        flow.dequeue(hundreds.pop(0))
        assert flow.depth[1] == expected_bytes and not flow.stopped
    assert flow.depth == (2, 200)
    assert flow.queue.flow.flow_stopped_count == 1


def test_QueueFlowLimitTest_testFlowArgs() -> None:
    # testFlowArgs: all four arguments at once, the byte thresholds above 32 bits
    # (0x2FFFFFFFF / 0x1FFFFFFFF), are taken as given; flow starts OFF.
    stop, resume = 0x2FFFFFFFF, 0x1FFFFFFFF
    flow = FlowDriver(
        {
            "qpid.flow_stop_count": 30,
            "qpid.flow_resume_count": 21,
            "qpid.flow_stop_size": stop,
            "qpid.flow_resume_size": resume,
        }
    )
    assert flow.queue.flow.thresholds == FlowThresholds(30, 21, stop, resume)
    assert flow.queue.flow.thresholds.enabled and not flow.stopped
    declared = flow.rig.events("queue_declared")[-1]
    assert (declared["flow_stop_size"], declared["flow_resume_size"]) == (stop, resume)


def test_QueueFlowLimitTest_testFlowCombo() -> None:
    # testFlowCombo: stop 10 msgs or 2000 bytes, resume below 5 msgs and 1000 bytes. Part 1: the
    # count alone turns flow ON; part 2: the size alone does; part 3: once both are over, flow
    # stays ON until both are below their resume points (1 msg / 1000 bytes is still ON).
    flow = FlowDriver(
        {
            "qpid.flow_stop_count": 10,
            "qpid.flow_resume_count": 5,
            "qpid.flow_stop_size": 2000,
            "qpid.flow_resume_size": 1000,
        }
    )
    assert not flow.stopped and flow.depth == (0, 0)

    # Part 1: count passes its stop point.
    msgs_100 = []
    for _ in range(10):
        msgs_100.append(flow.enqueue(100))
        assert not flow.stopped
    assert flow.depth == (10, 1000)
    msgs_50 = [flow.enqueue(50)]
    assert flow.depth == (11, 1050) and flow.stopped  # ON
    for _ in range(6):
        flow.dequeue(msgs_100.pop(0))
        assert flow.stopped
    assert flow.depth == (5, 450)
    flow.dequeue(msgs_50.pop(0))
    assert flow.depth == (4, 400) and not flow.stopped  # OFF
    for _ in range(4):
        flow.dequeue(msgs_100.pop(0))
        assert not flow.stopped
    assert flow.depth == (0, 0)
    assert flow.queue.flow.flow_stopped_count == 1

    # Part 2: size passes its stop point.
    msgs_1000 = [flow.enqueue(1000)]
    assert flow.depth == (1, 1000) and not flow.stopped
    msgs_500 = [flow.enqueue(500)]
    assert flow.depth == (2, 1500) and not flow.stopped
    msgs_500.append(flow.enqueue(500))
    assert flow.depth == (3, 2000) and not flow.stopped
    msgs_50.append(flow.enqueue(50))
    assert flow.depth == (4, 2050) and flow.stopped  # ON
    flow.dequeue(msgs_1000.pop(0))
    assert flow.depth == (3, 1050) and flow.stopped
    flow.dequeue(msgs_50.pop(0))
    assert flow.depth == (2, 1000) and flow.stopped  # 1000 is not below 1000
    flow.dequeue(msgs_500.pop(0))
    assert flow.depth == (1, 500) and not flow.stopped  # OFF
    assert flow.queue.flow.flow_stopped_count == 2

    # Part 3: both over; flow stays ON until both are below their resume points.
    for _ in range(8):
        msgs_100.append(flow.enqueue(100))
        assert not flow.stopped
    assert flow.depth == (9, 1300)
    msgs_100.append(flow.enqueue(100))
    assert flow.depth == (10, 1400) and not flow.stopped
    msgs_50.append(flow.enqueue(50))
    assert flow.depth == (11, 1450) and flow.stopped  # ON
    msgs_1000.append(flow.enqueue(1000))
    assert flow.depth == (12, 2450) and flow.stopped  # both thresholds crossed
    flow.dequeue(msgs_500.pop(0))
    assert flow.depth == (11, 1950) and flow.stopped
    for _ in range(9):
        flow.dequeue(msgs_100.pop(0))
        assert flow.stopped
    assert flow.depth == (2, 1050)
    flow.dequeue(msgs_50.pop(0))
    assert flow.depth == (1, 1000) and flow.stopped  # count is below 5, size is not below 1000
    flow.dequeue(msgs_1000.pop(0))
    assert flow.depth == (0, 0) and not flow.stopped  # OFF
    assert flow.queue.flow.flow_stopped_count == 3


def test_QueueFlowLimitTest_testFlowDefaultArgs() -> None:
    # testFlowDefaultArgs: no flow arguments, default queue limit 2950001 bytes at 80 % / 70 %:
    # stop size 2360001 (2360000.8 rounded), resume size 2065000 (2065000.7 floored), no count
    # thresholds (no max count), flow control on and OFF.
    flow = FlowDriver({}, QPID_DEFAULTS_80_70)
    assert flow.queue.max_size == 2950001
    assert flow.queue.flow.thresholds == FlowThresholds(0, 0, 2360001, 2065000)
    assert flow.queue.flow.thresholds.enabled and not flow.stopped


def test_QueueFlowLimitTest_testFlowOverrideArgs() -> None:
    # testFlowOverrideArgs: with default ratios in force, explicit arguments replace the defaults
    # entirely: given counts only, the byte thresholds are 0 (not the default 2360001/2065000);
    # given sizes only, the count thresholds are 0; given all four, all four are as given.
    counts = {"qpid.flow_stop_count": 35000, "qpid.flow_resume_count": 30000}
    sizes = {"qpid.flow_stop_size": 350000, "qpid.flow_resume_size": 300000}
    cases = [
        (counts, FlowThresholds(35000, 30000, 0, 0)),
        (sizes, FlowThresholds(0, 0, 350000, 300000)),
        ({**counts, **sizes}, FlowThresholds(35000, 30000, 350000, 300000)),
    ]
    for arguments, expected in cases:
        flow = FlowDriver(arguments, QPID_DEFAULTS_80_70)
        assert flow.queue.flow.thresholds == expected, arguments
        assert flow.queue.flow.thresholds.enabled and not flow.stopped


def test_QueueFlowLimitTest_testFlowOverrideDefaults() -> None:
    # testFlowOverrideDefaults: default ratios 97 % / 73 % of 2950001 bytes give stop size 2861501
    # (2861500.97 rounded) and resume size 2153500 (2153500.73 floored).
    flow = FlowDriver({}, QPID_DEFAULTS_97_73)
    assert (flow.queue.flow.stop_size, flow.queue.flow.resume_size) == (2861501, 2153500)
    assert flow.queue.flow.thresholds.enabled and not flow.stopped


def test_QueueFlowLimitTest_testFlowDisable() -> None:
    # testFlowDisable: a single explicit zero stop argument (count alone, or size alone) means no
    # flow limit at all, although the broker's default ratios would otherwise give byte
    # thresholds (QueueFlowLimit::createLimit returns no limit).
    for arguments in ({"qpid.flow_stop_count": 0}, {"qpid.flow_stop_size": 0}):
        flow = FlowDriver(arguments, QPID_DEFAULTS_97_73)
        assert flow.queue.flow.thresholds == FlowThresholds(0, 0, 0, 0), arguments
        assert not flow.queue.flow.thresholds.enabled
        for _ in range(29):
            flow.enqueue(100_000)
        # 2900000 bytes: past the default stop size (2861501), under the queue limit; still OFF.
        assert flow.depth == (29, 2_900_000) and not flow.stopped
        assert not flow.rig.events("flow_stopped")


def test_createLimit_stop_zero_with_a_resume_disables_flow_control() -> None:
    # QueueFlowLimit::createLimit: given stops that are all 0 turn flow control off before the
    # resume values are looked at, so a resume above the 0 stop is no error (seed 001: "disable
    # flow control on a per queue basis by setting the flow-stop-size and flow-stop-count to
    # zero").
    for arguments in (
        {"qpid.flow_stop_count": 0, "qpid.flow_resume_count": 5},
        {"qpid.flow_stop_size": 0, "qpid.flow_resume_size": 500, "qpid.flow_resume_count": 5},
    ):
        flow = FlowDriver({"qpid.max_count": 1000, **arguments}, QPID_DEFAULTS_80_70)
        assert flow.queue.flow.thresholds == FlowThresholds(0, 0, 0, 0), arguments
        for _ in range(900):
            flow.enqueue(10)
        assert flow.depth == (900, 9000) and not flow.stopped  # past 80 % of max_count: still OFF


def test_createLimit_resume_without_a_stop_is_ignored_for_the_defaults() -> None:
    # QueueFlowLimit::createLimit (current Qpid): only a stop key makes the thresholds explicit;
    # resume keys alone are ignored and the queue gets the default ratios. The declare logs them
    # as ignored, and a malformed one is still an error.
    flow = FlowDriver(
        {"qpid.max_count": 1000, "qpid.max_size": 1000, "qpid.flow_resume_size": 500},
        QPID_DEFAULTS_80_70,
    )
    assert flow.queue.flow.thresholds == FlowThresholds(800, 700, 800, 700)
    (declared,) = flow.rig.events("queue_declared")
    assert json.loads(declared["detail"]) == {
        "policy": "reject",
        "thresholds": "defaults",
        "ignored": ["qpid.flow_resume_size"],
    }
    with pytest.raises(FlowConfigError, match=r"qpid\.flow_resume_count must be"):
        Rig(QPID_DEFAULTS_80_70).queue("q", {"qpid.flow_resume_count": "lots"})


# -- queue_flow_limit_tests.py ------------------------------------------------------------------
def test_queue_flow_limit_tests_test_qpid_config_cmd() -> None:
    # test_qpid_config_cmd: qpid-config add queue --flow-stop-count=999 --flow-resume-count=55
    # --flow-stop-size=5000000 --flow-resume-size=100000 gives a queue with those four thresholds,
    # flow OFF. Then --max-queue-count=10000 --max-queue-size=1000000 alone gets the default
    # ratios (the Qpid test cannot read them back; createLimit gives 8000/7000 and 800000/700000).
    rig = Rig()
    explicit = rig.queue(
        "test01",
        {
            "qpid.flow_stop_count": "999",  # qpid-config passes the values as strings
            "qpid.flow_resume_count": "55",
            "qpid.flow_stop_size": "5000000",
            "qpid.flow_resume_size": "100000",
        },
    )
    assert explicit.flow.thresholds == FlowThresholds(999, 55, 5000000, 100000)
    assert not explicit.flow.flow_stopped
    sized = rig.queue("test02", {"qpid.max_count": 10000, "qpid.max_size": 1000000})
    assert sized.flow.thresholds == FlowThresholds(8000, 7000, 800000, 700000)
    assert not sized.flow.flow_stopped


def _drain(rig: Rig, queue_name: str, total: int) -> int:
    """qpid-receive: consume one message at a time, letting blocked producers send in between,
    until ``total`` have been received or nothing more arrives."""
    consumer = rig.consumer("receiver", queue_name)
    received = 0
    while received < total:
        rig.settle()
        taken = consumer.consume(1)
        if not taken:
            rig.settle()
            if not rig.broker.queue(queue_name).messages:
                break
        received += taken
    return received


def _blocked_depth_bound(producers: list[Producer], stop: int) -> int:
    # Seed 001: the queue passes its stop threshold by at most the sum of the capacities.
    return stop + sum(p.capacity or 0 for p in producers)


def test_queue_flow_limit_tests_test_flow_count() -> None:
    # test_flow_count: stop 373 / resume 229 messages; three qpid-send clients (1213 x "XXX" at
    # capacity 50, 797 x "Y" at 13, 331 x "ZZZZZ" at 149). Flow goes ON with more than 373
    # messages queued, the senders block before all 2341 are in, a receiver then gets all 2341,
    # and flow ends OFF having stopped at least once.
    rig = Rig()
    queue = rig.queue("test-q", {"qpid.flow_stop_count": 373, "qpid.flow_resume_count": 229})
    assert queue.flow.flow_stopped_count == 0 and not queue.flow.flow_stopped
    senders = [
        rig.producer("sndr1", capacity=50, routing_key="test-q"),
        rig.producer("sndr2", capacity=13, routing_key="test-q"),
        rig.producer("sndr3", capacity=149, routing_key="test-q"),
    ]
    for sender, (count, content) in zip(
        senders, [(1213, "XXX"), (797, "Y"), (331, "ZZZZZ")], strict=True
    ):
        sender.send(len(content), count)
    total = 1213 + 797 + 331
    rig.settle()

    assert queue.flow.flow_stopped
    assert queue.depth_msgs > 373
    # The senders are blocked: the depth no longer grows and not every message got in.
    depth = queue.depth_msgs
    rig.settle()
    assert queue.depth_msgs == depth
    assert total > depth
    assert all(s.blocked for s in senders)
    assert depth <= _blocked_depth_bound(senders, 373)

    assert _drain(rig, "test-q", total) == total
    assert not queue.flow.flow_stopped
    # ON at the 374th (sndr1 holds 50, then 13 + 149: 585 queued); each OFF (228 queued) comes
    # before any held message is taken and frees every window; the senders refill in turn: 1-2
    # sndr1 195 (145 unheld + 50) + sndr2 13 + sndr3 149 / its last 33; 3-4 sndr1 195 + sndr2 13;
    # 5 sndr1's last 10 + sndr2 148; 6-8 sndr2 158; 9 sndr2's last 110 stay below 374: 1 + 8 = 9.
    assert queue.flow.flow_stopped_count == 9
    assert all(s.completed == s.sent for s in senders)
    assert queue.held_count == 0


def test_queue_flow_limit_tests_test_flow_size() -> None:
    # test_flow_size: stop 351133 / resume 251143 bytes; three qpid-send clients (1699 x 439 bytes
    # at capacity 53, 1129 x 631 at 13, 881 x 823 at 149). Flow goes ON with more than 351133
    # bytes queued, the senders block before all 3709 messages are in, a receiver gets them all,
    # and flow ends OFF.
    rig = Rig()
    queue = rig.queue("test-q", {"qpid.flow_stop_size": 351133, "qpid.flow_resume_size": 251143})
    senders = [
        rig.producer("sndr1", capacity=53, routing_key="test-q"),
        rig.producer("sndr2", capacity=13, routing_key="test-q"),
        rig.producer("sndr3", capacity=149, routing_key="test-q"),
    ]
    for sender, (count, size) in zip(senders, [(1699, 439), (1129, 631), (881, 823)], strict=True):
        sender.send(size, count)
    total = 1699 + 1129 + 881
    rig.settle()

    assert queue.flow.flow_stopped
    assert queue.depth_bytes > 351133
    depth = queue.depth_msgs
    rig.settle()
    assert queue.depth_msgs == depth
    assert total > depth
    assert all(s.blocked for s in senders)
    # Byte overshoot is bounded by each sender's window of its own message size.
    windows = zip(senders, (439, 631, 823), strict=True)
    assert queue.depth_bytes <= 351133 + sum((s.capacity or 0) * size for s, size in windows)

    assert _drain(rig, "test-q", total) == total
    assert not queue.flow.flow_stopped
    # ON at sndr1's 800th message (800 x 439 > 351133), then sndr2 13 and sndr3 149 held; each
    # OFF (below 251143 before any held message is dequeued) frees the windows and the senders
    # refill in turn: sndr1 280 (227 + 53 held), sndr2 13, sndr3 149 a cycle for refills 1-3, then
    # sndr1's last 7 and sndr2 166 (refill 4), sndr2 171 and sndr3's last 136 (refill 5), sndr2
    # 171 / 172 alone (refills 6-9) until its last 55 (34705 bytes) stay below the stop: 10.
    assert queue.flow.flow_stopped_count == 10
    assert all(s.completed == s.sent for s in senders)

"""Differential tests: the engine's AMQP 1.0 link / session flow control and RabbitMQ policy against
the independent reference model in tests/engine/reference/amqp10_reference_model.py (DESIGN.md §2,
seeds 002/004).

Hypothesis generates operation sequences (derandomized) that are applied to the engine objects and
to the model in lock step; after every step the link / session state and every frame produced are
compared. Flows and transfers travel on two FIFO wires per direction (frames of a session arrive in
order), so grants cross transfers on the wire as in the seeds' figures.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl_core.protocols.amqp10 import (
    LinkFlow,
    ProtocolError,
    ReceiverLink,
    SenderLink,
    SessionEndpoint,
    SessionFlow,
)
from flowctl_core.protocols.amqp10 import transfer_frames as engine_transfer_frames
from flowctl_core.protocols.config import (
    ConnectionConfig,
    ConsumerConfig,
    PublisherConfig,
    RabbitPolicy,
)
from flowctl_core.protocols.rabbitmq_amqp10 import Amqp10Connection
from flowctl_core.protocols.wire import Frame, TransferFrame
from schemas.broker_events import AMQP_1_0
from tests.engine.helpers import Rabbit
from tests.engine.reference.amqp10_reference_model import (
    SERIAL_MAX,
    Flow,
    ModelError,
    RabbitPublisherModel,
    RabbitSessionWindowModel,
    ReceiverModel,
    SenderModel,
    SessionModel,
    SessionState,
    max_unconfirmed,
    queue_credit_ok,
    sender_credit,
    transfer_frames,
)

pytestmark = pytest.mark.differential

FAST = settings(
    derandomize=True,
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def flow_tuple(flow: LinkFlow | Flow | None) -> tuple[Any, ...] | None:
    return None if flow is None else dataclasses.astuple(flow)


def session_tuple(state: SessionFlow | SessionState) -> tuple[Any, ...]:
    return dataclasses.astuple(state)


# -- link: engine and model side by side ---------------------------------------------------------
class LinkPair:
    """An engine link (SenderLink + ReceiverLink) and a model link with their wires."""

    def __init__(self, initial: int) -> None:
        self.sender, self.receiver = SenderLink("l", initial), ReceiverLink("l", initial)
        self.m_sender, self.m_receiver = SenderModel(initial), ReceiverModel(initial)
        # wires: receiver -> sender carries flows; sender -> receiver transfers ("T") and flows
        self.to_sender: deque[tuple[LinkFlow, Flow]] = deque()
        self.to_receiver: deque[tuple[LinkFlow | str, Flow | str]] = deque()
        self.log: list[str] = []

    # each operation is applied to both, and both answers are compared at once
    def grant(self, credit: int, drain: bool = False, echo: bool = False) -> None:
        self.log.append(f"grant({credit}, drain={drain}, echo={echo})")
        e = self.receiver.grant(credit, drain=drain, echo=echo)
        m = self.m_receiver.grant(credit, drain=drain, echo=echo)
        assert flow_tuple(e) == flow_tuple(m), self.where("receiver flow")
        self.to_sender.append((e, m))

    def flow_to_sender(self) -> None:
        if not self.to_sender:
            return
        self.log.append("flow arrives at sender")
        e, m = self.to_sender.popleft()
        e_reply, m_reply = self.sender.on_flow(e), self.m_sender.on_flow(m)
        assert flow_tuple(e_reply) == flow_tuple(m_reply), self.where("echo reply")
        if e_reply is not None and m_reply is not None:
            self.to_receiver.append((e_reply, m_reply))

    def send(self, count: int) -> int:
        sent = 0
        for _ in range(count):
            if self.m_sender.credit == 0:
                break
            self.sender.send_transfer()
            self.m_sender.send_transfer()
            self.to_receiver.append(("T", "T"))
            sent += 1
        self.log.append(f"send {sent}")
        return sent

    def finish_drain(self) -> None:
        self.log.append("finish_drain")
        e, m = self.sender.finish_drain(), self.m_sender.finish_drain()
        assert flow_tuple(e) == flow_tuple(m), self.where("drain answer")
        if e is not None and m is not None:
            self.to_receiver.append((e, m))

    def drain_with(self, messages: int) -> None:
        """A sender with ``messages`` ready: it sends what its credit allows, then finishes a
        drain (seed 004: "use all link credit ... by sending available messages")."""
        self.send(messages)
        self.finish_drain()

    def arrive_at_receiver(self, count: int) -> None:
        for _ in range(count):
            if not self.to_receiver:
                return
            e, m = self.to_receiver.popleft()
            if e == "T":
                self.log.append("transfer arrives")
                self.receiver.on_transfer()
                self.m_receiver.on_transfer()
            else:
                assert isinstance(e, LinkFlow) and isinstance(m, Flow)
                self.log.append("sender flow arrives")
                self.receiver.on_flow(e)
                self.m_receiver.on_flow(m)

    def set_available(self, available: int) -> None:
        self.log.append(f"available={available}")
        self.sender.available = available
        self.m_sender.available = available

    def where(self, what: str) -> str:
        return f"{what} differs after {self.log}"

    def compare(self) -> None:
        s, r, ms, mr = self.sender, self.receiver, self.m_sender, self.m_receiver
        assert (s.credit, s.delivery_count, s.available, s.drain) == (
            ms.credit,
            ms.delivery_count,
            ms.available,
            ms.drain,
        ), self.where("sender state")
        assert flow_tuple(s.state()) == flow_tuple(ms.state()), self.where("sender state()")
        assert (r.credit, r.delivery_count, r.available, r.drain) == (
            mr.credit,
            mr.delivery_count,
            mr.available,
            mr.drain,
        ), self.where("receiver state")


near_wrap = st.one_of(
    st.integers(SERIAL_MAX - 30, SERIAL_MAX),
    st.integers(0, 30),
    st.integers(0, SERIAL_MAX),
)
credits = st.one_of(
    st.integers(0, 12),
    st.integers(0, 300),
    st.sampled_from([SERIAL_MAX, SERIAL_MAX - 1, 1 << 31, (1 << 31) - 1, 2_000_000_000]),
)
link_ops = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), credits, st.booleans(), st.booleans()),
        st.tuples(st.just("to_sender")),
        st.tuples(st.just("send"), st.integers(0, 15)),
        st.tuples(st.just("drain_with"), st.integers(0, 15)),  # more / fewer / zero messages
        st.tuples(st.just("finish_drain")),
        st.tuples(st.just("to_receiver"), st.integers(1, 20)),
        st.tuples(st.just("available"), st.integers(0, 1_000)),
    ),
    max_size=40,
)


def run_link_ops(initial: int, ops: list[tuple[Any, ...]]) -> LinkPair:
    pair = LinkPair(initial)
    for op in ops:
        name, *args = op
        if name == "grant":
            pair.grant(args[0], drain=args[1], echo=args[2])
        elif name == "to_sender":
            pair.flow_to_sender()
        elif name == "send":
            pair.send(args[0])
        elif name == "drain_with":
            pair.drain_with(args[0])
        elif name == "finish_drain":
            pair.finish_drain()
        elif name == "to_receiver":
            pair.arrive_at_receiver(args[0])
        else:
            pair.set_available(args[0])
        pair.compare()
    # let every frame arrive: both ends must agree with each other and with the model
    while pair.to_sender or pair.to_receiver:
        pair.flow_to_sender()
        pair.arrive_at_receiver(len(pair.to_receiver))
        pair.compare()
    return pair


@FAST
@given(near_wrap, link_ops)
def test_link_engine_matches_model(initial: int, ops: list[tuple[Any, ...]]) -> None:
    pair = run_link_ops(initial, ops)
    # once the wires are empty the sender's view is the receiver's view (seed 004 figure)
    s, r = pair.m_sender, pair.m_receiver
    assert (s.delivery_count, s.credit) == (r.delivery_count, r.credit)


# -- the seeds' worked examples, on both ----------------------------------------------------------
def test_formula_example_20_plus_6_minus_21_is_5() -> None:
    # Seed 004: "link-credit = 20+6-21 = 5 (above formula)"
    assert sender_credit(20, 6, 21) == 5
    pair = LinkPair(20)
    pair.grant(3)
    pair.flow_to_sender()
    pair.grant(6)  # flow(delivery-count = 20, link-credit = 6) crosses ...
    pair.send(1)  # ... a transfer
    pair.arrive_at_receiver(1)
    pair.flow_to_sender()
    pair.compare()
    assert (pair.sender.credit, pair.sender.delivery_count) == (5, 21)
    assert (pair.receiver.credit, pair.receiver.delivery_count) == (5, 21)


def test_two_grants_of_50_give_50_not_100() -> None:
    # Seed 004: "the receiver will have 50 credits, not 100"
    pair = LinkPair(0)
    pair.grant(50)
    pair.grant(50)
    pair.flow_to_sender()
    pair.flow_to_sender()
    pair.compare()
    assert (pair.sender.credit, pair.receiver.credit) == (50, 50)


def test_figure_2_45_grant_6_again_after_3_received() -> None:
    # Seed 004: "granted 6 credits initially, and then sends another flow frame with
    # link-credit = 6 ... whenever it has received 3 messages" (5 sent: 23 + 6 - 25 = 4).
    pair = LinkPair(20)
    pair.grant(6)
    pair.flow_to_sender()
    pair.send(5)
    pair.arrive_at_receiver(3)
    pair.grant(6)
    pair.flow_to_sender()
    pair.compare()
    assert pair.sender.credit == sender_credit(23, 6, 25) == 4
    pair.arrive_at_receiver(2)
    pair.compare()
    assert pair.receiver.credit == 4


def test_delivery_count_wraps_after_4294967295() -> None:
    # Seed 004: "Adding 1 to 4,294,967,295 results in 0"; the sender may start there.
    pair = LinkPair(SERIAL_MAX)
    pair.grant(6)
    pair.flow_to_sender()
    pair.grant(6)  # delivery-count(rcv) = 4,294,967,295
    pair.send(2)
    pair.flow_to_sender()
    pair.compare()
    assert pair.sender.delivery_count == 1 and pair.sender.credit == 4


@pytest.mark.parametrize("messages", [0, 3, 10, 14])
def test_drain_with_fewer_equal_or_more_messages(messages: int) -> None:
    # Seed 004: "1. Advance the delivery-count by the remaining link-credit. 2. Set link-credit
    # to 0. 3. Send a flow frame to the receiver."
    pair = LinkPair(7)
    pair.grant(10, drain=True)
    pair.flow_to_sender()
    pair.drain_with(messages)
    pair.compare()
    sent = min(messages, 10)
    assert (pair.sender.credit, pair.sender.delivery_count) == (0, 17)
    flows = [e for e, _ in pair.to_receiver if isinstance(e, LinkFlow)]
    assert len(flows) == (1 if sent < 10 else 0)
    pair.arrive_at_receiver(len(pair.to_receiver))
    pair.compare()
    assert (pair.receiver.credit, pair.receiver.delivery_count) == (0, 17)


def test_drain_on_an_empty_source_is_answered_by_one_flow() -> None:
    # Seed 004: "If the source queue is empty, RabbitMQ will promptly reply with only a flow
    # frame." Drain with no credit left at all (every credit already in flight): one flow.
    pair = LinkPair(0)
    pair.grant(2)
    pair.flow_to_sender()
    pair.send(2)
    pair.grant(2, drain=True)
    pair.flow_to_sender()
    pair.compare()
    assert pair.sender.credit == 0
    pair.finish_drain()
    pair.finish_drain()
    assert [flow_tuple(e) for e, _ in pair.to_receiver if isinstance(e, LinkFlow)] == [
        (0, 2, 0, True, False)
    ]


def test_echo_stop_and_in_flight_transfers() -> None:
    # Seed 004 figure 2.46: flow(link-credit=0, echo=True): "In-flight transfers can still
    # arrive until the flow state is updated at the sender."
    pair = LinkPair(0)
    pair.set_available(4)
    pair.grant(3)
    pair.flow_to_sender()
    pair.send(2)
    pair.grant(0, echo=True)
    pair.arrive_at_receiver(1)
    pair.flow_to_sender()
    pair.compare()
    reply = pair.to_receiver[-1][0]
    assert flow_tuple(reply) == (0, 2, 4, False, False)  # type: ignore[arg-type]
    pair.arrive_at_receiver(2)
    pair.compare()
    assert (pair.receiver.credit, pair.receiver.available) == (0, 4)


def test_credit_lowered_below_in_flight_transfers() -> None:
    # Seed 004: "The receiver is allowed to dynamically increase or decrease the amount of link
    # credit". Lowered to 2 with 5 in flight: the sender may send nothing more (A1).
    pair = LinkPair(SERIAL_MAX - 2)
    pair.grant(8)
    pair.flow_to_sender()
    pair.send(5)
    pair.grant(2)
    pair.flow_to_sender()
    pair.compare()
    assert pair.sender.credit == 0
    pair.arrive_at_receiver(5)
    pair.compare()
    assert pair.receiver.credit == 0 and pair.receiver.delivery_count == 2


# -- session windows -------------------------------------------------------------------------------
class SessionPair:
    def __init__(self, sender_window: int, receiver_window: int, initial_id: int) -> None:
        self.snd = SessionEndpoint(
            "s", incoming_window=sender_window, initial_outgoing_id=initial_id
        )
        self.rcv = SessionEndpoint("r", incoming_window=receiver_window)
        self.m_snd = SessionModel(sender_window, initial_outgoing_id=initial_id)
        self.m_rcv = SessionModel(receiver_window)
        assert session_tuple(self.snd.begin()) == session_tuple(self.m_snd.begin())
        assert session_tuple(self.rcv.begin()) == session_tuple(self.m_rcv.begin())
        self.snd.on_begin(self.rcv.begin())
        self.rcv.on_begin(self.snd.begin())
        self.m_snd.on_begin(self.m_rcv.begin())
        self.m_rcv.on_begin(self.m_snd.begin())
        self.frames: deque[int] = deque()
        self.flows: deque[tuple[SessionFlow, SessionState]] = deque()
        self.log: list[str] = []

    def send_frames(self, count: int) -> None:
        sent = 0
        while sent < count and self.m_snd.can_send():
            assert self.snd.can_send(), self.where("can_send")
            e_id, m_id = self.snd.send_frame(), self.m_snd.send_frame()
            assert e_id == m_id, self.where("frame id")
            self.frames.append(e_id)
            sent += 1
        self.log.append(f"send {sent} frames")

    def receive(self, count: int) -> None:
        for _ in range(min(count, len(self.frames))):
            self.frames.popleft()
            self.rcv.receive_frame()
            self.m_rcv.receive_frame()
        self.log.append(f"receive {count}")

    def set_window(self, frames: int) -> None:
        e, m = self.rcv.set_incoming_window(frames), self.m_rcv.set_incoming_window(frames)
        assert session_tuple(e) == session_tuple(m), self.where("session flow")
        self.flows.append((e, m))
        self.log.append(f"window {frames}")

    def flow_to_sender(self) -> None:
        if self.flows:
            e, m = self.flows.popleft()
            self.snd.on_flow(e)
            self.m_snd.on_flow(m)
            self.log.append("flow arrives")

    def where(self, what: str) -> str:
        return f"{what} differs after {self.log}"

    def compare(self) -> None:
        for e, m in ((self.snd, self.m_snd), (self.rcv, self.m_rcv)):
            assert (
                e.next_outgoing_id,
                e.next_incoming_id,
                e.incoming_window,
                e.remote_incoming_window,
            ) == (
                m.next_outgoing_id,
                m.next_incoming_id,
                m.incoming_window,
                m.remote_incoming_window,
            ), self.where("session state")
            for frames in (1, 2, 3):
                assert e.can_send(frames) == m.can_send(frames), self.where("can_send")


windows = st.one_of(st.integers(0, 10), st.integers(0, 500))
session_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 12)),
        st.tuples(st.just("receive"), st.integers(0, 12)),
        st.tuples(st.just("window"), windows),
        st.tuples(st.just("to_sender")),
    ),
    max_size=40,
)


@FAST
@given(windows, near_wrap, session_ops)
def test_session_engine_matches_model(
    receiver_window: int, initial_id: int, ops: list[tuple[Any, ...]]
) -> None:
    pair = SessionPair(5_000, receiver_window, initial_id)
    pair.compare()
    for name, *args in ops:
        if name == "send":
            pair.send_frames(args[0])
        elif name == "receive":
            pair.receive(args[0])
        elif name == "window":
            pair.set_window(args[0])
        else:
            pair.flow_to_sender()
        pair.compare()


@given(st.integers(0, 100_000), st.sampled_from([512, 4096, 131_072]))
@settings(derandomize=True, max_examples=200)
def test_transfer_frames_match(size: int, max_frame_size: int) -> None:
    assert engine_transfer_frames(size, max_frame_size) == transfer_frames(size, max_frame_size)


# -- RabbitMQ policy: publisher top-up and the 339 bound -------------------------------------------
class PublisherRun:
    """A publisher on an engine Rabbit, with the server side's messages and confirms recorded
    (in the order the engine processed them) with the engine state after each."""

    def __init__(
        self,
        service_time_us: int,
        *,
        max_link_credit: int = 170,
        max_incoming_window: int = 400,
        size_bytes: int = 100,
        max_frame_size: int = 131_072,
        latency_us: int = 100,
        alarm_at: tuple[int, int] | None = None,
        service_changes: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.rabbit = Rabbit(service_time_us=service_time_us)
        self.connection = Amqp10Connection(
            self.rabbit.broker,
            ConnectionConfig(
                "c",
                AMQP_1_0,
                publishers=(PublisherConfig("p", "q", size_bytes=size_bytes),),
                max_frame_size=max_frame_size,
                latency_us=latency_us,
            ),
            RabbitPolicy(max_link_credit=max_link_credit, max_incoming_window=max_incoming_window),
        )
        self.record: list[tuple[str, tuple[int, ...]]] = []
        self.endpoint = self.connection.server.endpoint
        self.connection.start()
        self._spy_frames()
        self.server = self.connection.server.publishers["p"]
        self._spy()
        scheduler = self.rabbit.scheduler
        if alarm_at is not None:
            scheduler.call_at(alarm_at[0], self._alarm, True)
            scheduler.call_at(alarm_at[1], self._alarm, False)
        for when, service in service_changes:
            scheduler.call_at(when, self._service, service)

    def _service(self, service_time_us: int) -> None:
        self.rabbit.queue.service_time_us = service_time_us  # random confirm delays

    def _alarm(self, on: bool) -> None:
        if on:
            self.rabbit.broker.raise_alarm("memory")
        else:
            self.rabbit.broker.clear_alarm("memory")
        self.record.append(("alarm" if on else "clear", (self.endpoint.incoming_window,)))

    def link_state(self) -> tuple[int, ...]:
        link = self.server.link
        return (link.credit, link.delivery_count, self.server.unconfirmed)

    def _spy(self) -> None:
        server = self.server
        on_message, on_confirm = server.on_message, server._on_confirm

        # A queue that confirms at once does so inside on_message: the confirm is recorded
        # between "message" (entry) and "received" (exit, the state both must agree on).
        def message(frame: Any) -> None:
            if not frame.final:  # RabbitMQ counts and routes a message at its last frame
                on_message(frame)
                return
            self.record.append(("message", self.link_state()))
            on_message(frame)
            self.record.append(("received", self.link_state()))

        def confirm(transfer: Any) -> None:
            on_confirm(transfer)
            self.record.append(("confirm", self.link_state()))

        server.on_message = message  # type: ignore[method-assign]
        server._on_confirm = confirm  # type: ignore[method-assign]

    def _spy_frames(self) -> None:
        wire = self.connection.to_broker
        read = wire.reader
        assert read is not None

        def reading(frame: Frame) -> None:
            if isinstance(frame, TransferFrame):
                # the window as left by the previous frame (re-open included), then this frame
                self.record.append(("frame", (self.endpoint.incoming_window,)))
            read(frame)

        wire.reader = reading


def check_publisher(run: PublisherRun, max_link_credit: int) -> int:
    """Replay the engine's server-side sequence on the model; returns the peak unconfirmed."""
    model = RabbitPublisherModel(0, max_link_credit)
    model.attach()
    assert run.link_state()[:2] == (max_link_credit, 0) or run.record, "initial grant"
    peak = 0
    inside = False
    for i, (kind, state) in enumerate(run.record):
        if kind == "message":
            model.on_transfer()
            inside = True
            continue
        if kind == "confirm":
            model.on_confirm()
            if inside:
                continue  # nested in the message: compared at its exit
        elif kind == "received":
            inside = False
        else:
            continue
        expected = (model.link.credit, model.link.delivery_count, model.unconfirmed)
        assert state == expected, f"step {i} ({kind}): engine {state} != model {expected}"
        peak = max(peak, model.unconfirmed)
        assert model.unconfirmed <= max_unconfirmed(max_link_credit)
    return peak


def check_window(run: PublisherRun, max_window: int) -> None:
    model = RabbitSessionWindowModel(max_window)
    for i, (kind, state) in enumerate(run.record):
        if kind == "frame":
            assert state[0] == model.window, f"step {i}: window {state[0]} != {model.window}"
            model.on_frame()
        elif kind == "alarm":
            model.raise_alarm("memory")
            assert state[0] == model.window == 0
        elif kind == "clear":
            model.clear_alarm("memory")
            assert state[0] == model.window, f"step {i}: window after clear"
    reopened = [
        e for e in run.rabbit.log.of_type("session_window") if "reopened" in (e["detail"] or "")
    ]
    assert len(reopened) == model.reopened


def test_publisher_reaches_339_unconfirmed_and_no_more() -> None:
    # DESIGN §2: 170 credits, topped up at <= 85 with < 170 unconfirmed: at most 2 x 170 - 1.
    run = PublisherRun(3_000)
    run.rabbit.run_for(1_000_000)
    assert check_publisher(run, 170) == 339
    check_window(run, 400)
    outstanding = [e["outstanding"] for e in run.rabbit.log.of_type("enqueue")]
    assert max(outstanding) == 339


def test_publisher_with_a_queue_that_never_confirms_gets_170_plus_85() -> None:
    run = PublisherRun(10**12)
    run.rabbit.run_for(1_000_000)
    assert check_publisher(run, 170) == 255
    assert run.rabbit.queue.stats.enqueued == 255


def test_three_frame_messages_count_three_frames_and_reopen_at_200() -> None:
    # Seed 004: "for incoming-window, the unit is a transfer frame"; re-opened at 200 (A11).
    run = PublisherRun(10**12, size_bytes=1_025, max_frame_size=512)
    run.rabbit.run_for(1_000_000)
    check_publisher(run, 170)
    check_window(run, 400)
    assert run.endpoint.next_incoming_id == 3 * 255
    ids = [
        e["detail"] for e in run.rabbit.log.of_type("session_window") if "reopened" in e["detail"]
    ]
    assert len(ids) == (3 * 255) // 200


@settings(derandomize=True, max_examples=25, deadline=None)
@given(
    service=st.integers(0, 4_000),
    max_link_credit=st.sampled_from([170, 10, 11, 3]),
    max_window=st.sampled_from([400, 20, 7]),
    size=st.sampled_from([100, 1_025, 3_000]),
    latency=st.sampled_from([100, 10, 1_000]),
    changes=st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 5_000)), max_size=4).map(
        tuple
    ),
    alarm=st.none() | st.tuples(st.integers(0, 100_000), st.integers(1, 100_000)),
)
def test_rabbit_publisher_policy_matches_model(
    service: int,
    max_link_credit: int,
    max_window: int,
    size: int,
    latency: int,
    changes: tuple[tuple[int, int], ...],
    alarm: tuple[int, int] | None,
) -> None:
    alarm_at = None if alarm is None else (alarm[0], alarm[0] + alarm[1])
    run = PublisherRun(
        service,
        max_link_credit=max_link_credit,
        max_incoming_window=max_window,
        size_bytes=size,
        max_frame_size=512,
        latency_us=latency,
        alarm_at=alarm_at,
        service_changes=changes,
    )
    run.rabbit.run_for(300_000)
    check_publisher(run, max_link_credit)
    check_window(run, max_window)
    assert run.connection.server.error is None


# -- RabbitMQ policy: at most 256 queue credits per consumer ---------------------------------------
@settings(derandomize=True, max_examples=20, deadline=None)
@given(
    prefill=st.sampled_from([0, 50, 600, 2_000]),
    credit=st.sampled_from([5, 300, 1_000, SERIAL_MAX]),
    client_window=st.sampled_from([3, 100, 10_000]),
    grants=st.lists(
        st.tuples(st.integers(0, 50_000), st.sampled_from([0, 1, 10, 300, 5_000]), st.booleans()),
        max_size=4,
    ),
    fills=st.lists(st.tuples(st.integers(0, 50_000), st.sampled_from([1, 10, 300])), max_size=4),
)
def test_a_queue_sees_at_most_256_credits_per_consumer(
    prefill: int,
    credit: int,
    client_window: int,
    grants: list[tuple[int, int, bool]],
    fills: list[tuple[int, int]],
) -> None:
    # Seed 004: "the queue will only ever see up to 256 credits for a given consumer. Once these
    # 256 messages have been sent out by the server session process, the server session process
    # will grant the next batch of 256 credits to the queue."
    rabbit = Rabbit(prefill=prefill)
    connection = rabbit.connect(
        consumers=(ConsumerConfig("c1", "q", credit=credit, top_up_below=0),),
        client_incoming_window=client_window,
    )
    client, server = connection.consumers["c1"], connection.server.consumers["c1"]
    for when, amount, drain in grants:
        rabbit.scheduler.call_at(when, lambda a=amount, d=drain: client.grant(a, drain=d))
    for when, count in fills:
        rabbit.scheduler.call_at(when, rabbit.fill, count)
    while (due := rabbit.scheduler.next_due_us()) is not None and due <= 100_000:
        rabbit.scheduler.run_until(due)
        assert queue_credit_ok(server.queue_credit)
        # a batch is granted only once the previous one has been sent out
        assert queue_credit_ok(server.queue_credit + len(server.buffered))
    assert connection.server.error is None


# keep ModelError / ProtocolError exported names used (documenting the failure modes)
def test_both_refuse_a_transfer_without_credit() -> None:
    pair = LinkPair(0)
    with pytest.raises(ProtocolError):
        pair.sender.send_transfer()
    with pytest.raises(ModelError):
        pair.m_sender.send_transfer()


# -- once a disagreement (S1), fixed in the engine: a window set again over frames in flight ------
# Seed 004: next-incoming-id / next-outgoing-id "ensure that the windows are computed correctly on
# the other side when transfer frames are sent in parallel with flow frames"; clients can "Close
# its session incoming-window" at any time. A frame sent under a window the receiver has since
# shrunk, and shrunk again, is no window-violation.


def _session(window: int) -> tuple[SessionEndpoint, SessionEndpoint]:
    sender = SessionEndpoint("s", incoming_window=100)
    receiver = SessionEndpoint("r", incoming_window=window)
    sender.on_begin(receiver.begin())
    receiver.on_begin(sender.begin())
    return sender, receiver


def test_session_window_closed_twice_over_a_frame_in_flight() -> None:
    # window 1; the sender sends its 1 frame; the receiver closes its window (0), then sends
    # another flow with window 0 before the frame arrives. Model: accepted, window 0.
    sender, receiver = _session(1)
    m_sender, m_receiver = SessionModel(100), SessionModel(1)
    m_sender.on_begin(m_receiver.begin())
    m_receiver.on_begin(m_sender.begin())
    sender.send_frame()
    m_sender.send_frame()
    for _ in range(2):
        receiver.set_incoming_window(0)
        m_receiver.set_incoming_window(0)
    m_receiver.receive_frame()
    assert (m_receiver.next_incoming_id, m_receiver.incoming_window) == (1, 0)
    receiver.receive_frame()  # engine: window-violation
    assert (receiver.next_incoming_id, receiver.incoming_window) == (1, 0)


def test_session_window_closed_then_reopened_to_1_over_3_frames_in_flight() -> None:
    # window 3; 3 frames in flight; the receiver sets its window to 0, then to 1 (its limit is
    # then next-incoming-id 0 + 1, while the sender used 0 + 3). Model: all 3 accepted, window 0.
    sender, receiver = _session(3)
    for _ in range(3):
        sender.send_frame()
    receiver.set_incoming_window(0)
    receiver.set_incoming_window(1)
    for _ in range(3):
        receiver.receive_frame()  # engine: window-violation at the 2nd frame
    assert (receiver.next_incoming_id, receiver.incoming_window) == (3, 0)


def test_session_window_closed_before_a_send_and_again_after_it() -> None:
    # window 1; the receiver closes it (flow not yet at the sender), the sender sends 1 frame under
    # its window of 1, the receiver closes it again; the frame arrives. Model: accepted.
    sender, receiver = _session(1)
    receiver.set_incoming_window(0)
    sender.send_frame()
    receiver.set_incoming_window(0)
    receiver.receive_frame()  # engine: window-violation

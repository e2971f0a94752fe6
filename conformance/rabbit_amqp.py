"""RabbitMQ 4.0's AMQP 1.0 flow control seen on the wire: a python-qpid-proton publisher and
the frames the broker sends it (seeds 002 and 004: 170 link credits topped up at 85, a session
incoming window of 400 frames refreshed every 200, credit withheld while the queue has not
confirmed 170, the window closed by a memory alarm).

The frames come from proton's own frame trace (``Transport.trace(TRACE_FRM)`` with a tracer
callback), parsed into :class:`Frame`\\ s: what the broker told the client, not what the client's
API makes of it. The publisher runs in a thread of its own, so that the caller can act on the
broker meanwhile (suspend a queue, raise an alarm) with ``rabbitmqctl``, which takes ~1 s a call.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.brokers import LOOPBACK, BrokerNotAsExpected, RabbitBroker
from conformance.rabbit import blocking_connection

#: How often a publisher held by a closed session window looks at it again (the broker's flow
#: that opens it names no link, so proton tells the application nothing).
WINDOW_POLL_S = 0.01
#: One frame of proton's trace: direction (``<-`` received), performative, its fields.
_FRAME = re.compile(r"(->|<-) @([a-z-]+)\(\d+\)\s*\[(.*)\]")
_FIELD = re.compile(r"([a-z-]+)=(0x[0-9a-f]+|\d+|true|false|:[\w:-]+|\"[^\"]*\")")


@dataclass(frozen=True)
class Frame:
    at_s: float  # since its client started
    received: bool  # sent by the broker
    performative: str
    fields: dict[str, int | str]
    text: str = ""

    def number(self, name: str) -> int | None:
        value = self.fields.get(name)
        return value if isinstance(value, int) else None


def parse_frame(message: str, at_s: float) -> Frame | None:
    """The frame a trace line shows, or None for a line that is not one (headers, SASL)."""
    found = _FRAME.search(message)
    if found is None:
        return None
    direction, performative, body = found.groups()
    fields: dict[str, int | str] = {}
    for name, value in _FIELD.findall(body):
        if value.startswith("0x"):
            fields.setdefault(name, int(value, 16))
        elif value.isdigit():
            fields.setdefault(name, int(value))
        else:
            fields.setdefault(name, value)
    text = body if performative in ("end", "detach", "close") else ""  # their errors
    return Frame(at_s, direction == "<-", performative, fields, text)


@dataclass
class TracedRun:
    """The frames a client's connection carried both ways, as proton traced them."""

    frames: list[Frame] = field(default_factory=list)
    #: The transfer-id past the last the broker's session takes, as its latest flow (or begin)
    #: set its incoming window.
    window_end: int = 0

    def received(self, performative: str) -> list[Frame]:
        return [f for f in self.frames if f.received and f.performative == performative]

    def trace_into(self, event: Any, started: float) -> None:
        """Have the connection of proton's ``event`` (its ``on_connection_bound``) trace its
        frames into this run, stamped in seconds since ``started``."""
        from proton import Transport

        def trace(_transport: Any, message: str) -> None:
            frame = parse_frame(message, time.monotonic() - started)
            if frame is None:
                return
            self.frames.append(frame)
            window = frame.number("incoming-window")
            if frame.received and window is not None:
                self.window_end = (frame.number("next-incoming-id") or 0) + window

        event.transport.trace(Transport.TRACE_FRM)
        event.transport.tracer = trace


@dataclass
class PublishRun(TracedRun):
    """What one publisher did and saw: its messages, the outcomes, the frames both ways."""

    sent: int = 0
    accepted: int = 0
    errors: list[str] = field(default_factory=list)
    stop_asked: bool = False
    #: Per queue, when each of its messages was accepted (seconds since the publisher started).
    accepted_at: dict[str, list[float]] = field(default_factory=dict)

    def accepted_rate(self, queue: str, start_s: float, end_s: float) -> float:
        """The queue's messages accepted a second from ``start_s`` to ``end_s``."""
        times = self.accepted_at.get(queue, [])
        return sum(start_s <= at < end_s for at in times) / (end_s - start_s)

    def link_flows(self, queue: str | None = None) -> list[Frame]:
        """The broker's flows that grant a publisher link credit (``queue``: its link's)."""
        flows = [f for f in self.received("flow") if f.number("link-credit") is not None]
        if queue is None:
            return flows
        handle = self.handles().get(queue)
        return [f for f in flows if f.number("handle") == handle]

    def handles(self) -> dict[str, int]:
        """Each queue's link handle, from the attach frames the client sent."""
        found = {}
        for f in self.frames:
            address, handle = f.fields.get("address"), f.number("handle")
            if f.performative == "attach" and not f.received and isinstance(address, str):
                found[address.strip('"').removeprefix("/queues/")] = handle or 0
        return found

    def window_flows(self) -> list[Frame]:
        """The broker's flows of the session alone (its incoming window)."""
        return [f for f in self.received("flow") if f.number("handle") is None]

    def transfers_between(self, start_s: float, end_s: float) -> int:
        return sum(
            1
            for f in self.frames
            if not f.received and f.performative == "transfer" and start_s < f.at_s < end_s
        )


def publish(
    broker: RabbitBroker,
    queue: str,
    *,
    count: int,
    body_size: int = 100,
    pace_s: float = 0.0,
    run_s: float = 30.0,
    actions: Iterable[tuple[float, Callable[[PublishRun], None]]] = (),
    end_after_actions_s: float | None = None,
    beside: Sequence[str] = (),
) -> PublishRun:
    """Publish ``count`` messages to the existing ``queue`` (address ``/queues/<queue>``),
    unsettled, as fast as the credit and the session window allow (``pace_s``: at most one per
    ``pace_s``), until all are accepted or ``run_s`` has passed; ``beside``: more queues, a
    sender each on the same session, sent to in turn while each has credit (``count`` is the
    total). ``actions`` run in this thread at their times (seconds since the publisher
    started) while it publishes, each given the run so far (what the broker has sent); with
    ``end_after_actions_s`` (and ``pace_s``), the publisher stops that long after the last."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    run = PublishRun()
    started = time.monotonic()
    body = b"x" * body_size
    url = f"amqp://guest:guest@{LOOPBACK}:{broker.port}"

    # The publisher keeps to the broker's incoming window itself (``run.window_end``, from
    # the traced frames; transfer-ids start at 0, one per message). Proton 0.40 reads a window
    # of 0 that comes while transfers of its own are on the way as a window of ~2**32 and sends
    # on (proton-c's flow handling computes the remaining window as next-incoming-id +
    # incoming-window - its transfers sent, unsigned: below zero it wraps), until RabbitMQ ends
    # the session (amqp:session:window-violation, 400 transfers past it).

    class Publisher(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.senders: list[Any] = []
            self.connection: Any = None
            self.next_at = 0.0
            self.end_timer: Any = None
            self.closing = False

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, sasl_enabled=True, allowed_mechs="PLAIN")
            self.senders = [
                event.container.create_sender(self.connection, f"/queues/{name}")
                for name in (queue, *beside)
            ]
            self.end_timer = event.container.schedule(run_s, self)

        def on_connection_bound(self, event: Any) -> None:
            run.trace_into(event, started)

        def on_timer_task(self, event: Any) -> None:  # the end of the run
            self._close()

        def _close(self) -> None:
            # Once closing, nothing more is sent: a closed sender may still show credit.
            self.closing = True
            if self.connection is not None:
                self.connection.close()
            if self.end_timer is not None:
                self.end_timer.cancel()  # the container runs until its last timer

        def on_sendable(self, event: Any) -> None:
            self._send(event)

        def _send(self, event: Any) -> None:
            if run.stop_asked and not self.closing:
                self._close()
            if self.closing:
                return
            while run.sent < count:
                ready = [sender for sender in self.senders if sender.credit > 0]
                if not ready:
                    return
                for sender in ready:
                    if run.sent >= run.window_end:  # the session window is closed: look again
                        event.container.schedule(WINDOW_POLL_S, Paced(self))
                        return
                    now = time.monotonic()
                    if pace_s and now < self.next_at:
                        event.container.schedule(self.next_at - now, Paced(self))
                        return
                    sender.send(Message(body=body, durable=True))
                    run.sent += 1
                    self.next_at = now + pace_s

        def on_accepted(self, event: Any) -> None:
            run.accepted += 1
            name = event.link.target.address.removeprefix("/queues/")
            run.accepted_at.setdefault(name, []).append(time.monotonic() - started)
            if run.accepted >= count:
                self._close()

        def on_rejected(self, event: Any) -> None:
            run.errors.append(str(event.delivery.remote.condition))

        def on_transport_error(self, event: Any) -> None:
            run.errors.append(str(event.transport.condition))

    class Paced:
        def __init__(self, publisher: Publisher) -> None:
            self.publisher = publisher

        def on_timer_task(self, event: Any) -> None:
            self.publisher._send(event)

    container = Container(Publisher())
    thread = threading.Thread(target=container.run, name="rabbit-amqp-publisher", daemon=True)
    thread.start()
    for at_s, action in sorted(actions, key=lambda pair: pair[0]):
        time.sleep(max(0.0, at_s - (time.monotonic() - started)))
        action(run)
    if end_after_actions_s is not None:
        time.sleep(end_after_actions_s)
        run.stop_asked = True  # read by the publisher's next paced send, in its thread
    thread.join(run_s + 30)
    if thread.is_alive():
        raise BrokerNotAsExpected(f"the AMQP 1.0 publisher to {queue} did not end")
    return run


@dataclass
class ConsumeRun(TracedRun):
    """What one consumer took and the frames both ways."""

    delivered: int = 0


def consume(
    broker: RabbitBroker, queue: str, *, credit: int, drain: bool = False, idle_s: float = 1.0
) -> ConsumeRun:
    """Attach a consumer to ``queue`` and, once the broker's attach has come, grant ``credit``
    once (``drain``: asking the broker to use it up or give it back); accept what comes until
    nothing has come for ``idle_s``. Granted before the broker's attach, the grant would be
    counted from delivery-count 0 against the broker's 4294967291: 5 more than asked."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    run = ConsumeRun()
    started = time.monotonic()
    url = f"amqp://guest:guest@{LOOPBACK}:{broker.port}"

    class Consumer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=True)
            self.last = time.monotonic()
            self.connection: Any = None

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, sasl_enabled=True, allowed_mechs="PLAIN")
            event.container.create_receiver(self.connection, f"/queues/{queue}")
            event.container.schedule(idle_s, self)

        def on_connection_bound(self, event: Any) -> None:
            run.trace_into(event, started)

        def on_link_opened(self, event: Any) -> None:
            if drain:
                event.receiver.drain(credit)
            else:
                event.receiver.flow(credit)
            self.last = time.monotonic()

        def on_message(self, event: Any) -> None:
            run.delivered += 1
            self.last = time.monotonic()

        def on_timer_task(self, event: Any) -> None:
            quiet = time.monotonic() - self.last
            if quiet >= idle_s:
                self.connection.close()
            else:
                event.container.schedule(idle_s - quiet, self)

    Container(Consumer()).run()
    return run


def fill_queue(broker: RabbitBroker, queue: str, count: int, body_size: int = 100) -> None:
    """Put ``count`` messages into ``queue`` over AMQP 0.9.1 (pika), in confirm mode."""
    with blocking_connection(broker) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for _ in range(count):
            channel.basic_publish("", queue, b"x" * body_size)


def suspend_queue(broker: RabbitBroker, queue: str, *, resume: bool = False) -> None:
    """Suspend (or resume) the process of a classic queue: it takes nor confirms anything
    meanwhile, as a queue that cannot keep up, for as long as the caller says."""
    verb = "resume" if resume else "suspend"
    broker.ctl_ok(
        "eval",
        f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{queue}">>)), '
        f"sys:{verb}(amqqueue:get_pid(Q)).",
    )


def memory_alarm(broker: RabbitBroker, *, raised: bool) -> None:
    """Raise the node's memory alarm (a watermark far below its use) or clear it."""
    broker.ctl_ok("set_vm_memory_high_watermark", "0.0001" if raised else "0.4")


def grants(run: PublishRun, queue: str | None = None) -> list[tuple[int, int]]:
    """The broker's link-credit grants (``queue``: to its link): (its delivery-count when it
    granted, the link-credit)."""
    return [
        (f.number("delivery-count") or 0, f.number("link-credit") or 0)
        for f in run.link_flows(queue)
    ]


def credit_left_at_grants(found: list[tuple[int, int]]) -> list[int]:
    """For each grant after the first, the credit the publisher had left by the broker's count
    when it was made (the previous grant's limit minus the delivery-count)."""
    return [
        previous_count + previous_credit - count
        for (previous_count, previous_credit), (count, _) in itertools.pairwise(found)
    ]


def wait_for_window(run: PublishRun, window: int, *, timeout_s: float) -> float:
    """Wait until the broker has announced a session incoming window of ``window`` in ``run``
    (being filled by its publisher's thread); the seconds it came at."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for frame in list(run.frames):
            if frame.received and frame.number("incoming-window") == window:
                return frame.at_s
        time.sleep(0.05)
    raise BrokerNotAsExpected(f"no incoming-window of {window} in {timeout_s:g} s")

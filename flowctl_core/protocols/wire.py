"""Frames, one direction of a connection, and a client's single writer, on the virtual clock.

A :class:`Wire` carries frames in order with a one-way latency. Its far end may stop reading
(RabbitMQ blocks an AMQP 0.9.1 connection's reader); unread frames then fill the socket buffer
and a writer facing a full buffer waits: TCP back-pressure. A :class:`FrameWriter` is the client
library's writer: one frame every ``frame_cost_us``, taking turns among the links that have one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from flowctl_core.clock import Scheduler
from flowctl_core.protocols.amqp10 import LinkFlow, SessionFlow


@dataclass(slots=True)
class TransferFrame:
    """One frame of a message (AMQP 1.0 transfer, 0.9.1 basic.publish / basic.deliver)."""

    link: str
    message_id: int
    size_bytes: int
    final: bool = True  # False while more frames of the same message follow


@dataclass(slots=True)
class FlowFrame:
    """An AMQP 1.0 flow: session fields always, link fields when it concerns one link."""

    link: str | None
    link_flow: LinkFlow | None
    session_flow: SessionFlow | None
    #: Not on the wire: the credit a receiving application keeps, which it counts the messages
    #: it holds against (its link-credit is this less them). Logged beside the flow, as what
    #: the receiver set (``detail.credit_window``), so advice reads the knob, not what was left.
    credit_window: int | None = None


@dataclass(slots=True)
class AckFrame:
    """A consumer's settlement (0.9.1 basic.ack, 1.0 disposition) of ``count`` deliveries."""

    link: str
    count: int = 1


@dataclass(slots=True)
class ConfirmFrame:
    """The broker confirming one published message to its publisher."""

    link: str
    message_id: int


Frame = TransferFrame | FlowFrame | AckFrame | ConfirmFrame
FrameReader = Callable[[Frame], None]


class FrameSource(Protocol):
    def next_frame(self) -> Frame | None:
        """The frame this source would write now, already accounted for; None when it has none."""


class ControlFrames:
    """Flows and acknowledgements waiting for the writer, in the order they were produced."""

    __slots__ = ("_frames",)

    def __init__(self) -> None:
        self._frames: deque[Frame] = deque()

    def push(self, frame: Frame) -> None:
        self._frames.append(frame)

    def next_frame(self) -> Frame | None:
        return self._frames.popleft() if self._frames else None


class Wire:
    """One direction of a TCP connection: ordered, ``latency_us`` long, optionally bounded."""

    def __init__(
        self, scheduler: Scheduler, latency_us: int, buffer_frames: int | None = None
    ) -> None:
        if latency_us < 0:
            raise ValueError(f"latency_us must be >= 0, got {latency_us}")
        if buffer_frames is not None and buffer_frames < 1:
            raise ValueError(f"buffer_frames must be >= 1, got {buffer_frames}")
        self.scheduler = scheduler
        self.latency_us = latency_us
        self.buffer_frames = buffer_frames
        self.reader: FrameReader | None = None
        self.paused = False
        self._arrived: deque[Frame] = deque()  # arrived, waiting for a paused reader
        self._unread = 0  # written and not yet read: in flight plus arrived
        self._writable_listeners: list[Callable[[], None]] = []

    @property
    def writable(self) -> bool:
        return self.buffer_frames is None or self._unread < self.buffer_frames

    def on_writable(self, listener: Callable[[], None]) -> None:
        self._writable_listeners.append(listener)

    def write(self, frame: Frame) -> None:
        self._unread += 1
        self.scheduler.call_later(self.latency_us, self._arrive, frame)

    def _arrive(self, frame: Frame) -> None:
        if self.paused or self._arrived:
            self._arrived.append(frame)
        else:
            self._read(frame)

    def _read(self, frame: Frame) -> None:
        self._unread -= 1
        assert self.reader is not None, "a wire needs a reader before frames arrive"
        self.reader(frame)
        if self._writable_listeners and self.buffer_frames is not None:
            for listener in self._writable_listeners:
                listener()

    def pause(self) -> None:
        """Stop reading: frames pile up in the socket buffer."""
        self.paused = True

    def resume(self) -> None:
        # Read on the next tick: resume is called from inside queue callbacks, and reading
        # publishes there would re-enter the queue.
        self.paused = False
        self.scheduler.call_soon(self._read_arrived)

    def _read_arrived(self) -> None:
        arrived = self._arrived
        while arrived and not self.paused:
            self._read(arrived.popleft())


class FrameWriter:
    """A client's writer: writes one frame per ``frame_cost_us``, round-robin over its sources.

    The cost is the client's own limit ("publishes as fast as it can"); with it, links sharing a
    connection share its throughput, and a link without credit leaves its turn to the others.
    """

    def __init__(self, scheduler: Scheduler, wire: Wire, frame_cost_us: int) -> None:
        if frame_cost_us < 1:
            raise ValueError(f"frame_cost_us must be >= 1, got {frame_cost_us}")
        self.scheduler = scheduler
        self.wire = wire
        self.frame_cost_us = frame_cost_us
        self.sources: list[FrameSource] = []
        self._turn = 0
        self._step_scheduled = False
        self._free_at_us = 0
        wire.on_writable(self.wake)

    def add_source(self, source: FrameSource) -> None:
        self.sources.append(source)
        self.wake()

    def wake(self) -> None:
        """Something may have a frame to write: take a step when the writer is free."""
        if not self._step_scheduled:
            self._step_scheduled = True
            scheduler = self.scheduler
            scheduler.call_at(max(scheduler.now_us, self._free_at_us), self._step)

    def _step(self) -> None:
        self._step_scheduled = False
        if not self.wire.writable:
            return  # the wire wakes us when the far end reads again
        sources = self.sources
        count = len(sources)
        for offset in range(count):
            index = (self._turn + offset) % count
            frame = sources[index].next_frame()
            if frame is not None:
                self._turn = index + 1
                self.wire.write(frame)
                self._free_at_us = self.scheduler.now_us + self.frame_cost_us
                self.wake()
                return
        # Idle: sources call wake() when they get something to write.

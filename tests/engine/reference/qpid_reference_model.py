"""A plain reference model of Qpid queue flow control, written from the documents only.

Sources: DESIGN.md §2 ("Queue flow limits (Qpid, seeds 000/001)") and §3 (the event log), seed 000
(QPID-2935 design note) and seed 001 (C++ broker "Producer Flow Control" chapter). Nothing here is
taken from ``flowctl_core``; the engine is checked against this model by
``tests/engine/test_flowlimit_differential.py``.

One broker: queues with limits and flow thresholds, producers with capacity windows sending to one
queue or to several (fanout), consumers that dequeue from the head, and a virtual clock.

Assumptions where the documents are silent (each is marked ``ASSUMPTION`` where it is used):

A1. Explicit thresholds replace the defaults entirely (a declare that gives stop keys gets no
    default thresholds for the other unit). The differential generator always gives all four keys
    when it gives any, so this only matters for hand-written cases. §2's error list ("resume >
    stop") is applied to explicit values even when both stops are 0; only 0 / 0 / 0 / 0 is the
    plain "flow control off" (the engine disagrees at declare time, see the xfail in the tests).
A2. A ring or ring-strict queue evicts from the head until the new message fits; an eviction is a
    dequeue for flow control (it can turn flow OFF and releases the evicted message if held).
    Ring-strict behaves as ring: the model has no acquired-but-unacknowledged messages, which is
    what would make ring-strict refuse instead of evict. A message that could not fit even in the
    empty queue (size > max_size) is rejected without evicting anything.
A3. Reject works per destination queue: a fanout transfer that one queue rejects is still enqueued
    on the others and completes when none of them holds it. A queue that rejects a message does
    not hold it (it never received it), even while ON.
A4. A threshold change is applied as given (all four values, resume 0 -> stop) and causes no
    transition by itself: flow goes ON only on an enqueue and OFF only on a dequeue (§2 wording).
    So a queue whose flow control is switched off while ON goes OFF on its next dequeue ("every
    non-zero resume threshold is satisfied" holds when there is none).
A5. Event layout: enqueue / dequeue / ring_evicted rows carry the flow state the queue had before
    a transition that event causes; the transition itself is its own ``flow_stopped`` /
    ``flow_resumed`` row right after it. Releases (``transfer_completed``) follow the
    ``flow_resumed`` row, in arrival order. Rows carry the producer's ``outstanding`` at the moment
    the row is written.
A6. Message ids are assigned by the broker in arrival order (1, 2, ...), rejected transfers
    included. A producer's queued sends go out as soon as its window has room; a window that
    opens because of a completion is refilled by a pump that runs at the same virtual time, after
    the current operation (pumps run in the order the windows opened).
A7. The broker's default queue limit (seed 001 "default-queue-limit") is the max_size of every
    queue declared without ``qpid.max_size``, ring queues included.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

ROUNDING_HALF = Fraction(1, 2)


class ModelConfigError(ValueError):
    """A declaration or threshold change the documents call an error."""


def _ratio(value: float) -> Fraction:
    # "fractional ratios are exact": 0.7 % means 7/1000, not the nearest binary float.
    return Fraction(str(value))


def default_pair(maximum: int, stop_ratio: float, resume_ratio: float) -> tuple[int, int]:
    """§2: stop = round(max * stop% / 100) (half up), resume = floor(max * resume% / 100)."""
    if not maximum:
        return 0, 0
    stop = math.floor(maximum * _ratio(stop_ratio) / 100 + ROUNDING_HALF)
    resume = math.floor(maximum * _ratio(resume_ratio) / 100)
    return normalise_pair(stop, resume)


def normalise_pair(stop: int, resume: int) -> tuple[int, int]:
    """§2: "A resume of 0 with a non-zero stop means resume = stop"."""
    if stop and not resume:
        return stop, stop
    return stop, resume


@dataclass(frozen=True)
class Thresholds:
    stop_count: int = 0
    resume_count: int = 0
    stop_size: int = 0
    resume_size: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.stop_count or self.stop_size)

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.stop_count, self.resume_count, self.stop_size, self.resume_size)


def check_thresholds(th: Thresholds, max_count: int, max_size: int) -> Thresholds:
    """Normalise and validate (§2 "Errors: resume > stop, stop > max (stop == max is allowed)").

    Stops all 0 are no thresholds at all (§2 "Setting both stop values to 0 disables flow control
    on that queue"), whatever resume comes with them: the disabling rule is the specific one, and
    Qpid's broker reads it so (QueueFlowLimit::createLimit returns no limit before looking at the
    resume values)."""
    if min(th.as_tuple()) >= 0 and th.stop_count == 0 and th.stop_size == 0:
        return Thresholds(0, 0, 0, 0)
    sc, rc = normalise_pair(th.stop_count, th.resume_count)
    ss, rs = normalise_pair(th.stop_size, th.resume_size)
    if min(sc, rc, ss, rs) < 0:
        raise ModelConfigError("negative threshold")
    if rc > sc:
        raise ModelConfigError("flow_resume_count exceeds flow_stop_count")
    if rs > ss:
        raise ModelConfigError("flow_resume_size exceeds flow_stop_size")
    if max_count and sc > max_count:
        raise ModelConfigError("flow_stop_count exceeds max_count")
    if max_size and ss > max_size:
        raise ModelConfigError("flow_stop_size exceeds max_size")
    return Thresholds(sc, rc, ss, rs)


def check_ratios(stop_ratio: float, resume_ratio: float) -> None:
    """§2: "a ratio over 100, or a resume ratio above the stop ratio" are errors."""
    for ratio in (stop_ratio, resume_ratio):
        if not 0 <= _ratio(ratio) <= 100:
            raise ModelConfigError(f"ratio {ratio} outside 0..100")
    if _ratio(resume_ratio) > _ratio(stop_ratio):
        raise ModelConfigError("resume ratio above the stop ratio")


@dataclass
class Transfer:
    message_id: int
    producer: Producer
    size: int
    receipt_us: int
    holders: set[str] = field(default_factory=set)
    routing: bool = True
    completed: bool = False


@dataclass
class Producer:
    name: str
    capacity: int | None  # None: no window (a client without flow control)
    route: tuple[str, ...]
    backlog: deque[int] = field(default_factory=deque)
    outstanding: int = 0
    sent: int = 0
    completed: int = 0
    pump_scheduled: bool = False
    uncompleted: dict[int, Transfer] = field(default_factory=dict)

    @property
    def window_open(self) -> bool:
        return self.capacity is None or self.outstanding < self.capacity


@dataclass
class Queue:
    name: str
    max_count: int
    max_size: int
    policy: str
    thresholds: Thresholds
    stopped: bool = False
    stopped_count: int = 0
    messages: deque[Transfer] = field(default_factory=deque)
    depth_msgs: int = 0
    depth_bytes: int = 0
    held: dict[int, Transfer] = field(default_factory=dict)  # insertion order = arrival order
    rejected: int = 0
    evicted: int = 0

    def over_limit(self, size: int) -> bool:
        """§2 "At the queue limit": the message would take the queue past max_count or max_size."""
        return bool(
            (self.max_count and self.depth_msgs + 1 > self.max_count)
            or (self.max_size and self.depth_bytes + size > self.max_size)
        )

    def should_stop(self) -> bool:
        th = self.thresholds
        return bool(
            (th.stop_count and self.depth_msgs > th.stop_count)
            or (th.stop_size and self.depth_bytes > th.stop_size)
        )

    def should_resume(self) -> bool:
        # "every non-zero resume threshold is satisfied" (strict <).
        th = self.thresholds
        return (not th.resume_count or self.depth_msgs < th.resume_count) and (
            not th.resume_size or self.depth_bytes < th.resume_size
        )


#: DESIGN §2: "The broker's default queue limit is 100 MiB in bytes (settable; 0 = none)".
DEFAULT_LIMIT_BYTES = 100 * 1024 * 1024


class Model:
    def __init__(
        self,
        default_stop_ratio: float = 80,
        default_resume_ratio: float = 70,
        default_limit_bytes: int = DEFAULT_LIMIT_BYTES,
    ) -> None:
        check_ratios(default_stop_ratio, default_resume_ratio)
        self.default_stop_ratio = default_stop_ratio
        self.default_resume_ratio = default_resume_ratio
        self.default_limit_bytes = default_limit_bytes
        self.queues: dict[str, Queue] = {}
        self.producers: dict[str, Producer] = {}
        self.now_us = 0
        self.next_id = 1
        self.events: list[dict[str, Any]] = []
        self.pumps: deque[Producer] = deque()

    # -- declarations -------------------------------------------------------------------------
    def declare_queue(
        self,
        name: str,
        *,
        max_count: int = 0,
        max_size: int = 0,
        policy: str = "reject",
        explicit: Thresholds | None = None,
    ) -> Queue:
        max_size = max_size or self.default_limit_bytes  # ASSUMPTION A7
        if explicit is not None:
            # ASSUMPTION A1: explicit values replace the defaults. Both stops 0 = flow control off.
            thresholds = check_thresholds(explicit, max_count, max_size)
        elif policy in ("ring", "ring-strict"):
            thresholds = Thresholds()  # "RING or RING-STRICT do NOT have ... thresholds by default"
        elif not self.default_stop_ratio and not self.default_resume_ratio:
            thresholds = Thresholds()  # "0 / 0 disables the defaults"
        else:
            sc, rc = default_pair(max_count, self.default_stop_ratio, self.default_resume_ratio)
            ss, rs = default_pair(max_size, self.default_stop_ratio, self.default_resume_ratio)
            thresholds = Thresholds(sc, rc, ss, rs)
        queue = Queue(name, max_count, max_size, policy, thresholds)
        self.queues[name] = queue
        return queue

    def add_producer(self, name: str, capacity: int | None, route: tuple[str, ...]) -> Producer:
        producer = Producer(name, capacity, tuple(route))
        self.producers[name] = producer
        return producer

    def set_thresholds(self, queue_name: str, thresholds: Thresholds) -> None:
        queue = self.queues[queue_name]
        new = check_thresholds(thresholds, queue.max_count, queue.max_size)
        queue.thresholds = new  # ASSUMPTION A4: no transition until the next enqueue / dequeue
        self._emit("thresholds_changed", queue)

    # -- operations ---------------------------------------------------------------------------
    def send(self, producer_name: str, size: int, count: int = 1) -> None:
        producer = self.producers[producer_name]
        producer.backlog.extend([size] * count)
        self._pump(producer)

    def consume(self, queue_name: str, count: int) -> int:
        queue = self.queues[queue_name]
        taken = 0
        while taken < count and queue.messages:
            self._remove_head(queue, "dequeue")
            taken += 1
        return taken

    def advance(self, us: int) -> None:
        self.now_us += us
        self.settle()

    def settle(self) -> None:
        while self.pumps:
            self._pump(self.pumps.popleft())

    # -- internals ----------------------------------------------------------------------------
    def _pump(self, producer: Producer) -> None:
        # Head-of-line blocking: the backlog goes out in order, only while the window has room.
        producer.pump_scheduled = False
        while producer.backlog and producer.window_open:
            self._transmit(producer, producer.backlog.popleft())

    def _transmit(self, producer: Producer, size: int) -> None:
        transfer = Transfer(self.next_id, producer, size, self.now_us)
        self.next_id += 1
        producer.outstanding += 1
        producer.sent += 1
        producer.uncompleted[transfer.message_id] = transfer
        for queue_name in producer.route:
            self._deliver(self.queues[queue_name], transfer)
        transfer.routing = False
        if not transfer.holders:
            self._complete(transfer)

    def _deliver(self, queue: Queue, transfer: Transfer) -> None:
        if queue.over_limit(transfer.size):
            if queue.policy == "reject" or (queue.max_size and transfer.size > queue.max_size):
                queue.rejected += 1  # ASSUMPTION A3: this queue only; not held here
                self._emit("message_rejected", queue, transfer)
                return
            # ring / ring-strict: evict the oldest until the message fits (ASSUMPTION A2).
            while queue.messages and queue.over_limit(transfer.size):
                self._remove_head(queue, "ring_evicted")
        queue.messages.append(transfer)
        queue.depth_msgs += 1
        queue.depth_bytes += transfer.size
        self._emit("enqueue", queue, transfer)
        if not queue.stopped and queue.should_stop():
            queue.stopped = True
            queue.stopped_count += 1
            self._emit("flow_stopped", queue)
        if queue.stopped:
            # "every transfer it receives is held; the message that crosses is held too"
            queue.held[transfer.message_id] = transfer
            transfer.holders.add(queue.name)

    def _remove_head(self, queue: Queue, event_type: str) -> None:
        transfer = queue.messages.popleft()
        queue.depth_msgs -= 1
        queue.depth_bytes -= transfer.size
        if event_type == "ring_evicted":
            queue.evicted += 1
        self._emit(event_type, queue, transfer)
        was_held = queue.held.pop(transfer.message_id, None) is not None
        if queue.stopped and queue.should_resume():
            queue.stopped = False
            self._emit("flow_resumed", queue)
            releases = ([transfer] if was_held else []) + list(queue.held.values())
            queue.held.clear()
        else:
            releases = [transfer] if was_held else []  # "released on its own"
        for released in sorted(releases, key=lambda t: t.message_id):
            self._release(queue, released)

    def _release(self, queue: Queue, transfer: Transfer) -> None:
        transfer.holders.discard(queue.name)
        if not transfer.holders and not transfer.routing:
            self._complete(transfer)

    def _complete(self, transfer: Transfer) -> None:
        producer = transfer.producer
        transfer.completed = True
        producer.outstanding -= 1
        producer.completed += 1
        del producer.uncompleted[transfer.message_id]
        self._emit("transfer_completed", None, transfer)
        if producer.backlog and not producer.pump_scheduled:
            producer.pump_scheduled = True
            self.pumps.append(producer)

    def _emit(self, event_type: str, queue: Queue | None, transfer: Transfer | None = None) -> None:
        row: dict[str, Any] = {"event_type": event_type, "ts": self.now_us}
        if queue is not None:
            th = queue.thresholds
            row.update(
                queue=queue.name,
                depth_msgs=queue.depth_msgs,
                depth_bytes=queue.depth_bytes,
                flow_stopped=queue.stopped,
                flow_stopped_count=queue.stopped_count,
                flow_stop_count=th.stop_count,
                flow_resume_count=th.resume_count,
                flow_stop_size=th.stop_size,
                flow_resume_size=th.resume_size,
                max_count=queue.max_count,
                max_size=queue.max_size,
            )
        if transfer is not None:
            row.update(
                message_id=transfer.message_id,
                size_bytes=transfer.size,
                link=transfer.producer.name,
                outstanding=transfer.producer.outstanding,
                capacity=transfer.producer.capacity,
            )
            if event_type == "transfer_completed":
                row["latency_us"] = self.now_us - transfer.receipt_us
        self.events.append(row)

"""Queues with limits, limit policies and Qpid delayed completion of transfers.

A :class:`Transfer` is one message.transfer from a producer. Every destination queue that is in the
flow-stopped state when it receives the message holds the transfer; the transfer completes when the
last holder releases it (DESIGN.md §2).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from flowctl_core.events import NO_LINK, EventRow, LinkColumns
from flowctl_core.flowlimit import FlowLimit, FlowThresholds

if TYPE_CHECKING:
    from flowctl_core.broker import Broker

LimitPolicy = Literal["reject", "ring", "ring-strict"]
LIMIT_POLICIES: tuple[str, ...] = ("reject", "ring", "ring-strict")

#: ``qpid.policy_type`` as the Qpid C++ broker itself spells it -> the engine's (the seeds' and
#: qpid-config's ``--limit-policy ring-strict``): qpid-cpp's ``QueuePolicy::RING_STRICT`` is
#: "ring_strict", so a declare argument copied from a real broker says that.
QPID_POLICY_SPELLINGS: dict[str, LimitPolicy] = {"ring_strict": "ring-strict"}


class Message:
    """One message on one queue; ``transfer`` is what its enqueue holds while flow is stopped
    (None for messages no producer waits on)."""

    __slots__ = ("held", "message_id", "size", "transfer")

    def __init__(self, message_id: int, size: int, transfer: Transfer | None) -> None:
        self.message_id = message_id
        self.size = size
        self.transfer = transfer
        self.held = False


class Transfer(Message):
    """One message transfer awaiting completion by every queue it was routed to.

    A transfer routed to one queue is also that queue's message (its ``transfer`` is itself), so
    the usual single-destination send allocates one object, not two (Broker.publish).
    """

    __slots__ = (
        "capacity",
        "held_by",
        "on_complete",
        "received_us",
        "refresh_link",
        "sender",
        "was_held",
    )

    def __init__(
        self,
        message_id: int,
        size: int,
        sender: str | None,
        capacity: int | None,
        received_us: int,
        on_complete: Callable[[Transfer], None] | None,
        refresh_link: Callable[[], LinkColumns] | None = None,
    ) -> None:
        self.message_id = message_id
        self.size = size
        self.sender = sender
        self.capacity = capacity
        self.received_us = received_us
        self.on_complete = on_complete
        # The sender's link columns as of now: transfers completed while this one is being
        # enqueued (a ring eviction that resumes flow) change its outstanding count.
        self.refresh_link = refresh_link
        self.held_by = 0  # the "pending completion counter" of seed 000
        self.was_held = False
        self.held = False  # as the message of its one queue

    # A read-only property over the inherited slot: the transfer referring to itself through
    # the slot would be a reference cycle, freed only by the cyclic GC instead of at once.
    @property
    def transfer(self) -> Transfer:  # type: ignore[override]
        return self

    def completion_logged(self, latency_us: int, log_immediate: bool) -> bool:
        """Whether its completion (Qpid's session completion, a RabbitMQ publisher confirm) is
        logged as ``transfer_completed``: when it was delayed, held by flow control or completed
        later than it arrived (a queue that confirms after processing), and every one with
        ``log_immediate_completions`` (DESIGN §2). The one rule for every protocol."""
        return self.was_held or latency_us > 0 or log_immediate


#: The bus's ``emit_row``: context, link columns, message_id, size_bytes, depth_msgs, depth_bytes.
RowEmitter = Callable[
    [EventRow, LinkColumns, int | None, int | None, int | None, int | None], EventRow
]


@dataclass
class QueueStats:
    enqueued: int = 0
    dequeued: int = 0
    rejected: int = 0
    evicted: int = 0
    peak_depth_msgs: int = 0
    peak_depth_bytes: int = 0
    # Peak depth past the stop threshold during any stopped episode (0 when never stopped).
    max_overshoot_msgs: int = 0
    max_overshoot_bytes: int = 0


class EnqueueOutcome:
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class Queue:
    """A FIFO queue. All state changes go through methods that emit events via the broker.

    Change thresholds with :meth:`set_thresholds`, never on ``flow`` directly: the queue caches
    its flow-state columns for its events and refreshes them only there and on transitions.
    """

    def __init__(
        self,
        broker: Broker,
        name: str,
        *,
        max_count: int,
        max_size: int,
        policy: LimitPolicy,
        thresholds: FlowThresholds,
        service_time_us: int = 0,
    ) -> None:
        self.broker = broker
        self.name = name
        self._max_count = max_count
        self._max_size = max_size
        # 0 means no limit: compare against infinity instead of testing for 0 on every enqueue.
        self._count_limit: float = max_count or float("inf")
        self._size_limit: float = max_size or float("inf")
        self.policy = policy
        self.flow = FlowLimit(thresholds)
        # Straight to the bus: message events are most of the log, one call level fewer each.
        self._bus = broker.bus
        self._emit_row: RowEmitter = broker.bus.emit_row
        self._broker_name = broker.name
        # The context column groups of this queue's events, per event type (events.py); the two
        # of every message are attributes, the others are built when first needed.
        self._flow_state: EventRow = ()
        self._contexts: dict[str, EventRow] = {}
        self._enqueue_context: EventRow = ()
        self._dequeue_context: EventRow = ()
        # A flow state shown in place of the thresholds' (show_flow_state), None: the queue's own.
        self._shown_flow: tuple[bool, int] | None = None
        self._refresh_flow_state()
        self.messages: deque[Message] = deque()
        self.depth_msgs = 0
        self.depth_bytes = 0
        # Held messages in arrival order; dict gives O(1) removal for a message dequeued while held.
        self._held: dict[int, Message] = {}
        self.stats = QueueStats()
        # A queue that confirms slowly (a replicated quorum queue fsyncing on a majority) holds
        # each transfer until it has been processed, one message at a time, service_time_us each.
        self.service_time_us = service_time_us
        self._service_free_at_us = 0
        self._in_service: deque[tuple[int, Transfer]] = deque()
        # Called after each dequeue so protocol front ends (consumers, credit) can react.
        self.on_space: list[Callable[[Queue], None]] = []
        self.on_message: list[Callable[[Queue], None]] = []

    @property
    def max_count(self) -> int:
        return self._max_count

    @property
    def max_size(self) -> int:
        return self._max_size

    # -- event helpers -------------------------------------------------------------------------
    def show_flow_state(self, stopped: bool, stopped_count: int) -> None:
        """Log ``stopped`` / ``stopped_count`` as this queue's flow state from now on, in place of
        its own thresholds' (which stay off): an Artemis address that blocks is its same-named
        queue's flow control (DESIGN §2), so that queue's events carry the address's state and
        its cumulative ``flow_stopped_count`` agrees with the address's flow events."""
        self._shown_flow = (stopped, stopped_count)
        self._refresh_flow_state()

    @property
    def logged_flow_state(self) -> tuple[bool, int]:
        """Flow stopped and ``flow_stopped_count`` as this queue's events log them: its own
        thresholds', or an Artemis address's shown in their place (:meth:`show_flow_state`)."""
        return self._flow_state[0], self._flow_state[1]

    @property
    def flow_shown_by_address(self) -> bool:
        """Whether an Artemis address's blocking is this queue's flow control."""
        return self._shown_flow is not None

    def log_depth_bytes_as(self, measure: Callable[[], int]) -> None:
        """Log ``measure()`` as ``depth_bytes`` on this queue's events in place of its message
        bodies: an Artemis address that blocks is its same-named queue's flow control
        (:meth:`show_flow_state`), and its stop size is counted in the address's memory estimate,
        so the queue's depth is logged in that measure too, or an episode's byte overshoot would
        compare bodies with the estimate (DESIGN §4). Other queues keep the bus's own emitter."""
        emit_row = self._bus.emit_row

        def emit_in_measure(
            context: EventRow,
            link: LinkColumns,
            message_id: int | None,
            size: int | None,
            depth_msgs: int | None,
            _bodies: int | None,
        ) -> EventRow:
            return emit_row(context, link, message_id, size, depth_msgs, measure())

        self._emit_row = emit_in_measure

    def _refresh_flow_state(self) -> None:
        """Rebuild the cached context groups; flow state changes only on transitions and
        reconfiguration."""
        flow = self.flow
        shown = self._shown_flow
        flow_state = (
            flow.flow_stopped if shown is None else shown[0],
            flow.flow_stopped_count if shown is None else shown[1],
            flow.stop_count,
            flow.resume_count,
            flow.stop_size,
            flow.resume_size,
            self.max_count,
            self.max_size,
        )
        self._flow_state = flow_state
        self._contexts = {}
        self._enqueue_context = self._context("enqueue")
        self._dequeue_context = self._context("dequeue")

    def _context(self, event_type: str) -> EventRow:
        context = self._contexts.get(event_type)
        if context is None:
            context = self._bus.context(self._broker_name, event_type, self.name, self._flow_state)
            self._contexts[event_type] = context
        return context

    def emit(self, event_type: str, detail: str | None = None) -> None:
        """A queue event that concerns no message: the queue's columns after the event."""
        link = NO_LINK if detail is None else (*NO_LINK[:-1], detail)
        self._emit_row(
            self._context(event_type), link, None, None, self.depth_msgs, self.depth_bytes
        )

    def _emit_message_event(
        self, event_type: str, message: Message, link: LinkColumns, detail: str | None = None
    ) -> None:
        if detail is not None:
            link = (*link[:-1], detail)
        self._emit_row(
            self._context(event_type),
            link,
            message.message_id,
            message.size,
            self.depth_msgs,
            self.depth_bytes,
        )

    # -- enqueue -------------------------------------------------------------------------------
    def _over_limit(self, size: int) -> str | None:
        if self.depth_msgs >= self._count_limit:
            return "max_count"
        if self.depth_bytes + size > self._size_limit:
            return "max_size"
        return None

    def enqueue(self, message: Message, link: LinkColumns = NO_LINK) -> str:
        """Accept ``message`` (or reject it by policy); hold its transfer while flow is stopped."""
        size = message.size
        # _over_limit(size) is not None, tested without a call: most enqueues are under both.
        if self.depth_msgs >= self._count_limit or self.depth_bytes + size > self._size_limit:
            limit = self._over_limit(size)
            if self.policy == "reject" or (self.max_size and size > self.max_size):
                self.stats.rejected += 1
                detail = f'{{"reason":"{limit}","policy":"{self.policy}"}}'
                self._emit_message_event("message_rejected", message, link, detail)
                return EnqueueOutcome.REJECTED
            # ring / ring-strict: make room by evicting the oldest messages.
            evicted = False
            while self.messages and self._over_limit(size) is not None:
                self._evict_head()
                evicted = True
            # An eviction may have resumed flow and completed the sender's held transfers: its
            # enqueue logs the outstanding count after them (DESIGN §3: uncompleted transfers).
            transfer = message.transfer
            if evicted and transfer is not None and transfer.refresh_link is not None:
                link = transfer.refresh_link()

        self.messages.append(message)
        depth_msgs = self.depth_msgs = self.depth_msgs + 1
        depth_bytes = self.depth_bytes = self.depth_bytes + size
        stats = self.stats
        stats.enqueued += 1
        if depth_msgs > stats.peak_depth_msgs:
            stats.peak_depth_msgs = depth_msgs
        if depth_bytes > stats.peak_depth_bytes:
            stats.peak_depth_bytes = depth_bytes
        self._emit_row(
            self._enqueue_context, link, message.message_id, size, depth_msgs, depth_bytes
        )
        flow = self.flow
        # flow.should_stop(depth_msgs, depth_bytes), without the call.
        if depth_msgs > flow.stop_above_msgs or depth_bytes > flow.stop_above_bytes:
            flow.stop()
            self._refresh_flow_state()
            self.emit("flow_stopped")
        if flow.flow_stopped:
            self._track_overshoot()
            transfer = message.transfer
            if transfer is not None:
                # The message that crosses the threshold is held too (seed 001: the 101st).
                message.held = True
                transfer.held_by += 1
                transfer.was_held = True
                self._held[message.message_id] = message
        if self.service_time_us and message.transfer is not None:
            self._start_service(message.transfer)
        for callback in self.on_message:
            callback(self)
        return EnqueueOutcome.ACCEPTED

    def _track_overshoot(self) -> None:
        # A hot-path copy of DESIGN §4's overshoot (peak depth past a stop that is on), which
        # jobs/transforms/episodes.py ``_overshoot`` computes per episode; tests/test_e2e_pipeline
        # keeps the run's worst equal to gold's.
        flow, stats = self.flow, self.stats
        if flow.stop_count:
            stats.max_overshoot_msgs = max(
                stats.max_overshoot_msgs, self.depth_msgs - flow.stop_count
            )
        if flow.stop_size:
            stats.max_overshoot_bytes = max(
                stats.max_overshoot_bytes, self.depth_bytes - flow.stop_size
            )

    # -- service time ---------------------------------------------------------------------------
    def _start_service(self, transfer: Transfer) -> None:
        """Hold ``transfer`` until this queue has processed it (FIFO, one at a time)."""
        scheduler = self.broker.scheduler
        done_us = max(scheduler.now_us, self._service_free_at_us) + self.service_time_us
        self._service_free_at_us = done_us
        transfer.held_by += 1
        self._in_service.append((done_us, transfer))
        # Completion times only grow, so one timer for the head of the line serves them all.
        if len(self._in_service) == 1:
            scheduler.call_at(done_us, self._finish_service)

    def _finish_service(self) -> None:
        in_service = self._in_service
        scheduler = self.broker.scheduler
        now_us = scheduler.now_us
        while in_service and in_service[0][0] <= now_us:
            transfer = in_service.popleft()[1]
            transfer.held_by -= 1
            if transfer.held_by == 0:
                self.broker.complete_transfer(transfer)
        if in_service:
            scheduler.call_at(in_service[0][0], self._finish_service)

    @property
    def in_service(self) -> int:
        """Transfers accepted but not yet processed (unconfirmed by this queue)."""
        return len(self._in_service)

    # -- dequeue -------------------------------------------------------------------------------
    def dequeue(self, link: LinkColumns = NO_LINK) -> Message | None:
        """Remove the head message for a consumer; None when the queue is empty."""
        messages = self.messages
        if not messages:
            return None
        message = messages.popleft()
        depth_msgs = self.depth_msgs = self.depth_msgs - 1
        depth_bytes = self.depth_bytes = self.depth_bytes - message.size
        self.stats.dequeued += 1
        self._emit_row(
            self._dequeue_context, link, message.message_id, message.size, depth_msgs, depth_bytes
        )
        # Most dequeues have nothing more to do: skip the call unless something can.
        if message.held or self.flow.flow_stopped or self.on_space:
            self._after_removal(message)
        return message

    def _evict_head(self) -> None:
        """Ring policy: drop the oldest message to make room."""
        message = self.messages.popleft()
        self.depth_msgs -= 1
        self.depth_bytes -= message.size
        self.stats.evicted += 1
        self._emit_message_event("ring_evicted", message, NO_LINK)
        self._after_removal(message)

    def _after_removal(self, message: Message) -> None:
        """Resume flow if depth fell low enough (releasing every held message), else release the
        removed message alone if it was held; then notify watchers.

        Seed 000's order: the resume test comes first; only "if the queue is still saturated after
        the message has been dequeued" is the message released on its own ("anyways"). A held
        message whose removal resumes flow is released with the others, after ``flow_resumed``.
        """
        flow = self.flow
        if flow.should_resume(self.depth_msgs, self.depth_bytes):
            flow.resume()
            self._refresh_flow_state()
            self.emit("flow_resumed")
            held, self._held = self._held, {}
            for held_message in held.values():
                self._release(held_message)
        elif message.held:
            # Dequeued while still ON: released on its own (seed 000, "decrement ... anyways").
            del self._held[message.message_id]
            self._release(message)
        for callback in self.on_space:
            callback(self)

    def _release(self, message: Message) -> None:
        message.held = False
        transfer = message.transfer
        if transfer is None:
            return
        transfer.held_by -= 1
        if transfer.held_by == 0:
            self.broker.complete_transfer(transfer)

    # -- configuration -------------------------------------------------------------------------
    def set_thresholds(self, thresholds: FlowThresholds) -> None:
        if not thresholds.enabled:
            # Stops all 0: flow control off, whatever resume comes with them (as at declaration).
            thresholds = FlowThresholds()
        thresholds.validate(self.name, self.max_count, self.max_size)
        self.flow.apply(thresholds)
        self._refresh_flow_state()
        self.emit("thresholds_changed")

    @property
    def held_count(self) -> int:
        return len(self._held)

"""The application behind a RabbitMQ consumer (AMQP 1.0 and 0.9.1 alike): what it does with the
messages its client library receives.

It takes them one at a time, in arrival order, processes each for ``process_us`` and then
acknowledges it; the messages delivered meanwhile wait in the client's buffer. With
``process_us`` 0 a message is taken and acknowledged as it arrives.

A message counts as received when the application takes it (``received``, ``last_received_us``),
not when its transfer reaches the buffer: credit beyond what the application works through in a
round trip only holds messages at the client (Kung & Morris), so it must not show as a backlog
received sooner. A link-credit or prefetch sweep then finds the smallest credit that keeps the
application busy instead of the largest one offered.
"""

from __future__ import annotations

from collections.abc import Callable

from flowctl_core.clock import Scheduler


class ConsumingApp:
    """One consumer's application: ``on_processed`` is called as each message is done, where the
    client acknowledges it (and an AMQP 1.0 client tops its credit up)."""

    def __init__(
        self, scheduler: Scheduler, process_us: int, on_processed: Callable[[], None]
    ) -> None:
        if process_us < 0:
            raise ValueError("process_us must be >= 0")
        self.scheduler = scheduler
        self.process_us = process_us
        self.on_processed = on_processed
        #: Delivered messages the application has not taken yet (the client's buffer).
        self.waiting = 0
        self.busy = False
        self.received = 0
        #: Virtual time the latest message was taken (None before the first): how soon a backlog
        #: was received, which a what-if of the credit judges when the count cannot grow.
        self.last_received_us: int | None = None

    def on_delivery(self) -> None:
        """A message's delivery is complete at the client."""
        if not self.process_us:
            self._take()
            self.on_processed()
            return
        self.waiting += 1
        if not self.busy:
            self._take_next()

    def _take(self) -> None:
        self.received += 1
        self.last_received_us = self.scheduler.now_us

    def _take_next(self) -> None:
        if not self.waiting:
            self.busy = False
            return
        self.waiting -= 1
        self.busy = True
        self._take()
        self.scheduler.call_later(self.process_us, self._done)

    def _done(self) -> None:
        self.on_processed()
        self._take_next()


class TakesFromApp:
    """What a client consumer says of its messages, read off its application (``app``): the
    AMQP 1.0 and 0.9.1 consumers alike, so a what-if reads either the same way."""

    app: ConsumingApp

    @property
    def received(self) -> int:
        return self.app.received

    @property
    def last_received_us(self) -> int | None:
        """Virtual time the latest message was taken (None before the first): how soon a
        backlog was received, which a what-if of the credit judges when the count cannot grow."""
        return self.app.last_received_us

"""A probe publisher: a real AMQP 1.0 sender that measures how a broker's flow control treats it
(``flowctl probe publish``), and the sender the conformance cases drive (conformance/real.py).

:func:`amqp_send` sends as fast as the link credit allows and counts what the broker tells it:
outcomes, error conditions, the credit granted in all, whether it was left with messages and no
credit. With a :class:`~collectors.proton_links.LinkRecorder` it records its own link into the
event log as it goes (and offers its backlog, so that a wait for credit is a link starvation the
pipeline measures); :func:`link_summary` reads that run back for the console.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from collectors.proton_links import LinkRecorder, check_vhost


@dataclass
class AmqpSendResult:
    """What an AMQP 1.0 sender saw: deliveries sent and their outcomes, the error conditions of
    refused ones, and whether it ended with messages to send and no credit (blocked)."""

    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    released: int = 0
    conditions: Counter[str] = field(default_factory=Counter)
    credit_granted: int = 0  # the total link credit the broker ever gave
    blocked_at_end: bool = False  # work left, credit 0 when the sender gave up waiting
    unsettled: int = 0  # deliveries the broker had not settled when the sender gave up
    link_error: str | None = None
    seconds: float = 0.0

    @property
    def settled(self) -> int:
        return self.accepted + self.rejected + self.released


def url_shown(url: str) -> str:
    """``url`` as the console may print it: a password in it replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{parts.username}:***@{host}").geturl()


def login_hint(url: str, error: str) -> str:
    """What to do about ``error`` when the broker asked for a login the URL does not give: a
    broker that requires SASL answered the probe's plain AMQP header with its SASL one, which
    proton says as a framing error ("Expected AMQP protocol header got: AMQP SASL layer"), a
    riddle to an operator (a review); "" otherwise."""
    if "SASL" not in error or urlsplit(url).username is not None:
        return ""
    return "; the broker asks for a login: give it in the URL, amqp://USER:PASSWORD@HOST:PORT"


def _said(condition: Any, otherwise: str) -> str:
    """An AMQP error condition as one line: its name, and its description when it has one."""
    if condition is None:
        return otherwise
    description = getattr(condition, "description", None)
    return f"{condition.name}: {description}" if description else str(condition.name)


#: How long a sender waits without progress while the broker holds deliveries it sent
#: unsettled (a pause of a loaded machine's JVM; RabbitMQ's alarm holding its socket), before
#: it gives up: ``idle_s`` counts once every one is settled.
UNSETTLED_GRACE_S = 10.0


def amqp_send(
    url: str,
    address: str,
    *,
    count: int,
    body_size: int,
    in_flight: int | None = None,
    idle_s: float = 1.5,
    timeout_s: float = 30.0,
    recorder: LinkRecorder | None = None,
    unsettled_grace_s: float = UNSETTLED_GRACE_S,
    vhost: str | None = None,
) -> AmqpSendResult:
    """Send up to ``count`` messages of a ``body_size``-byte binary body to ``address`` as fast
    as the link credit allows (and, with ``in_flight``, with at most that many unsettled); stop
    when all are settled, or when nothing has happened for ``idle_s`` (credit withheld; with
    deliveries the broker has not settled, for ``unsettled_grace_s`` at least: stopping at a
    short pause would miscount what it accepted), or after ``timeout_s``. With a ``recorder``
    (collectors/proton_links.py) the sender records its link and offers what it has left to
    send (``Sender.offered``: its backlog, the link's ``available``). ``vhost``: the RabbitMQ
    virtual host to publish in, named in the connection's open frame (hostname ``vhost:NAME``,
    as RabbitMQ reads it); without it, the broker's default."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    if vhost is not None:
        check_vhost(vhost, None)
    result = AmqpSendResult()
    body = b"x" * body_size
    started = time.monotonic()

    class Sender(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(auto_accept=False, auto_settle=True)
            self.last_progress = time.monotonic()
            self.connection: Any = None
            self.sender: Any = None
            self.done = False
            self.opened = False  # the broker attached the link: idleness counts from then
            self.remote_settled = 0  # deliveries the broker settled, with an outcome or none

        def on_link_opened(self, event: Any) -> None:
            self.opened = True
            # Its backlog offered now: a broker that grants no credit (a BLOCK address full
            # before the probe) calls no on_sendable, and the wait went unrecorded, "never
            # without credit" (a review).
            self._send_more()

        def on_start(self, event: Any) -> None:
            # SASL PLAIN when the URL names a user (amqp://user:password@host:port), none else.
            parts = urlsplit(url)
            with_user = parts.username is not None
            # The open frame's hostname names the vhost; TLS still checks the URL's host.
            named_vhost = (
                {} if vhost is None else {"virtual_host": f"vhost:{vhost}", "sni": parts.hostname}
            )
            self.connection = event.container.connect(
                url,
                reconnect=False,
                sasl_enabled=with_user,
                allowed_mechs="PLAIN" if with_user else None,
                allow_insecure_mechs=with_user,
                **named_vhost,
            )
            self.sender = event.container.create_sender(self.connection, address)
            event.container.schedule(0.05, self)

        def on_sendable(self, event: Any) -> None:
            self._send_more()

        def _send_more(self) -> None:
            sender = self.sender
            limit = count if in_flight is None else min(count, result.settled + in_flight)
            while sender.credit > 0 and result.sent < limit:
                sender.send(Message(body=body, durable=False))
                result.sent += 1
            if recorder is not None:
                sender.offered(count - result.sent)
            self.last_progress = time.monotonic()

        def _settled(self) -> None:
            self.last_progress = time.monotonic()
            if in_flight is not None and not self.done:
                self._send_more()
            if result.settled >= count:
                self._finish(blocked=False)

        def on_accepted(self, event: Any) -> None:
            result.accepted += 1
            self._settled()

        def on_rejected(self, event: Any) -> None:
            result.rejected += 1
            condition = event.delivery.remote.condition
            result.conditions[condition.name if condition is not None else "(none)"] += 1
            self._settled()

        def on_released(self, event: Any) -> None:
            result.released += 1
            self._settled()

        def on_settled(self, event: Any) -> None:
            # After the outcome's handler, if any: a delivery may be settled without one.
            self.remote_settled += 1
            self.last_progress = time.monotonic()

        def _owed(self) -> int:
            """Deliveries sent that the broker has neither settled nor given an outcome."""
            return result.sent - max(self.remote_settled, result.settled)

        def on_link_error(self, event: Any) -> None:
            result.link_error = _said(event.link.remote_condition, "link error")
            self._finish(blocked=False)

        def on_connection_error(self, event: Any) -> None:
            # The broker closed the connection with a reason (RabbitMQ: a vhost it does not
            # have), before any link could attach.
            self._ended_by(event.connection.remote_condition, "connection error")

        def on_session_error(self, event: Any) -> None:
            self._ended_by(event.session.remote_condition, "session error")

        def on_transport_error(self, event: Any) -> None:
            self._ended_by(event.transport.condition, "transport error")

        def _ended_by(self, condition: Any, otherwise: str) -> None:
            """The first error said is the one kept (a transport's follows its connection's)."""
            said = _said(condition, otherwise)
            result.link_error = result.link_error or said + login_hint(url, said)
            self._finish(blocked=False)

        def on_timer_task(self, event: Any) -> None:
            if self.done:
                return
            now = time.monotonic()
            wait_s = max(idle_s, unsettled_grace_s) if self._owed() else idle_s
            idle = self.opened and now - self.last_progress > wait_s
            if idle or now - started > timeout_s:
                credit = self.sender.credit if self.sender is not None else 0
                self._finish(blocked=result.sent < count and credit == 0)
            else:
                event.container.schedule(0.05, self)

        def _finish(self, *, blocked: bool) -> None:
            if self.done:
                return
            self.done = True
            result.blocked_at_end = blocked
            if self.sender is not None:
                # link credit granted = what was sent plus what is left
                result.credit_granted = result.sent + self.sender.credit
                result.unsettled = self._owed()
            if self.connection is not None:
                self.connection.close()

    sender = Sender()
    Container(sender if recorder is None else recorder.attach(sender)).run()
    result.seconds = time.monotonic() - started
    return result


@dataclass(frozen=True)
class LinkSummary:
    """A recorded publisher link as the console says it: the credit the broker granted in all,
    in how many flows, and the seconds it had messages to send and no credit."""

    credit_granted: int
    grants: int
    starved_s: float
    rows: int


def starved_seconds(rows: list[dict[str, Any]]) -> float:
    """DESIGN §4's credit starvation of one link's rows (in ``seq`` order), for the console:
    from the event that leaves credit 0 with messages available to the next event that ends it,
    or the detach, or the last row (the run's watermark for a run of one link, as a probe's),
    over the whole run (not clipped to days). The pipeline's rule is jobs/transforms/episodes.py's
    ``link_starvation_episodes``; tests/collectors/test_proton_links.py keeps the two equal on a
    recorded run."""
    total, since = 0.0, None
    for row in rows:
        starved = row["credit"] == 0 and (row["available"] or 0) > 0
        detached = row["event_type"] == "link_detached"
        if since is not None and (detached or not starved):
            total += (row["ts"] - since).total_seconds()
            since = None
        if starved and not detached and since is None:
            since = row["ts"]
    if since is not None and rows:
        total += (rows[-1]["ts"] - since).total_seconds()
    return total


def link_summary(rows: list[dict[str, Any]]) -> LinkSummary:
    """The credit granted (the link's credit at attach and each increase a flow of the broker,
    ``detail.origin`` receiver, brought) and the starved seconds of one publisher link's rows."""
    granted, grants, before = 0, 0, 0
    for row in rows:
        origin = json.loads(row["detail"] or "{}").get("origin")
        from_broker = row["event_type"] == "link_attached" or (
            row["event_type"] == "flow" and origin == "receiver"
        )
        if from_broker and row["credit"] > before:
            granted += row["credit"] - before
            grants += 1
        before = row["credit"]
    return LinkSummary(granted, grants, starved_seconds(rows), len(rows))

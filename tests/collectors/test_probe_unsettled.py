"""flowctl probe publish against an in-process AMQP 1.0 peer (python-qpid-proton listening on
loopback) that takes the messages and settles them late or never: while the broker holds
deliveries unsettled the probe waits ``unsettled_grace_s`` at least, so a pause (a loaded
machine's JVM) is not read as a broker that accepted none, and a hold is said. And a peer that
grants no credit at all, as a BLOCK address already full does: the wait is recorded."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from typer.testing import CliRunner

from collectors.probe import amqp_send, login_hint
from flowctl.cli import app

proton = pytest.importorskip("proton")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LateSettlingPeer:
    """Grants ``credit``, takes ``count`` messages and settles them ``hold_s`` after the last
    (None: never); closes its listener once the client closes its connection."""

    def __init__(self, port: int, *, credit: int, count: int, hold_s: float | None) -> None:
        from proton.handlers import MessagingHandler
        from proton.reactor import Container

        peer = self

        class Handler(MessagingHandler):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__(prefetch=credit, auto_accept=False)
                self.held: list[Any] = []
                self.acceptor: Any = None

            def on_start(self, event: Any) -> None:
                self.acceptor = event.container.listen(f"127.0.0.1:{port}")
                peer.listening.set()

            def on_message(self, event: Any) -> None:
                self.held.append(event.delivery)
                if len(self.held) == count and hold_s is not None:
                    event.container.schedule(hold_s, self)

            def on_timer_task(self, event: Any) -> None:
                for delivery in self.held:
                    self.accept(delivery)
                peer.settled.set()

            def on_connection_closed(self, event: Any) -> None:
                self.acceptor.close()

        self.listening = threading.Event()
        self.settled = threading.Event()
        self.container = Container(Handler())
        self.thread = threading.Thread(target=self.container.run, daemon=True)

    def __enter__(self) -> LateSettlingPeer:
        self.thread.start()
        assert self.listening.wait(10), "the in-process peer did not listen"
        return self

    def __exit__(self, *_: object) -> None:
        self.thread.join(10)


def test_a_peer_that_settles_late_is_waited_for() -> None:
    port = _free_port()
    with LateSettlingPeer(port, credit=10, count=5, hold_s=1.5) as peer:
        sent = amqp_send(
            f"amqp://127.0.0.1:{port}", "orders", count=5, body_size=16, idle_s=0.3, timeout_s=20
        )
    assert peer.settled.is_set()
    assert (sent.sent, sent.accepted, sent.rejected, sent.released) == (5, 5, 0, 0)
    assert (sent.unsettled, sent.blocked_at_end) == (0, False)
    assert not peer.thread.is_alive()


def test_a_peer_that_never_settles_is_given_up_on_and_said() -> None:
    port = _free_port()
    with LateSettlingPeer(port, credit=10, count=5, hold_s=None) as peer:
        sent = amqp_send(
            f"amqp://127.0.0.1:{port}",
            "orders",
            count=5,
            body_size=16,
            idle_s=0.2,
            timeout_s=20,
            unsettled_grace_s=0.6,
        )
    assert (sent.sent, sent.accepted, sent.unsettled) == (5, 0, 5)
    assert 0.6 < sent.seconds < 20  # the grace, not the idle time, nor the timeout
    assert not peer.settled.is_set() and not peer.thread.is_alive()


def test_an_empty_vhost_is_refused_before_connecting() -> None:
    """Proton would send the hostname ``vhost:`` and the recorder read the vhost as ''."""
    with pytest.raises(ValueError, match="vhost '': a RabbitMQ virtual host's name, not empty"):
        amqp_send("amqp://127.0.0.1:1", "/queues/q", count=1, body_size=1, vhost="")


def test_a_peer_that_grants_no_credit_is_a_wait_recorded(tmp_path: Any) -> None:
    """An Artemis BLOCK address full before the probe attaches grants it no credit: no
    on_sendable ever came, the backlog was never offered, and the probe said "never without
    credit while it had messages to send" with two rows, the attach and the detach (a review).
    The backlog is offered as the link opens: the wait is a starvation from then (DESIGN §4)."""
    port = _free_port()
    raw = tmp_path / "raw"
    args = ["probe", "publish", f"amqp://127.0.0.1:{port}", "orders", "--raw", str(raw),
            "--broker", "b1", "--product", "artemis", "--count", "10", "--idle", "0.5"]  # fmt: skip
    with LateSettlingPeer(port, credit=0, count=10, hold_s=None) as peer:
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "sent 0 of 10" in result.output
    waited = result.output.split("credit: 0 granted in 0 flows; ")[1].splitlines()[0]
    assert waited.startswith("left without credit with messages to send for "), waited
    assert waited.endswith(" s, then gave up")
    assert float(waited.split(" for ")[1].split(" s")[0]) >= 0.5
    assert not peer.settled.is_set()


def test_a_broker_that_asks_for_a_login_says_so() -> None:
    said = (
        "amqp:connection:framing-error: Expected AMQP protocol header got: AMQP SASL layer "
        "['AMQP\\x03\\x01\\x00\\x00']"
    )
    assert login_hint("amqp://127.0.0.1:5672", said) == (
        "; the broker asks for a login: give it in the URL, amqp://USER:PASSWORD@HOST:PORT"
    )
    assert login_hint("amqp://u:p@127.0.0.1:5672", said) == ""
    assert login_hint("amqp://127.0.0.1:5672", "amqp:unauthorized-access") == ""

"""A proton client and a stand-in broker end joined in memory: two proton engines whose
transports hand each other their bytes, the client's events dispatched to its handler as proton's
reactor dispatches them (``Event.dispatch``). The broker end is driven by the test, frame by
frame, so what a client's link recorder sees is real proton link state, deterministically."""

from __future__ import annotations

from typing import Any

from proton import Collector, Connection, Endpoint, Link, Message, Transport


class ProtonPair:
    def __init__(self, handler: Any, container: str = "app") -> None:
        self.handler = handler
        self.client = Connection()
        self.client.container = container
        self.events = Collector()
        self.client.collect(self.events)
        self._connect()
        self._tags = 0

    def _connect(self) -> None:
        """The client connection bound to a new transport, facing a new broker end."""
        self.client_transport = Transport()
        self.client_transport.bind(self.client)
        self.broker = Connection()
        self.broker.container = "broker"
        self.broker_transport = Transport(Transport.SERVER)
        self.broker_transport.bind(self.broker)
        self.broker_links: dict[str, Link] = {}
        self.lost = False

    def reconnect(self) -> None:
        """What proton's reconnect does after a lost connection: the same connection (its
        sessions and links, the same objects) bound to a new transport, to a new broker end."""
        self.client_transport.unbind()
        self._connect()

    def lose_connection(self) -> None:
        """The socket is gone: the client's transport is closed both ways, nothing moves."""
        self.lost = True
        self.client_transport.close_tail()
        self.client_transport.close_head()

    def pump(self) -> None:
        """Move bytes both ways and dispatch the client's events until nothing moves; the broker
        end opens what the client opened, and closes the connection the client closed."""
        moved = True
        while moved:
            moved = False
            for source, sink in (
                ()
                if self.lost
                else (
                    (self.client_transport, self.broker_transport),
                    (self.broker_transport, self.client_transport),
                )
            ):
                pending = source.pending()
                if pending > 0:
                    sink.push(source.peek(pending))
                    source.pop(pending)
                    moved = True
            self._answer_opens()
            event = self.events.peek()
            while event is not None:
                event.dispatch(self.handler)
                self.events.pop()
                event = self.events.peek()
                moved = True

    def _answer_opens(self) -> None:
        if self.broker.state & Endpoint.LOCAL_UNINIT and self.broker.state & Endpoint.REMOTE_ACTIVE:
            self.broker.open()
        if self.broker.state & Endpoint.LOCAL_ACTIVE and self.broker.state & Endpoint.REMOTE_CLOSED:
            self.broker.close()
        session = self.broker.session_head(Endpoint.LOCAL_UNINIT)
        while session is not None:
            session.open()
            session = session.next(Endpoint.LOCAL_UNINIT)
        link = self.broker.link_head(Endpoint.LOCAL_UNINIT)
        while link is not None:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.open()
            self.broker_links[link.name] = link
            link = link.next(Endpoint.LOCAL_UNINIT)

    # -- what the broker end does ---------------------------------------------------------------
    def broker_link(self, name: str) -> Link:
        return self.broker_links[name]

    def deliver(self, name: str, count: int, body_size: int = 100) -> None:
        """The broker sends ``count`` messages on its sender end of link ``name``."""
        link = self.broker_links[name]
        for _ in range(count):
            self._tags += 1
            link.delivery(str(self._tags))
            link.send(Message(body="x" * body_size).encode())
            link.advance()

    def grant(self, name: str, credit: int) -> None:
        """The broker, a receiving end, grants ``credit`` more."""
        self.broker_links[name].flow(credit)

    def take(self, name: str) -> int:
        """The broker takes (and accepts) what arrived on its receiving end; how many."""
        link = self.broker_links[name]
        taken = 0
        delivery = link.current
        while delivery is not None and delivery.readable and not delivery.partial:
            link.recv(delivery.pending)
            link.advance()
            delivery.update(delivery.ACCEPTED)
            delivery.settle()
            taken += 1
            delivery = link.current
        return taken

"""The client link recorder (collectors/proton_links.py) on real proton engines joined in memory
(tests/collectors/proton_pair.py): what it writes of a consumer's and a publisher's link, frame
by frame, and how those rows are committed."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from proton import Condition, Message
from proton.handlers import MessagingHandler

from collectors.proton_links import LinkRecorder, queue_of_address
from collectors.session import CHECKPOINT_KEY
from flowctl_core.errors import ConfigurationError
from tests.collectors.proton_pair import ProtonPair
from tests.collectors.session_setup import committed_rows

START = datetime(2026, 11, 28, 10, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Consumer(MessagingHandler):
    def __init__(self, prefetch: int = 0) -> None:
        super().__init__(prefetch=prefetch)
        self.bodies: list[str] = []

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)


def brief(rows: list[dict[str, Any]], link: str) -> list[tuple[Any, ...]]:
    """(seconds after START, event, credit, available) of one link's rows."""
    return [
        (
            (row["ts"] - START.replace(tzinfo=None)).total_seconds()
            if row["ts"].tzinfo is None
            else (row["ts"] - START).total_seconds(),
            row["event_type"],
            row["credit"],
            row["available"],
        )
        for row in rows
        if row["link"] == link
    ]


def recorded(app: Any, raw: Path, broker: str, **options: Any) -> tuple[LinkRecorder, ProtonPair]:
    """A recorder of ``app``'s links and the pair ``app`` runs on."""
    recorder = LinkRecorder(raw, broker, **options)
    return recorder, ProtonPair(recorder.attach(app))


def open_links(pair: ProtonPair, *names: tuple[str, str]) -> dict[str, Any]:
    """Open the client's connection, one session and a link per (name, role)."""
    pair.client.open()
    session = pair.client.session()
    session.open()
    links = {}
    for name, role in names:
        link = session.receiver(name) if role == "consumer" else session.sender(name)
        (link.source if role == "consumer" else link.target).address = "orders"
        link.open()
        links[name] = link
    pair.pump()
    return links


def send_four_on_two_credits(pair: ProtonPair, sender: Any, clock: Clock) -> None:
    """At 1 s the broker grants publisher ``p`` 2 credits; the application sends 4 (outside the
    handler's events: logged at the next one); at 2 s 2 have gone out and 2 wait in proton."""
    clock.advance(1)
    pair.grant("p", 2)
    pair.pump()
    for _ in range(4):
        sender.send(Message(body="m"))
    clock.advance(1)
    pair.pump()
    assert pair.take("p") == 2


def test_a_consumer_granting_credit_by_hand(tmp_path: Path) -> None:
    """Credit the application grants, the transfers that use it (credit after each, as the
    broker end counts it) and the broker's detach; ``available`` is null on a consumer link
    (proton does not pass the broker's on)."""
    clock = Clock()
    app = Consumer()
    recorder, pair = recorded(app, tmp_path, "rabbit-1", clock=clock)
    link = open_links(pair, ("c", "consumer"))["c"]
    clock.advance(1)
    link.flow(3)
    pair.pump()
    pair.deliver("c", 3, body_size=100)
    pair.pump()
    clock.advance(2)
    link.flow(2)
    pair.pump()
    pair.deliver("c", 1)
    pair.pump()
    clock.advance(1)
    pair.broker_link("c").close()
    pair.pump()
    recorder.close()
    rows = committed_rows(tmp_path)
    assert brief(rows, "c") == [
        (0.0, "link_attached", 0, None),
        (1.0, "flow", 3, None),
        (1.0, "transfer", 2, None),
        (1.0, "transfer", 1, None),
        (1.0, "transfer", 0, None),
        (3.0, "flow", 2, None),
        (3.0, "transfer", 1, None),
        (4.0, "link_detached", 1, None),
    ]
    assert len(app.bodies) == 4
    transfer = rows[2]
    assert transfer["size_bytes"] > 100  # the encoded message, its body and its framing
    for row in rows:
        assert (row["protocol"], row["link_role"], row["queue"], row["broker"]) == (
            "amqp-1.0",
            "consumer",
            "orders",
            "rabbit-1",
        )
        assert json.loads(row["detail"])["recorded_by"] == "client-links"
        assert (row["connection"], row["session"]) == ("app#1", "app#1/s1")
    grants = [json.loads(row["detail"]) for row in rows if row["event_type"] == "flow"]
    assert {grant["origin"] for grant in grants} == {"receiver"}
    assert [row["seq"] for row in rows] == list(range(len(rows)))
    assert rows[0]["run_id"].startswith("client-rabbit-1-20261128T100000")


def test_a_prefetch_window_tops_credit_up_in_the_same_event(tmp_path: Path) -> None:
    """proton's prefetch (a FlowController) grants credit back within a delivery's event, and
    counts a message that has arrived and is not yet taken as credit still: two messages in one
    read leave the broker 1 credit, and the second one's event tops it up to 2 (the window less
    the message being taken), at the same time."""
    clock = Clock()
    app = Consumer(prefetch=3)
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    open_links(pair, ("c", "consumer"))
    clock.advance(1)
    pair.deliver("c", 2)
    pair.pump()
    recorder.close()
    assert brief(committed_rows(tmp_path), "c") == [
        (0.0, "link_attached", 3, None),
        (1.0, "transfer", 2, None),
        (1.0, "transfer", 1, None),
        (1.0, "flow", 2, None),
    ]


def test_a_publisher_left_without_credit_while_it_has_messages_is_starved(
    tmp_path: Path,
) -> None:
    """The broker grants 2; the application sends 4: 2 go out, 2 wait in proton (available 2,
    credit 0: a starvation, DESIGN §4); the broker's next 5 carry them out at once."""
    clock = Clock()
    app = MessagingHandler(prefetch=0)
    recorder, pair = recorded(app, tmp_path, "artemis-1", product="artemis", clock=clock)
    sender = open_links(pair, ("p", "publisher"))["p"]
    send_four_on_two_credits(pair, sender, clock)
    clock.advance(3)
    pair.grant("p", 5)
    pair.pump()
    assert pair.take("p") == 2
    clock.advance(1)
    sender.close()
    pair.pump()
    recorder.close()
    rows = committed_rows(tmp_path)
    assert brief(rows, "p") == [
        (0.0, "link_attached", 0, 0),
        (1.0, "flow", 2, 0),
        (2.0, "transfer", 1, 3),
        (2.0, "transfer", 0, 2),  # starved from here ...
        (5.0, "flow", 5, 2),  # ... to the broker's credit: 3 s
        (5.0, "transfer", 4, 1),
        (5.0, "transfer", 3, 0),
        (6.0, "link_detached", 3, 0),
    ]
    details = [json.loads(row["detail"]) for row in rows]
    assert details[1] == {
        "origin": "receiver",
        "drain": False,
        "recorded_by": "client-links",
        "broker_product": "artemis",
    }
    assert details[-1]["reason"] == "closed by the client"
    assert {row["link_role"] for row in rows} == {"publisher"}


def test_an_offered_backlog_is_the_publishers_available(tmp_path: Path) -> None:
    """A publisher that sends only with credit and says what it has (``Sender.offered``): its
    backlog changes are the sender's flows."""
    clock = Clock()

    class Offering(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0)
            self.left = 5

        def on_sendable(self, event: Any) -> None:
            while event.sender.credit and self.left:
                event.sender.send(Message(body="m"))
                self.left -= 1
            event.sender.offered(self.left)

    app = Offering()
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    open_links(pair, ("p", "publisher"))
    clock.advance(1)
    pair.grant("p", 2)
    pair.pump()
    recorder.close()
    rows = committed_rows(tmp_path)
    # In the broker's flow event the application sends 2 (on the wire at the next event) and
    # offers the 3 it has left: 5 to send, then 2 transfers.
    assert brief(rows, "p") == [
        (0.0, "link_attached", 0, 0),
        (1.0, "flow", 2, 0),
        (1.0, "flow", 2, 5),
        (1.0, "transfer", 1, 4),
        (1.0, "transfer", 0, 3),
    ]
    assert json.loads(rows[2]["detail"])["origin"] == "sender"
    assert pair.take("p") == 2


class Tolerant(Consumer):
    """Goes on when the broker refuses one link (proton's default closes the connection)."""

    def on_link_error(self, event: Any) -> None:
        pass


def test_a_broker_error_and_a_lost_connection_detach_the_links(tmp_path: Path) -> None:
    """A link the broker detaches with an error says the error; a connection whose socket is
    gone detaches its links; one the client closes, too (proton's default answer to a link
    error)."""
    clock = Clock()
    app = Tolerant(prefetch=2)
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    open_links(pair, ("c1", "consumer"), ("c2", "consumer"))
    clock.advance(1)
    refused = pair.broker_link("c1")
    refused.condition = Condition("amqp:resource-limit-exceeded", "too many consumers")
    refused.close()
    pair.pump()
    clock.advance(1)
    pair.lose_connection()
    pair.pump()
    recorder.close()
    rows = committed_rows(tmp_path)
    detached = {
        row["link"]: (row["ts"], json.loads(row["detail"]))
        for row in rows
        if row["event_type"] == "link_detached"
    }
    assert detached["c1"][1]["condition"] == "amqp:resource-limit-exceeded"
    assert detached["c2"][1]["reason"] == "connection lost"
    assert sum(row["event_type"] == "link_detached" for row in rows) == 2

    closing = Consumer(prefetch=2)  # proton's default: a link error closes the connection
    recorder, pair = recorded(closing, tmp_path / "default", "b", clock=clock)
    open_links(pair, ("c1", "consumer"), ("c2", "consumer"))
    refused = pair.broker_link("c1")
    refused.condition = Condition("amqp:resource-limit-exceeded", "too many consumers")
    refused.close()
    pair.pump()
    recorder.close()
    reasons = {
        row["link"]: json.loads(row["detail"]).get("reason")
        for row in committed_rows(tmp_path / "default")
        if row["event_type"] == "link_detached"
    }
    assert reasons == {"c1": None, "c2": "connection closed by the client"}


def test_a_commit_failing_at_midnight_keeps_the_rows_and_the_application_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit: the commit at a day boundary ran outside the retry, so a full disk at midnight
    raised out of proton's handler and stopped the application. Now it is said and the rows
    kept, then committed a file per day."""
    clock = Clock(datetime(2026, 11, 28, 23, 59, 59, tzinfo=UTC))
    app = Consumer(prefetch=1)
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    writer_commit = recorder.writer.commit
    failures = iter([OSError(28, "No space left on device")])

    def full_once(*args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return writer_commit(*args, **kwargs)

    monkeypatch.setattr(recorder.writer, "commit", full_once)
    open_links(pair, ("c", "consumer"))
    clock.advance(2)
    pair.deliver("c", 1)  # the first row after midnight: the commit before it fails
    pair.pump()
    assert app.bodies  # the application went on
    recorder.close()
    files = sorted(tmp_path.glob("date=*/*.parquet"))
    assert [path.parent.name for path in files] == ["date=2026-11-28", "date=2026-11-29"]
    rows = committed_rows(tmp_path)
    assert [row["seq"] for row in rows] == list(range(len(rows)))


def test_rows_are_committed_per_day_with_their_checkpoint(tmp_path: Path) -> None:
    """A batch never spans two UTC days; each file carries the run's checkpoint; no state file
    is left (a client run is never gone on with)."""
    clock = Clock(datetime(2026, 11, 28, 23, 59, 59, tzinfo=UTC))
    app = Consumer(prefetch=1)
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    open_links(pair, ("c", "consumer"))
    clock.advance(2)
    pair.deliver("c", 1)
    pair.pump()
    recorder.close()
    files = sorted(tmp_path.glob("date=*/*.parquet"))
    assert [path.parent.name for path in files] == ["date=2026-11-28", "date=2026-11-29"]
    checkpoint = json.loads(pq.read_schema(files[-1]).metadata[CHECKPOINT_KEY])
    assert checkpoint["run_id"] == recorder.state.run_id
    assert checkpoint["next_seq"] == recorder.state.next_seq == 2  # attached, then a transfer
    assert [path.name for path in tmp_path.iterdir() if path.is_file()] == []


def test_a_killed_runs_commit_is_removed_at_a_later_start(tmp_path: Path) -> None:
    """A client run is never gone on with, so the hidden file of a commit it was killed in
    stayed for good (an audit); a later recorder removes it once no one has written it for an
    hour, and leaves a recent one alone (another application's commit in progress)."""
    folder = tmp_path / "date=2026-11-27"
    folder.mkdir()
    killed = folder / ".part-client-b-20261126T100000000000Z-000000000004.parquet.inprogress"
    running = folder / ".part-client-b-20261127T100000000000Z-000000000000.parquet.inprogress"
    for path in (killed, running):
        path.write_bytes(b"part of a file")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(killed, (two_hours_ago, two_hours_ago))
    LinkRecorder(tmp_path, "b").close()
    assert not killed.exists() and running.exists()


def test_a_recorder_needs_a_broker_and_a_known_product(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="broker's name cannot be blank"):
        LinkRecorder(tmp_path, " ")
    with pytest.raises(ValueError, match="cannot read a file named with ':'"):
        LinkRecorder(tmp_path, "host:5672")
    with pytest.raises(ValueError, match="'qpid': one of artemis, rabbitmq"):
        LinkRecorder(tmp_path, "b", product="qpid")
    with pytest.raises(ValueError, match="default_vhost '': a RabbitMQ virtual host's name"):
        LinkRecorder(tmp_path, "b", default_vhost="")
    with pytest.raises(ValueError, match="default_vhost 'tenant-1': a RabbitMQ virtual host;"):
        LinkRecorder(tmp_path, "b", product="artemis", default_vhost="tenant-1")


def _record_a_starved_publisher(raw: Path) -> None:
    """The publisher of test_a_publisher_left_without_credit_while_it_has_messages_is_starved
    (starved 3 s) beside a consumer granting credit by hand, on one connection."""
    clock = Clock()
    app = Consumer()
    recorder, pair = recorded(app, raw, "artemis-1", product="artemis", clock=clock)
    links = open_links(pair, ("p", "publisher"), ("c", "consumer"))
    clock.advance(1)
    pair.grant("p", 2)
    links["c"].flow(1)
    pair.pump()
    for _ in range(4):
        links["p"].send(Message(body="m"))
    clock.advance(1)
    pair.pump()
    pair.deliver("c", 1)
    pair.pump()
    clock.advance(3)
    pair.grant("p", 5)
    pair.pump()
    clock.advance(1)
    pair.client.close()
    pair.pump()
    recorder.close()


@pytest.mark.spark
def test_recorded_links_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """Every recorded row keeps the event log's contract, and the starved publisher's seconds
    are DESIGN §4's (from its credit 0 with messages waiting to the broker's credit)."""
    from collectors.probe import starved_seconds
    from jobs.daily_metrics import run_daily_metrics
    from jobs.delta_io import read_table
    from jobs.episodes import run_episodes
    from jobs.ingest import run_ingest
    from jobs.pipeline import starved_link_rows
    from schemas.tables import LINK_STARVATION_DAILY
    from tests.conftest import scratch_conf

    _record_a_starved_publisher(tmp_path / "raw")
    written = len(committed_rows(tmp_path / "raw"))
    conf = scratch_conf(tmp_path, "pipeline")
    day = START.date()
    counts = run_ingest(spark, conf, day, day)
    assert (counts["rows_read"], counts["rows_accepted"]) == (written, written)
    run_episodes(spark, conf, day, day)
    run_daily_metrics(spark, conf, day, day)
    daily = {r.link: r.asDict() for r in read_table(spark, conf, LINK_STARVATION_DAILY).collect()}
    publisher, consumer = daily["p"], daily["c"]
    assert (publisher["starved_s"], publisher["episodes"], publisher["link_role"]) == (
        3.0,
        1,
        "publisher",
    )
    assert publisher["attached_s"] == 6.0  # attached at 0 s, its connection closed at 6 s
    # A consumer's available is not known from the client: never starved, whatever its credit.
    assert (consumer["starved_s"], consumer["episodes"]) == (0.0, 0)
    # The probe's console figure (collectors/probe.py) is the pipeline's, link by link.
    recorded = committed_rows(tmp_path / "raw")
    for link, figures in daily.items():
        own = [row for row in recorded if row["link"] == link]
        assert starved_seconds(own) == figures["starved_s"], link
    # What the console lists of links after a pipeline run (flowctl pipeline).
    top, starved, link_days = starved_link_rows(
        None, day, day, warehouse_dir=conf.warehouse_dir, spark=spark
    )
    assert ([row["link"] for row in top], starved, link_days) == (["p"], 1, 2)


# -- what a review found (each failed before its fix) -------------------------------------------


def test_a_publisher_answering_the_brokers_drain_sent_nothing(tmp_path: Path) -> None:
    """The broker drains (5 credits, drain); the application, with nothing to send, answers
    ``drained()``: credit 0 and no transfer (a fall in credit is not a send here)."""

    class Idle(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0)

        def on_sendable(self, event: Any) -> None:
            if event.sender.drain_mode:
                event.sender.drained()

    clock = Clock()
    recorder, pair = recorded(Idle(), tmp_path, "b", clock=clock)
    open_links(pair, ("p", "publisher"))
    clock.advance(1)
    pair.broker_link("p").drain(5)
    pair.pump()
    assert pair.take("p") == 0
    recorder.close()
    rows = committed_rows(tmp_path)
    assert brief(rows, "p") == [
        (0.0, "link_attached", 0, 0),
        (1.0, "flow", 5, 0),
        (1.0, "flow", 0, 0),
    ]
    assert json.loads(rows[1]["detail"])["drain"] is True
    assert json.loads(rows[2]["detail"])["reason"] == "drained"


def test_an_application_reading_deliveries_in_its_own_on_delivery(tmp_path: Path) -> None:
    """proton runs a handler's own methods before its child handlers: the recorder is around
    the application (``attach`` returns the handler to give proton), so a delivery the
    application takes in its own ``on_delivery`` is still a transfer."""

    class Raw(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0)
            self.taken = 0

        def on_delivery(self, event: Any) -> None:
            delivery = event.delivery
            if delivery.readable and not delivery.partial:
                event.link.recv(delivery.pending)
                event.link.advance()
                delivery.settle()
                self.taken += 1

    clock = Clock()
    app = Raw()
    recorder, pair = recorded(app, tmp_path, "b", clock=clock)
    links = open_links(pair, ("c", "consumer"))
    links["c"].flow(3)
    pair.pump()
    clock.advance(1)
    pair.deliver("c", 2)
    pair.pump()
    recorder.close()
    assert app.taken == 2
    assert brief(committed_rows(tmp_path), "c") == [
        (0.0, "link_attached", 0, None),
        (0.0, "flow", 3, None),
        (1.0, "transfer", 2, None),
        (1.0, "transfer", 1, None),
    ]


def test_a_link_detached_without_closing_is_detached_then(tmp_path: Path) -> None:
    """A detach that is not a close (a durable subscription left) ends the link when it
    happens, not when the connection goes."""
    clock = Clock()
    recorder, pair = recorded(Consumer(prefetch=2), tmp_path, "b", clock=clock)
    links = open_links(pair, ("c1", "consumer"), ("c2", "consumer"))
    clock.advance(1)
    links["c1"].detach()
    pair.broker_link("c2").detach()
    pair.pump()
    clock.advance(100)
    pair.client.close()
    pair.pump()
    recorder.close()
    detached = {
        row["link"]: (brief([row], row["link"])[0][0], json.loads(row["detail"])["reason"])
        for row in committed_rows(tmp_path)
        if row["event_type"] == "link_detached"
    }
    assert detached == {
        "c1": (1.0, "detached by the client"),
        "c2": (1.0, "detached by the broker"),
    }


def test_links_of_one_name_are_told_apart(tmp_path: Path) -> None:
    """proton names a sender and a receiver to one address alike; the link column must tell
    them apart in the run (the pipeline keys a link by it): the second is NAME#2, its AMQP
    name in ``detail.link_name``."""
    clock = Clock()
    recorder, pair = recorded(Consumer(prefetch=1), tmp_path, "b", clock=clock)
    pair.client.open()
    session = pair.client.session()
    session.open()
    session.sender("orders").open()
    receiver = session.receiver("orders")
    receiver.source.address = "orders"
    receiver.open()
    pair.pump()
    recorder.close()
    attached = [row for row in committed_rows(tmp_path) if row["event_type"] == "link_attached"]
    assert [(row["link"], row["link_role"]) for row in attached] == [
        ("orders", "publisher"),
        ("orders#2", "consumer"),
    ]
    assert json.loads(attached[1]["detail"])["link_name"] == "orders"
    assert "link_name" not in json.loads(attached[0]["detail"])


def test_a_consumer_drain_answered_in_the_same_read_as_a_message(tmp_path: Path) -> None:
    """The client asks a drain of 5; the broker sends one message and answers the drain in
    one read: the transfer leaves 4 (what the broker counted), then the broker's drain answer
    sets 0. The request itself is a receiver's flow with ``drain``."""
    clock = Clock()
    recorder, pair = recorded(Consumer(), tmp_path, "b", clock=clock)
    links = open_links(pair, ("c", "consumer"))
    clock.advance(1)
    links["c"].drain(5)
    pair.pump()
    pair.deliver("c", 1)
    pair.broker_link("c").drained()
    pair.pump()
    recorder.close()
    rows = committed_rows(tmp_path)
    assert brief(rows, "c") == [
        (0.0, "link_attached", 0, None),
        (1.0, "flow", 5, None),
        (1.0, "transfer", 4, None),
        (1.0, "flow", 0, None),
    ]
    request, answer = (json.loads(rows[i]["detail"]) for i in (1, 3))
    assert (request["origin"], request["drain"]) == ("receiver", True)
    assert (answer["origin"], answer["drain"]) == ("sender", True)


def test_a_folder_that_cannot_be_written(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Refused at once when it is no folder; a commit that fails inside proton's event loop (a
    full disk) is said and tried again, the application going on and no row lost."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(ConfigurationError, match="not a folder rows can be written to"):
        LinkRecorder(not_a_folder / "raw", "b")
    clock = Clock()
    recorder, pair = recorded(Consumer(prefetch=1), tmp_path / "raw", "b", clock=clock)
    recorder.flush_interval_s = 0.0  # commit at every event
    failing = {"left": 2}
    commit = recorder.writer.commit

    def full_disk(*args: Any, **kwargs: Any) -> Any:
        if failing["left"]:
            failing["left"] -= 1
            raise OSError(28, "No space left on device")
        return commit(*args, **kwargs)

    recorder.writer.commit = full_disk  # type: ignore[method-assign]
    open_links(pair, ("c", "consumer"))
    pair.deliver("c", 1)
    pair.pump()
    recorder.close()
    assert "not committed to" in caplog.text and "No space left on device" in caplog.text
    assert failing["left"] == 0
    assert [row["event_type"] for row in committed_rows(tmp_path / "raw")] == [
        "link_attached",
        "transfer",
    ]


def test_the_probe_never_prints_a_password() -> None:
    from collectors.probe import url_shown

    assert url_shown("amqp://app:s3cret@10.0.0.5:5672") == "amqp://app:***@10.0.0.5:5672"
    assert url_shown("amqp://127.0.0.1:61616") == "amqp://127.0.0.1:61616"
    assert url_shown("amqps://user@host:5671/vhost") == "amqps://user@host:5671/vhost"


def test_a_reconnected_publisher_is_attached_again_with_what_it_still_has(
    tmp_path: Path,
) -> None:
    """proton's reconnect binds the same connection and link objects to a new transport: the
    link is detached with the lost connection and attached again under its name, its 2
    waiting messages its backlog, sent on the new broker's credit."""
    clock = Clock()
    recorder, pair = recorded(MessagingHandler(prefetch=0), tmp_path, "b", clock=clock)
    sender = open_links(pair, ("p", "publisher"))["p"]
    send_four_on_two_credits(pair, sender, clock)
    clock.advance(1)
    pair.lose_connection()
    pair.pump()
    clock.advance(1)
    pair.reconnect()
    pair.pump()
    clock.advance(1)
    pair.grant("p", 5)
    pair.pump()
    assert pair.take("p") == 2
    recorder.close()
    rows = committed_rows(tmp_path)
    assert brief(rows, "p") == [
        (0.0, "link_attached", 0, 0),
        (1.0, "flow", 2, 0),
        (2.0, "transfer", 1, 3),
        (2.0, "transfer", 0, 2),
        (3.0, "link_detached", 0, 2),
        (4.0, "link_attached", 0, 2),
        (5.0, "flow", 5, 2),
        (5.0, "transfer", 4, 1),
        (5.0, "transfer", 3, 0),
    ]
    assert json.loads(rows[4]["detail"])["reason"] == "connection lost"


# -- the queue a link's address names ----------------------------------------------------------
def _attached_queues(
    tmp_path: Path,
    product: str | None,
    links: list[tuple[str, str]],
    hostname: str | None = None,
    **options: Any,
) -> list[tuple[str | None, str | None]]:
    """(queue, detail.amqp_address) of each link's attach, a link per (role, address)."""
    recorder, pair = recorded(Consumer(), tmp_path, "b", product=product, clock=Clock(), **options)
    if hostname is not None:
        pair.client.hostname = hostname
    pair.client.open()
    session = pair.client.session()
    session.open()
    for index, (role, address) in enumerate(links):
        if role == "consumer":
            link = session.receiver(f"l{index}")
            link.source.address = address
        else:
            link = session.sender(f"l{index}")
            link.target.address = address
        link.open()
    pair.pump()
    recorder.close()
    attached = [row for row in committed_rows(tmp_path) if row["event_type"] == "link_attached"]
    return [(row["queue"], json.loads(row["detail"]).get("amqp_address")) for row in attached]


def test_a_rabbitmq_address_is_the_queue_the_rabbitmq_collector_names(tmp_path: Path) -> None:
    """A walk-through's phantom: a publisher to RabbitMQ's ``/amq/queue/slow10`` made a queue
    ``/amq/queue/slow10`` beside the ``slow10`` the RabbitMQ collector samples. The queue column
    is the queue's name as that collector writes it (collectors/rabbitmq.py queue_name), the
    address in ``detail.amqp_address``; an exchange is no queue."""
    assert _attached_queues(
        tmp_path,
        "rabbitmq",
        [
            ("publisher", "/amq/queue/slow10"),  # v1 (3.x), the queue must exist
            ("publisher", "/queue/slow10"),  # v1, declared if it does not
            ("consumer", "/queues/slow%2010"),  # v2 (4.x), percent-encoded
            ("consumer", "/queues/a%2Fb"),  # queue "a/b": the collector writes a%2Fb
            ("publisher", "/exchange/amq.direct/slow10"),
            ("publisher", "/exchanges/amq.direct/slow10"),
            ("publisher", "/topic/slow.*"),
            ("consumer", "slow10"),  # v1's bare queue name
        ],
    ) == [
        ("slow10", "/amq/queue/slow10"),
        ("slow10", "/queue/slow10"),
        ("slow 10", "/queues/slow%2010"),
        ("a%2Fb", "/queues/a%2Fb"),
        (None, "/exchange/amq.direct/slow10"),
        (None, "/exchanges/amq.direct/slow10"),
        (None, "/topic/slow.*"),
        ("slow10", None),
    ]


def test_a_rabbitmq_queue_of_another_vhost(tmp_path: Path) -> None:
    """The vhost is the connection's (``hostname`` ``vhost:NAME``); a queue of another vhost
    than ``/`` is ``VHOST/NAME`` in the collector's rows."""
    queues = _attached_queues(
        tmp_path, "rabbitmq", [("publisher", "/queues/orders")], hostname="vhost:tenant-1"
    )
    assert queues == [("tenant-1/orders", "/queues/orders")]


def test_a_connection_naming_no_vhost_is_in_the_brokers_default_vhost(tmp_path: Path) -> None:
    """A broker whose ``default_vhost`` is not ``/``: a connection whose hostname names no vhost
    (proton sends the URL's host) publishes there, and one naming its vhost, in that vhost."""
    default = _attached_queues(
        tmp_path / "a", "rabbitmq", [("publisher", "/queues/orders")], "127.0.0.1",
        default_vhost="tenant-1",
    )  # fmt: skip
    assert default == [("tenant-1/orders", "/queues/orders")]
    named = _attached_queues(
        tmp_path / "b", "rabbitmq", [("publisher", "/queues/orders")], "vhost:/",
        default_vhost="tenant-1",
    )  # fmt: skip
    assert named == [("orders", "/queues/orders")]


def test_a_link_of_an_untold_broker_in_a_vhost_is_rabbitmqs(tmp_path: Path) -> None:
    """A vhost other than ``/`` is RabbitMQ's, so an untold broker's bare address is a RabbitMQ
    queue of that vhost (a review: it was the default vhost's ``q``), by the connection's
    ``vhost:V`` or the recorder's default alike."""
    named = _attached_queues(tmp_path / "a", None, [("publisher", "q")], "vhost:ten/ant%1")
    assert named == [("ten%2Fant%251/q", "q")]  # the address kept: it differs
    default = _attached_queues(
        tmp_path / "b", None, [("consumer", "q")], "127.0.0.1", default_vhost="tenant-1"
    )
    assert default == [("tenant-1/q", "q")]
    assert queue_of_address("orders::audit", None) == "audit"  # in "/", still Artemis's FQQN


def test_an_artemis_address_is_its_name_and_a_fqqn_names_its_queue(tmp_path: Path) -> None:
    assert _attached_queues(
        tmp_path,
        "artemis",
        [("publisher", "orders"), ("consumer", "orders::audit"), ("publisher", "/amq/queue/x")],
    ) == [("orders", None), ("audit", "orders::audit"), ("/amq/queue/x", None)]


def test_a_link_of_an_untold_broker_reads_rabbitmqs_forms(tmp_path: Path) -> None:
    """Without ``product`` (README: an untold link's broker is RabbitMQ unless its other events
    say otherwise): RabbitMQ's address forms, all beginning with ``/``, name its queues; an
    Artemis FQQN, no RabbitMQ form, its queue."""
    assert _attached_queues(
        tmp_path,
        None,
        [("publisher", "/amq/queue/slow10"), ("consumer", "orders::audit"), ("consumer", "q")],
    ) == [("slow10", "/amq/queue/slow10"), ("audit", "orders::audit"), ("q", None)]

"""The ActiveMQ Artemis collector: a real broker's BLOCK flow control as ``broker_events``.

Events where the broker emits them (DESIGN §6): each ``AMQ222183`` / ``AMQ221046`` line of
``artemis.log`` is a ``flow_stopped`` / ``flow_resumed`` of the address, with the columns the
engine writes for the same transition (flowctl_core/protocols/artemis.py ``note_fullness``): the
address in ``queue``, the size the line states in ``depth_bytes`` (and its messages, where 2.40
states them), max-size-bytes as stop and resume size, the session's cumulative block count, and
the address state in ``detail`` (``origin`` "artemis-log" and the line's code). A broker that
stops (``AMQ221002``) or starts again without a stop line (a crash) holds nothing blocked: an
address still blocked gets a ``flow_resumed`` at the stop line, or at the last line before the
start, with ``detail.reason``.

Samples where it can only be polled: with ``jolokia_url``, every ``sample_interval_s`` each
address's size and messages, read over Jolokia, as a ``queue_declared`` row with
``detail.origin`` "jolokia" and ``detail.sample_interval_ms`` — the address as observed, with its
settings and depth. No metric counts those rows; they give the depth timeline sampled points, and
they keep the run's watermark (its last event, DESIGN §4) at the collector's clock while the
broker is quiet, so an address blocked for hours counts as blocked up to the last sample, not up
to the block line.

Timestamps are the log's (the broker's local time, ``log_zone``) and the collector's clock for
samples, in UTC, and ``ts`` follows ``seq``: a sample waits for the lines stamped before it (see
``_release_samples``), and a row that would still go back in time takes the time of the row
before it. See collectors/session.py for how a
session survives restarts.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from collectors.artemis_log import BLOCKING, STARTING, STOPPED, LogLine, parse_line
from collectors.logtail import LogPosition, follow
from collectors.session import STATE_VERSION, CollectorStateError, SessionWriter
from schemas.broker_events import BROKER_EVENTS

log = logging.getLogger("flowctl.collect")

ORIGIN_LOG = "artemis-log"
ORIGIN_JOLOKIA = "jolokia"
REASON_BROKER_STOPPED = "broker_stopped"
REASON_BROKER_RESTARTED = "broker_restarted"
#: The broker's own addresses (notifications, management): not sampled.
BROKER_OWN_PREFIX = "activemq."
#: A batch is committed when it is this old or this large, whichever comes first.
DEFAULT_FLUSH_INTERVAL_S = 5.0
FLUSH_ROWS = 10_000
POLL_INTERVAL_S = 0.2
#: How long a sample waits for log lines of events before it (see _release_samples).
SAMPLE_HOLD_S = 1.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


@dataclass
class AddressState:
    """What the session knows of one address: whether it blocks now, how often it started to,
    and its last stated sizes."""

    blocked: bool = False
    blocked_count: int = 0
    max_size_bytes: int | None = None
    size_bytes: int | None = None
    policy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SessionState:
    """The checkpoint: everything a restarted collector needs to go on with the same run."""

    run_id: str
    broker: str
    next_seq: int = 0
    last_ts_us: int = 0  # the last row's ts: rows never go back in time
    last_line_us: int | None = None  # the log's last timestamped line (a crash closes there)
    position: LogPosition | None = None
    addresses: dict[str, AddressState] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "broker": self.broker,
            "next_seq": self.next_seq,
            "last_ts_us": self.last_ts_us,
            "last_line_us": self.last_line_us,
            "position": None if self.position is None else self.position.to_json(),
            "addresses": {name: a.to_json() for name, a in sorted(self.addresses.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionState:
        position = data.get("position")
        return cls(
            run_id=data["run_id"],
            broker=data["broker"],
            next_seq=int(data["next_seq"]),
            last_ts_us=int(data["last_ts_us"]),
            last_line_us=data.get("last_line_us"),
            position=None if position is None else LogPosition.from_json(position),
            addresses={
                name: AddressState(**fields) for name, fields in data.get("addresses", {}).items()
            },
        )


def new_run_id(broker: str, now: datetime) -> str:
    return f"collect-{broker}-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"


_BROKER_KEY = re.compile(r'[:,]broker=("(?:[^"\\]|\\.)*"|[^,]*)')


def _broker_mbean(address_mbean: str) -> str:
    """The broker's MBean of an address's (Jolokia lists the keys in any order)."""
    match = _BROKER_KEY.search(address_mbean)
    if match is None:
        raise ValueError(f"{address_mbean}: no broker key")
    return f"{address_mbean.split(':', 1)[0]}:broker={match[1]}"


class JolokiaReader:
    """Artemis's addresses over Jolokia: size, messages and address settings, in bulk reads."""

    def __init__(self, url: str, user: str, password: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        origin = "/".join(url.split("/")[:3])
        self.headers = {
            "Authorization": f"Basic {token}",
            "Origin": origin,
            "Content-Type": "application/json",
        }

    def _post(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        request = urllib.request.Request(
            self.url, data=json.dumps(requests).encode(), headers=self.headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            answers: list[dict[str, Any]] = json.loads(response.read())
        return answers

    def addresses(self) -> dict[str, dict[str, Any]]:
        """Per address that is neither internal nor the broker's own (``activemq.*``, its
        notifications and management): AddressSize, MessageCount, and from the address settings
        maxSizeBytes and addressFullMessagePolicy."""
        (found,) = self._post(
            [
                {
                    "type": "search",
                    "mbean": "org.apache.activemq.artemis:broker=*,component=addresses,address=*",
                }
            ]
        )
        mbeans = sorted(found.get("value") or [])
        if not mbeans:
            return {}
        attributes = ["Address", "AddressSize", "MessageCount", "Internal"]
        reads = self._post(
            [{"type": "read", "mbean": mbean, "attribute": attributes} for mbean in mbeans]
        )
        values = [
            (mbean, answer["value"])
            for mbean, answer in zip(mbeans, reads, strict=True)
            if answer.get("status") == 200
            and not answer["value"].get("Internal")
            and not str(answer["value"]["Address"]).startswith(BROKER_OWN_PREFIX)
        ]
        settings = self._post(
            [
                {
                    "type": "exec",
                    "mbean": _broker_mbean(mbean),
                    "operation": "getAddressSettingsAsJSON",
                    "arguments": [value["Address"]],
                }
                for mbean, value in values
            ]
        )
        observed: dict[str, dict[str, Any]] = {}
        for (_, value), answer in zip(values, settings, strict=True):
            setting = json.loads(answer["value"]) if answer.get("status") == 200 else {}
            observed[value["Address"]] = {
                "address_size": int(value["AddressSize"]),
                "messages": int(value["MessageCount"]),
                "max_size_bytes": setting.get("maxSizeBytes"),
                "policy": setting.get("addressFullMessagePolicy"),
            }
        return observed


class ArtemisCollector:
    """Reads an Artemis log (and optionally samples Jolokia) into one collector session."""

    def __init__(
        self,
        *,
        log_path: Path,
        raw_dir: Path,
        state_path: Path,
        broker: str,
        log_zone: tzinfo | None = None,
        jolokia: JolokiaReader | None = None,
        sample_interval_s: float = 30.0,
        sampled_addresses: frozenset[str] | None = None,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_session: bool = False,
    ) -> None:
        self.log_path = log_path
        self.log_zone = log_zone
        self.jolokia = jolokia
        self.sample_interval_s = sample_interval_s
        self.sampled_addresses = sampled_addresses  # None: every address Jolokia lists
        self.flush_interval_s = flush_interval_s
        self.clock = clock
        self.writer = SessionWriter(raw_dir, state_path)
        self.writer.remove_leftovers()
        loaded = None if new_session else self.writer.load_state()
        if loaded is not None and loaded["broker"] != broker:
            raise CollectorStateError(
                f"{state_path} is the session of broker {loaded['broker']!r}, not {broker!r}: "
                "give another --state, or --new-session"
            )
        self.state = (
            SessionState.from_json(loaded)
            if loaded is not None
            else SessionState(run_id=new_run_id(broker, clock()), broker=broker)
        )
        self.resumed = loaded is not None
        self._pending: list[dict[str, Any]] = []
        self._pending_since = time.monotonic()
        self._checkpoint_before: dict[str, Any] = self.state.to_json()
        self._next_sample = 0.0
        self._held_samples: list[tuple[datetime, dict[str, dict[str, Any]]]] = []
        self._sample_failing = False

    # -- rows ---------------------------------------------------------------------------------
    def _row(self, ts: datetime, event_type: str, address: str, **columns: Any) -> None:
        """Append one event of ``address``; a new day commits the batch before it first."""
        ts_us = max(_us(ts), self.state.last_ts_us)
        stamped = _from_us(ts_us)
        if self._pending and self._pending[-1]["ts"].date() != stamped.date():
            self._commit(self._checkpoint_before)
        row = dict.fromkeys(BROKER_EVENTS.names)
        row.update(
            run_id=self.state.run_id,
            broker=self.state.broker,
            seq=self.state.next_seq,
            ts=stamped,
            event_type=event_type,
            queue=address,
            **columns,
        )
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(row)
        self.state.next_seq += 1
        self.state.last_ts_us = ts_us

    def _flow_row(
        self,
        ts: datetime,
        address: str,
        *,
        depth_msgs: int | None,
        depth_bytes: int | None,
        extra: dict[str, Any],
        event_type: str | None = None,
    ) -> None:
        """A flow event or sample of ``address``, with its flow state after it (DESIGN §3)."""
        state = self.state.addresses[address]
        policy = state.policy or "BLOCK"  # only BLOCK logs the lines; samples read the setting
        # max-size-bytes stops the flow only under BLOCK (-1: no limit, logged as 0 = off).
        limit = state.max_size_bytes if policy == "BLOCK" and state.max_size_bytes else 0
        detail = {
            "address": address,
            "address_size": depth_bytes,
            "max_size_bytes": state.max_size_bytes,
            "policy": policy,
            **extra,
        }
        self._row(
            ts,
            event_type or ("flow_stopped" if state.blocked else "flow_resumed"),
            address,
            depth_msgs=depth_msgs,
            depth_bytes=depth_bytes,
            flow_stopped=state.blocked,
            flow_stopped_count=state.blocked_count,
            flow_stop_count=0,
            flow_resume_count=0,
            flow_stop_size=max(limit, 0),
            flow_resume_size=max(limit, 0),
            max_count=0,
            max_size=0,
            detail=json.dumps({k: v for k, v in detail.items() if v is not None}, sort_keys=True),
        )

    # -- the log ------------------------------------------------------------------------------
    def _close_blocked(self, ts: datetime, reason: str) -> None:
        for name, address in sorted(self.state.addresses.items()):
            if address.blocked:
                address.blocked = False
                self._flow_row(
                    ts,
                    name,
                    depth_msgs=None,
                    depth_bytes=None,
                    extra={"origin": ORIGIN_LOG, "reason": reason},
                )

    def _on_line(self, line: LogLine) -> None:
        if line.code == STOPPED:
            self._close_blocked(line.ts, REASON_BROKER_STOPPED)
        elif line.code == STARTING and self.state.last_line_us is not None:
            self._close_blocked(_from_us(self.state.last_line_us), REASON_BROKER_RESTARTED)
        elif line.is_flow:
            assert line.address is not None
            address = self.state.addresses.setdefault(line.address, AddressState())
            blocking = line.code == BLOCKING
            if line.max_size_bytes is not None:
                address.max_size_bytes = line.max_size_bytes
            address.size_bytes = line.size_bytes
            if blocking and address.blocked:
                log.warning(
                    "%s: address %r blocked again without unblocking: not counted twice",
                    self.log_path,
                    line.address,
                )
            else:
                address.blocked = blocking
                address.blocked_count += blocking
                self._flow_row(
                    line.ts,
                    line.address,
                    depth_msgs=line.messages,
                    depth_bytes=line.size_bytes,
                    extra={"origin": ORIGIN_LOG, "log_code": line.code},
                )
        self.state.last_line_us = _us(line.ts)

    def read_log(self) -> int:
        """Every whole line written since the position; the number read."""
        count = 0
        for text, position in follow(self.log_path, self.state.position):
            line = parse_line(text, self.log_zone)
            if line is not None:
                self._release_samples(line.ts)
            self._checkpoint_before = self.state.to_json()
            if line is not None:
                self._on_line(line)
            self.state.position = position
            count += 1
            if len(self._pending) >= FLUSH_ROWS:
                self._commit(self.state.to_json())
        return count

    # -- samples ------------------------------------------------------------------------------
    def sample(self) -> int:
        """One Jolokia read of every address, held as samples until the log is read past their
        time (:meth:`_release_samples`); the addresses read (0 when the broker does not answer:
        a broker that restarts is sampled once it is up)."""
        if self.jolokia is None:
            return 0
        try:
            observed = self.jolokia.addresses()
        except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
            if not self._sample_failing:
                log.warning(
                    "Jolokia %s does not answer (%s): sampling waits", self.jolokia.url, error
                )
            self._sample_failing = True
            return 0
        self._sample_failing = False
        if self.sampled_addresses is not None:
            observed = {k: v for k, v in observed.items() if k in self.sampled_addresses}
        self._held_samples.append((self.clock(), observed))
        return len(observed)

    def _release_samples(self, until: datetime | None) -> None:
        """Write the samples taken up to ``until`` (None: all) as ``queue_declared`` rows.

        A sample waits for the log: a line can reach the file a little after the sample that
        follows its event, and a row is never stamped before the one it follows, so a sample
        written first would move that line's exact time. Held until the log is read past it
        (or :data:`SAMPLE_HOLD_S` has passed), it goes in its place by time, with the flow state
        the lines before it left."""
        interval_ms = round(self.sample_interval_s * 1000)
        while self._held_samples and (until is None or self._held_samples[0][0] <= until):
            taken, observed = self._held_samples.pop(0)
            self._checkpoint_before = self.state.to_json()  # a new day commits what came before
            for name, values in sorted(observed.items()):
                address = self.state.addresses.setdefault(name, AddressState())
                if values["max_size_bytes"] is not None:
                    address.max_size_bytes = int(values["max_size_bytes"])
                address.policy = values["policy"] or address.policy
                address.size_bytes = values["address_size"]
                self._flow_row(
                    taken,
                    name,
                    depth_msgs=values["messages"],
                    depth_bytes=values["address_size"],
                    extra={"origin": ORIGIN_JOLOKIA, "sample_interval_ms": interval_ms},
                    event_type="queue_declared",
                )

    # -- commits and the loop -----------------------------------------------------------------
    def _commit(self, checkpoint: dict[str, Any]) -> None:
        rows, self._pending = self._pending, []
        self.writer.commit(rows, checkpoint)

    def flush(self) -> None:
        """Commit what is pending (samples held included) and the position reached."""
        self._release_samples(None)
        self._commit(self.state.to_json())

    def poll_once(self) -> None:
        """Read the log, sample when due, and commit when the batch is due."""
        moved = self.read_log()
        if self.jolokia is not None and time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + self.sample_interval_s
            self.sample()
        self._release_samples(self.clock() - timedelta(seconds=SAMPLE_HOLD_S))
        due = time.monotonic() - self._pending_since >= self.flush_interval_s
        if (self._pending and due) or (moved and not self._pending):
            self.flush()

    def run(self, *, stop: Callable[[], bool], once: bool = False) -> None:
        """Poll until ``stop()`` is true (or once), committing everything before returning."""
        try:
            while True:
                self.poll_once()
                if once or stop():
                    break
                time.sleep(POLL_INTERVAL_S)
        finally:
            self.flush()

"""The ActiveMQ Artemis collector: a real broker's BLOCK flow control as ``broker_events``.

Events where the broker emits them (DESIGN §6): each ``AMQ222183`` / ``AMQ221046`` line of
``artemis.log`` is a ``flow_stopped`` / ``flow_resumed`` of the address, with the columns the
engine writes for the same transition (flowctl_core/protocols/artemis.py ``note_fullness``): the
address in ``queue``, the size the line states in ``depth_bytes`` (and its messages, where 2.40
states them), max-size-bytes as stop and resume size (max-size-messages as stop and resume
count, where 2.40 states it), the session's cumulative block count, and
the address state in ``detail`` (``origin`` "artemis-log" and the line's code). A broker that
stops (``AMQ221002``) or starts again without a stop line (a crash) holds nothing blocked: an
address still blocked gets a ``flow_resumed`` at the stop line, or at the last line before the
start (``AMQ101000``, or ``AMQ221000`` where the log has no bootstrap line), with
``detail.reason``.

A full disk blocks every producer of the broker: the disk-full line (``AMQ222210`` past
max-disk-usage, ``AMQ224128`` under min-disk-free) is an ``alarm_raised`` with
``detail.resource`` "disk", as the engine writes a RabbitMQ disk alarm, and the no-longer-full
line an ``alarm_cleared`` (a stop or a crash clears it too). The per-address "Disk Full! Blocking"
line and the "Unblocking" line such an address gets as the disk is freed are not flow events:
max-size-bytes did not block it, and an address's time stopped is what its recommendation
raises max-size-bytes for. A BLOCK address past max-size-bytes when the disk is freed stays
blocked by it (no "Unblocking" then, one once it drains): a ``flow_stopped`` from the release;
so is one whose policy no sample has read. Another policy's pages, drops or fails instead, and
its late "Unblocking" is the disk's too.

Samples where it can only be polled: with ``jolokia_url``, every ``sample_interval_s`` each
address's size and messages, read over Jolokia, as a ``queue_declared`` row with
``detail.origin`` "jolokia" and ``detail.sample_interval_ms`` — the address as observed, with its
settings and depth. No metric counts those rows; they give the depth timeline sampled points, and
they keep the run's watermark (its last event, DESIGN §4) at the collector's clock while the
broker is quiet, so an address blocked for hours counts as blocked up to the last sample, not up
to the block line. Deleting an address logs no "Unblocking": a blocked address two samples in
a row no longer list gets a ``flow_resumed`` at the first (``detail.reason``
"address_removed"); one listed
whose read failed, or not sampled (internal, the broker's own), is there, unsampled. A broker
whose MBean says it is not started (being stopped: it lists its addresses without their settings,
then none at all, before its stop line) is not sampled: sampling waits, as for one that does not
answer.

Timestamps are the log's (the broker's local time, ``log_zone``) and the collector's clock for
samples, in UTC. Order, checkpoints and restarts: collectors/base.py and collectors/session.py.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import urllib.request
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from collectors.artemis_log import (
    BLOCKING,
    DISK_BLOCKING,
    DISK_CODES,
    LIFECYCLE_CODES,
    STARTING_CODES,
    STOPPED,
    LogLine,
    parse_line,
)
from collectors.base import (
    REASON_BROKER_RESTARTED,
    REASON_BROKER_STOPPED,
    REASON_CARRIED_OVER,
    BrokerNotUp,
    LogCollector,
    SamplerRefused,
    from_us,
    http_json,
    to_us,
)
from collectors.session import StateFieldError, checked_field
from schemas.broker_events import ORIGIN_ARTEMIS_LOG, ORIGIN_JOLOKIA
from schemas.model import US_PER_SECOND

log = logging.getLogger("flowctl.collect")

#: Artemis unblocks the addresses a full disk held, those under max-size-bytes, in the moment it
#: finds the disk free (the same millisecond on a real 2.40); one still past it stays blocked,
#: by max-size-bytes, until it drains.
DISK_RELEASE_S = 1.0

#: The broker's own addresses, not sampled: its notifications and management (``activemq.``),
#: and its MQTT sessions' store (``$sys.mqtt.sessions``, created as a broker with the MQTT
#: acceptor starts, and not flagged Internal on a real 2.40: 101 rows of a phantom queue in a
#: review).
BROKER_OWN_PREFIXES = ("activemq.", "$sys.")
#: The broker's own MBean (the ``broker`` key alone), whose ``Started`` says whether it runs.
BROKER_MBEAN_PATTERN = "org.apache.activemq.artemis:broker=*"
#: ``detail.reason`` of the end of a block of an address a sample no longer lists.
REASON_ADDRESS_REMOVED = "address_removed"


@dataclass
class AddressState:
    """What the session knows of one address: whether it blocks now, how often it started to,
    and its last stated sizes."""

    blocked: bool = False
    blocked_count: int = 0
    max_size_bytes: int | None = None
    size_bytes: int | None = None
    policy: str | None = None
    # max-size-bytes-reject-threshold as last sampled; None: none (-1), or never sampled.
    reject_threshold: int | None = None
    disk_blocked: bool = False  # a full disk blocked it: its next "Unblocking" is the disk's
    # When the disk that blocked it was freed (µs): an "Unblocking" within DISK_RELEASE_S is the
    # disk's; a later one means it was past max-size-bytes then and held by it since.
    disk_released_us: int | None = None
    # max-size-messages as last stated (-1: none; None: never stated, as in a state file of a
    # release before it).
    max_size_messages: int | None = None
    # The time (µs) of the first sample in a row that did not list it, None while listed (see
    # ArtemisCollector._end_removed).
    missing_since_us: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def may_block(self) -> bool:
        """Whether max-size-bytes may block its producers: its policy is BLOCK, or not known
        (never sampled: the disk's lines come from an address of any policy)."""
        return self.policy in (None, "BLOCK")

    @property
    def forgettable(self) -> bool:
        """Nothing to carry on for it: never blocked (no counter to go on from), not blocked
        nor held by the disk now."""
        return not (
            self.blocked
            or self.blocked_count
            or self.disk_blocked
            or self.disk_released_us is not None
        )


#: A sample: each address listed, with what was read of it (None: its read failed).
Observed = dict[str, dict[str, Any] | None]

#: The type of each field of :class:`AddressState` in a checkpoint (collectors/session.py
#: ``checked_field``).
_ADDRESS_FIELDS = {
    "blocked": "bool",
    "blocked_count": "count",
    "max_size_bytes": "int?",
    "size_bytes": "int?",
    "policy": "str?",
    "reject_threshold": "int?",
    "disk_blocked": "bool",
    "disk_released_us": "int?",
    "max_size_messages": "int?",
    "missing_since_us": "int?",
}


def _address_state(fields: Any, field: str) -> AddressState:
    """An address's state from a checkpoint; :class:`StateFieldError` naming the field that is
    not one of its own or not of its type. A field left out takes its default (a state file of
    an earlier release)."""
    if not isinstance(fields, dict):
        raise StateFieldError(field, f"{json.dumps(fields)[:60]} is not an object")
    unknown = sorted(set(fields) - set(_ADDRESS_FIELDS))
    if unknown:
        raise StateFieldError(
            f"{field}.{unknown[0]}",
            f"not a field of an address's state ({', '.join(_ADDRESS_FIELDS)})",
        )
    for name, kind in _ADDRESS_FIELDS.items():
        checked_field(fields, name, kind, prefix=f"{field}.", required=False)
    return AddressState(**fields)


_BROKER_KEY = re.compile(r'[:,]broker=("(?:[^"\\]|\\.)*"|[^,]*)')


_ADDRESS_KEY = re.compile(r'[:,]address=("(?:[^"\\]|\\.)*"|[^,]*)')
#: ObjectName.quote's escapes, undone.
_QUOTED_ESCAPE = re.compile(r"\\(.)")


def _address_of(address_mbean: str) -> str:
    """The address an address's MBean names (its ``address`` key, quoted by Artemis as
    ObjectName.quote does)."""
    match = _ADDRESS_KEY.search(address_mbean)
    if match is None:
        raise ValueError(f"{address_mbean}: no address key")
    value = match[1]
    if not value.startswith('"'):
        return value
    return _QUOTED_ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value[1:-1])


def _broker_mbean(address_mbean: str) -> str:
    """The broker's MBean of an address's (Jolokia lists the keys in any order)."""
    match = _BROKER_KEY.search(address_mbean)
    if match is None:
        raise ValueError(f"{address_mbean}: no broker key")
    return f"{address_mbean.split(':', 1)[0]}:broker={match[1]}"


def _check_answer(answer: dict[str, Any], url: str) -> None:
    """A bulk request's answer carries its own status: over an HTTP 200, a search Jolokia
    refuses (a restrictive jolokia-access.xml: 403) is a refusal, any other error a failed
    sample, never "no addresses" (an audit: sampling stopped without a word)."""
    status = answer.get("status")
    if status == 200:
        return
    refusal = f"the address search answered {status}: {answer.get('error')}"
    if isinstance(status, int) and 400 <= status < 500:
        reason = f"{refusal} (the user's role, or jolokia-access.xml?)"
        raise SamplerRefused(f"Jolokia {url}: {reason}", status, reason, refusal)
    raise ValueError(f"Jolokia {url}: {refusal}")


def _value_of(answer: dict[str, Any], kind: type, what: str, url: str) -> Any:
    """The value of one answer of a bulk request, of the type its request gives; anything else
    is a failed sample, said as such (not a crash of the collector)."""
    value = answer.get("value")
    if value is None and kind is list:
        return []  # a search that finds nothing
    if not isinstance(value, kind):
        raise ValueError(
            f"Jolokia {url}: {what} answered {type(value).__name__}, not {kind.__name__}"
        )
    return value


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
        """One answer per request, in their order. Jolokia refuses a whole request (the
        Origin it does not allow, a client jolokia-access.xml denies) over an HTTP 200 with
        one error object, not a list: read as a list, it was "does not answer (too many values
        to unpack)", waited for forever (a review)."""
        request = urllib.request.Request(
            self.url, data=json.dumps(requests).encode(), headers=self.headers, method="POST"
        )
        answers = http_json(request, self.timeout_s, "Jolokia")
        if isinstance(answers, dict):
            raise self._request_refused(answers)
        if (
            not isinstance(answers, list)
            or len(answers) != len(requests)
            or not all(isinstance(answer, dict) for answer in answers)
        ):
            got = f"{len(answers)} answers" if isinstance(answers, list) else type(answers).__name__
            raise ValueError(
                f"Jolokia {self.url}: {len(requests)} requests got {got}, not one object each"
            )
        return answers

    def _request_refused(self, answer: dict[str, Any]) -> Exception:
        """The error of a request Jolokia answered as a whole: a refusal for a 4xx (the
        collector stops when it comes first), else a failed sample."""
        status, error = answer.get("status"), answer.get("error")
        if isinstance(status, int) and 400 <= status < 500:
            hint = (
                "the broker's --http-host, or the <cors> allowed origins of its "
                "jolokia-access.xml; or give --jolokia with the host name they allow, e.g. "
                "localhost"
                if "origin" in str(error).lower()
                else "the user's role, or the broker's jolokia-access.xml?"
            )
            refusal = f"the request answered {status}: {error}"
            reason = f"refused the request ({status}): {error} ({hint})"
            return SamplerRefused(f"Jolokia {self.url}: {reason}", status, reason, refusal)
        return ValueError(f"Jolokia {self.url}: the request answered {status}: {error}")

    def addresses(self) -> Observed:
        """:meth:`_listed`, once the broker has said it is still started after its reads
        (:meth:`_check_started`): a real 2.40 being stopped (SIGTERM) answers for a moment with
        settings that fail to read, then a search that lists no address at all (its MBeans
        unregistered), before its web server stops and the AMQ221002 stop line. Taken for the
        broker's addresses, two such samples ended every block as an address removed, ahead
        of the stop line (an experiment polling a real broker every 20 ms through its stops:
        the settings unread in each of 18, the empty search in 8 of 16 SIGTERMs, for up to
        0.53 s)."""
        observed = self._listed()
        self._check_started()
        return observed

    def _check_started(self) -> None:
        """:class:`BrokerNotUp` unless the broker's MBean says it is started. A broker being
        stopped is not started from the stop's first moment, before anything it lists goes
        (a real 2.40: ``Started`` false while its settings answer 500, "Broker is not
        started", then 404, the MBean gone), so a read after a sample's own finds any stop
        that began during them. A read Jolokia refuses (403: a jolokia-access.xml that allows
        the addresses only) says nothing: the sample is taken as before."""
        (answer,) = self._post(
            [{"type": "read", "mbean": BROKER_MBEAN_PATTERN, "attribute": ["Started"]}]
        )
        status, value = answer.get("status"), answer.get("value")
        if status == 403:
            return
        if status == 200 and isinstance(value, dict) and value:
            states = [v.get("Started") if isinstance(v, dict) else None for v in value.values()]
            if all(state is True for state in states):
                return
            reason = f"Started is {', '.join(json.dumps(state) for state in states)}"
        else:
            reason = f"its MBean answered {status}: {str(answer.get('error'))[:160]}"
        raise BrokerNotUp(f"Jolokia {self.url}: the broker is not started ({reason})", reason)

    def _listed(self) -> Observed:
        """Per address that is neither internal nor the broker's own
        (:data:`BROKER_OWN_PREFIXES`: its notifications, management and MQTT sessions):
        AddressSize, its messages (:meth:`_messages_held`), and from the address settings
        maxSizeBytes, addressFullMessagePolicy, maxSizeMessages and maxSizeBytesRejectThreshold
        (Artemis's defaults when the broker's settings have none: -1, PAGE, -1, -1; None when
        they could not be read). An address listed that is internal or the broker's own, or
        whose own read failed, is None: there, but not sampled."""
        (found,) = self._post(
            [
                {
                    "type": "search",
                    "mbean": "org.apache.activemq.artemis:broker=*,component=addresses,address=*",
                }
            ]
        )
        _check_answer(found, self.url)
        mbeans = sorted(_value_of(found, list, "the address search", self.url))
        if not mbeans:
            return {}
        attributes = ["Address", "AddressSize", "MessageCount", "Internal", "QueueNames"]
        reads = self._post(
            [{"type": "read", "mbean": mbean, "attribute": attributes} for mbean in mbeans]
        )
        # Every address listed is in the sample, None where it has no figures: not read
        # (deleted since the search, a passing error), or not sampled (internal, the broker's
        # own). Only one not listed is gone: the collector ends its block (an internal address
        # left out was taken for deleted, its block ended by every sample: a review).
        observed: Observed = {}
        values = []
        for mbean, answer in zip(mbeans, reads, strict=True):
            if answer.get("status") != 200:
                observed[_address_of(mbean)] = None
                continue
            value = _value_of(answer, dict, mbean, self.url)
            observed[str(value["Address"])] = None
            if not value.get("Internal") and not str(value["Address"]).startswith(
                BROKER_OWN_PREFIXES
            ):
                values.append((mbean, value))
        if not values:
            return observed
        messages = self._messages_held(values)
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
        for (_, value), answer, held in zip(values, settings, messages, strict=True):
            read = answer.get("status") == 200
            setting = (
                json.loads(_value_of(answer, str, "getAddressSettingsAsJSON", self.url))
                if read
                else {}
            )
            if not isinstance(setting, dict):
                raise ValueError(f"Jolokia {self.url}: address settings that are no JSON object")
            observed[str(value["Address"])] = {
                "address_size": int(value["AddressSize"]),
                "messages": held,
                # The settings as JSON leave out what is not set, which Artemis reads as its
                # defaults (AddressSettings.DEFAULT_MAX_SIZE_BYTES -1, no limit, and
                # DEFAULT_ADDRESS_FULL_MESSAGE_POLICY PAGE): an absent policy read as BLOCK
                # wrote a PAGE address with a stop size (a review).
                "max_size_bytes": setting.get("maxSizeBytes", -1) if read else None,
                "policy": setting.get("addressFullMessagePolicy", "PAGE") if read else None,
                # DEFAULT_MAX_SIZE_MESSAGES: -1, none.
                "max_size_messages": setting.get("maxSizeMessages", -1) if read else None,
                "reject_threshold": setting.get("maxSizeBytesRejectThreshold", -1)
                if read
                else None,
            }
        return observed

    def _messages_held(self, values: list[tuple[str, dict[str, Any]]]) -> list[int | None]:
        """Per address read (its MBean, its attributes), the messages it holds, each counted
        once, as its max-size-messages limit and the engine count them (DESIGN §2: the address's
        messages). An address's MessageCount sums its queues: with 3 queues a real 2.40 read
        153 for the 51 messages its limit of 50 blocked at, an overshoot of 103 where Artemis's
        is 1 (a review). An address of several queues holds the largest of their counts, every
        message routed to each (exact unless a queue's filter takes fewer); None when those
        counts could not be read."""
        several = [
            (index, mbean)
            for index, (mbean, value) in enumerate(values)
            if len(value.get("QueueNames") or ()) > 1
        ]
        held: list[int | None] = [int(value["MessageCount"]) for _, value in values]
        if not several:
            return held
        answers = self._post(
            [
                {
                    "type": "read",
                    "mbean": f"{mbean},subcomponent=queues,*",
                    "attribute": "MessageCount",
                }
                for _, mbean in several
            ]
        )
        for (index, _), answer in zip(several, answers, strict=True):
            counts = answer.get("value") if answer.get("status") == 200 else None
            queues = list(counts.values()) if isinstance(counts, dict) else []
            if not queues or not all(
                isinstance(queue, dict) and isinstance(queue.get("MessageCount"), int)
                for queue in queues
            ):
                held[index] = None  # unknown, not the sum
                continue
            held[index] = max(int(queue["MessageCount"]) for queue in queues)
        return held


class ArtemisCollector(LogCollector):
    """Reads an Artemis log (and optionally samples Jolokia) into one collector session."""

    log_kind = "Artemis"

    def __init__(
        self,
        *,
        log_path: Path,
        raw_dir: Path,
        state_path: Path,
        broker: str,
        log_zone: tzinfo | None = None,
        jolokia: JolokiaReader | None = None,
        sampled_addresses: frozenset[str] | None = None,
        **options: Any,
    ) -> None:
        self.log_zone = log_zone
        self.sampled_addresses = sampled_addresses  # None: every address Jolokia lists
        self._said_not_listed: set[str] = set()  # --address names said to be absent, once each
        self.addresses: dict[str, AddressState] = {}
        self.disk_full = False  # the broker's disk alarm (every producer blocked)
        super().__init__(
            log_path=log_path,
            raw_dir=raw_dir,
            state_path=state_path,
            broker=broker,
            sampler=None if jolokia is None else jolokia.addresses,
            sampler_name=f"Jolokia {jolokia.url}" if jolokia is not None else "",
            **options,
        )

    # -- state --------------------------------------------------------------------------------
    def entities_json(self) -> dict[str, Any]:
        return {
            "addresses": {name: a.to_json() for name, a in sorted(self.addresses.items())},
            "disk_full": self.disk_full,
        }

    def load_entities(self, data: dict[str, Any]) -> None:
        # A checkpoint of a release without the disk alarm holds the address map itself (each
        # address a dict: never the bool ``disk_full`` is).
        prefix = "entities."
        if "disk_full" in data and not isinstance(data["disk_full"], dict):
            unknown = sorted(set(data) - {"disk_full", "addresses"})
            if unknown:
                raise StateFieldError(f"{prefix}{unknown[0]}", "not a field of Artemis's state")
            self.disk_full = checked_field(data, "disk_full", "bool", prefix=prefix)
            data = checked_field(data, "addresses", "object", prefix=prefix)
            prefix = "entities.addresses."
        self.addresses = {
            name: _address_state(fields, f"{prefix}{name}") for name, fields in data.items()
        }

    def carry_over(self, entities: dict[str, Any], watermark: datetime) -> None:
        """The disk alarm and the addresses the last run left blocked, as this run's first
        rows at its watermark; each address's count starts again with this run."""
        self.load_entities(entities)
        extra = {"origin": ORIGIN_ARTEMIS_LOG, "reason": REASON_CARRIED_OVER}
        if self.disk_full:
            self._disk_row(watermark, extra)
        for name, address in sorted(self.addresses.items()):
            address.blocked_count = int(address.blocked)
            if address.blocked:
                self._flow_row(watermark, name, depth_msgs=None, depth_bytes=None, extra=extra)

    def held_now(self) -> list[str]:
        held = [f"address {name}" for name, a in sorted(self.addresses.items()) if a.blocked]
        return (["disk alarm"] if self.disk_full else []) + held

    # -- rows ---------------------------------------------------------------------------------
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
        state = self.addresses[address]
        policy = state.policy or "BLOCK"  # only BLOCK logs the lines; samples read the setting
        # The limits stop the flow only under BLOCK (-1: no limit, logged as 0 = off). Artemis
        # is full while the size is >= max-size-bytes, or the messages >= max-size-messages,
        # and free again below them (SizeAwareMetric, its lower marks the limits): the columns
        # hold the limits themselves, as the engine writes max-size-bytes (DESIGN §2), so
        # Artemis stops at the count threshold where Qpid stops past it (its strict >).
        under_block = policy == "BLOCK"
        limit = state.max_size_bytes if under_block and state.max_size_bytes else 0
        count_limit = state.max_size_messages if under_block and state.max_size_messages else 0
        detail = {
            "address": address,
            "address_size": depth_bytes,
            "max_size_bytes": state.max_size_bytes,
            # Where the address has one: a message limit is rarely set.
            "max_size_messages": state.max_size_messages
            if state.max_size_messages not in (None, -1)
            else None,
            "policy": policy,
            # The engine's key and meaning (flowctl_core/protocols/artemis.py): on every event
            # of the address, as the advice reads it as of the latest one with its settings.
            "reject_threshold": state.reject_threshold,
            **extra,
        }
        self.row(
            ts,
            event_type or ("flow_stopped" if state.blocked else "flow_resumed"),
            queue=address,
            depth_msgs=depth_msgs,
            depth_bytes=depth_bytes,
            flow_stopped=state.blocked,
            flow_stopped_count=state.blocked_count,
            flow_stop_count=max(count_limit, 0),
            flow_resume_count=max(count_limit, 0),
            flow_stop_size=max(limit, 0),
            flow_resume_size=max(limit, 0),
            max_count=0,
            max_size=0,
            detail=json.dumps({k: v for k, v in detail.items() if v is not None}, sort_keys=True),
        )

    # -- the log ------------------------------------------------------------------------------
    def parse(self, text: str) -> LogLine | None:
        return parse_line(text, self.log_zone)

    def may_write(self, line: LogLine) -> bool:
        # A disk's block of an address writes nothing but changes what its unblocking writes.
        return (
            line.is_flow
            or line.code in LIFECYCLE_CODES
            or line.code in DISK_CODES
            or line.code == DISK_BLOCKING
        )

    def owes_rows(self, ts: datetime) -> bool:
        # Any line or sample past a disk's release settles whether the addresses it freed were
        # held (:meth:`_settle_releases`).
        return any(self._release_settled_by(ts, a) for a in self.addresses.values())

    def settle(self, ts: datetime) -> None:
        self._settle_releases(ts)

    @staticmethod
    def _release_settled_by(ts: datetime, address: AddressState) -> bool:
        """Whether ``ts`` is past the moment in which the disk's release of ``address`` would
        have logged its "Unblocking" (:data:`DISK_RELEASE_S`)."""
        released = address.disk_released_us
        return released is not None and to_us(ts) - released > DISK_RELEASE_S * US_PER_SECOND

    def _settle_releases(self, ts: datetime) -> None:
        """Write the block of each address a disk freed that had no "Unblocking" in the
        moment of its release (held by max-size-bytes since), as soon as the log or a sample
        is past that moment, not when it drains: samples and metrics see it blocked."""
        for name, address in sorted(self.addresses.items()):
            if self._release_settled_by(ts, address):
                self._held_since_the_disk(ts, name, address)

    def _disk_row(self, ts: datetime, extra: dict[str, Any]) -> None:
        detail = {"resource": "disk", "origin": ORIGIN_ARTEMIS_LOG, **extra}
        self.row(
            ts,
            "alarm_raised" if self.disk_full else "alarm_cleared",
            detail=json.dumps({k: v for k, v in detail.items() if v is not None}, sort_keys=True),
        )

    def _held_since_the_disk(self, ts: datetime, name: str, address: AddressState) -> bool:
        """Whether ``address``, freed by the disk, was still held at ``ts`` by max-size-bytes
        (no "Unblocking" in the moment the disk was freed); if so its block is written, from
        then. The release is settled either way."""
        released, address.disk_released_us = address.disk_released_us, None
        if released is None or to_us(ts) - released <= DISK_RELEASE_S * US_PER_SECOND:
            return False
        if not address.may_block:
            # PAGE, DROP or FAIL: past max-size-bytes it pages, drops or fails, and lets its
            # producers send once the disk is free; its "Unblocking" waits until it is under
            # the limit again (a review: a PAGE address was written blocked for hours).
            return False
        address.blocked = True
        address.blocked_count += 1
        self._flow_row(
            from_us(released),
            name,
            depth_msgs=None,
            depth_bytes=None,
            extra={
                "origin": ORIGIN_ARTEMIS_LOG,
                "log_code": DISK_BLOCKING,
                "reason": "past max-size-bytes when the disk was freed",
            },
        )
        return True

    def _close_blocked(self, ts: datetime, reason: str, **extra: str) -> None:
        if self.disk_full:
            self.disk_full = False
            self._disk_row(ts, {"reason": reason, **extra})
        for name, address in sorted(self.addresses.items()):
            self._held_since_the_disk(ts, name, address)
            address.disk_blocked = False  # a broker that stops holds nothing
            if address.blocked:
                address.blocked = False
                self._flow_row(
                    ts,
                    name,
                    depth_msgs=None,
                    depth_bytes=None,
                    extra={"origin": ORIGIN_ARTEMIS_LOG, "reason": reason, **extra},
                )

    def on_line(self, line: LogLine) -> None:
        if line.code == STOPPED:
            self._close_blocked(line.ts, REASON_BROKER_STOPPED)
        elif line.code in STARTING_CODES and self.last_line is not None:
            self._close_blocked(
                self.last_line, REASON_BROKER_RESTARTED, **self.crash_seen(self.last_line)
            )
        elif line.disk_full is not None:
            if line.disk_full == self.disk_full:
                return  # logged once per change; a repeat (a restarted read) changes nothing
            self.disk_full = line.disk_full
            if not line.disk_full:
                for address in self.addresses.values():
                    if address.disk_blocked:
                        address.disk_blocked = False
                        address.disk_released_us = to_us(line.ts)
            self._disk_row(
                line.ts,
                {
                    "log_code": line.code,
                    "limit": line.disk_limit,
                    "free_space": line.free_space,
                    "usage": line.disk_usage,
                },
            )
        elif line.code == DISK_BLOCKING and line.address is not None:
            address = self.addresses.setdefault(line.address, AddressState())
            address.disk_blocked = True
            address.missing_since_us = None  # there: a sample that missed it is no removal
        elif line.is_flow:
            assert line.address is not None
            address = self.addresses.setdefault(line.address, AddressState())
            address.missing_since_us = None  # there: a sample that missed it is no removal
            blocking = line.code == BLOCKING
            if line.max_size_bytes is not None:
                address.max_size_bytes = line.max_size_bytes
            if line.max_messages is not None:
                address.max_size_messages = line.max_messages
            address.size_bytes = line.size_bytes
            if blocking and address.blocked:
                log.warning(
                    "%s: address %r blocked again without unblocking: not counted twice",
                    self.log_path,
                    line.address,
                )
                return
            if not blocking and not address.blocked:
                if not address.may_block:
                    # Only BLOCK logs "Blocking": another policy's "Unblocking" ends the disk's
                    # block, however late (once the address is under max-size-bytes again).
                    address.disk_blocked = False
                    address.disk_released_us = None
                    return
                if address.disk_blocked:
                    address.disk_blocked = False  # the disk's block ended: no flow event to end
                    return
                if address.disk_released_us is not None and not self._held_since_the_disk(
                    line.ts, line.address, address
                ):
                    return  # unblocked as the disk was freed
            elif blocking:
                address.disk_released_us = None
            address.blocked = blocking
            address.blocked_count += blocking
            self._flow_row(
                line.ts,
                line.address,
                depth_msgs=line.messages,
                depth_bytes=line.size_bytes,
                extra={"origin": ORIGIN_ARTEMIS_LOG, "log_code": line.code},
            )

    # -- samples ------------------------------------------------------------------------------
    def write_sample(self, taken: datetime, observed: Observed) -> None:
        """Each address read as a ``queue_declared`` row: the address as observed."""
        self._say_addresses_not_listed(observed)
        # First: a removal is stamped at an earlier sample, before this one's rows.
        self._end_removed(taken, observed)
        for name, values in sorted(observed.items()):
            if not self._sampled(name) or values is None:
                continue  # not asked for, or listed but its read failed: no figures to write
            address = self.addresses.setdefault(name, AddressState())
            if values["max_size_bytes"] is not None:
                address.max_size_bytes = int(values["max_size_bytes"])
            if values.get("max_size_messages") is not None:
                address.max_size_messages = int(values["max_size_messages"])
            address.policy = values["policy"] or address.policy
            threshold = values.get("reject_threshold")
            if threshold is not None:  # -1 is Artemis's "none", which the engine leaves out
                address.reject_threshold = None if int(threshold) == -1 else int(threshold)
            address.size_bytes = values["address_size"]
            self._flow_row(
                taken,
                name,
                depth_msgs=values["messages"],
                depth_bytes=values["address_size"],
                extra={"origin": ORIGIN_JOLOKIA, "sample_interval_ms": self.sample_interval_ms},
                event_type="queue_declared",
            )
        self._forget_gone(observed)

    def _sampled(self, name: str) -> bool:
        return self.sampled_addresses is None or name in self.sampled_addresses

    def _end_removed(self, taken: datetime, observed: Observed) -> None:
        """End the block of each blocked address two samples in a row no longer list: deleting
        an address logs no "Unblocking", and it stayed blocked for the rest of the run (a
        review). One absence is not enough: a sample's search runs before its time, so an
        address created and blocked in between is not listed by it (its block was ended at
        once: a review). The end is stamped at the first absence, and said (``reason``
        "address_removed"); an address listed again, or named by a log line, is there."""
        for name, address in sorted(self.addresses.items()):
            if not self._sampled(name):
                continue
            if name in observed:
                address.missing_since_us = None
                continue
            if address.missing_since_us is None:
                address.missing_since_us = to_us(taken)
                continue
            address.disk_blocked, address.disk_released_us = False, None
            if address.blocked:
                address.blocked = False
                self._flow_row(
                    from_us(address.missing_since_us),
                    name,
                    depth_msgs=None,
                    depth_bytes=None,
                    extra={
                        "origin": ORIGIN_JOLOKIA,
                        "sample_interval_ms": self.sample_interval_ms,
                        "reason": REASON_ADDRESS_REMOVED,
                    },
                )

    def _say_addresses_not_listed(self, observed: Observed) -> None:
        """An ``--address`` the broker does not list is warned about once (a typo sampled
        nothing, silently: an audit); not refused, as an address may be created later."""
        missing = sorted((self.sampled_addresses or frozenset()) - set(observed))
        for name in [n for n in missing if n not in self._said_not_listed]:
            self._said_not_listed.add(name)
            # Those with figures first: the broker's own and internal ones are listed too.
            names = sorted(observed, key=lambda n: (observed[n] is None, n))
            listed = ", ".join(names[:20]) or "none"
            log.warning(
                "--address %s: the broker lists no such address (it lists: %s); not sampled "
                "until it appears",
                name,
                listed,
            )

    def _forget_gone(self, observed: Observed) -> None:
        """Drop the addresses the sample no longer lists that have nothing to carry on
        (:attr:`AddressState.forgettable`): temporary addresses (a request / reply client's)
        otherwise piled up in the state that every checkpoint copies (an audit). One that comes
        back starts afresh, as it would at the session's start."""
        for name in [n for n, a in self.addresses.items() if a.forgettable]:
            if self._sampled(name) and name not in observed:
                del self.addresses[name]

"""The RabbitMQ collector: a real node's resource alarms and blocked connections as
``broker_events`` (DESIGN §6, seed 004).

Events where the node emits them: each ``memory|disk resource limit alarm set / cleared`` line of
the node's own alarms in its log is an ``alarm_raised`` / ``alarm_cleared`` with
``detail.resource``, as the engine writes them (flowctl_core/broker.py ``raise_alarm``), plus the
node and ``detail.origin`` "rabbitmq-log" (a cluster's nodes log one another's alarms: each
node's collector takes its own, the node named by ``node`` or the log's ``NODE.log`` name). An
alarm of another node writes no row but holds this node's publishers as well (RabbitMQ blocks
publishers cluster-wide): when the last alarm of the cluster the log states clears, the
connections the node held blocked by an alarm are unblocked at that line. A node
that stops, or boots again without a stop line (a crash), has no alarm set and no connection:
what was open is closed at the stop line, or at the last line before the boot, with
``detail.reason``; a blocked connection, when the node is asked to stop (it closes its
connections then, seconds before its stop line: held to the stop line, a block was counted 5 s
too long on a real 3.10), and no sample makes one blocked again until the node runs again. A
blocked connection the node closes (its client dropped the socket, or an operator closed it)
is unblocked at the log's ``closing AMQP connection`` or ``Error on AMQP connection`` line.
A sample that lags and still shows it blocked is not read (one listing the connection opened
before that line, ``connected_at``: a later one on the same client port is a new connection),
nor one showing blocked a connection closed while an alarm was set before any sample saw it.

Samples where it can only be polled, with ``management`` (the management plugin's HTTP API),
every ``sample_interval_s``, of the node's own connections and queues:

* each queue as a ``queue_declared`` row: messages and bytes as its depth, ``x-max-length`` and
  ``x-max-length-bytes`` (its arguments, or a policy's) as its limits, its overflow as
  ``detail.policy`` in the engine's words (``reject`` for reject-publish, ``ring`` for
  drop-head); a queue the API lists without its statistics (a node's first seconds after it
  starts: its depth and the policy in force not known yet) is not sampled;
* each AMQP 0.9.1 connection found ``blocked`` (an alarm holds it: it tried to publish) gets a
  ``connection_blocked`` with the engine's reason ``alarm``, and a ``connection_unblocked`` once
  it runs again or is gone. ``blocking`` (an alarm is set but the connection has not published
  since: a consumer, or an idle publisher) is not blocked (seed 004: a connection that only
  consumes is not held back). Credit flow is not sampled (see :data:`BLOCKING_STATES`). The
  management API's figures are its last statistics (``collect_statistics_interval``, 5 s by
  default), so these rows are approximate: ``detail.sample_interval_ms`` says by how much at
  least.

The samples also keep the run's watermark at the collector's clock while the node is quiet (see
collectors/artemis.py). An API that refuses from the start (HTTP 4xx: the user, the password,
the address) stops the collector with the reason; one that does not answer, or refuses after
it has answered, is sampled again later. A new session opens again the node's alarms and the
blocks the last run left open (:meth:`RabbitMQCollector.carry_over`). Order, checkpoints and
restarts: collectors/base.py.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, TypeGuard

from collectors.base import (
    REASON_BROKER_RESTARTED,
    REASON_BROKER_STOPPED,
    REASON_CARRIED_OVER,
    LogCollector,
    http_json,
)
from collectors.rabbitmq_log import (
    ALARM_CLEARED,
    ALARM_SET,
    BOOT,
    CONNECTION_CLOSING,
    NODE,
    STARTING,
    STOPPED,
    STOPPING,
    RabbitLine,
    parse_line,
)
from collectors.session import StateFieldError, checked_field
from flowctl_core.errors import ConfigurationError
from schemas.broker_events import AMQP_0_9_1, ORIGIN_RABBITMQ_LOG, ORIGIN_RABBITMQ_MANAGEMENT

log = logging.getLogger("flowctl.collect")

#: A connection state that holds publishes, and the reason the engine logs for it. ``flow``
#: (credit flow) is not one: the management API reports it for seconds after a throttle of a
#: few milliseconds, so a sample of it would count a connection blocked that mostly was not.
BLOCKING_STATES = {"blocked": "alarm"}
#: How long after the log closed a connection the API may still list it, when the API does not
#: say when the connection listed was opened (``connected_at``, which tells the closed one from
#: a new connection on the same client port): a connection an operator closed waits 30 s for
#: its client's answer, which a blocked client never reads (a real 3.10: listed, still
#: "blocked", 35.6 s after its "Error on AMQP connection" line).
CLOSED_LINGER = timedelta(seconds=60)
#: How long a close is remembered at most, whatever the API lists: no API's statistics lag by
#: this much, and a busy node closes many connections during a long alarm (each remembered one
#: is in every checkpoint).
CLOSED_KEPT = timedelta(minutes=10)
#: x-overflow in the engine's words (its queue policies); drop-head is RabbitMQ's default.
OVERFLOW_POLICIES = {
    "reject-publish": "reject",
    "reject-publish-dlx": "reject",
    "drop-head": "ring",
}
DEFAULT_VHOST = "/"


@dataclass(frozen=True)
class ManagementSample:
    """One read of the management API: per queue its figures, per connection its state, and
    the queues it listed without their statistics (:func:`has_statistics`), not sampled."""

    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    connections: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per queue listed without its statistics, its node (None: not listed, as a quorum
    #: queue's while its node starts).
    without_statistics: dict[str, str | None] = field(default_factory=dict)


def has_statistics(queue: dict[str, Any]) -> bool:
    """Whether the API lists ``queue`` with its statistics. A node lists its queues from their
    records as soon as its API answers, and their statistics (``messages``, and the policy in
    force, ``effective_policy_definition``) once its first statistics come, seconds later: a
    real 3.10 listed every queue of a node just started without them for 5 s (a quorum queue
    for 10 s, without its ``node`` too), in each of 9 starts of an experiment. Sampled then,
    a queue whose limit a policy sets had none (``max_count`` 0, no overflow policy) in every
    row of those seconds, after each restart of the node. Both are needed: the agent
    collects the depth (``queue_coarse_metrics``) and the policy in force (``queue_metrics``)
    on timers of their own, so one may come first (helper-114's reading of the agent)."""
    return "messages" in queue and "effective_policy_definition" in queue


def _escaped(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def queue_name(vhost: str, name: str) -> str:
    """A queue's name in the event log: its own in the default vhost, else ``vhost/name``, with
    ``%`` and ``/`` inside either part percent-encoded, so that one name is one queue (queue
    ``b`` of vhost ``a`` is ``a/b``; a queue named ``a/b`` in the default vhost is ``a%2Fb``).
    ``detail.vhost`` of the sample keeps the vhost as the broker names it."""
    if vhost == DEFAULT_VHOST:
        return _escaped(name)
    return f"{_escaped(vhost)}/{_escaped(name)}"


class ManagementReader:
    """The management plugin's HTTP API: queues and connections, two GETs per sample."""

    def __init__(self, url: str, user: str, password: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}"}

    def _get(self, path: str, columns: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"columns": columns})
        request = urllib.request.Request(f"{self.url}/api/{path}?{query}", headers=self.headers)
        found: list[dict[str, Any]] = http_json(request, self.timeout_s, "the management API")
        return found

    def read(self) -> ManagementSample:
        queue_columns = "name,vhost,node,messages,message_bytes,arguments,type"
        listed = self._get("queues", f"{queue_columns},effective_policy_definition")
        queues = {
            queue_name(q["vhost"], q["name"]): {
                "messages": q.get("messages"),
                "message_bytes": q.get("message_bytes"),
                "arguments": queue_arguments(
                    q.get("effective_policy_definition") or {}, q.get("arguments") or {}
                ),
                "type": q.get("type"),
                "vhost": q["vhost"],
                "node": q.get("node"),
            }
            for q in listed
            if has_statistics(q)
        }
        without = {
            queue_name(q["vhost"], q["name"]): q.get("node")
            for q in listed
            if not has_statistics(q)
        }
        connections = {
            c["name"]: {
                "state": c.get("state"),
                "protocol": c.get("protocol"),
                "client_name": c.get("user_provided_name"),
                "node": c.get("node"),
                "connected_at": c.get("connected_at"),  # ms since the epoch
            }
            for c in self._get(
                "connections", "name,node,state,protocol,user_provided_name,connected_at"
            )
        }
        return ManagementSample(queues, connections, without)


def _policy_limits(policy: dict[str, Any]) -> dict[str, Any]:
    """A policy's length limits and overflow in the words of the queue arguments."""
    names = {"max-length": "x-max-length", "max-length-bytes": "x-max-length-bytes"}
    names["overflow"] = "x-overflow"
    return {argument: policy[key] for key, argument in names.items() if key in policy}


def queue_arguments(policy: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """A queue's arguments with the limits its policy sets, as RabbitMQ applies both: a length
    limit set by the two is the smaller (its ``res_min``; an audit saw an argument's 10000 hide
    the policy's 100 in force), while the argument's overflow wins over the policy's."""
    from_policy = _policy_limits(policy)
    merged = {**from_policy, **arguments}
    for key in ("x-max-length", "x-max-length-bytes"):
        policy_limit, argument_limit = from_policy.get(key), arguments.get(key)
        if _a_count(policy_limit) and _a_count(argument_limit):
            merged[key] = min(policy_limit, argument_limit)
    return merged


def _a_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def node_of_log(log_path: Path) -> str | None:
    """``rabbit@host`` of ``rabbit@host.log`` (RabbitMQ's own naming), else None."""
    stem = log_path.name.removesuffix(".log")
    return stem if "@" in stem and log_path.name.endswith(".log") else None


def _client(connection: dict[str, Any]) -> dict[str, Any]:
    """The name the client gave its connection, when it gave one (the connection's own name is
    its addresses, ``127.0.0.1:50712 -> 127.0.0.1:5672``)."""
    return {"client_name": connection["client_name"]} if connection.get("client_name") else {}


@dataclass
class NodeState:
    """What the session knows of the node: its alarms set (``resource@node``), the connections
    it holds blocked, with the reason, the other nodes' alarms as its log states them (an
    alarm on any node blocks the publishers of every node; they get no rows here, each node's
    collector writes its own), whether it is stopping (asked to stop, not yet stopped: its
    connections are closed, and a sample that lags shows them as they were), and the
    connections its log closed while they were blocked or an alarm was set, which samples that
    lag may still show blocked."""

    alarms: dict[str, bool] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    cluster_alarms: dict[str, bool] = field(default_factory=dict)
    stopping: bool = False
    #: Per name, when the log closed it (UTC, ISO).
    closed: dict[str, str] = field(default_factory=dict)

    def any_alarm(self) -> bool:
        """An alarm set anywhere in the cluster, which holds this node's publishers."""
        return any(self.alarms.values()) or any(self.cluster_alarms.values())


#: The node's state in a checkpoint: per field the kind of its value, or for an object (by
#: name) that of each of its values (collectors/session.py ``checked_field``).
_NODE_FIELDS = {
    "alarms": "bool",  # per resource@node
    "blocked": "str",  # per connection, the reason
    "cluster_alarms": "bool",
    "stopping": "bool",
    "closed": "str",  # per connection, an ISO time
}


def _entries(data: dict[str, Any], name: str) -> dict[str, Any]:
    """``data[name]`` of a checkpoint's node state, an object whose values are of their kind
    (:data:`_NODE_FIELDS`), or {} when left out; else :class:`StateFieldError` naming it."""
    prefix = f"entities.{name}."
    entries = checked_field(data, name, "object", prefix="entities.", required=False) or {}
    for key in entries:
        value = checked_field(entries, key, _NODE_FIELDS[name], prefix=prefix)
        if name in ("alarms", "cluster_alarms") and "@" not in key:
            raise StateFieldError(f"{prefix}{key}", "not an alarm's resource@node")
        if name == "closed" and not _a_time(value):
            raise StateFieldError(f"{prefix}{key}", f"{json.dumps(value)[:60]} is not a time")
    return dict(entries)


def _a_time(text: str) -> bool:
    """Whether ``text`` is an ISO time with its offset (as :meth:`datetime.isoformat` of a UTC
    time writes it)."""
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


class RabbitMQCollector(LogCollector):
    """Reads a RabbitMQ node's log (and optionally samples its management API) into one
    collector session."""

    log_kind = "RabbitMQ"

    def __init__(
        self,
        *,
        log_path: Path,
        raw_dir: Path,
        state_path: Path,
        broker: str,
        log_zone: tzinfo | None = None,
        management: ManagementReader | None = None,
        node: str | None = None,
        sampled_queues: frozenset[str] | None = None,
        **options: Any,
    ) -> None:
        self.log_zone = log_zone
        # The node this log is of (its file is NODE.log by default): a cluster's nodes log one
        # another's alarms, and the management API answers for the whole cluster.
        self.node_name = node if node is not None else node_of_log(log_path)
        self.sampled_queues = sampled_queues  # None: every queue
        self.node = NodeState()
        self._said_without_statistics = False
        super().__init__(
            log_path=log_path,
            raw_dir=raw_dir,
            state_path=state_path,
            broker=broker,
            sampler=None if management is None else management.read,
            sampler_name=f"the management API {management.url}" if management else "",
            **options,
        )

    # -- state --------------------------------------------------------------------------------
    def entities_json(self) -> dict[str, Any]:
        return {
            "alarms": dict(sorted(self.node.alarms.items())),
            "blocked": dict(self.node.blocked),
            "cluster_alarms": dict(sorted(self.node.cluster_alarms.items())),
            "stopping": self.node.stopping,
            "closed": dict(sorted(self.node.closed.items())),
        }

    def load_entities(self, data: dict[str, Any]) -> None:
        # Each field checked (b81d20b did Artemis's): "alarms": 5 crashed, "stopping": "no" was
        # read as true (a review). A field left out is a state file of an earlier release.
        unknown = sorted(set(data) - set(_NODE_FIELDS))
        if unknown:
            raise StateFieldError(f"entities.{unknown[0]}", "not a field of RabbitMQ's state")
        self.node = NodeState(
            _entries(data, "alarms"),
            _entries(data, "blocked"),
            _entries(data, "cluster_alarms"),
            bool(checked_field(data, "stopping", "bool", prefix="entities.", required=False)),
            _entries(data, "closed"),
        )

    def carry_over(self, entities: dict[str, Any], watermark: datetime) -> None:
        """The node's alarms and the connections it held blocked, as the last run left them, as
        this run's first rows at its watermark (collectors/base.py): the new run's clear or
        unblock was a lone end the pipeline ignores (a review)."""
        # The closes remembered are kept: the API lags the log whichever run samples it, and a
        # connection the last run saw closed is still listed, "blocked", in this run's first
        # samples (a review).
        self.load_entities(entities)
        for key, raised in sorted(self.node.alarms.items()):
            if raised:
                resource, node = key.split("@", 1)
                self._alarm_row(watermark, True, resource, node, reason=REASON_CARRIED_OVER)
        for name, held_by in sorted(self.node.blocked.items()):
            # A block is known from samples only: marked sampled, as the one it goes on with.
            self._connection_row(
                watermark,
                name,
                REASON_CARRIED_OVER,
                held_by=held_by,
                origin=ORIGIN_RABBITMQ_MANAGEMENT,
                sample_interval_ms=self.sample_interval_ms,
            )

    def held_now(self) -> list[str]:
        alarms = [f"{key} alarm" for key, raised in sorted(self.node.alarms.items()) if raised]
        held = [f"connection {name} ({why})" for name, why in sorted(self.node.blocked.items())]
        return alarms + held

    # -- rows ---------------------------------------------------------------------------------
    def _alarm_row(
        self, ts: datetime, raised: bool, resource: str, node: str, **extra: Any
    ) -> None:
        detail = {"resource": resource, "node": node, "origin": ORIGIN_RABBITMQ_LOG, **extra}
        self.row(
            ts,
            "alarm_raised" if raised else "alarm_cleared",
            detail=json.dumps(detail, sort_keys=True),
        )

    def _connection_row(self, ts: datetime, connection: str, reason: str, **extra: Any) -> None:
        blocked = connection in self.node.blocked
        detail = {"reason": reason, **extra}
        self.row(
            ts,
            "connection_blocked" if blocked else "connection_unblocked",
            connection=connection,
            protocol=AMQP_0_9_1,
            detail=json.dumps(detail, sort_keys=True),
        )

    # -- the log ------------------------------------------------------------------------------
    def parse(self, text: str) -> RabbitLine | None:
        return parse_line(text, self.log_zone)

    def may_write(self, line: RabbitLine) -> bool:
        if line.kind == NODE:
            self._check_node(line)
            return False
        if line.kind == CONNECTION_CLOSING:
            # A busy node closes many others; while an alarm is set, a connection closed before
            # any sample saw it blocked may still be sampled blocked (the API lags).
            sampled_later = self.sampler is not None and self.node.any_alarm()
            return line.connection in self.node.blocked or sampled_later
        return line.kind is not None

    def _check_node(self, banner: RabbitLine) -> None:
        """The boot banner names the node whose log this is: another than ``--node`` would make
        every alarm another node's and filter out every queue and connection sampled, so the
        collector would write nothing, silently (an audit). Refused, before the line's rows."""
        if self.node_name is not None and banner.node != self.node_name:
            raise ConfigurationError(
                f"{self.log_path}: the node's boot banner ({banner.ts:%Y-%m-%d %H:%M:%S} UTC) "
                f"says this is {banner.node}'s log, not {self.node_name}'s (--node, or the log "
                f"file's name): give --node {banner.node}"
            )

    def _node_down(self, ts: datetime, reason: str, **extra: Any) -> None:
        """A node that stopped has no alarm set and no connection (and its log says no more of
        the other nodes' alarms until it logs them again)."""
        self.node.cluster_alarms.clear()
        self.node.closed.clear()
        self.node.stopping = False
        for key, raised in sorted(self.node.alarms.items()):
            if raised:
                resource, node = key.split("@", 1)
                self.node.alarms[key] = False
                self._alarm_row(ts, False, resource, node, reason=reason, **extra)
        self._connections_closed(ts, reason, **extra)

    def _connections_closed(self, ts: datetime, reason: str, **extra: Any) -> None:
        for connection in sorted(self.node.blocked):
            del self.node.blocked[connection]
            self._connection_row(ts, connection, reason, origin=ORIGIN_RABBITMQ_LOG, **extra)

    def on_line(self, line: RabbitLine) -> None:
        if line.kind == CONNECTION_CLOSING:
            assert line.connection is not None
            self._forget_closes_before(line.ts - CLOSED_KEPT)
            self.node.closed[line.connection] = line.ts.isoformat()
            reason = self.node.blocked.pop(line.connection, None)
            if reason is not None:
                # Then, not at the next sample (seconds to --sample-interval later).
                self._connection_row(
                    line.ts, line.connection, "closed", held_by=reason, origin=ORIGIN_RABBITMQ_LOG
                )
        elif line.kind == STOPPING:
            # The node closes every connection as it starts to stop; its alarms last until
            # its stop line.
            self._connections_closed(line.ts, REASON_BROKER_STOPPED)
            self.node.stopping = True
        elif line.kind == STOPPED:
            self._node_down(line.ts, REASON_BROKER_STOPPED)
        elif line.kind in (BOOT, STARTING) and self.last_line is not None:
            self._node_down(
                self.last_line, REASON_BROKER_RESTARTED, **self.crash_seen(self.last_line)
            )
        elif line.kind in (ALARM_SET, ALARM_CLEARED):
            assert line.resource is not None and line.node is not None
            key = f"{line.resource}@{line.node}"
            raised = line.kind == ALARM_SET
            if self.node_name is not None and line.node != self.node_name:
                # Another node's alarm: no row (its own log and collector have it), but it holds
                # this node's publishers too, so the blocks sampled here are kept while it lasts.
                if self.node.cluster_alarms.get(key, False) == raised:
                    return
                self.node.cluster_alarms[key] = raised
            else:
                if self.node.alarms.get(key, False) == raised:
                    return
                self.node.alarms[key] = raised
                self._alarm_row(line.ts, raised, line.resource, line.node)
            if not self.node.any_alarm():
                # No sample is read as blocked now (the API's lag included): the closes need not
                # be remembered.
                self.node.closed.clear()
                # The node unblocks its connections when its last alarm clears: then, exactly,
                # not at the next sample.
                for name, reason in sorted(self.node.blocked.items()):
                    if reason == "alarm":
                        del self.node.blocked[name]
                        self._connection_row(line.ts, name, reason, origin=ORIGIN_RABBITMQ_LOG)

    # -- samples ------------------------------------------------------------------------------
    def _forget_closes_before(self, oldest: datetime) -> None:
        self.node.closed = {
            name: at
            for name, at in self.node.closed.items()
            if datetime.fromisoformat(at) >= oldest
        }

    def _closed_by_the_log(self, name: str, connection: dict[str, Any], taken: datetime) -> bool:
        """Whether ``connection``, listed by a sample taken at ``taken``, is one the log closed,
        still in the API's statistics: opened before the close (``connected_at``), or, where the
        API does not say, listed within :data:`CLOSED_LINGER` of it. A connection opened after
        it is a new one on the same client port."""
        at = self.node.closed.get(name)
        if at is None:
            return False
        closed_at = datetime.fromisoformat(at)
        if taken - closed_at >= CLOSED_KEPT:
            return False
        connected_ms = connection.get("connected_at")
        if isinstance(connected_ms, int) and not isinstance(connected_ms, bool):
            return connected_ms <= closed_at.timestamp() * 1000
        return taken - closed_at < CLOSED_LINGER

    def _on_this_node(self, entity: dict[str, Any]) -> bool:
        """A connection or queue (its leader) of this collector's node (the API answers for the
        cluster; each node's collector samples its own)."""
        node = entity.get("node")
        return self.node_name is None or node is None or node == self.node_name

    def _say_without_statistics(self, names: list[str]) -> None:
        """Said once a run: a node that never has them (its statistics disabled) would
        otherwise have its queues left out of every sample in silence."""
        self._said_without_statistics = True
        log.info(
            "%s lists %d queue(s) without their statistics (%s): not sampled until it has them "
            "(a node just started, or a queue just declared, has them within seconds; a node "
            "whose management statistics are disabled, never); not said again this run",
            self.sampler_name,
            len(names),
            ", ".join(names[:10]) + (", ..." if len(names) > 10 else ""),
        )

    def write_sample(self, taken: datetime, observed: ManagementSample) -> None:
        sampled = {
            "origin": ORIGIN_RABBITMQ_MANAGEMENT,
            "sample_interval_ms": self.sample_interval_ms,
        }
        for name, connection in sorted(observed.connections.items()):
            protocol = str(connection.get("protocol") or "")
            if not protocol.startswith("AMQP 0-9-1") or not self._on_this_node(connection):
                continue
            if self._closed_by_the_log(name, connection, taken):
                continue  # still in the API's statistics
            reason = BLOCKING_STATES.get(str(connection.get("state")))
            if reason == "alarm" and (self.node.stopping or not self.node.any_alarm()):
                # The API's statistics lag (up to collect_statistics_interval): a connection it
                # still shows blocked after the log's clear line, or after the node was asked
                # to stop (it closed them all), is not held any more.
                reason = None
            was = self.node.blocked.get(name)
            if reason == was:
                continue
            if reason is not None:
                self.node.blocked[name] = reason
                self._connection_row(taken, name, reason, **sampled, **_client(connection))
            else:
                del self.node.blocked[name]
                self._connection_row(taken, name, str(was), **sampled, **_client(connection))
        listed = {n: c for n, c in observed.connections.items() if self._on_this_node(c)}
        # Gone from the API, or listed as a new connection: its name is no longer the closed one.
        self.node.closed = {
            name: at
            for name, at in self.node.closed.items()
            if name in listed and self._closed_by_the_log(name, listed[name], taken)
        }
        for name in sorted(set(self.node.blocked) - set(listed)):
            reason = self.node.blocked.pop(name)
            self._connection_row(taken, name, "closed", held_by=reason, **sampled)
        unsampled = [
            name
            for name, node in sorted(observed.without_statistics.items())
            if self._on_this_node({"node": node})
            and (self.sampled_queues is None or name in self.sampled_queues)
        ]
        if unsampled and not self._said_without_statistics:
            self._say_without_statistics(unsampled)
        for name, queue in sorted(observed.queues.items()):
            if not self._on_this_node(queue) or (
                self.sampled_queues is not None and name not in self.sampled_queues
            ):
                continue
            arguments = queue["arguments"]
            max_count = int(arguments.get("x-max-length") or 0)
            max_size = int(arguments.get("x-max-length-bytes") or 0)
            detail: dict[str, Any] = {**sampled, "vhost": queue["vhost"], "type": queue["type"]}
            if max_count or max_size:
                overflow = str(arguments.get("x-overflow", "drop-head"))
                detail["policy"] = OVERFLOW_POLICIES.get(overflow, overflow)
            self.row(
                taken,
                "queue_declared",
                queue=name,
                depth_msgs=queue["messages"],
                depth_bytes=queue["message_bytes"],
                flow_stopped=False,
                flow_stopped_count=0,
                flow_stop_count=0,
                flow_resume_count=0,
                flow_stop_size=0,
                flow_resume_size=0,
                max_count=max_count,
                max_size=max_size,
                detail=json.dumps(detail, sort_keys=True),
            )

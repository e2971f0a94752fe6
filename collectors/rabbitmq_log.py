"""What a RabbitMQ node's log line says about flow control, read off its text (no I/O).

RabbitMQ 3.9+ writes ``2026-11-27 22:17:58.054471+00:00 [warning] <0.320.0> message`` (the
offset in the stamp; without one, the node's zone is given). The lines a collector acts on
(DESIGN §6, seed 004's resource alarms), as RabbitMQ 3.10 words them:

* ``memory resource limit alarm set on node rabbit@host.`` / ``... alarm cleared on node ...``
  (and ``disk``; ``cleared for dead node`` when a node left the cluster): the node blocks
  publishing connections while an alarm is set. Every node of a cluster logs every node's
  alarms; "cleared across the cluster" is a summary, not an event;
* ``Logging: configured log handlers are now ACTIVE`` (a boot's first line), ``Starting
  RabbitMQ 3.10.8 on Erlang ...`` and ``Successfully stopped RabbitMQ and its dependencies``: a
  node that stops, or boots again after a crash, has no alarm set;
* ``RabbitMQ is asked to stop...`` (``rabbitmqctl stop`` or ``stop_app``): the node stops its
  listeners and closes every client connection within milliseconds of this line, seconds before
  its stop line (5 s on a real 3.10 with the management plugin);
* ``closing AMQP connection <0.837.0> (127.0.0.1:36690 -> 127.0.0.1:5672 - app, vhost: '/',
  user: 'guest'):`` as the node closes one connection (the client's name after `` - ``, when it
  gave one), or without its vhost and user when a socket error or missed heartbeats close it
  (``closing AMQP connection <0.837.0> (127.0.0.1:36690 -> 127.0.0.1:5672):``). A blocked
  publisher that drops its socket is closed here, when the node notices (on a real 3.10, at its
  next heartbeat); one that closes cleanly is not: the node reads nothing of a blocked
  connection until its alarm clears, so it stays blocked until then;
* ``Error on AMQP connection <0.795.0> (127.0.0.1:43942 -> 127.0.0.1:5672 - app, vhost: '/',
  user: 'guest', state: blocked), channel 0:``: an error of the connection itself (a channel's
  is a "Channel error"), which closes it: ``rabbitmqctl close_connection`` or the management
  UI's "Force close". The node sends its close then; a blocked client answers it only once it
  reads again, so the API lists the connection, still blocked, for seconds after (3 s and more
  on a real 3.10).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from collectors.local_time import readings_in_utc

ALARM_SET = "alarm_set"
ALARM_CLEARED = "alarm_cleared"
BOOT = "boot"  # a boot's first line: "Logging: configured log handlers are now ACTIVE"
STARTING = "starting"
STOPPED = "stopped"
STOPPING = "stopping"  # "RabbitMQ is asked to stop...": its connections close now
NODE = "node"  # the boot banner's "node : rabbit@host": whose log this is
CONNECTION_CLOSING = "connection_closing"  # "closing AMQP connection <pid> (name...": gone now

_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
    r"\[(?P<level>[a-z]+)\]\s+(?:<[^>]*>\s*)?(?P<text>.*)$"
)
_ALARM = re.compile(
    r"^(?P<resource>memory|disk) resource limit alarm (?P<what>set|cleared) "
    r"(?:on|for dead) node '?(?P<node>[^'\s]+?)'?\.?$"
)
_BOOT = "Logging: configured log handlers are now ACTIVE"
_STARTING = re.compile(r"^Starting RabbitMQ (?P<version>\S+) on Erlang")
_STOPPED = "Successfully stopped RabbitMQ and its dependencies"
_STOPPING = "RabbitMQ is asked to stop..."
_NODE = re.compile(r"^node\s+:\s+(?P<node>\S+)$")
# The connection's name is its two addresses, as the management API names it (IPv6 ones are
# bracketed, so neither holds a space), after its pid (none in 4.x's clean close) and before
# the client's name, when it gave one.
_NAMED = r"AMQP connection (?:<[^>]*> )?\((?P<connection>\S+ -> \S+?)(?: - .*)?"
_CLOSING = re.compile(rf"^(?:closing|Error on) {_NAMED}, vhost: '")
# A connection the node closes for a socket error or missed heartbeats, which its line does not
# give a vhost (RabbitMQ 3.10's rabbit_reader: "closing AMQP connection <pid> (NAME):", 4.x adds
# the duration): a blocked publisher whose host vanished is closed so, at a failed heartbeat.
# 4.x writes a clean close without the pid; a single-line formatter puts the reason after ":".
_CLOSING_WITHOUT_VHOST = re.compile(rf"^closing {_NAMED}(?:, duration: '[^']*')?\):(?:\s|$)")


@dataclass(frozen=True)
class RabbitLine:
    """One timestamped line: its time in UTC, what it says (``kind``, None for anything else),
    for an alarm its resource and node, for a connection closing its name."""

    ts: datetime
    kind: str | None
    resource: str | None = None
    node: str | None = None
    connection: str | None = None
    #: A stamp without an offset in the hour lived twice when the clocks go back names two
    #: instants: ``ts`` the first, this the second (collectors/local_time.py).
    ts_repeated: datetime | None = None


def _stamp(text: str, zone: tzinfo | None) -> tuple[datetime, datetime | None]:
    """The stamp in UTC and, for one without an offset in the hour lived twice, its second
    instant (an audit: an alarm set at 02:50 and cleared at 02:10 of the second pass lasted 0 s)."""
    stamp = datetime.fromisoformat(text.replace(" ", "T", 1))
    if stamp.tzinfo is None:
        return readings_in_utc(stamp, zone)
    return stamp.astimezone(UTC), None


def parse_line(line: str, zone: tzinfo | None) -> RabbitLine | None:
    """The line read, or None for a line without a leading timestamp (a report's continuation,
    the boot banner). ``zone``: the node's zone for stamps without an offset (None: this
    machine's)."""
    match = _LINE.match(line.rstrip("\r\n"))
    if match is None:
        return None
    ts, later = _stamp(match["ts"], zone)
    read = _said(match["text"].strip(), ts)
    return read if later is None else dataclasses.replace(read, ts_repeated=later)


def _said(text: str, ts: datetime) -> RabbitLine:
    """What a line stamped ``ts`` says."""
    alarm = _ALARM.match(text)
    if alarm is not None:
        kind = ALARM_SET if alarm["what"] == "set" else ALARM_CLEARED
        return RabbitLine(ts=ts, kind=kind, resource=alarm["resource"], node=alarm["node"])
    if text.startswith(_BOOT):
        return RabbitLine(ts=ts, kind=BOOT)
    if _STARTING.match(text):
        return RabbitLine(ts=ts, kind=STARTING)
    if text.startswith(_STOPPED):
        return RabbitLine(ts=ts, kind=STOPPED)
    if text.startswith(_STOPPING):
        return RabbitLine(ts=ts, kind=STOPPING)
    closing = _CLOSING.match(text) or _CLOSING_WITHOUT_VHOST.match(text)
    if closing is not None:
        return RabbitLine(ts=ts, kind=CONNECTION_CLOSING, connection=closing["connection"])
    banner = _NODE.match(text)
    if banner is not None:
        return RabbitLine(ts=ts, kind=NODE, node=banner["node"])
    return RabbitLine(ts=ts, kind=None)

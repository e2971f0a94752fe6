"""What an ActiveMQ Artemis log line says about flow control, read off its text (no I/O).

Artemis logs a BLOCK address that fills and drains (DESIGN §2, §6): ``AMQ222183`` "Blocking
message production on address 'A'; size=... maxSize=..." and ``AMQ221046`` "Unblocking ...",
under the default layout ``%d %-5level [%logger] %msg%n`` of ``etc/log4j2.properties`` (the date in
the broker's local time, to the millisecond). Releases before 2.27 wrote the sizes as "size is
currently: N bytes; max-size-bytes: M": both wordings are read. The broker's start
(``AMQ101000``, then ``AMQ221000``) and stop (``AMQ221002``) lines matter too: a broker that stops
holds nothing blocked any more.

A full disk blocks every producer of the broker: ``AMQ222210`` (past ``max-disk-usage``) or
``AMQ224128`` (under ``min-disk-free``) "System will start blocking producers", until
``AMQ222211`` / ``AMQ224129`` "System will unblock producers". Between them each address a
producer tried to send to logs ``AMQ222212`` "Disk Full! Blocking message production on address",
and after them ``AMQ221046`` "Unblocking" for it (an Artemis 2.40 on this machine, with
``min-disk-free`` set just under the free space and a file filling the difference).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

from collectors.local_time import readings_in_utc

BLOCKING = "AMQ222183"
UNBLOCKING = "AMQ221046"
BOOTSTRAP = "AMQ101000"  # "Starting ActiveMQ Artemis Server": a start's first line
STARTING = "AMQ221000"  # "... Message Broker is starting with configuration ..."
STOPPED = "AMQ221002"
DISK_BLOCKING = "AMQ222212"  # "Disk Full! Blocking message production on address 'A'"
#: The disk full and no longer full, by the limit that says so.
DISK_FULL = {"AMQ222210": "max-disk-usage", "AMQ224128": "min-disk-free"}
DISK_RESTORED = {"AMQ222211": "max-disk-usage", "AMQ224129": "min-disk-free"}
#: The codes a collector acts on; every other line only moves the log's clock.
FLOW_CODES = frozenset({BLOCKING, UNBLOCKING})
DISK_CODES = frozenset(DISK_FULL) | frozenset(DISK_RESTORED)
STARTING_CODES = frozenset({BOOTSTRAP, STARTING})
LIFECYCLE_CODES = STARTING_CODES | {STOPPED}

_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[,.]\d{3})\s+(?P<level>[A-Z]+)\s+"
    r"\[(?P<logger>[^\]]*)\]\s+(?:(?P<code>AMQ\d{6}):?\s*)?(?P<text>.*)$"
)
# Greedy up to the last "'; ": the sizes that follow hold no quote, an address name may.
_ADDRESS = re.compile(r"address '(?P<address>.*)'(?:;|\.|$)")
_SIZE = re.compile(
    r"(?:\bsize=(?P<size>-?\d+) bytes(?: \((?P<messages>-?\d+) messages\))?"
    r"|size is currently: (?P<old_size>-?\d+) bytes)"
)
# "Free storage space is at 63.1GB of 252.0GB total. Usage rate is 75.0% which is ..." (the total
# and usage rate: max-disk-usage's lines only).
_FREE_SPACE = re.compile(r"Free storage space is at (?P<free>\d[\d.,]*\s?[KMGTPE]?i?B)")
_USAGE = re.compile(r"Usage rate is (?P<usage>\S+?%)")
# The address's limits; 2.40 states max-size-messages beside max-size-bytes ("maxSize=-1 bytes
# (20 messages)"), the broker's are globalMaxSize's.
_MAX_SIZE = re.compile(
    r"(?:\bmaxSize=(?P<max>-?\d+) bytes(?: \((?P<max_messages>-?\d+) messages\))?"
    r"|max-size-bytes(?: on address)?: (?P<old_max>-?\d+))"
)


@dataclass(frozen=True)
class LogLine:
    """One log line with a timestamp: its time in UTC, its message code (None for a line without
    one) and, for a blocking / unblocking line, the address and the sizes it states."""

    ts: datetime
    code: str | None
    address: str | None = None
    size_bytes: int | None = None
    messages: int | None = None  # the 2.40 wording only; None when not stated (or -1)
    max_size_bytes: int | None = None
    max_messages: int | None = None  # max-size-messages (-1: none); None when not stated
    free_space: str | None = None  # a disk line's, as the broker words it ("63.1GB")
    disk_usage: str | None = None  # max-disk-usage's lines: the usage rate ("97.6%")
    #: When the clocks went back, a stamp in the hour lived twice names two instants: ``ts`` is
    #: the first, this the second (None for any other stamp). The collector takes it for a
    #: line that would otherwise come before the line it follows (collectors/local_time.py).
    ts_repeated: datetime | None = None

    @property
    def is_flow(self) -> bool:
        return self.code in FLOW_CODES and self.address is not None

    @property
    def disk_full(self) -> bool | None:
        """True for a disk-full line, False for a disk-no-longer-full one, else None."""
        return True if self.code in DISK_FULL else False if self.code in DISK_RESTORED else None

    @property
    def disk_limit(self) -> str | None:
        """The setting a disk line is about (max-disk-usage or min-disk-free)."""
        return DISK_FULL.get(self.code or "") or DISK_RESTORED.get(self.code or "")


def _int(*values: str | None) -> int | None:
    for value in values:
        if value is not None:
            return int(value)
    return None


def parse_line(line: str, zone: tzinfo | None) -> LogLine | None:
    """The line read, or None for a line without a leading timestamp (a stack trace's
    continuation, a banner). ``zone`` is the broker's log time zone (None: this machine's)."""
    match = _LINE.match(line.rstrip("\r\n"))
    if match is None:
        return None
    stamp = match["ts"].replace(",", ".")
    local = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")
    ts, later = readings_in_utc(local, zone)
    read = _parsed(match, ts)
    return read if later is None else dataclasses.replace(read, ts_repeated=later)


def _parsed(match: re.Match[str], ts: datetime) -> LogLine:
    code = match["code"]
    text = match["text"]
    if code in DISK_CODES:
        free, usage = _FREE_SPACE.search(text), _USAGE.search(text)
        return LogLine(
            ts=ts,
            code=code,
            free_space=free["free"] if free else None,
            disk_usage=usage["usage"] if usage else None,
        )
    if code == DISK_BLOCKING:
        disk_address = _ADDRESS.search(text)
        return LogLine(ts=ts, code=code, address=disk_address["address"] if disk_address else None)
    if code not in FLOW_CODES:
        return LogLine(ts=ts, code=code)
    address = _ADDRESS.search(text)
    size = _SIZE.search(text)
    max_size = _MAX_SIZE.search(text)
    messages = _int(size["messages"]) if size else None
    return LogLine(
        ts=ts,
        code=code,
        address=address["address"] if address else None,
        size_bytes=_int(size["size"], size["old_size"]) if size else None,
        messages=messages if messages is not None and messages >= 0 else None,
        max_size_bytes=_int(max_size["max"], max_size["old_max"]) if max_size else None,
        max_messages=_int(max_size["max_messages"]) if max_size else None,
    )

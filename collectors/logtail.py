"""Following a log file that its writer rolls over, truncates or recreates, by position.

A position is the file's identity (device, inode) and the byte offset after the last whole line
read; a collector stores it with what it wrote, so a restarted collector reads on from there.
Artemis rolls ``artemis.log`` to ``artemis.log.YYYY-MM-DD`` at midnight (and at a start on a new
day): the rest of the rolled file is found by its inode in the same folder and read first. A file
shorter than the offset was truncated in place and is read from its start. A line is read only
once it ends with a newline: a half-written line waits for the next poll.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("flowctl.collect")

#: The most read in one poll: a large backlog is committed in pieces, not held in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class LogPosition:
    device: int
    inode: int
    offset: int

    def to_json(self) -> dict[str, int]:
        return {"device": self.device, "inode": self.inode, "offset": self.offset}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> LogPosition:
        return cls(int(data["device"]), int(data["inode"]), int(data["offset"]))


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _rolled_file(path: Path, device: int, inode: int) -> Path | None:
    """The file in ``path``'s folder that is the (device, inode) the position was in."""
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return None
    for sibling in siblings:
        try:
            if _identity(sibling.stat()) == (device, inode) and sibling.is_file():
                return sibling
        except OSError:
            continue
    return None


def _lines_from(path: Path, offset: int, *, device: int, inode: int) -> Iterator[tuple[str, int]]:
    """Whole lines of ``path`` from ``offset``, each with the offset after it, up to a chunk."""
    with path.open("rb") as handle:
        if _identity(os.fstat(handle.fileno())) != (device, inode):
            return  # replaced between the stat and the open: the next poll sees the new one
        handle.seek(offset)
        data = handle.read(READ_CHUNK_BYTES)
    end = data.rfind(b"\n")
    if end < 0:
        return
    position = offset
    for raw in data[: end + 1].splitlines(keepends=True):
        position += len(raw)
        yield raw.decode("utf-8", errors="replace"), position


def follow(path: Path, position: LogPosition | None) -> Iterator[tuple[str, LogPosition]]:
    """The lines written to ``path`` since ``position`` (None: from the current file's start),
    each with the position after it; nothing when the file does not exist (yet)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return
    device, inode = _identity(stat)
    if position is not None and (position.device, position.inode) != (device, inode):
        rolled = _rolled_file(path, position.device, position.inode)
        if rolled is None:
            log.warning(
                "%s was replaced and its earlier file is gone: lines after byte %d of it are "
                "not collected",
                path,
                position.offset,
            )
        else:
            remaining = rolled.stat().st_size - position.offset
            for line, offset in _lines_from(
                rolled, position.offset, device=position.device, inode=position.inode
            ):
                yield line, LogPosition(position.device, position.inode, offset)
            if remaining > READ_CHUNK_BYTES:
                return  # more of the rolled file than one chunk: the rest on the next poll
            # A rolled file is complete: a last line without its newline never gets one.
        position = None
    offset = 0 if position is None else position.offset
    if offset > stat.st_size:
        log.warning(
            "%s was truncated (now %d bytes, read up to %d): read from its start",
            path,
            stat.st_size,
            offset,
        )
        offset = 0
    for line, after in _lines_from(path, offset, device=device, inode=inode):
        yield line, LogPosition(device, inode, after)

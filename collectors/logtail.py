"""Following a log file that its writer rolls over, truncates or recreates, by position.

A position is a file's identity (device, inode, and a digest of its first line) and the byte
offset after the last whole line read; a collector stores it with what it wrote, so a restarted
collector reads on from there. Artemis rolls ``artemis.log`` to ``artemis.log.YYYY-MM-DD`` at
midnight (and at a start on a new day): a position in a rolled file is found by its inode in
the same folder, the file is read to its end, then every newer rolled file of the same name
(``NAME.*``, oldest first: a collector stopped over a weekend finds two), then the live file
from its start. The digest keeps an inode freed by a rotation and given to the new log from
being taken for the old file. A live file shorter than the offset was truncated in place and is
read from its start. A line is read only once it ends with a newline: a half-written line waits
for the next poll (in a rolled file, which is complete, such a last line is lost). Each call
reads everything there is, a chunk at a time. Not read: compressed rolled files (``.gz`` ...):
a collector stopped across two rotations of a log that logrotate compresses misses the lines
written after its position to the file compressed, and says so.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("flowctl.collect")

#: What is read at once: a large backlog is read and committed in pieces, not held in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
#: Rolled files a collector does not read (a compressed roll-over is not a log it can follow).
COMPRESSED_SUFFIXES = (".gz", ".zip", ".bz2", ".xz", ".zst")


#: The bytes of a file's first line that tell it from another file with the same inode.
HEAD_BYTES = 512


@dataclass(frozen=True)
class LogPosition:
    device: int
    inode: int
    offset: int
    head: str = ""  # a digest of the file's first line ("" until it has one)

    @property
    def identity(self) -> tuple[int, int]:
        return self.device, self.inode

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "inode": self.inode,
            "offset": self.offset,
            "head": self.head,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogPosition:
        return cls(
            int(data["device"]), int(data["inode"]), int(data["offset"]), data.get("head", "")
        )


def file_head(path: Path) -> str:
    """A digest of ``path``'s first line (up to :data:`HEAD_BYTES`; "" before it is whole): a
    file deleted and its inode given to a new one (a log rotated away) is told apart by it."""
    try:
        with path.open("rb") as handle:
            data = handle.read(HEAD_BYTES)
    except OSError:
        return ""
    end = data.find(b"\n")
    if end < 0 and len(data) < HEAD_BYTES:
        return ""
    return hashlib.sha1(data[: end + 1] if end >= 0 else data).hexdigest()[:16]


def _same_file(position: LogPosition, head: str) -> bool:
    return not position.head or not head or position.head == head


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _rolled_files(path: Path) -> list[tuple[float, str, Path, tuple[int, int]]]:
    """``path``'s rolled files (``NAME.*``, not compressed), oldest first by modification time."""
    found = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return []
    for sibling in siblings:
        name = sibling.name
        if not name.startswith(f"{path.name}.") or name.endswith(COMPRESSED_SUFFIXES):
            continue
        try:
            stat = sibling.stat()
        except OSError:
            continue
        if sibling.is_file():
            found.append((stat.st_mtime, name, sibling, _identity(stat)))
    return sorted(found, key=lambda entry: (entry[0], entry[1]))


def _lines_from(path: Path, offset: int, identity: tuple[int, int]) -> Iterator[tuple[str, int]]:
    """Whole lines of ``path`` from ``offset`` to its end, each with the offset after it."""
    with path.open("rb") as handle:
        if _identity(os.fstat(handle.fileno())) != identity:
            return  # replaced between the stat and the open: the next poll sees the new one
        handle.seek(offset)
        position = offset
        while True:
            data = handle.read(READ_CHUNK_BYTES)
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) < READ_CHUNK_BYTES:
                    return  # the end, or a line still being written
                end = len(data) - 1  # a "line" longer than a chunk: taken in pieces
            for raw in data[: end + 1].splitlines(keepends=True):
                position += len(raw)
                yield raw.decode("utf-8", errors="replace"), position
            handle.seek(position)


def follow(path: Path, position: LogPosition | None) -> Iterator[tuple[str, LogPosition]]:
    """The lines written to ``path`` since ``position`` (None: from the live file's start),
    each with the position after it, up to the live file's end; ``""`` with a position when the
    position moves to another file without a line. Nothing when there is no file (yet)."""
    while True:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return
        live = _identity(stat)
        head = file_head(path)
        if position is not None and position.identity == live and not _same_file(position, head):
            log.warning(
                "%s is a new file on the inode of the one read up to byte %d (rotated away): "
                "read from its start",
                path,
                position.offset,
            )
            position = None
        if position is None or position.identity == live:
            offset = 0 if position is None else position.offset
            if offset > stat.st_size:
                log.warning(
                    "%s was truncated (now %d bytes, read up to %d): read from its start",
                    path,
                    stat.st_size,
                    offset,
                )
                offset = 0
            for line, after in _lines_from(path, offset, live):
                head = head or file_head(path)  # once its first line is whole
                yield line, LogPosition(*live, after, head)
            return
        rolled = _rolled_files(path)
        current = next(
            (
                entry
                for entry in rolled
                if entry[3] == position.identity and _same_file(position, file_head(entry[2]))
            ),
            None,
        )
        if current is None:
            log.warning(
                "%s was replaced and the file read up to byte %d is gone: what was written to "
                "it after that is not collected",
                path,
                position.offset,
            )
            position = LogPosition(*live, 0, head)
            yield "", position
            continue
        rolled_head = position.head or file_head(current[2])
        for line, after in _lines_from(current[2], position.offset, current[3]):
            position = LogPosition(*current[3], after, rolled_head)
            yield line, position
        newer = [e for e in rolled if e[:2] > current[:2] and e[3] != live]
        if newer:
            position = LogPosition(*newer[0][3], 0, file_head(newer[0][2]))
        else:
            position = LogPosition(*live, 0, head)
        yield "", position

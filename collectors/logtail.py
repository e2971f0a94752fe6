"""Following a log file that its writer rolls over, truncates or recreates, by position.

A position is a file's identity (device, inode) and the byte offset after the last whole line
read; a collector stores it with what it wrote, so a restarted collector reads on from there.
Artemis rolls ``artemis.log`` to ``artemis.log.YYYY-MM-DD`` at midnight (and at a start on a new
day): a position in a rolled file is found by its inode in the same folder, the file is read to
its end, then every newer rolled file of the same name (``NAME.*``, oldest first: a collector
stopped over a weekend finds two), then the live file from its start. A live file shorter than
the offset was truncated in place and is read from its start. A line is read only once it ends
with a newline: a half-written line waits for the next poll (in a rolled file, which is
complete, such a last line is lost). Each call reads everything there is, a chunk at a time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("flowctl.collect")

#: What is read at once: a large backlog is read and committed in pieces, not held in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
#: Rolled files a collector does not read (a compressed roll-over is not a log it can follow).
COMPRESSED_SUFFIXES = (".gz", ".zip", ".bz2", ".xz", ".zst")


@dataclass(frozen=True)
class LogPosition:
    device: int
    inode: int
    offset: int

    @property
    def identity(self) -> tuple[int, int]:
        return self.device, self.inode

    def to_json(self) -> dict[str, int]:
        return {"device": self.device, "inode": self.inode, "offset": self.offset}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> LogPosition:
        return cls(int(data["device"]), int(data["inode"]), int(data["offset"]))


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
                yield line, LogPosition(*live, after)
            return
        rolled = _rolled_files(path)
        current = next((entry for entry in rolled if entry[3] == position.identity), None)
        if current is None:
            log.warning(
                "%s was replaced and the file read up to byte %d is gone: what was written to "
                "it after that is not collected",
                path,
                position.offset,
            )
            position = LogPosition(*live, 0)
            yield "", position
            continue
        for line, after in _lines_from(current[2], position.offset, current[3]):
            position = LogPosition(*current[3], after)
            yield line, position
        newer = [e for e in rolled if e[:2] > current[:2] and e[3] != live]
        position = LogPosition(*(newer[0][3] if newer else live), 0)
        yield "", position

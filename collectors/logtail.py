"""Following a log file that its writer rolls over, truncates or recreates, by position.

A position is a file's identity (device, inode, and a digest of its first line) and the byte
offset after the last whole line read; a collector stores it with what it wrote, so a restarted
collector reads on from there. Artemis rolls ``artemis.log`` to ``artemis.log.YYYY-MM-DD`` at
midnight (and at a start on a new day): a position in a rolled file is found by its inode in
the same folder, the file is read to its end, then every newer rolled file of the same name
(``NAME.*``, oldest first by modification time: a collector stopped over a weekend finds two;
not the compressed copy of a file read, told by its name: ``NAME.D.gz`` of ``NAME.D``),
then the live file from its start. A rolled file compressed since (logrotate's ``compress``:
``.gz``, ``.bz2``, ``.xz``) has a new inode: the position's file is found among them by the digest
of its first line, and read on from the same offset of its decompressed text; so is a copy of the
live file taken before it was truncated in place (logrotate's ``copytruncate``). The digest also
keeps an inode freed by a rotation and given to the new log from being taken for the old file. A
live file shorter than the offset, with no such copy, was truncated in place and is read from
its start. A line is read only once it ends with a newline: a half-written line waits for the
next poll (in a rolled file, which is complete, such a last line is lost). Each call reads
everything there is, a chunk at a time. Not read: rolled files in other formats (``.zip``,
``.zst``): a collector stopped while its file was rolled into one misses what was written to it
after its position, and says so.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import logging
import lzma
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("flowctl.collect")

#: What is read at once: a large backlog is read and committed in pieces, not held in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
#: How a compressed rolled file is opened, by its suffix: its decompressed text is the log (the
#: caller closes it: SIM115 asks for a context manager here).
DECOMPRESSED: dict[str, Callable[[Path], io.BufferedIOBase]] = {
    ".gz": lambda path: gzip.open(path, "rb"),  # noqa: SIM115
    ".bz2": lambda path: bz2.open(path, "rb"),  # noqa: SIM115
    ".xz": lambda path: lzma.open(path, "rb"),  # noqa: SIM115
}
#: Rolled files a collector does not read (archives, or a compression the standard library lacks).
UNREAD_SUFFIXES = (".zip", ".zst")


def _open(path: Path) -> io.BufferedIOBase:
    """``path`` to read its text: decompressed when its suffix says it is compressed."""
    decompressed = DECOMPRESSED.get(path.suffix)
    return decompressed(path) if decompressed else path.open("rb")


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
        with _open(path) as handle:
            data = handle.read(HEAD_BYTES)
    except _UNREADABLE:  # unreadable, or a compressed file cut short
        return ""
    end = data.find(b"\n")
    if end < 0 and len(data) < HEAD_BYTES:
        return ""
    return hashlib.sha1(data[: end + 1] if end >= 0 else data).hexdigest()[:16]


#: A rolled file: its modification time, name, path and identity (device, inode).
RolledFile = tuple[float, str, Path, tuple[int, int]]


def _copy_of(rolled: list[RolledFile], position: LogPosition) -> RolledFile | None:
    """The file among ``rolled`` (:func:`_rolled_files`) on another inode whose first line is
    the position's file's: that file compressed since it was read, or copied before the live
    file was truncated."""
    if not position.head:
        return None
    return next(
        (
            entry
            for entry in rolled
            if entry[3] != position.identity and file_head(entry[2]) == position.head
        ),
        None,
    )


def _copies(name: str, other: str) -> bool:
    """Whether files named ``name`` and ``other`` are one file and its compressed copy: one is
    the other's name plus a suffix of :data:`DECOMPRESSED` (``artemis.log.2026-11-27`` and
    ``artemis.log.2026-11-27.gz``)."""
    return any(other == name + suffix or name == other + suffix for suffix in DECOMPRESSED)


def _unread_after(
    rolled: list[RolledFile], current: RolledFile, live: tuple[int, int]
) -> list[RolledFile]:
    """The rolled files after ``current`` (read to its end) still to read, oldest first. Not
    the compressed copy of a file read already, ``current`` or a rolled file before it (log4j2
    renames, then compresses; logrotate's ``compress`` does the same), newer by its
    modification time, which was read again whole with new seqs (a review); said. Told by its
    name, not its first line: with a layout header every file starts with the same line, and
    the later days were skipped as copies (a review)."""
    read = [current[1]] + [e[1] for e in rolled if e[:2] < current[:2]]
    later = []
    for entry in rolled:
        if entry[:2] <= current[:2] or entry[3] == live:
            continue
        copied = next((name for name in read if _copies(name, entry[1])), None)
        if copied is None:
            later.append(entry)
        else:
            log.warning(
                "%s is a compressed copy of %s, read already: not read again", entry[2], copied
            )
    return later


def _same_file(position: LogPosition, head: str) -> bool:
    return not position.head or not head or position.head == head


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _rolled_files(path: Path) -> list[RolledFile]:
    """``path``'s rolled files (``NAME.*``, compressed or not, not :data:`UNREAD_SUFFIXES`),
    oldest first by modification time."""
    found = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return []
    for sibling in siblings:
        name = sibling.name
        if not name.startswith(f"{path.name}.") or name.endswith(UNREAD_SUFFIXES):
            continue
        try:
            stat = sibling.stat()
        except OSError:
            continue
        if sibling.is_file():
            found.append((stat.st_mtime, name, sibling, _identity(stat)))
    return sorted(found, key=lambda entry: (entry[0], entry[1]))


#: What a damaged or cut-short compressed file raises as it is read.
_UNREADABLE = (EOFError, OSError, lzma.LZMAError)


def _cut_short(path: Path, offset: int, error: Exception) -> None:
    log.warning(
        "%s cannot be read past byte %d of its text (%s): the rest of it is not collected",
        path,
        offset,
        error,
    )


def _lines_from(path: Path, offset: int, identity: tuple[int, int]) -> Iterator[tuple[str, int]]:
    """Whole lines of ``path`` (its decompressed text when compressed) from ``offset`` to its
    end, each with the offset after it. Read forward only: a compressed file cannot seek back."""
    with _open(path) as handle:
        if _identity(os.fstat(handle.fileno())) != identity:
            return  # replaced between the stat and the open: the next poll sees the new one
        position, pending = offset, b""
        try:
            handle.seek(offset)
        except _UNREADABLE as error:
            _cut_short(path, offset, error)
            return
        while True:
            try:
                data = handle.read(READ_CHUNK_BYTES)
            except _UNREADABLE as error:
                _cut_short(path, position, error)
                return
            buffer = pending + data
            end = buffer.rfind(b"\n")
            if end < 0:
                if len(buffer) < READ_CHUNK_BYTES:
                    return  # the end, or a line still being written
                end = len(buffer) - 1  # a "line" longer than a chunk: taken in pieces
            for raw in buffer[: end + 1].splitlines(keepends=True):
                position += len(raw)
                yield raw.decode("utf-8", errors="replace"), position
            pending = buffer[end + 1 :]
            if not data:
                return


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
        # The inode of the file read, freed by a rotation (compressed, or deleted) and given to
        # the new log: the file read is looked for among the rolled ones as if moved away.
        reused = (
            position is not None and position.identity == live and not _same_file(position, head)
        )
        if position is None or (position.identity == live and not reused):
            offset = 0 if position is None else position.offset
            if position is not None and offset > stat.st_size:
                copy = _copy_of(_rolled_files(path), position)
                if copy is not None:
                    # Copied away and truncated (logrotate's copytruncate): the copy is read on
                    # from the position first, then the live file from its start.
                    position = LogPosition(*copy[3], offset, position.head)
                    continue
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
            # Compressed or copied since it was read: a new inode, the same first line.
            current = _copy_of(rolled, position)
        if current is None:
            log.warning(
                "%s is a new file%s and the file read up to byte %d is gone (or rolled into a "
                "file not read: %s): what was written to it after that is not collected; the "
                "new one is read from its start",
                path,
                " on the inode of the one read" if reused else "",
                position.offset,
                ", ".join(UNREAD_SUFFIXES),
            )
            position = LogPosition(*live, 0, head)
            yield "", position
            continue
        rolled_head = position.head or file_head(current[2])
        for line, after in _lines_from(current[2], position.offset, current[3]):
            position = LogPosition(*current[3], after, rolled_head)
            yield line, position
        newer = _unread_after(rolled, current, live)
        if newer:
            position = LogPosition(*newer[0][3], 0, file_head(newer[0][2]))
        else:
            position = LogPosition(*live, 0, head)
        yield "", position

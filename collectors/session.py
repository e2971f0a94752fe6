"""A collector session: one run of ``broker_events`` (DESIGN §3) written while it is observed,
and the checkpoint that lets a restarted collector go on with it, exactly once.

A session is a run: its ``run_id`` and its ``seq`` go on across restarts of the collector and of
the broker, so the run stays one timeline. Events are committed in batches, one Parquet file per
batch under ``date=D/`` (a batch never spans two days), named by its first ``seq``, written hidden
and renamed into place: a file is there whole or not at all. Each file carries in its footer the
checkpoint as of its last event (where the collector was in its source, what state it held), so
the file *is* the commit: a collector killed after the rename and before it updated its state
file finds the newer checkpoint in the file and does not write those events again; killed before
the rename, it reads the same source lines again and gives them the same ``seq``. The state file
also records progress that wrote no event (log lines that say nothing about flow control).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from flowctl_core.errors import ConfigurationError
from flowctl_core.sink import file_name_refusal
from schemas.broker_events import BROKER_EVENTS, PARTITION_COLUMN

log = logging.getLogger("flowctl.collect")

CHECKPOINT_KEY = b"flowctl.collector.checkpoint"
#: The state file's key for the raw folder whose session it holds (never in a file's footer: a
#: raw folder may be moved, and its files' checkpoints move with it).
STATE_RAW_KEY = "raw"
#: What a collector file whose footer cannot be read is renamed to: not ``*.parquet``, so the
#: ingest lists it among the entries it skips instead of reading it.
UNREADABLE_SUFFIX = ".unreadable"
STATE_VERSION = 3
#: A hidden file of a commit no process has written to for this long was cut short: a commit
#: writes one batch (at most a few MB) and renames it within seconds.
LEFTOVER_AGE_S = 3600.0
_ARROW_SCHEMA = BROKER_EVENTS.to_pyarrow()


class CollectorStateError(ConfigurationError):
    """A state file or an output folder a collector cannot go on from."""


class StateFieldError(ValueError):
    """A field of a checkpoint that is missing or of the wrong type (a state file damaged or
    edited by hand), named by its path in the checkpoint (``position.offset``); the caller,
    which knows the file, says it in one line (:func:`state_error`)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field}: {problem}")
        self.field = field


#: What to do about a state file with a wrong field.
STATE_FILE_HINT = (
    "fix it, or move it away: the collector then goes on from the session's newest file in --raw"
)


def state_error(source: Path | str, error: StateFieldError, hint: str = "") -> CollectorStateError:
    """``error`` of the checkpoint read from ``source``: one line naming both, not a crash
    ("unexpected error: 'next_seq'", "AddressState.__init__() got an unexpected keyword
    argument": a review)."""
    return CollectorStateError(f"{source}: {error}" + (f"; {hint}" if hint else ""))


def whole_number(value: Any) -> bool:
    """Whether ``value`` is a JSON integer (not a bool, which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def checked_field(
    data: Mapping[str, Any], name: str, kind: str, *, prefix: str = "", required: bool = True
) -> Any:
    """``data[name]`` when it is of ``kind``: "count" (a whole number >= 0), "int" (a whole
    number), "str", "bool" or "object"; "?" after the kind allows null. A field left out is
    an error when ``required``, else None."""
    field = f"{prefix}{name}"
    if name not in data:
        if required:
            raise StateFieldError(field, "missing")
        return None
    value = data[name]
    nullable = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None and nullable:
        return None
    fits = {
        "count": whole_number(value) and value >= 0,
        "int": whole_number(value),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "object": isinstance(value, dict),
    }[kind]
    if not fits:
        wanted = {
            "count": "a whole number >= 0",
            "int": "a whole number",
            "str": "a string",
            "bool": "true or false",
            "object": "an object",
        }[kind]
        raise StateFieldError(
            field, f"{json.dumps(value)[:60]} is not {wanted}{' or null' if nullable else ''}"
        )
    return value


def check_session_fields(checkpoint: Any) -> dict[str, Any]:
    """``checkpoint`` when its session's fields are there with their types (the entities' own
    are their collector's, :meth:`collectors.base.LogCollector.load_entities`); else
    :class:`StateFieldError`."""
    if not isinstance(checkpoint, dict):
        raise StateFieldError("(the whole)", "not an object")
    checked_field(checkpoint, "run_id", "str")
    checked_field(checkpoint, "broker", "str")
    checked_field(checkpoint, "next_seq", "count")
    checked_field(checkpoint, "last_ts_us", "count")
    checked_field(checkpoint, "last_line_us", "int?", required=False)
    checked_field(checkpoint, STATE_RAW_KEY, "str", required=False)
    # [] passed for "no entities", and the blocked addresses vanished (a review).
    checked_field(checkpoint, "entities", "object", required=False)
    position = checked_field(checkpoint, "position", "object?", required=False)
    if position is not None:
        for name in ("device", "inode", "offset"):
            checked_field(position, name, "count", prefix="position.")
        checked_field(position, "head", "str", prefix="position.", required=False)
    return checkpoint


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def cannot_write(where: Path, error: OSError, option: str) -> CollectorStateError:
    """A folder or file the collector cannot write (permissions, a full disk, a read-only
    mount): one line naming it and the option that chose it, not a bug to report. What was
    committed before stays; the next start goes on from it."""
    reason = error.strerror or str(error)
    return CollectorStateError(
        f"{where}: cannot write there ({reason}); check {option}, then start again: it goes on "
        "from the last commit"
    )


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole, or what it held before."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        hidden = path.with_name(f".{path.name}.inprogress")
        with hidden.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(hidden, path)
        _fsync_folder(path.parent)
    except OSError as error:
        raise cannot_write(path, error, "--state") from error


def check_broker_name(broker: str) -> str:
    """``broker`` when it can name a session's run and files; else a one-line refusal before
    anything is read or written: the name is the ``broker`` column (not blank: a blank one is a
    contract breach) and part of the run id and of every file name (the sink's rule,
    :func:`flowctl_core.sink.file_name_refusal`), or the ingest would quarantine every row or
    file of the session (an audit: ``--broker host:61616``)."""
    if not broker.strip():
        raise ConfigurationError("--broker: the broker's name cannot be blank")
    refusal = file_name_refusal(broker)
    if refusal is not None:
        raise ConfigurationError(f"--broker {broker!r}: it names the session's files; {refusal}")
    return broker


def raw_lock_name(broker: str) -> str:
    """The lock a broker's collector holds in the raw folder (hidden: the ingest reads only
    ``date=D/`` folders, and lists this name among the writers' markers)."""
    return f".collect-{broker}.lock"


def file_name(run_id: str, first_seq: int) -> str:
    return f"part-{run_id}-{first_seq:012d}.parquet"


def _run_start(run_id: str, broker: str) -> tuple[str, str] | None:
    """When a session of ``broker`` started, by its run id (collectors/base.py ``new_run_id``),
    as a key that sorts by it (a run id may give seconds, not microseconds); None for another
    run id."""
    match = re.fullmatch(rf"collect-{re.escape(broker)}-(\d{{8}})T(\d{{6,12}})Z", run_id)
    return None if match is None else (match[1], match[2].ljust(12, "0"))


def _run_file_pattern(run_id: str) -> re.Pattern[str]:
    return re.compile(rf"^part-{re.escape(run_id)}-(\d{{12}})\.parquet$")


class SessionWriter:
    """Commits a session's events to ``raw_dir`` with their checkpoint (see the module)."""

    def __init__(self, raw_dir: Path, state_path: Path) -> None:
        self.raw_dir = raw_dir
        self.state_path = state_path
        self.files_written = 0
        self.rows_written = 0
        self._locks: list[IO[str]] = []
        #: The file the session's checkpoint was read from (:meth:`load_state`), for what is
        #: said of its fields.
        self.loaded_from: Path | None = None

    # -- reading back -------------------------------------------------------------------------
    def latest_checkpoint(self, run_id: str, after_seq: int) -> dict[str, Any] | None:
        """The checkpoint of this run's newest readable file with a first seq at or past
        ``after_seq`` (committed after the state file was last written), or None. Newer files
        of the run whose footer cannot be read are set aside (:meth:`_newest_readable`)."""
        pattern = _run_file_pattern(run_id)
        found = [
            (int(match[1]), path)
            for path in self._collector_files()
            if (match := pattern.match(path.name)) and int(match[1]) >= after_seq
        ]
        return self._newest_readable([path for _, path in sorted(found, reverse=True)])

    def latest_session(self, broker: str) -> dict[str, Any] | None:
        """The checkpoint of ``broker``'s newest session in the raw folder (its newest readable
        file), or None: what a collector whose state file is lost goes on from, rather than
        reading the log again as a new run."""
        pattern = re.compile(
            rf"^part-(collect-{re.escape(broker)}-\d{{8}}T\d{{6,12}}Z)-(\d{{12}})\.parquet$"
        )
        found = [
            ((match[1], int(match[2])), path)
            for path in self._collector_files()
            if (match := pattern.match(path.name))
        ]
        return self._newest_readable([path for _, path in sorted(found, reverse=True)])

    def _later_session(self, broker: str, run_id: str) -> dict[str, Any] | None:
        """The checkpoint of ``broker``'s newest session in the raw folder when it started after
        ``run_id``, else None. A ``--new-session`` killed between its first file's rename and
        the state file's write leaves a state file naming the run before it: going on with that
        run wrote the new run's lines again (a review)."""
        since = _run_start(run_id, broker)
        if since is None:
            return None
        latest = self.latest_session(broker)
        started = None if latest is None else _run_start(latest["run_id"], broker)
        return latest if started is not None and started > since else None

    def _collector_files(self) -> list[Path]:
        return [
            path
            for folder in self.raw_dir.glob(f"{PARTITION_COLUMN}=*")
            for path in folder.iterdir()
        ]

    def _newest_readable(self, newest_first: Sequence[Path]) -> dict[str, Any] | None:
        """The checkpoint of the first file of ``newest_first`` whose footer can be read. Those
        before it were damaged after their commit (a power loss cut a file short): the session
        goes on from the older checkpoint, reading their lines again with the same seq, so each
        is set aside first (its name is that commit's; its rows cannot be read by anyone)."""
        for path in newest_first:
            checkpoint = _checkpoint_of(path, damaged_ok=True)
            if checkpoint is not None:
                self.loaded_from = path
                return checkpoint
            aside = path.with_name(path.name + UNREADABLE_SUFFIX)
            try:
                os.replace(path, aside)
                _fsync_folder(path.parent)
            except OSError as error:
                raise cannot_write(path, error, "--raw") from error
            log.warning(
                "%s: a collector file whose footer cannot be read (cut short?) is set aside as "
                "%s; the session goes on from the last readable commit before it, writing its "
                "lines again with the same seq",
                path,
                aside,
            )
        return None

    def _raw_key(self) -> str:
        return str(self.raw_dir.resolve())

    def _of_another_raw_folder(self, state: dict[str, Any]) -> str | None:
        """The raw folder whose session a state file holds when it is not this one, else None.
        A state file of an earlier release does not name its folder: one whose run committed
        rows, none of them here, is another folder's."""
        raw = state.get(STATE_RAW_KEY)
        if raw is not None:
            return None if raw == self._raw_key() else str(raw)
        prefix = f"part-{state['run_id']}-"
        if int(state["next_seq"]) > 0 and not any(
            path.name.startswith(prefix) for path in self._collector_files()
        ):
            return "another raw folder"
        return None

    def load_state(self, broker: str) -> dict[str, Any] | None:
        """The state file's checkpoint, or a newer one from the files (the state file lost:
        ``broker``'s newest session there; a session there started after the state file's run,
        :meth:`_later_session`); None when there is no session to go on with.

        A state file is one raw folder's. The default one (``RAW/../collector-state/``) is
        shared by raw folders side by side: that of another folder is read as no state file,
        and this folder's session goes on from its own files (the checkpoints are theirs; the
        state file is a copy). Going on with the other folder's session wrote nothing here."""
        try:
            state: dict[str, Any] = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return self.latest_session(broker)
        except (OSError, ValueError) as error:
            raise CollectorStateError(
                f"{self.state_path}: not a collector state ({error})"
            ) from None
        if not isinstance(state, dict):
            raise CollectorStateError(f"{self.state_path}: not a collector state (no object)")
        state = _migrated(state)
        if state.get("version") != STATE_VERSION or "run_id" not in state:
            raise CollectorStateError(
                f"{self.state_path}: not a collector state of version {STATE_VERSION}"
            )
        try:
            check_session_fields(state)
        except StateFieldError as error:
            raise state_error(self.state_path, error, STATE_FILE_HINT) from None
        other = self._of_another_raw_folder(state)
        if other is not None:
            log.warning(
                "%s holds the session of %s, not of --raw %s: going on from the files in %s "
                "(the state file follows it now; give each raw folder its own --state)",
                self.state_path,
                other,
                self.raw_dir,
                self.raw_dir,
            )
            return self.latest_session(broker)
        state.pop(STATE_RAW_KEY, None)
        later = self._later_session(broker, state["run_id"])
        if later is not None:
            return later
        newer = self.latest_checkpoint(state["run_id"], int(state["next_seq"]))
        if newer is not None:
            return newer
        self.loaded_from = self.state_path
        return state

    def remove_leftovers(self, run_id: str | None) -> None:
        """Hidden files of a commit that was cut short (never renamed, so never read): those of
        ``run_id``, this session's run (its lock is held, so none of them is being written), and
        those no process has touched for :data:`LEFTOVER_AGE_S`. Another collector or a client
        recorder may write into the same raw folder, and its commit in progress is a hidden
        file too: removing every one cut its rename short (an audit)."""
        stale_before = time.time() - LEFTOVER_AGE_S
        own = None if run_id is None else f".part-{run_id}-"
        for folder in self.raw_dir.glob(f"{PARTITION_COLUMN}=*"):
            for path in folder.glob(".part-*.inprogress"):
                try:
                    if (own is not None and path.name.startswith(own)) or (
                        path.stat().st_mtime < stale_before
                    ):
                        path.unlink(missing_ok=True)
                except FileNotFoundError:
                    pass  # renamed or removed meanwhile by its writer

    def lock(self, broker: str) -> None:
        """Take the session for this process alone (a cron ``--once`` beside a running
        collector would write the same ``seq`` twice): exclusive locks, held until
        :meth:`unlock` or the process ends, on ``STATE.lock`` and on ``RAW/.collect-BROKER.lock``.
        The second covers a collector given another ``--state``: with no state of its own it
        goes on with the broker's newest session in the raw folder, the running one's."""
        state_lock = self.state_path.with_name(f"{self.state_path.name}.lock")
        self._take(
            state_lock,
            "--state (default: beside --raw)",
            f"{self.state_path}: another collector runs with this --state ({state_lock} is "
            "locked): one collector per state file; another raw folder needs its own --state",
        )
        raw_lock = self.raw_dir / raw_lock_name(broker)
        try:
            self._take(
                raw_lock,
                "--raw",
                f"{self.raw_dir}: another collector of broker "
                f"{broker!r} writes there ({raw_lock} is locked); one collector per broker "
                "and raw folder",
            )
        except BaseException:
            self.unlock()
            raise

    def _take(self, lock_path: Path, option: str, held_text: str) -> None:
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            handle = lock_path.open("a")
        except OSError as error:
            raise cannot_write(lock_path, error, option) from error
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise CollectorStateError(held_text) from None
        self._locks.append(handle)

    def unlock(self) -> None:
        for handle in self._locks:
            handle.close()  # closing the file releases its lock
        self._locks.clear()

    # -- writing ------------------------------------------------------------------------------
    def commit(
        self,
        rows: Sequence[Mapping[str, Any]],
        checkpoint: dict[str, Any],
        *,
        state_file: bool = True,
    ) -> Path | None:
        """Write ``rows`` (one day's, in seq order) as one file carrying ``checkpoint``, then the
        state file (unless ``state_file`` is false: a run never gone on with keeps none). No
        rows: the state file only."""
        written: Path | None = None
        if rows:
            day = _day_of(rows[0]["ts"])
            if _day_of(rows[-1]["ts"]) != day:
                raise ValueError("a collector batch spans two days")
            table = pa.Table.from_pylist(list(rows), schema=_ARROW_SCHEMA)
            table = table.replace_schema_metadata(
                {CHECKPOINT_KEY: json.dumps(checkpoint, sort_keys=True).encode()}
            )
            folder = self.raw_dir / f"{PARTITION_COLUMN}={day.isoformat()}"
            written = folder / file_name(checkpoint["run_id"], int(rows[0]["seq"]))
            try:
                folder.mkdir(parents=True, exist_ok=True)
                is_new = not written.exists()
                if is_new:
                    hidden = folder / f".{written.name}.inprogress"
                    pq.write_table(table, hidden)
                    with hidden.open("rb") as handle:
                        os.fsync(handle.fileno())
                    os.replace(hidden, written)
                    _fsync_folder(folder)
            except OSError as error:  # pyarrow's IO errors are OSErrors too
                raise cannot_write(folder, error, "--raw") from error
            if is_new:
                self.files_written += 1
                self.rows_written += len(rows)
            elif _checkpoint_of(written) != json.loads(json.dumps(checkpoint)):
                # Files are never rewritten (DESIGN §3); the same commit cut short after its
                # rename (Ctrl-C) is there whole already, and is not an error.
                raise CollectorStateError(
                    f"{written} exists: another collector writes this session, or its state "
                    "was restored from a copy"
                )
        if state_file:
            state = {**checkpoint, STATE_RAW_KEY: self._raw_key()}
            write_atomically(self.state_path, json.dumps(state, sort_keys=True, indent=1).encode())
        return written


def _checkpoint_of(path: Path, *, damaged_ok: bool = False) -> dict[str, Any] | None:
    """The checkpoint a collector file carries in its footer; None for a footer that cannot be
    read when ``damaged_ok``, else a one-line error naming the file. A file the system refuses
    (its permissions, a disk error) is an error either way, never taken for a damaged one."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except OSError as error:
        # pyarrow's own errors on a footer that does not decode carry no errno.
        if error.errno is None and damaged_ok:
            return None
        raise CollectorStateError(
            f"{path}: cannot read this collector file ({error.strerror or error}); make it "
            "readable, or move it out of --raw, then start again"
        ) from None
    except ValueError as error:  # pyarrow.ArrowInvalid: no Parquet footer (cut short)
        if damaged_ok:
            return None
        raise CollectorStateError(f"{path}: not a readable collector file ({error})") from None
    if CHECKPOINT_KEY not in metadata:
        raise CollectorStateError(f"{path}: a collector file without its checkpoint")
    try:
        checkpoint = json.loads(metadata[CHECKPOINT_KEY])
    except ValueError as error:
        raise CollectorStateError(f"{path}: its checkpoint is not JSON ({error})") from None
    try:
        return check_session_fields(
            _migrated(checkpoint) if isinstance(checkpoint, dict) else checkpoint
        )
    except StateFieldError as error:
        raise state_error(f"{path}: its checkpoint", error) from None


def _migrated(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an earlier version in this one's words: version 1 (the Artemis collector
    alone) kept its addresses under ``addresses``; version 2 kept the Artemis address map itself
    as its entities, which the Artemis collector reads as such (version 3 adds its disk alarm
    beside it: a release before it refuses a version 3 file in one line, not by a crash)."""
    if checkpoint.get("version") == 1 and "addresses" in checkpoint:
        checkpoint = dict(checkpoint)
        checkpoint["entities"] = checkpoint.pop("addresses")
        checkpoint["version"] = STATE_VERSION
    elif checkpoint.get("version") == 2:
        checkpoint = {**checkpoint, "version": STATE_VERSION}
    return checkpoint


def _day_of(ts: datetime) -> date:
    return ts.astimezone(UTC).date()

"""What every collector shares: a broker's log followed line by line, polled samples held back
until the log has caught up with them, and the rows committed to one session (DESIGN §6).

A collector (collectors/artemis.py, collectors/rabbitmq.py) says how a line reads
(:meth:`LogCollector.parse`), what a line and a sample write (:meth:`LogCollector.on_line`,
:meth:`LogCollector.write_sample`) and what it remembers of the broker's entities between
restarts (:meth:`LogCollector.entities_json`); this class keeps the order and the checkpoint:

* ``ts`` follows ``seq``: a sample waits for the lines stamped before it (a line can reach the
  file a little after a sample that follows its event), then goes in its place by time; a row
  that would still go back in time takes the time of the row before it;
* a batch never spans two UTC days, and each is committed with the checkpoint as of its last row
  (collectors/session.py), so a collector killed anywhere goes on without losing or repeating a
  committed row: lines after the checkpoint are read again and get the same ``seq``.
"""

from __future__ import annotations

import copy
import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from collectors.local_time import in_repeated_hour
from collectors.logtail import LogPosition, follow
from collectors.session import (
    STATE_FILE_HINT,
    STATE_VERSION,
    CollectorStateError,
    SessionWriter,
    StateFieldError,
    check_broker_name,
    check_session_fields,
    state_error,
)
from flowctl_core.errors import ConfigurationError
from schemas.broker_events import BROKER_EVENTS

log = logging.getLogger("flowctl.collect")

#: Lines read without one of the broker's before a running collector says its log may be
#: another file (at the end of a run it says so after any number).
NOT_THE_LOG_AFTER_LINES = 1000
#: Lines with a stamp that is no time: the first this many are said, then one in
#: UNREADABLE_LINES_SAID_EVERY.
UNREADABLE_LINES_SAID = 10
UNREADABLE_LINES_SAID_EVERY = 1000
#: A line stamped this much later than the collector read it says the clocks disagree (the
#: broker's and this machine's, or the log's time zone): beyond what a clock drifts by.
LOG_AHEAD_SAID_AFTER = timedelta(minutes=2)
#: A batch is committed when it is this old or this large, whichever comes first.
DEFAULT_FLUSH_INTERVAL_S = 5.0
FLUSH_ROWS = 10_000
POLL_INTERVAL_S = 0.2
#: How long a sample waits for log lines of events before it (see _release_samples).
SAMPLE_HOLD_S = 1.0
REASON_BROKER_STOPPED = "broker_stopped"
REASON_BROKER_RESTARTED = "broker_restarted"
#: ``detail.reason`` of a new run's first rows: what the run before it left open.
REASON_CARRIED_OVER = "carried_over"
#: How long a 404 before any answer is taken for a node starting before it is a wrong address.
FIRST_404_GRACE = timedelta(seconds=20)
#: The likely cause of a refusal from an API that answered before, by HTTP status (the rest:
#: :data:`REFUSED_AFTER_ANSWERS_OTHERWISE`). A 404 is a node stopping or starting (a RabbitMQ
#: node answered one as its port closed, on CI, and as it opened, in an experiment); a 401 or
#: 403 a user or password changed (no node answers those while it starts).
REFUSED_AFTER_ANSWERS_HINTS = {
    401: "the user or the password changed?",
    403: "the user's permissions changed?",
    404: "a node stopping or starting?",
    429: "a proxy limiting the requests?",
}
REFUSED_AFTER_ANSWERS_OTHERWISE = "a node stopping or starting, or its access changed?"


class SamplerRefused(ConfigurationError):
    """The broker's HTTP API answered, and refused (a wrong user or password, a wrong URL).
    From the start waiting will not help, so the collector stops and says why (a configuration
    error: the family of flowctl_core/errors.py whose exit code is 2), but for a 404, which a
    node starting may answer: that stops it once it has lasted :data:`FIRST_404_GRACE`. After
    the API has answered, sampling waits (:meth:`LogCollector.sample`)."""

    def __init__(self, message: str, code: int, reason: str, status: str) -> None:
        super().__init__(message)
        self.code = code
        #: The refusal with its configuration hint, without the API's name and address.
        self.reason = reason
        #: The refusal alone ("HTTP 404 Not Found"), for a line that gives its own hint.
        self.status = status


class BrokerNotUp(ValueError):
    """The HTTP API answered for a broker that is not running: stopping (a real Artemis 2.40's
    Jolokia lists its addresses for a moment after its stop began, then none at all, before
    its web server stops) or starting. Not a sample: what it lists is the broker coming or
    going, not its entities (two samples listing nothing ended each block as an address
    removed, before the stop line: an experiment on a real broker). Sampling waits."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        #: Why, without the API's name and address, for a line that has them already.
        self.reason = reason


def http_json(request: urllib.request.Request, timeout_s: float, what: str) -> Any:
    """The JSON an HTTP API answers; :class:`SamplerRefused` for a 4xx answer, and for a 2xx
    one that is not JSON: a web page where the API should be (a wrong path, redirected to a
    console's login), which was read as "does not answer" and waited for forever (an audit)."""
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
            try:
                return json.loads(body)
            except ValueError:
                kind = response.headers.get_content_type()
                status = f"HTTP {response.status} answered {kind}, not JSON"
                reason = f"{status} (the API's address?)"
                raise SamplerRefused(
                    f"{what} {request.full_url}: {reason}", response.status, reason, status
                ) from None
    except urllib.error.HTTPError as error:
        if 400 <= error.code < 500:
            raise http_refusal(what, request.full_url, error.code, error.reason) from None
        raise


def http_refusal(what: str, url: str, code: int, phrase: str) -> SamplerRefused:
    """The refusal of an HTTP 4xx answer ``code`` ``phrase`` from ``what`` at ``url``."""
    status = f"HTTP {code} {phrase}"
    reason = f"{status}: the user, the password, or the API's address?"
    return SamplerRefused(f"{what} {url}: {reason}", code, reason, status)


def unanswered_reason(error: BaseException) -> str:
    """Why a request got no answer, in the operating system's words ("Connection refused",
    "timed out"), not Python's (``<urlopen error [Errno 111] Connection refused>``: a review).
    A refusal (:class:`SamplerRefused`) is an answer, said with its status, not here."""
    if isinstance(error, BrokerNotUp):
        return error.reason
    if isinstance(error, urllib.error.HTTPError):  # an answer: a server error (5xx)
        return f"HTTP {error.code} {error.reason}"
    cause = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(cause, OSError) and cause.strerror:
        return str(cause.strerror)
    return str(cause) or ("timed out" if isinstance(cause, TimeoutError) else type(cause).__name__)


#: What a sampler may raise when the broker does not answer, or answers for a broker that is not
#: running (:class:`BrokerNotUp`): sampling waits, nothing stops.
SAMPLER_ERRORS = (OSError, http.client.HTTPException, ValueError, KeyError)
#: How the line says a sampler's error of each kind (the first that matches; any other: "does
#: not answer"). A 5xx is an answer (HTTPError is an OSError, so it comes first).
UNANSWERED_HOW: tuple[tuple[type[BaseException], str], ...] = (
    (BrokerNotUp, "answers for a broker that is not running"),
    (urllib.error.HTTPError, "answers with an error"),
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def new_run_id(broker: str, now: datetime) -> str:
    """``collect-BROKER-<UTC start to the microsecond>``: sessions sort by their start."""
    return f"collect-{broker}-{now.astimezone(UTC):%Y%m%dT%H%M%S%fZ}"


class TimedLine(Protocol):
    @property
    def ts(self) -> datetime: ...

    #: A local stamp of the hour lived twice when the clocks go back: its second instant
    #: (collectors/local_time.py), None for any other.
    @property
    def ts_repeated(self) -> datetime | None: ...


@dataclass
class SessionState:
    """Where the session is: its run, the next ``seq``, the last row's time, the log's last
    timestamped line and position. The entities' state is the collector's (``entities``)."""

    run_id: str
    broker: str
    next_seq: int = 0
    last_ts_us: int = 0  # the last row's ts: rows never go back in time
    last_line_us: int | None = None  # the log's last timestamped line (a crash closes there)
    position: LogPosition | None = None

    def to_json(self, entities: dict[str, Any]) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "broker": self.broker,
            "next_seq": self.next_seq,
            "last_ts_us": self.last_ts_us,
            "last_line_us": self.last_line_us,
            "position": None if self.position is None else self.position.to_json(),
            "entities": entities,
        }

    def stamp(self, ts: datetime) -> datetime:
        """The time a row of ``ts`` gets: rows never go back in time."""
        return from_us(max(to_us(ts), self.last_ts_us))

    def new_row(self, stamped: datetime, event_type: str, **columns: Any) -> dict[str, Any]:
        """The session's next event at ``stamped`` (from :meth:`stamp`): the next ``seq``."""
        row = dict.fromkeys(BROKER_EVENTS.names)
        row.update(
            run_id=self.run_id,
            broker=self.broker,
            seq=self.next_seq,
            ts=stamped,
            event_type=event_type,
            **columns,
        )
        self.next_seq += 1
        self.last_ts_us = to_us(stamped)
        return row

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionState:
        """The session a checkpoint holds; :class:`StateFieldError` for a field missing or of
        the wrong type (a damaged state file), not a crash mid-way."""
        check_session_fields(data)
        position = data.get("position")
        return cls(
            run_id=data["run_id"],
            broker=data["broker"],
            next_seq=int(data["next_seq"]),
            last_ts_us=int(data["last_ts_us"]),
            last_line_us=data.get("last_line_us"),
            position=None if position is None else LogPosition.from_json(position),
        )


class LogCollector(ABC):
    """One collector session over a broker's log, and optionally a sampler (see the module)."""

    def __init__(
        self,
        *,
        log_path: Path,
        raw_dir: Path,
        state_path: Path,
        broker: str,
        sampler: Callable[[], Any] | None = None,
        sampler_name: str = "",
        sample_interval_s: float = 30.0,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_session: bool = False,
    ) -> None:
        check_broker_name(broker)
        self.log_path = log_path
        self.sampler = sampler
        self.sampler_name = sampler_name
        self.sample_interval_s = sample_interval_s
        self.flush_interval_s = flush_interval_s
        self.clock = clock
        self.writer = SessionWriter(raw_dir, state_path)
        # The session for this collector alone, before anything is read or removed: a second
        # one (a cron --once beside a running collector) is refused untouched.
        self.writer.lock(broker)
        try:
            self._start_session(broker, state_path, clock, new_session=new_session)
        except BaseException:
            self.writer.unlock()
            raise
        self._pending: list[dict[str, Any]] = []
        self._pending_since = time.monotonic()
        # The checkpoint before the line or sample being written (a new day commits there).
        self._checkpoint_before: dict[str, Any] | None = None
        self._next_sample = 0.0
        self._held_samples: list[tuple[datetime, Any]] = []
        # Since when the sampler has not answered (the clock's time), None while it answers.
        self._sample_failing_since: datetime | None = None
        self._once = False  # a --once run: a sampler that does not answer is not waited for
        # Asked to stop (run's ``stop``): read_log stops between two lines, not after a backlog.
        self._stop: Callable[[], bool] = lambda: False
        self._sampled_once = False  # a 404 after an answer is a broker restarting, not an error
        self._first_404_at: datetime | None = None  # a 404 before any answer: since when
        # Lines read by this process, and those with the timestamp the broker's lines start with:
        # a log without any is not the broker's (see :meth:`_say_if_not_the_brokers_log`).
        self.lines_read = 0
        self.lines_timed = 0
        #: Lines that begin as the broker's do but whose stamp is no time (skipped, said).
        self.lines_unreadable = 0
        self._said_not_the_log = False
        self._said_log_ahead = False
        if self._carried is not None:
            try:
                with self._fields_of_the_checkpoint(state_path):
                    self.carry_over(*self._carried)
            except BaseException:
                self.writer.unlock()
                raise

    @contextmanager
    def _fields_of_the_checkpoint(self, state_path: Path) -> Iterator[None]:
        """A field of the loaded checkpoint that is wrong, said with the file it is in."""
        try:
            yield
        except StateFieldError as error:
            source = self.writer.loaded_from or state_path
            hint = STATE_FILE_HINT if source == state_path else ""
            raise state_error(source, error, hint) from None

    def _start_session(
        self,
        broker: str,
        state_path: Path,
        clock: Callable[[], datetime],
        *,
        new_session: bool,
    ) -> None:
        """Go on with the session the state file (or the newest file) says, or start one."""
        loaded = self.writer.load_state(broker)
        if loaded is not None and loaded["broker"] != broker:
            raise CollectorStateError(
                f"{state_path} is the session of broker {loaded['broker']!r}, not {broker!r}: "
                "give another --state"
            )
        self.writer.remove_leftovers(None if loaded is None else loaded["run_id"])
        self.resumed = loaded is not None and not new_session
        # A new run's start from the last one: its entities and watermark (see carry_over).
        self._carried: tuple[dict[str, Any], datetime] | None = None
        if loaded is not None and not new_session:
            with self._fields_of_the_checkpoint(state_path):
                self.state = SessionState.from_json(loaded)
                self.load_entities(loaded.get("entities") or {})
        else:
            # A new run reads on from where the last one stopped reading (its lines are that
            # run's), or from the log's start when there was none.
            with self._fields_of_the_checkpoint(state_path):
                before = None if loaded is None else SessionState.from_json(loaded)
            self.state = SessionState(
                run_id=new_run_id(broker, clock()),
                broker=broker,
                position=None if before is None else before.position,
                last_line_us=None if before is None else before.last_line_us,
            )
            if loaded is not None and before is not None and before.last_ts_us:
                self._carried = (loaded.get("entities") or {}, from_us(before.last_ts_us))

    # -- what a collector says ----------------------------------------------------------------
    #: Whose log the collector follows, for what it says ("Artemis").
    log_kind = "the broker"

    @abstractmethod
    def parse(self, text: str) -> TimedLine | None:
        """A line of the log, or None for one without a timestamp."""

    @abstractmethod
    def may_write(self, line: Any) -> bool:
        """Whether :meth:`on_line` may write rows for ``line`` (most lines write none, and the
        checkpoint before a line is taken only for those that may)."""

    @abstractmethod
    def on_line(self, line: Any) -> None:
        """Write what ``line`` says (rows through :meth:`row`), all at one time."""

    def owes_rows(self, ts: datetime) -> bool:
        """Whether rows are owed for the time up to ``ts`` before a line or sample at ``ts`` is
        read (:meth:`settle`); none by default."""
        return False

    def settle(self, ts: datetime) -> None:
        """Write the rows owed up to ``ts`` (:meth:`owes_rows`), through :meth:`row`; a
        collector that owes none is never asked."""
        raise NotImplementedError(f"{type(self).__name__} owes rows but writes none")

    @abstractmethod
    def write_sample(self, taken: datetime, observed: Any) -> None:
        """Write one sample (rows through :meth:`row`), in its place by time."""

    @abstractmethod
    def entities_json(self) -> dict[str, Any]:
        """The entities' state, for the checkpoint."""

    @abstractmethod
    def load_entities(self, data: dict[str, Any]) -> None:
        """The entities' state from a checkpoint; :class:`StateFieldError` naming a field of
        it that is wrong (``entities.…``)."""

    def carry_over(self, entities: dict[str, Any], watermark: datetime) -> None:
        """Start a new run (``--new-session``) with what the run before it left open:
        ``entities`` is its state and ``watermark`` its last row's time. A collector that
        carries its entities loads them, restarts its per-run counters, and writes, through
        :meth:`row` at ``watermark``, each block or alarm still open (``detail.reason``
        :data:`REASON_CARRIED_OVER`): the old run's episode ends at its own watermark (DESIGN
        §4) and the new one's starts there, so the time is counted once; without them the new
        run's unblock was a lone end the pipeline ignores (a review). By default nothing is
        carried: the new run starts with nothing open."""
        return None  # the default: nothing carried (a collector's override says what is)

    @abstractmethod
    def held_now(self) -> list[str]:
        """What flow control holds now, as the session knows it (for the command's summary)."""

    def checkpoint(self) -> dict[str, Any]:
        """The state now, copied: a checkpoint taken before a line or sample is committed after
        the entities have changed for it."""
        return copy.deepcopy(self.state.to_json(self.entities_json()))

    # -- rows ---------------------------------------------------------------------------------
    def row(self, ts: datetime, event_type: str, **columns: Any) -> None:
        """Append one event; a new day commits the batch before it first."""
        stamped = self.state.stamp(ts)
        if self._pending and self._pending[-1]["ts"].date() != stamped.date():
            if self._checkpoint_before is None:
                raise AssertionError("a line wrote a row although may_write() said it would not")
            self._commit(self._checkpoint_before)
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(self.state.new_row(stamped, event_type, **columns))

    def crash_seen(self, last_line: datetime) -> dict[str, str]:
        """What a crash's closing rows say of their time: the broker's last log line before the
        boot, or a sample taken after it (rows never go back in time, so they are stamped there:
        the broker was seen up then, and went down between that and the boot)."""
        later_sample = self.state.last_ts_us > to_us(last_line)
        return {"last_seen": "sample" if later_sample else "log_line"}

    @property
    def last_line(self) -> datetime | None:
        """The time of the log's last timestamped line before the one being read."""
        return None if self.state.last_line_us is None else from_us(self.state.last_line_us)

    # -- the log ------------------------------------------------------------------------------
    def read_log(self) -> int:
        """Every whole line written since the position; the number read."""
        count = 0
        read_at = self.clock()  # every line read here was written before this
        for text, position in follow(self.log_path, self.state.position):
            line = self._parsed(text)
            self.lines_read += bool(text)
            self.lines_timed += line is not None
            self._checkpoint_before = None
            if line is not None:
                if line.ts - read_at > LOG_AHEAD_SAID_AFTER and not self._said_log_ahead:
                    self._say_the_log_runs_ahead(line.ts, read_at)
                self._release_samples(line.ts)
                self._settle(line.ts)
                if self.may_write(line):
                    self._checkpoint_before = self.checkpoint()
                    self.on_line(line)
                self.state.last_line_us = to_us(line.ts)
            self.state.position = position
            count += 1
            self._commit_if_full()
            if self._stop():  # between two lines: the state and the position agree here
                break
        if self.lines_read >= NOT_THE_LOG_AFTER_LINES:
            self._say_if_not_the_brokers_log()
        return count

    def _parsed(self, text: str) -> TimedLine | None:
        """:meth:`parse`, or None for a line whose stamp is no time (``2024-02-30 ...``, a write
        torn or garbled on disk): it is skipped as an untimed line is, and said. Raised, it
        would stop the collector before its position passed the line, so every restart would
        stop on it again. A line of the hour lived twice is read at its second instant when its
        first would come before the line it follows (collectors/local_time.py)."""
        try:
            line = self.parse(text)
        except (ValueError, OverflowError) as error:
            self.lines_unreadable += 1
            if self.lines_unreadable <= UNREADABLE_LINES_SAID or not (
                self.lines_unreadable % UNREADABLE_LINES_SAID_EVERY
            ):
                log.warning(
                    "%s: a line whose timestamp is no time is skipped (%s; %d so far): %.120s",
                    self.log_path,
                    error,
                    self.lines_unreadable,
                    text.strip(),
                )
            return None
        return None if line is None else in_repeated_hour(line, self.last_line)

    def _say_the_log_runs_ahead(self, stamped: datetime, read_at: datetime) -> None:
        """Warn, once, of a line stamped later than it was read: the broker's clock runs ahead
        of this machine's, or the log's stamps are read in the wrong time zone. Samples are
        stamped by this machine's clock and rows never go back in time, so samples after such
        a line take its time, and their figures land late by as much."""
        self._said_log_ahead = True
        log.warning(
            "%s: a line stamped %s was read at %s, %.0f s before its time: the broker's clock "
            "runs ahead of this machine's, or its log's time zone is not the one it is read in "
            "(--log-timezone); samples after it are stamped no earlier than its lines",
            self.log_path,
            stamped.isoformat(),
            read_at.isoformat(),
            (stamped - read_at).total_seconds(),
        )

    def _say_if_not_the_brokers_log(self) -> None:
        """Warn, once, when lines were read and none began as the broker's do (a timestamp):
        ``--log`` names some other file, which would otherwise be followed in silence."""
        if self.lines_timed or not self.lines_read or self._said_not_the_log:
            return
        self._said_not_the_log = True
        log.warning(
            "%s: none of the %d lines read begins with a timestamp as %s's lines do: is it the "
            "broker's log?",
            self.log_path,
            self.lines_read,
            self.log_kind,
        )

    # -- samples ------------------------------------------------------------------------------
    def sample(self) -> bool:
        """One read of the sampler, held until the log is read past its time
        (:meth:`_release_samples`); False when the broker does not answer (a broker that
        restarts is sampled once it is up)."""
        if self.sampler is None:
            return False
        try:
            observed = self.sampler()
        except SamplerRefused as refused:
            # A refusal from the start is a wrong address, user or password: the collector
            # stops and says so, a 404 once it has lasted FIRST_404_GRACE (a node starting may
            # answer one). From an API that answered before it is passing (a node stopping or
            # starting: 404; a password being changed: 401; a proxy's 429): sampling waits,
            # and the log is followed meanwhile (it stopped the whole collector, an audit).
            if not self._sampled_once:
                return self._refused_before_any_answer(refused)
            return self._sampling_waits(refused)
        except SAMPLER_ERRORS as error:
            self._first_404_at = None  # a 404 after this is a new one, its grace its own
            return self._sampling_waits(error)
        taken = self.clock()
        if self._sample_failing_since is not None:
            # Said once it is over, as its start was: a reader of a long-running collector's
            # console saw when sampling stopped and never that it went on.
            log.info(
                "%s answers %safter %.0f s: sampling %s",
                self.sampler_name,
                "again " if self._sampled_once else "",
                (taken - self._sample_failing_since).total_seconds(),
                "goes on" if self._sampled_once else "starts",
            )
            self._sample_failing_since = None
        self._sampled_once = True
        self._held_samples.append((taken, observed))
        return True

    def _refused_before_any_answer(self, refused: SamplerRefused) -> bool:
        """Raise ``refused``, unless it is a 404 that may still be a node starting: one
        within :data:`FIRST_404_GRACE` of the first 404 in a row, outside a --once run (which
        waits for nothing). A real RabbitMQ 3.10 answered one 404 as its port opened in 2 of
        20 starts (an experiment), which stopped a collector started beside it with a
        configuration error; a wrong path answers 404 for good, so it still stops the
        collector, after the grace. False: sampling waits."""
        if refused.code != 404 or self._once:
            raise refused
        now = self.clock()
        if self._first_404_at is None:
            self._first_404_at = now
            log.warning(
                "%s refuses (%s) before any answer: a node starting, or a wrong address? "
                "Sampling waits; a 404 still there %.0f s from now (at the first sample after "
                "that) stops the collector",
                self.sampler_name,
                refused.status,
                FIRST_404_GRACE.total_seconds(),
            )
            if self._sample_failing_since is None:
                self._sample_failing_since = now
        if now - self._first_404_at >= FIRST_404_GRACE:
            raise refused
        return False

    def _sampling_waits(self, error: Exception) -> bool:
        if self._sample_failing_since is None:
            then = (
                "no sample taken this run (--once)"
                if self._once
                else "sampling waits; the log is still followed"
            )
            if isinstance(error, SamplerRefused):
                # Only after answers (before, :meth:`_refused_before_any_answer`): the cause
                # is likelier the node's, or a change, than the configuration's.
                hint = REFUSED_AFTER_ANSWERS_HINTS.get(error.code, REFUSED_AFTER_ANSWERS_OTHERWISE)
                how, why, since = "refuses", error.status, f" after answering ({hint})"
            else:
                how = next(
                    (how for kind, how in UNANSWERED_HOW if isinstance(error, kind)),
                    "does not answer",
                )
                why, since = unanswered_reason(error), ""
            log.warning("%s %s (%s)%s: %s", self.sampler_name, how, why, since, then)
            self._sample_failing_since = self.clock()
        return False

    def _release_samples(self, until: datetime | None) -> None:
        """Write the samples taken up to ``until`` (None: all), with the state the lines
        before them left."""
        while self._held_samples and (until is None or self._held_samples[0][0] <= until):
            taken, observed = self._held_samples.pop(0)
            self._settle(taken)
            self._checkpoint_before = self.checkpoint()  # a new day commits what came before
            self.write_sample(taken, observed)
            # A sample of many queues or addresses would otherwise wait for the flush interval
            # with all its rows. A sample is not read again after a restart, so the state after
            # it is a checkpoint.
            self._commit_if_full()

    def _settle(self, ts: datetime) -> None:
        """The rows owed up to ``ts``, as a step of its own with its own checkpoint. Written
        within a line's or sample's step, a new day's commit there took the checkpoint from
        before that step, behind the owed rows it committed, and a restart from it wrote their
        seq again (an audit)."""
        if self.owes_rows(ts):
            self._checkpoint_before = self.checkpoint()
            self.settle(ts)

    @property
    def sample_interval_ms(self) -> int:
        return round(self.sample_interval_s * 1000)

    # -- commits and the loop -----------------------------------------------------------------
    def _commit(self, checkpoint: dict[str, Any]) -> None:
        """Commit the pending rows; they stay pending when the commit fails (a full disk), and
        nothing after them is committed, so a restart reads their lines again."""
        self.writer.commit(self._pending, checkpoint)
        self._pending = []

    def _commit_if_full(self) -> None:
        """Commit once the batch holds FLUSH_ROWS rows, with the state as of now: called only
        between steps (a line read, a sample written), where the state matches the rows."""
        if len(self._pending) >= FLUSH_ROWS:
            self._commit(self.checkpoint())

    def flush(self) -> None:
        """Commit everything: the samples held, the rows pending and the position reached."""
        self._release_samples(None)
        self._commit(self.checkpoint())

    def poll_once(self) -> None:
        """Read the log, sample when due, and commit when the batch is due (samples still
        held wait for the next poll)."""
        moved = self.read_log()
        if self.sampler is not None and time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + self.sample_interval_s
            self.sample()
        self._release_samples(self.clock() - timedelta(seconds=SAMPLE_HOLD_S))
        due = time.monotonic() - self._pending_since >= self.flush_interval_s
        if (self._pending and due) or (moved and not self._pending):
            self._commit(self.checkpoint())

    def run(self, *, stop: Callable[[], bool], once: bool = False) -> None:
        """Poll until ``stop()`` is true (checked between two lines of a backlog too), or once;
        then commit everything and let the session go. A failure (a commit that cannot be
        written) stops it without a commit after it: the next start goes on from the last one.

        A KeyboardInterrupt may fall anywhere, between a line's change of state and its row or
        inside a commit: nothing is committed after it (a checkpoint taken there would hold the
        change without the row, and lose it for good), and the next start reads again from the
        last commit. The command routes Ctrl-C to ``stop`` instead (flowctl/cli.py)."""
        self._once = once
        self._stop = stop
        try:
            while True:
                self.poll_once()
                if once or stop():
                    break
                time.sleep(POLL_INTERVAL_S)
            self._say_if_not_the_brokers_log()  # a --once over a short file, too
            self.flush()
        finally:
            self.close()

    def close(self) -> None:
        """Let another collector take the session (what is pending is not committed)."""
        self.writer.unlock()

"""How a job that fails for a reason it did not check first ends: one ``error:`` line, an exit code
per kind of failure, and the full trace in a log file whose path the line gives.

The kinds are a table of ordered rules (:data:`FAILURE_RULES`): flowctl's own error families first
(flowctl_core/errors.py: configuration, scenario, protocol, pipeline), then patterns over the type
name and message of failures nobody foresaw; the first rule that applies decides the words, the
advice and the exit code. ``flowctl`` maps its errors through the same table.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from flowctl_core.errors import (
    ConfigurationError,
    PipelineError,
    ProtocolError,
    ScenarioError,
)
from jobs.cli import EXIT_USAGE
from jobs.config import PROJECT_ROOT
from jobs.pipeline_state import StaleInputError

log = logging.getLogger("flowctl.failures")

#: Where the full traces go (one file per failure); ``$FLOWCTL_LOG_DIR`` names another folder.
LOG_DIR_ENV_VAR = "FLOWCTL_LOG_DIR"
DEFAULT_LOG_DIR = PROJECT_ROOT / "var" / "log"


@dataclass(frozen=True)
class FailureRule:
    """A kind of failure: a :class:`~flowctl_core.errors.FlowctlError` family, whose message
    states the reason (no trace is written), or a pattern over ``<type name>: <message>`` of a
    failure nobody foresaw (its trace goes to a log file)."""

    kind: str
    matches: type[BaseException] | re.Pattern[str]
    exit_code: int
    advice: str = ""

    @property
    def stated(self) -> bool:
        return isinstance(self.matches, type)

    def applies_to(self, error: BaseException) -> bool:
        if isinstance(self.matches, type):
            return isinstance(error, self.matches)
        return bool(self.matches.search(f"{type(error).__name__}: {error}"))


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler stopping a command or a job), raised as Ctrl-C is
    (:func:`sigterm_interrupts`)."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` within the block (the main thread only: Python runs
    signal handlers there), so that it ends in one line as Ctrl-C does: a SIGTERM ended a
    pipeline without a word (a review)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated("SIGTERM")


#: What an interrupted command or job leaves: each job's Delta commits stand, and the pipeline
#: state names the days a kill left behind (jobs/pipeline_state.py).
INTERRUPTED_ADVICE = (
    "what it wrote before is kept; `flowctl status` names any day a job left behind, and the "
    "same command run again catches it up"
)

FAILURE_RULES: tuple[FailureRule, ...] = (
    # 128 + the signal's number, as a shell reports a process the signal ended.
    FailureRule("interrupted", Terminated, 128 + signal.SIGTERM, INTERRUPTED_ADVICE),
    FailureRule("interrupted", KeyboardInterrupt, 128 + signal.SIGINT, INTERRUPTED_ADVICE),
    FailureRule(
        "input behind bronze",
        StaleInputError,  # jobs/pipeline_state.py, raised before any write
        65,  # EX_DATAERR
        "nothing was written; run the job named over those days first (`flowctl status` lists "
        "every job and day behind bronze)",
    ),
    FailureRule("refused", PipelineError, EXIT_USAGE),
    FailureRule("configuration error", ConfigurationError, EXIT_USAGE),
    FailureRule("scenario error", ScenarioError, EXIT_USAGE),
    FailureRule("protocol violation", ProtocolError, EXIT_USAGE),
    FailureRule(
        "Delta commit conflict",
        re.compile(
            r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception|"
            r"MetadataChangedException|ProtocolChangedException|"
            r"DeltaConcurrentModificationException"
        ),
        75,  # EX_TEMPFAIL: try again
        "another run wrote the same table at the same time; run this one again (every job "
        "replaces its days, so a rerun is safe)",
    ),
    FailureRule(
        "out of memory",
        re.compile(r"OutOfMemoryError|Java heap space|GC overhead limit exceeded"),
        71,
        "give Spark more memory (spark.conf.spark.driver.memory in the pipeline conf) or run "
        "fewer days at once",
    ),
    FailureRule(
        "Spark failure",
        re.compile(r"^(Py4J|\w*Captured|Analysis|\w*Spark|Java)\w*:"),  # the type's name
        70,  # EX_SOFTWARE
        "Spark stopped the job; the trace names the stage",
    ),
)
#: Anything else: a bug of flowctl's, or a failure nobody foresaw.
UNFORESEEN = FailureRule("unexpected error", re.compile(""), 1, "please report it with the trace")


def rule_for(error: BaseException) -> FailureRule:
    return next((rule for rule in FAILURE_RULES if rule.applies_to(error)), UNFORESEEN)


#: py4j's wrapper of a Java exception: this line, then ": <Java class>: <message>" on the next.
_PY4J_CALL = re.compile(r"^An error occurred while calling [\w.$]+$")
#: A Java class's package (``: io.delta.exceptions.``) before its simple name.
_JAVA_PACKAGE = re.compile(r"^:?\s*(?:[a-z_]\w*\.)+(?=[A-Z]\w*(?:Exception|Error)\b)")
#: Spark's and Delta's error class (``[DELTA_CONCURRENT_APPEND] ``), after the type if any.
_ERROR_CLASS = re.compile(r"^(\w+: )?\[[A-Z_.]+\]\s*")


def cause_line(error: BaseException) -> str:
    """The exception's own first line, without the JVM's stack (at most 400 characters): for an
    error py4j wraps, the Java exception's simple name and message (Delta's "a concurrent WRITE
    ... in the partition [date=...]"), not py4j's "An error occurred while calling o72.save"."""
    if isinstance(error, KeyboardInterrupt) and not str(error):
        return "Ctrl-C (SIGINT)"
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) > 1 and _PY4J_CALL.match(lines[0]):
        lines = lines[1:]
    first = _ERROR_CLASS.sub(r"\1", _JAVA_PACKAGE.sub("", lines[0] if lines else ""))
    return (first or type(error).__name__)[:400]


def write_trace(job: str, error: BaseException) -> Path | None:
    """The full trace in ``<log dir>/flowctl-<job>-<UTC time>.log``; None when it cannot be
    written (the line then says so rather than failing again)."""
    folder = Path(os.environ.get(LOG_DIR_ENV_VAR) or DEFAULT_LOG_DIR)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = folder / f"flowctl-{job}-{stamp}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
    except OSError:
        return None
    return path


def failure_line(job: str, error: BaseException, trace: Path | None) -> str:
    rule = rule_for(error)
    advice = f": {rule.advice}" if rule.advice else ""
    if rule.stated:
        return f"error: {job}: {rule.kind}: {cause_line(error)}{advice} (exit {rule.exit_code})"
    where = f"full trace: {trace}" if trace else "the trace could not be written"
    return (
        f"error: {job}: {rule.kind}: {cause_line(error)}{advice} (exit {rule.exit_code}; {where})"
    )


def report_failure(job: str, error: BaseException) -> tuple[str, int]:
    """The one line and the exit code of ``error``; the trace of a failure nobody foresaw is
    written to its log file first (a stated one's message says it all)."""
    rule = rule_for(error)
    trace = None if rule.stated else write_trace(job, error)
    return failure_line(job, error, trace), rule.exit_code


def run_job_process(job: str, main: Callable[[], int]) -> int:
    """:func:`run_entry_point` as a job's own process (spark-submit), its Spark session stopped
    before the process exits: the executors are released in order. Left to the JVM's shutdown,
    a standalone master in the same JVM (``local-cluster``) sees them killed and starts others,
    dozens of executor JVMs, until it is gone itself."""
    try:
        with sigterm_interrupts():
            return run_entry_point(job, main)
    finally:
        _stop_spark_session()


def _stop_spark_session() -> None:
    if "pyspark.sql" not in sys.modules:  # the job failed before Spark started
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    try:
        session.stop()
    except Exception as error:  # a JVM that died with the job: nothing left to release
        log.debug("stopping the Spark session: %s", error)


def run_entry_point(job: str, main: Callable[[], int]) -> int:
    """``main()``'s exit status; an exception it raises becomes one line on stderr and its exit
    code by :data:`FAILURE_RULES`, the trace of an unforeseen one in a log file."""
    try:
        return main()
    except SystemExit:
        raise
    except (Exception, KeyboardInterrupt) as error:
        line, exit_code = report_failure(job, error)
        print(line, file=sys.stderr)
        return exit_code

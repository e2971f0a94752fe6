"""flowctl's error families: every refusal or failure it states a reason for, in one hierarchy.

A :class:`FlowctlError`'s message is the one line a user reads (it names the file, field, queue or
day). The command line and the spark-submit entry points give each family its exit status in one
table (``jobs/failures.py``: FAILURE_RULES); anything that is not a FlowctlError is a failure
nobody foresaw (a Spark or JVM error, or a bug) and goes to a log file with its trace. Also
the one-line form of a YAML parse error, which every file flowctl reads can raise.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FlowctlError(Exception):
    """A refusal or failure flowctl states the reason for."""


class ConfigurationError(FlowctlError, ValueError):
    """A setting that cannot be used: a pipeline conf or policy, a broker's flow settings, an
    output folder."""


class ScenarioError(FlowctlError, ValueError):
    """A scenario that cannot be loaded or run as written; the message names the file and field."""


class ProtocolError(FlowctlError):
    """A peer broke a flow-control rule; ``condition`` is the AMQP error condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


class PipelineError(FlowctlError):
    """A pipeline job that refuses to compute what it was asked, before writing anything."""


def closest_name(given: str, known: Iterable[str]) -> str | None:
    """The name a mistyped ``given`` most likely meant, for a "did you mean" hint: the closest of
    ``known`` by spelling, else the only one that begins with it (``bursty`` for
    ``bursty-producer``, too short beside it to be close by spelling); None when neither."""
    names = list(known)
    close = difflib.get_close_matches(given, names, n=1)
    if close:
        return close[0]
    beginning = [name for name in names if given and name.startswith(given)]
    return beginning[0] if len(beginning) == 1 else None


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for a mistyped ``given`` (:func:`closest_name`), else ""."""
    close = closest_name(given, known)
    return f"; did you mean {close!r}?" if close else ""


def yaml_problem(error: Exception) -> str:
    """One line for a YAML parse error: where and what, e.g. ``line 3, column 6: mapping values
    are not allowed here (while parsing a block mapping at line 1)``. PyYAML's own message spans
    several lines and names the text "<unicode string>" rather than its file."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if not problem or mark is None:
        return " ".join(str(error).split())
    line = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    if context and context_mark is not None and context_mark.line != mark.line:
        line += f" ({context} at line {context_mark.line + 1})"
    elif context:
        line += f" ({context})"
    return line

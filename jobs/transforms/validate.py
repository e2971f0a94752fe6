"""Contract checks of raw events (DESIGN.md §3) and de-duplication on (run_id, seq).

Input: raw rows with the ``broker_events`` columns plus ``date`` (the raw ``date=`` partition the
row was read from) and ``source_file``. :func:`classify_events` adds two columns:

- ``reason``: ';'-separated names of the rules a row breaks, null when it keeps the contract (the
  rules are declarations, :data:`CONTRACT_RULES`, from which jobs/quality.py also builds the
  Great Expectations suite over bronze);
- ``status``: ``accepted`` (goes to bronze) or ``quarantined`` (goes to quarantine with its
  reason). A byte-for-byte copy of an accepted row is quarantined with the reason ``duplicate``:
  DESIGN.md §5 wants rows in = rows accepted + rows quarantined, so nothing is dropped unseen.

Two rows of one day with the same (run_id, seq) but different contents contradict each other;
since nothing tells which one is true, every version is quarantined as ``conflicting_duplicate``
rather than picking one. Copies of a key on different days always differ (their ``ts`` lies in
their own day): the copy on the earliest day whose copies agree is the event, the copies on other
days are quarantined as ``conflicting_duplicate``. The rule depends on the raw rows only, not on
the order in which days are ingested (seq is the run's total order, and a log is written forward
in time, so a later day's copy of a key is the replay).
So every raw row ends in exactly one status: rows in = accepted + quarantined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.transforms.timeutil import utc_date
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES, LINK_ROLES, PROTOCOLS

ACCEPTED, QUARANTINED = "accepted", "quarantined"
#: The reason of a byte-for-byte copy of an accepted row.
DUPLICATE_REASON = "duplicate"
#: The reason of every version of a key held with different contents (which is true is unknown).
CONFLICTING_DUPLICATE_REASON = "conflicting_duplicate"

EVENT_COLUMNS: tuple[str, ...] = tuple(BROKER_EVENTS.names)

#: Counts, sizes, depths, thresholds and limits: negative values are impossible. Link credit is
#: not listed: the sender-side formula of DESIGN.md §2 is a difference the contract does not bound.
NON_NEGATIVE_COLUMNS: tuple[str, ...] = (
    "seq",
    "size_bytes",
    "depth_msgs",
    "depth_bytes",
    "flow_stopped_count",
    "flow_stop_count",
    "flow_resume_count",
    "flow_stop_size",
    "flow_resume_size",
    "max_count",
    "max_size",
    "available",
    "outstanding",
    "capacity",
    "latency_us",
)

#: Events that are meaningless without the entity they concern.
QUEUE_EVENT_TYPES: tuple[str, ...] = (
    "queue_declared",
    "thresholds_changed",
    "enqueue",
    "dequeue",
    "flow_stopped",
    "flow_resumed",
)
LINK_EVENT_TYPES: tuple[str, ...] = ("link_attached", "link_detached", "flow")


#: A string that is empty or whitespace only: no more a value than a null.
BLANK_PATTERN = r"^\s*$"

#: Required string columns: a blank one breaks the rule ``blank_<column>``.
REQUIRED_STRING_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in BROKER_EVENTS.columns if not c.nullable and c.type == "string"
)


def is_blank(column: str) -> Column:
    """True for an empty or whitespace-only value (null for null): ``rlike(BLANK_PATTERN)``, the
    rule, with a shortcut.

    A value whose first character is printable ASCII (``!`` to DEL) is not blank: that character
    is neither whitespace nor a line terminator, before which ``$`` may match. Two byte
    comparisons say so without the regex, which converts each value to a Java string and builds a
    matcher: the ingest checks every required string of every row twice (counting pass, write),
    where the regex was 6.6 % of a warm ingest's task CPU samples (JFR, 10 million events). Any
    other value is matched against the rule; tests/test_jobs_validate.py keeps the two equal over
    every character and strings of the characters around the edges of ``\\s`` and ``$``."""
    value = F.col(column)
    # UTF-8 orders strings as their code points, so these bound the first character.
    printable_ascii_first = (value >= F.lit("!")) & (value < F.lit("\x80"))
    return F.when(printable_ascii_first, F.lit(False)).otherwise(value.rlike(BLANK_PATTERN))


def _missing(column: str) -> Column:
    return F.col(column).isNull() | F.coalesce(is_blank(column), F.lit(False))


#: What a :class:`ContractRule` checks of its column: the value is not null; is not blank; is one
#: of ``values``; is not negative; is present (neither null nor blank) in events of the types
#: ``values``; (a timestamp) lies in the row's ``date`` partition, as a UTC day; (a string) is JSON
#: when it is given (neither null nor blank).
RuleCheck = Literal[
    "not_null",
    "not_blank",
    "in_set",
    "not_negative",
    "present_for",
    "in_partition_day",
    "json",
]


#: JSON whitespace before a value (RFC 8259): what may come before an object's ``{``.
_OBJECT_START = r"^[ \t\n\r]*\{"
#: No ``'`` outside the double-quoted strings: JSON has no token holding one, so text Spark's
#: parser reads with one there was read with its single quotes allowed. Possessive, so a long
#: detail is matched in one pass.
_NO_QUOTE_OUTSIDE_STRINGS = r'^(?:[^"\']++|"(?:[^"\\]++|\\.)*+")*+$'


def is_json(column: str) -> Column:
    """True when ``column`` is one JSON object (DESIGN §3: "JSON with anything else"; the metrics
    read its fields with Spark's parser, and a value they cannot read would read as null fields,
    silently).

    Parsed as the one element of an array: Spark's parser stops after the first value, so
    ``{"a": 1} x`` or two records run together (``{"a": 1}{"b": 2}``, ``{"a": 1},{"b": 2}``)
    would pass on their own and have their tail dropped silently; inside ``[...]`` the tail is a
    syntax error or a second element. Spark's parser (``json_array_length``,
    ``get_json_object``) also takes single quotes, which JSON does not: ``{'outcome':
    'dropped'}`` (Python's ``str`` of a dict) read as dropped in Spark and as nothing in any
    other reader (the DuckDB peer), and a number, a string or an array passed with every field
    null (an audit). So the value must also start as an object, and hold no ``'`` outside its
    strings; the two regular expressions run only on the rare rows not starting with ``{`` or
    holding a ``'``. (A strict ``from_json`` parse of those rows alone, kept off the others by a
    ``when``, still made the contract check of the bench's 10 million rows 1.4 s slower and the
    ingest ~4 s.) Left to Spark's parser: a control character written raw inside a string (a
    tab or a line break pasted in), which JSON refuses (a check of it, two more regular
    expressions, made the bench's warm ingest 25.0 s -> 57.6 s alternated in one JVM, though its
    details are all null: refused), and text that closes the array itself and opens another
    (``{"a": 1}], [{"b": 2}``), a forgery rather than a writer's slip."""
    text = F.col(column)
    wrapped = F.concat(F.lit("["), text, F.lit("]"))
    parses = F.coalesce(F.json_array_length(wrapped) == 1, F.lit(False))
    an_object = text.startswith("{") | text.rlike(_OBJECT_START)
    quotes_in_strings = ~text.contains("'") | text.rlike(_NO_QUOTE_OUTSIDE_STRINGS)
    return parses & an_object & quotes_in_strings


@dataclass(frozen=True)
class ContractRule:
    """One rule of the contract, declared once, as Delta Live Tables' expectations are: the
    quarantine rejects a raw row for which :meth:`broken` holds, with ``name`` as its reason
    (:func:`contract_violations`), and the Great Expectations suite over bronze expects it of
    every accepted row (jobs/quality.py builds its expectations from these declarations)."""

    name: str
    check: RuleCheck
    column: str
    values: tuple[str, ...] = ()

    def concerns_the_event(self) -> Column:
        """True for events of the types ``values``: those a ``present_for`` rule requires its
        column in (the quarantine's :meth:`broken`, and the suite's batch in jobs/quality.py)."""
        return F.col("event_type").isin(*self.values)

    def broken(self) -> Column:
        """True when a row breaks the rule; null (not broken) over a null value, except for the
        ``not_null`` and ``present_for`` checks, whose subject is the missing value."""
        col = F.col(self.column)
        if self.check == "not_null":
            return col.isNull()
        if self.check == "not_blank":
            return is_blank(self.column)
        if self.check == "in_set":
            unknown = ~col.isin(*self.values)
            # A blank required string is reported as blank only.
            return (
                unknown & ~is_blank(self.column)
                if self.column in REQUIRED_STRING_COLUMNS
                else unknown
            )
        if self.check == "not_negative":
            return col < 0
        if self.check == "present_for":
            return self.concerns_the_event() & _missing(self.column)
        if self.check == "in_partition_day":
            # The sink files each event under the UTC date of its ts; anything else is a bad
            # timestamp.
            return utc_date(self.column) != F.col("date")
        if self.check == "json":
            return ~is_blank(self.column) & ~is_json(self.column)
        raise ValueError(f"contract rule {self.name}: unknown check {self.check!r}")


#: The contract's rules in reporting order (a row's reason lists the rules it breaks in this order).
CONTRACT_RULES: tuple[ContractRule, ...] = (
    *(ContractRule(f"null_{name}", "not_null", name) for name in BROKER_EVENTS.required),
    *(ContractRule(f"blank_{name}", "not_blank", name) for name in REQUIRED_STRING_COLUMNS),
    ContractRule("unknown_event_type", "in_set", "event_type", EVENT_TYPES),
    ContractRule("unknown_protocol", "in_set", "protocol", PROTOCOLS),
    ContractRule("unknown_link_role", "in_set", "link_role", LINK_ROLES),
    ContractRule("ts_outside_partition_date", "in_partition_day", "ts"),
    ContractRule("missing_queue", "present_for", "queue", QUEUE_EVENT_TYPES),
    ContractRule("missing_link", "present_for", "link", LINK_EVENT_TYPES),
    ContractRule("invalid_detail_json", "json", "detail"),
    *(ContractRule(f"negative_{name}", "not_negative", name) for name in NON_NEGATIVE_COLUMNS),
)


def contract_rules() -> tuple[ContractRule, ...]:
    """The contract's rules (:data:`CONTRACT_RULES`), in reporting order."""
    return CONTRACT_RULES


def contract_violations(raw: DataFrame, partially_read_files: Sequence[str] = ()) -> DataFrame:
    """Add ``reason``: the broken rules joined by ';', or null for a row that keeps the contract.

    Rows of ``partially_read_files`` (files Spark could read only in part) are rejected as well:
    what remains of a damaged file cannot be trusted to be complete.
    """
    # A rule over a null column evaluates to null, which `when` treats as "not broken": nulls are
    # reported by the null_* rules only, so a row is never blamed twice for one missing value.
    # The reason string is built only for rows that break a rule: most rows pay for one boolean.
    rules = _rules(partially_read_files)
    broken = [F.when(condition, F.lit(name)) for name, condition in rules]
    return raw.withColumn("reason", F.when(~_all_kept(rules), F.concat_ws(";", *broken)))


def _rules(partially_read_files: Sequence[str] = ()) -> list[tuple[str, Column]]:
    rules = [(rule.name, rule.broken()) for rule in contract_rules()]
    if partially_read_files:
        damaged = F.col("source_file").isin(*partially_read_files)
        rules.insert(0, ("partially_read_file", damaged))
    return rules


def _all_kept(rules: list[tuple[str, Column]]) -> Column:
    ok = F.lit(True)
    for _, condition in rules:
        ok = ok & ~F.coalesce(condition, F.lit(False))
    return ok


def _content_hash() -> Column:
    """A hash of all event columns that, unlike hashing them directly, tells (1, null) from
    (null, 1): Spark's hash functions skip null inputs, so the null pattern is hashed as well."""
    null_pattern = F.array(*(F.col(c).isNull() for c in EVENT_COLUMNS))
    return F.xxhash64(*(F.col(c) for c in EVENT_COLUMNS), null_pattern)


def contract_ok(partially_read_files: Sequence[str] = ()) -> Column:
    """True when a row keeps the contract: the ``reason`` of :func:`contract_violations` is null.

    The same rules, as one boolean (no strings built): what the ingest's first, counting pass needs.
    """
    return _all_kept(_rules(partially_read_files))


def duplicate_groups(checked: DataFrame, position: str) -> DataFrame:
    """The (run_id, seq) keys that more than one valid row claims, one row per key.

    ``checked`` has ``reason`` (:func:`contract_violations`), ``date``, ``source_file`` and
    ``position`` (the row's index within its file). Returns ``run_id``, ``seq``, ``copies`` (valid
    rows claiming the key), and of the copy that is kept (see the module docstring): its
    ``kept_date``, the ``kept_copies`` of that day (identical, the first kept and the others
    ``duplicate``) and ``kept_copy``, its (source_file, position), the first by file; all three
    null when no copy is kept. Two aggregations, per day then per key: no sort of the rows.
    """
    content = _content_hash()
    per_day = (
        checked.where(F.col("reason").isNull())
        .groupBy("run_id", "seq", "date")
        .agg(
            F.count(F.lit(1)).alias("copies"),
            (F.min(content) != F.max(content)).alias("conflicting"),
            F.min(F.struct(F.col("source_file"), F.col(position))).alias("first_copy"),
        )
    )
    # The earliest day whose copies agree: a struct led by the date compares by date first.
    kept = F.min(F.when(~F.col("conflicting"), F.struct("date", "copies", "first_copy"))).alias(
        "_kept"
    )
    return (
        per_day.groupBy("run_id", "seq")
        .agg(F.sum("copies").alias("copies"), kept)
        .where(F.col("copies") > 1)
        .select(
            "run_id",
            "seq",
            "copies",
            F.col("_kept.date").alias("kept_date"),
            F.col("_kept.copies").alias("kept_copies"),
            F.col("_kept.first_copy").alias("kept_copy"),
        )
    )


def held_keys(rows: DataFrame) -> DataFrame:
    """The (run_id, seq) keys of rows already accepted elsewhere (bronze rows of other days), one
    row per key with ``held_hashes`` (the content hashes of the rows holding it) and
    ``held_date`` (the earliest day holding it), for ``classify_events(held=...)``."""
    return rows.groupBy("run_id", "seq").agg(
        F.collect_set(_content_hash()).alias("held_hashes"), F.min("date").alias("held_date")
    )


def _against_held(classified: DataFrame, held: DataFrame, broadcast: bool) -> DataFrame:
    """A valid row whose key is already held on an earlier day (:func:`held_keys`) is
    quarantined: ``duplicate`` when it is a byte-for-byte copy of a held row, else
    ``conflicting_duplicate``. A row whose key is held only on a later day stays valid: it is
    the event, and the caller moves the later day's row to quarantine (jobs/ingest_keys.py)."""
    held = held.select("run_id", "seq", "held_hashes", "held_date")
    joined = classified.join(F.broadcast(held) if broadcast else held, ["run_id", "seq"], "left")
    is_held = F.col("reason").isNull() & (F.col("held_date") < F.col("date"))
    same = F.array_contains(F.col("held_hashes"), _content_hash())
    reason = F.when(is_held & same, F.lit(DUPLICATE_REASON)).when(
        is_held, F.lit(CONFLICTING_DUPLICATE_REASON)
    )
    return joined.withColumn("reason", F.coalesce(reason, F.col("reason"))).drop(
        "held_hashes", "held_date"
    )


def classify_events(
    raw: DataFrame,
    partially_read_files: Sequence[str] = (),
    *,
    position: str | None = None,
    duplicates: DataFrame | None = None,
    no_duplicates: bool = False,
    broadcast_duplicates: bool = True,
    held: DataFrame | None = None,
    broadcast_held: bool = True,
) -> DataFrame:
    """Add ``reason`` and ``status`` (see the module docstring) to raw rows.

    With ``position`` (a column that orders the rows of a file, e.g. Parquet's row index) the
    duplicates are found by one aggregation over (run_id, seq) (:func:`duplicate_groups`, or the
    precomputed ``duplicates``) joined back to the rows; ``no_duplicates`` says the caller has
    proved that no two valid rows share a (run_id, seq), so nothing is joined. Without
    ``position`` a window over (run_id, seq) ordered by file and content does the same on any
    DataFrame.

    ``held`` (:func:`held_keys`, ``position`` given): keys accepted before, outside these rows
    (bronze's other days); a valid row claiming one is quarantined (:func:`_against_held`).
    """
    checked = contract_violations(raw, partially_read_files)
    valid = F.col("reason").isNull()
    if position is None:
        return _classify_with_window(checked)
    if no_duplicates:
        if held is not None:
            checked = _against_held(checked, held, broadcast_held)
        return checked.withColumn("status", _status())
    groups = duplicates if duplicates is not None else duplicate_groups(checked, position)
    groups = groups.select("run_id", "seq", "copies", "kept_date", "kept_copy")
    # Normally a handful of keys: broadcast, so the raw rows are never shuffled.
    joined = checked.join(
        F.broadcast(groups) if broadcast_duplicates else groups, ["run_id", "seq"], "left"
    )
    in_group = valid & F.col("copies").isNotNull()
    on_kept_day = F.coalesce(F.col("date") == F.col("kept_date"), F.lit(False))
    kept = F.struct(F.col("source_file"), F.col(position)) == F.col("kept_copy")
    classified = joined.withColumn(
        "reason",
        F.when(in_group & ~on_kept_day, F.lit(CONFLICTING_DUPLICATE_REASON))
        .when(in_group & ~kept, F.lit(DUPLICATE_REASON))
        .otherwise(F.col("reason")),
    ).drop("copies", "kept_date", "kept_copy")
    if held is not None:
        classified = _against_held(classified, held, broadcast_held)
    return classified.withColumn("status", _status())


def _status() -> Column:
    return F.when(F.col("reason").isNotNull(), F.lit(QUARANTINED)).otherwise(F.lit(ACCEPTED))


def _classify_with_window(checked: DataFrame) -> DataFrame:
    checked = checked.withColumn("content_hash", _content_hash())
    valid = F.col("reason").isNull()
    # Only valid rows compete for a (run_id, seq): an invalid copy must not turn a good row into a
    # "conflict". Invalid rows get a partition key of their own by a null seq in the window key.
    key_seq = F.when(valid, F.col("seq"))
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    same_day = Window.partitionBy("run_id", key_seq, "date").rowsBetween(*whole)
    day_agrees = F.min("content_hash").over(same_day) == F.max("content_hash").over(same_day)
    same_key = Window.partitionBy("run_id", key_seq).rowsBetween(*whole)
    first_in_day = Window.partitionBy("run_id", key_seq, "date").orderBy(
        "source_file", "content_hash"
    )
    checked = checked.withColumn("_day_agrees", day_agrees)
    kept_date = F.min(F.when(F.col("_day_agrees"), F.col("date"))).over(same_key)
    on_kept_day = F.coalesce(F.col("date") == kept_date, F.lit(False))
    classified = checked.withColumn(
        "reason",
        F.when(valid & ~on_kept_day, F.lit(CONFLICTING_DUPLICATE_REASON))
        .when(valid & (F.row_number().over(first_in_day) > 1), F.lit(DUPLICATE_REASON))
        .otherwise(F.col("reason")),
    )
    return classified.withColumn("status", _status()).drop("content_hash", "_day_agrees")

"""Great Expectations 1.x validation of the rows accepted into bronze ``broker_events``.

The suite is built from the contract's rules (``contract_rules()``, jobs/transforms/validate.py),
the declarations the quarantine filters with: one declaration filters and reports, as Delta Live
Tables' expectations do, so a rule cannot be in one and not the other; each expectation names its
rule in its ``meta``. Beside them, one row per (run_id, seq). The suite is the second look at the
result, stored as JSON next to the ingest counts: a failure means a row broke the contract yet got
past the quarantine, i.e. a bug in the ingest, not bad input.

Cost: the suite runs over the columns it checks only, uncached (the batch is re-read from
Parquet by each of the checkpoint's few Spark jobs, cheaper than building Spark's in-memory cache
of it), and first with the BOOLEAN_ONLY result format, for which Great Expectations computes its
metrics in a few bundled aggregations. Listing unexpected values takes one more Spark job per
expectation, so the BASIC format (counts and sample values) is asked for only when the suite
fails, to say what failed. No expectation carries a row condition, which Great Expectations
computes in Spark jobs of their own: a rule for some event types only is stated over a batch
column (:func:`required_value_column`) and joins the bundled aggregation (the suite over 10M
events in bronze, one JVM, alternated: 11.4-13.0 s with row conditions, 10.4-10.9 s without;
about 3 CPU-s less).

Importing Great Expectations costs a core ~9 s (scipy, pandas and altair come with it): the ingest
starts it on a thread of its own (:func:`import_in_background`), where it overlaps the ingest's
Spark jobs instead of following them.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.transforms.timeutil import utc_date
from jobs.transforms.validate import (
    BLANK_PATTERN,
    ContractRule,
    contract_rules,
    is_blank,
    is_json,
)
from schemas.broker_events import BROKER_EVENTS

log = logging.getLogger(__name__)

SUITE_NAME = "broker_events_bronze"
UNIQUE_KEY = ("run_id", "seq")
#: The key of an expectation's ``meta`` naming the contract rule it states.
RULE_META = "contract_rule"


def import_in_background(module: str = "great_expectations") -> threading.Thread:
    """Import ``module`` on a daemon thread, started here, and return the thread.

    The driver's Python waits on the JVM while the ingest's Spark jobs run, so the import that
    :func:`validate_accepted_events` needs overlaps them; there it then finds the module loaded, or
    waits for this import to finish (Python's per-module import locks). A cold ingest of 2 million
    events, alternated: 51.6 / 43.2 s importing at validation, 49.2 / 40.2 s with the import begun
    at the start (the suite's first job came ~10 s after bronze's write in a cold 10M ingest, no
    Spark job between). A failure is logged here and raised by the validation's own import."""

    def load() -> None:
        try:
            importlib.import_module(module)
        except Exception as error:  # the validation's import raises it where it is handled
            log.debug("importing %s in the background failed: %s", module, error)

    thread = threading.Thread(target=load, name=f"import {module}", daemon=True)
    thread.start()
    return thread


def partition_day_column(column: str) -> str:
    """The batch column holding the UTC day of the timestamp ``column`` (:func:`suite_batch`)."""
    return f"_utc_day_of_{column}"


def json_check_column(column: str) -> str:
    """The batch column saying whether ``column`` is blank or parses as JSON
    (:func:`suite_batch`)."""
    return f"_json_ok_{column}"


def required_value_column(column: str) -> str:
    """The batch column holding ``column`` in the events of the types that need it, and
    :data:`NOT_REQUIRED` in the others (:func:`suite_batch`)."""
    return f"_required_{column}"


#: What :func:`required_value_column` holds where an event does not need the column: neither null
#: nor blank, so it passes both of the rule's expectations.
NOT_REQUIRED = "-"


def rule_expectations(rule: ContractRule) -> list[Any]:
    """The expectations stating ``rule`` of accepted rows, each naming it in its ``meta``: the
    same declaration the quarantine filters with (jobs/transforms/validate.py), reported here."""
    import great_expectations.expectations as gxe

    meta = {RULE_META: rule.name}
    column = rule.column
    if rule.check == "not_null":
        return [gxe.ExpectColumnValuesToNotBeNull(column=column, meta=meta)]
    if rule.check == "not_blank":
        return [
            gxe.ExpectColumnValuesToNotMatchRegex(column=column, regex=BLANK_PATTERN, meta=meta)
        ]
    if rule.check == "in_set":
        return [
            gxe.ExpectColumnValuesToBeInSet(column=column, value_set=list(rule.values), meta=meta)
        ]
    if rule.check == "not_negative":
        return [gxe.ExpectColumnValuesToBeBetween(column=column, min_value=0, meta=meta)]
    if rule.check == "present_for":  # neither null nor blank, in events of those types
        # The batch's stand-in where the column is not required (NOT_REQUIRED) and the blank
        # check are strings: a rule over another type would be stated wrongly, so it is refused.
        kind = BROKER_EVENTS.column(column).type
        if kind != "string":
            raise ValueError(
                f"contract rule {rule.name}: present_for is stated over string columns only; "
                f"{column} is {kind}"
            )
        required = required_value_column(column)
        return [
            gxe.ExpectColumnValuesToNotBeNull(column=required, meta=meta),
            gxe.ExpectColumnValuesToNotMatchRegex(column=required, regex=BLANK_PATTERN, meta=meta),
        ]
    if rule.check == "in_partition_day":
        return [
            gxe.ExpectColumnPairValuesToBeEqual(
                column_A=partition_day_column(column), column_B="date", meta=meta
            )
        ]
    if rule.check == "json":  # given values parse (null or blank: not given)
        return [
            gxe.ExpectColumnValuesToBeInSet(
                column=json_check_column(column), value_set=[True], meta=meta
            )
        ]
    raise ValueError(f"contract rule {rule.name}: no expectation for the check {rule.check!r}")


def build_suite() -> Any:
    """Every contract rule as expectations (:func:`rule_expectations`), and one row per key."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name=SUITE_NAME)
    for rule in contract_rules():
        for expectation in rule_expectations(rule):
            suite.add_expectation(expectation)
    suite.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(UNIQUE_KEY)))
    return suite


def suite_columns() -> list[str]:
    """The event columns the suite reads, in schema order, then ``date``."""
    checked = {rule.column for rule in contract_rules()} | set(UNIQUE_KEY)
    if any(rule.check == "present_for" for rule in contract_rules()):
        checked.add("event_type")
    return [name for name in BROKER_EVENTS.names if name in checked] + ["date"]


def suite_batch(accepted: DataFrame) -> DataFrame:
    """What the suite validates: the columns it reads; the UTC day of each timestamp a rule
    places in its ``date`` partition (Great Expectations compares columns, not expressions); for
    each JSON rule, whether the value parses; for each ``present_for`` rule, the column where the
    event's type needs it (:func:`required_value_column`)."""
    days = {
        partition_day_column(rule.column): utc_date(rule.column)
        for rule in contract_rules()
        if rule.check == "in_partition_day"
    }
    parsed = {
        json_check_column(rule.column): F.coalesce(
            is_blank(rule.column) | is_json(rule.column), F.lit(True)
        )
        for rule in contract_rules()
        if rule.check == "json"
    }
    # A row condition would make Great Expectations run each such expectation as a Spark job of
    # its own; over this column the two fold into the suite's bundled aggregation.
    required = {
        required_value_column(rule.column): F.when(
            rule.concerns_the_event(), F.col(rule.column)
        ).otherwise(F.lit(NOT_REQUIRED))
        for rule in contract_rules()
        if rule.check == "present_for"
    }
    return accepted.select(*suite_columns()).withColumns({**days, **parsed, **required})


def validate_accepted_events(accepted: DataFrame, label: str) -> dict[str, Any]:
    """Run the suite through a Checkpoint over ``accepted``; returns the JSON-able result.

    BOOLEAN_ONLY first; on failure the checkpoint runs again with BASIC, whose result is returned.
    """
    columns = suite_batch(accepted)
    result = _run_checkpoint(columns, label, "BOOLEAN_ONLY")
    if not result["success"]:
        log.warning(
            "Great Expectations suite %s failed on %s; collecting details", SUITE_NAME, label
        )
        result = _run_checkpoint(columns, label, "BASIC")
    return result


def _run_checkpoint(accepted: DataFrame, label: str, result_format: str) -> dict[str, Any]:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch_definition = (
        # persist=False: Great Expectations would otherwise cache the batch, and building Spark's
        # columnar cache of millions of rows costs more than the few column-pruned Parquet
        # scans the checkpoint runs over it.
        context.data_sources.add_spark(name="bronze", persist=False)
        .add_dataframe_asset(name="broker_events")
        .add_batch_definition_whole_dataframe(name="accepted_rows")
    )
    suite = context.suites.add(build_suite())
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{SUITE_NAME}_{label}", data=batch_definition, suite=suite)
    )
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=f"ingest_{label}",
            validation_definitions=[validation],
            result_format=result_format,
        )
    )
    result = checkpoint.run(batch_parameters={"dataframe": accepted})
    return {"success": bool(result.success), "result": result.describe_dict()}


def store_result(
    result: dict[str, Any], quality_dir: str, label: str, spark: SparkSession | None = None
) -> str:
    """Write the result as JSON (one file per ingested range, replaced on rerun); returns where.

    A URI (``s3a://``, ``hdfs://``, ``abfss://``, ``file://``) is written through Hadoop's
    FileSystem of the Spark session, so it lands where the cluster's Delta tables do."""
    text = json.dumps(result, indent=2, sort_keys=True, default=str)
    relative = f"broker_events/{label}.json"
    if "://" in quality_dir:
        if spark is None:
            raise ValueError(f"writing to {quality_dir} needs a Spark session (Hadoop FileSystem)")
        target = f"{quality_dir.rstrip('/')}/{relative}"
        _write_through_hadoop(spark, target, text)
        return target
    local = Path(quality_dir) / relative
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(text, encoding="utf-8")
    return str(local)


def _write_through_hadoop(spark: SparkSession, uri: str, text: str) -> None:
    """Create or overwrite the file ``uri`` with ``text`` (UTF-8), parents included."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    filesystem = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = filesystem.create(path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()

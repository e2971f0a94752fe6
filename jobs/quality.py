"""Great Expectations 1.x validation of the rows accepted into bronze ``broker_events``.

The quarantine rules (jobs/transforms/validate.py) decide what is accepted; this suite is the
independent second look at the result, stored as JSON next to the ingest counts. A failure means a
row broke the contract yet got past the rules, i.e. a bug in the rules, not bad input.

Cost: the suite runs over the columns it checks only, uncached (the batch is re-read from
Parquet by each of the checkpoint's few Spark jobs, cheaper than building Spark's in-memory cache
of it), and first with the BOOLEAN_ONLY result format, for which Great Expectations computes its
metrics in a few bundled aggregations. Listing unexpected values takes one more Spark job per
expectation, so the BASIC format (counts and sample values) is asked for only when the suite
fails, to say what failed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.transforms.validate import BLANK_PATTERN, NON_NEGATIVE_COLUMNS, REQUIRED_STRING_COLUMNS
from schemas.broker_events import BROKER_EVENTS, EVENT_TYPES, LINK_ROLES, PROTOCOLS

log = logging.getLogger(__name__)

SUITE_NAME = "broker_events_bronze"


def build_suite() -> Any:
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name=SUITE_NAME)
    for column in BROKER_EVENTS.required:
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
    for column in REQUIRED_STRING_COLUMNS:  # the rules' blank_<column>
        suite.add_expectation(
            gxe.ExpectColumnValuesToNotMatchRegex(column=column, regex=BLANK_PATTERN)
        )
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="event_type", value_set=list(EVENT_TYPES))
    )
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="protocol", value_set=list(PROTOCOLS))
    )
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="link_role", value_set=list(LINK_ROLES))
    )
    for column in NON_NEGATIVE_COLUMNS:
        suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=column, min_value=0))
    suite.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(UNIQUE_KEY)))
    return suite


UNIQUE_KEY = ("run_id", "seq")


def suite_columns() -> list[str]:
    """The columns the suite reads, in schema order."""
    checked = {*BROKER_EVENTS.required, "event_type", "protocol", "link_role"}
    checked |= {*NON_NEGATIVE_COLUMNS, *UNIQUE_KEY}
    return [name for name in BROKER_EVENTS.names if name in checked]


def validate_accepted_events(accepted: DataFrame, label: str) -> dict[str, Any]:
    """Run the suite through a Checkpoint over ``accepted``; returns the JSON-able result.

    BOOLEAN_ONLY first; on failure the checkpoint runs again with BASIC, whose result is returned.
    """
    columns = accepted.select(*suite_columns())
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

"""The broker_events schema renders identically for pyarrow and Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from schemas import BROKER_EVENTS, EVENT_TYPES
from schemas.broker_events import LINK_ROLES, PROTOCOLS
from schemas.model import Column, TableSchema
from tests.engine.test_event_log_contract import EVENT_TYPES as DESIGN_EVENT_TYPES
from tests.engine.test_event_log_contract import PROTOCOLS as DESIGN_PROTOCOLS

SPARK_FOR_ARROW = {
    pa.string(): T.StringType(),
    pa.int64(): T.LongType(),
    pa.int32(): T.IntegerType(),
    pa.float64(): T.DoubleType(),
    pa.bool_(): T.BooleanType(),
    pa.timestamp("us", tz="UTC"): T.TimestampType(),
    pa.date32(): T.DateType(),
}


def test_arrow_and_spark_renderings_agree() -> None:
    arrow, spark = BROKER_EVENTS.to_pyarrow(), BROKER_EVENTS.to_spark()
    assert arrow.names == spark.fieldNames() == BROKER_EVENTS.names
    for arrow_field, spark_field in zip(arrow, spark.fields, strict=True):
        assert SPARK_FOR_ARROW[arrow_field.type] == spark_field.dataType, arrow_field.name
        assert arrow_field.nullable == spark_field.nullable, arrow_field.name
    assert arrow.metadata[b"schema_version"] == b"1"


def test_design_md_columns_and_required_fields() -> None:
    # DESIGN.md §3: these five are "not null"; everything else is nullable.
    assert BROKER_EVENTS.required == ["run_id", "broker", "seq", "ts", "event_type"]
    for name in (
        "queue",
        "link",
        "session",
        "connection",
        "protocol",
        "link_role",
        "message_id",
        "size_bytes",
        "depth_msgs",
        "depth_bytes",
        "flow_stopped",
        "flow_stopped_count",
        "flow_stop_count",
        "flow_resume_count",
        "flow_stop_size",
        "flow_resume_size",
        "max_count",
        "max_size",
        "credit",
        "delivery_count",
        "available",
        "outstanding",
        "capacity",
        "latency_us",
        "detail",
    ):
        assert BROKER_EVENTS.column(name).nullable
    assert BROKER_EVENTS.column("ts").type == "timestamp"
    # The names themselves, not just how many: the tuple drives ingest's unknown_event_type
    # quarantine and the Great Expectations value sets, so a misspelling would reject valid rows.
    assert set(EVENT_TYPES) == DESIGN_EVENT_TYPES and len(EVENT_TYPES) == len(DESIGN_EVENT_TYPES)
    assert set(PROTOCOLS) == DESIGN_PROTOCOLS and len(PROTOCOLS) == len(DESIGN_PROTOCOLS)
    assert LINK_ROLES == ("publisher", "consumer")


def test_ddl_and_duplicate_columns() -> None:
    assert "`seq` BIGINT NOT NULL" in BROKER_EVENTS.ddl()
    with pytest.raises(ValueError, match="duplicated"):
        TableSchema("t", 1, (Column("a", "string"), Column("a", "int64")))
    with pytest.raises(KeyError, match="no column"):
        BROKER_EVENTS.column("nope")


def test_spark_schema_of_some_columns_keeps_their_order_and_types() -> None:
    whole = {f.name: f for f in BROKER_EVENTS.to_spark().fields}
    some = BROKER_EVENTS.to_spark(["ts", "run_id", "seq"])
    assert some.fieldNames() == ["ts", "run_id", "seq"]
    assert [f.dataType for f in some.fields] == [whole[n].dataType for n in ("ts", "run_id", "seq")]
    assert not some["seq"].nullable
    with pytest.raises(KeyError, match="no column 'nope'"):
        BROKER_EVENTS.to_spark(["seq", "nope"])

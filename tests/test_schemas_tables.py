"""The pipeline's Delta table schemas (schemas/tables.py): consistent with the event log."""

from __future__ import annotations

from schemas.broker_events import BROKER_EVENTS
from schemas.tables import (
    BROKER_EVENTS_QUARANTINE,
    BRONZE_BROKER_EVENTS,
    PIPELINE_TABLES,
    QUEUE_FLOW_DAILY,
)


def test_every_table_is_registered_once_with_a_layer_and_real_partition_columns():
    assert set(PIPELINE_TABLES) == {
        "broker_events",
        "broker_events_quarantine",
        "queue_flow_episodes",
        "link_starvation_episodes",
        "queue_flow_daily",
        "link_starvation_daily",
        "blocking_episodes",
        "blocking_daily",
        "queue_depth_timeline",
        "carried_events",
        "recommend_day_rollup",
        "pipeline_state",
    }
    for layer, schema in PIPELINE_TABLES.values():
        assert layer in {"bronze", "silver", "gold", "state"}
        assert set(schema.partition_by) <= set(schema.names), schema.name
        assert schema.to_pyarrow().names == schema.names
        assert [f.name for f in schema.to_spark().fields] == schema.names


def test_bronze_keeps_every_event_column_and_its_constraints():
    assert BRONZE_BROKER_EVENTS.names[: len(BROKER_EVENTS.names)] == BROKER_EVENTS.names
    assert set(BROKER_EVENTS.required) <= set(BRONZE_BROKER_EVENTS.required)


def test_quarantine_accepts_rows_that_break_every_constraint():
    event_columns = set(BROKER_EVENTS.names)
    assert not event_columns & set(BROKER_EVENTS_QUARANTINE.required)
    assert {"reason", "record_kind", "source_file", "date"} <= set(
        BROKER_EVENTS_QUARANTINE.required
    )


def test_gold_queue_rows_are_keyed_like_design_section_4():
    assert QUEUE_FLOW_DAILY.names[:4] == ["date", "broker", "run_id", "queue"]
    assert "NOT NULL" in QUEUE_FLOW_DAILY.ddl()

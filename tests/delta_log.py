"""A Delta table's rows read from its log without a JVM, for the tests whose process has no Spark
session of its own (the DAG test's, and the local-cluster test's, which would otherwise start one
more cold JVM only to read five small tables).

The table's latest version is what the Delta protocol says: the data files its commits added and
did not remove since, each with its partition values, typed by the table's schema. A table using
a feature this reader lacks (column mapping, deletion vectors, a checkpoint that replaced its
JSON commits) fails here rather than reading wrong.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

# A partition value is text in the log; these are the types the pipeline's tables partition by.
_PARTITION_TYPES = {
    "date": date.fromisoformat,
    "string": str,
    "integer": int,
    "long": int,
    "boolean": lambda text: text == "true",
}


def delta_rows(table: Path) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``table`` (a local folder), latest version."""
    commits = sorted((table / "_delta_log").glob("*.json"))  # zero-padded versions
    assert commits and commits[0].name == f"{0:020d}.json", f"{table}: commit 0 is not in its log"
    live: dict[str, dict[str, Any]] = {}
    metadata: dict[str, Any] = {}
    for commit in commits:
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
            elif "metaData" in action:
                metadata = action["metaData"]
    configuration = metadata.get("configuration") or {}
    assert configuration.get("delta.columnMapping.mode", "none") == "none", configuration
    types = {f["name"]: f["type"] for f in json.loads(metadata["schemaString"])["fields"]}
    rows = []
    for path, add in sorted(live.items()):
        assert not add.get("deletionVector"), f"{table}: {path} has a deletion vector"
        partition = {
            name: None if text is None else _PARTITION_TYPES[types[name]](text)
            for name, text in add["partitionValues"].items()
        }
        for row in pq.read_table(table / unquote(path)).to_pylist():
            rows.append({**row, **partition})
    return rows

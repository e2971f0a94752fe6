"""Compare the silver and gold tables of two warehouses row for row: a refactor or a speed-up must
leave them as they were (issues 19 and 22: "the demo's gold tables identical before and after").

    .venv/bin/python bench/compare_warehouses.py BEFORE_WAREHOUSE AFTER_WAREHOUSE

Prints one line per table (rows before, rows after, equal or the brokers whose rows differ and the
first rows that differ) and exits 1 when a table differs. Tables only one side has (a table added
since) are listed, not compared; rows are compared on the columns both sides have, and a column
only one side has (added since) is listed with how many rows set it.
Floating-point columns are compared exactly: the same inputs must give the same numbers.
A column that names a warehouse's own files (recommend's kept rollup digests the names of the
bronze files each day was computed from, which every ingest writes anew) is left out and said so.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.config import load_conf
from jobs.delta_io import local_table_missing
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS
from schemas.tables import GOLD, PIPELINE_TABLES, RECOMMEND_DAY_ROLLUP, SILVER

COMPARED_LAYERS = (SILVER, GOLD)
#: Per table, columns that depend on the names of a warehouse's files, not on its rows.
FILE_NAME_COLUMNS = {RECOMMEND_DAY_ROLLUP.name: ("bronze_files",)}


def _tables() -> list[tuple[str, str]]:
    tables = [
        (layer, name) for name, (layer, _) in PIPELINE_TABLES.items() if layer in COMPARED_LAYERS
    ]
    return [*tables, (GOLD, THRESHOLD_RECOMMENDATIONS.name)]


def _rows(frame: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(row[c] for c in columns) for row in frame.select(*columns).collect()),
        key=lambda row: tuple((value is None, str(value)) for value in row),
    )


def _added(frame: Any, columns: list[str]) -> str:
    """Columns one side alone has, with how many of its rows set them (a column added since)."""
    if not columns:
        return ""
    from pyspark.sql import functions as F

    counts = frame.select(*(F.count(c).alias(c) for c in columns)).first()
    return ", ".join(f"{c} set on {counts[c]:,} rows" for c in columns)


def _by_broker(
    columns: list[str], only_before: list[tuple[Any, ...]], only_after: list[tuple[Any, ...]]
) -> str:
    """The brokers whose rows differ, with how many rows each side alone has: an engine change
    meant for one broker's scenarios should show there only."""
    if "broker" not in columns:
        return ""
    at = columns.index("broker")
    brokers = sorted({str(row[at]) for row in (*only_before, *only_after)})
    counts = (
        f"{broker} {sum(str(r[at]) == broker for r in only_before)}/"
        f"{sum(str(r[at]) == broker for r in only_after)}"
        for broker in brokers
    )
    return f"; by broker (only before/after): {', '.join(counts)}"


def compare(spark: Any, before: str, after: str) -> bool:
    same = True
    for layer, name in _tables():
        paths = [f"{warehouse}/{layer}/{name}" for warehouse in (before, after)]
        missing = [path for path in paths if local_table_missing(path)]
        if missing:
            print(f"{layer}/{name}: only in one warehouse (not in {', '.join(missing)})")
            continue
        frame_before, frame_after = (spark.read.format("delta").load(path) for path in paths)
        file_names = FILE_NAME_COLUMNS.get(name, ())
        frame_before, frame_after = (f.drop(*file_names) for f in (frame_before, frame_after))
        shared = sorted(set(frame_before.columns) & set(frame_after.columns))
        only = [
            _added(frame, sorted(set(frame.columns) - set(shared)))
            for frame in (frame_before, frame_after)
        ]
        columns_note = "".join(
            f"; columns only {side}: {text}"
            for side, text in zip(("before", "after"), only, strict=True)
            if text
        ) + "".join(f"; {c} not compared (file names)" for c in file_names)
        rows_before, rows_after = (_rows(f, shared) for f in (frame_before, frame_after))
        if rows_before == rows_after:
            print(f"{layer}/{name}: {len(rows_before):,} rows, identical{columns_note}")
            continue
        same = False
        # repr: a row may hold a map or a list, which does not hash.
        shown_before, shown_after = ({repr(r) for r in rows} for rows in (rows_before, rows_after))
        only_before = [r for r in rows_before if repr(r) not in shown_after]
        only_after = [r for r in rows_after if repr(r) not in shown_before]
        print(
            f"{layer}/{name}: DIFFERENT ({len(rows_before):,} rows before, {len(rows_after):,} "
            f"after; {len(only_before):,} only before, {len(only_after):,} only after)"
            f"{columns_note}{_by_broker(shared, only_before, only_after)}; first only before: "
            f"{only_before[:2]}; first only after: {only_after[:2]}"
        )
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="warehouse folder before the change")
    parser.add_argument("after", help="warehouse folder after the change")
    args = parser.parse_args(argv)
    from jobs.spark_session import build_spark_session

    conf = dataclasses.replace(load_conf(), warehouse_dir=str(Path(args.after).resolve()))
    spark = build_spark_session(conf, app_name="flowctl-compare-warehouses")
    before, after = (str(Path(p).resolve()) for p in (args.before, args.after))
    return 0 if compare(spark, before, after) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Compare the silver and gold tables of two warehouses row for row: a refactor or a speed-up must
leave them as they were (issues 19 and 22: "the demo's gold tables identical before and after").

    .venv/bin/python bench/compare_warehouses.py BEFORE_WAREHOUSE AFTER_WAREHOUSE

Prints one line per table (rows before, rows after, equal or the first rows that differ) and exits 1
when a table differs. Tables only one side has (a table added since) are listed, not compared.
Floating-point columns are compared exactly: the same inputs must give the same numbers.
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
from schemas.tables import GOLD, PIPELINE_TABLES, SILVER

COMPARED_LAYERS = (SILVER, GOLD)


def _tables() -> list[tuple[str, str]]:
    tables = [
        (layer, name) for name, (layer, _) in PIPELINE_TABLES.items() if layer in COMPARED_LAYERS
    ]
    return [*tables, (GOLD, THRESHOLD_RECOMMENDATIONS.name)]


def _rows(spark: Any, path: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path)
    columns = sorted(frame.columns)  # a column added at the end of one table only is reported
    return sorted(
        (tuple(row[c] for c in columns) for row in frame.select(*columns).collect()),
        key=lambda row: tuple((value is None, str(value)) for value in row),
    )


def compare(spark: Any, before: str, after: str) -> bool:
    same = True
    for layer, name in _tables():
        paths = [f"{warehouse}/{layer}/{name}" for warehouse in (before, after)]
        missing = [path for path in paths if local_table_missing(path)]
        if missing:
            print(f"{layer}/{name}: only in one warehouse (not in {', '.join(missing)})")
            continue
        rows_before, rows_after = (_rows(spark, path) for path in paths)
        if rows_before == rows_after:
            print(f"{layer}/{name}: {len(rows_before):,} rows, identical")
            continue
        same = False
        # repr: a row may hold a map or a list, which does not hash.
        shown_before, shown_after = ({repr(r) for r in rows} for rows in (rows_before, rows_after))
        only_before = [r for r in rows_before if repr(r) not in shown_after]
        only_after = [r for r in rows_after if repr(r) not in shown_before]
        print(
            f"{layer}/{name}: DIFFERENT ({len(rows_before):,} rows before, {len(rows_after):,} "
            f"after; {len(only_before):,} only before, {len(only_after):,} only after); first "
            f"only before: {only_before[:2]}; first only after: {only_after[:2]}"
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

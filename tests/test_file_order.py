"""The order in which test files reach the xdist workers (tests/file_order.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.file_order import longest_files_first, read_file_seconds


def test_files_come_longest_first_and_keep_their_tests_together_in_order():
    nodeids = [
        "tests/a.py::test_1",
        "tests/b.py::test_1",
        "tests/b.py::test_2[x]",
        "tests/c.py::test_1",
        "tests/a.py::test_2",
    ]
    seconds = {"tests/a.py": 5.0, "tests/b.py": 300.0, "tests/c.py": 40.0}
    order = [nodeids[i] for i in longest_files_first(nodeids, seconds)]
    assert order == [
        "tests/b.py::test_1",
        "tests/b.py::test_2[x]",
        "tests/c.py::test_1",
        "tests/a.py::test_1",
        "tests/a.py::test_2",
    ]


def test_an_unlisted_file_counts_as_the_median_and_ties_keep_collection_order():
    nodeids = ["tests/new.py::t", "tests/slow.py::t", "tests/mid.py::t", "tests/quick.py::t"]
    seconds = {"tests/slow.py": 90.0, "tests/mid.py": 20.0, "tests/quick.py": 1.0}
    order = [nodeids[i] for i in longest_files_first(nodeids, seconds)]
    # new.py counts as 20 s, the median, and was collected before mid.py.
    assert order == ["tests/slow.py::t", "tests/new.py::t", "tests/mid.py::t", "tests/quick.py::t"]
    assert longest_files_first(nodeids, {}) == [0, 1, 2, 3]


def test_the_table_is_read_as_seconds_per_file(tmp_path: Path):
    path = tmp_path / "file_seconds.json"
    assert read_file_seconds(path) == {}
    path.write_text(json.dumps({"tests/x.py": 12}))
    assert read_file_seconds(path) == {"tests/x.py": 12.0}


def test_the_committed_table_names_existing_test_files():
    table = read_file_seconds()
    assert table, "tests/file_seconds.json is missing"
    root = Path(__file__).resolve().parent.parent
    assert all((root / name).is_file() and name.startswith("tests/") for name in table)
    assert all(seconds >= 0 for seconds in table.values())

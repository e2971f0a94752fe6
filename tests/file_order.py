"""The order in which the suite's test files reach pytest-xdist's workers: the longest first.

Under ``--dist loadfile`` a file runs whole on one worker, and xdist hands files out as workers
free up. By default it hands out first the files with the most tests: the engine's files of many
quick tests. The slowest files (a few Spark tests behind a module fixture that runs twenty jobs)
then came last, and one worker ran them for minutes while the other idled. Handing out the
longest files first (``--no-loadscope-reorder``, which keeps the collection order set here)
keeps both busy to the end: the classic longest-processing-time-first rule.

The seconds are a measured table, ``tests/file_seconds.json`` (setup, call and teardown summed per
file), rewritten by a run with ``--record-file-seconds``. A file the table does not list counts
as its median; the table only orders files, so a stale one costs time, never a result.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

FILE_SECONDS = Path(__file__).with_name("file_seconds.json")

#: Seconds measured in this run per test file, summed over setup, call and teardown.
_measured: defaultdict[str, float] = defaultdict(float)


def file_of(nodeid: str) -> str:
    """The file part of a test's node id: ``tests/a.py::test_x[1]`` -> ``tests/a.py``."""
    return nodeid.split("::", 1)[0]


def read_file_seconds(path: Path = FILE_SECONDS) -> dict[str, float]:
    """The recorded seconds per test file; empty when the table is absent."""
    if not path.is_file():
        return {}
    return {str(name): float(seconds) for name, seconds in json.loads(path.read_text()).items()}


def longest_files_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """Positions of ``nodeids`` reordered so that files come longest first (an unlisted file
    counts as the table's median), each file's tests staying together and in their order; ties
    keep the collection order."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    first_position: dict[str, int] = {}
    for position, nodeid in enumerate(nodeids):
        first_position.setdefault(file_of(nodeid), position)

    def key(position: int) -> tuple[float, int, int]:
        name = file_of(nodeids[position])
        return (-seconds.get(name, default), first_position[name], position)

    return sorted(range(len(nodeids)), key=key)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help=f"write the seconds each test file took to {FILE_SECONDS.name} (the order in which "
        "files reach the workers, longest first)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = longest_files_first([item.nodeid for item in items], read_file_seconds())
    items[:] = [items[position] for position in order]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _measured[file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("record_file_seconds") or hasattr(config, "workerinput"):
        return  # an xdist worker's reports reach the controller, which writes the table
    table = {**read_file_seconds(), **{name: round(s, 1) for name, s in _measured.items()}}
    table = {name: s for name, s in table.items() if (config.rootpath / name).is_file()}
    FILE_SECONDS.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")

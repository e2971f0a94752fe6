"""bench/job_call_cost.py reads Catalyst's rule timer (``RuleExecutor.dumpTimeSpent()``): the
total and Delta's PrepareDeltaScan, whose effective runs are the scans that listed files."""

from __future__ import annotations

import pytest

from bench.job_call_cost import rule_seconds

DUMP = """
=== Metrics of Analyzer/Optimizer Rules ===
Total number of runs: 782175
Total time: 21.094512074 seconds

Rule                                 Effective Time / Total Time   Effective Runs / Total Runs

org.apache.spark.sql.delta.stats.PrepareDeltaScan       12127870393 / 12192816713       34 / 313
org.apache.spark.sql.catalyst.analysis.Analyzer$ResolveReferences 430809093 / 813907666 1504 / 7102
"""


def test_the_total_and_delta_scans_are_read_from_the_dump():
    total, in_scans, scans = rule_seconds(DUMP)
    assert total == pytest.approx(21.094512074)
    assert in_scans == pytest.approx(12.192816713)
    assert scans == 34


def test_a_call_without_delta_scans_reads_zero():
    assert rule_seconds(DUMP.replace("delta.stats.PrepareDeltaScan", "x.Other")) == (
        pytest.approx(21.094512074),
        0.0,
        0,
    )

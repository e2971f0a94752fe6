"""The Great Expectations suite is the contract's rules, stated as expectations (jobs/quality.py):
one declaration (``contract_rules()``, jobs/transforms/validate.py) filters in the quarantine and
reports in the suite. No Spark: the suite is built, not run (test_jobs_validate.py runs it)."""

from __future__ import annotations

from typing import get_args

import pytest

from jobs import quality
from jobs.transforms.validate import ContractRule, RuleCheck, contract_rules


@pytest.fixture(scope="module")
def suite():
    import great_expectations as gx

    gx.get_context(mode="ephemeral")  # a suite is built inside a data context
    return quality.build_suite()


def test_every_contract_rule_is_an_expectation_and_every_expectation_a_rule(suite):
    """Fails when a rule is added to the quarantine and not to the suite, or the other way."""
    stated = {e.meta[quality.RULE_META] for e in suite.expectations if e.meta}
    assert stated == {rule.name for rule in contract_rules()}
    # Beside the rules, only the key's uniqueness (the quarantine's duplicate search).
    others = [type(e).__name__ for e in suite.expectations if not e.meta]
    assert others == ["ExpectCompoundColumnsToBeUnique"]


def test_the_three_rules_the_hand_listed_suite_missed_are_expectations(suite):
    by_rule: dict[str, list[str]] = {}
    for e in suite.expectations:
        if e.meta:
            by_rule.setdefault(e.meta[quality.RULE_META], []).append(type(e).__name__)
    assert by_rule["ts_outside_partition_date"] == ["ExpectColumnPairValuesToBeEqual"]
    # Missing is null or blank, in events of the types that need the column.
    for rule in ("missing_queue", "missing_link"):
        assert by_rule[rule] == [
            "ExpectColumnValuesToNotBeNull",
            "ExpectColumnValuesToNotMatchRegex",
        ]


def test_no_expectation_carries_a_row_condition(suite):
    """Great Expectations computes a conditioned expectation in Spark jobs of its own; the rules
    for some event types only are stated over a batch column instead (jobs/quality.py
    ``required_value_column``; test_jobs_validate.py runs them)."""
    assert [type(e).__name__ for e in suite.expectations if e.row_condition] == []
    required = {
        e.column
        for e in suite.expectations
        if e.meta and e.meta[quality.RULE_META] == "missing_queue"
    }
    assert required == {quality.required_value_column("queue")}


def test_every_kind_of_check_has_its_expectations():
    """A new kind of check in validate.py must be stated in quality.py before any rule uses it."""
    for check in get_args(RuleCheck):
        assert quality.rule_expectations(ContractRule("rule", check, "queue", ("enqueue",)))
    unknown = ContractRule("rule", "not_null", "queue")
    object.__setattr__(unknown, "check", "below_ten")
    with pytest.raises(ValueError, match="no expectation for the check 'below_ten'"):
        quality.rule_expectations(unknown)


def test_a_present_for_rule_over_a_column_that_is_not_a_string_is_refused():
    """The batch column of a ``present_for`` rule holds the string ``NOT_REQUIRED`` where the
    event does not need the value, and the rule's blank check is a regex: both are wrong over a
    number, so such a rule is refused by name rather than stated wrongly."""
    assert quality.rule_expectations(ContractRule("r", "present_for", "link", ("flow",)))
    numeric = ContractRule("missing_credit", "present_for", "credit", ("flow",))
    with pytest.raises(ValueError, match=r"missing_credit: .* credit is int64"):
        quality.rule_expectations(numeric)


def test_the_suite_reads_every_column_a_rule_checks():
    columns = set(quality.suite_columns())
    assert {rule.column for rule in contract_rules()} | {"event_type", "date"} <= columns


def test_the_background_import_loads_the_module_and_leaves_a_failure_to_the_validation(
    tmp_path, monkeypatch
):
    """jobs/quality.py ``import_in_background``: the ingest starts Great Expectations' import on
    a thread; the validation's own import then finds the module loaded, or raises what failed."""
    import importlib
    import sys

    (tmp_path / "flowctl_slow_module.py").write_text("import time\ntime.sleep(0.2)\nLOADED = 1\n")
    (tmp_path / "flowctl_broken_module.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flowctl_slow_module", "flowctl_broken_module"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    thread = quality.import_in_background("flowctl_slow_module")
    assert thread.daemon and thread.is_alive()  # started, and it does not hold the process up
    assert importlib.import_module("flowctl_slow_module").LOADED == 1  # waits for the thread
    thread.join(timeout=10)
    assert not thread.is_alive()

    broken = quality.import_in_background("flowctl_broken_module")
    broken.join(timeout=10)
    assert not broken.is_alive() and "flowctl_broken_module" not in sys.modules
    with pytest.raises(RuntimeError, match="broken on import"):
        importlib.import_module("flowctl_broken_module")

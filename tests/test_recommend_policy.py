"""The recommendation policy (conf/recommend.yaml): what loads, and the errors for what cannot.

No Spark: the policy is read before any session starts.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.config import ConfError
from jobs.recommend import main
from jobs.recommend_policy import DEFAULT_POLICY, RecommendPolicy, load_policy


def _write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(raw) if not isinstance(raw, str) else raw)
    return path


def _error(tmp_path: Path, raw: Any) -> str:
    path = _write(tmp_path, raw)
    with pytest.raises(ConfError) as raised:
        load_policy(path)
    message = str(raised.value)
    assert message.startswith(f"recommendation policy {path}"), message
    return message


def test_the_shipped_policy_loads_with_the_documented_defaults() -> None:
    """conf/recommend.yaml says "a missing key keeps the default shown here": both agree."""
    assert load_policy() == load_policy(DEFAULT_POLICY) == RecommendPolicy()
    assert RecommendPolicy.from_mapping({}) == RecommendPolicy()


def test_the_yaml_layout_is_read_into_the_policy() -> None:
    policy = RecommendPolicy.from_mapping(
        {"lookback_days": 3, "queue": {"safety_margin": 0.5}, "consumer_link": None}
    )
    assert (policy.lookback_days, policy.safety_margin) == (3, 0.5)
    assert policy.window_from(date(2026, 3, 3)) == date(2026, 3, 1)
    # YAML reads "safety_margin: 1" as an int: a number is a number, kept as a float.
    one = RecommendPolicy.from_mapping({"queue": {"safety_margin": 1}})
    assert one.safety_margin == 1.0 and isinstance(one.safety_margin, float)


OUT_OF_RANGE = [
    (None, "lookback_days", 0, "1 <= lookback_days <= 3660"),
    # A window reaching before year 1 raised OverflowError after Spark had started; a 400-digit
    # integer raised it in the range check itself.
    (None, "lookback_days", 10_000_000, "1 <= lookback_days <= 3660"),
    (None, "lookback_days", 10**400, "1 <= lookback_days <= 3660"),
    ("queue", "safety_margin", -0.1, "safety_margin >= 0"),
    ("queue", "min_dwell_s", -1, "min_dwell_s >= 0"),
    ("queue", "min_hysteresis_share", 1, "0 <= min_hysteresis_share < 1"),
    ("queue", "min_hysteresis_share", -0.1, "0 <= min_hysteresis_share < 1"),
    ("queue", "drain_rate_quantile", 1.5, "0 <= drain_rate_quantile <= 1"),
    ("queue", "drain_rate_quantile", -0.5, "0 <= drain_rate_quantile <= 1"),
    ("queue", "flapping_min_short_episodes", 0, "flapping_min_short_episodes >= 1"),
    ("queue", "flapping_short_share", 0, "0 < flapping_short_share <= 1"),
    ("queue", "flapping_short_share", 1.2, "0 < flapping_short_share <= 1"),
    ("queue", "keep_band_share", 1, "0 <= keep_band_share < 1"),
    ("queue", "keep_band_share", -0.01, "0 <= keep_band_share < 1"),
    ("consumer_link", "default_round_trip_s", 0, "default_round_trip_s > 0"),
    ("consumer_link", "default_top_up_batch", 0, "default_top_up_batch >= 1"),
    ("consumer_link", "starved_share_tolerance", 1, "0 <= starved_share_tolerance < 1"),
    ("consumer_link", "starved_share_tolerance", -0.01, "0 <= starved_share_tolerance < 1"),
    ("consumer_link", "min_round_trip_s", -0.001, "min_round_trip_s >= 0"),
    ("consumer_link", "over_provision_factor", 1, "over_provision_factor > 1"),
]


def _layout(section: str | None, key: str, value: Any) -> dict[str, Any]:
    return {key: value} if section is None else {section: {key: value}}


@pytest.mark.parametrize(("section", "key", "value", "allowed"), OUT_OF_RANGE)
def test_an_out_of_range_setting_names_the_file_the_key_and_the_range(
    tmp_path: Path, section: str | None, key: str, value: Any, allowed: str
) -> None:
    message = _error(tmp_path, _layout(section, key, value))
    path = f"{section}.{key}" if section else key
    assert f"{path} = {value!r} is out of range (allowed: {allowed})" in message
    # Constructed in code, the policy refuses the same value.
    with pytest.raises(ValueError, match=re.escape(f"(allowed: {allowed})")):
        RecommendPolicy(**{key: value})


BOUNDARIES = [
    (None, "lookback_days", 1),
    (None, "lookback_days", 3660),
    ("queue", "safety_margin", 0),
    ("queue", "min_dwell_s", 0),
    ("queue", "min_hysteresis_share", 0),
    ("queue", "drain_rate_quantile", 0),
    ("queue", "drain_rate_quantile", 1),
    ("queue", "flapping_min_short_episodes", 1),
    ("queue", "flapping_short_share", 1),
    ("queue", "keep_band_share", 0),
    ("consumer_link", "default_top_up_batch", 1),
    ("consumer_link", "starved_share_tolerance", 0),
    ("consumer_link", "min_round_trip_s", 0),
    ("consumer_link", "over_provision_factor", 1.01),
]


@pytest.mark.parametrize(("section", "key", "value"), BOUNDARIES)
def test_the_bounds_of_a_closed_range_are_allowed(
    tmp_path: Path, section: str | None, key: str, value: Any
) -> None:
    policy = load_policy(_write(tmp_path, _layout(section, key, value)))
    assert getattr(policy, key) == value


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        (None, "lookback_days", "7", "lookback_days must be an integer, got str '7'"),
        (None, "lookback_days", True, "lookback_days must be an integer, got bool True"),
        (None, "lookback_days", 7.5, "lookback_days must be an integer, got float 7.5"),
        ("queue", "safety_margin", "0.2", "queue.safety_margin must be a number, got str '0.2'"),
        ("queue", "safety_margin", False, "queue.safety_margin must be a number, got bool False"),
        ("queue", "min_dwell_s", None, "queue.min_dwell_s must be a number, got NoneType None"),
        (
            "consumer_link",
            "default_top_up_batch",
            8.5,
            "consumer_link.default_top_up_batch must be an integer, got float 8.5",
        ),
        (
            "consumer_link",
            "over_provision_factor",
            float("inf"),
            "consumer_link.over_provision_factor must be a finite number, got inf",
        ),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused(
    tmp_path: Path, section: str | None, key: str, value: Any, expected: str
) -> None:
    assert expected in _error(tmp_path, _layout(section, key, value))


def test_nan_is_refused_though_it_compares_false_with_every_bound(tmp_path: Path) -> None:
    message = _error(tmp_path, "queue:\n  drain_rate_quantile: .nan\n")
    assert "queue.drain_rate_quantile must be a finite number, got nan" in message


def test_unknown_and_misplaced_keys_are_refused(tmp_path: Path) -> None:
    assert "unknown key queue.safety_marjin" in _error(tmp_path, {"queue": {"safety_marjin": 0.5}})
    # A misspelt section would otherwise be ignored, its settings silently at their defaults.
    assert "unknown key queues" in _error(tmp_path, {"queues": {"safety_margin": 0.5}})
    assert "unknown key consumer_link.safety_margin (it belongs under queue:)" in _error(
        tmp_path, {"consumer_link": {"safety_margin": 0.5}}
    )
    assert "unknown key queue.lookback_days (it belongs at the top level)" in _error(
        tmp_path, {"queue": {"lookback_days": 3}}
    )


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    message = _error(tmp_path, {"lookback_days": 0, "queue": {"safety_margin": -1, "typo": 1}})
    assert message == (
        f"recommendation policy {tmp_path / 'recommend.yaml'}: lookback_days = 0 is out of "
        "range (allowed: 1 <= lookback_days <= 3660); queue.safety_margin = -1 is out of range "
        "(allowed: safety_margin >= 0); unknown key queue.typo"
    )


def test_a_file_that_cannot_be_read_as_a_policy(tmp_path: Path) -> None:
    assert "expected a mapping of settings, got [1, 2]" in _error(tmp_path, [1, 2])
    assert "queue: expected a mapping of settings, got 0.2" in _error(tmp_path, {"queue": 0.2})
    assert "is not valid YAML" in _error(tmp_path, "queue: [unclosed\n")
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfError, match=re.escape(f"recommendation policy {missing}: ")):
        load_policy(missing)


def test_the_job_exits_2_with_one_line_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"queue": {"min_hysteresis_share": 1.0}})
    assert main(["--date", "2026-03-03", "--policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: recommendation policy {path}: queue.min_hysteresis_share = 1.0 is out of range "
        "(allowed: 0 <= min_hysteresis_share < 1)\n"
    )


def test_a_file_that_is_no_policy_is_said_to_be_none(tmp_path: Path) -> None:
    """A scenario given as --policy got a "did you mean" for each of its keys, one of them
    slow_consumer_share for "consumers" (a review): three keys or more, none a policy's, are
    another file; fewer are typos, each named."""
    scenario = {"name": "s", "kind": "workload", "duration_s": 3, "consumers": []}
    assert _error(tmp_path, scenario) == (
        f"recommendation policy {tmp_path / 'recommend.yaml'}: none of its keys (consumers, "
        "duration_s, kind, name) is a policy's: is it the recommendation policy? (its keys: "
        "lookback_days, queue:, consumer_link:, address:, rabbitmq_queue:)"
    )
    assert "unknown key lookbak_days" in _error(tmp_path, {"lookbak_days": 3, "queue": {}})

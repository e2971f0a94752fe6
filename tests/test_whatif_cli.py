"""``flowctl whatif`` on a broker other than Qpid: a recommendation row in an Artemis knob, read
from a Delta table as the pipeline writes it, replayed on the bundled scenario from the command
line; a row whose replay does worse fails the command (exit 1), so a deploy can gate on it."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl.cli import app
from jobs.delta_io import replace_where_at, rows_frame
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS

pytestmark = pytest.mark.spark

AS_OF = date(2026, 3, 5)


def _artemis_row(entity: str, recommended: int, verdict: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(THRESHOLD_RECOMMENDATIONS.names)
    return {
        **row,
        "date": AS_OF,
        "window_from": AS_OF,
        "broker": "artemis-policies",
        "entity_kind": "address",
        "entity": entity,
        "queue": entity,
        "runs": 1,
        "verdict": verdict,
        "rationale": "test row",
        "broker_kind": "artemis",
        "knob": "max-size-bytes",
        "current_value": 262_144,
        "recommended_value": recommended,
        "unit": "bytes",
        "rule": "messages dropped at the limit",
        "safety_margin": 0.2,
        "min_dwell_s": 1.0,
    }


def _table(spark: Any, folder: Path, rows: list[dict[str, Any]]) -> str:
    path = str(folder / "threshold_recommendations")
    frame = rows_frame(spark, THRESHOLD_RECOMMENDATIONS, rows)
    replace_where_at(spark, path, THRESHOLD_RECOMMENDATIONS, frame, "true")
    return path


def test_an_artemis_max_size_bytes_row_is_replayed_and_validated(spark, tmp_path) -> None:
    # DROP at 256 KiB loses messages in the bundled scenario; 7.5 MB holds them all.
    table = _table(spark, tmp_path, [_artemis_row("drop-address", 7_533_711, "raise")])
    result = CliRunner().invoke(app, ["whatif", "artemis-address-full-policies",
                                      "--recommendations", table])  # fmt: skip
    assert result.exit_code == 0, result.output
    # The whole line, the row's verdict and rule in brackets included (not read as markup).
    assert (
        "drop-address (artemis): max-size-bytes 262,144 -> 7,533,711 bytes "
        "[raise, rule 'messages dropped at the limit']"
    ) in result.output
    assert "  validated: messages lost cut\n" in result.output


def test_a_row_that_does_worse_fails_the_command(spark, tmp_path) -> None:
    # Lowering the DROP address's limit loses more messages, not fewer.
    table = _table(spark, tmp_path, [_artemis_row("drop-address", 65_536, "raise")])
    result = CliRunner().invoke(app, ["whatif", "artemis-address-full-policies",
                                      "--recommendations", table])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "NOT validated" in result.output


def test_a_broker_whose_recommendations_all_keep_their_settings_says_so(spark, tmp_path) -> None:
    # Without a line the command printed nothing at all (artemis-rate-limits in the demo).
    kept = {**_artemis_row("block-address", 262_144, "keep"), "rule": "within its limit"}
    unlimited = {
        **_artemis_row("page-address", 0, "keep"),
        "current_value": None,
        "recommended_value": None,
    }
    table = _table(spark, tmp_path, [kept, unlimited])
    result = CliRunner().invoke(app, ["whatif", "artemis-address-full-policies",
                                      "--recommendations", table])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()) == (
        f"recommendations for broker 'artemis-policies' as of 2026-03-05, from {table} "
        "nothing to replay: every recommendation for broker 'artemis-policies' keeps its "
        "setting (block-address max-size-bytes 262,144; page-address max-size-bytes none)"
    )


def test_the_warehouse_names_the_table_as_the_other_commands_take_it(spark, tmp_path) -> None:
    _table(
        spark, tmp_path / "warehouse" / "gold", [_artemis_row("drop-address", 7_533_711, "raise")]
    )
    result = CliRunner().invoke(app, ["whatif", "artemis-address-full-policies",
                                      "--warehouse", str(tmp_path / "warehouse")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "  validated: messages lost cut\n" in result.output
    # A warehouse without this scenario's broker says how to get its recommendations.
    result = CliRunner().invoke(app, ["whatif", "slow-consumer",
                                      "--warehouse", str(tmp_path / "warehouse")])  # fmt: skip
    assert result.exit_code == 2
    assert (
        "no recommendations for broker 'qpid-reports' (run `flowctl pipeline` over the days "
        "of scenario 'slow-consumer', or give --warehouse)" in " ".join(result.output.split())
    )
    both = CliRunner().invoke(app, ["whatif", "slow-consumer", "--warehouse", "w",
                                    "--recommendations", "r"])  # fmt: skip
    assert both.exit_code == 2 and "give one" in both.output


def test_as_of_takes_the_latest_day_held_on_or_before_it(spark, tmp_path) -> None:
    """ "As of" a day the table does not hold replays the latest day before it, and says so; it
    was refused, the user left to pick a held day from a list (a review). A day before every
    held one is refused with the days held."""
    rows = [
        {**_artemis_row("drop-address", recommended, "raise"), "date": day}
        for day, recommended in ((date(2026, 3, 2), 7_533_711), (date(2026, 3, 4), 65_536))
    ]
    table = _table(spark, tmp_path, rows)
    command = ["whatif", "artemis-address-full-policies", "--recommendations", table]
    between = CliRunner().invoke(app, [*command, "--as-of", "2026-03-03"])
    assert between.exit_code == 0, between.output
    said = " ".join(between.output.split())
    assert (
        "recommendations for broker 'artemis-policies' as of 2026-03-02 (the latest on or "
        f"before 2026-03-03), from {table}"
    ) in said
    assert "max-size-bytes 262,144 -> 7,533,711 bytes" in said  # 3-02's row, not 3-04's
    held = CliRunner().invoke(app, [*command, "--as-of", "2026-03-04"])
    assert held.exit_code == 1, held.output  # 3-04's row does worse
    assert "as of 2026-03-04, from" in held.output and "latest on or before" not in held.output
    latest = CliRunner().invoke(app, command)
    assert "as of 2026-03-04, from" in latest.output
    before = CliRunner().invoke(app, [*command, "--as-of", "2026-03-01"])
    assert before.exit_code == 2
    assert (
        "no recommendations for broker 'artemis-policies' on or before 2026-03-01; the table "
        "holds 2026-03-02, 2026-03-04"
    ) in " ".join(before.output.split())


def test_thresholds_and_knobs_are_replayed_from_one_day(spark, tmp_path) -> None:
    """The latest day was looked up once per kind of row: a broker whose queue rows ended a day
    before its other rows replayed the thresholds of one day beside the knobs of the next."""
    import flowctl.whatif

    queue_row = {
        **_artemis_row("q", 0, "lower"),
        "entity_kind": "queue",
        "knob": "qpid.flow_stop_count",
        "recommended_flow_stop_count": 80,
        "recommended_flow_resume_count": 70,
    }  # of AS_OF, a day before the address's row
    later = {**_artemis_row("drop-address", 7_533_711, "raise"), "date": date(2026, 3, 6)}
    table = _table(spark, tmp_path, [queue_row, later])
    days = flowctl.whatif.recommendation_days(spark, table, "artemis-policies")
    day = flowctl.whatif.recommendation_day(days, None)
    assert day == date(2026, 3, 6)
    from flowctl_core.whatif import overrides_from_recommendations

    def thresholds(day: date) -> dict[str, Any]:
        rows = flowctl.whatif.load_recommendation_rows(
            spark, table, day=day, broker="artemis-policies"
        )
        return overrides_from_recommendations(rows)

    assert thresholds(day) == {}
    older = thresholds(AS_OF)
    assert older["q"].stop_count == 80 and older["q"].resume_count == 70
    assert flowctl.whatif.recommendation_day(days, date(2026, 3, 5)) == AS_OF


def test_recommendations_behind_bronze_are_replayed_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """whatif replayed a day's recommendations that `flowctl status --check` reported behind
    bronze, and its title was the same with or without --as-of (a review): it says which day it
    replays and from where, and warns when the warehouse's own rows of that day are behind.
    The state's records stubbed: the rule is jobs/pipeline_state.py's."""
    import flowctl.cli
    import jobs.pipeline_state
    import jobs.recommend
    from jobs.pipeline_state import INGEST, RECOMMEND, DayRecord

    day = date(2026, 3, 2)
    records = [DayRecord(INGEST, day, 2, None, None), DayRecord(RECOMMEND, day, 1, None, day)]
    monkeypatch.setattr(jobs.pipeline_state, "read_records", lambda spark, conf: records)
    monkeypatch.setattr(jobs.recommend, "recommendations_path", lambda conf: "wh/recs")
    # The warehouse's own table, spelled another way (a trailing /).
    flowctl.cli._say_what_is_replayed(None, None, "wh/recs/", "b", day)
    said = capsys.readouterr()
    assert said.out == "recommendations for broker 'b' as of 2026-03-02, from wh/recs/\n"
    assert " ".join(said.err.split()) == (
        "warning: the recommendations of 2026-03-02 are behind bronze (bronze v2 of 2026-03-02 "
        "(in its look-back from 2026-03-02) is newer than v1): `flowctl pipeline --from "
        "2026-03-02` brings them up to date"
    )
    # Up to date, or another table than the warehouse's: no warning.
    for state, table in (([records[0], DayRecord(RECOMMEND, day, 2, None, day)], "wh/recs"),
                         (records, "elsewhere")):  # fmt: skip
        monkeypatch.setattr(
            jobs.pipeline_state, "read_records", lambda spark, conf, state=state: state
        )
        flowctl.cli._say_what_is_replayed(None, None, table, "b", day)
        assert capsys.readouterr().err == ""

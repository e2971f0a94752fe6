"""Where a collector session goes on from (collectors/session.py): a state file is one raw
folder's, and a raw folder whose newest file cannot be read (cut short by a power loss) goes on
from the newest file it can, without losing or repeating a committed ``seq``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from collectors import session
from collectors.session import CollectorStateError
from jobs.raw_files import skipped_raw_entries
from tests.collectors.session_setup import NOON, CollectorSetup, committed_rows
from tests.collectors.test_artemis_collector import Setup, _artemis, block, unblock


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return CollectorSetup(tmp_path, "artemis.log", _artemis)


def _collect_into(setup: Setup, raw: Path, **options: Any) -> Any:
    """A ``--once`` collector of ``setup``'s log into ``raw``, with ``setup``'s state file (two
    raw folders side by side share the default ``RAW/../collector-state/BROKER.json``)."""
    collector = setup.make(log_path=setup.log, raw_dir=raw, state_path=setup.state, **options)
    collector.run(stop=lambda: False, once=True)
    return collector


def _brief(raw: Path) -> list[tuple[str, int, str]]:
    return [(r["run_id"], r["seq"], r["event_type"]) for r in committed_rows(raw)]


# -- D1: a state file is one raw folder's ------------------------------------------------------
def test_a_state_file_of_another_raw_folder_does_not_hold_this_ones_session(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """r1 and r4 side by side share one state file: collecting the broker into r4 went on with
    r1's session ("going on at seq 1") and wrote nothing there. Each folder is its own session,
    gone on with from its own files, whichever folder wrote the state file last."""
    first_raw, second_raw = setup.raw.parent / "r1", setup.raw.parent / "r4"
    setup.write(block("2026-11-27 10:00:00,000"))
    first = _collect_into(setup, first_raw)
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        second = _collect_into(setup, second_raw)
    assert not second.resumed and second.state.run_id != first.state.run_id
    assert _brief(second_raw) == [(second.state.run_id, 0, "flow_stopped")]
    said = [r.getMessage() for r in caplog.records if str(setup.state) in r.getMessage()]
    assert len(said) == 1 and str(first_raw) in said[0] and str(second_raw) in said[0], said
    setup.write(unblock("2026-11-27 10:00:04,000"))
    again = _collect_into(setup, first_raw)  # the state file is r4's now
    assert again.resumed and again.state.run_id == first.state.run_id
    assert _brief(first_raw) == [
        (first.state.run_id, 0, "flow_stopped"),
        (first.state.run_id, 1, "flow_resumed"),
    ]
    assert _collect_into(setup, second_raw).resumed
    assert _brief(second_raw) == [
        (second.state.run_id, 0, "flow_stopped"),
        (second.state.run_id, 1, "flow_resumed"),
    ]


def test_a_state_file_of_an_earlier_release_whose_run_is_not_in_the_raw_folder(
    setup: Setup,
) -> None:
    """A state file written before it named its raw folder: a run with rows committed and none
    of them in ``--raw`` is another folder's session (the walk-through's state, bad/r1's, given
    to bad/r4)."""
    first_raw, second_raw = setup.raw.parent / "r1", setup.raw.parent / "r4"
    setup.write(block("2026-11-27 10:00:00,000"))
    first = _collect_into(setup, first_raw)
    state = json.loads(setup.state.read_text())
    state.pop("raw")
    setup.state.write_text(json.dumps(state))
    second = _collect_into(setup, second_raw)
    assert second.state.run_id != first.state.run_id
    assert _brief(second_raw) == [(second.state.run_id, 0, "flow_stopped")]
    # Given back to its own folder, such a state goes on as before.
    setup.state.write_text(json.dumps(state))
    setup.write(unblock("2026-11-27 10:00:04,000"))
    assert _collect_into(setup, first_raw).state.run_id == first.state.run_id
    assert [seq for _, seq, _ in _brief(first_raw)] == [0, 1]


def test_the_state_files_lock_still_holds_one_collector_per_state_file(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    running = setup.make(
        log_path=setup.log, raw_dir=setup.raw.parent / "r1", state_path=setup.state
    )
    try:
        with pytest.raises(CollectorStateError, match="another collector") as refused:
            _collect_into(setup, setup.raw.parent / "r4")
        assert "--state" in str(refused.value) and "\n" not in str(refused.value)
    finally:
        running.close()


# -- a new session killed before its state file -------------------------------------------------
@pytest.mark.parametrize("again_new_session", [False, True])
def test_a_new_session_killed_before_its_state_file_is_gone_on_with(
    setup: Setup, again_new_session: bool
) -> None:
    """--new-session killed after its first file's rename, before its state file: the state
    file still names the run before it, and a restart went on with that run, writing the new
    run's lines again (the carried-over episode twice: a review). It goes on from the newer
    session's file; a --new-session again starts after it."""
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect(clock=lambda: NOON)
    stale = setup.state.read_bytes()
    setup.write(unblock("2026-11-27 10:30:00,000"))
    second = setup.collect(new_session=True, clock=lambda: NOON + timedelta(minutes=1))
    setup.state.write_bytes(stale)  # the state file as it was before the new run's commit
    again = setup.collect(new_session=again_new_session, clock=lambda: NOON + timedelta(minutes=2))
    assert again.resumed != again_new_session
    if not again_new_session:
        assert again.state.run_id == second.state.run_id
    assert _brief(setup.raw) == [
        (first.state.run_id, 0, "flow_stopped"),
        (second.state.run_id, 0, "flow_stopped"),  # carried over
        (second.state.run_id, 1, "flow_resumed"),
    ]


# -- D2: the newest file cut short -------------------------------------------------------------
def _cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a power loss: its footer never reached the disk


def _two_commits(setup: Setup) -> tuple[Any, Path]:
    """A block committed, then an unblock in a second file; the second file's path."""
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    setup.write(unblock("2026-11-27 10:00:04,000"))
    setup.collect()
    files = sorted(setup.raw.glob("date=*/part-*.parquet"))
    assert len(files) == 2
    return first, files[-1]


@pytest.mark.parametrize("state_file", ["lost", "kept"])
def test_a_newest_file_cut_short_is_set_aside_and_written_again(
    setup: Setup, caplog: pytest.LogCaptureFixture, state_file: str
) -> None:
    """Without a state file (or with one older than that file) the collector died on the file
    ("unexpected error: Parquet magic bytes not found", no file named). It goes on from the
    newest file it can read, sets the damaged one aside under a name the ingest does not read
    (said once, naming both), and writes its lines again with the same ``seq``."""
    first, newest = _two_commits(setup)
    if state_file == "lost":
        setup.state.unlink()
    else:  # the state as of the first commit (the second's state write never reached the disk)
        first_file = sorted(setup.raw.glob("date=*/*.parquet"))[0]
        checkpoint = json.loads(pq.read_schema(first_file).metadata[session.CHECKPOINT_KEY])
        setup.state.write_text(json.dumps({**checkpoint, "raw": str(setup.raw.resolve())}))
    _cut_short(newest)
    with caplog.at_level(logging.WARNING, logger="flowctl.collect"):
        again = setup.collect()
    assert again.resumed and again.state.run_id == first.state.run_id
    assert [(r["seq"], r["event_type"]) for r in setup.rows()] == [
        (0, "flow_stopped"),
        (1, "flow_resumed"),
    ]
    set_aside = newest.with_name(newest.name + ".unreadable")
    assert set_aside.is_file() and not newest.with_suffix(".parquet.inprogress").exists()
    said = [r.getMessage() for r in caplog.records if newest.name in r.getMessage()]
    assert len(said) == 1 and str(set_aside) in said[0] and "\n" not in said[0], said
    # The ingest lists what was set aside (nothing silently dropped) and reads the rest.
    assert skipped_raw_entries(str(setup.raw), [date(2026, 11, 27)]) == [
        f"date=2026-11-27/{set_aside.name}"
    ]
    assert setup.collect().state.next_seq == 2  # and the session goes on as before


def test_a_session_whose_every_file_is_cut_short_starts_again(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    first = setup.collect()
    setup.state.unlink()
    (only,) = setup.raw.glob("date=*/part-*.parquet")
    _cut_short(only)
    again = setup.collect(clock=lambda: NOON + timedelta(hours=1))
    assert not again.resumed  # nothing of the session can be read: a new run from the start
    assert [(r["run_id"], r["event_type"]) for r in setup.rows()] == [
        (again.state.run_id, "flow_stopped")
    ]
    assert again.state.run_id != first.state.run_id


def test_a_file_the_collector_may_not_read_is_one_line_naming_it(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not damage, a file the system refuses (its permissions, a disk error): nothing is set
    aside, and the error is one line naming the file."""
    _, newest = _two_commits(setup)
    setup.state.unlink()
    real = pq.read_schema

    def refused(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path) == newest:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(session.pq, "read_schema", refused)
    with pytest.raises(CollectorStateError) as caught:
        setup.collect()
    message = str(caught.value)
    assert str(newest) in message and "Permission denied" in message and "\n" not in message
    assert newest.is_file()


# -- a state damaged or edited by hand ---------------------------------------------------------
def _orders(state: dict[str, Any]) -> dict[str, Any]:
    orders: dict[str, Any] = state["entities"]["addresses"]["orders"]
    return orders


#: A damage of a state file (of the session blocked on ``orders``), and the field it names.
DAMAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "an unknown address field": (
        lambda state: _orders(state).update(blocked_since=1),
        "entities.addresses.orders.blocked_since: not a field of an address's state",
    ),
    "no next_seq": (lambda state: state.pop("next_seq"), "next_seq: missing"),
    "an offset that is no number": (
        lambda state: state["position"].update(offset="abc"),
        'position.offset: "abc" is not a whole number >= 0',
    ),
    "entities that are a list": (
        lambda state: state.update(entities=[]),
        "entities: [] is not an object",
    ),
    "a last line that is no time": (
        lambda state: state.update(last_line_us="x"),
        'last_line_us: "x" is not a whole number or null',
    ),
    "a count that is a string": (
        lambda state: _orders(state).update(blocked_count="1"),
        'entities.addresses.orders.blocked_count: "1" is not a whole number >= 0',
    ),
    "a disk alarm that is no bool": (
        lambda state: state["entities"].update(disk_full=1),
        "entities.disk_full: 1 is not true or false",
    ),
}


@pytest.mark.parametrize("new_session", [False, True])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_state_file_is_one_line_naming_the_file_and_field(
    setup: Setup, damage: str, new_session: bool
) -> None:
    """A review: an unknown field was "unexpected error: AddressState.__init__() got an
    unexpected keyword argument 'blocked_since': please report it with the trace", a missing
    next_seq "unexpected error: 'next_seq'", an offset "invalid literal for int()", and
    ``"entities": []`` was taken for none, the blocked address gone without a word."""
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    state = json.loads(setup.state.read_text())
    spoil, said = DAMAGES[damage]
    spoil(state)
    setup.state.write_text(json.dumps(state))
    with pytest.raises(CollectorStateError) as caught:
        setup.collect(new_session=new_session)
    message = str(caught.value)
    assert message.startswith(f"{setup.state}: field {said}"), message
    assert "\n" not in message and "--raw" in message
    setup.state.unlink()  # as the line says: without it, the session goes on from its files
    assert setup.collect().resumed


def test_a_damaged_checkpoint_in_a_files_footer_names_the_file(setup: Setup) -> None:
    setup.write(block("2026-11-27 10:00:00,000"))
    setup.collect()
    setup.state.unlink()
    (only,) = setup.raw.glob("date=*/part-*.parquet")
    table = pq.read_table(only)
    checkpoint = json.loads(table.schema.metadata[session.CHECKPOINT_KEY])
    checkpoint["next_seq"] = "1"
    metadata = {session.CHECKPOINT_KEY: json.dumps(checkpoint).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), only)
    with pytest.raises(CollectorStateError) as caught:
        setup.collect()
    assert str(caught.value) == (
        f'{only}: its checkpoint: field next_seq: "1" is not a whole number >= 0'
    )

"""The notes a real-broker disagreement prints: enough to tell a broker's behaviour from a
measurement that went wrong on a loaded machine (conformance/cases.py), without a broker."""

from __future__ import annotations

import dataclasses

from conformance import cases, rabbit

RESUMED = rabbit.AlarmRun(
    intake_before=40_000.0,
    intake_during=0.0,
    intake_after=30_000.0,
    delivered_before=500.0,
    delivered_during=480.0,
    publisher_blocked=True,
    publisher_unblocked=True,
    consumer_blocked=False,
    consumer_state="blocking",
    alarm_s=4.8,
    resumed_after_s=0.05,
    publisher_events=[(-0.02, "blocked"), (4.74, "unblocked")],
    publisher_closed=None,
    writer_stopped=None,
    after_depths=[(0.32, 162_329), (3.33, 272_440)],
)


def test_a_publisher_that_resumed_is_said_so_briefly():
    assert cases._resumption(RESUMED) == ". Real: alarm-in grew again 0.05 s after unblocked"


def test_no_intake_after_the_alarm_names_the_depths_the_events_and_the_writer():
    stalled = dataclasses.replace(
        RESUMED,
        intake_after=0.0,
        after_depths=[(0.32, 162_329), (3.33, 162_329)],
        writer_stopped="BrokenPipeError(32, 'Broken pipe')",
    )
    note = cases._resumption(stalled)
    assert "0.32 s 162,329, 3.33 s 162,329" in note
    assert "blocked at -0.02 s, unblocked at 4.74 s" in note
    assert "writer stopped: BrokenPipeError(32, 'Broken pipe')" in note
    assert "broker's close: None" in note


def test_a_publisher_that_never_resumed_names_the_wait():
    never = dataclasses.replace(RESUMED, resumed_after_s=None, intake_after=0.0)
    assert cases._resumption(never) == (
        f". Real: alarm-in did not grow within {rabbit.RESUME_TIMEOUT_S:.0f} s of unblocked"
    )

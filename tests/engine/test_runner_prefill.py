"""Messages put in a queue before the run (a scenario's ``prefill``) are logged as the enqueues of
the reserved producer ``prefill``, with capacity and outstanding 0, and can never fall inside a
stopped episode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowctl_core.events import PREFILL_LINK, EventCollector
from flowctl_core.runner import run_scenario
from flowctl_core.scenario import ScenarioError, parse_scenario


def _scenario(prefill: dict[str, int], **queue_arguments: int) -> dict[str, Any]:
    arguments = {"qpid.max_count": 100, **queue_arguments}
    return {
        "name": "prefill",
        "kind": "scripted",
        "queues": [{"name": "q", "arguments": arguments, "prefill": prefill}],
        "producers": [{"name": "p", "capacity": 5, "routing_key": "q"}],
        "consumers": [{"name": "c", "queue": "q"}],
        "steps": [
            {"send": {"producer": "p", "count": 10}},
            {"consume": {"consumer": "c", "count": 30}},
        ],
    }


def _run(data: dict[str, Any]) -> list[dict[str, Any]]:
    log = EventCollector()
    run_scenario(parse_scenario(data), [log], validate=True)
    return log.events


def test_prefill_enqueues_name_the_reserved_producer_with_an_empty_window() -> None:
    # DESIGN §3: "Enqueue events name the producer in `link` and carry its `capacity` and
    # `outstanding`". Prefilled messages were written before the run: no transfer of theirs awaits
    # completion (outstanding 0) and their writer has no window the run can fill (capacity 0).
    events = _run(_scenario({"count": 80, "size": 10}))
    prefill = [e for e in events if e["link"] == PREFILL_LINK]
    assert len(prefill) == 80
    assert {e["event_type"] for e in prefill} == {"enqueue"}  # no link event: no link state
    for event in prefill:
        assert (event["link_role"], event["capacity"], event["outstanding"]) == ("publisher", 0, 0)
        assert (event["credit"], event["available"], event["protocol"]) == (None, None, None)
        assert json.loads(event["detail"]) == {"prefill": True}
    assert [e["depth_msgs"] for e in prefill] == list(range(1, 81))


def test_prefill_never_lands_inside_an_episode() -> None:
    # DESIGN §4: "`overshoot_bound_msgs` = the sum of the capacities of the producers that
    # enqueued to the queue during the episode, the enqueue that triggered it included". The
    # default stop of max 100 is 80 (80%); a prefill of 80 is at it (strict `>`: still flowing),
    # so the episode starts at p's first enqueue and only p's window bounds it.
    events = _run(_scenario({"count": 80, "size": 10}))
    stopped = next(i for i, e in enumerate(events) if e["event_type"] == "flow_stopped")
    resumed = next(i for i, e in enumerate(events) if e["event_type"] == "flow_resumed")
    last_prefill = max(i for i, e in enumerate(events) if e["link"] == PREFILL_LINK)
    assert last_prefill < stopped - 1  # the trigger (the enqueue just before) is p's
    episode = [e for e in events[stopped - 1 : resumed] if e["event_type"] == "enqueue"]
    assert {e["link"] for e in episode} == {"p"}
    bound = sum({e["link"]: e["capacity"] for e in episode}.values())
    peak = max(e["depth_msgs"] for e in events[stopped - 1 : resumed])
    assert (bound, peak - 80) == (5, 5)  # overshoot_ratio 1: Qpid's bound holds


@pytest.mark.parametrize(
    ("prefill", "arguments"),
    [
        ({"count": 81, "size": 10}, {}),  # above the default stop count (80)
        ({"count": 10, "size": 100}, {"qpid.flow_stop_size": 999}),  # 1,000 bytes > 999
    ],
)
def test_a_prefill_that_would_stop_the_flow_is_refused(
    prefill: dict[str, int], arguments: dict[str, int]
) -> None:
    with pytest.raises(ScenarioError, match=r"queues\.0\.prefill: .* stop threshold"):
        parse_scenario(_scenario(prefill, **arguments))
    # At the threshold it is accepted (the stop is strict `>`).
    parse_scenario(_scenario({"count": 80, "size": 10}))


def test_prefill_is_a_reserved_client_name() -> None:
    data = _scenario({"count": 1, "size": 10})
    data["producers"][0]["name"] = PREFILL_LINK
    data["steps"][0]["send"]["producer"] = PREFILL_LINK
    with pytest.raises(ScenarioError, match="'prefill' is a reserved client name"):
        parse_scenario(data)
    artemis = {
        "name": "a",
        "kind": "workload",
        "duration_s": 1,
        "artemis": {"addresses": [{"name": "x"}], "consumers": [{"name": "prefill", "queue": "x"}]},
    }
    with pytest.raises(ScenarioError, match="reserved client name"):
        parse_scenario(artemis)

"""The dashboard page: its layout, tables, broker filter and the escaping of what it embeds.

:func:`render_page` takes the records of :func:`jobs.dashboard.dashboard_data` (or hand-built
ones, in tests) and returns one HTML document: plotly.js once, the figures of
jobs/dashboard_figures.py as JSON, the tables as HTML. Order: the overview (the worst entities,
the at-risk recommendations, every entity ranked, the idle ones summarised), the per-queue and
per-broker timelines, then every recommendation.

Every name is escaped: as text in HTML (:func:`html.escape`) and inside the JSON script element
(:func:`json_for_script`), so a queue named ``</script>`` cannot end the page early.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from jobs.dashboard_figures import (
    KIND_LABELS,
    blocked_time_figure,
    intervals_figure,
    overshoot_figure,
    producer_delay_figure,
    queue_timeline_figure,
)
from schemas.recommendations import KNOB_MAX_LENGTH, KNOB_SET_IN, VERDICT_AT_RISK, VERDICT_KEEP

TITLE = "flowctl — broker flow control"
#: What the page calls one and several entities of a kind.
KIND_NOUNS = {
    "queue": ("queue", "queues"),
    "link": ("link", "links"),
    "connection": ("0.9.1 connection", "0.9.1 connections"),
    "alarm": ("alarm", "alarms"),
    "session_window": ("session", "sessions"),
    "producer_window": ("producer", "producers"),
}


def counted(count: int, kind: str) -> str:
    one, many = KIND_NOUNS.get(kind, (kind, kind))
    return f"{count} {one if count == 1 else many}"


#: Characters that must not appear as themselves in JSON inside a <script> element: "<" and ">"
#: can open "<!--", "<script" or "</script" (the HTML parser then swallows the rest of the page,
#: whatever a queue is named), "&" a character reference; U+2028 / U+2029 end a JavaScript line.
#: Each is written as its JSON escape, which JSON.parse reads back as the same character.
_SCRIPT_UNSAFE = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe inside an HTML ``<script type="application/json">``."""
    return json.dumps(data, sort_keys=True, allow_nan=False).translate(_SCRIPT_UNSAFE)


def text(value: Any) -> str:
    """A value as HTML text: escaped, and a dash when missing."""
    return "\u2013" if value is None else html.escape(str(value))


def number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "\u2013"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


#: A recommendation's entity kind as the entity rows name it (an Artemis address is a queue of
#: queue_flow_daily; a consumer's link is its name).
_ENTITY_KIND_OF = {"address": "queue", "consumer": "link", "consumer_link": "link"}


def advised_entities(recommendations: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(broker, kind, entity) of the entities a recommendation asks to act on (not keep)."""
    return {
        (r["broker"], _ENTITY_KIND_OF.get(r["entity_kind"], r["entity_kind"]), r["entity"])
        for r in recommendations
        if r["verdict"] != VERDICT_KEEP
    }


def is_idle(entity: dict[str, Any], advised: Container[tuple[str, str, str]] = ()) -> bool:
    """Nothing to show: never stopped, starved or blocked, no episode, no loss logged, never
    past a limit in bytes, and no
    advice to act on (a RabbitMQ queue growing without a limit has none of the others, and
    was listed idle under the advice that said it was at risk: an audit)."""
    if (entity["broker"], entity["kind"], entity["entity"]) in advised:
        return False
    # An address past its limit without an episode (DROP, FAIL, PAGE) has something to show.
    return not (
        entity.get("blocked_s")
        or entity.get("episodes")
        or entity.get("lost")
        or entity.get("max_overshoot_bytes")
    )


class Figures:
    """The page's figures by element id, serialised by Plotly (dates, numbers) for the JSON."""

    def __init__(self) -> None:
        self.by_id: dict[str, Any] = {}

    def div(self, figure: go.Figure, kind: str, name: str = "") -> str:
        figure_id = f"figure-{len(self.by_id)}"
        self.by_id[figure_id] = json.loads(figure.to_json())
        # Sized before it is drawn: the page does not move as charts appear.
        size = f"width:{figure.layout.width}px;height:{figure.layout.height}px"
        return (
            f'<div class="figure" id="{figure_id}" data-chart="{kind}" '
            f'data-name="{html.escape(name)}" style="{size}"></div>'
        )


def _table(
    table_id: str,
    columns: Sequence[tuple[str, str, int]],
    rows: Iterable[dict[str, Any]],
    cells: Callable[[dict[str, Any]], Sequence[str]],
    row_attributes: Callable[[dict[str, Any]], str],
) -> str:
    """A table of fixed column widths (``columns``: key, heading, width in %) that wraps its
    cells rather than growing past the page."""
    widths = "".join(f'<col style="width:{width}%">' for _, _, width in columns)
    head = "".join(f'<th data-column="{key}">{text(heading)}</th>' for key, heading, _ in columns)
    body = "".join(
        f"<tr {row_attributes(row)}>"
        + "".join(
            f'<td data-column="{key}">{cell}</td>'
            for (key, _, _), cell in zip(columns, cells(row), strict=True)
        )
        + "</tr>"
        for row in rows
    )
    # In a narrow window the table scrolls sideways rather than splitting words in its cells.
    return (
        f'<div class="table-wrap"><table id="{table_id}"><colgroup>{widths}</colgroup>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def sampled_mark(interval_ms: int | None) -> str:
    """A mark on an entity whose figures rest on a collector's samples (DESIGN §6: approximate,
    never silently exact), saying how often they were read."""
    if interval_ms is None:
        return ""
    title = f"from samples read every {interval_ms / 1000:g} s: approximate"
    return f' <span class="sampled" title="{html.escape(title)}">≈ sampled</span>'


def _broker_attribute(row: dict[str, Any]) -> str:
    return f'data-broker="{html.escape(row["broker"])}"'


def _entity_attributes(row: dict[str, Any]) -> str:
    return (
        f'{_broker_attribute(row)} data-kind="{html.escape(row["kind"])}" '
        f'data-entity="{html.escape(row["entity"])}"'
    )


def entities_table(entities: Sequence[dict[str, Any]]) -> str:
    """Every entity with something to show, worst first: what the charts rank, in full."""

    def cells(row: dict[str, Any]) -> list[str]:
        # In messages against Qpid's bound, else in bytes (an Artemis address past its
        # max-size-bytes, which showed as a dash: an audit).
        if row.get("max_overshoot_msgs") is not None:
            overshoot = (
                f"{number(row['max_overshoot_msgs'])} / {number(row.get('overshoot_bound_msgs'))}"
            )
        elif row.get("max_overshoot_bytes") is not None:
            overshoot = f"{number(row['max_overshoot_bytes'])} bytes"
        else:
            overshoot = "\u2013"
        delay = row.get("completion_p95_us")
        # A queue here for its delay or losses alone was "queue stopped, 0.0 s" (a review).
        never_stopped = (
            row["kind"] == "queue" and not row.get("episodes") and not row.get("blocked_s")
        )
        return [
            text(row["broker"]),
            text(row["entity"]) + sampled_mark(row.get("sample_interval_ms")),
            text("queue" if never_stopped else KIND_LABELS.get(row["kind"], row["kind"])),
            number(row.get("blocked_s")),
            "\u2013" if row.get("share") is None else f"{row['share']:.1%}",
            number(row.get("episodes")),
            overshoot,
            "\u2013" if delay is None else number(delay / 1000),
            number(row.get("lost")),
        ]

    columns = [
        ("broker", "broker", 15), ("entity", "entity", 19), ("kind", "what", 15),
        ("blocked_s", "seconds", 9), ("share", "share", 7), ("episodes", "episodes", 8),
        ("overshoot", "worst overshoot: msgs / bound, or bytes", 11),
        ("delay", "p95 delay (ms)", 8), ("lost", "rejected + dropped + evicted", 8),
    ]  # fmt: skip
    return _table("entities-table", columns, entities, cells, _entity_attributes)


def idle_summary(entities: Sequence[dict[str, Any]]) -> str:
    """The entities with nothing to show, one row per broker and kind: their names, not charts."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in entities:
        grouped[(row["broker"], row["kind"])].append(row["entity"])
    if not grouped:
        return '<p class="empty">every entity has something to show</p>'
    rows = [
        {"broker": broker, "kind": kind, "names": sorted(names)}
        for (broker, kind), names in sorted(grouped.items())
    ]

    def cells(row: dict[str, Any]) -> list[str]:
        names = "".join(f'<span class="name">{text(name)}</span>' for name in row["names"])
        return [text(row["broker"]), text(counted(len(row["names"]), row["kind"])), names]

    columns = [("broker", "broker", 18), ("count", "idle", 10), ("names", "names", 72)]
    return _table("idle-table", columns, rows, cells, _broker_attribute)


#: Qpid's four flow thresholds as a recommendation's columns hold them: argument, column, unit.
QPID_THRESHOLDS = (
    ("qpid.flow_stop_count", "flow_stop_count", " messages"),
    ("qpid.flow_resume_count", "flow_resume_count", " messages"),
    ("qpid.flow_stop_size", "flow_stop_size", " bytes"),
    ("qpid.flow_resume_size", "flow_resume_size", " bytes"),
)


#: How a value that stays reads on a row that keeps it, and on a row whose verdict asks for
#: something else (at risk, its fix not this knob: the rationale says what). "(kept)" beside
#: "at risk of overflow" read as a contradiction (a new user's trial).
STAYS_KEPT = "kept"
STAYS_FIX_ELSEWHERE = "unchanged: see rationale"


def _stays(row: dict[str, Any]) -> str:
    return STAYS_KEPT if row.get("verdict") in (None, VERDICT_KEEP) else STAYS_FIX_ELSEWHERE


def knob_change(row: dict[str, Any]) -> str:
    """What the recommendation changes, in the broker's own knob (``knob: current -> recommended
    unit``, or ``knob: current unit (kept)`` when the value stays; ``(unchanged: see rationale)``
    on a row whose verdict is not keep, an at-risk row whose fix is elsewhere); from the Qpid
    threshold and credit columns when no knob is given (the values that change; the stop values
    when none does)."""
    if row.get("knob"):
        unit = f" {row['unit']}" if row.get("unit") else ""
        current, recommended = row.get("current_value"), row.get("recommended_value")

        def value(v: Any) -> str:
            if v is None:
                return "none"  # no value: the knob is not set
            # Artemis's -1: no limit, an unbounded window (as `flowctl sweep` writes it).
            return f"{number(v)} (off)" if v < 0 else number(v)

        def with_unit(v: Any) -> str:
            return value(v) + (unit if v is not None and v >= 0 else "")

        # A Qpid row's knob is its stop count; the other thresholds it moves are part of the
        # change (shown alone, stop 2,760 went beside a resume of 600: an audit), and they may
        # be the whole of it (byte thresholds only: "0 messages (kept)" hid them, an audit).
        others = [
            f"{name}: {number(now)} -> {number(then)}{unit_of}"
            for name, key, unit_of in QPID_THRESHOLDS
            if name != row["knob"]
            and (now := row.get("current_" + key)) is not None
            and (then := row.get("recommended_" + key)) is not None
            and now != then
        ]
        # A RabbitMQ queue bounded in bytes (x-max-length-bytes, logged as max_size): "none"
        # alone read as no limit at all (a review).
        if row["knob"] == KNOB_MAX_LENGTH and row.get("max_size"):
            others.append(f"x-max-length-bytes: {number(row['max_size'])} bytes in force")
        if current == recommended:
            if current is not None and current < 0:
                kept = f"{row['knob']}: {number(current)} (off, {_stays(row)})"
            else:
                kept = f"{row['knob']}: {with_unit(current)} ({_stays(row)})"
            return "; ".join([kept, *others])
        return "; ".join([f"{row['knob']}: {value(current)} -> {with_unit(recommended)}", *others])
    pairs = [
        ("stop msgs", "flow_stop_count"),
        ("resume msgs", "flow_resume_count"),
        ("stop bytes", "flow_stop_size"),
        ("resume bytes", "flow_resume_size"),
        ("credit", "credit"),
    ]
    present = [
        (name, row.get("current_" + key), row.get("recommended_" + key))
        for name, key in pairs
        if row.get("current_" + key) is not None or row.get("recommended_" + key) is not None
    ]
    changes = [
        f"{name} {number(current)} -> {number(recommended)}"
        for name, current, recommended in present
        if current != recommended
    ]
    if changes or not present:
        return "; ".join(changes) or "\u2013"
    stayed = "; ".join(f"{name} {number(current)}" for name, current, _ in present)
    return f"{stayed} ({_stays(row)})"


def evidence(row: dict[str, Any]) -> str:
    parts = []
    if row.get("episodes") is not None:
        parts.append(f"{number(row['episodes'])} episode{'' if row['episodes'] == 1 else 's'}")
    for key, what in (("time_stopped_s", "s stopped"), ("starved_s", "s starved")):
        if row.get(key):
            parts.append(f"{number(row[key])} {what}")
    if row.get("max_overshoot_msgs") is not None:
        parts.append(
            f"overshoot {number(row['max_overshoot_msgs'])} / "
            f"bound {number(row.get('producer_capacity_sum'))}"
        )
    elif row.get("max_overshoot_bytes") and row.get("entity_kind") == "address":
        # An address's is its peak past max-size-bytes, with or without a BLOCK episode: DROP,
        # FAIL and PAGE have none, and "overshoot" beside "0 episodes" read as one (a review).
        parts.append(f"peak {number(row['max_overshoot_bytes'])} bytes past max-size-bytes")
    elif row.get("max_overshoot_bytes"):
        parts.append(f"overshoot {number(row['max_overshoot_bytes'])} bytes")
    # What a queue or address without episodes shows (a queue growing, messages refused).
    if row.get("rejected_msgs"):
        parts.append(f"{number(row['rejected_msgs'])} rejected")
    if row.get("peak_depth_msgs") and not row.get("episodes"):
        parts.append(f"peak {number(row['peak_depth_msgs'])} msgs")
    return ", ".join(parts) or "\u2013"


def _without_verdict(rationale: str, verdict: str) -> str:
    """A rationale as the table shows it: its leading "<verdict>: " is the verdict column's, and
    its two lines are better spent on the reason (a README walk-through)."""
    return rationale.removeprefix(f"{verdict}: ")


def set_in(row: dict[str, Any]) -> str:
    """Where the row's knob is set (KNOB_SET_IN), under its change, when the verdict moves it
    (or, on a Qpid row, any threshold it moves with it): an Artemis window is the clients', not
    the address's."""
    where = KNOB_SET_IN.get(row.get("knob") or "")
    moves = row.get("recommended_value") != row.get("current_value") or any(
        row.get(f"recommended_{key}") != row.get(f"current_{key}") for _, key, _ in QPID_THRESHOLDS
    )
    if where is None or not moves:
        return ""
    return f'<div class="muted">set in {text(where)}</div>'


def recommendations_table(rows: Sequence[dict[str, Any]], table_id: str) -> str:
    """Recommendations in columns that fit 1366 px: long rationales are cut to two lines, the
    whole text in the cell's tooltip."""

    def cells(row: dict[str, Any]) -> list[str]:
        verdict = row["verdict"]
        kind = " ".join(filter(None, (row.get("broker_kind"), row["entity_kind"])))
        return [
            text(row["broker"]),
            text(row["entity"])
            + sampled_mark(row.get("sample_interval_ms"))
            + f'<div class="muted">{text(kind.replace("_", " "))}</div>',
            f'<span class="verdict v-{html.escape(verdict)}">'
            f"{text(verdict.replace('_', ' '))}</span>",
            text(knob_change(row)) + set_in(row),
            text(row.get("rule")),
            text(evidence(row)),
            f'<div class="clamp" title="{html.escape(row["rationale"])}">'
            f"{text(_without_verdict(row['rationale'], verdict))}</div>",
        ]

    def attributes(row: dict[str, Any]) -> str:
        return (
            f'data-entity="{html.escape(row["entity"])}" '
            f'data-verdict="{html.escape(row["verdict"])}" {_broker_attribute(row)}'
        )

    columns = [
        ("broker", "broker", 12), ("entity", "queue / link", 13), ("verdict", "verdict", 9),
        ("change", "knob: now -> recommended", 19), ("rule", "rule", 9),
        ("evidence", "evidence", 13), ("rationale", "rationale (hover for all)", 25),
    ]  # fmt: skip
    return _table(table_id, columns, rows, cells, attributes)


def overview_charts(entities: Sequence[dict[str, Any]], figures: Figures) -> str:
    """The three ranked charts of the entities; a line of text instead of an empty chart."""
    parts = []
    for make, kind, nothing in (
        (blocked_time_figure, "blocked", "nothing was stopped, starved or blocked"),
        (overshoot_figure, "overshoot", "no queue overshot its stop threshold or limit"),
        (producer_delay_figure, "delay", "no producer waited for a completion"),
    ):
        figure = make(entities)
        parts.append(
            figures.div(figure, kind)
            if figure is not None
            else f'<div class="no-chart" data-chart-missing="{kind}">{text(nothing)}</div>'
        )
    return "".join(parts)


def timelines_section(
    data: dict[str, Any], active: Sequence[dict[str, Any]], figures: Figures
) -> str:
    """Per broker, worst first: the depth timelines of its queues with something to show
    (longest stopped first), then the intervals of its starved and blocked entities."""
    blocked = {(e["broker"], e["kind"], e["entity"]): e.get("blocked_s") or 0.0 for e in active}
    intervals: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for interval in data["intervals"]:
        intervals[interval["broker"]].append(interval)
    timelines: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for timeline in data["timelines"]:
        if (timeline["broker"], "queue", timeline["queue"]) in blocked and timeline["points"]:
            timelines[timeline["broker"]].append(timeline)
    worst: dict[str, float] = defaultdict(float)
    for (broker, _, _), seconds in blocked.items():
        worst[broker] = max(worst[broker], seconds)
    parts = []
    for broker in sorted(set(intervals) | set(timelines), key=lambda b: (-worst[b], b)):
        drawn = sorted(timelines[broker], key=lambda t: -blocked[(broker, "queue", t["queue"])])
        queue_divs = "".join(
            figures.div(queue_timeline_figure(t), "timeline", t["queue"]) for t in drawn
        )
        figure = intervals_figure(broker, intervals[broker])
        parts.append(
            f'<div class="broker-timelines" data-broker="{html.escape(broker)}">'
            f"<h3>{text(broker)}</h3>"
            + (f'<div class="timeline-grid">{queue_divs}</div>' if queue_divs else "")
            + (
                f'<div class="wide">{figures.div(figure, "intervals", broker)}</div>'
                if figure is not None
                else ""
            )
            + "</div>"
        )
    if not parts:
        return '<p class="empty">no timelines: no queue was stopped and nothing was blocked</p>'
    return "".join(parts)


def entity_counts(entities: Sequence[dict[str, Any]]) -> str:
    """How many entities of each kind, e.g. "1 alarm, 40 links, 34 queues"."""
    counts: dict[str, int] = defaultdict(int)
    for entity in entities:
        counts[entity["kind"]] += 1
    return ", ".join(counted(n, k) for k, n in sorted(counts.items())) or "no entities"


def render_page(data: dict[str, Any], title: str = TITLE) -> str:
    entities = data["entities"]
    advised = advised_entities(data["recommendations"])
    active = [e for e in entities if not is_idle(e, advised)]
    idle = [e for e in entities if is_idle(e, advised)]
    brokers = sorted(
        {e["broker"] for e in entities} | {r["broker"] for r in data["recommendations"]}
    )
    figures = Figures()
    scopes = [("", "All brokers", active)] + [
        (b, b, [e for e in active if e["broker"] == b]) for b in brokers
    ]
    charts = "".join(
        f'<div class="scope" data-scope="{html.escape(scope)}">'
        f'<div class="charts">{overview_charts(rows, figures)}</div></div>'
        for scope, _, rows in scopes
    )
    at_risk = [r for r in data["recommendations"] if r["verdict"] == VERDICT_AT_RISK]
    # The counts of each scope, shown with its charts: they stayed the whole page's under the
    # broker filter (a review).
    subtitle = "".join(
        f'<span data-scope="{html.escape(scope)}">'
        f"{text(entity_counts([e for e in entities if scope in ('', e['broker'])]))}; "
        f"{sum(1 for e in idle if scope in ('', e['broker']))} with nothing to show</span>"
        for scope, _, _ in scopes
    )
    options = "".join(
        f'<option value="{html.escape(scope)}">{text(name)}</option>' for scope, name, _ in scopes
    )
    at_risk_table = (
        recommendations_table(at_risk, "at-risk-table")
        if at_risk
        else '<p class="empty">no recommendation is at risk of overflow</p>'
    )
    ranked_table = (
        entities_table(active) if active else '<p class="empty">no data in the gold tables yet</p>'
    )
    every_recommendation = (
        recommendations_table(data["recommendations"], "recommendations-table")
        if data["recommendations"]
        else '<p class="empty">no recommendations yet</p>'
    )
    body = f"""
<header>
  <h1>{text(title)}</h1>
  <div class="muted" id="subtitle">{subtitle}; recommendations as of
  {text(data["recommendations_as_of"])}; warehouse {text(data["warehouse"])}</div>
  <label>Broker <select id="broker-filter">{options}</select></label>
</header>
<section id="overview">
  <h2>Overview</h2>
  {charts}
  <h3>At risk</h3>
  {at_risk_table}
  <h3>Every entity with something to show, worst first</h3>
  {ranked_table}
  <h3>Nothing to show (never stopped, starved or blocked, no loss logged)</h3>
  {idle_summary(idle)}
</section>
<section id="timelines">
  <h2>Timelines</h2>
  <p class="muted">A queue's depth (the largest in each time bucket, and between buckets what the
  last one left) against its stop and resume thresholds, or an address's size in bytes against
  the stop size of its episodes (its max-size-bytes), shaded while its flow was stopped; then
  each broker's starved links and blocked connections, alarms, sessions and producers over
  time. Times are UTC, as in the event log.</p>
  {timelines_section(data, active, figures)}
</section>
<section id="recommendations">
  <h2>Recommendations</h2>
  {every_recommendation}
</section>"""
    parts = {
        "TITLE": text(title),
        "PLOTLYJS": get_plotlyjs(),
        "FIGURES": json_for_script(figures.by_id),
        "BODY": body,
    }
    # One pass over the template: a name that spells a placeholder is not replaced in turn.
    return re.sub(r"__(TITLE|PLOTLYJS|FIGURES|BODY)__", lambda m: parts[m.group(1)], _PAGE)


_PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --ink:#1d2733; --muted:#66768a; --line:#d8dee6; --ok:#2f8f5b; --warn:#c27c0e;
          --bad:#c0392b; }
  [hidden] { display: none !important; }
  body { font: 13px/1.4 system-ui, sans-serif; color: var(--ink); margin: 12px 16px;
         background: #f7f9fb; }
  h1 { font-size: 20px; margin: 0 0 2px; }
  h2 { font-size: 16px; margin: 18px 0 6px; border-bottom: 1px solid var(--line); }
  h3 { font-size: 14px; margin: 12px 0 4px; }
  header label { display: inline-block; margin-top: 6px; }
  .muted { color: var(--muted); }
  .sampled { color: var(--muted); font-size: 0.85em; white-space: nowrap; }
  .charts, .timeline-grid { display: flex; flex-wrap: wrap; gap: 10px; }
  .figure, .no-chart { background: #fff; border: 1px solid var(--line); border-radius: 4px; }
  .no-chart { box-sizing: border-box; width: 432px; max-width: 100%; align-self: flex-start;
              padding: 12px; color: var(--muted); font-style: italic; }
  /* A chart keeps its own width where there is room and narrows to the page on a small
     screen (drawn to the width it gets: fittedWidth below). */
  .figure { max-width: calc(100% - 2px); }
  .figure[data-chart="intervals"] { margin-top: 10px; display: inline-block; }
  .table-wrap, .wide { max-width: 100%; overflow-x: auto; }
  table { border-collapse: collapse; background: #fff; width: 100%; min-width: 940px;
          table-layout: fixed; }
  th, td { border: 1px solid var(--line); padding: 3px 5px; text-align: left;
           vertical-align: top; overflow-wrap: anywhere; }
  th { background: #eef2f6; font-weight: 600; }
  .clamp { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2;
           overflow: hidden; }
  .name { display: inline-block; margin: 0 10px 0 0; }
  .verdict { font-weight: 600; border-radius: 3px; padding: 0 4px; color: #fff;
             display: inline-block; }
  .v-keep { background: var(--ok); } .v-raise, .v-lower { background: var(--warn); }
  .v-flapping { background: #8e44ad; } .v-at_risk_of_overflow { background: var(--bad); }
  .empty { color: var(--muted); font-style: italic; }
</style>
<script>__PLOTLYJS__</script>
</head>
<body>
__BODY__
<script id="flowctl-figures" type="application/json">__FIGURES__</script>
<script>
"use strict";
const figures = JSON.parse(document.getElementById("flowctl-figures").textContent);
const config = {displayModeBar: false, responsive: false};

// The figure's own width, or the room its box has where that is less (a narrow screen: the
// box's CSS caps it at the page's width).
function fittedWidth(div) {
  return Math.min(figures[div.id].layout.width, div.clientWidth);
}

// ``text`` broken at spaces into lines of at most ``chars`` characters (a longer word is a
// line of its own); a text that wraps starts a line at its parenthesis, which says what the
// words before it are ("metrics-emitter" over "(producer window full)").
function wrapped(text, chars) {
  const lines = [];
  const aside = text.indexOf(" (");
  const parts = text.length > chars && aside > 0
    ? [text.slice(0, aside), text.slice(aside + 1)] : [text];
  for (const part of parts) {
    let first = true;
    for (const word of part.split(" ")) {
      const last = lines.length - 1;
      if (!first && lines[last].length + 1 + word.length <= chars) lines[last] += " " + word;
      else lines.push(word);
      first = false;
    }
  }
  return lines;
}

// Characters of ``size`` px that fit in ``px``, on average.
function charsIn(px, size) {
  return Math.floor(px / (0.56 * size));
}

// A figure's layout at ``width``. Narrowed, its title wraps (Plotly draws one line, cut at
// the figure's edge), the figure and its top margin growing a line for each line more, and
// its time axes take fewer ticks: Plotly keeps at least five, whose labels ("00:00:30" over
// "Mar 3, 2026") run into each other under 400 px. Its x-axis titles wrap too (Plotly centres
// one on the plot, which row labels push right), and so do its row labels, each row a line
// taller for each line more of the tallest: Plotly keeps the plot at least 64 px wide and cut
// a longer label at the figure's left edge.
function layoutAt(layout, width) {
  const fitted = {...layout, width};
  if (width >= layout.width) return fitted;
  const size = (layout.font && layout.font.size) || 12;
  const title = layout.title;
  if (title && title.text) {
    const titleSize = (title.font && title.font.size) || 13;
    const lines = wrapped(title.text, charsIn(width - 16, titleSize));
    fitted.title = {...title, text: lines.join("<br>")};
    fitted.margin = {...layout.margin, t: layout.margin.t + (lines.length - 1) * (titleSize + 4)};
    fitted.height = layout.height + (lines.length - 1) * (titleSize + 4);
  }
  for (const [key, axis] of Object.entries(layout)) {
    if (key.startsWith("xaxis") && axis.type === "date") {
      fitted[key] = {...axis, nticks: Math.max(2, Math.floor(width / 110))};
      // Room for half the last tick's label ("Mar 3, 2026"), which fewer ticks may put at the end.
      fitted.margin = {...fitted.margin, r: Math.max(layout.margin.r, 40)};
    }
    if (key.startsWith("xaxis") && axis.title && axis.title.text) {
      const lines = wrapped(axis.title.text, charsIn(width * 0.35, size));
      fitted[key] = {...fitted[key], title: {...axis.title, text: lines.join("<br>")}};
    }
    if (key.startsWith("yaxis") && Array.isArray(axis.categoryarray)) {
      const rows = axis.categoryarray.map(name => wrapped(name, charsIn(width * 0.45, size)));
      const lines = Math.max(...rows.map(row => row.length));
      if (lines > 1) {
        fitted[key] = {...axis, tickmode: "array", tickvals: axis.categoryarray,
                       ticktext: rows.map(row => row.join("<br>"))};
        // Rows are evenly spaced: each as tall as the tallest label.
        fitted.height += rows.length * (lines - 1) * (size + 4);
      }
    }
  }
  return fitted;
}

// A figure is drawn when first shown: Plotly measures its labels, which a hidden one has not.
// One drawn before is drawn again to the room it has now, if that changed while it was hidden.
// A chart Plotly refused to draw ("Something went wrong with axis scaling": labels that left
// its plot no room stopped the page at that chart) says so in its box, and the others are
// drawn; it is tried again, afresh, when its room changes.
function drawShown() {
  const drawing = [];
  for (const div of document.querySelectorAll(".figure")) {
    if (div.offsetParent === null) continue;
    const width = fittedWidth(div);
    if (div.dataset.width === String(width)) continue;  // drawn, or refused, in this room
    div.dataset.width = String(width);
    const refusedBefore = div.hasAttribute("data-refused");
    if (refusedBefore) {
      div.removeAttribute("data-refused");
      div.classList.remove("empty");
      div.textContent = "";
    }
    const figure = figures[div.id];
    const draw = div.hasAttribute("data-drawn") && !refusedBefore ? Plotly.react : Plotly.newPlot;
    const layout = layoutAt(figure.layout, width);
    div.style.height = `${layout.height}px`;  // taller for the lines wrapped
    // A draw's outcome counts only while its width is the one wanted: an earlier one that
    // ends after a later draw began leaves that later one be.
    const current = () => div.dataset.width === String(width);
    const drawn = () => current() && div.setAttribute("data-drawn", "true");
    const refused = (error) => {
      if (!current()) return;
      div.removeAttribute("data-drawn");
      div.setAttribute("data-refused", "true");
      div.textContent = `This chart could not be drawn ${width} px wide: ${error.message}`;
      div.classList.add("empty");
    };
    try {
      drawing.push(Promise.resolve(draw(div, figure.data, layout, config)).then(drawn, refused));
    } catch (error) {
      refused(error);
    }
  }
  return Promise.all(drawing);
}

let resized = 0;
window.addEventListener("resize", () => {
  clearTimeout(resized);
  resized = setTimeout(drawShown, 150);
});

// "" is every broker: the overview charts of all of them, and every row and timeline.
function showBroker(broker) {
  for (const node of document.querySelectorAll("[data-scope]")) {
    node.hidden = node.dataset.scope !== broker;
  }
  for (const node of document.querySelectorAll("[data-broker]")) {
    node.hidden = broker !== "" && node.dataset.broker !== broker;
  }
  return drawShown();
}

const filter = document.getElementById("broker-filter");
filter.addEventListener("change", () => showBroker(filter.value));
showBroker("").then(() => document.body.setAttribute("data-rendered", "true"));
</script>
</body>
</html>
"""

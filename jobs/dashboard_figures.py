"""The dashboard's charts as Plotly figures, built from the plain records jobs/dashboard.py reads
from the warehouse (no Spark here, so the page can be tested from hand-built records).

Every figure has a fixed size that fits its slot of the page at 1366 px, so nothing is measured
at load and a chart drawn in a hidden broker's section cannot come out the wrong size. Names
come from the brokers' configuration and may hold anything: Plotly reads a few HTML tags in
labels (``<b>``, ``<br>``), so every name goes through :func:`label` first.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import plotly.graph_objects as go

#: Bars in an overview chart: the worst entities; the rest are in the table below it.
TOP_N = 12
#: Sizes in CSS pixels of the page's slots: three overview charts or two timelines a row.
OVERVIEW_SIZE = (430, 340)
TIMELINE_SIZE = (655, 280)
INTERVALS_WIDTH = 1320
#: A legend along the figure's bottom edge, below the axis and its title: placed against the
#: plot area (y -0.25) it was anchored by its bottom, so a legend wrapped onto more lines on a
#: narrow screen grew up over the time axis's date line.
LEGEND_BELOW = {
    "orientation": "h",
    "yref": "container",
    "y": 0,
    "yanchor": "bottom",
    "x": 0,
    "font": {"size": 10},
}
#: Characters of an axis label: longer names are cut (the full name is in the hover text).
LABEL_CHARS = 30

KIND_LABELS = {
    "queue": "queue stopped",
    "link": "link starved",
    "connection": "0.9.1 connection blocked",
    "alarm": "alarm raised",
    "session_window": "session window closed",
    "producer_window": "producer window full",
}
KIND_COLOURS = {
    "queue": "#3d7cc9",
    "link": "#2f8f5b",
    "connection": "#c0392b",
    "alarm": "#8e44ad",
    "session_window": "#c27c0e",
    "producer_window": "#6d4c41",
}
_FONT = {"family": "system-ui, sans-serif", "size": 11, "color": "#1d2733"}


def label(text: str) -> str:
    """``text`` as Plotly shows it literally: its pseudo-HTML escaped (Plotly decodes the
    entities back), U+2028/U+2029 shown as spaces (they break an SVG text line)."""
    return html.escape(text.replace("\u2028", " ").replace("\u2029", " "), quote=False)


def short(text: str, limit: int = LABEL_CHARS) -> str:
    """A name cut to ``limit`` characters, an ellipsis in place of its middle: names of one
    broker differ at their ends ("quorum-amqp-091", "quorum-amqp-10"), and cut at the end
    two bars read alike (a review). Two thirds of what is kept is the end: the entity."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 3
    return text[:head] + "\u2026" + text[len(text) - (limit - 1 - head) :]


def entity_label(row: dict[str, Any]) -> str:
    return f"{row['broker']} / {row['entity']}"


def _layout(fig: go.Figure, title: str, size: tuple[int, int], **more: Any) -> go.Figure:
    width, height = size
    fig.update_layout(
        title={"text": label(title), "x": 0, "xanchor": "left", "font": {"size": 13}},
        width=width,
        height=height,
        margin={"l": 10, "r": 16, "t": 40, "b": 40},
        font=_FONT,
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
        **more,
    )
    # Ticks of the background's colour: they hold the x labels off the y labels at the origin.
    fig.update_xaxes(
        automargin=True, gridcolor="#e6ebf0", zeroline=False, ticks="outside", ticklen=8,
        tickcolor="#ffffff",
    )  # fmt: skip
    fig.update_yaxes(automargin=True, gridcolor="#e6ebf0")
    return fig


def _ranked(rows: Sequence[dict[str, Any]], value: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The :data:`TOP_N` rows with the largest ``value`` in Plotly's order (it draws the first
    category at the bottom) and their y labels, numbered from the worst: two long names cut
    alike stay two bars."""
    top = sorted(rows, key=lambda r: r[value], reverse=True)[:TOP_N][::-1]
    names = [f"{len(top) - i}. {label(short(entity_label(r)))}" for i, r in enumerate(top)]
    return top, names


def _hovers(rows: Iterable[dict[str, Any]]) -> list[str]:
    return [label(entity_label(r)) for r in rows]


def blocked_time_figure(entities: Sequence[dict[str, Any]]) -> go.Figure | None:
    """The entities longest stopped, starved or blocked, coloured by what blocked them."""
    rows = [r for r in entities if (r.get("blocked_s") or 0) > 0]
    if not rows:
        return None
    fig = go.Figure()
    top, names = _ranked(rows, "blocked_s")
    for kind, kind_label in KIND_LABELS.items():
        # One trace per kind, for its colour and legend entry; the bars keep their rank.
        of_kind = [(name, r) for name, r in zip(names, top, strict=True) if r["kind"] == kind]
        if not of_kind:
            continue
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=[name for name, _ in of_kind],
                x=[r["blocked_s"] for _, r in of_kind],
                name=kind_label,
                marker_color=KIND_COLOURS[kind],
                customdata=_hovers(r for _, r in of_kind),
                hovertemplate="%{customdata}: %{x:,.1f} s<extra>" + kind_label + "</extra>",
            )
        )
    _layout(
        fig,
        f"Time stopped, starved or blocked: the worst {len(top)}",
        OVERVIEW_SIZE,
        barmode="stack",
        legend=LEGEND_BELOW,
        showlegend=True,
    )
    fig.update_yaxes(categoryorder="array", categoryarray=names)
    fig.update_xaxes(title_text="seconds, over all runs and days")
    return fig


def overshoot_figure(entities: Sequence[dict[str, Any]]) -> go.Figure | None:
    """The queues' worst overshoot past the stop threshold as a share of Qpid's bound (the sum
    of the producers' capacities: Qpid guarantees at most 1), worst first. Queues without a
    bound (a producer without a window) are in the entity table, not here. Where no queue has
    such a bound, the bytes Artemis addresses passed max-size-bytes by (a real broker's log
    has no other: "no queue overshot" was said beside an address 146,400 bytes past its limit)."""
    rows = [
        r
        for r in entities
        if r["kind"] == "queue"
        and (r.get("max_overshoot_msgs") or 0) > 0
        and r.get("max_overshoot_ratio") is not None
    ]
    if not rows:
        return _byte_overshoot_figure(entities)
    top, names = _ranked(rows, "max_overshoot_ratio")
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=names,
            x=[r["max_overshoot_ratio"] for r in top],
            # Each bar says its share: 1 of a bound of 10,000 draws no visible bar (a review).
            text=[share_text(r["max_overshoot_ratio"]) for r in top],
            textposition="outside",
            cliponaxis=False,
            marker_color=["#c0392b" if r["max_overshoot_ratio"] > 1 else "#3d7cc9" for r in top],
            customdata=[
                [label(entity_label(r)), r["max_overshoot_msgs"], r.get("overshoot_bound_msgs")]
                for r in top
            ],
            hovertemplate="%{customdata[0]}: %{customdata[1]:,} msgs past the stop threshold, "
            "bound %{customdata[2]:,}<extra></extra>",
        )
    )
    # The bound itself: a bar past this line broke Qpid's guarantee.
    fig.add_vline(x=1, line_dash="dash", line_color="#d2452f", line_width=2)
    _layout(fig, "Worst overshoot against its bound", OVERVIEW_SIZE, showlegend=False)
    fig.update_layout(margin={"r": 44})  # room for the longest bar's label ("100%")
    fig.update_yaxes(categoryorder="array", categoryarray=names)
    fig.update_xaxes(
        title_text="overshoot / bound (dashed: the bound)", tickformat=".0%", rangemode="tozero"
    )
    return fig


def share_text(ratio: float) -> str:
    """A share as a bar's label: whole per cent, or two significant digits under 1 %."""
    return f"{ratio:.0%}" if ratio >= 0.01 else f"{ratio * 100:.2g}%"


def _byte_overshoot_figure(entities: Sequence[dict[str, Any]]) -> go.Figure | None:
    """The addresses' worst overshoot past max-size-bytes, in bytes, worst first."""
    rows = [r for r in entities if r["kind"] == "queue" and (r.get("max_overshoot_bytes") or 0) > 0]
    if not rows:
        return None
    top, names = _ranked(rows, "max_overshoot_bytes")
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=names,
            x=[r["max_overshoot_bytes"] for r in top],
            marker_color="#c0392b",
            customdata=_hovers(top),
            hovertemplate="%{customdata}: %{x:,} bytes past the limit<extra></extra>",
        )
    )
    _layout(fig, "Worst overshoot past the limit, in bytes", OVERVIEW_SIZE, showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=names)
    fig.update_xaxes(title_text="bytes past max-size-bytes", rangemode="tozero")
    return fig


#: How many times the longest delay drawn may be the shortest before the axis turns logarithmic.
DELAY_LOG_SPAN = 100


def producer_delay_figure(entities: Sequence[dict[str, Any]]) -> go.Figure | None:
    """The queues whose producers waited longest for completions (p95 of held transfers)."""
    rows = [r for r in entities if r["kind"] == "queue" and (r.get("completion_p95_us") or 0) > 0]
    if not rows:
        return None
    top, names = _ranked(rows, "completion_p95_us")
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=names,
            x=[r["completion_p95_us"] / 1000 for r in top],
            marker_color="#c27c0e",
            customdata=_hovers(top),
            hovertemplate="%{customdata}: p95 %{x:,.1f} ms<extra></extra>",
        )
    )
    _layout(fig, "Producer delay: worst day's p95 completion", OVERVIEW_SIZE, showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=names)
    delays = [r["completion_p95_us"] for r in top]
    if max(delays) > DELAY_LOG_SPAN * min(delays):
        # Seconds of a Qpid queue beside milliseconds of a RabbitMQ one: on a linear axis the
        # latter drew no bar at all (a README walk-through read them as empty rows).
        # A tick at each power of ten, written as the hover writes numbers (1,000 and 10,000,
        # not plotly's "1000" beside "10k" and unlabelled 2s and 5s between them).
        fig.update_xaxes(
            type="log", dtick=1, tickformat=",~r", title_text="completion delay p95 (ms, log)"
        )
    else:
        fig.update_xaxes(title_text="completion delay p95 (ms)")
    return fig


def _threshold(values: Iterable[int | None]) -> list[int | None]:
    """Thresholds as drawn: 0 (off) is no line."""
    return [v if v else None for v in values]


def drawn_points(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline's points as its step line draws them: each bucket at its largest depth from
    its start, and where no bucket follows at once (a quiet stretch, the last bucket), one more
    point at the bucket's end with the depth its last event left, held until the next bucket.
    Held at the largest, a drained queue was drawn at its old depth across the quiet stretch
    (a review: 4,000 messages drawn for 10 s where 2,999 were left)."""
    drawn: list[dict[str, Any]] = []
    for point, following in zip(points, [*points[1:], None], strict=True):
        drawn.append({**point, "x": point["bucket_start"], "depth": "max"})
        end = point["bucket_start"] + timedelta(seconds=point["bucket_s"])
        if following is None or following["bucket_start"] > end:
            drawn.append({**point, "x": end, "depth": "last"})
    return drawn


def queue_timeline_figure(timeline: dict[str, Any]) -> go.Figure:
    """A queue's depth per bucket (:func:`drawn_points`) against the stop and resume thresholds
    in force, its stopped episodes (``timeline["stopped"]``, start and end) shaded. In bytes when
    only byte thresholds are on, or when its episodes stop on bytes alone
    (``timeline["byte_stop"]``, :func:`jobs.transforms.dashboard.drawn_byte_stops`: an Artemis
    address blocks at its max-size-bytes, which only its flow events log as their stop size, its
    other events 0); that stop size is then the one line, unless the buckets' own is on
    throughout."""
    points = drawn_points(timeline["points"])
    byte_stop = timeline.get("byte_stop")
    in_bytes = not any(p.get("flow_stop_count") for p in points) and (
        bool(byte_stop) or any(p.get("flow_stop_size") for p in points)
    )
    unit, measure, stop, resume = (
        ("bytes", "depth_bytes", "flow_stop_size", "flow_resume_size")
        if in_bytes
        else ("msgs", "depth_msgs", "flow_stop_count", "flow_resume_count")
    )
    x = [p["x"] for p in points]
    step = {"shape": "hv", "width": 1.5}
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=[p.get(f"{p['depth']}_{measure}") for p in points],
            name=f"depth (max per {points[0]['bucket_s']:g} s; the last between buckets)",
            line={**step, "color": "#3d7cc9"},
            fill="tozeroy",
            fillcolor="rgba(61,124,201,0.12)",
        )
    )
    # A threshold never on (an Artemis address without BLOCK, a queue without limits) has no
    # line, and so no legend entry for a line that is not there.
    stop_line = {"color": "#d2452f", "dash": "dash"}
    # The episodes' stop size stands in only where the buckets' is not on throughout (an
    # address's): a Qpid queue of byte thresholds keeps its stop and resume lines.
    from_episodes = in_bytes and byte_stop and not all(p.get("flow_stop_size") for p in points)
    lines = (
        [("stop size of its episodes", [byte_stop] * len(points), stop_line)]
        if from_episodes
        else [
            ("stop threshold", _threshold(p.get(stop) for p in points), stop_line),
            (
                "resume threshold",
                _threshold(p.get(resume) for p in points),
                {"color": "#2f8f5b", "dash": "dot"},
            ),
        ]
    )
    for name, drawn, style in lines:
        if any(value is not None for value in drawn):
            fig.add_trace(go.Scatter(x=x, y=drawn, name=name, line={**step, **style}))
    # In messages, a queue that also stops on bytes was shaded above a near-empty line (9 msgs,
    # stopped on 9,000 bytes past 8,192: a review): its bytes and byte stop on a right axis,
    # where its bytes reached that stop (a byte stop never neared, as Qpid's default of
    # 80 MiB is by most queues, only adds a flat line).
    with_bytes = not in_bytes and any(
        p.get("flow_stop_size") and (p.get("max_depth_bytes") or 0) >= p["flow_stop_size"]
        for p in points
    )
    if with_bytes:
        in_bytes_style = {**step, "color": "#8e44ad"}
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p.get(f"{p['depth']}_depth_bytes") for p in points],
                name="depth in bytes (right axis)",
                yaxis="y2",
                line={**in_bytes_style, "width": 1},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_threshold(p.get("flow_stop_size") for p in points),
                name="byte stop threshold (right axis)",
                yaxis="y2",
                line={**in_bytes_style, "dash": "dash"},
            )
        )
    for start, end in timeline["stopped"]:
        fig.add_vrect(x0=start, x1=end, fillcolor="#d2452f", opacity=0.13, line_width=0)
    runs = timeline.get("runs", 1)
    run_note = f" (run {timeline['run_id']}, 1 of {runs})" if runs > 1 else ""
    # Drawn in messages, a queue that also stops on bytes showed shading over a near-empty
    # line (9 msgs, stopped on 9,000 bytes past 8,192: a review): the title says both.
    last = points[-1]
    also_bytes = (
        f" (on {last['flow_stop_count']:,} msgs or {last['flow_stop_size']:,} bytes)"
        if not in_bytes and last.get("flow_stop_count") and last.get("flow_stop_size")
        else ""
    )
    width, height = TIMELINE_SIZE
    _layout(
        fig,
        f"{timeline['broker']} / {timeline['queue']}{run_note}: depth, shaded while stopped"
        f"{also_bytes}",
        # Taller by the legend's two more lines (Plotly sets five a line each below a plot of
        # two y axes), the plot as tall as the others'.
        (width, height + 60) if with_bytes else TIMELINE_SIZE,
        # Shown with one trace too: Plotly hides a lone trace's legend, and with it the label
        # that says what the line is (an address without a stop line, a review).
        showlegend=True,
        legend=LEGEND_BELOW,
        hovermode="x unified",
    )
    fig.update_xaxes(type="date")
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    if with_bytes:
        fig.update_layout(
            yaxis2={
                "title": {"text": "bytes"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
                "automargin": True,
            }
        )
    return fig


#: The narrowest interval bar, as a share of the broker's span: what a chart of a few hundred
#: pixels can show (intervals closer than it are merged, jobs/dashboard.py MERGE_GAP_SHARE).
INTERVAL_MIN_SHARE = 1 / 600
_MS = timedelta(milliseconds=1)


def intervals_figure(broker: str, intervals: Sequence[dict[str, Any]]) -> go.Figure | None:
    """A broker's starvation and blocking intervals, one row per entity, coloured by kind."""
    if not intervals:
        return None
    rows = sorted({(i["kind"], i["entity"]) for i in intervals})
    names = {key: f"{label(short(key[1]))} ({KIND_LABELS[key[0]]})" for key in rows}
    # An interval is drawn at least this wide: one of 0 s (it ended in the instant it began)
    # left its row empty (a review). Its hover says its own length.
    span_ms = (max(i["end"] for i in intervals) - min(i["start"] for i in intervals)) / _MS
    narrowest_ms = span_ms * INTERVAL_MIN_SHARE
    fig = go.Figure()
    for kind, kind_label in KIND_LABELS.items():
        of_kind = [i for i in intervals if i["kind"] == kind]
        if not of_kind:
            continue
        lengths = [(i["end"] - i["start"]) / _MS for i in of_kind]
        fig.add_trace(
            go.Bar(
                orientation="h",
                base=[i["start"] for i in of_kind],
                x=[max(length, narrowest_ms) for length in lengths],
                y=[names[(kind, i["entity"])] for i in of_kind],
                name=kind_label,
                marker_color=KIND_COLOURS[kind],
                customdata=[
                    [label(i["entity"]), ms] for i, ms in zip(of_kind, lengths, strict=True)
                ],
                hovertemplate="%{customdata[0]}: %{base|%H:%M:%S.%L} UTC for "
                f"%{{customdata[1]:,.0f}} ms<extra>{kind_label}</extra>",
            )
        )
    height = 110 + 26 * len(rows)
    _layout(
        fig,
        f"{broker}: starvation and blocking intervals",
        (INTERVALS_WIDTH, height),
        barmode="overlay",
        legend=LEGEND_BELOW,
    )
    fig.update_xaxes(type="date")
    fig.update_yaxes(categoryorder="array", categoryarray=[names[k] for k in rows])
    return fig

"""The dashboard page, opened in headless Chromium at 1366 x 768 as a person would
(scripts/setup_chromium.sh): what it shows, measured from the DOM, and screenshots."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from plotly.offline import get_plotlyjs

from jobs.config import PROJECT_ROOT, PipelineConf, load_conf
from jobs.dashboard import dashboard_data
from jobs.dashboard_figures import short
from jobs.dashboard_page import knob_change, render_page, set_in
from jobs.delta_io import read_table
from jobs.episodes import write_depth_timeline
from jobs.recommend import load_policy, run_recommend
from jobs.span_events import SpanEvents
from jobs.transforms.episodes import run_bounds
from schemas.recommendations import (
    KNOB_HIGHEST,
    KNOB_MAX_LENGTH,
    KNOB_QPID_FLOW_STOP_COUNT,
    KNOB_SET_IN,
)
from schemas.tables import BRONZE_BROKER_EVENTS
from tests.test_recommend import DAY
from tests.test_recommend_job import write_warehouse

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium(*args: str, user_data_dir: Path) -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip("headless Chromium missing: run scripts/setup_chromium.sh")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={user_data_dir}",
            # Lets the page's script finish before the DOM is dumped.
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        # Chromium keeps more than its profile in the user's config and cache folders (crash
        # reports, dconf): beside the profile instead, not in the home of whoever runs the tests.
        env={
            **os.environ,
            "XDG_CONFIG_HOME": str(user_data_dir / "config"),
            "XDG_CACHE_HOME": str(user_data_dir / "cache"),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


#: Run in the page after it rendered: what a person sees, measured from the DOM, written into
#: the page as JSON for ``--dump-dom`` (the page's own scripts are left as they are).
MEASURE = """
<script>
(function measure() {
  const body = document.body;
  if (body.getAttribute("data-rendered") !== "true" || "narrowing" in body.dataset) {
    setTimeout(measure, 50);
    return;
  }
  const shown = (node) => {
    const box = node.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && node.textContent.trim() !== "";
  };
  const labels = [...document.querySelectorAll(".figure svg text")].filter(shown);
  const boxes = labels.map(node => node.getBoundingClientRect());
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      // 1 px of tolerance: glyph boxes of neighbouring lines touch.
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 &&
          b.top < a.bottom - 1) {
        overlaps.push([labels[i].textContent, labels[j].textContent]);
      }
    }
  }
  const figures = [...document.querySelectorAll(".figure")].filter(f => f.offsetParent !== null);
  const marks = (figure) => figure.querySelectorAll(
    ".barlayer .point path, .scatterlayer .js-line, .scatterlayer .point").length;
  const overview = document.getElementById("overview");
  // Labels past their chart's edge, cut there (1 px of tolerance for a glyph's box).
  const cut = [];
  for (const figure of figures) {
    const edge = figure.getBoundingClientRect();
    for (const node of [...figure.querySelectorAll("svg text")].filter(shown)) {
      const box = node.getBoundingClientRect();
      if (box.left < edge.left - 1 || box.right > edge.right + 1) cut.push(node.textContent);
    }
  }
  const found = {
    overlaps,
    cut,
    texts: labels.map(node => node.textContent),
    labels: labels.length,
    figures: figures.map(f => ({chart: f.dataset.chart, name: f.dataset.name, marks: marks(f)})),
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    height: document.documentElement.scrollHeight,
    entities: [...overview.querySelectorAll("#entities-table tr[data-entity]")].map(
      row => [row.dataset.broker, row.dataset.kind, row.dataset.entity]),
    idle: [...overview.querySelectorAll("#idle-table tr")].slice(1).map(
      row => [row.dataset.broker, [...row.querySelectorAll(".name")].map(n => n.textContent)]),
    tooWide: [...document.querySelectorAll("table, .figure")].filter(
      n => n.getBoundingClientRect().right > document.documentElement.clientWidth).length,
    // Each drawn chart's box and drawing against the page's body, whatever its width.
    bodyRight: document.body.getBoundingClientRect().right,
    bodyWidth: document.body.clientWidth,
    charts: figures.map(f => ({
      right: f.getBoundingClientRect().right,
      titleRight: f.querySelector(".gtitle").getBoundingClientRect().right,
      box: f.clientWidth,
      drawn: Number(f.querySelector("svg.main-svg").getAttribute("width")),
      own: JSON.parse(document.getElementById("flowctl-figures").textContent)[f.id].layout.width,
    })),
  };
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
})();
</script>
"""
SCREEN = "--window-size=1366,768"
#: The timeline screenshot: the broker of the first queue timeline, from its heading.
TIMELINE_SHOWN = ".broker-timelines:has(.figure[data-chart='timeline'])"
DOCS = PROJECT_ROOT / "docs"


#: Headless Chromium lays a page out at least 500 px wide whatever its window: a narrow
#: screen is a body of that width (``body_width``). ``narrowed_to`` narrows it once drawn
#: and tells the page its window was resized, as turning a phone does.
NARROWED = """
<script>
document.body.dataset.narrowing = "";
(function narrow() {
  if (document.body.getAttribute("data-rendered") !== "true") { setTimeout(narrow, 50); return; }
  document.body.style.width = "__WIDTH__px";
  window.dispatchEvent(new Event("resize"));
  setTimeout(() => delete document.body.dataset.narrowing, 1000);
})();
</script>
"""


def measured(
    page: Path, tmp_path: Path, body_width: int | None = None, narrowed_to: int | None = None
) -> dict[str, Any]:
    """What :data:`MEASURE` finds in ``page`` opened at 1366 x 768; with ``body_width``, its
    body that wide from the start; with ``narrowed_to``, narrowed to that once drawn."""
    probe = tmp_path / f"measure-{page.name}"
    text = page.read_text(encoding="utf-8")
    if body_width is not None:
        text = text.replace("</head>", f"<style>body {{ width: {body_width}px; }}</style></head>")
    added = MEASURE
    if narrowed_to is not None:
        added = NARROWED.replace("__WIDTH__", str(narrowed_to)) + MEASURE
    probe.write_text(text.replace("</body>", added + "</body>"))
    dom = chromium("--dump-dom", SCREEN, probe.as_uri(), user_data_dir=tmp_path / "profile")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the page did not finish rendering"
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def screenshot(page: Path, shot: Path, tmp_path: Path, show: str | None = None) -> Path:
    """A 1366 x 768 screenshot of ``page``; with ``show``, of the part of the page from the
    element ``show`` selects. Headless Chromium paints nothing for a scrolled page, so the page
    is moved up under the window (a CSS translation: the layout is the page's own)."""
    if show is not None:
        moved = tmp_path / f"moved-{page.name}"
        script = (
            "<script>(function move() { if (document.body.dataset.rendered !== 'true') "
            "{ setTimeout(move, 50); return; } "
            f"const top = document.querySelector({json.dumps(show)}).getBoundingClientRect().top;"
            " document.body.style.transform = `translateY(${8 - top}px)`; })();</script>"
        )
        moved.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"))
        page = moved
    chromium(f"--screenshot={shot}", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert shot.stat().st_size > 20_000  # a blank page is a few KB
    return shot


@pytest.fixture(scope="module")
def warehouse(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> PipelineConf:
    """The hand-built day of tests/test_recommend_job.py with its recommendations and the depth
    timeline of its events; with FLOWCTL_DOCS_SCREENSHOTS=1, the demo's warehouse
    ($FLOWCTL_DEMO_WAREHOUSE, default var/demo/warehouse) instead, for docs/'s screenshots."""
    if os.environ.get("FLOWCTL_DOCS_SCREENSHOTS") == "1":
        demo = os.environ.get("FLOWCTL_DEMO_WAREHOUSE", str(PROJECT_ROOT / "var/demo/warehouse"))
        return dataclasses.replace(load_conf(), warehouse_dir=demo)
    scratch = tmp_path_factory.mktemp("dashboard")
    conf = dataclasses.replace(load_conf(), warehouse_dir=str(scratch / "warehouse"))
    write_warehouse(spark, conf)
    run_recommend(spark, conf, DAY, DAY, load_policy())
    events = read_table(spark, conf, BRONZE_BROKER_EVENTS)
    runs = tuple(sorted(r.run_id for r in events.select("run_id").distinct().collect()))
    write_depth_timeline(spark, conf, SpanEvents(events, False, DAY, DAY, runs), run_bounds(events))
    return conf


@pytest.fixture(scope="module")
def data(spark: Any, warehouse: PipelineConf) -> dict[str, Any]:
    return dashboard_data(spark, warehouse)


@pytest.fixture(scope="module")
def page(data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page") / "report.html"
    out.write_text(render_page(data), encoding="utf-8")
    return out


@pytest.mark.spark
def test_page_is_self_contained(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # plotly.js once, not once per chart; its source names web pages it never fetches.
    assert text.count(get_plotlyjs()) == 1
    own = text.replace(get_plotlyjs(), "")
    # Nothing is fetched: no external script, style sheet, image or font.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", own)
    assert "<link" not in own and "@import" not in own


@pytest.mark.spark
def test_what_a_person_sees_at_1366(
    page: Path, data: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seen = measured(page, tmp_path)
    print(f"page height at 1366 px: {seen['height']} px")  # for the README and the report
    # Nothing wider than the screen (less the vertical scroll bar): no horizontal scroll.
    assert seen["innerWidth"] == 1366
    assert seen["scrollWidth"] <= seen["clientWidth"] and seen["tooWide"] == 0
    # Each chart is drawn at its own width, or the page's where that is less (a broker's
    # interval chart of 1,320 px: 1,317 at 1366 with the scroll bar).
    room = seen["bodyWidth"] - 2
    assert all(c["drawn"] == c["box"] == min(c["own"], room) for c in seen["charts"])
    # No label drawn over another, in any chart, and none cut at a chart's edge.
    assert seen["labels"] > 20 and seen["overlaps"] == [] and seen["cut"] == []
    # Every chart drawn shows marks: empty ones are a line of text, not a chart.
    assert seen["figures"] and all(f["marks"] > 0 for f in seen["figures"]), seen["figures"]
    # Every gold entity is in the overview: ranked, or among the idle ones.
    listed = {tuple(e) for e in seen["entities"]}
    idle = {(broker, name) for broker, names in seen["idle"] for name in names}
    for entity in data["entities"]:
        key = (entity["broker"], entity["kind"], entity["entity"])
        assert key in listed or (entity["broker"], entity["entity"]) in idle, key
    # Screenshots at 1366 x 768: the overview, then a queue's timeline.
    overview = screenshot(page, tmp_path / "dashboard-overview.png", tmp_path)
    timeline = screenshot(page, tmp_path / "dashboard-timeline.png", tmp_path, TIMELINE_SHOWN)
    if os.environ.get("FLOWCTL_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        for shot in (overview, timeline):
            shutil.copyfile(shot, DOCS / shot.name)


@pytest.mark.spark
@pytest.mark.parametrize(("body_width", "narrowed_to"), [(360, None), (None, 300)])
def test_charts_narrow_to_a_small_screen(
    page: Path, tmp_path: Path, body_width: int | None, narrowed_to: int | None
) -> None:
    """On a phone (360 px) every chart is drawn to the page's width, not its own 430 or 655 px
    cut at the screen's edge; a window narrowed after the charts were drawn redraws them."""
    seen = measured(page, tmp_path, body_width, narrowed_to)
    room = body_width or narrowed_to
    assert seen["charts"] and seen["figures"]
    for chart in seen["charts"]:
        assert chart["right"] <= seen["bodyRight"] + 0.5, chart
        assert chart["titleRight"] <= chart["right"], chart  # wrapped, not cut
        # Drawn to its box's width: the room less its 1 px borders, under its own.
        assert chart["drawn"] == chart["box"] == room - 2 < chart["own"], chart
    # Still no label over another once narrowed, and none cut at a chart's edge: long row
    # labels and axis titles wrap.
    assert seen["overlaps"] == []
    assert seen["cut"] == []


@pytest.mark.spark
def test_chromium_shows_queues_links_and_recommendations(page: Path, tmp_path: Path) -> None:
    if os.environ.get("FLOWCTL_DOCS_SCREENSHOTS") == "1":
        pytest.skip("checks the hand-built warehouse")
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom  # the scripts ran to the end
    # The ranked entities: orders 2 x 20 s stopped, the indexer link 30 s starved.
    rows = re.findall(r'<tr data-broker="[^"]*" data-kind="(\w+)" data-entity="([^"]+)">', dom)
    assert ("queue", "orders") in rows and ("link", "indexer") in rows
    orders = dom[dom.index('data-entity="orders">') :]
    assert '<td data-column="blocked_s">40.0</td>' in orders[:1000]
    # Overshoot against the bound: payments peaked 40 past 960; producers' capacities sum to 65.
    payments = dom[dom.index('data-kind="queue" data-entity="payments">') :]
    assert "40 / 65" in payments[:1500]
    # Charts were drawn: the worst entities, the overshoot, orders' timeline.
    for chart in ("blocked", "overshoot"):
        assert re.search(rf'data-chart="{chart}"[^>]*data-drawn="true"', dom)
    assert re.search(r'data-chart="timeline" data-name="orders"[^>]*data-drawn="true"', dom)
    # The recommendations table, every row with its verdict and what it changes.
    table = dom[dom.index('id="recommendations-table"') :]
    verdicts = dict(re.findall(r'<tr data-entity="([^"]+)" data-verdict="([^"]+)"', table))
    assert verdicts == {
        "orders": "raise",
        "payments": "at_risk_of_overflow",
        "work": "keep",
        "indexer": "raise",
    }
    assert "stop msgs 500 -&gt; 922" in dom or "500 -&gt; 922" in dom
    # payments is at risk: it is in the overview's at-risk table too.
    at_risk = dom[dom.index('id="at-risk-table"') : dom.index('id="entities-table"')]
    assert 'data-entity="payments"' in at_risk and 'data-entity="orders"' not in at_risk


def _recommendation(broker: str, verdict: str, stop: int, **more: Any) -> dict[str, Any]:
    return {
        "date": "2026-03-03", "broker": broker, "entity_kind": "queue", "entity": "orders",
        "verdict": verdict, "current_flow_stop_count": 900, "recommended_flow_stop_count": stop,
        "episodes": 2, "time_stopped_s": 20.0, "rationale": f"{broker} orders", **more,
    }  # fmt: skip


def _queue(broker: str, stopped: float, name: str = "orders", **more: Any) -> dict[str, Any]:
    return {
        "broker": broker, "kind": "queue", "entity": name, "blocked_s": stopped,
        "observed_s": 100.0, "share": stopped / 100, "episodes": 1 if stopped else 0,
        "max_overshoot_msgs": 5, "overshoot_bound_msgs": 10, "max_overshoot_ratio": 0.5,
        "completion_p95_us": None, "lost": None, **more,
    }  # fmt: skip


def _page(tmp_path: Path, **data: Any) -> Path:
    page = tmp_path / "page.html"
    records = {
        "entities": [], "timelines": [], "intervals": [], "recommendations": [],
        "recommendations_as_of": "2026-03-03", "warehouse": "w", **data,
    }  # fmt: skip
    page.write_text(render_page(records), encoding="utf-8")
    return page


def test_the_broker_filter_shows_one_broker(tmp_path: Path) -> None:
    """Two bundled scenarios both have an "orders" queue, on brokers of their own: the filter
    keeps one broker's rows and its own overview charts."""
    page = _page(
        tmp_path,
        entities=[_queue("artemis-orders", 12.0), _queue("qpid-orders", 34.0)],
        recommendations=[
            _recommendation("artemis-orders", "keep", 900),
            _recommendation("qpid-orders", "raise", 1000),
        ],
    )
    chosen = tmp_path / "chosen.html"
    pick = (
        "<script>window.addEventListener('load', () => { const f = "
        "document.getElementById('broker-filter'); f.value = 'qpid-orders'; "
        "f.dispatchEvent(new Event('change')); });</script>"
    )
    chosen.write_text(page.read_text(encoding="utf-8").replace("</body>", pick + "</body>"))
    dom = chromium("--dump-dom", SCREEN, chosen.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    rows = re.findall(
        r'<tr data-entity="orders" data-verdict="(\w+)" data-broker="([^"]+)"( hidden)?', dom
    )
    assert rows == [("keep", "artemis-orders", " hidden"), ("raise", "qpid-orders", "")]
    # The qpid-orders overview is shown and drawn; the all-brokers one hidden.
    assert re.search(r'<div class="scope" data-scope="qpid-orders">', dom)
    assert re.search(r'<div class="scope" data-scope="" hidden="">', dom)
    assert "1 with nothing" not in dom and "2 queues" in dom
    # The counts follow the filter (they stayed the whole page's: a review).
    assert '<span data-scope="qpid-orders">1 queue; 0 with nothing to show</span>' in dom
    assert '<span data-scope="" hidden="">2 queues; 0 with nothing to show</span>' in dom


def test_the_broker_own_knob_is_shown_and_a_null_one_falls_back(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        recommendations=[
            _recommendation(
                "artemis", "lower", 900, entity="addr", broker_kind="artemis",
                knob="max-size-bytes", current_value=10_485_760, recommended_value=5_242_880,
                unit="bytes", rule="margin_eaten",
            ),
            _recommendation("qpid", "raise", 1000, knob=None, unit=None),
        ],
    )  # fmt: skip
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert "max-size-bytes: 10,485,760 -&gt; 5,242,880 bytes" in dom
    assert "margin_eaten" in dom and "artemis queue" in dom
    assert "stop msgs 900 -&gt; 1,000" in dom


def test_idle_entities_are_summarised_not_drawn(tmp_path: Path) -> None:
    quiet = [_queue("qpid", 0.0, name=f"q{n}", max_overshoot_msgs=None) for n in range(5)]
    page = _page(tmp_path, entities=[*quiet, _queue("qpid", 3.0, name="busy")])
    seen = measured(page, tmp_path)
    assert seen["idle"] == [["qpid", [f"q{n}" for n in range(5)]]]
    assert [e[2] for e in seen["entities"]] == ["busy"]
    # One bar chart of time blocked and one of overshoot, no producer delay (none measured).
    assert sorted(f["chart"] for f in seen["figures"]) == ["blocked", "overshoot"]


def test_empty_tables_render_placeholders(tmp_path: Path) -> None:
    page = _page(tmp_path, recommendations_as_of=None, warehouse="</script><b>x")
    text = page.read_text(encoding="utf-8")
    assert "<b>x" not in text.split("<body>")[1].split("<script")[0]
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    assert "no data in the gold tables yet" in dom
    assert "no recommendations yet" in dom
    assert 'class="figure"' not in dom  # no empty chart
    # The warehouse name is shown as text, not parsed as markup.
    assert "warehouse &lt;/script&gt;&lt;b&gt;x" in dom and "<b>x</b>" not in dom


HOSTILE_NAMES = [
    "<!--<script>",  # opens an HTML comment inside the script element: the page vanished
    "</script><b>x",
    "<script>alert(1)</script>",
    "a & b \"quoted\" 'single'",
    "line\u2028separator\u2029paragraph",
    "]]></x><!--",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_name_cannot_blank_the_page(tmp_path: Path, name: str) -> None:
    """A queue or broker may be named anything: the page renders whole and shows it as text."""
    page = _page(
        tmp_path,
        entities=[_queue(name, 12.0, name=name)],
        recommendations=[_recommendation(name, "keep", 900)],
        warehouse=name,
    )
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom  # the scripts ran to the end
    assert 'data-verdict="keep"' in dom  # the recommendations table after the data is there
    assert "<b>x</b>" not in dom and "alert(1)</script>" not in dom.split("flowctl-figures")[0]
    shown = html.escape(name, quote=False)
    assert f'<td data-column="entity">{shown}</td>' in dom  # the table names the queue
    # The chart labels it as text too (Plotly reads a few tags in labels: they are escaped).
    cut = short(f"{name} / {name}").replace("\u2028", " ").replace("\u2029", " ")
    shown_label = html.escape(cut, quote=False)
    assert f"1. {shown_label}" in dom


def test_dashboard_goes_beside_the_warehouse_by_default() -> None:
    from jobs.config import PROJECT_ROOT, load_conf
    from jobs.dashboard import default_dashboard_path

    assert default_dashboard_path(load_conf().warehouse_dir) == PROJECT_ROOT / "var/report.html"
    assert default_dashboard_path("s3a://lake/warehouse") == Path("report.html")


@pytest.mark.spark
def test_missing_tables_read_as_empty_and_are_not_created(spark: Any, tmp_path: Path) -> None:
    """The dashboard only reads: a warehouse holding some gold tables (no recommend run yet)
    renders, and the tables it lacks are not created (a typo'd warehouse is refused before
    Spark starts: tests/test_cli_errors.py)."""
    from jobs.dashboard import dashboard_data, no_gold_tables
    from jobs.delta_io import ensure_table, table_path
    from schemas.tables import QUEUE_FLOW_DAILY

    conf = dataclasses.replace(load_conf(), warehouse_dir=str(tmp_path / "warehouse"))
    assert no_gold_tables(conf) is not None
    ensure_table(spark, table_path(conf, QUEUE_FLOW_DAILY), QUEUE_FLOW_DAILY)
    assert no_gold_tables(conf) is None
    data = dashboard_data(spark, conf)
    shown = ("entities", "timelines", "intervals", "recommendations")
    assert [data[key] for key in shown] == [[], [], [], []]
    tables = sorted(str(p.relative_to(conf.warehouse_dir)) for p in tmp_path.glob("warehouse/*/*"))
    assert tables == ["gold/queue_flow_daily"]


def test_a_threshold_never_on_has_no_line_and_no_legend_entry() -> None:
    """An Artemis address without BLOCK (or a queue without limits) logs thresholds of 0: the
    legend listed "stop threshold" and "resume threshold" for lines never drawn."""
    from datetime import datetime

    from jobs.dashboard_figures import queue_timeline_figure

    def point(second: int, stop: int) -> dict[str, Any]:
        return {
            "bucket_start": datetime(2026, 3, 5, 12, 0, second),
            "bucket_s": 1.0,
            "max_depth_msgs": second,
            "max_depth_bytes": second * 100,
            "flow_stop_count": stop,
            "flow_resume_count": stop // 2,
            "flow_stop_size": 0,
            "flow_resume_size": 0,
            "flow_stopped": False,
            "stopped_in_bucket": False,
        }

    timeline = {"broker": "b", "queue": "q", "run_id": "r", "runs": 1, "stopped": []}
    off = queue_timeline_figure({**timeline, "points": [point(s, 0) for s in range(3)]})
    assert [trace.name for trace in off.data] == ["depth (max per 1 s; the last between buckets)"]
    on = queue_timeline_figure({**timeline, "points": [point(s, 8) for s in range(3)]})
    assert [trace.name for trace in on.data] == [
        "depth (max per 1 s; the last between buckets)",
        "stop threshold",
        "resume threshold",
    ]


def test_a_drained_queue_is_drawn_at_what_it_left_between_buckets() -> None:
    """A bucket is drawn at its largest depth; where no bucket follows at once, the line steps to
    the depth its last event left at the bucket's end and holds it: held at the largest, a
    queue drained to 2,999 was drawn at 4,000 for 10 s, and at 2,998 where 9 were left (a
    review of the demo's page)."""
    from datetime import datetime, timedelta

    from jobs.dashboard_figures import queue_timeline_figure

    start = datetime(2026, 3, 5, 10, 0, 10)

    def bucket(seconds: int, largest: int, last: int) -> dict[str, Any]:
        return {
            "bucket_start": start + timedelta(seconds=seconds), "bucket_s": 5.0,
            "max_depth_msgs": largest, "last_depth_msgs": last, "max_depth_bytes": largest,
            "last_depth_bytes": last, "flow_stop_count": 3000, "flow_resume_count": 2000,
            "flow_stop_size": 0, "flow_resume_size": 0,
        }  # fmt: skip

    # Two buckets in a row, a quiet stretch, then the last bucket.
    points = [bucket(0, 4000, 3500), bucket(5, 3500, 2999), bucket(20, 2999, 9)]
    timeline = {"broker": "b", "queue": "q", "run_id": "r", "runs": 1, "stopped": []}
    depth = queue_timeline_figure({**timeline, "points": points}).data[0]
    assert [(x - start).total_seconds() for x in depth.x] == [0, 5, 10, 20, 25]
    assert list(depth.y) == [4000, 3500, 2999, 2999, 9]
    stop = queue_timeline_figure({**timeline, "points": points}).data[1]
    assert list(stop.x) == list(depth.x)
    assert list(stop.y) == [3000] * 5
    # Drawn in messages, a queue that also stops on bytes says so: it may be shaded above a
    # near-empty line (a review: 9 msgs, stopped on 9,000 bytes past 8,192).
    title = queue_timeline_figure({**timeline, "points": points}).layout.title.text
    assert title == "b / q: depth, shaded while stopped"
    both = [{**p, "flow_stop_size": 3500, "flow_resume_size": 3000} for p in points]
    figure = queue_timeline_figure({**timeline, "points": both})
    assert figure.layout.title.text.endswith("shaded while stopped (on 3,000 msgs or 3,500 bytes)")
    # Its bytes reached the byte stop: they and the stop are on a right axis, the depth in
    # bytes stepping as the messages do.
    on_the_right = [trace for trace in figure.data if trace.yaxis == "y2"]
    assert [trace.name for trace in on_the_right] == [
        "depth in bytes (right axis)",
        "byte stop threshold (right axis)",
    ]
    assert list(on_the_right[0].y) == [4000, 3500, 2999, 2999, 9]  # the bytes the buckets hold
    assert list(on_the_right[1].y) == [3500] * 5
    assert (figure.layout.yaxis2.side, figure.layout.yaxis2.overlaying) == ("right", "y")
    # A byte stop its bytes never reach (Qpid's default 80 MiB) is in the title only.
    never = [{**p, "flow_stop_size": 8192, "flow_resume_size": 6144} for p in points]
    figure = queue_timeline_figure({**timeline, "points": never})
    assert figure.layout.title.text.endswith("(on 3,000 msgs or 8,192 bytes)")
    for drawn in (figure, queue_timeline_figure({**timeline, "points": points})):
        assert all(trace.yaxis in (None, "y") for trace in drawn.data)


def test_an_address_is_drawn_in_bytes_against_the_stop_size_of_its_episodes() -> None:
    """An Artemis address's flow events log its max-size-bytes as their stop size and its other
    events 0, so most buckets showed no threshold: its page was drawn in messages with no limit
    and no legend (a review). Its episodes' stop size makes it bytes, with that one line."""
    from datetime import datetime, timedelta

    from jobs.dashboard import timelines_of
    from jobs.dashboard_figures import queue_timeline_figure

    start = datetime(2026, 3, 5, 11)
    points = [
        {"broker": "a", "queue": "orders", "run_id": "r", "runs": 1,
         "bucket_start": start + timedelta(seconds=i), "bucket_s": 1.0, "max_depth_msgs": i,
         "last_depth_msgs": i, "max_depth_bytes": 1000 * i, "last_depth_bytes": 1000 * i,
         "flow_stop_count": 0, "flow_resume_count": 0,
         "flow_stop_size": 4096 if i == 2 else 0, "flow_resume_size": 4096 if i == 2 else 0}
        for i in range(4)
    ]  # fmt: skip
    stops = [{"broker": "a", "queue": "orders", "byte_stop": 4096}]
    (timeline,) = timelines_of(points, (), stops)
    figure = queue_timeline_figure(timeline)
    assert [trace.name for trace in figure.data] == [
        "depth (max per 1 s; the last between buckets)",
        "stop size of its episodes",
    ]
    assert list(figure.data[0].y) == [0, 1000, 2000, 3000, 3000]
    assert set(figure.data[1].y) == {4096}
    assert figure.layout.yaxis.title.text == "bytes"
    (without,) = timelines_of(points)
    assert without["byte_stop"] is None
    alone = queue_timeline_figure(
        {**without, "points": [{**p, "flow_stop_size": 0} for p in points]}
    )
    assert alone.layout.showlegend is True  # the depth line's name shows with no other line
    # A Qpid queue of byte thresholds logs them on every event: its own two lines stay.
    qpid = [{**p, "flow_stop_size": 4096, "flow_resume_size": 2048} for p in points]
    lines = queue_timeline_figure({**timeline, "points": qpid}).data[1:]
    assert [(t.name, set(t.y)) for t in lines] == [
        ("stop threshold", {4096}),
        ("resume threshold", {2048}),
    ]


@pytest.mark.spark
def test_the_byte_stop_is_that_of_episodes_stopping_on_bytes_alone(spark: Any) -> None:
    from jobs.transforms.dashboard import drawn_byte_stops

    episodes = spark.createDataFrame(
        [("a", "address", "r", 0, 4096), ("a", "address", "r", 0, 4096),
         ("a", "address", "old", 0, 9999), ("q", "both", "r", 10, 4096),
         ("q", "counts", "r", 10, 0)],
        "broker string, queue string, run_id string, flow_stop_count long, flow_stop_size long",
    )  # fmt: skip
    runs = spark.createDataFrame(
        [("a", "address", "r"), ("q", "both", "r"), ("q", "counts", "r")],
        "broker string, queue string, run_id string",
    )
    assert [r.asDict() for r in drawn_byte_stops(episodes, runs).collect()] == [
        {"broker": "a", "queue": "address", "byte_stop": 4096}
    ]


def test_long_names_that_differ_at_their_end_are_cut_apart() -> None:
    """Cut at the end, two RabbitMQ queues read "rabbitmq-one-sender / quorum-\u2026" in one chart
    (a review): the ellipsis takes the middle, the entity's end stays."""
    from jobs.dashboard_figures import LABEL_CHARS, short

    names = [f"rabbitmq-one-sender / quorum-{protocol}" for protocol in ("amqp-091", "amqp-10")]
    cut = [short(name) for name in names]
    assert cut == ["rabbitmq-\u2026er / quorum-amqp-091", "rabbitmq-\u2026der / quorum-amqp-10"]
    assert all(len(c) == LABEL_CHARS for c in cut)
    assert short("orders") == "orders"


def test_the_page_says_its_times_are_utc(tmp_path: Path) -> None:
    """Times are drawn as the event log has them, in UTC (jobs/spark_session.py use_utc_clock):
    the timelines say so, and so does an interval's hover text."""
    from datetime import datetime

    from jobs.dashboard_figures import intervals_figure

    interval = {"kind": "link", "entity": "c1", "start": datetime(2026, 3, 5, 12)}
    figure = intervals_figure("b", [{**interval, "end": datetime(2026, 3, 5, 12, 0, 30)}])
    assert figure is not None
    assert "%{base|%H:%M:%S.%L} UTC" in figure.data[0].hovertemplate
    assert "Times are UTC, as in the event log." in _page(tmp_path).read_text(encoding="utf-8")


def test_an_interval_of_no_length_is_still_drawn_and_says_its_length() -> None:
    """An episode that ended in the instant it began left its row empty (a review): a bar is
    drawn at least 1/600 of the broker's span wide; its hover says 0 ms."""
    from datetime import datetime

    from jobs.dashboard_figures import intervals_figure

    start = datetime(2026, 3, 5, 12)
    figure = intervals_figure(
        "b",
        [
            {"kind": "link", "entity": "c1", "start": start, "end": datetime(2026, 3, 5, 12, 1)},
            {"kind": "link", "entity": "c2", "start": start, "end": start},
        ],
    )
    assert figure is not None
    (bars,) = figure.data
    assert list(bars.x) == [60_000.0, 100.0]
    assert [ms for _, ms in bars.customdata] == [60_000.0, 0.0]
    assert "%{customdata[1]:,.0f} ms" in bars.hovertemplate


@pytest.mark.parametrize("body_width", [320, 360])
def test_long_row_labels_wrap_on_a_small_screen(tmp_path: Path, body_width: int) -> None:
    """An interval chart's row label of 38 characters ("metrics-emitter (producer window
    full)") was cut at its left on a 360 px screen: Plotly keeps the plot 64 px wide and gave
    the label 173 px of its 213; with a longer one beside it, Plotly refused to draw the chart
    at all. Narrowed, a long label wraps before its parenthesis, each row a line taller for
    each line more of the tallest; none is cut, none runs into another."""
    from datetime import datetime

    start = datetime(2026, 3, 5, 12)
    rows = [
        ("producer_window", "metrics-emitter"),
        ("session_window", "publisher-10/session-1"),
        ("link", "metrics-sink"),
        ("connection", "127.0.0.1:36690 -> 127.0.0.1:5672"),
    ]
    intervals = [
        {"broker": "b", "kind": kind, "entity": entity, "start": start,
         "end": datetime(2026, 3, 5, 12, 0, 5 * (n + 1))}
        for n, (kind, entity) in enumerate(rows)
    ]  # fmt: skip
    seen = measured(_page(tmp_path, intervals=intervals), tmp_path, body_width)
    (chart,) = seen["charts"]
    assert chart["drawn"] == body_width - 2
    assert seen["cut"] == [] and seen["overlaps"] == []
    # Two lines (an SVG text of two spans: their text joined without a space).
    assert "metrics-emitter(producer window full)" in seen["texts"]


def test_a_chart_plotly_refuses_leaves_the_others_drawn(tmp_path: Path) -> None:
    """Plotly throws for a chart it cannot draw (labels that leave its plot no room: "Something
    went wrong with axis scaling"). The page stopped at that chart, those after it never drawn
    and the page never done; the chart now says so in its box and the others are drawn."""
    page = _page(tmp_path, entities=[_queue("qpid", 3.0), _queue("qpid", 2.0, name="busy")])
    refusing = (
        "<body><script>const drawPlot = Plotly.newPlot; let refusals = 1;"
        "Plotly.newPlot = (...args) => { if (refusals-- > 0) throw new Error('no room');"
        " return drawPlot(...args); };</script>"
    )
    text = page.read_text(encoding="utf-8")
    assert text.count("<body>") == 1
    page.write_text(text.replace("<body>", refusing), encoding="utf-8")
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    assert "This chart could not be drawn 430 px wide: no room" in dom
    figures = re.findall(r'<div class="figure[^"]*"[^>]*>', dom)
    refused = [f for f in figures if 'data-refused="true"' in f]
    assert len(refused) == 1 and "data-drawn" not in refused[0]
    shown = [f for f in figures if "data-width" in f]  # drawn or refused: on the first screen
    assert len(shown) >= 2 and all('data-drawn="true"' in f for f in shown if f not in refused)


#: Run in the page once it was narrowed (:data:`NARROWED`): what the charts are after their
#: redraw, and any error the page's script threw (listened for from the page's start).
REDRAWN = """
<script>
(function redrawn() {
  const body = document.body;
  if (body.getAttribute("data-rendered") !== "true" || "narrowing" in body.dataset) {
    setTimeout(redrawn, 50);
    return;
  }
  const shown = [...document.querySelectorAll(".figure")].filter(f => f.offsetParent !== null);
  const found = document.createElement("pre");
  found.id = "redrawn";
  found.textContent = JSON.stringify({
    errors: window.pageErrors,
    charts: shown.map(f => ({drawn: f.dataset.drawn === "true", refused: "refused" in f.dataset,
                             width: f.layout ? f.layout.width : null, text: f.textContent})),
  });
  body.appendChild(found);
})();
</script>
"""


def test_a_chart_refused_once_is_drawn_when_its_room_changes_and_the_others_follow(
    tmp_path: Path,
) -> None:
    """A chart Plotly refused had no layout: the next redraw (a resize, the broker filter)
    threw on it, so no chart after it was redrawn (a review). It is now tried again in its new
    room, and every chart follows the window."""
    page = _page(tmp_path, entities=[_queue("qpid", 3.0), _queue("qpid", 2.0, name="busy")])
    refusing = (
        "<body><script>window.pageErrors = [];"
        "window.addEventListener('error', (event) => window.pageErrors.push(event.message));"
        "const drawPlot = Plotly.newPlot; let refusals = 1;"
        "Plotly.newPlot = (...args) => { if (refusals-- > 0) throw new Error('no room');"
        " return drawPlot(...args); };</script>"
    )
    narrowed = NARROWED.replace("__WIDTH__", "400") + REDRAWN
    text = page.read_text(encoding="utf-8")
    page.write_text(
        text.replace("<body>", refusing).replace("</body>", narrowed + "</body>"), encoding="utf-8"
    )
    dom = chromium("--dump-dom", SCREEN, page.as_uri(), user_data_dir=tmp_path / "profile")
    found = re.search(r'<pre id="redrawn">(.*?)</pre>', dom, re.S)
    assert found is not None, dom[-2000:]
    redrawn = json.loads(html.unescape(found.group(1)))
    assert redrawn["errors"] == []
    charts = redrawn["charts"]
    assert len(charts) >= 2
    assert all(
        c["drawn"] and not c["refused"] and "could not be drawn" not in c["text"] for c in charts
    )
    assert {c["width"] for c in charts} == {charts[0]["width"]} and charts[0]["width"] <= 400


def test_an_entity_on_samples_is_marked_approximate(tmp_path: Path) -> None:
    """DESIGN §6: a collector's sampled figures are marked approximate on the page too."""
    page = _page(
        tmp_path,
        entities=[
            _queue("real-artemis", 5.4, name="orders", sample_interval_ms=30_000),
            _queue("engine", 3.0, name="jobs"),
        ],
        recommendations=[
            _recommendation("real-artemis", "raise", 1000, sample_interval_ms=30_000),
            _recommendation("engine", "keep", 900),
        ],
    )
    rows = re.findall(r'<tr data-broker="([^"]+)"[^>]*>(.*?)</tr>', page.read_text())
    marked = {broker: "\u2248 sampled" in cells for broker, cells in rows}
    assert marked == {"real-artemis": True, "engine": False}
    # ... and so is the advice resting on them, in the table of every recommendation.
    advice = re.findall(
        r'<tr data-entity="orders" data-verdict="\w+" data-broker="([^"]+)">(.*?)</tr>',
        page.read_text(),
    )
    assert {broker: "\u2248 sampled" in cells for broker, cells in advice} == {
        "real-artemis": True,
        "engine": False,
    }
    assert 'title="from samples read every 30 s: approximate"' in page.read_text()


def test_a_value_kept_reads_as_kept_not_as_a_change() -> None:
    """A value that stays reads "900 (kept)", not "900 -> 900"; of the Qpid pairs only those that
    change are listed."""
    kept = {"knob": "qpid.flow_stop_count", "unit": "messages", "current_value": 900,
            "recommended_value": 900}  # fmt: skip
    assert knob_change(kept) == "qpid.flow_stop_count: 900 messages (kept)"
    # Byte thresholds only: the stop count (0, off) stays and the change is all in bytes; it
    # read "0 messages (kept)" (an audit).
    bytes_only = {"knob": "qpid.flow_stop_count", "unit": "messages", "current_value": 0,
                  "recommended_value": 0, "current_flow_stop_count": 0,
                  "recommended_flow_stop_count": 0, "current_flow_stop_size": 900_000,
                  "recommended_flow_stop_size": 760_000, "current_flow_resume_size": 800_000,
                  "recommended_flow_resume_size": 655_936}  # fmt: skip
    assert knob_change(bytes_only) == (
        "qpid.flow_stop_count: 0 messages (kept); qpid.flow_stop_size: 900,000 -> 760,000 bytes; "
        "qpid.flow_resume_size: 800,000 -> 655,936 bytes"
    )
    limit = {"knob": "x-max-length", "unit": "messages", "current_value": None,
             "recommended_value": 15_300}  # fmt: skip
    assert knob_change(limit) == "x-max-length: none -> 15,300 messages"
    unset = {**limit, "recommended_value": None}
    assert knob_change(unset) == "x-max-length: none (kept)"
    in_bytes = {**unset, "max_size": 1_000_000}
    assert knob_change(in_bytes) == (
        "x-max-length: none (kept); x-max-length-bytes: 1,000,000 bytes in force"
    )
    # Artemis's -1 is no limit / an unbounded window: "-1 (off)", not "-1 bytes".
    window = {"knob": "consumerWindowSize", "unit": "bytes", "current_value": -1,
              "recommended_value": -1}  # fmt: skip
    assert knob_change(window) == "consumerWindowSize: -1 (off, kept)"
    bounded = {**window, "recommended_value": 87_558}
    assert knob_change(bounded) == "consumerWindowSize: -1 (off) -> 87,558 bytes"
    pairs = {
        "current_flow_stop_count": 1600,
        "recommended_flow_stop_count": 1760,
        "current_flow_stop_size": 83_886_080,
        "recommended_flow_stop_size": 83_886_080,
    }
    assert knob_change(pairs) == "stop msgs 1,600 -> 1,760"
    same = {**pairs, "recommended_flow_stop_count": 1600}
    assert knob_change(same) == "stop msgs 1,600; stop bytes 83,886,080 (kept)"


def test_a_value_an_at_risk_row_leaves_points_to_the_rationale() -> None:
    """A new user's trial: "at risk of overflow" beside "900 messages (kept)" read as a
    contradiction. Only a row that keeps its value says "kept"; a row whose verdict asks for
    something else says the value is unchanged and where the fix is."""
    at_risk = {"knob": "qpid.flow_stop_count", "unit": "messages", "current_value": 900,
               "recommended_value": 900, "verdict": "at_risk_of_overflow"}  # fmt: skip
    assert knob_change(at_risk) == "qpid.flow_stop_count: 900 messages (unchanged: see rationale)"
    assert (
        knob_change({**at_risk, "verdict": "keep"}) == "qpid.flow_stop_count: 900 messages (kept)"
    )
    window = {"knob": "consumerWindowSize", "unit": "bytes", "current_value": -1,
              "recommended_value": -1, "verdict": "at_risk_of_overflow"}  # fmt: skip
    assert knob_change(window) == "consumerWindowSize: -1 (off, unchanged: see rationale)"
    pairs = {"current_flow_stop_count": 1600, "recommended_flow_stop_count": 1600,
             "verdict": "at_risk_of_overflow"}  # fmt: skip
    assert knob_change(pairs) == "stop msgs 1,600 (unchanged: see rationale)"


def test_a_qpid_change_shows_every_threshold_it_moves() -> None:
    """A Qpid row's knob is its stop count; the resume and byte thresholds it moves were only in
    the rationale, cut to two lines, so who applied what the page showed set stop 2,760 beside
    a resume of 600 (an audit)."""
    row = {
        "knob": "qpid.flow_stop_count", "unit": "messages",
        "current_value": 4000, "recommended_value": 4508,
        "current_flow_stop_count": 4000, "recommended_flow_stop_count": 4508,
        "current_flow_resume_count": 3500, "recommended_flow_resume_count": 4008,
        "current_flow_stop_size": 4_194_304, "recommended_flow_stop_size": 4_487_168,
        "current_flow_resume_size": 3_670_016, "recommended_flow_resume_size": 3_670_016,
    }  # fmt: skip
    assert knob_change(row) == (
        "qpid.flow_stop_count: 4,000 -> 4,508 messages; "
        "qpid.flow_resume_count: 3,500 -> 4,008 messages; "
        "qpid.flow_stop_size: 4,194,304 -> 4,487,168 bytes"
    )


def test_an_entity_advised_on_is_not_idle_and_its_evidence_shows() -> None:
    """A RabbitMQ queue growing without a limit has no episode, no time stopped and nothing
    lost, and was listed idle under the advice calling it at risk; its evidence was a dash."""
    from jobs.dashboard_page import advised_entities, evidence, is_idle

    growing = {"broker": "r", "kind": "queue", "entity": "orders", "blocked_s": 0.0}
    address = {"broker": "a", "kind": "queue", "entity": "fail-address", "episodes": 0}
    consumer = {"broker": "a", "kind": "link", "entity": "slow", "blocked_s": None}
    advice = [
        {"broker": "r", "entity_kind": "queue", "entity": "orders",
         "verdict": "at_risk_of_overflow"},
        {"broker": "a", "entity_kind": "address", "entity": "fail-address", "verdict": "raise"},
        {"broker": "a", "entity_kind": "consumer", "entity": "slow", "verdict": "keep"},
    ]  # fmt: skip
    advised = advised_entities(advice)
    assert not is_idle(growing, advised) and not is_idle(address, advised)
    assert is_idle(consumer, advised) and is_idle(growing)
    assert evidence({"episodes": 0, "peak_depth_msgs": 219_886}) == "0 episodes, peak 219,886 msgs"
    assert evidence({"episodes": 0, "rejected_msgs": 7, "max_overshoot_bytes": 37_012}) == (
        "0 episodes, overshoot 37,012 bytes, 7 rejected"
    )
    # An address's is its peak past max-size-bytes, episodes or not (DROP, FAIL, PAGE have none).
    dropping = {"entity_kind": "address", "episodes": 0, "max_overshoot_bytes": 1_448}
    assert evidence(dropping) == "0 episodes, peak 1,448 bytes past max-size-bytes"


def test_a_changed_knob_says_where_it_is_set() -> None:
    """An Artemis window is set on the clients' connection URL or factory, not on the address
    its row is about (a review of the advice): the change says where, for every broker's knobs,
    and a kept one says nothing more."""
    assert set(KNOB_SET_IN) == set(KNOB_HIGHEST) | {
        KNOB_QPID_FLOW_STOP_COUNT,
        KNOB_MAX_LENGTH,
    }
    window = {"knob": "producerWindowSize", "current_value": 65_536, "recommended_value": 15_025}
    assert set_in(window) == (
        '<div class="muted">set in the CORE producers&#x27; URL or connection factory</div>'
    )
    assert set_in({**window, "recommended_value": 65_536}) == ""
    assert set_in({"current_flow_stop_count": 1600, "recommended_flow_stop_count": 1760}) == ""
    # A Qpid row whose stop count stays and whose byte thresholds move (a review).
    bytes_moved = {
        "knob": "qpid.flow_stop_count", "current_value": 0, "recommended_value": 0,
        "current_flow_stop_size": 83_886_080, "recommended_flow_stop_size": 50_000_000,
    }  # fmt: skip
    assert "qpid.flow_* arguments" in set_in(bytes_moved)
    page = render_page(
        {
            "entities": [], "timelines": [], "intervals": [], "warehouse": "w",
            "recommendations_as_of": "2026-03-03",
            "recommendations": [_recommendation("qpid", "raise", 1_000, knob="qpid.flow_stop_count",
                                                current_value=900, recommended_value=1_000)],
        }
    )  # fmt: skip
    assert "set in the queue&#x27;s qpid.flow_* arguments" in page


def test_a_timeline_shades_its_episodes_not_its_buckets() -> None:
    """A queue stopped 685 s of 1,800 was shaded 1,490 s: every 10 s bucket stopped at some
    moment (an audit). The shading is the drawn run's episodes (an open one to the run's
    watermark), close ones merged as the interval charts merge theirs."""
    from datetime import datetime, timedelta

    from jobs.dashboard import merge_close_intervals, timelines_of
    from jobs.dashboard_figures import queue_timeline_figure

    start = datetime(2026, 3, 5, 12)
    points = [
        {"broker": "b", "queue": "q", "run_id": "r", "runs": 1,
         "bucket_start": start + timedelta(seconds=10 * i), "bucket_s": 10.0,
         "max_depth_msgs": i, "max_depth_bytes": i, "flow_stop_count": 5,
         "flow_resume_count": 2, "flow_stop_size": 0, "flow_resume_size": 0,
         "flow_stopped": i == 3, "stopped_in_bucket": i in (1, 3)}
        for i in range(6)
    ]  # fmt: skip
    episodes = [
        {"broker": "b", "kind": "queue", "entity": "q", "start": start + timedelta(seconds=12),
         "end": start + timedelta(seconds=13)},
        {"broker": "b", "kind": "queue", "entity": "q", "start": start + timedelta(seconds=35),
         "end": start + timedelta(seconds=60)},
    ]  # fmt: skip
    (timeline,) = timelines_of(points, merge_close_intervals(episodes))
    assert timeline["stopped"] == [(e["start"], e["end"]) for e in episodes]
    shaded = [(shape.x0, shape.x1) for shape in queue_timeline_figure(timeline).layout.shapes]
    assert shaded == [(e["start"], e["end"]) for e in episodes]
    (other,) = timelines_of([{**p, "queue": "other"} for p in points], episodes)
    assert other["stopped"] == []


def test_a_rationale_is_shown_without_the_verdict_its_column_already_shows() -> None:
    """The table cuts a rationale to two lines: its leading "at_risk_of_overflow: " (the
    verdict's own column) took a third of them (a README walk-through). The tooltip keeps the
    whole rationale."""
    from jobs.dashboard_page import recommendations_table

    rationale = "at_risk_of_overflow: stop 900 leaves 100 below max_count 1000 for 165 of overshoot"
    row = _recommendation("qpid", "at_risk_of_overflow", 835, rationale=rationale, rule="r")
    table = recommendations_table([row], "t")
    shown = re.search(r'<div class="clamp" title="([^"]*)">([^<]*)</div>', table)
    assert shown is not None
    assert html.unescape(shown.group(1)) == rationale
    assert html.unescape(shown.group(2)) == (
        "stop 900 leaves 100 below max_count 1000 for 165 of overshoot"
    )


def test_producer_delays_of_seconds_beside_milliseconds_are_drawn_on_a_log_axis() -> None:
    """A Qpid queue's 34 s p95 beside RabbitMQ's 20 ms drew the latter as empty rows (a README
    walk-through); delays within a hundredfold of each other keep a linear axis."""
    from jobs.dashboard_figures import producer_delay_figure

    def figure(*delays_us: int) -> Any:
        rows = [
            _queue("b", 1.0, name=f"q{i}", completion_p95_us=delay)
            for i, delay in enumerate(delays_us)
        ]
        return producer_delay_figure(rows)

    wide = figure(34_600_000, 8_000_000, 20_000)
    assert wide.layout.xaxis.type == "log"
    assert wide.layout.xaxis.title.text == "completion delay p95 (ms, log)"
    # A tick per power of ten, grouped as the hover's numbers: 1,000 and 10,000, not 1000 and 10k.
    assert (wide.layout.xaxis.dtick, wide.layout.xaxis.tickformat) == (1, ",~r")
    assert sorted(wide.data[0].x) == [20.0, 8_000.0, 34_600.0]
    narrow = figure(34_600_000, 800_000)
    assert narrow.layout.xaxis.type is None
    assert narrow.layout.xaxis.title.text == "completion delay p95 (ms)"


def test_an_address_past_its_limit_in_bytes_is_drawn_when_no_queue_has_a_bound() -> None:
    """A real Artemis's log has byte overshoots only; the chart said "no queue overshot its stop
    threshold" beside an address 146,400 bytes past max-size-bytes (a real-broker walk-through).
    A queue with a bound keeps the chart of overshoot against it."""
    from jobs.dashboard_figures import overshoot_figure

    address = _queue("art", 0.0, name="amqp-block", max_overshoot_msgs=None,
                     max_overshoot_ratio=None, max_overshoot_bytes=146_400)  # fmt: skip
    within = _queue("art", 0.0, name="quiet", max_overshoot_msgs=None, max_overshoot_ratio=None,
                    max_overshoot_bytes=0)  # fmt: skip
    figure = overshoot_figure([address, within])
    assert figure is not None
    assert "in bytes" in figure.layout.title.text
    assert list(figure.data[0].x) == [146_400]
    with_bound = overshoot_figure([address, _queue("qpid", 3.0)])
    assert with_bound is not None and list(with_bound.data[0].x) == [0.5]
    assert overshoot_figure([within]) is None
    # Each bar says its share: 1 of a bound of 10,000 drew no visible bar (a review).
    tiny = _queue("qpid", 3.0, name="ticks", max_overshoot_msgs=1, max_overshoot_ratio=1e-4)
    shares = overshoot_figure([_queue("qpid", 3.0), tiny])
    assert shares is not None and list(shares.data[0].text) == ["0.01%", "50%"]


def test_a_queue_shown_for_its_delay_alone_is_not_said_to_be_stopped() -> None:
    """A RabbitMQ queue in the table for its p95 delay read "queue stopped, 0.0 s" (a review)."""
    from jobs.dashboard_page import entities_table

    delayed = _queue("rabbitmq", 0.0, name="quorum", completion_p95_us=5_000)
    table = entities_table([_queue("qpid", 12.0), delayed])
    kinds = re.findall(r'data-entity="(\w+)">.*?<td data-column="kind">([^<]*)</td>', table)
    assert kinds == [("orders", "queue stopped"), ("quorum", "queue")]

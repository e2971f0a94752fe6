"""The dashboard page, opened in headless Chromium as a person would (scripts/setup_chromium.sh)."""

from __future__ import annotations

import dataclasses
import html
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobs.config import load_conf
from jobs.dashboard import render_dashboard, render_html
from jobs.recommend import load_policy, run_recommend
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
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def page(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("dashboard")
    conf = dataclasses.replace(load_conf(), warehouse_dir=str(scratch / "warehouse"))
    write_warehouse(spark, conf)
    run_recommend(spark, conf, DAY, DAY, load_policy())
    return render_dashboard(spark, conf, scratch / "out" / "report.html")


@pytest.mark.spark
def test_page_is_self_contained(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    # Nothing is fetched: no external script, style sheet, image or font.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html


@pytest.mark.spark
def test_chromium_shows_queues_links_and_recommendations(page: Path, tmp_path: Path) -> None:
    dom = chromium("--dump-dom", page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom  # the script ran to the end
    # Time stopped: 2 x 20 s for orders on DAY, as a bar with its value.
    assert re.search(r'data-chart="time-stopped" data-name="orders"', dom)
    assert 'data-date="2026-03-03" data-value="40"' in dom
    # Overshoot against the bound: payments peaked 40 past 960; producers' capacities sum to 65.
    overshoot = dom[dom.index('data-chart="overshoot" data-name="payments"') :]
    assert 'data-value="40"' in overshoot[:2000] and 'data-bound="65"' in overshoot[:2000]
    # Starvation of the consumer link: 30 s.
    assert 'data-chart="starvation" data-name="indexer"' in dom
    assert "indexer (consumer) — 30 s starved" in dom
    # The recommendations table, rendered row by row by the script.
    rows = dict(re.findall(r'<tr data-entity="([^"]+)" data-verdict="([^"]+)"', dom))
    assert rows == {
        "orders": "raise",
        "payments": "at_risk_of_overflow",
        "work": "keep",
        "indexer": "raise",
    }
    assert "stop msgs 500 -&gt; 922" in dom


@pytest.mark.spark
def test_screenshot_renders(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    chromium(
        f"--screenshot={shot}",
        "--window-size=1400,1800",
        page.as_uri(),
        user_data_dir=tmp_path / "profile",
    )
    assert shot.stat().st_size > 20_000  # a blank page is a few KB


def _recommendation(broker: str, verdict: str, stop: int) -> dict[str, Any]:
    return {
        "date": "2026-03-03", "broker": broker, "entity_kind": "queue", "entity": "orders",
        "verdict": verdict, "current_flow_stop_count": 900, "recommended_flow_stop_count": stop,
        "episodes": 2, "time_stopped_s": 20.0, "rationale": f"{broker} orders",
    }  # fmt: skip


def _queue_day(broker: str, stopped: float) -> dict[str, Any]:
    return {
        "date": "2026-03-03", "broker": broker, "queue": "orders", "time_stopped_s": stopped,
        "observed_s": 100.0, "episodes": 1, "max_overshoot_msgs": 5, "overshoot_bound_msgs": 10,
    }  # fmt: skip


def test_same_queue_on_two_brokers_is_told_apart(tmp_path: Path) -> None:
    # Two bundled scenarios both have an "orders" queue, on brokers of their own.
    page = tmp_path / "two-brokers.html"
    page.write_text(
        render_html(
            {
                "queues": [_queue_day("artemis-orders", 12.0), _queue_day("qpid-orders", 34.0)],
                "links": [],
                "recommendations": [
                    _recommendation("artemis-orders", "keep", 900),
                    _recommendation("qpid-orders", "raise", 1000),
                ],
                "recommendations_as_of": "2026-03-03",
                "warehouse": "w",
            }
        ),
        encoding="utf-8",
    )
    dom = chromium("--dump-dom", page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", dom)
    assert headers[:3] == ["broker", "queue / link", "kind"]
    rows = re.findall(r'<tr data-entity="orders" data-verdict="(\w+)" data-broker="([^"]+)">', dom)
    assert rows == [("keep", "artemis-orders"), ("raise", "qpid-orders")]
    cells = re.findall(r'<td class="text" data-column="broker">([^<]*)</td>', dom)
    assert cells == ["artemis-orders", "qpid-orders"]
    for broker in ("artemis-orders", "qpid-orders"):
        assert f'data-chart="time-stopped" data-name="orders" data-broker="{broker}"' in dom
        assert f"{broker} / orders" in dom
    assert "2 queues, 0 links" in dom


def test_overshoot_title_says_none_was_measured_when_flow_control_is_off(tmp_path: Path) -> None:
    """A queue whose count threshold is off has a null overshoot (DESIGN §4: "for thresholds that
    are on"): its chart must not claim a worst overshoot of 0 msgs."""
    off = {**_queue_day("qpid-orders", 0.0), "max_overshoot_msgs": None}
    measured = {**_queue_day("qpid-payments", 3.0), "queue": "payments", "max_overshoot_msgs": 0}
    page = tmp_path / "off.html"
    page.write_text(
        render_html(
            {
                "queues": [off, measured],
                "links": [],
                "recommendations": [],
                "recommendations_as_of": None,
                "warehouse": "w",
            }
        ),
        encoding="utf-8",
    )
    dom = chromium("--dump-dom", page.as_uri(), user_data_dir=tmp_path / "profile")
    assert "qpid-orders / orders — no overshoot measured" in dom
    assert "qpid-orders / orders — worst" not in dom
    assert "qpid-payments / payments — worst 0 msgs" in dom


def test_empty_tables_render_placeholders(tmp_path: Path) -> None:
    html = render_html(
        {"queues": [], "links": [], "recommendations": [], "recommendations_as_of": None,
         "warehouse": "</script><b>x"}
    )  # fmt: skip
    assert "\\u003c/script\\u003e\\u003cb\\u003ex" in html  # cannot close the script early
    page = tmp_path / "empty.html"
    page.write_text(html, encoding="utf-8")
    dom = chromium("--dump-dom", page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    assert "no data in the gold table yet" in dom
    assert "no recommendations yet" in dom
    # The warehouse name is shown as text, not parsed as markup.
    assert "warehouse &lt;/script&gt;&lt;b&gt;x</div>" in dom and "<b>x</b>" not in dom


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
    page = tmp_path / "hostile.html"
    page.write_text(
        render_html(
            {
                "queues": [{**_queue_day(name, 12.0), "queue": name}],
                "links": [],
                "recommendations": [_recommendation(name, "keep", 900)],
                "recommendations_as_of": "2026-03-03",
                "warehouse": name,
            }
        ),
        encoding="utf-8",
    )
    dom = chromium("--dump-dom", page.as_uri(), user_data_dir=tmp_path / "profile")
    assert 'data-rendered="true"' in dom  # the script ran to the end
    assert "1 queues, 0 links" in dom or "1 queue, 0 links" in dom
    assert 'data-verdict="keep"' in dom  # the recommendations table after the data is there
    assert "<b>x</b>" not in dom and "alert(1)</script>" not in dom.split("flowctl-data")[0]
    shown = html.escape(name, quote=False)
    assert f"{shown} / {shown}" in dom  # the chart title names the queue on its broker


def test_dashboard_goes_beside_the_warehouse_by_default() -> None:
    from flowctl.cli import default_dashboard_path
    from jobs.config import PROJECT_ROOT, load_conf

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
    assert (data["queues"], data["links"], data["recommendations"]) == ([], [], [])
    tables = sorted(str(p.relative_to(conf.warehouse_dir)) for p in tmp_path.glob("warehouse/*/*"))
    assert tables == ["gold/queue_flow_daily"]

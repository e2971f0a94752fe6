"""The flowctl dashboard: ONE self-contained HTML page over the gold Delta tables.

Spark aggregates the gold tables (summed over runs, DESIGN.md §4: "dashboards sum over runs") into
a few hundred numbers; they are embedded in the page as JSON and drawn by inline JavaScript as SVG
charts and tables. No CDN, no external file: the page can be mailed or archived as is.

Sections: time stopped per queue and day; worst overshoot per queue and day against Qpid's bound
(the sum of the producers' capacities, from the silver episodes); credit starvation per link and
day; the latest threshold recommendations, one row per broker and queue or link.
"""

from __future__ import annotations

import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.cli import EXIT_USAGE, JobArgumentParser
from jobs.config import ConfError, PipelineConf, load_conf
from jobs.delta_io import ensure_table, local_table_missing, table_path
from jobs.recommend import recommendations_path
from schemas.model import TableSchema
from schemas.recommendations import THRESHOLD_RECOMMENDATIONS
from schemas.tables import LINK_STARVATION_DAILY, QUEUE_FLOW_DAILY, QUEUE_FLOW_EPISODES

RECOMMENDATION_COLUMNS = (
    "broker",
    "entity_kind",
    "entity",
    "verdict",
    "current_flow_stop_count",
    "recommended_flow_stop_count",
    "current_flow_resume_count",
    "recommended_flow_resume_count",
    "current_flow_stop_size",
    "recommended_flow_stop_size",
    "current_credit",
    "recommended_credit",
    "episodes",
    "time_stopped_s",
    "max_overshoot_msgs",
    "producer_capacity_sum",
    "rationale",
)


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    def plain(value: Any) -> Any:
        return value.isoformat() if isinstance(value, date | datetime) else value

    return [{k: plain(v) for k, v in row.asDict().items()} for row in frame.collect()]


def queue_days(queue_daily: DataFrame, episodes: DataFrame) -> DataFrame:
    """Per (date, broker, queue), over runs: time stopped, share, episodes, worst overshoot and
    the largest overshoot bound of the episodes that started that day."""
    bounds = episodes.groupBy(F.col("start_date").alias("date"), "broker", "queue").agg(
        F.max("overshoot_bound_msgs").alias("overshoot_bound_msgs")
    )
    daily = queue_daily.groupBy("date", "broker", "queue").agg(
        F.sum("time_stopped_s").alias("time_stopped_s"),
        F.sum("observed_s").alias("observed_s"),
        F.sum("episodes").alias("episodes"),
        F.max("max_overshoot_msgs").alias("max_overshoot_msgs"),
        F.max("max_overshoot_ratio").alias("max_overshoot_ratio"),
    )
    return (
        daily.join(bounds, ["date", "broker", "queue"], "left")
        .withColumn(
            "stopped_share",
            F.when(F.col("observed_s") > 0, F.col("time_stopped_s") / F.col("observed_s")),
        )
        .orderBy("broker", "queue", "date")
    )


def link_days(link_daily: DataFrame) -> DataFrame:
    """Per (date, broker, link), over runs: starved seconds, starvations, share of attached time."""
    return (
        link_daily.groupBy("date", "broker", "link")
        .agg(
            F.max("link_role").alias("link_role"),
            F.sum("starved_s").alias("starved_s"),
            F.sum("attached_s").alias("attached_s"),
            F.sum("episodes").alias("episodes"),
        )
        .withColumn(
            "starved_share",
            F.when(F.col("attached_s") > 0, F.col("starved_s") / F.col("attached_s")),
        )
        .orderBy("broker", "link", "date")
    )


def latest_recommendations(recommendations: DataFrame) -> DataFrame:
    """The rows of the latest as-of day in the table."""
    latest = recommendations.agg(F.max("date").alias("latest"))
    return (
        recommendations.join(latest, F.col("date") == F.col("latest"))
        .select("date", *RECOMMENDATION_COLUMNS)
        .orderBy("entity_kind", "broker", "entity")
    )


#: The gold tables the page shows (it also reads the silver queue_flow_episodes for bounds).
GOLD_TABLES: tuple[TableSchema, ...] = (
    QUEUE_FLOW_DAILY,
    LINK_STARVATION_DAILY,
    THRESHOLD_RECOMMENDATIONS,
)


def no_gold_tables(conf: PipelineConf) -> str | None:
    """Why the dashboard of a local warehouse would be empty (none of its gold tables is a Delta
    table: a mistyped ``--warehouse``, or no pipeline run yet), else None. Checked on the file
    system, before Spark starts; a URI warehouse is not checked (its tables are never known
    missing here)."""
    paths = [
        table_path(conf, QUEUE_FLOW_DAILY),
        table_path(conf, LINK_STARVATION_DAILY),
        recommendations_path(conf),
    ]
    if not all(local_table_missing(path) for path in paths):
        return None
    gold = Path(paths[0]).parent
    names = ", ".join(schema.name for schema in GOLD_TABLES)
    return f"no gold tables under {gold} ({names}); run flowctl pipeline first"


def _read(spark: SparkSession, conf: PipelineConf, path: str, schema: TableSchema) -> DataFrame:
    """The table at ``path``; a local one that does not exist reads as empty and is NOT created
    (the dashboard only reads the warehouse)."""
    if local_table_missing(path):
        return spark.createDataFrame([], schema.to_spark())
    ensure_table(spark, path, schema)
    return spark.read.format("delta").load(path)


def dashboard_data(spark: SparkSession, conf: PipelineConf) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready lists of dicts."""

    def read(schema: TableSchema) -> DataFrame:
        return _read(spark, conf, table_path(conf, schema), schema)

    recommendations = _records(
        latest_recommendations(
            _read(spark, conf, recommendations_path(conf), THRESHOLD_RECOMMENDATIONS)
        )
    )
    return {
        "queues": _records(queue_days(read(QUEUE_FLOW_DAILY), read(QUEUE_FLOW_EPISODES))),
        "links": _records(link_days(read(LINK_STARVATION_DAILY))),
        "recommendations": recommendations,
        "recommendations_as_of": recommendations[0]["date"] if recommendations else None,
        "warehouse": conf.warehouse_dir,
    }


#: Characters that must not appear as themselves in JSON inside a <script> element: "<" and ">"
#: can open "<!--", "<script" or "</script" (the HTML parser then swallows the rest of the page,
#: whatever a queue is named), "&" a character reference; U+2028 / U+2029 end a JavaScript line.
#: Each is written as its JSON escape, which JSON.parse reads back as the same character.
_SCRIPT_UNSAFE = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe inside an HTML ``<script type="application/json">``."""
    return json.dumps(data, sort_keys=True, allow_nan=False).translate(_SCRIPT_UNSAFE)


def render_html(data: dict[str, Any], title: str = "flowctl — broker flow control") -> str:
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", json_for_script(data))


def out_file_problem(out_path: str | Path) -> str | None:
    """Why the page cannot be written to ``out_path`` (a folder, or under a file), else None:
    checked before Spark starts, so that a typo does not cost the whole read."""
    out = Path(out_path)
    if out.is_dir():
        return f"--out {out}: is a folder; give the page's file name (e.g. {out / 'report.html'})"
    for folder in out.parents:
        if folder.exists():
            return None if folder.is_dir() else f"--out {out}: {folder} is a file, not a folder"
    return None


def render_dashboard(spark: SparkSession, conf: PipelineConf, out_path: str | Path) -> Path:
    """Write the dashboard page to ``out_path`` (parent folders created); returns its path."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(dashboard_data(spark, conf)), encoding="utf-8")
    return out.resolve()


def main(argv: list[str] | None = None) -> int:
    from jobs.spark_session import build_spark_session

    parser = JobArgumentParser(description="Render the flowctl dashboard (one HTML file)")
    parser.add_argument(
        "--conf", help="pipeline YAML (default: $FLOWCTL_CONF or conf/pipeline.yaml)"
    )
    parser.add_argument("--out", default="var/dashboard.html", help="where to write the page")
    args = parser.parse_args(argv)
    try:
        conf = load_conf(args.conf)
    except ConfError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    refused = no_gold_tables(conf) or out_file_problem(args.out)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    try:
        spark = build_spark_session(conf, app_name="flowctl-dashboard")
    except ConfError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"dashboard: {render_dashboard(spark, conf, args.out)}")
    return 0


_PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --ink:#1d2733; --muted:#66768a; --line:#d8dee6; --bar:#3d7cc9; --bound:#d2452f;
          --ok:#2f8f5b; --warn:#c27c0e; --bad:#c0392b; }
  body { font: 14px/1.45 system-ui, sans-serif; color: var(--ink); margin: 24px;
         background: #f7f9fb; }
  h1 { font-size: 22px; margin: 0 0 4px; }
  h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
       padding-bottom: 4px; }
  .muted { color: var(--muted); }
  .grid { display: flex; flex-wrap: wrap; gap: 16px; }
  .card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
  .card h3 { font-size: 14px; margin: 0 0 6px; }
  svg text { font-size: 10px; fill: var(--muted); }
  svg .value { fill: var(--ink); }
  rect.bar { fill: var(--bar); }
  line.bound { stroke: var(--bound); stroke-width: 2; stroke-dasharray: 4 3; }
  table { border-collapse: collapse; background: #fff; width: 100%; }
  th, td { border: 1px solid var(--line); padding: 4px 6px; text-align: right;
           vertical-align: top; }
  th { background: #eef2f6; }
  th.text, td.text { text-align: left; }
  td[data-column="rationale"] { min-width: 320px; }
  .verdict { font-weight: 600; border-radius: 3px; padding: 1px 5px; color: #fff;
             white-space: nowrap; }
  .v-keep { background: var(--ok); } .v-raise, .v-lower { background: var(--warn); }
  .v-flapping { background: #8e44ad; } .v-at_risk_of_overflow { background: var(--bad); }
  .empty { color: var(--muted); font-style: italic; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<div class="muted" id="subtitle"></div>

<h2>Time stopped per queue and day</h2>
<div class="grid" id="time-stopped"></div>

<h2>Worst overshoot per queue and day, against its bound</h2>
<div class="muted">Bars: peak depth past the stop threshold (messages). Dashed line: the sum of the
producers' capacities (Qpid's bound on the overshoot).</div>
<div class="grid" id="overshoot"></div>

<h2>Credit starvation per link and day</h2>
<div class="grid" id="starvation"></div>

<h2>Recommendations</h2>
<div id="recommendations"></div>

<script id="flowctl-data" type="application/json">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("flowctl-data").textContent);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}
function fmt(value, digits) {
  if (value === null || value === undefined) return "\u2013";
  return Number(value).toLocaleString("en-US", {maximumFractionDigits: digits ?? 1});
}
function groupBy(rows, key) {
  const groups = new Map();
  for (const row of rows) {
    const k = key(row);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(row);
  }
  return groups;
}

// One small bar chart: a bar per day, its value printed on top, an optional dashed bound per day.
function barChart(title, rows, value, unit, bound, kind, name) {
  const card = el("div", {class: "card", "data-chart": kind, "data-name": name,
                          "data-broker": rows[0].broker});
  card.appendChild(el("h3", {}, title));
  const width = Math.max(200, 70 * rows.length + 70), height = 150, top = 18, bottom = 22;
  const peak = Math.max(1, ...rows.map(r => Math.max(value(r) || 0, bound ? bound(r) || 0 : 0)));
  const scale = v => (height - top - bottom) * (v || 0) / peak;
  const svg = el("svg:svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img"});
  rows.forEach((row, i) => {
    const x = 30 + i * 70, v = value(row), h = scale(v), base = height - bottom;
    const bar = el("svg:rect", {class: "bar", x, y: base - h, width: 40, height: Math.max(h, 0.5),
                                "data-date": row.date, "data-value": v ?? ""});
    bar.appendChild(el("svg:title", {}, `${name} ${row.date}: ${fmt(v, 3)} ${unit}`));
    svg.appendChild(bar);
    svg.appendChild(el("svg:text", {class: "value", x: x + 20, y: base - h - 4,
                                    "text-anchor": "middle"}, fmt(v)));
    svg.appendChild(el("svg:text", {x: x + 20, y: height - 6, "text-anchor": "middle"},
                       row.date.slice(5)));
    if (bound && bound(row) !== null && bound(row) !== undefined) {
      const y = base - scale(bound(row));
      const line = el("svg:line", {class: "bound", x1: x - 6, x2: x + 46, y1: y, y2: y,
                                   "data-bound": bound(row)});
      line.appendChild(el("svg:title", {}, `bound ${fmt(bound(row), 0)} ${unit}`));
      svg.appendChild(line);
      svg.appendChild(el("svg:text", {x: x + 48, y: y + 3}, `bound ${fmt(bound(row), 0)}`));
    }
  });
  card.appendChild(svg);
  return card;
}

function fill(containerId, groups, make) {
  const container = document.getElementById(containerId);
  if (groups.size === 0) {
    container.appendChild(el("div", {class: "empty"}, "no data in the gold table yet"));
    return;
  }
  for (const [key, rows] of groups) container.appendChild(make(key, rows));
}

const byQueue = groupBy(data.queues, r => `${r.broker} / ${r.queue}`);
fill("time-stopped", byQueue, (key, rows) => {
  const total = rows.reduce((s, r) => s + (r.time_stopped_s || 0), 0);
  const episodes = rows.reduce((s, r) => s + r.episodes, 0);
  return barChart(`${key} — ${fmt(total)} s stopped, ${episodes} episodes`,
                  rows, r => r.time_stopped_s, "s stopped", null, "time-stopped", rows[0].queue);
});
fill("overshoot", byQueue, (key, rows) => {
  // Null overshoot: no episode that day, or the count threshold is off. Not a measured 0.
  const measured = rows.map(r => r.max_overshoot_msgs).filter(v => v !== null && v !== undefined);
  const title = measured.length
    ? `${key} — worst ${fmt(Math.max(...measured), 0)} msgs`
    : `${key} — no overshoot measured (no episodes, or the count threshold is off)`;
  return barChart(title, rows, r => r.max_overshoot_msgs, "msgs", r => r.overshoot_bound_msgs,
                  "overshoot", rows[0].queue);
});
fill("starvation", groupBy(data.links, r => `${r.broker} / ${r.link}`), (key, rows) => barChart(
  `${key} (${rows[0].link_role || "?"}) — ` +
  `${fmt(rows.reduce((s, r) => s + r.starved_s, 0))} s starved`,
  rows, r => r.starved_s, "s starved", null, "starvation", rows[0].link));

(function recommendations() {
  const container = document.getElementById("recommendations");
  if (data.recommendations.length === 0) {
    container.appendChild(el("div", {class: "empty"}, "no recommendations yet"));
    return;
  }
  // Queue and link names repeat across brokers: the broker tells the rows apart.
  const columns = [
    ["broker", "broker", "text"],
    ["entity", "queue / link", "text"], ["entity_kind", "kind", "text"],
    ["verdict", "verdict", "verdict"],
    ["current_flow_stop_count", "stop msgs now"], ["recommended_flow_stop_count", "stop msgs rec."],
    ["current_flow_resume_count", "resume msgs now"],
    ["recommended_flow_resume_count", "resume msgs rec."],
    ["current_flow_stop_size", "stop bytes now"], ["recommended_flow_stop_size", "stop bytes rec."],
    ["current_credit", "credit now"], ["recommended_credit", "credit rec."],
    ["episodes", "episodes"], ["time_stopped_s", "stopped s"],
    ["max_overshoot_msgs", "worst overshoot"], ["producer_capacity_sum", "bound"],
    ["rationale", "rationale", "text"],
  ];
  const table = el("table", {id: "recommendations-table"});
  const head = el("tr");
  for (const [, label, kind] of columns) {
    head.appendChild(el("th", {class: kind ? "text" : ""}, label));
  }
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  for (const row of data.recommendations) {
    const tr = el("tr", {"data-entity": row.entity, "data-verdict": row.verdict,
                         "data-broker": row.broker});
    for (const [key, , kind] of columns) {
      const td = el("td", {class: kind ? "text" : "", "data-column": key});
      if (kind === "verdict") td.appendChild(el("span", {class: `verdict v-${row.verdict}`},
                                                row.verdict.replaceAll("_", " ")));
      else td.textContent = kind ? (row[key] ?? "") : fmt(row[key], 3);
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  container.appendChild(table);
})();

const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;
document.getElementById("subtitle").textContent =
  `${plural(byQueue.size, "queue")}, ` +
  `${plural(groupBy(data.links, r => `${r.broker} / ${r.link}`).size, "link")}; ` +
  `recommendations as of ${data.recommendations_as_of || "\u2013"}; warehouse ${data.warehouse}`;
document.body.setAttribute("data-rendered", "true");
</script>
</body>
</html>
"""


if __name__ == "__main__":
    from jobs.failures import run_entry_point

    sys.exit(run_entry_point("dashboard", main))

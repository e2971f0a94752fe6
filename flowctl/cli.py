"""The ``flowctl`` command line: the engine's runs, the Spark pipeline, what-if and the real
brokers' collectors, in one tool.

Each command is a thin function over the engine (flowctl_core) or the jobs (imported when the
command runs, so the engine's commands start without Spark); what they print is flowctl/render.py.

It stays one module although nearly 800 lines: every command registers on the one typer
``app`` here and shares its failure wrapper and its conf and Spark helpers, so the whole command
line (options, exit codes, the checks made before Spark starts) reads in one place.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from flowctl.render import (
    console,
    err_console,
    format_figures,
    format_ingest_report,
    print_daily_metrics,
    print_dict_table,
    print_line,
    print_pipeline_status,
    print_starved_links,
    print_summary,
    print_sweep,
    recommendations_line,
)
from flowctl.whatif import (
    load_recommendation_rows,
    recommendation_day,
    recommendation_days,
    whatif_knobs,
)
from flowctl_core.errors import FlowctlError
from flowctl_core.flowlimit import FlowConfigError, FlowThresholds
from flowctl_core.runner import RunResult, default_run_id, run_scenario
from flowctl_core.scenario import Scenario, ScenarioError, bundled_scenarios, load_scenario
from flowctl_core.sink import ParquetSink, SinkError, rows_in_files, run_files
from flowctl_core.whatif import (
    declared_queues,
    overrides_from_recommendations,
    queue_verdicts,
    queues_with_threshold_steps,
    run_whatif,
    without_artemis_queues,
)
from flowctl_core.whatif_knobs import format_knob_comparison
from flowctl_core.wording import counted
from schemas.model import US_PER_SECOND

app = typer.Typer(
    help="flowctl: how broker flow control really behaves, and what thresholds to set.",
    no_args_is_help=True,
    add_completion=False,
)


def _flags_take_no_value() -> None:
    """typer 0.29's help shows ``<bool>`` beside an on/off flag (``--check``, ``--help``),
    which refuses a value (``--check true``: "unexpected extra argument"): a flag's type column
    is left empty, as click's own help leaves it."""
    from typer.core import TyperOption

    if not hasattr(TyperOption, "display_type_rich"):  # an older typer: nothing to mend
        return
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and not self.count else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        console.print(f"flowctl {version('flowctl')}", highlight=False)
        raise typer.Exit


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="print flowctl's version and exit",
        ),
    ] = False,
) -> None:
    """flowctl: how broker flow control really behaves, and what thresholds to set."""


#: The days a refusal of ``--as-of`` lists of those the table holds (the earliest, all after it).
_DAYS_LISTED = 5


def main(args: list[str] | None = None) -> None:
    """The ``flowctl`` command: :data:`app`, with a usage error (an unknown command or option, a
    value of the wrong type) said in one ``error:`` line like flowctl's own, not a box of five.
    Typer's click (its own copy in newer releases) is reached through its public BadParameter."""
    click_error: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    given = sys.argv[1:] if args is None else args
    refused = _refused_options(given)
    if refused is not None:
        _fail(refused)
        sys.exit(2)
    try:
        code = app(args=args, prog_name="flowctl", standalone_mode=False)
    except click_error as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # `flowctl` alone: its help
            error.show()
            sys.exit(error.exit_code)
        context = getattr(error, "ctx", None)
        where = context.command_path if context is not None else "flowctl"
        _fail(f"{where}: {error.format_message()} (see `{where} --help`)")
        sys.exit(error.exit_code)
    except typer.Abort:
        _fail("aborted")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _refused_options(args: list[str]) -> str | None:
    """What is wrong with ``args``, else None, in one pass over the command's options, each
    paired with its value (whatever it looks like: `--run-id --out`):

    - an option that takes one value given twice, or a flag and its opposite: click keeps the
      last, so `sweep --values 1000 --values 2000` swept 2,000 alone and `--recommend
      --no-recommend` said nothing (a review);
    - a path option given an empty value (`--out ""`): typer reads it as ``.``, and simulate
      wrote its event log into the working directory (a review)."""
    from typer.main import get_command

    command: Any = get_command(app)
    path = ["flowctl"]
    rest = list(args)
    while rest and rest[0] in getattr(command, "commands", {}):
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    where = " ".join(path)
    options = {
        name: param
        for param in command.params
        if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    }
    given: dict[str, str] = {}
    empty: str | None = None
    tokens = iter(rest)
    for token in tokens:
        if token == "--":  # what follows is no option
            break
        name, equals, inline = token.partition("=")
        param = options.get(name)
        if param is None:
            continue
        value: str | None = inline if equals else None
        if not (param.is_flag or param.count or equals):
            value = next(tokens, None)  # its value, whatever it looks like
        is_path = getattr(getattr(param, "type_descriptor", None), "is_path", False)
        if is_path and value == "" and empty is None:
            empty = f"{where}: {name} is empty; give a path"
        if param.multiple or param.count:
            continue
        if param.name in given:
            first = given[param.name]
            if first == name:
                return f"{where}: {name} is given twice; give it once (one value)"
            return f"{where}: {first} and {name} are opposites; give one of them"
        given[param.name] = name
    return empty


PROJECT_DIR = Path(__file__).resolve().parent.parent
DEMO_DIR = PROJECT_DIR / "var" / "demo"


def _error_line(line: str) -> Text:
    """``line`` with its first ``error:`` in bold red (the console prints no markup)."""
    text = Text(line)
    at = line.find("error:")
    if at >= 0:
        text.stylize("bold red", at, at + len("error:"))
    return text


def _warn(message: str, stamp: str = "") -> None:
    """A warning line on stderr, ``stamp`` (a collector's time) before it."""
    err_console.print(
        Text.assemble(stamp, ("warning:", "bold yellow"), f" {message}"), highlight=False
    )


def _fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(Text.assemble(("error:", "bold red"), f" {message}"), highlight=False)
    return typer.Exit(code)


P = ParamSpec("P")
R = TypeVar("R")


#: The commands running, outermost first: an interruption is said once, by the command typed
#: (demo runs the pipeline's own decorated step, whose line named the pipeline: a review).
_COMMANDS: list[str] = []


def _one_line_failures(job: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Every failure inside the decorated command is one line and the exit code of its kind
    (jobs/failures.py, the one table): a :class:`FlowctlError`'s own message, or for a failure
    nobody foresaw (Spark, Delta, a bug) its cause with the trace in a log file. Ctrl-C and
    SIGTERM too, by the command typed (a pipeline interrupted printed two lines of Spark's
    executor and nothing of its own: a review)."""

    def decorate(command: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(command)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            from jobs.failures import report_failure, rule_for, sigterm_interrupts

            outermost = not _COMMANDS
            _COMMANDS.append(job)
            try:
                with sigterm_interrupts():
                    return command(*args, **kwargs)
            except (typer.Exit, SystemExit):
                raise
            except FlowctlError as error:  # its message is the line, as the user typed the command
                raise _fail(str(error), rule_for(error).exit_code) from None
            except (Exception, KeyboardInterrupt) as error:
                if isinstance(error, KeyboardInterrupt) and not outermost:
                    raise  # the command typed says it
                line, exit_code = report_failure(job, error)
                err_console.print(_error_line(line), highlight=False)
                raise typer.Exit(exit_code) from None
            finally:
                _COMMANDS.pop()

        return run

    return decorate


def _check_out_folder(out: Path, option: str = "--out") -> None:
    """Refuse, before anything is written, an event-log folder that is a file or lies under one
    (``option``: the command's name for it)."""
    for folder in (out, *out.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "is a file" if folder == out else f"is under {folder}, a file"
                raise SinkError(f"{option} {out}: {where}, not a folder")
            return


def _url_host_port(url: str, schemes: tuple[str, ...]) -> tuple[str, int | None] | None:
    """The host and port (None: not given) of ``url``, or None when its scheme is not one of
    ``schemes``, it names no host, or its port is no number."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in schemes or not parts.hostname:
        return None
    return parts.hostname, port


def _check_amqp_url(url: str) -> None:
    """Refuse a broker URL that is no ``amqp://host:port`` or whose host does not resolve,
    before anything is written (it crashed the probe as an unexpected error; an audit)."""
    from collectors.probe import url_shown

    address = _url_host_port(url, ("amqp", "amqps"))
    if address is None:
        raise _fail(f"{url_shown(url)}: not a broker URL: amqp://[user:password@]host:port")
    host, port = address
    try:
        socket.getaddrinfo(host, port or 5672)
    except OSError as error:
        raise _fail(f"{url_shown(url)}: host {host!r} not found ({error})") from None


def _check_http_url(url: str, option: str) -> None:
    """Refuse an API URL that is no ``http(s)://host[:port]/...`` before the collector starts:
    urllib's "unknown url type" was taken for an API not answering yet, and sampling waited for
    it forever (an audit). The host is not looked up: an API that is down is waited for."""
    from collectors.probe import url_shown

    if _url_host_port(url, ("http", "https")) is None:
        raise _fail(f"{option} {url_shown(url)}: not an HTTP URL: http[s]://host[:port]/path")


#: Every command's ``--conf`` (jobs/config.py chooses the file in this order).
CONF_HELP = "pipeline conf (default: $FLOWCTL_CONF, else conf/pipeline.yaml)"


def _seed_in_range(seed: int | None) -> int | None:
    """``--seed`` within the range a scenario's ``seed`` takes (flowctl_core/scenario.py, a
    signed 64-bit integer), refused beyond it as the scenario file's is. A callback, not the
    option's min and max: those printed a 40-digit range in the help's type column."""
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise typer.BadParameter(f"{seed} is not a signed 64-bit integer (the scenario's seed)")
    return seed


SeedOption = Annotated[
    int | None,
    typer.Option(help="random seed (default: the scenario's)", callback=_seed_in_range),
]


def simulate_to(scenario_ref: str, out: Path, seed: int | None, run_id: str | None) -> RunResult:
    """Run one scenario into ``out``; a bad scenario raises before anything is written.

    A derived run id names exactly the events of this scenario and seed (the engine is
    deterministic), so when ``out`` already holds that run it is simulated again only for its
    summary, and nothing is written: the event log's files are never rewritten (DESIGN §3) and
    readers do not count the run twice. A run id given by hand must be new.
    """
    scenario = load_scenario(scenario_ref)
    _check_out_folder(out)
    if run_id == "":
        raise _fail("--run-id: empty; leave it out for the derived one")
    if scenario.kind == "scripted" and seed is not None and seed != scenario.seed:
        # Its steps draw nothing at random: another seed wrote the same events under another run
        # id, which readers then counted twice (a review).
        raise _fail(
            f"--seed {seed}: {scenario.name} is a scripted scenario; its steps draw nothing at "
            "random, so another seed only writes the same events under another run id"
        )
    seed = scenario.seed if seed is None else seed
    derived = run_id is None
    run_id = run_id or default_run_id(scenario, seed)
    existing = run_files(out, run_id) if derived else []
    sinks: list[ParquetSink] = [] if existing else [ParquetSink(out, run_id)]
    with (
        ExitStack() as stack,
        Progress(
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
            disable=not err_console.is_terminal,
        ) as progress,
    ):
        for sink in sinks:
            stack.enter_context(sink)
        task = progress.add_task(scenario.name, total=1.0)
        result = run_scenario(
            scenario,
            list(sinks),
            run_id=run_id,
            seed=seed,
            progress=lambda done: progress.update(task, completed=done),
        )
    if existing:
        stored = rows_in_files(existing)
        if stored != result.events:
            raise SinkError(
                f"{out} holds {stored:,} events of run {run_id} where this scenario and seed give "
                f"{result.events:,} (an interrupted run, or an older engine): delete "
                f"{out}/date=*/part-{run_id}-*.parquet (and any .part-{run_id}-*.inprogress) "
                "and simulate again, or pass --run-id"
            )
        err_console.print(
            f"run {run_id} is already in {out} with these {stored:,} events: nothing written",
            highlight=False,
        )
    return result


@app.command()
@_one_line_failures("simulate")
def simulate(
    scenario: Annotated[str, typer.Argument(help="scenario file, or the name of a bundled one")],
    out: Annotated[Path, typer.Option("--out", help="raw event-log folder (Hive date= layout)")],
    seed: SeedOption = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            help="run id (default: <name>-s<seed>-<digest of the scenario>; simulating the same "
            "scenario and seed again finds that run already written and writes nothing)"
        ),
    ] = None,
) -> None:
    """Run a scenario on the virtual clock and write its event log to Parquet."""
    try:
        result = simulate_to(scenario, out, seed, run_id)
    except OSError as error:  # a folder that cannot be written: no traceback
        raise _fail(f"--out {out}: cannot write the event log: {error}") from None
    print_summary(result, out)


@app.command()
def scenarios() -> None:
    """List the bundled scenarios."""
    table = Table(title="bundled scenarios")
    table.add_column("name")
    table.add_column("kind")
    table.add_column("description")
    for path in bundled_scenarios():
        try:
            spec = load_scenario(path)
        except ScenarioError as error:
            table.add_row(path.stem, "invalid", str(error).splitlines()[-1])
            continue
        table.add_row(spec.name, spec.kind, spec.description)
    console.print(table)


def _parse_date(value: str, option: str) -> date:
    from jobs.cli import DATE_SHAPE, impossible_date

    if not DATE_SHAPE.fullmatch(value):
        raise _fail(f"{option}: expected YYYY-MM-DD, got {value!r}")
    try:
        return date.fromisoformat(value)
    except ValueError as error:
        raise _fail(f"{option}: {impossible_date(value, error)}") from None


def _pipeline_conf(conf: Path | None, warehouse: Path | None) -> Any:
    import dataclasses

    from jobs.config import load_conf

    if warehouse is not None:
        # Said as a folder's mistake, not as a table missing under it (a review).
        _check_out_folder(warehouse, "--warehouse")
    loaded = load_conf(str(conf) if conf else None)
    return dataclasses.replace(loaded, warehouse_dir=str(warehouse)) if warehouse else loaded


def _spark_session(pipeline_conf: Any, app_name: str) -> Any:
    """The pipeline's SparkSession; Spark settings it refuses raise a ConfError (one line)."""
    from jobs.spark_session import build_spark_session

    return build_spark_session(pipeline_conf, app_name=app_name)


def _recommend_policy(policy: Path | None) -> Any:
    """The recommendation policy (default conf/recommend.yaml), loaded before Spark starts: a
    policy that cannot be used raises a ConfError (one line, exit status 2)."""
    from jobs.recommend import load_policy

    return load_policy(policy)


class JobProgress:
    """A pipeline job's progress on the terminal: a spinner naming the job while it runs (a job
    takes minutes on a large day; the command printed nothing meanwhile, a README walk-through),
    then a line with its seconds. Output that is not a terminal gets the lines only."""

    def __init__(self, days: str) -> None:
        self.days = days
        self._status: Any = None

    def __call__(self, job: str, seconds: float | None) -> None:
        self.stop()
        if seconds is None:
            self._status = console.status(f"{job} {self.days} ...")
            self._status.start()
        else:
            console.print(f"{job} {self.days}: done in {seconds:,.1f} s", highlight=False)

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _refuse_missing_raw_before_spark(conf: Any, raw_root: str, first: date, last: date) -> None:
    """The ingest's refusals of a raw folder that is not there and of days none of which has a
    raw file (a mistyped day), before Spark starts (5-14 s). Local folders only (a URI is
    Spark's to read); the days only where bronze has no folder of them (else the ingest's
    sharper refusal, that ingesting would delete them, needs its Delta log)."""
    from jobs.delta_io import table_path
    from jobs.ingest_refusals import no_raw_files_text
    from jobs.pipeline_state import days_between
    from jobs.raw_files import days_with_raw_files
    from schemas.tables import BRONZE_BROKER_EVENTS

    if ":" in raw_root:
        return
    if not Path(raw_root).is_dir():
        raise _fail(
            f"ingest refused, nothing written: raw folder {raw_root} does not exist (a wrong "
            "--raw or paths.raw?)"
        )
    bronze = table_path(conf, BRONZE_BROKER_EVENTS)
    if "://" in bronze:
        return
    days = days_between(first, last)
    if days_with_raw_files(raw_root, days):
        return
    if any(Path(bronze, f"date={day.isoformat()}").exists() for day in days):
        return
    raise _fail(f"ingest refused, nothing written: {no_raw_files_text(raw_root, first, last)}")


@_one_line_failures("pipeline")
def _run_pipeline_and_print(
    conf: Path | None,
    first: date,
    last: date,
    raw: Path | None,
    warehouse: Path | None = None,
    *,
    recommend: bool = True,
    dashboard: Path | None = None,
    allow_empty_days: bool = False,
    policy: Path | None = None,
) -> dict[str, object]:
    """ingest -> episodes -> daily_metrics (-> recommend) on one session, then print the gold.

    The pipeline conf and the recommendation policy are loaded first: either one unusable exits
    2 before Spark starts or anything is written."""
    from jobs.ingest import IngestRefused
    from jobs.pipeline import most_stopped_queue_rows, run_pipeline, starved_link_rows

    pipeline_conf = _pipeline_conf(conf, warehouse)
    recommend_policy = _recommend_policy(policy) if recommend else None
    raw_root = str(raw) if raw else pipeline_conf.raw_dir
    if not allow_empty_days:
        _refuse_missing_raw_before_spark(pipeline_conf, raw_root, first, last)
    spark = _spark_session(pipeline_conf, "flowctl")
    conf_path = str(conf) if conf else None
    warehouse_dir = str(warehouse) if warehouse else None
    progress = JobProgress(f"{first}..{last}" if last != first else str(first))
    try:
        outcome = run_pipeline(
            conf_path,
            first,
            last,
            str(raw) if raw else None,
            warehouse_dir=warehouse_dir,
            spark=spark,
            allow_empty_days=allow_empty_days,
            on_step=progress,
        )
    except IngestRefused as refused:
        raise _fail(f"ingest refused, nothing written: {refused}") from None
    finally:
        progress.stop()
    seconds = dict(outcome.get("seconds") or {})

    def report() -> None:
        """What ingest, episodes and daily_metrics wrote."""
        print_daily_metrics(
            *most_stopped_queue_rows(
                conf_path, first, last, warehouse_dir=warehouse_dir, spark=spark
            )
        )
        print_starved_links(
            *starved_link_rows(conf_path, first, last, warehouse_dir=warehouse_dir, spark=spark)
        )
        print_line(format_ingest_report(dict(outcome.get("ingest") or {})))

    recommended: dict[str, Any] | None = None
    # Every job runs before the report prints: recommend (minutes on the demo's days) after the
    # tables left a reader waiting on a spinner below what looked like the end (a new user's
    # trial of `make demo`).
    if recommend and outcome.get("ok"):
        from jobs.recommend import run_recommend

        progress("recommend", None)
        started = time.perf_counter()
        try:
            recommended = run_recommend(spark, pipeline_conf, first, last, recommend_policy)
        except Exception:
            # The jobs before it committed their days: their report still prints, then the
            # error line (a failing report cannot hide recommend's error).
            progress.stop()
            with suppress(Exception):
                report()
            raise
        finally:
            progress.stop()
        seconds["recommend"] = round(time.perf_counter() - started, 3)
        progress("recommend", seconds["recommend"])
    report()
    if not outcome.get("ok"):
        raise _fail("ingest accounting or Great Expectations validation failed", code=1)
    if recommended is not None:
        print_line(recommendations_line(recommended))
    print_line(f"seconds per job: {format_figures(seconds)}")
    if dashboard is not None:
        from jobs.dashboard import render_dashboard

        written = render_dashboard(spark, pipeline_conf, dashboard)
        console.print(f"dashboard: {written}", highlight=False)
    return outcome


@app.command()
@_one_line_failures("pipeline")
def pipeline(
    date_from: Annotated[str, typer.Option("--from", help="first day, YYYY-MM-DD")],
    date_to: Annotated[str | None, typer.Option("--to", help="last day (default: --from)")] = None,
    conf: Annotated[Path | None, typer.Option(help=CONF_HELP)] = None,
    raw: Annotated[
        Path | None, typer.Option(help="raw event-log folder (default from conf)")
    ] = None,
    warehouse: Annotated[
        Path | None, typer.Option(help="Delta warehouse (default: the conf's)")
    ] = None,
    recommend: Annotated[bool, typer.Option(help="also write the days' recommendations")] = True,
    policy: Annotated[
        Path | None,
        typer.Option(help="recommendation policy YAML (default conf/recommend.yaml)"),
    ] = None,
    allow_empty_days: Annotated[
        bool,
        typer.Option(
            # One name: its off form (--no-allow-empty-days, the default) was cut in the help's
            # column at 80 columns.
            "--allow-empty-days",
            help="replace days that bronze holds with what raw has even when files bronze "
            "read are gone (refused by default: it usually means a wrong --raw)",
        ),
    ] = False,
) -> None:
    """Run ingest -> episodes -> daily_metrics (-> recommend) in-process on local Spark + Delta."""
    first = _parse_date(date_from, "--from")
    last = _parse_date(date_to, "--to") if date_to else first
    if last < first:
        raise _fail(f"--to {last} is before --from {first}")
    if policy is not None and not recommend:
        # Said, not refused: a wrapper that always gives --policy may leave recommend out.
        _warn("--policy is not read: only recommend reads it, and --no-recommend leaves it out")
    _run_pipeline_and_print(
        conf,
        first,
        last,
        raw,
        warehouse,
        recommend=recommend,
        allow_empty_days=allow_empty_days,
        policy=policy,
    )


@app.command()
@_one_line_failures("whatif")
def whatif(
    scenario: Annotated[str, typer.Argument(help="scenario file, or the name of a bundled one")],
    recommendations: Annotated[
        # A string, not a Path: a Path would fold the '//' of a URI (s3a://bucket/...).
        str | None,
        typer.Option(
            help="threshold_recommendations Delta table, a folder or a URI "
            "(default: the warehouse's gold one)"
        ),
    ] = None,
    warehouse: Annotated[
        Path | None,
        typer.Option(help="Delta warehouse whose recommendations to replay (default: the conf's)"),
    ] = None,
    conf: Annotated[Path | None, typer.Option(help=CONF_HELP)] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            help="recommendations as of this day, YYYY-MM-DD: the latest the table holds on or "
            "before it (default: the latest)"
        ),
    ] = None,
    seed: SeedOption = None,
) -> None:
    """Rerun a scenario with the recommended settings; print before / after per queue or knob.

    Qpid thresholds are replayed together; other brokers' knobs (Artemis max-size-bytes, reject
    threshold, producer/consumer windows; RabbitMQ link credit, prefetch, x-max-length) one row
    at a time, each failing when the re-run does not do what its verdict is for.
    Exits 1 when a recommendation changes a queue's thresholds but fails what the change is for:
    a stop threshold lowered or switched on must cut the overshoot, the rejections or the
    evictions without more time stopped; stop thresholds only raised or switched off must cut
    the time stopped or the episodes without more rejections (or evictions, on a ring queue);
    resume thresholds only (flapping) must cut the episodes without more rejections or
    evictions.
    """
    spec = load_scenario(scenario)
    as_of_day = _parse_date(as_of, "--as-of") if as_of else None
    from jobs.delta_io import local_table_missing
    from jobs.recommend import recommendations_path

    if recommendations == "":
        raise _fail("--recommendations: empty; give the table's folder or URI")
    if recommendations is not None and warehouse is not None:
        raise _fail("--recommendations and --warehouse: give one (the table, or its warehouse)")
    if recommendations and Path(recommendations).is_file():
        raise _fail(f"--recommendations {recommendations}: is a file, not a Delta table's folder")
    pipeline_conf = _pipeline_conf(conf, warehouse)
    table = recommendations or recommendations_path(pipeline_conf)
    # A local table is checked before Spark starts; a URI (s3a://, ...) is Spark's to read.
    if local_table_missing(table):
        raise _fail(f"{table}: not a Delta table (run `flowctl pipeline` first)")
    spark = _spark_session(pipeline_conf, "flowctl-whatif")
    try:
        days = recommendation_days(spark, table, spec.broker.name)
        day = recommendation_day(days, as_of_day)
        # One read of the day's rows: its Qpid thresholds and its other knobs come from them.
        rows = (
            []
            if day is None
            else load_recommendation_rows(spark, table, day=day, broker=spec.broker.name)
        )
        overrides = overrides_from_recommendations(rows)
    except ValueError as error:
        raise _fail(f"{table}: {error}") from None
    if day is None and days:  # the broker's recommendations all come after --as-of
        held = ", ".join(d.isoformat() for d in days[:_DAYS_LISTED])
        more = f" (and {len(days) - _DAYS_LISTED} later)" if len(days) > _DAYS_LISTED else ""
        raise _fail(
            f"{table}: no recommendations for broker {spec.broker.name!r} on or before "
            f"{as_of_day}; the table holds {held}{more}"
        )
    if day is None or not rows:
        raise _fail(
            f"{table}: no recommendations for broker {spec.broker.name!r} (run `flowctl "
            f"pipeline` over the days of scenario {spec.name!r}, or give --warehouse)"
        )
    _say_what_is_replayed(spark, pipeline_conf, table, spec.broker.name, day, as_of_day)
    # Other brokers' knobs (Artemis, RabbitMQ) are replayed one row at a time.
    failed = False
    knob_comparisons = whatif_knobs(rows, spec, seed=seed)
    for knob_comparison in knob_comparisons:
        console.print(format_knob_comparison(knob_comparison), highlight=False)
        failed |= bool(knob_comparison.failures())  # an unexercised change fails nothing
    overrides, _ = without_artemis_queues(spec, overrides)
    if overrides:
        failed |= _print_threshold_whatif(spec, overrides, table, seed)
    elif not knob_comparisons:
        console.print(_nothing_to_replay(spec.broker.name, rows), highlight=False)
    if failed:  # a changed setting that does no better: fail, so that a deploy can gate on it
        raise typer.Exit(1)


def _say_what_is_replayed(
    spark: Any, pipeline_conf: Any, table: str, broker: str, day: date, as_of: date | None = None
) -> None:
    """Which day's recommendations are replayed, and from where (the same title came with or
    without --as-of: a review), and the day asked for when the table holds none of it; a warning
    when the warehouse's own recommendations of that day are behind bronze, as ``flowctl
    status`` would say."""
    asked = f" (the latest on or before {as_of})" if as_of is not None and as_of != day else ""
    print_line(f"recommendations for broker {broker!r} as of {day}{asked}, from {table}")
    from jobs.pipeline_state import RECOMMEND, behind_days, read_records
    from jobs.recommend import recommendations_path

    def where(path: str) -> str:  # a local table however spelled (relative, a trailing /)
        return path if "://" in path else str(Path(path).resolve())

    if where(table) != where(recommendations_path(pipeline_conf)):
        return  # another table: the warehouse's state says nothing of it
    behind = behind_days(read_records(spark, pipeline_conf), RECOMMEND).get(day)
    if behind is not None:
        _warn(
            f"the recommendations of {day} are behind bronze ({behind}): "
            f"`flowctl pipeline --from {day}` brings them up to date"
        )


def _nothing_to_replay(broker: str, rows: list[dict[str, Any]]) -> str:
    """The line for a broker none of whose recommendations changes a setting: what each keeps."""
    kept = sorted(
        f"{row['entity']} {row['knob']} "
        f"{'none' if row.get('current_value') is None else format(row['current_value'], ',')}"
        for row in rows
    )
    return (
        f"nothing to replay: every recommendation for broker {broker!r} keeps its setting "
        f"({'; '.join(kept)})"
    )


def _print_threshold_whatif(
    spec: Scenario, overrides: dict[str, FlowThresholds], table: str, seed: int | None
) -> bool:
    """Replay the Qpid threshold overrides together and print before / after and each queue's
    verdict; whether a changed threshold failed what the change is for."""
    try:
        comparison = run_whatif(spec, overrides, seed=seed)
    except FlowConfigError as error:
        raise _fail(f"{table}: recommended thresholds rejected by the engine: {error}") from None
    print_dict_table(
        f"what-if {comparison.scenario} (seed {comparison.seed}): as written -> recommended",
        comparison.printed_rows(),
    )
    if comparison.ignored_overrides:
        console.print(
            f"not in this scenario: {', '.join(comparison.ignored_overrides)}",
            highlight=False,
        )
    uncovered = set(declared_queues(spec)) - set(overrides)
    stepped = queues_with_threshold_steps(spec)
    failed = False
    for queue, verdict, queue_failed in queue_verdicts(comparison):
        if queue in uncovered:
            verdict = f"no recommendation in {table} (run the pipeline over this scenario's days)"
        elif queue in stepped:
            # The run's own set_thresholds step overrides the recommendation: nothing to judge.
            verdict = (
                "not validated: a set_thresholds step of the scenario changes its thresholds "
                "during the run, over the recommended ones (replay a copy without the step)"
            )
            queue_failed = False
        console.print(f"{queue}: {verdict}", highlight=False)
        failed |= queue_failed
    return failed


@app.command()
@_one_line_failures("sweep")
def sweep(
    scenario: Annotated[str, typer.Argument(help="scenario file, or the name of a bundled one")],
    knob: Annotated[
        str,
        typer.Option(
            # The names are listed in the docstring, which has the whole width: in this
            # column, at 80, long ones were cut to "qpid.flow_stop_co…" (a review).
            help="the knob to sweep (the knobs are listed above)"
        ),
    ],
    entity: Annotated[
        str,
        typer.Option(help="the queue, Artemis address or consumer the knob is set on"),
    ],
    values: Annotated[
        str,
        typer.Option(
            help="values: integers and ranges, e.g. '1024..262144*2' (doubling), "
            "'100..1000+100' (steps), '0,4096,-1' (-1: Artemis's off)"
        ),
    ],
    objective: Annotated[
        str | None,
        typer.Option(
            help="criteria in priority order instead of the knob's own, e.g. "
            "'rejected msgs:lower,time stopped s:lower:1%' (the table's columns; 'knob value')"
        ),
    ] = None,
    seed: SeedOption = None,
    workers: Annotated[
        int, typer.Option(min=1, help="engine runs at once (default: the machine's cores)")
    ] = os.cpu_count() or 1,
    all_metrics: Annotated[
        bool, typer.Option(help="show every metric measured, not only the objective's")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the sweep as JSON")] = False,
) -> None:
    """Run a scenario once per value of one knob (same seed) and pick the best value.

    Each run is measured with the metrics the what-if judges that knob on; the best run is the
    first by the knob's objective, criteria in priority order (loss, then the work done or the
    time producers were held, then what the setting costs to hold), each keeping the runs
    within its tolerance of the best. The run as written is one of them, so a sweep that
    cannot beat it says keep; the table says why each other run dropped out.

    Knobs: qpid.flow_stop_count (Qpid; the queue keeps its resume share of the stop),
    max-size-bytes, max-size-bytes-reject-threshold, producerWindowSize, consumerWindowSize
    (Artemis), 'link credit', prefetch, x-max-length (RabbitMQ).
    """
    from flowctl_core.sweep import parse_objective, parse_values, run_sweep

    spec = load_scenario(scenario)
    grid = parse_values(values)
    criteria = parse_objective(objective) if objective is not None else None
    with ProcessPoolExecutor(max_workers=workers) as pool:
        result = run_sweep(spec, knob, entity, grid, seed=seed, objective=criteria, mapper=pool.map)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    else:
        print_sweep(result, all_metrics=all_metrics)
    if result.refused_all:
        raise typer.Exit(2)  # the values given were none the broker takes: a usage error


@app.command()
@_one_line_failures("status")
def status(
    conf: Annotated[Path | None, typer.Option(help=CONF_HELP)] = None,
    warehouse: Annotated[
        Path | None, typer.Option(help="Delta warehouse (default: the conf's)")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="exit 1 when a day is behind bronze (for scripts)")
    ] = False,
) -> None:
    """List what each job has processed and the days behind bronze (stale or never processed)."""
    from jobs.pipeline_state import read_status

    pipeline_conf = _pipeline_conf(conf, warehouse)
    where = pipeline_conf.warehouse_dir
    # As the dashboard: a mistyped folder is refused before Spark, not shown as an empty state
    # (which `status --check` would pass). A URI is Spark's to read.
    if "://" not in where and not Path(where).exists():
        raise _fail(f"{where}: no such warehouse (no job has run on it; mistyped?)")
    spark = _spark_session(pipeline_conf, "flowctl-status")
    found = read_status(spark, pipeline_conf)
    print_pipeline_status(found, pipeline_conf.warehouse_dir)
    if check and not found.up_to_date:
        raise typer.Exit(1)


@app.command()
@_one_line_failures("dashboard")
def dashboard(
    out: Annotated[
        Path | None,
        typer.Option("--out", help="HTML file (default: report.html beside the warehouse)"),
    ] = None,
    conf: Annotated[Path | None, typer.Option(help=CONF_HELP)] = None,
    warehouse: Annotated[
        Path | None, typer.Option(help="Delta warehouse (default: the conf's)")
    ] = None,
) -> None:
    """Render a self-contained HTML dashboard over the gold Delta tables."""
    from jobs.dashboard import (
        default_dashboard_path,
        no_gold_tables,
        out_file_problem,
        render_dashboard,
    )

    pipeline_conf = _pipeline_conf(conf, warehouse)
    out = out or default_dashboard_path(pipeline_conf.warehouse_dir)
    # As whatif refuses a missing table: before Spark starts or anything is written.
    refused = no_gold_tables(pipeline_conf) or out_file_problem(out)
    if refused:
        raise _fail(refused)
    spark = _spark_session(pipeline_conf, "flowctl-dashboard")
    written = render_dashboard(spark, pipeline_conf, out)
    console.print(f"dashboard: {written.resolve()}", highlight=False)


#: What a demo folder holds; an --out holding anything else is not the demo's to remove.
DEMO_ENTRIES = frozenset({"raw", "warehouse", "quality", "report.html"})


def _clear_demo_folder(out: Path) -> None:
    """Remove an earlier demo's output from ``out``; refuse a file, or a folder holding anything a
    demo does not write (a mistyped --out must never cost the user a folder)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise SinkError(f"--out {out}: is a file, not a folder")
    foreign = sorted(entry.name for entry in out.iterdir() if entry.name not in DEMO_ENTRIES)
    if foreign:
        raise SinkError(
            f"--out {out}: holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}, "
            "which a demo does not write: name a new folder or an earlier demo's (or --keep)"
        )
    shutil.rmtree(out)


@app.command()
@_one_line_failures("demo")
def demo(
    keep: Annotated[bool, typer.Option(help="keep earlier demo output")] = False,
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="folder of the demo's raw log, warehouse and dashboard (default var/demo)"
        ),
    ] = DEMO_DIR,
) -> None:
    """Simulate every bundled scenario, then run the pipeline over the days they cover."""
    raw = out / "raw"
    if not keep:
        _clear_demo_folder(out)
    first_day: date | None = None
    last_day: date | None = None
    for path in bundled_scenarios():
        result = simulate_to(str(path), raw, None, None)
        # One line a scenario: the tables of sixteen ran to ~450 lines (1,500 at 80 columns)
        # before the pipeline's (a README walk-through); `flowctl simulate` prints them.
        print_line(
            f"simulated {result.scenario.name}: {result.events:,} events, run {result.run_id}"
        )
        start = datetime.fromtimestamp(result.start_us / US_PER_SECOND, tz=UTC).date()
        end = datetime.fromtimestamp(result.end_us / US_PER_SECOND, tz=UTC).date()
        first_day = start if first_day is None else min(first_day, start)
        last_day = end if last_day is None else max(last_day, end)
    print_line(
        f"raw event log: {raw} (`flowctl simulate NAME --out DIR` prints a scenario's tables)"
    )
    if first_day is None or last_day is None:
        raise _fail("no bundled scenarios found")
    _run_pipeline_and_print(
        None, first_day, last_day, raw, out / "warehouse", dashboard=out / "report.html"
    )
    console.print(f"Delta warehouse: {out / 'warehouse'}", highlight=False)


collect_app = typer.Typer(
    help="Collect a real broker's flow control into the event log (DESIGN §6).",
    no_args_is_help=True,
)
app.add_typer(collect_app, name="collect")


def default_collector_state(raw: Path, broker: str) -> Path:
    """Beside the raw folder, not in it: the ingest reads only ``date=D/*.parquet`` there and
    lists anything else as skipped."""
    return raw.parent / "collector-state" / f"{broker}.json"


def _zone(log_timezone: str | None) -> Any:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(log_timezone) if log_timezone else None
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail(
            f"--log-timezone {log_timezone}: not a time zone (e.g. UTC, Europe/Paris)"
        ) from None


def _check_log(log: Path, *, once: bool) -> None:
    """A log that cannot be the broker's is refused before anything is read or locked: a folder,
    one in a folder that does not exist (a mistyped path), or with --once one not there. A
    running collector waits for a log not written yet (the broker not started), and says so."""
    if log.is_dir():
        raise _fail(f"--log {log}: a folder, not the broker's log file")
    if not log.parent.is_dir():
        raise _fail(f"--log {log}: no folder {log.parent}")
    if not log.exists():
        if once:
            raise _fail(f"--log {log}: no such file (nothing to read once)")
        _warn(
            f"--log {log} does not exist yet: waiting for the broker to write it",
            stamp=f"{_utc_stamp()} ",
        )


def _utc_stamp(created: float | None = None) -> str:
    """A collector's console time (now, or ``created``, seconds since the epoch), in UTC."""
    at = datetime.now(UTC) if created is None else datetime.fromtimestamp(created, UTC)
    return at.strftime("%Y-%m-%d %H:%M:%SZ")


class _CollectorLineFormat(logging.Formatter):
    """A collector's console line: its UTC time, then "warning: " for a warning (what it waits
    for, what it skipped), the message alone for news (the broker answers again)."""

    def format(self, record: logging.LogRecord) -> str:
        kind = "warning: " if record.levelno >= logging.WARNING else ""
        return f"{_utc_stamp(record.created)} {kind}{record.getMessage()}"


@contextmanager
def _collector_console() -> Iterator[None]:
    """Within it, the collectors' log lines (warnings and news, ``flowctl.collect``) on stderr,
    each with its time: a collector runs for days, and a line without one did not say when the
    broker went away."""
    logger = logging.getLogger("flowctl.collect")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CollectorLineFormat())
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _run_collector(make: Callable[[], Any], log: Path, raw: Path, *, once: bool) -> None:
    """The collector ``make`` gives, polled until Ctrl-C or SIGTERM (what is pending committed
    first), or once; a line when it starts and one when it stops. Its log lines are on the
    console from its start (a file set aside as it starts its session is said with its time)."""
    with _collector_console():
        _poll(make(), log, raw, once=once)


def _poll(collector: Any, log: Path, raw: Path, *, once: bool) -> None:

    run = collector.state
    # Its start and its end with their times too: a collector runs for days.
    print_line(
        f"{_utc_stamp()} collecting {log} into {raw} as run {run.run_id} "
        + (f"(going on at seq {run.next_seq})" if collector.resumed else "(new session)")
    )
    stopping: list[int] = []
    # Ctrl-C as SIGTERM: a flag read between two lines. A KeyboardInterrupt raised inside a
    # line's handling (its state changed, its row not yet written) would lose the line.
    handlers = {
        stop_signal: signal.signal(stop_signal, lambda signum, _frame: stopping.append(signum))
        for stop_signal in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        collector.run(stop=lambda: bool(stopping), once=once)  # what is pending committed first
    finally:
        for stop_signal, handler in handlers.items():
            signal.signal(stop_signal, handler)
    held = collector.held_now()
    print_line(
        f"{_utc_stamp()} committed {counted(collector.writer.rows_written, 'event')} in "
        f"{counted(collector.writer.files_written, 'file')}; run {run.run_id} is at seq "
        f"{run.next_seq:,}" + (f"; held now: {', '.join(held)}" if held else "")
    )
    if once and collector.lines_read and collector.state.last_line_us is None:
        # A script's --once over some other file (a typo) exited 0 after a warning. Only a
        # session that never read a line of the broker's: a cron --once going on in a stack
        # trace reads untimed lines of the real log (a review).
        raise _fail(
            f"--log {log}: none of the {collector.lines_read:,} lines read begins with a "
            f"timestamp as {collector.log_kind}'s lines do: not the broker's log"
        )


LogOption = Annotated[Path, typer.Option(help="the broker's log file (read as it grows)")]
RawOption = Annotated[Path, typer.Option(help="the event-log folder the pipeline ingests")]
StateOption = Annotated[
    Path | None,
    # Worded in short words: a path of one long word was cut ("RAW/../collector-state/…") in
    # the help's column at 80 (a review).
    typer.Option(
        help="the session's checkpoint (default: BROKER.json in collector-state/ beside RAW)"
    ),
]
UserOption = Annotated[str, typer.Option(help="user of the broker's HTTP API")]
PasswordOption = Annotated[
    str, typer.Option(envvar="FLOWCTL_BROKER_PASSWORD", help="password of the broker's HTTP API")
]
SampleOption = Annotated[float, typer.Option(min=0.5, help="seconds between samples")]
FlushOption = Annotated[
    float, typer.Option(min=0.0, help="seconds a batch of events waits before its commit")
]
ZoneOption = Annotated[
    str | None,
    typer.Option(help="the broker's time zone, e.g. Europe/Paris (default: this machine's)"),
]
OnceOption = Annotated[bool, typer.Option("--once", help="read what the log holds now, then stop")]
NewSessionOption = Annotated[
    bool, typer.Option("--new-session", help="start a new run instead of going on")
]


@collect_app.command("artemis")
@_one_line_failures("collect")
def collect_artemis(
    log: LogOption,
    raw: RawOption,
    broker: Annotated[str, typer.Option(help="the broker's name in the event log")] = "artemis",
    state: StateOption = None,
    jolokia: Annotated[
        str | None,
        typer.Option(help="sample the addresses over Jolokia's URL (an example above)"),
    ] = None,
    user: UserOption = "admin",
    password: PasswordOption = "admin",
    sample_interval: SampleOption = 30.0,
    address: Annotated[
        list[str] | None,
        typer.Option(help="sample only this address (repeat it; default: every address)"),
    ] = None,
    flush_interval: FlushOption = 5.0,
    log_timezone: ZoneOption = None,
    once: OnceOption = False,
    new_session: NewSessionOption = False,
) -> None:
    """Follow an Artemis log, INSTANCE/log/artemis.log (and sample Jolokia), into broker_events.

    Each block / unblock line (AMQ222183 / AMQ221046) is a flow_stopped / flow_resumed of its
    address; with --jolokia, each address's size and messages every --sample-interval seconds
    (e.g. --jolokia http://localhost:8161/console/jolokia: the host as the broker was made with,
    `artemis create --http-host`, localhost by default; its Jolokia takes requests from that
    origin only).
    The session goes on across restarts of the collector and of the broker, and across the
    log's roll-over at midnight: nothing committed is lost or written twice.
    """
    from collectors.artemis import ArtemisCollector, JolokiaReader

    zone = _zone(log_timezone)
    if jolokia:
        _check_http_url(jolokia, "--jolokia")
    _check_log(log, once=once)
    _check_out_folder(raw, "--raw")
    make = functools.partial(
        ArtemisCollector,
        log_path=log,
        raw_dir=raw,
        state_path=state or default_collector_state(raw, broker),
        broker=broker,
        log_zone=zone,
        jolokia=JolokiaReader(jolokia, user, password) if jolokia else None,
        sampled_addresses=frozenset(address) if address else None,
        sample_interval_s=sample_interval,
        flush_interval_s=flush_interval,
        new_session=new_session,
    )
    _run_collector(make, log, raw, once=once)


@collect_app.command("rabbitmq")
@_one_line_failures("collect")
def collect_rabbitmq(
    log: LogOption,
    raw: RawOption,
    broker: Annotated[str, typer.Option(help="the node's name in the event log")] = "rabbitmq",
    state: StateOption = None,
    management: Annotated[
        str | None,
        typer.Option(
            help="sample queues and connections over the management API, e.g. "
            "http://127.0.0.1:15672"
        ),
    ] = None,
    user: UserOption = "guest",
    password: PasswordOption = "guest",
    sample_interval: SampleOption = 30.0,
    node: Annotated[
        str | None,
        typer.Option(help="the node the log is of (default: NODE of its file name NODE.log)"),
    ] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option(help="sample only this queue (repeat it; default: every queue)"),
    ] = None,
    flush_interval: FlushOption = 5.0,
    log_timezone: ZoneOption = None,
    once: OnceOption = False,
    new_session: NewSessionOption = False,
) -> None:
    """Follow a RabbitMQ node's log (and sample its management API) into broker_events.

    Each memory or disk alarm set / cleared line is an alarm_raised / alarm_cleared; with
    --management, every --sample-interval seconds each queue's depth and limits, and each AMQP
    0.9.1 connection found blocked by an alarm as connection_blocked until it runs again. The
    session goes on across restarts of the collector and of the node.
    """
    from collectors.rabbitmq import ManagementReader, RabbitMQCollector

    zone = _zone(log_timezone)
    if management:
        _check_http_url(management, "--management")
    _check_log(log, once=once)
    _check_out_folder(raw, "--raw")
    make = functools.partial(
        RabbitMQCollector,
        log_path=log,
        raw_dir=raw,
        state_path=state or default_collector_state(raw, broker),
        broker=broker,
        log_zone=zone,
        management=ManagementReader(management, user, password) if management else None,
        node=node,
        sampled_queues=frozenset(queue) if queue else None,
        sample_interval_s=sample_interval,
        flush_interval_s=flush_interval,
        new_session=new_session,
    )
    _run_collector(make, log, raw, once=once)


probe_app = typer.Typer(
    help="Measure a real broker's flow control with a client of flowctl's own, recording its link.",
    no_args_is_help=True,
)
app.add_typer(probe_app, name="probe")


@probe_app.command("publish")
@_one_line_failures("probe")
def probe_publish(
    url: Annotated[
        str, typer.Argument(help="the broker's AMQP 1.0 URL: amqp://[user:password@]host:port")
    ],
    address: Annotated[
        str,
        typer.Argument(help="where to send: an Artemis address, a RabbitMQ /amq/queue/NAME"),
    ],
    raw: RawOption,
    broker: Annotated[str, typer.Option(help="the broker's name in the event log")],
    product: Annotated[
        str | None,
        typer.Option(help="artemis or rabbitmq: which broker it is (its advice is in its knobs)"),
    ] = None,
    count: Annotated[int, typer.Option(min=1, help="messages to send")] = 1000,
    size: Annotated[int, typer.Option(min=0, help="bytes of each message's body")] = 1024,
    in_flight: Annotated[
        int | None, typer.Option(min=1, help="at most this many unsettled (default: no limit)")
    ] = None,
    idle: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="give up after this many seconds without progress (10 at least while the "
            "broker holds messages sent unsettled)",
        ),
    ] = 2.0,
    timeout: Annotated[float, typer.Option(min=0.1, help="give up after this many seconds")] = 60.0,
    vhost: Annotated[
        str | None,
        typer.Option(
            help="RabbitMQ: the virtual host to publish in, named in the connection (vhost:V); "
            "without it the broker's default, taken to be /"
        ),
    ] = None,
) -> None:
    """Send --count messages to ADDRESS as fast as the broker's link credit allows, and record
    the link (collectors/proton_links.py) into RAW for the pipeline.

    Says what the broker did with the messages, the credit it granted, and how long the
    sender had messages to send and no credit (a link starvation, DESIGN §4): the wait a full
    Artemis BLOCK address or a RabbitMQ alarm makes a publisher take.
    """
    from collectors.probe import amqp_send, link_summary, url_shown
    from collectors.proton_links import LinkRecorder, check_vhost
    from collectors.rabbitmq import DEFAULT_VHOST

    _check_amqp_url(url)
    _check_out_folder(raw, "--raw")
    if vhost is not None:
        try:
            check_vhost(vhost, product, "--vhost")
        except ValueError as error:
            raise _fail(str(error)) from None
    raw_was_there = raw.exists()
    try:
        recorder = LinkRecorder(
            raw, broker, product=product, default_vhost=DEFAULT_VHOST if vhost is None else vhost
        )
    except ValueError as error:
        raise _fail(f"--product / --broker: {error}") from None
    with recorder:
        sent = amqp_send(
            url,
            address,
            count=count,
            body_size=size,
            in_flight=in_flight,
            idle_s=idle,
            timeout_s=timeout,
            recorder=recorder,
            vhost=vhost,
        )
    rows = recorder.written_rows()
    if not rows:  # one line, as the README promises, and no empty --raw folder left behind
        if not raw_was_there and not any(path.is_file() for path in raw.rglob("*")):
            shutil.rmtree(raw, ignore_errors=True)
        reason = sent.link_error or "no answer"
        raise _fail(f"probe publish: no link attached at {url_shown(url)} ({reason})", code=1)
    summary = link_summary(rows)
    print_line(
        f"probe publish {address} at {url_shown(url)}: sent {sent.sent:,} of {count:,} in "
        f"{sent.seconds:.1f} s: accepted {sent.accepted:,}, rejected {sent.rejected:,}, "
        f"released {sent.released:,}"
        + (f" ({format_figures(dict(sent.conditions))})" if sent.conditions else "")
        + (f", unsettled {sent.unsettled:,} when it gave up" if sent.unsettled else "")
    )
    waited = (
        f"left without credit with messages to send for {summary.starved_s:.1f} s"
        + (", then gave up" if sent.blocked_at_end else "")
        if summary.starved_s
        else "never without credit while it had messages to send"
    )
    print_line(
        f"credit: {summary.credit_granted:,} granted in {counted(summary.grants, 'flow')}; {waited}"
    )
    days = sorted({row["ts"].date() for row in rows})
    print_line(
        f"recorded: {summary.rows:,} events of run {recorder.state.run_id} in {raw}; "
        f"flowctl pipeline --raw {raw} --from {days[0]} --to {days[-1]}"
    )
    if sent.link_error:
        raise _fail(f"probe publish: the link ended in an error: {sent.link_error}", code=1)


def help_from_docstring(doc: str) -> str:
    """A command's docstring as its ``--help`` text: each paragraph one line, for the terminal
    to wrap. Typer keeps the single line breaks of every paragraph after the first, so a
    docstring's 96-column lines broke mid-sentence in the help ("how long the" / "sender had").
    What follows a form feed is for readers of the code only, as in click."""
    paragraphs = inspect.cleandoc(doc.partition("\f")[0]).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _reflow_command_help(typer_app: typer.Typer) -> None:
    """Give every command of ``typer_app`` (and of its groups) without a help of its own its
    docstring as :func:`help_from_docstring` reflows it."""
    for command in typer_app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = help_from_docstring(command.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_command_help(group.typer_instance)


_reflow_command_help(app)


if __name__ == "__main__":  # pragma: no cover
    main()

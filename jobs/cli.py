"""Command line shared by the spark-submit entry points: --date or --from/--to, and --conf; and
the line each job logs once its session runs (the days it processes, its conf, its driver's heap).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from datetime import date
from typing import TYPE_CHECKING, NoReturn

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConf


#: A day as the jobs and flowctl take it; a value of this shape may still be no date (02-30).
DATE_SHAPE = re.compile(r"\d{4}-\d{2}-\d{2}")


def impossible_date(value: str, error: ValueError) -> str:
    """How a value of the right shape that is no date is worded (``day is out of range...``)."""
    return f"{value!r} is not a date: {error}"


def iso_date(value: str) -> date:
    """An argparse ``type``: a day as YYYY-MM-DD, worded as flowctl words a bad one."""
    if not DATE_SHAPE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD, got {value!r}")
    try:
        return date.fromisoformat(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(impossible_date(value, error)) from None


class JobArgumentParser(argparse.ArgumentParser):
    """argparse as the jobs use it: a usage error is one ``error:`` line (as flowctl's own), with
    where to find the usage, rather than the usage itself followed by the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")


def date_range_parser(description: str) -> argparse.ArgumentParser:
    parser = JobArgumentParser(description=description)
    parser.add_argument(
        "--conf", help="pipeline YAML (default: $FLOWCTL_CONF or conf/pipeline.yaml)"
    )
    parser.add_argument("--date", type=iso_date, help="one UTC day, YYYY-MM-DD")
    parser.add_argument("--from", dest="date_from", type=iso_date, help="first day")
    parser.add_argument("--to", dest="date_to", type=iso_date, help="last day")
    return parser


def parse_date_range(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse and normalise to ``args.date_from``/``args.date_to`` (inclusive)."""
    args = parser.parse_args(argv)
    if args.date is not None:
        if args.date_from or args.date_to:
            parser.error("give either --date or --from/--to")
        args.date_from = args.date_to = args.date
    if args.date_from is None or args.date_to is None:
        parser.error("give --date YYYY-MM-DD or both --from and --to")
    if args.date_from > args.date_to:
        parser.error(f"--from {args.date_from} is after --to {args.date_to}")
    return args


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Great Expectations logs its own set-up at INFO on every ephemeral context.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)


#: Exit status of a usage or conf error (as argparse's own, jobs/pipeline.py and flowctl's).
EXIT_USAGE = 2


def start_job(args: argparse.Namespace, app_name: str) -> tuple[PipelineConf, SparkSession]:
    """What every entry point does once its arguments are parsed: logging, conf, session.

    A pipeline conf that cannot be used is one line on stderr and exit status 2 (a usage or
    conf error, as everywhere else), before Spark starts."""
    from jobs.config import ConfError, load_conf
    from jobs.spark_session import build_spark_session

    configure_logging()
    try:
        conf = load_conf(args.conf)
        spark = build_spark_session(conf, app_name=app_name)
    except ConfError as error:  # also Spark settings Spark refuses, checked as it starts
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    log_job_start(app_name, args.date_from, args.date_to, conf, spark)
    return conf, spark


def days_text(date_from: date, date_to: date) -> str:
    """``2026-03-01``, or ``2026-03-01 .. 2026-03-04 (4 days)``."""
    if date_from == date_to:
        return date_from.isoformat()
    count = (date_to - date_from).days + 1
    return f"{date_from.isoformat()} .. {date_to.isoformat()} ({count} days)"


def log_job_start(
    app_name: str, date_from: date, date_to: date, conf: PipelineConf, spark: SparkSession
) -> None:
    """One line saying which days the job processes, with which conf, and the heap its driver
    really has: under a scheduler the day comes from a template (an Airflow run processes the day
    its data interval starts, not its logical date), and spark.driver.memory only counts if it
    reached the JVM's command line. A heap short of the conf's is a warning naming the fix."""
    from jobs.spark_session import driver_max_heap_bytes, driver_memory_report

    memory, short = driver_memory_report(conf, driver_max_heap_bytes(spark))
    log.info(
        "%s processes %s (conf %s); %s",
        app_name,
        days_text(date_from, date_to),
        conf.source,
        memory,
    )
    if short:
        log.warning(
            "%s: the driver JVM has less memory than the conf's spark.driver.memory: it started "
            "before the conf was read; give it to spark-submit (--driver-memory, or --conf "
            "spark.driver.memory=...), as the nightly DAG does",
            app_name,
        )

#!/usr/bin/env bash
# The whole test command: lint, format check, type check, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The fresh-machine path, every run: Delta's jars resolved into an empty, throw-away Maven
# repository and loaded by Spark with an empty Ivy home (a warm ~/.m2 cannot hide a missing step).
.venv/bin/python -m jobs.jvm_jars --fresh-check
# The dashboard test drives Debian's Chromium; the DAG test runs in Airflow's own virtualenv
# (the Spark provider pulls pyspark-client, which collides with pyspark).
bash scripts/setup_chromium.sh
bash scripts/setup_airflow.sh
# The real brokers the conformance tests run against (tests/realbrokers): RabbitMQ from Debian,
# Artemis from Maven Central, started by the tests as plain processes on loopback.
bash scripts/setup_brokers.sh
# pytest exits 5 when it collected nothing: that must fail, never pass silently.
set +e
# The DAG test (tests/airflow, Airflow's own virtualenv: real spark-submits, ~6 min, much of it
# JVM start-ups and Airflow's bookkeeping) runs beside the main suite; its output is printed
# after the suite's, and the real-broker tests wait for both (their figures are rates).
airflow_log=$(mktemp)
trap 'rm -f "$airflow_log"' EXIT
.airflow-venv/bin/python -m pytest tests/airflow -q -p no:cacheprovider >"$airflow_log" 2>&1 &
airflow_pid=$!
# Two workers, a test file each at a time: the Spark tests wait on job scheduling and the Delta
# log more than on a core, so two sessions side by side use the 2 cores (each worker builds its
# own session in its own temporary folders). The real-broker tests share the two brokers they
# start, so they run after, in one process.
.venv/bin/python -m pytest --ignore=tests/airflow -m "not realbroker" -n 2 --dist loadfile "$@"
rc=$?
wait "$airflow_pid"
airflow_rc=$?
echo "--- tests/airflow (Airflow's virtualenv, run beside the tests above)"
cat "$airflow_log"
if [ "$rc" -eq 5 ]; then echo "test: pytest collected no tests" >&2; exit 1; fi
if [ "$airflow_rc" -eq 5 ]; then echo "test: the Airflow DAG test collected no tests" >&2; exit 1; fi
[ "$rc" -eq 0 ] || exit "$rc"
[ "$airflow_rc" -eq 0 ] || exit "$airflow_rc"
.venv/bin/python -m pytest tests/realbrokers -m realbroker "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "test: the real-broker tests collected no tests" >&2; exit 1; fi
exit "$rc"

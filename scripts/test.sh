#!/usr/bin/env bash
# The whole test command: lint, format check, type check, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The dashboard test (main suite) drives Debian's Chromium. What only the lane beside the main
# suite needs is installed in that lane, while the suite runs (below).
bash scripts/setup_chromium.sh
# pytest exits 5 when it collected nothing: that must fail, never pass silently.
set +e
# Beside the main suite, one after the other in a lane of their own: first what only this lane
# needs, installed here so that its downloads (~70 s from nothing) overlap the suite instead of
# delaying it: Airflow's own virtualenv (the DAG test's; the Spark provider pulls pyspark-client,
# which collides with pyspark) and the real brokers (RabbitMQ 3.10 from Debian, 4.0 from Debian
# 13's packages into .jvm/brokers, Artemis from Maven Central, started by the tests as plain
# processes on loopback). Then the fresh-machine path
# (Delta's jars resolved into an empty, throw-away Maven repository and loaded by Spark with an
# empty Ivy home: a warm ~/.m2 cannot hide a missing step; ~30 s, most of it Maven's downloads),
# the DAG test (tests/airflow, Airflow's own virtualenv: real spark-submits, ~6 min, much of it
# JVM start-ups and Airflow's bookkeeping), the jobs on a multi-process Spark (tests/cluster: one
# spark-submit to local-cluster[2,1,2048], ~2.5 min), then the real-broker tests
# (tests/realbrokers: they share the two brokers they start, so one process; ~4 min). Their
# output is printed after the suite's. The real-broker figures are rates and timings: those tests
# and the brokers they start run at the normal priority, everything else at nice 5, so the Spark
# tests take the CPU the brokers leave (the 26 passed beside two and three busy loops at nice 5;
# README, Development).
beside=$(mktemp -d)
trap 'rm -rf "$beside"' EXIT
# The setup script $2 of the lane's part $1: its output opens the part's log, and a failed setup
# is the part's failure (its exit status, said in the log); its tests then do not run.
set_up_part() {
  nice -n 5 bash "scripts/$2.sh" >"$beside/$1.log" 2>&1
  local setup_rc=$?
  echo "$setup_rc" >"$beside/$1.rc"
  if [ "$setup_rc" -ne 0 ]; then
    echo "test: scripts/$2.sh failed (exit $setup_rc): tests/$1 not run" >>"$beside/$1.log"
  fi
}
(
  # First the class-data-sharing archive of the suite's Spark JVMs (tests/jvm_class_archive.py:
  # their classes parsed and verified once; the DAG test's six spark-submits took 524 -> 360
  # CPU-s with it), written once per JDK and jars (~70 s): the JVMs started before it load their
  # classes themselves.
  nice -n 5 .venv/bin/python -m tests.jvm_class_archive >"$beside/archive.log" 2>&1
  set_up_part airflow setup_airflow
  set_up_part realbrokers setup_brokers
  nice -n 5 .venv/bin/python -m jobs.jvm_jars --fresh-check >"$beside/jars.log" 2>&1
  echo $? >"$beside/jars.rc"
  if [ "$(cat "$beside/airflow.rc")" = 0 ]; then
    nice -n 5 .airflow-venv/bin/python -m pytest tests/airflow -q -p no:cacheprovider \
      >>"$beside/airflow.log" 2>&1
    echo $? >"$beside/airflow.rc"
  fi
  nice -n 5 .venv/bin/python -m pytest tests/cluster -q -p no:cacheprovider \
    >"$beside/cluster.log" 2>&1
  echo $? >"$beside/cluster.rc"
  if [ "$(cat "$beside/realbrokers.rc")" = 0 ]; then
    # Installed above: a broker that does not start now fails its tests instead of skipping them.
    FLOWCTL_REAL_BROKERS=required .venv/bin/python -m pytest tests/realbrokers -m realbroker \
      -p no:cacheprovider "$@" \
      >>"$beside/realbrokers.log" 2>&1
    echo $? >"$beside/realbrokers.rc"
  fi
) &
beside_pid=$!
# Two workers, a test file each at a time: the Spark tests wait on job scheduling and the Delta
# log more than on a core, so two sessions side by side use the 2 cores (each worker builds its
# own session in its own temporary folders). The files reach the workers longest first
# (tests/file_order.py; --no-loadscope-reorder keeps that order).
nice -n 5 .venv/bin/python -m pytest --ignore=tests/airflow --ignore=tests/cluster \
  -m "not realbroker" -n 2 --dist loadfile --no-loadscope-reorder "$@"
rc=$?
wait "$beside_pid"
echo "--- tests.jvm_class_archive (run beside the tests above)"
cat "$beside/archive.log" 2>/dev/null || echo "(no output: the lane did not reach it)"
echo "--- jobs.jvm_jars --fresh-check (run beside the tests above)"
cat "$beside/jars.log" 2>/dev/null || echo "(no output: the lane did not reach it)"
for part in airflow cluster realbrokers; do
  echo "--- tests/$part (run beside the tests above)"
  cat "$beside/$part.log" 2>/dev/null || echo "(no output: the lane did not reach it)"
done
if [ "$rc" -eq 5 ]; then echo "test: pytest collected no tests" >&2; exit 1; fi
[ "$rc" -eq 0 ] || exit "$rc"
jars_rc=$(cat "$beside/jars.rc" 2>/dev/null)
if [ "$jars_rc" != 0 ]; then
  echo "test: the fresh-machine jar check failed (exit ${jars_rc:-none}; its output is above)" >&2
  exit 1
fi
for part in airflow cluster realbrokers; do
  part_rc=$(cat "$beside/$part.rc" 2>/dev/null)
  case "$part_rc" in
    '' | *[!0-9]*) echo "test: tests/$part did not finish (no exit status)" >&2; exit 1 ;;
  esac
  if [ "$part_rc" -eq 5 ]; then echo "test: tests/$part collected no tests" >&2; exit 1; fi
  [ "$part_rc" -eq 0 ] || exit "$part_rc"
done

#!/usr/bin/env bash
# Idempotent install of the Airflow virtualenv .airflow-venv (Airflow 3 + the Apache Spark
# provider, pinned in requirements-airflow.txt). It is separate from .venv because the provider
# pulls pyspark-client, which collides with the jobs' pyspark. Reinstalls only when
# requirements-airflow.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.airflow-venv
PYTHON_BIN=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "setup_airflow: needs Python 3.11 (found: $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 1
fi

[ -x "$VENV/bin/python" ] || "$PYTHON_BIN" -m venv "$VENV"
stamp=$VENV/.flowctl-airflow-deps
want=$(sha256sum requirements-airflow.txt | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup_airflow: installing Airflow into $VENV (first run takes a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r requirements-airflow.txt
  echo "$want" >"$stamp"
fi

# Fails loudly here rather than as a confusing import error in the DAG test. Importing Airflow
# creates its home (logs/): a throw-away one, not ~/airflow in the user's home.
check_home=$(mktemp -d)
trap 'rm -rf "$check_home"' EXIT
AIRFLOW_HOME="$check_home" "$VENV/bin/python" -c '
import airflow
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
print(f"setup_airflow: Airflow {airflow.__version__} with SparkSubmitOperator in .airflow-venv")
'

#!/usr/bin/env bash
# Idempotent install of everything flowctl needs: a project virtualenv with the pinned Python
# dependencies, and Delta Lake's JVM jars resolved by Maven into .jvm/ so that Spark starts offline.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_BIN=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "setup: flowctl needs Python 3.11 (found: $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1; then
  echo "setup: Spark needs a Java 17 runtime; install it (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
# Spark 4 runs on Java 17 or 21: 'openjdk version "17.0.15"' (or "1.8.0_..." for Java 8).
java_version=$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -1)
java_major=${java_version%%.*}
[ "$java_major" = 1 ] && java_major=$(echo "$java_version" | cut -d. -f2)
if ! [ "${java_major:-0}" -ge 17 ] 2>/dev/null; then
  echo "setup: Spark 4 needs Java 17 or newer; 'java' is version ${java_version:-unknown} ($(command -v java))" >&2
  exit 1
fi

[ -x .venv/bin/python ] || "$PYTHON_BIN" -m venv .venv
stamp=.venv/.flowctl-deps
# The checkout's path is part of the stamp: the editable install points .venv at this folder, so a
# moved or copied checkout reinstalls rather than running the old one's code.
want=$( (cat pyproject.toml; pwd -P) | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python dependencies into .venv (first run takes a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  # Not byte-compiled here: compiling every module of every package took ~34 s of a ~130 s
  # install from nothing; Python compiles and caches the modules a run imports, when it does.
  .venv/bin/pip install -q --no-compile -e ".[dev]"
  echo "$want" >"$stamp"
fi

# JVM jars: resolved with Maven (Spark's own Ivy resolver cannot download here) into the project's
# .jvm/ folder, then loaded once in Spark; every session names exactly those files in spark.jars.
# A second run finds them resolved and checked, says so in one line and starts nothing.
if ! command -v mvn >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Maven (Debian's maven) to resolve the JVM jars"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  else
    echo "setup: flowctl resolves its JVM jars with Maven: install it (Debian: sudo apt-get install maven)" >&2
    exit 1
  fi
fi
.venv/bin/python -m jobs.jvm_jars

#!/usr/bin/env bash
# The whole test command: lint, format check, type check, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# pytest exits 5 when it collected nothing: that must fail, never pass silently.
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "test: pytest collected no tests" >&2; exit 1; fi
exit "$rc"

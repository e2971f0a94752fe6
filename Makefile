# The two commands of the README. Both install what they need first (idempotent).
.PHONY: setup demo test lint bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/python -m flowctl.cli demo

test: setup
	bash scripts/test.sh

bench: setup
	.venv/bin/python bench/engine_throughput.py

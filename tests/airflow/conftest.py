"""tests/airflow runs in the Airflow virtualenv only:
`.airflow-venv/bin/python -m pytest tests/airflow`.

The main suite (.venv, no Airflow) skips this folder at collection time rather than failing on
`import airflow`; scripts/test.sh also passes --ignore=tests/airflow to it.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("airflow") is None:
    collect_ignore_glob = ["*.py"]

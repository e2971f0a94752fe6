"""``python -m tests.jvm_class_archive``, as scripts/test.sh runs it beside the suite: writes the
class-data-sharing archive of jobs/jvm_class_archive.py (the one module that owns it)."""

from __future__ import annotations

import sys

from jobs.jvm_class_archive import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

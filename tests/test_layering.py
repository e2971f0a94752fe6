"""DESIGN §1: the layers point one way, ``schemas/`` <- ``flowctl_core/`` <- ``jobs/``; the engine
imports neither ``jobs`` nor pyspark (what joins them lives in ``flowctl/``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from jobs.config import PROJECT_ROOT

#: What the engine may not import, by top-level package: both tests read it, so they agree.
FORBIDDEN = ("jobs", "pyspark", "flowctl", "delta")

#: Every module of the engine imported with the packages given as arguments made unimportable.
IMPORT_ALL_BLOCKED = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    forbidden = set(sys.argv[1:])

    class Blocked:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in forbidden:
                raise ImportError(f"the engine imported {name}")
            return None

    sys.meta_path.insert(0, Blocked())
    import flowctl_core
    names = [m.name for m in pkgutil.walk_packages(flowctl_core.__path__, "flowctl_core.")]
    for name in names:
        importlib.import_module(name)
    print(len(names))
    """
)


def test_the_engine_imports_neither_jobs_nor_pyspark() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_BLOCKED, *FORBIDDEN],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) >= 15  # every engine module was imported, not an empty walk


def _imported(node: ast.AST) -> list[str]:
    """The top-level packages an import statement names (none for a relative import)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module.split(".")[0]]
    return []


def test_no_engine_source_names_the_pipeline() -> None:
    """Function-level imports are imports too, which importing every module does not run: none
    may reach a :data:`FORBIDDEN` package. Parsed, so ``flowctl_core`` does not read as
    ``flowctl``."""
    offenders = [
        f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}"
        for path in (PROJECT_ROOT / "flowctl_core").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if set(_imported(node)) & set(FORBIDDEN)
    ]
    assert offenders == []


def test_every_module_of_the_project_imports() -> None:
    """mypy leaves jobs/ out (its overrides), and most of jobs/ runs only under Spark in the
    suite: a name moved between modules (93ea9fe moved the broker kinds) broke five of the
    recommend transforms' imports, found only by a Spark test minutes later. Every module of
    the packages is imported here, in a fresh interpreter, in a second."""
    script = textwrap.dedent(
        """
        import importlib, pkgutil
        count = 0
        for package in ("schemas", "flowctl_core", "flowctl", "jobs", "collectors", "conformance"):
            root = importlib.import_module(package)
            for module in pkgutil.walk_packages(root.__path__, package + "."):
                importlib.import_module(module.name)
                count += 1
        print(count)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 100

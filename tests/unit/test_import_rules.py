"""The import rules of docs/architecture.md "Layout and import rules" hold: import-linter's
contracts in pyproject.toml ([tool.importlinter]), checked the way CI runs the tests. A broken rule
prints the report, which names each import that breaks it and its line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lint_imports() -> list[str]:
    """`lint-imports` of the interpreter running the tests (its venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("lint-imports")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("lint-imports")
    assert found, "lint-imports is missing: pip install -e '.[test]' (import-linter)"
    return [found]


def test_the_import_contracts_are_kept(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*lint_imports(), "--no-logo", "--cache-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"lint-imports failed:\n{done.stdout}\n{done.stderr}"

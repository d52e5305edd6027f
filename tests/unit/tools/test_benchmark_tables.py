"""The figure tables in benchmarks/README.md are the ones the results files give (no hand-copied numbers)."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import REPO

ROOT = REPO


def test_readme_tables_match_the_newest_results_files() -> None:
    """`benchmarks/tables.py --check` finds every table written from its newest results file."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in proc.stdout

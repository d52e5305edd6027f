"""`autoexp scrontab`: the entry it prints, `--install` through a real `scrontab -l` / `scrontab -`
pair (a stand-in that keeps the table in a file: the localhost Slurm's Debian client has no
scrontab), installed twice without a duplicate, and the clear refusal where scrontab is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.plan.monitor_job import monitor_job_name

# `scrontab -l` prints the table (or fails like the real one when there is none); `scrontab -` replaces it.
FAKE_SCRONTAB = """#!/bin/bash
table="$(dirname "$0")/table"
if [ "$1" = "-l" ]; then
  [ -e "$table" ] || { echo "no crontab for $USER" >&2; exit 1; }
  cat "$table"
elif [ "$1" = "-" ]; then
  cat > "$table"
fi
"""


def make_session(state: Path) -> None:
    with SQLiteStore(state) as store:
        store.create_session("s", config_path="x.yaml", config={}, now=datetime.now(UTC))


def autoexp(tmp_path: Path, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "PYTHONPATH": os.getcwd()}
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "scrontab", *args]
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_install_twice_keeps_one_entry_beside_the_users_own(tmp_path: Path) -> None:
    make_session(tmp_path / "state")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scrontab").write_text(FAKE_SCRONTAB)
    (bin_dir / "scrontab").chmod(0o755)
    (bin_dir / "table").write_text("0 3 * * * ~/nightly.sh\n")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    for _ in range(2):
        done = autoexp(tmp_path, path, "--install")
        assert done.returncode == 0, done.stderr
    table = (bin_dir / "table").read_text()
    name = monitor_job_name(str((tmp_path / "state").absolute()), 1)
    assert table.startswith("0 3 * * * ~/nightly.sh\n")
    assert table.count(f"# autoexp-scrontab begin {name}") == 1
    assert "monitor-session --session-id 1 --supervisor slurm" in table
    assert f"#SCRON --job-name={name}-scron" in table


def test_missing_scrontab_is_said_clearly(tmp_path: Path) -> None:
    """Printing still works (the line suits a login node's crontab); installing is refused in one line."""
    make_session(tmp_path / "state")
    empty = tmp_path / "nothing"
    empty.mkdir()
    path = f"{empty}{os.pathsep}{Path(sys.executable).parent}"
    printed = autoexp(tmp_path, path)
    assert printed.returncode == 0 and "*/10 * * * * cd " in printed.stdout
    assert "no `scrontab` command" in printed.stderr
    refused = autoexp(tmp_path, path, "--install")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "cannot install" in refused.stderr and "Debian's slurm-client 22.05" in refused.stderr

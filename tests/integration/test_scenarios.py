"""The scenario harness (scripts/test_auto_restart.py) end to end on the localhost cluster.

The harness submits the real `train` workload through `autoexp submit` (detached monitor),
makes it fail for real (scancel, a hung rank, a gloo collective timeout, a host OOM, four
scancels) and checks the session database. Here it runs as a user would run it: a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SlurmCluster

HARNESS = REPO_ROOT / "scripts" / "test_auto_restart.py"
# `all` takes ~2.5 min on the 2-core localhost cluster; the brief's limit is 10 min.
ALL_TIMEOUT_S = 540
NO_MONITOR_TIMEOUT_S = 60

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def run_harness(tmp_path: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(HARNESS), "--work-dir", str(tmp_path / "scenarios"), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=tmp_path, check=False)


def live_train_jobs() -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-n", "train_local", "-o", "%i %Z"], capture_output=True, text=True, check=False
    ).stdout
    return out.split()


def test_all_scenarios_pass(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """Every scenario passes within the time limit, and no job of ours is left in the queue."""
    proc = run_harness(tmp_path, "--scenario", "all", timeout_s=ALL_TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    for name in ("scancel", "hang", "nccl", "oom", "max_retries"):
        assert f"✓ [{name}] {name}: PASSED" in output, output
    assert "5/5 scenarios passed" in output
    leftovers = [line for line in live_train_jobs() if str(tmp_path) in line]
    assert not leftovers, f"jobs left running: {leftovers}"


def test_fails_loudly_without_a_monitor(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """With no monitor (submit --no-monitor) the harness says so at once and exits non-zero."""
    proc = run_harness(tmp_path, "--scenario", "scancel", "--no-monitor", timeout_s=NO_MONITOR_TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "✗ [scancel] monitor not running" in output, output
    assert "scancel: FAILED" in output
    assert "0/1 scenarios passed" in output

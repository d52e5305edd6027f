"""README command 1: the demo experiment really fails once, is restarted, resumes and completes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

pytestmark = [pytest.mark.torch, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[2] / "config" / "experiments" / "demo.yaml"
DEADLINE_S = 120.0  # under a minute on a laptop; room for a loaded CI machine


def test_demo_runs_to_completion_through_one_real_restart(tmp_path: Path) -> None:
    """Attempt 1 is SIGKILLed at iteration 12 (restart: killed), attempt 2 resumes from iteration 10 and completes."""
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "run", str(DEMO)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        attempts = store.attempts_for_job(job.id)
        decisions = [(d.action, d.reason) for d in store.decisions_for_job(job.id)]
    assert decisions == [
        ("restart", "Transient failure detected (error_type=killed)"),
        ("stop", "Job completed successfully"),
    ]
    assert [(a.state.value, a.exit_code) for a in attempts] == [("FAILED", 137), ("COMPLETED", 0)]
    first = Path(attempts[0].log_path or "").read_text()
    second = Path(attempts[1].log_path or "").read_text()
    assert "[fault-injection] rank 0: kill at iteration 12" in first
    assert "successfully loaded checkpoint from outputs/demo/checkpoints at iteration 10" in second
    assert "iteration       30/      30" in second
    assert "autoexp explain demo" in done.stdout and "autoexp report 1" in done.stdout
    assert "restart: Transient failure detected (error_type=killed)" in done.stdout
    assert "loading checkpoint from outputs/demo/checkpoints at iteration 10" in done.stdout

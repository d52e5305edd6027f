"""The monitor with the local executor (no Slurm): the same session commands, real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from oellm_autoexp.adapters.store import JobStatus, SQLiteStore
from oellm_autoexp.core.job_state import JobState


def _autoexp(state: Path, cwd: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def test_cancel_while_no_monitor_runs_is_recorded_by_the_next_monitor(tmp_path: Path) -> None:
    """`autoexp cancel` with no monitor attached: the next monitor records the attempt's end and a
    stop, never a restart, and then finishes instead of watching a job that will not come back."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "sleeper", "output_dir": "out"},
        "executor": "local",
        "backend": {"command": ["sleep", "300"]},
    }
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment))
    state = tmp_path / "state"

    submitted = _autoexp(state, tmp_path, "submit", str(config), "--no-monitor")
    assert submitted.returncode == 0, submitted.stderr
    cancelled = _autoexp(state, tmp_path, "cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    monitored = _autoexp(state, tmp_path, "monitor-session", "--session-id", "1")
    assert monitored.returncode == 1, monitored.stdout + monitored.stderr  # not every job completed

    with SQLiteStore(state) as store:
        (job,) = store.jobs_for_session(1)
        (attempt,) = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    assert job.status == JobStatus.CANCELLED_BY_USER.value
    assert attempt.state is JobState.CANCELLED and attempt.ended_at is not None
    assert [d.action for d in decisions] == ["stop"]
    assert "Cancelled by user" in decisions[0].reason

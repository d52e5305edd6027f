"""The monitor with the local executor (no Slurm): the same session commands, real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from oellm_autoexp.adapters.store.sqlite_store import JobStatus, SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState


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


def test_deleted_database_stops_the_monitor_loudly_with_the_jobs_listed(tmp_path: Path) -> None:
    """D10: autoexp.db deleted under a running monitor: within a heartbeat it says so, names the job it
    leaves running unmonitored and how to go on, writes nothing more, and exits 4 (not 0, no traceback)."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "sleeper", "output_dir": "out"},
        "executor": "local",
        "backend": {"command": ["sleep", "300"]},
        "monitoring": {"poll_interval_s": 0.5, "heartbeat_interval_s": 0.5},
    }
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment))
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), "run", str(config)]
    monitor = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not any(state.glob("local_jobs/*/job.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        for db in state.glob("autoexp.db*"):
            db.unlink()
        output, _ = monitor.communicate(timeout=60)
        recreated = (state / "autoexp.db").exists()
    finally:
        monitor.kill()
        for info in state.glob("local_jobs/*/job.json"):  # the sleeper: its record is gone, not its process
            if _alive(info):
                os.killpg(json.loads(info.read_text())["pid"], signal.SIGKILL)
    assert monitor.returncode == 4, output
    assert "ERROR:" in output and "was deleted" in output and "sleeper attempt 1" in output
    assert "monitor-session" in output and "Traceback" not in output
    assert not recreated  # nothing written behind the user's back


def _alive(info: Path) -> bool:
    try:
        os.killpg(json.loads(info.read_text())["pid"], 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True

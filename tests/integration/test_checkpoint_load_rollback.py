"""A checkpoint that passes the metadata check but does not load is quarantined and the run rolls
back to the previous one; when that one fails to load too, the run stops naming both.

Real processes under `autoexp run` (local executor) with the project's torch workload: the
newest checkpoint is overwritten in place with garbage of the same length (its zip records stay
whole, so the check before the resubmission passes it), and the running attempt is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

pytestmark = [pytest.mark.torch, pytest.mark.slow]

DEADLINE_S = 240.0
GARBAGE = bytes(range(256)) * 4  # 1 KiB written over the start of the pickled state


def experiment() -> dict[str, object]:
    command = ["python3", "-m", "oellm_autoexp.workloads.train", "--device", "cpu", "--steps", "30",
               "--save-interval", "5", "--step-time-s", "0.05", "--slow-steps", "21-22:1.5",
               "--ckpt-dir", "out/checkpoints"]  # fmt: skip
    return {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"monitoring": "autoexp_workloads"},
                     {"restart": "megatron_transient"}],
        "experiment": {"name": "loadfail", "output_dir": "out"},
        "executor": "local",
        "backend": {"command": command},
        "monitoring": {"poll_interval_s": 1, "log_poll_interval_s": 0.3, "heartbeat_interval_s": 2},
    }  # fmt: skip


def damage(path: Path) -> None:
    """Same length, wrong bytes: the zip's own records (at its end) untouched."""
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.seek(64)
        handle.write(GARBAGE)
    assert path.stat().st_size == size


def training_pid(cwd: Path) -> int | None:
    """The workload process this test's run started (its cwd is the test's directory)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            here = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"oellm_autoexp.workloads.train" in cmdline and Path(here) == cwd:
            return int(entry.name)
    return None


def run_with_damage(
    tmp_path: Path, damaged: tuple[int, ...]
) -> tuple[subprocess.CompletedProcess[str], list]:  # type: ignore[type-arg]
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment()))
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "run", str(config)]
    monitor = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ckpts = tmp_path / "out" / "checkpoints"
    tracker = ckpts / "latest_checkpointed_iteration.txt"
    try:
        deadline = time.monotonic() + DEADLINE_S
        # Iteration 20 saved (the tracker is written after the file's rename); 21-22 are slow.
        while time.monotonic() < deadline:
            if tracker.exists() and tracker.read_text().strip() == "20":
                break
            time.sleep(0.1)
        for iteration in damaged:
            damage(ckpts / f"iter_{iteration:07d}.pt")
        pid = training_pid(tmp_path)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        output, _ = monitor.communicate(timeout=DEADLINE_S)
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    done = subprocess.CompletedProcess(argv, monitor.returncode, output, "")
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        decisions = store.decisions_for_job(job.id)
    return done, decisions


def test_a_checkpoint_that_does_not_load_is_quarantined_and_the_run_completes(tmp_path: Path) -> None:
    """Checkpoint 20 damaged, the job killed: the next attempt dies loading it -> restart naming it;
    before the resubmission it becomes failed_iter_0000020.pt; the run resumes from 15 and completes."""
    done, decisions = run_with_damage(tmp_path, (20,))
    rows = [(d.action, d.reason) for d in decisions]
    assert done.returncode == 0, (rows, done.stdout[-4000:])
    assert [a for a, _ in rows] == ["restart", "restart", "none", "stop"], rows
    assert rows[0][1] == "Transient failure detected (error_type=killed)"
    assert rows[1][1].startswith("checkpoint load failed: checkpoint iteration 20 in out/checkpoints"), rows[
        1
    ]
    assert "iter_0000020.pt -> failed_iter_0000020.pt; resume from iteration 15" in rows[2][1], rows[2]
    assert rows[3][1] == "Job completed successfully"
    ckpts = tmp_path / "out" / "checkpoints"
    assert (ckpts / "failed_iter_0000020.pt").exists() and (ckpts / "iter_0000030.pt").exists()


def test_the_same_failure_from_the_previous_checkpoint_stops_naming_both(tmp_path: Path) -> None:
    """Checkpoints 20 and 15 damaged: 20 is quarantined, the attempt from 15 fails the same way:
    stop, naming both; nothing is deleted."""
    done, decisions = run_with_damage(tmp_path, (20, 15))
    rows = [(d.action, d.reason) for d in decisions]
    assert done.returncode != 0, rows
    assert [a for a, _ in rows] == ["restart", "restart", "none", "stop"], rows
    reason = rows[3][1]
    assert "checkpoint load failed again: iteration 20 failed to load" in reason, reason
    assert "checkpoint iteration 15 in out/checkpoints" in reason, reason
    ckpts = tmp_path / "out" / "checkpoints"
    assert (ckpts / "failed_iter_0000020.pt").exists() and (ckpts / "iter_0000015.pt").exists()

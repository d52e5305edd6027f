"""The rollback proof on the localhost Slurm: a checkpoint that passes the metadata check but does
not load is quarantined and the run resumes from the previous one; when that one fails to load too,
the run stops naming both. The same run as tests/integration/test_checkpoint_load_rollback.py (the
project's torch workload under `autoexp run`), on the Slurm executor: each attempt is a Slurm job.

The newest checkpoint is overwritten in place with same-length garbage (its zip records stay whole,
so the check before the resubmission passes it), and the training process of the running job is
SIGKILLed (the emulated nodes are this machine).
"""

from __future__ import annotations

import os
import signal
import sys
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from tests.integration.test_checkpoint_load_rollback import damage
from tests.integration.test_monitor_slurm import COMPLETED, AutoexpEnv, wait_until
from tests.integration.test_preemption_slurm import runs

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

RUN_TIMEOUT_S = 180.0
KILLED = "Transient failure detected (error_type=killed)"


def command_experiment(autoexp: AutoexpEnv, name: str, command: list[str]) -> Path:
    """The experiment file of a `command` job on the Slurm executor under megatron_transient, with a
    short settle (a rank's traceback is read whole within a second)."""
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"monitoring": "autoexp_workloads"},
                     {"restart": "megatron_transient"}],
        "experiment": {"name": name, "output_dir": str(autoexp.tmp / "out")},
        "executor": "slurm",
        "backend": {"command": command},
        "monitoring": {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.3,
                       "fatal_settle_s": 1},
    }  # fmt: skip
    path = autoexp.tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def experiment(autoexp: AutoexpEnv) -> Path:
    ckpt = autoexp.tmp / "out" / "checkpoints"
    # Iterations 21-22 are slow: the kill lands after checkpoint 20, before 25.
    command = [sys.executable, "-m", "oellm_autoexp.workloads.train", "--device", "cpu", "--steps", "25",
               "--save-interval", "5", "--step-time-s", "0.05", "--slow-steps", "21-22:1.5", "--ckpt-dir", str(ckpt)]  # fmt: skip
    return command_experiment(autoexp, "loadfail", command)


def training_pid(ckpt: Path) -> int | None:
    """The workload process of this test's job (its argv names the test's checkpoint dir)."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"oellm_autoexp.workloads.train" in argv and os.fsencode(ckpt) in argv:
            return int(entry.name)
    return None


def run_with_damage(autoexp: AutoexpEnv, damaged: tuple[int, ...]) -> int:
    """`autoexp run`; once checkpoint 20 is saved, damage `damaged` and SIGKILL the training; its exit."""
    ckpt = autoexp.tmp / "out" / "checkpoints"
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    monitor = autoexp.start("run", str(experiment(autoexp)))
    autoexp.running(1)
    # The tracker is written after the checkpoint's rename: iteration 20 is complete on disk.
    wait_until(
        lambda: tracker.exists() and tracker.read_text().strip() == "20", "checkpoint 20", RUN_TIMEOUT_S
    )
    for iteration in damaged:
        damage(ckpt / f"iter_{iteration:07d}.pt")
    pid = training_pid(ckpt)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return autoexp.finish(monitor, RUN_TIMEOUT_S)


def test_a_checkpoint_that_does_not_load_is_quarantined_and_the_slurm_run_completes(
    autoexp: AutoexpEnv,
) -> None:
    """Checkpoint 20 damaged, the training killed: attempt 2 dies loading it -> restart naming it;
    before attempt 3 is submitted it becomes failed_iter_0000020.pt (kept); attempt 3 resumes from
    15 and completes. Three Slurm jobs, one after the other."""
    rc = run_with_damage(autoexp, (20,))
    rows = autoexp.reasons()
    assert rc == 0, (rows, autoexp.output(autoexp.procs[0])[-4000:])
    assert [a for a, _ in rows] == ["restart", "restart", "none", "stop"], rows
    assert rows[0][1] == KILLED
    ckpt = autoexp.tmp / "out" / "checkpoints"
    assert rows[1][1].startswith(f"checkpoint load failed: checkpoint iteration 20 in {ckpt}"), rows[1]
    assert "iter_0000020.pt -> failed_iter_0000020.pt; resume from iteration 15" in rows[2][1], rows[2]
    assert rows[3][1] == COMPLETED
    assert (ckpt / "failed_iter_0000020.pt").exists() and (ckpt / "iter_0000025.pt").exists()
    attempts = autoexp.attempts()
    # Attempt 2 is decided on its rank's exception line, so it is cancelled unless it exited first.
    assert [a.state.value for a in attempts] in (
        ["FAILED", "FAILED", "COMPLETED"],
        ["FAILED", "CANCELLED", "COMPLETED"],
    ), attempts
    assert len({a.executor_job_id for a in attempts}) == 3
    # One at a time: each Slurm job started after the one before it ended (sacct).
    spans = [runs(a.executor_job_id or "")[-1] for a in attempts]
    assert all(before[2] and after[1] and before[2] <= after[1] for before, after in pairwise(spans)), spans
    log = (autoexp.tmp / "out" / "logs" / f"slurm-{attempts[2].executor_job_id}.out").read_text()
    assert f"successfully loaded checkpoint from {ckpt} at iteration 15" in log, log


def test_the_same_failure_from_the_previous_checkpoint_stops_the_slurm_run_naming_both(
    autoexp: AutoexpEnv,
) -> None:
    """Checkpoints 20 and 15 damaged: 20 is quarantined, attempt 3 from 15 fails the same way:
    stop, naming both; nothing is deleted."""
    rc = run_with_damage(autoexp, (20, 15))
    rows = autoexp.reasons()
    assert rc != 0, rows
    assert [a for a, _ in rows] == ["restart", "restart", "none", "stop"], rows
    reason = rows[3][1]
    ckpt = autoexp.tmp / "out" / "checkpoints"
    assert "checkpoint load failed again: iteration 20 failed to load" in reason, reason
    assert f"checkpoint iteration 15 in {ckpt}" in reason, reason
    assert (ckpt / "failed_iter_0000020.pt").exists() and (ckpt / "iter_0000015.pt").exists()
    assert len(autoexp.attempts()) == 3

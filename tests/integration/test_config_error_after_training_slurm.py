"""A configuration error after the configuration trained, on the localhost Slurm: the run's dataset
index goes away at iteration 12 (the project's torch workload, `--fault file_gone`, once), Python's
FileNotFoundError reads as a configuration error, and since iterations 1-11 trained with the same
arguments the monitor restarts once (docs/restart_policy.md, config_error_after_training); attempt 2
resumes from checkpoint 10 and completes. Each attempt is a Slurm job."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.integration.test_checkpoint_load_rollback_slurm import command_experiment
from tests.integration.test_monitor_slurm import COMPLETED, AutoexpEnv

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

RUN_TIMEOUT_S = 180.0


def experiment(autoexp: AutoexpEnv) -> Path:
    out = autoexp.tmp / "out"
    command = [sys.executable, "-m", "oellm_autoexp.workloads.train", "--device", "cpu", "--steps", "16",
               "--save-interval", "5", "--step-time-s", "0.05", "--fault", "file_gone", "--fault-at-step", "12",
               "--fault-once-file", str(autoexp.tmp / "fault_fired"), "--ckpt-dir", str(out / "checkpoints")]  # fmt: skip
    return command_experiment(autoexp, "filegone", command)


def test_a_configuration_error_after_training_restarts_once_and_the_slurm_run_completes(
    autoexp: AutoexpEnv,
) -> None:
    monitor = autoexp.start("run", str(experiment(autoexp)))
    rc = autoexp.finish(monitor, RUN_TIMEOUT_S)
    rows = autoexp.reasons()
    assert rc == 0, (rows, autoexp.output(monitor)[-4000:])
    assert [a for a, _ in rows] == ["restart", "stop"], rows
    first = rows[0][1]
    assert first.startswith("Transient failure detected (error_type=config_error)"), first
    assert "this configuration trained before (iteration 11), so the environment changed" in first, first
    assert rows[1][1] == COMPLETED
    attempts = autoexp.attempts()
    assert len({a.executor_job_id for a in attempts}) == 2
    assert attempts[-1].state.value == "COMPLETED"
    log = (autoexp.tmp / "out" / "logs" / f"slurm-{attempts[1].executor_job_id}.out").read_text()
    ckpt = autoexp.tmp / "out" / "checkpoints"
    assert f"successfully loaded checkpoint from {ckpt} at iteration 10" in log, log[-2000:]
    assert re.search(r"iteration +16/ +16", log), log[-2000:]

"""The rendered megatron_torchrun script turns the walltime warning into Megatron's exit signal.

`--signal=B:USR1@N` reaches the batch shell; Megatron's --exit-signal-handler listens for
SIGTERM. The script must deliver SIGTERM to the training processes alone: torchrun, given a
SIGTERM, would tear the workers down after 30 s and exit non-zero. Here real torchrun (CPU)
starts two stand-in ranks (fake_megatron.py: Megatron's flags, its exit line) from the
script that `autoexp plan` renders for config/experiments/megatron_tiny_local.yaml.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.torch]

EXPERIMENT = REPO_ROOT / "config" / "experiments" / "megatron_tiny_local.yaml"
FAKE = REPO_ROOT / "tests" / "integration" / "fake_megatron.py"
DEADLINE_S = 60.0


def _render(tmp_path: Path) -> Path:
    overrides = [
        "backend.module=null",
        f"backend.megatron_path={FAKE.parent}",
        f"backend.script={FAKE.name}",
        f"backend.torchrun=[{sys.executable},-m,torch.distributed.run]",
        "backend.megatron.train_iters=100000",
        "slurm.gpus_per_node=0",
    ]
    (plan,) = build_plans(load_jobs(EXPERIMENT, overrides, environ={}), str(tmp_path))
    script = Path(plan.script_path)
    script.parent.mkdir(parents=True)
    script.write_text(plan.script)
    return script


def _wait_for(log: Path, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {log}:\n{log.read_text() if log.exists() else ''}")


def _signal_at_iteration_20(tmp_path: Path, sig: signal.Signals) -> tuple[int, str]:
    """Run the rendered script as the batch shell (no SLURM_* variables), send it `sig` once the
    ranks print iteration 20, wait for it to end; its exit status and its log."""
    script = _render(tmp_path)
    log = tmp_path / "job.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    with log.open("w") as out:
        shell = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(log, " iteration       20/")
        shell.send_signal(sig)
        status = shell.wait(timeout=DEADLINE_S)
    finally:
        if shell.poll() is None:
            shell.kill()
    return status, log.read_text()


def test_walltime_usr1_reaches_the_ranks_as_sigterm_and_the_job_exits_0(tmp_path: Path) -> None:
    """USR1 to the batch shell: both ranks get SIGTERM, save, exit 0; torchrun never sees a signal."""
    status, text = _signal_at_iteration_20(tmp_path, signal.SIGUSR1)
    assert status == 0, text
    assert "autoexp: forwarding SIGUSR1 to the training processes" in text
    assert "exiting program after receiving SIGTERM." in text
    assert "successfully saved checkpoint from iteration" in text
    assert "death signal" not in text and "Signal 15" not in text  # torchrun was left alone
    assert "autoexp: job step exited with status 0" in text


def test_sigterm_to_the_batch_shell_still_ends_the_job(tmp_path: Path) -> None:
    """A plain SIGTERM (scancel, a time limit) reaches torchrun through the wrapper and ends every process."""
    _, text = _signal_at_iteration_20(tmp_path, signal.SIGTERM)
    assert "autoexp: forwarding SIGTERM" in text
    assert "Received 15 death signal" in text  # torchrun itself got it, and shut its workers down
    assert "autoexp: job step exited with status" in text

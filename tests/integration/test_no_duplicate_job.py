"""Exactly one Slurm job per attempt, whatever dies when (issue 13, D2), on the real localhost Slurm.

The restart's `sbatch` is slow (a wrapper on PATH); the monitor is SIGKILLed while it runs and
`monitor-session` is started at once. Whether the orphaned submission dies with the monitor or
escapes it and still reaches the controller, the resumed monitor must neither abandon the
attempt too early nor submit a second job beside it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oellm_autoexp.adapters.executors.slurm import CONTROLLER_LAG_S, run_slurm_command
from tests.integration.test_monitor_slurm import (
    COMPLETED,
    AutoexpEnv,
    slurm_jobs_with_tags,
    wait_until,
)

pytestmark = pytest.mark.slurm

SBATCH_DELAY_S = 6  # how long the wrapped sbatch waits before it submits
SLURM_TIMEOUT_S = 8  # the executor's command timeout in these tests (> the delay)
CANCELLED_RESTART = "Transient failure detected (error_type=cancelled)"


def slow_sbatch(bin_dir: Path, calls: Path, *, escapes: bool) -> None:
    """`sbatch` on PATH that notes each call in `calls`, waits SBATCH_DELAY_S, then submits.

    `escapes`: the waiting and submitting happen in a background child that outlives the
    wrapper (as an sbatch whose request is already in flight outlives its parent).
    """
    real = shutil.which("sbatch")
    assert real, "sbatch not found"
    submit = f'sleep {SBATCH_DELAY_S}; exec {real!r} "$@"'
    body = f"( {submit} ) &\nwait $!\n" if escapes else f"{submit}\n"
    wrapper = bin_dir / "sbatch"
    wrapper.write_text(f"#!/bin/bash\necho call >> {str(calls)!r}\n{body}", encoding="utf-8")
    wrapper.chmod(0o755)


def kill_monitor_during_restart_sbatch(ax: AutoexpEnv, *, escapes: bool) -> tuple[str, dict[str, str]]:
    """Run a job, scancel it, SIGKILL the monitor while the restart's sbatch runs.

    Returns attempt 1's Slurm id and the environment (slow sbatch on PATH) for the next monitor.
    """
    bin_dir, calls = ax.tmp / "bin", ax.tmp / "sbatch_calls"
    bin_dir.mkdir()
    slow_sbatch(bin_dir, calls, escapes=escapes)
    env = {**ax.env, "PATH": f"{bin_dir}{os.pathsep}{ax.env['PATH']}",
           "AUTOEXP_SLURM_TIMEOUT_S": str(SLURM_TIMEOUT_S)}  # fmt: skip
    script = ax.script('wait_for "release$n"\necho "attempt $n done"\n')
    monitor = ax.start("run", str(ax.experiment(["bash", str(script)])), env=env)
    first = ax.running(1)
    subprocess.run(["scancel", first], check=True, timeout=30)
    wait_until(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 2, "the restart's sbatch")
    monitor.send_signal(signal.SIGKILL)
    monitor.wait(timeout=30)  # reaped: its lock's holder is really gone
    return first, env


def assert_one_job_per_attempt(ax: AutoexpEnv) -> list[str]:
    """Every Slurm job carrying the session's tags is an attempt the store tracks; their ids."""
    attempts = ax.attempts()
    recorded = [a.executor_job_id for a in attempts if a.executor_job_id]
    assert len(recorded) == len(set(recorded))
    assert slurm_jobs_with_tags(ax.tags()) == set(recorded), attempts
    return recorded


@pytest.mark.slow
def test_escaped_sbatch_of_a_killed_monitor_is_adopted_not_duplicated(autoexp: AutoexpEnv) -> None:
    """The restart's submission outlives the SIGKILLed monitor and reaches Slurm 6 s later. The
    resumed monitor does not abandon attempt 2 while its sbatch may still run: it finds the job by
    its tag and adopts it. Two attempts, two Slurm jobs, none untracked."""
    first, env = kill_monitor_during_restart_sbatch(autoexp, escapes=True)
    resumed = autoexp.start("monitor-session", "--session-id", "1", env=env)
    second = autoexp.running(2)
    autoexp.flag("release2")
    assert autoexp.finish(resumed) == 0, autoexp.output(resumed)
    assert "may still be running" in autoexp.output(resumed)
    assert [a.attempt_no for a in autoexp.attempts()] == [1, 2]
    assert assert_one_job_per_attempt(autoexp) == [first, second]
    assert autoexp.reasons() == [("restart", CANCELLED_RESTART), ("stop", COMPLETED)]


@pytest.mark.slow
def test_sbatch_of_a_killed_monitor_dies_with_it(autoexp: AutoexpEnv) -> None:
    """The restart's sbatch is still waiting when the monitor is SIGKILLed: it dies with the
    monitor and never submits. The resumed monitor waits out the settle time, abandons attempt 2
    and submits attempt 3: every Slurm job with the session's tags is tracked, none runs twice."""
    first, env = kill_monitor_during_restart_sbatch(autoexp, escapes=False)
    resumed = autoexp.start("monitor-session", "--session-id", "1", env=env)
    third = autoexp.running(3)
    autoexp.flag("release2")  # the job script counts runs: attempt 3 is its 2nd run
    assert autoexp.finish(resumed) == 0, autoexp.output(resumed)
    attempts = autoexp.attempts()
    assert [(a.attempt_no, a.intent) for a in attempts] == [
        (1, "confirmed"),
        (2, "abandoned"),
        (3, "confirmed"),
    ]
    assert assert_one_job_per_attempt(autoexp) == [first, third]
    abandoned_after = (attempts[1].ended_at - attempts[1].intended_at).total_seconds()  # type: ignore[operator]
    assert abandoned_after >= SLURM_TIMEOUT_S + CONTROLLER_LAG_S - 1


def test_slurm_command_dies_with_its_parent(tmp_path: Path) -> None:
    """A process that runs a Slurm command through run_slurm_command and is SIGKILLed takes the
    command with it: the command's pid is gone within a second."""
    pid_file = tmp_path / "pid"
    command = ["bash", "-c", f"echo $$ > {str(pid_file)!r}; exec sleep 60"]
    parent = subprocess.Popen(
        [sys.executable, "-c",
         f"from oellm_autoexp.adapters.executors.slurm import run_slurm_command as r; r({command!r}, 120)"],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), "the command to start", 30)
        child = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not _alive(child), "the command to die", 5)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_timed_out_command_is_killed_with_its_children(tmp_path: Path) -> None:
    """A Slurm command that hangs past its timeout is killed together with the processes it
    started (a wrapper script's sbatch), not only the wrapper."""
    pid_file = tmp_path / "pid"
    with pytest.raises(Exception, match="did not answer within 1 s"):
        run_slurm_command(["bash", "-c", f"sleep 60 & echo $! > {str(pid_file)!r}; wait"], 1)
    grandchild = int(pid_file.read_text())
    wait_until(lambda: not _alive(grandchild), "the wrapper's child to die", 5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")

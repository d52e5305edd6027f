"""Issue 25, the safety net that needs no monitor (`restart.queued_successor: true`), on the localhost Slurm.

Each attempt is submitted with its successor queued behind it (`--dependency=afternotok:<id>
--kill-on-invalid-dep=yes`). These tests fail an attempt with no monitor running and watch Slurm
start the successor; resume a monitor and read what it recorded; and check that a stopped job's
successor never trains (its stop file) and is cancelled by a live monitor's stop decision.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_monitor_slurm import (
    COMPLETED,
    AutoexpEnv,
    slurm_lines,
    squeue_state,
    wait_until,
)

pytestmark = pytest.mark.slurm

OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
SUCCESSOR = {"queued_successor": True}
# With no monitor to renew it, the successor's hold lapses after this long (the default is minutes).
SHORT_HOLD = {"queued_successor": True, "queued_successor_hold_s": 3}


def dependency_of(job_id: str) -> str:
    """squeue's dependency column of a queued job (e.g. `afternotok:123(unfulfilled)`)."""
    lines = slurm_lines(["squeue", "--noheader", "--jobs", job_id, "-o", "%E"])
    return lines[0].strip() if lines else ""


def slurm_running(ax: AutoexpEnv, attempt_no: int) -> str:
    """Attempt `attempt_no`'s Slurm id once squeue says RUNNING (no monitor updates the store here)."""

    def seen() -> str | None:
        found = [a for a in ax.attempts() if a.attempt_no == attempt_no and a.executor_job_id]
        job_id = found[0].executor_job_id if found else None
        return job_id if job_id and squeue_state(job_id) == "RUNNING" else None

    return wait_until(seen, f"attempt {attempt_no} RUNNING in squeue")


def fail_then_finish(ax: AutoexpEnv) -> str:
    """Attempt 1 fails (exit 1) once `fail` exists; later attempts train until `finish` exists."""
    return str(
        ax.script(
            """\
if [ "$n" -eq 1 ]; then wait_for fail; echo "attempt 1 fails"; exit 1; fi
echo "attempt $n trains"
wait_for finish
"""
        )
    )


def test_failure_with_no_monitor_is_restarted_by_the_queued_successor(autoexp: AutoexpEnv) -> None:
    """`submit --no-monitor` queues attempt 2 behind attempt 1 (afternotok). Attempt 1 fails while no
    monitor runs: Slurm starts attempt 2 by itself. A monitor started afterwards judges attempt 1's end,
    adopts attempt 2 as the restart (no third job for that), records "restarted by the queued successor
    while unsupervised", queues attempt 3 behind it, and on completion cancels that one."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)], restart=SHORT_HOLD)
    done = autoexp.cli("submit", "--no-monitor", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    first = slurm_running(autoexp, 1)
    second = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 2), None), "attempt 2")
    assert second.executor_job_id and second.executor_job_id != first
    assert dependency_of(second.executor_job_id).startswith(f"afternotok:{first}")
    assert squeue_state(second.executor_job_id) == "PENDING"
    autoexp.flag("fail")
    wait_until(
        lambda: squeue_state(second.executor_job_id or "") == "RUNNING", "attempt 2 RUNNING, no monitor"
    )
    monitor = autoexp.start("monitor-session", "--session-id", "1")
    wait_until(lambda: len(autoexp.attempts()) == 3, "attempt 3 queued behind attempt 2")
    autoexp.flag("finish")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [(a.attempt_no, a.executor_job_id, a.state.value) for a in attempts[:2]] == [
        (1, first, "FAILED"), (2, second.executor_job_id, "COMPLETED"),
    ]  # fmt: skip
    assert attempts[2].state.value == "CANCELLED" and attempts[2].ended_at is not None
    reasons = autoexp.reasons()
    assert reasons[0][0] == "restart"
    assert any("restarted by the queued successor while unsupervised" in r for _, r in reasons), reasons
    assert ("stop", COMPLETED) in reasons and "cancel_stray" not in [a for a, _ in reasons], reasons
    assert (autoexp.tmp / "attempts").read_text().strip() == "2"  # attempt 3 never ran
    shown = json.loads(autoexp.cli("status", "--json").stdout)["jobs"][0]
    assert (shown["attempt"], shown["state"]) == (2, "COMPLETED")  # not the cancelled successor


def test_successor_started_after_a_stop_exits_without_training(autoexp: AutoexpEnv) -> None:
    """The job's stop file exists (as a monitor's stop decision or `autoexp cancel` writes it before
    cancelling) when attempt 1 fails: Slurm starts the successor, whose batch script sees the stop
    file and exits 0 before the command runs."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)], restart=SHORT_HOLD)
    done = autoexp.cli("submit", "--no-monitor", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    slurm_running(autoexp, 1)
    second = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 2), None), "attempt 2")
    stop = autoexp.state / "stop" / f"job-{autoexp.job().id}"
    stop.parent.mkdir(parents=True, exist_ok=True)
    stop.write_text("stopped by the test\n")
    autoexp.flag("fail")
    wait_until(lambda: slurm_state_ended(second.executor_job_id or ""), "attempt 2 to start and end")
    log = (autoexp.tmp / "out" / "logs" / f"slurm-{second.executor_job_id}.out").read_text()
    assert "this job was stopped; exiting without training" in log, log
    assert "trains" not in log and (autoexp.tmp / "attempts").read_text().strip() == "1"


def slurm_state_ended(job_id: str) -> bool:
    lines = slurm_lines(["sacct", "--noheader", "--parsable2", "-X", "--format=State", "--jobs", job_id])
    return bool(lines) and lines[0].split()[0] == "COMPLETED"


def test_stop_decision_cancels_the_successor(autoexp: AutoexpEnv) -> None:
    """A live monitor, an OOM (never restarted): the stop decision writes the stop file and cancels the
    queued successor. Whether Slurm had started it already or not, it never trains and no third
    attempt is queued; the decision record says so."""
    script = autoexp.script(
        f'if [ "$n" -eq 1 ]; then wait_for fail; echo {json.dumps(OOM_LINE)} >&2; exit 1; fi\n'
        'echo "attempt $n trains"\nwait_for finish\n'
    )
    config = autoexp.experiment(["bash", str(script)], restart=SUCCESSOR)
    monitor = autoexp.start("run", str(config))
    autoexp.running(1)
    wait_until(lambda: len(autoexp.attempts()) == 2, "attempt 2 queued")
    autoexp.flag("fail")
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert len(attempts) == 2 and attempts[1].ended_at is not None
    assert autoexp.job().status == "stopped"
    assert (autoexp.state / "stop" / f"job-{autoexp.job().id}").exists()
    reasons = [r for _, r in autoexp.reasons()]
    assert any(r.startswith("queued successor attempt 2") and "cancelled" in r for r in reasons), reasons
    log_file = autoexp.tmp / "out" / "logs" / f"slurm-{attempts[1].executor_job_id}.out"
    assert not log_file.exists() or "trains" not in log_file.read_text()
    subprocess.run(["scancel", attempts[1].executor_job_id or ""], capture_output=True, check=False)


def test_live_monitor_restart_releases_the_queued_successor(autoexp: AutoexpEnv) -> None:
    """With a monitor running, attempt 1 crashes: the restart decision adopts and releases the successor
    Slurm already holds (the Slurm id queued at submission becomes attempt 2: no new sbatch for the
    restart), and attempt 3 is queued behind it; attempt 2 completes and attempt 3 is cancelled."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)], restart=SUCCESSOR)
    monitor = autoexp.start("run", str(config))
    autoexp.running(1)
    queued = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 2), None), "attempt 2")
    autoexp.flag("fail")
    assert autoexp.running(2) == queued.executor_job_id
    wait_until(lambda: len(autoexp.attempts()) == 3, "attempt 3 queued behind attempt 2")
    autoexp.flag("finish")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    assert [a.state.value for a in autoexp.attempts()] == ["FAILED", "COMPLETED", "CANCELLED"]
    reasons = [r for _, r in autoexp.reasons()]
    assert not any("unsupervised" in r for r in reasons), reasons


@pytest.mark.torch
def test_with_no_monitor_at_all_slurm_restarts_training_from_its_checkpoint(autoexp: AutoexpEnv) -> None:
    """The real training workload (CPU) crashes at iteration 12 (an uncaught exception; it saved at 10)
    and no monitor ever runs: Slurm starts the queued successor, which resumes from the iteration-10
    checkpoint and trains to the end."""
    ckpt = autoexp.tmp / "ckpt"
    command = [sys.executable, "-m", "oellm_autoexp.workloads.train", "--steps", "13", "--save-interval", "5",
               "--step-time-s", "0.1", "--device", "cpu", "--ckpt-dir", str(ckpt), "--fault", "crash",
               "--fault-at-step", "12", "--fault-once-file", str(autoexp.tmp / "fault-once")]  # fmt: skip
    done = autoexp.cli("submit", "--no-monitor", str(autoexp.experiment(command, restart=SHORT_HOLD)))
    assert done.returncode == 0, done.stdout + done.stderr
    second = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 2), None), "attempt 2")
    wait_until(lambda: slurm_state_ended(second.executor_job_id or ""), "attempt 2 COMPLETED", timeout_s=150)
    first_log = Path(autoexp.attempts()[0].log_path or "").read_text(errors="replace")
    second_log = Path(second.log_path or "").read_text(errors="replace")
    assert "[fault-injection] rank 0: crash at iteration 12" in first_log
    assert f"successfully loaded checkpoint from {ckpt} at iteration 10" in second_log, second_log
    assert re.search(r"iteration\s+13/\s*13", second_log), second_log
    assert len(autoexp.attempts()) == 2  # nothing queued behind it: no monitor ran to do so


def test_autoexp_cancel_cancels_the_attempt_and_its_successor(autoexp: AutoexpEnv) -> None:
    """`autoexp cancel` stops the job for good: the running attempt and the successor queued behind it
    are both cancelled (a plain scancel of the first would have started the second), after the stop file."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)], restart=SUCCESSOR)
    done = autoexp.cli("submit", "--no-monitor", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    first = slurm_running(autoexp, 1)
    second = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 2), None), "attempt 2")
    cancelled = autoexp.cli("cancel")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"job {first}, job {second.executor_job_id}" in cancelled.stdout
    assert (autoexp.state / "stop" / f"job-{autoexp.job().id}").exists()
    for job_id in (first, second.executor_job_id or ""):
        wait_until(
            lambda job_id=job_id: squeue_state(job_id) in (None, "CANCELLED"), f"job {job_id} cancelled"
        )
    assert autoexp.job().status == "cancelled_by_user"

"""Slurm's own ends, produced for real on the localhost Slurm (not faked executors).

A node set DOWN under a running attempt. With `--no-requeue` Slurm ends the job NODE_FAIL; the
monitor blames the node (srun's `Node failure on NODE` line, and Slurm's node state read with
`scontrol show node` for a NODE_FAIL), excludes it, and the next attempt runs elsewhere. Without it Slurm requeues the job itself (the batch
default): the same job id runs again, which is not a failure to restart (PITFALLS: REQUEUED is not
terminal while the job is queued). The cluster is shared: the node is only taken down while it
runs this test's job alone, and is resumed in a `finally`.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Callable

import pytest

from oellm_autoexp.core.watch.evidence import Evidence
from tests.integration.test_monitor_slurm import (
    COMPLETED,
    NCCL_LINE,
    AutoexpEnv,
    slurm_lines,
    squeue_state,
    wait_until,
)

pytestmark = pytest.mark.slurm

REASON = "autoexp-test-node-fail"


def jobs_on(node: str) -> set[str]:
    return {line.strip() for line in slurm_lines(["squeue", "--noheader", "-w", node, "-o", "%i"])}


def scontrol_update(node: str, *settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", "update", f"nodename={node}", *settings], check=False,
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def node_state(node: str) -> str:
    shown = " ".join(slurm_lines(["scontrol", "show", "node", node]))
    return shown.split("State=", 1)[1].split()[0]


def take_down_under_attempt_1(autoexp: AutoexpEnv, until: Callable[[], object], what: str) -> str:
    """Set attempt 1's node DOWN once it runs there alone; resume it once `until` holds (or on failure)."""
    first = autoexp.script_started(1)
    node = wait_until(lambda: (autoexp.attempts()[0].nodes or [None])[0], "attempt 1's node")
    others = jobs_on(node) - {first}
    assert not others, f"{node} also runs {others} (another user's jobs): not taking it down"
    try:
        down = scontrol_update(node, "state=down", f"reason={REASON}")
        assert down.returncode == 0, down.stderr
        wait_until(until, what)
    finally:
        # A node Slurm already returned to service refuses `resume`: its state is what counts.
        scontrol_update(node, "state=resume")
        assert "DOWN" not in node_state(node), node_state(node)
    return node


def test_a_node_set_down_under_the_job_is_blamed_and_excluded(autoexp: AutoexpEnv) -> None:
    """NODE_FAIL (`--no-requeue`): restarted (node_fail is transient), the node named from Slurm's
    own state and kept off the next attempt (--exclude), which completes on the other node."""
    script = autoexp.script('if [ "$n" -eq 1 ]; then wait_for never; fi\necho "attempt $n done"\n')
    config = autoexp.experiment(["bash", str(script)], slurm={"sbatch": {"no-requeue": True}})
    monitor = autoexp.start("run", str(config))
    restarted = lambda: [d for d in autoexp.decisions() if d.action == "restart"]  # noqa: E731
    node = take_down_under_attempt_1(autoexp, restarted, "the restart decision")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert attempts[0].state.value == "NODE_FAIL", attempts[0]
    restart = Evidence.from_json(autoexp.decisions()[0].evidence)
    assert restart.kind == "node_fail" and restart.exclude_nodes == (node,), restart
    # srun's `Node failure on NODE` names it here; Slurm's node state (DOWN, the reason) is the
    # evidence where no line does (tests/unit/core/decide/test_node_state_blame.py).
    assert restart.blamed and restart.blamed[0].startswith(f"{node}: "), restart.blamed
    assert node not in attempts[1].nodes
    assert autoexp.reasons()[-1] == ("stop", COMPLETED)


def test_a_job_slurm_requeues_after_a_node_failure_is_not_restarted(autoexp: AutoexpEnv) -> None:
    """Without --no-requeue Slurm puts the job back in the queue itself and runs it again under its
    id: the monitor waits for it (no restart of its own, no second Slurm job) and it completes."""
    script = autoexp.script('if [ "$n" -eq 1 ]; then wait_for never; fi\necho "attempt $n done"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    take_down_under_attempt_1(autoexp, lambda: autoexp.decisions(), "the job's end")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    (attempt,) = autoexp.attempts()
    assert attempt.state.value == "COMPLETED" and autoexp.reasons() == [("stop", COMPLETED)]
    assert (
        "attempt 2 done"
        in (autoexp.tmp / "out" / "logs" / f"slurm-{attempt.executor_job_id}.out").read_text()
    )


def test_a_job_requeued_with_scontrol_is_waited_for_not_restarted(autoexp: AutoexpEnv) -> None:
    """`scontrol requeue` of the running attempt: Slurm runs it again under its id (REQUEUED, then
    PENDING, then RUNNING); the monitor neither restarts it nor submits a second job, and the
    requeued run completes."""
    script = autoexp.script('if [ "$n" -eq 1 ]; then wait_for never; fi\necho "attempt $n done"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    job_id = autoexp.script_started(1)
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, text=True, timeout=30)
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    (attempt,) = autoexp.attempts()
    assert attempt.executor_job_id == job_id and attempt.state.value == "COMPLETED"
    assert autoexp.reasons() == [("stop", COMPLETED)]
    assert "attempt 2 done" in (autoexp.tmp / "out" / "logs" / f"slurm-{job_id}.out").read_text()


SCANCEL_ERROR = "scancel: error: Kill job error on job id: Unexpected message received"
OOM_LINE = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB."


def broken_scancel(autoexp: AutoexpEnv) -> dict[str, str]:
    """A wrapper named scancel first on PATH, failing with SCANCEL_ERROR while the flag file
    `scancel-broken` exists (created here); the environment that puts it first."""
    real = shutil.which("scancel")
    assert real is not None
    bindir = autoexp.tmp / "bin"
    bindir.mkdir()
    wrapper = bindir / "scancel"
    wrapper.write_text(
        f'#!/bin/bash\nif [ -e "{autoexp.tmp}/scancel-broken" ]; then\n'
        f"  echo '{SCANCEL_ERROR}' >&2; exit 1\nfi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    autoexp.flag("scancel-broken")
    return autoexp.env | {"PATH": f"{bindir}:{autoexp.env.get('PATH', '')}"}


def test_a_failing_scancel_holds_the_resubmission_until_a_cancel_goes_through(autoexp: AutoexpEnv) -> None:
    """The restart's scancel fails (a wrapper named scancel first on PATH, failing while a flag
    file exists): the old attempt still runs, so no second attempt is submitted beside it; the
    monitor says so and cancels again; once scancel works the old one is cancelled, the next
    attempt runs and completes. Before, attempt 2 was submitted at once and attempt 1 was left
    running after the session ended."""
    env = broken_scancel(autoexp)
    script = autoexp.script(
        f'if [ "$n" -eq 1 ]; then echo {json.dumps(NCCL_LINE)} >&2; wait_for never; fi\necho "attempt $n done"\n'
    )
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])), env=env)
    first = autoexp.running(1)
    wait_until(lambda: "cancelling again" in autoexp.output(monitor), "the held resubmission")
    assert len(autoexp.attempts()) == 1 and squeue_state(first) == "RUNNING"
    (autoexp.tmp / "scancel-broken").unlink()
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["CANCELLED", "COMPLETED"], attempts
    reasons = autoexp.reasons()
    assert [a for a, _ in reasons] == ["restart", "none", "none", "stop"], reasons
    assert reasons[1][1] == f"restart requested, cancel failing: {SCANCEL_ERROR}", reasons
    assert reasons[2][1].startswith(f"job {first} cancelled after "), reasons
    assert squeue_state(first) in (None, "CANCELLED")


def test_a_stop_whose_scancel_fails_is_cancelled_again_until_the_job_ends(autoexp: AutoexpEnv) -> None:
    """A fatal OOM line stops the job while it runs, and its scancel fails: the monitor says so
    (an event; `status` shows "stop requested, cancel failing: <scancel's stderr>"), keeps
    running and cancels again on its backoff, submits nothing; once scancel works the job is
    cancelled, Slurm ends it, and the monitor ends with the job stopped. Before (#27), the one
    failed scancel was never tried again: the job ran on to its time limit under a stopped job."""
    env = broken_scancel(autoexp)
    script = autoexp.script(f"echo {json.dumps(OOM_LINE)} >&2\nwait_for never\n")
    config = autoexp.experiment(["bash", str(script)], monitoring={"fatal_settle_s": 1})
    monitor = autoexp.start("run", str(config), env=env)
    first = autoexp.running(1)
    failing = f"stop requested, cancel failing: {SCANCEL_ERROR}"
    wait_until(lambda: ("none", failing) in autoexp.reasons(), "the failing cancel's event")
    status = autoexp.cli("status")
    assert failing in status.stdout, status.stdout + status.stderr
    wait_until(lambda: "scancel failed again" in autoexp.output(monitor), "a second try")
    assert monitor.poll() is None and squeue_state(first) == "RUNNING"
    assert len(autoexp.attempts()) == 1 and autoexp.job().status == "stopped"
    (autoexp.tmp / "scancel-broken").unlink()
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    (attempt,) = autoexp.attempts()
    assert attempt.state.value == "CANCELLED" and squeue_state(first) in (None, "CANCELLED")
    reasons = autoexp.reasons()
    assert reasons[0] == ("stop", "Permanent failure detected (excluded error_type: oom)"), reasons
    assert reasons[1] == ("none", failing), reasons
    assert reasons[-1][0] == "none" and reasons[-1][1].startswith(f"job {first} cancelled after "), reasons
    assert f"job {first} cancelled after " in autoexp.cli("status").stdout


def _successor_queued_behind_an_oom(autoexp: AutoexpEnv) -> tuple[subprocess.Popen[bytes], str]:
    """`restart.queued_successor` with a scancel that fails: attempt 1 runs, attempt 2 is queued
    behind it, then attempt 1 fails with an OOM (a stop). The monitor and attempt 2's Slurm id."""
    env = broken_scancel(autoexp)
    script = autoexp.script(
        f'if [ "$n" -eq 1 ]; then wait_for fail; echo {json.dumps(OOM_LINE)} >&2; exit 1; fi\n'
        'echo "attempt $n trains"\nwait_for finish\n'
    )
    config = autoexp.experiment(["bash", str(script)], restart={"queued_successor": True})
    monitor = autoexp.start("run", str(config), env=env)
    autoexp.running(1)
    wait_until(lambda: len(autoexp.attempts()) == 2, "attempt 2 queued")
    second = autoexp.attempts()[1].executor_job_id or ""
    autoexp.flag("fail")
    return monitor, second


def test_a_dropped_successor_whose_scancel_fails_is_cancelled_again(autoexp: AutoexpEnv) -> None:
    """`restart.queued_successor`: attempt 1 fails with an OOM (stop), and the scancel of the
    successor queued behind it fails: the monitor says so, stays, and cancels it again on the
    backoff; once scancel works the successor is cancelled (the dropped event) and the monitor
    ends. Before, the one failed scancel was never tried again: the monitor ended at once and
    left the successor in Slurm's queue."""
    monitor, second = _successor_queued_behind_an_oom(autoexp)
    failed = f"attempt 2 (job {second}): scancel failed again (2 times)"  # daemon/cancels.py's words
    wait_until(lambda: failed in autoexp.output(monitor), "a second try")
    assert monitor.poll() is None and squeue_state(second) == "PENDING", autoexp.output(monitor)
    assert autoexp.attempts()[1].ended_at is None and autoexp.job().status == "stopped"
    (autoexp.tmp / "scancel-broken").unlink()
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["FAILED", "CANCELLED"], attempts
    assert squeue_state(second) in (None, "CANCELLED")
    assert ("none", f"queued successor attempt 2 (job {second}) cancelled: Permanent failure detected "
            "(excluded error_type: oom)") in autoexp.reasons(), autoexp.reasons()  # fmt: skip
    log_file = autoexp.tmp / "out" / "logs" / f"slurm-{second}.out"
    assert not log_file.exists() or "trains" not in log_file.read_text()


def test_a_dropped_successor_left_failing_by_one_monitor_is_cancelled_by_the_next(
    autoexp: AutoexpEnv,
) -> None:
    """As above, but monitor 1 is stopped (Ctrl-C) while the successor's scancel still fails: the
    failure is an event in the store (daemon/cancels.py), so `autoexp monitor-session`, a new
    process, cancels the successor (scancel works again), records it cancelled and ends the
    session. Before, the retry lived in monitor 1's memory: the next monitor did not even load
    the stopped job, and the successor stayed in Slurm's queue."""
    monitor, second = _successor_queued_behind_an_oom(autoexp)
    failing = f"cancel requested, cancel failing: {SCANCEL_ERROR}"
    wait_until(lambda: ("none", failing) in autoexp.reasons(), "the successor's failing cancel event")
    monitor.send_signal(signal.SIGINT)
    assert autoexp.finish(monitor, timeout_s=30) == 0, autoexp.output(monitor)
    assert squeue_state(second) == "PENDING" and autoexp.attempts()[1].ended_at is None

    (autoexp.tmp / "scancel-broken").unlink()
    done = autoexp.cli("monitor-session", "--session-id", "1")
    assert done.returncode == 1, done.stdout + done.stderr  # ended: the job was stopped
    assert [a.state.value for a in autoexp.attempts()] == ["FAILED", "CANCELLED"], autoexp.attempts()
    assert squeue_state(second) in (None, "CANCELLED")
    reasons = autoexp.reasons()
    assert ("none", f"job {second} cancelled (an earlier monitor's scancel had failed)") in reasons, reasons
    assert ("none", f"queued successor attempt 2 (job {second}) cancelled: Permanent failure detected "
            "(excluded error_type: oom)") in reasons, reasons  # fmt: skip

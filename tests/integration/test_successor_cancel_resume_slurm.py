"""On the localhost Slurm: a queued successor that runs on a node a restart excluded, whose scancel
failed, is cancelled again by the next monitor (daemon/resume.py `cancel_left_failing`), not
watched; the restart's attempt runs elsewhere, never beside it."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.integration.test_monitor_slurm import AutoexpEnv, squeue_state, wait_until
from tests.integration.test_preflight_slurm import occupy
from tests.integration.test_resilience_slurm import XID_LINE, excluded_nodes
from tests.integration.test_slurm_ends import SCANCEL_ERROR, broken_scancel

pytestmark = pytest.mark.slurm


def test_a_successor_left_running_on_an_excluded_node_is_cancelled_by_the_next_monitor(
    autoexp: AutoexpEnv,
) -> None:
    """node2 held by another job; `submit --no-monitor`: attempt 1 prints an Xid naming node1 and
    fails, and Slurm starts the queued successor (attempt 2) on node1. Monitor 1 (its scancel broken)
    restarts attempt 1 with node1 excluded, so attempt 2 must go: its scancel fails, and monitor 1
    submits nothing beside it; it is stopped. Monitor 2 cancels attempt 2 on resume and submits
    attempt 3 with node1 excluded; once node2 is free attempt 3 runs there and completes."""
    holder = occupy(autoexp, "node2")
    env = broken_scancel(autoexp)
    script = autoexp.script(
        f'if [ "$n" -eq 1 ]; then echo "{XID_LINE}"; exit 1; fi\n'
        'echo "attempt $n trains on $SLURMD_NODENAME"\nwait_for finish\n'
    )
    restart = {"queued_successor": True, "queued_successor_hold_s": 0}
    config = autoexp.experiment(["bash", str(script)], restart=restart)
    done = autoexp.cli("submit", "--no-monitor", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    second = wait_until(lambda: next((a.executor_job_id for a in autoexp.attempts() if a.attempt_no == 2), None),
                        "attempt 2 queued")  # fmt: skip
    wait_until(lambda: squeue_state(second) == "RUNNING", "attempt 2 started by Slurm on node1")

    first_monitor = autoexp.start("monitor-session", "--session-id", "1", env=env)
    failing = f"cancel requested, cancel failing: {SCANCEL_ERROR}"
    wait_until(lambda: ("none", failing) in autoexp.reasons(), "the successor's failing cancel event")
    first_monitor.send_signal(signal.SIGINT)
    assert autoexp.finish(first_monitor, timeout_s=30) == 0, autoexp.output(first_monitor)
    assert [a.attempt_no for a in autoexp.attempts()] == [1, 2]  # nothing beside attempt 2
    assert squeue_state(second) == "RUNNING"

    (autoexp.tmp / "scancel-broken").unlink()
    monitor = autoexp.start("monitor-session", "--session-id", "1")
    third = wait_until(lambda: next((a.executor_job_id for a in autoexp.attempts() if a.attempt_no == 3), None),
                       "attempt 3 submitted")  # fmt: skip
    wait_until(lambda: squeue_state(second) in (None, "CANCELLED"), "attempt 2 cancelled (not COMPLETING)")
    assert excluded_nodes(third) == "node1"
    subprocess.run(["scancel", holder], check=True, timeout=30)
    wait_until(lambda: squeue_state(third) == "RUNNING", "attempt 3 running on node2")
    autoexp.flag("finish")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts[:3]] == ["FAILED", "CANCELLED", "COMPLETED"], attempts
    assert attempts[2].nodes == ("node2",)
    assert ("none", f"queued successor attempt 2 (job {second}) cancelled: an earlier monitor's cancel of it "
            "had not gone through") in autoexp.reasons(), autoexp.reasons()  # fmt: skip

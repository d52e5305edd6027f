"""Issue 25, the monitor as a Slurm job (`--supervisor slurm`) and a monitor that survives SIGHUP, on the
localhost Slurm.

The monitor job is a singleton that queues its successor as it starts: `scancel` of the running one
lets the successor start (seconds, not minutes), which takes the session over and carries on; the
USR1 a margin before its time limit makes it stop cleanly (COMPLETED, not TIMEOUT) while the
successor goes on; when the session ends, the queued successor is cancelled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from oellm_autoexp.plan.monitor_job import monitor_job_name
from tests.integration.test_monitor_slurm import AutoexpEnv, sacct_state, slurm_lines, wait_until

pytestmark = pytest.mark.slurm

BACK_WITHIN_S = 120.0  # the bound for a monitor to be back after its job was scancelled


def monitor_jobs(name: str) -> dict[str, str]:
    """This user's jobs named `name`: Slurm id -> state."""
    lines = slurm_lines(["squeue", "--noheader", "--me", f"--name={name}", "-o", "%i %T"])
    return dict(line.split() for line in lines)


def running_monitor(ax: AutoexpEnv, name: str, not_id: str | None = None) -> tuple[str, int]:
    """A RUNNING monitor job (other than `not_id`) that holds the session's lock: (Slurm id, pid)."""

    def seen() -> tuple[str, int] | None:
        running = [i for i, state in monitor_jobs(name).items() if state == "RUNNING" and i != not_id]
        session = ax.read(lambda s: s.get_session(1))
        if len(running) != 1 or session is None or session.monitor_pid is None:
            return None
        log = (ax.state / "monitor-1.slurm.out").read_text(errors="replace")
        started = f"monitor job {running[0]} started: pid {session.monitor_pid} "
        return (running[0], session.monitor_pid) if started in log else None

    return wait_until(seen, f"a running monitor job other than {not_id} holding the lock", BACK_WITHIN_S)


def cancel_monitor_jobs(name: str) -> None:
    subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30, check=False)


def fail_then_finish(ax: AutoexpEnv) -> str:
    return str(
        ax.script(
            'if [ "$n" -eq 1 ]; then wait_for fail; echo "attempt 1 fails"; exit 1; fi\n'
            'echo "attempt $n trains"\nwait_for finish\n'
        )
    )


def test_scancelled_monitor_job_is_back_within_two_minutes_and_the_session_goes_on(
    autoexp: AutoexpEnv,
) -> None:
    """`submit --supervisor slurm` runs the monitor as a job with a queued successor. `scancel` of the
    running monitor job: the successor starts, takes the lock and logs it; the training attempt then
    fails and the NEW monitor restarts it; the run completes, the session ends and no monitor job is
    left queued."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)])
    name = monitor_job_name(str(autoexp.state.absolute()), 1)
    try:
        done = autoexp.cli("submit", "--supervisor", "slurm", str(config))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"name {name}" in done.stdout
        first, first_pid = running_monitor(autoexp, name)
        assert "PENDING" in monitor_jobs(name).values()  # its successor, queued behind the singleton
        autoexp.running(1)
        cancelled_at = time.monotonic()
        subprocess.run(["scancel", first], check=True, timeout=30)
        second, second_pid = running_monitor(autoexp, name, not_id=first)
        back_s = time.monotonic() - cancelled_at
        assert back_s < BACK_WITHIN_S and second_pid != first_pid
        autoexp.flag("fail")
        autoexp.running(2)  # restarted by the monitor job that took over
        autoexp.flag("finish")
        wait_until(
            lambda: autoexp.read(lambda s: s.get_session(1)).status == "completed", "the session's end"
        )
        wait_until(lambda: not monitor_jobs(name), "no monitor job left")
        log = (autoexp.state / "monitor-1.slurm.out").read_text(errors="replace")
        assert "got signal 15; stopping" in log and f"monitor job {first} stopped" in log
        assert f"monitor job {second} started" in log
        assert "session 1 ended: cancelled the queued successor" in log
        assert [a.state.value for a in autoexp.attempts()] == ["FAILED", "COMPLETED"]
        print(f"monitor back {back_s:.1f} s after scancel")
    finally:
        cancel_monitor_jobs(name)


def test_monitor_job_hands_over_before_its_time_limit(autoexp: AutoexpEnv) -> None:
    """`monitoring.supervisor: slurm` in the config. A 2-minute monitor job warned 110 s before its limit
    (USR1, within Slurm's 30 s check): it stops cleanly and ends COMPLETED, not TIMEOUT; the queued successor takes the session."""
    supervisor = {"supervisor": "slurm", "supervisor_slurm": {"time_min": 2, "handover_margin_s": 110}}
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)], supervisor)
    name = monitor_job_name(str(autoexp.state.absolute()), 1)
    try:
        done = autoexp.cli("submit", str(config))  # monitoring.supervisor: slurm, no flag
        assert done.returncode == 0, done.stdout + done.stderr
        first, _ = running_monitor(autoexp, name)
        running_monitor(autoexp, name, not_id=first)  # the successor, holding the lock
        log = (autoexp.state / "monitor-1.slurm.out").read_text(errors="replace")
        assert "got SIGUSR1: the time limit is near; handing over to the queued successor" in log
        wait_until(lambda: sacct_state(first) == "COMPLETED", f"monitor job {first} COMPLETED in sacct")
        assert autoexp.read(lambda s: s.get_session(1)).status == "active"
    finally:
        cancel_monitor_jobs(name)


def test_detached_monitor_survives_sighup_and_logs_start_and_stop(autoexp: AutoexpEnv) -> None:
    """`kill -HUP` (what a session reaper sends) no longer kills a detached monitor: it logs the signal
    and keeps its lock; SIGTERM still stops it, and the log says when it started and stopped."""
    config = autoexp.experiment(["bash", fail_then_finish(autoexp)])
    done = autoexp.cli("submit", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    pid = int((autoexp.state / "monitor-1.pid").read_text())
    log = autoexp.state / "monitor-1.log"
    try:
        autoexp.running(1)
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: "got SIGHUP; ignored" in log.read_text(), "the SIGHUP line")
        beat = autoexp.read(lambda s: s.get_session(1)).monitor_heartbeat
        wait_until(
            lambda: autoexp.read(lambda s: s.get_session(1)).monitor_heartbeat != beat,
            "a heartbeat after SIGHUP",
        )
        os.kill(pid, 0)  # still there
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: "monitor stopped" in log.read_text(), "the stop line")
        text = log.read_text()
        assert f"monitor started: pid {pid} on " in text
        assert autoexp.read(lambda s: s.get_session(1)).monitor_pid is None  # released
    finally:
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)

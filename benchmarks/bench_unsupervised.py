"""Seconds unsupervised after a monitor death (issue 25), on the localhost Slurm.

Ours, `--supervisor slurm`: the monitor runs as a singleton Slurm job with its successor queued
behind it; the running monitor job is `scancel`led (what a site's cleanup, a node loss or a user
does) and we time until a new monitor holds the session's lock again (a fresh heartbeat from
another pid). Baseline, the same run in the same benchmark: a monitor on the login node (today's
default, and what upstream's supervisor is: one process on the login node) SIGKILLed: nothing
brings it back; we wait `--wait-s` and report it still unsupervised (a human must notice and run
`autoexp monitor-session`). Failure -> next attempt RUNNING with and without a monitor is
bench_successor_restart.py.

    python benchmarks/bench_unsupervised.py [--trials 3] [--wait-s 60]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import Report, parse_args, require_slurm, save_result, workdir
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.plan.monitor_job import monitor_job_name
from tests.integration.test_monitor_slurm import AutoexpEnv, autoexp_environ, slurm_lines, wait_until


def holder(ax: AutoexpEnv) -> tuple[int | None, float | None]:
    """(the lock holder's pid, its heartbeat's age in s)."""
    with SQLiteStore(ax.state, read_only=True) as store:
        session = store.get_session(1)
    if session is None or session.monitor_pid is None or session.monitor_heartbeat is None:
        return None, None
    return session.monitor_pid, time.time() - session.monitor_heartbeat.timestamp()


def running_monitor_job(name: str) -> str | None:
    lines = slurm_lines(["squeue", "--noheader", "--me", f"--name={name}", "-o", "%i %T"])
    running = [line.split()[0] for line in lines if line.split()[1] == "RUNNING"]
    return running[0] if len(running) == 1 else None


def slurm_trial(tmp: Path) -> float:
    """scancel the running monitor job; seconds until another monitor holds the lock, beating."""
    ax = AutoexpEnv(tmp, env=autoexp_environ() | {"PYTHONUNBUFFERED": "1"})
    name = monitor_job_name(str(ax.state.absolute()), 1)
    try:
        script = ax.script("wait_for finish\n")
        done = ax.cli("submit", "--supervisor", "slurm", str(ax.experiment(["bash", str(script)])))
        if done.returncode != 0:
            sys.exit(f"submit failed: {done.stdout}{done.stderr}")
        first = wait_until(lambda: running_monitor_job(name), "a running monitor job", 120)
        first_pid = wait_until(lambda: holder(ax)[0], "the monitor holding the lock", 120)
        ax.running(1)
        killed_at = time.monotonic()
        subprocess.run(["scancel", first], check=True, timeout=30)

        def back() -> bool:
            pid, age = holder(ax)
            return pid is not None and pid != first_pid and age is not None and age < 5

        wait_until(back, "a new monitor holding the lock", 180)
        return time.monotonic() - killed_at
    finally:
        ax.flag("finish")
        subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30, check=False)
        ax.cleanup()


def login_trial(tmp: Path, wait_s: float) -> float | None:
    """SIGKILL a login-node monitor; None when no monitor came back within `wait_s`."""
    ax = AutoexpEnv(tmp, env=autoexp_environ() | {"PYTHONUNBUFFERED": "1"})
    try:
        script = ax.script("wait_for finish\n")
        monitor = ax.start("run", str(ax.experiment(["bash", str(script)])))
        ax.running(1)
        killed_pid = monitor.pid
        os.kill(monitor.pid, signal.SIGKILL)
        monitor.wait()
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < wait_s:
            pid, age = holder(ax)
            if pid is not None and pid != killed_pid and age is not None and age < 5:
                return time.monotonic() - killed_at
            time.sleep(1)
        return None
    finally:
        ax.flag("finish")
        ax.cleanup()


def _options(parser: Any) -> None:
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--wait-s", type=float, default=60.0, help="how long the baseline is watched")


def main() -> None:
    args = parse_args(__doc__, _options)
    trials = 1 if args.quick else args.trials
    require_slurm()
    out = Report()
    ours = []
    for i in range(trials):
        with workdir(f"unsupervised-slurm-{i}") as name:
            ours.append(round(slurm_trial(Path(name)), 2))
    with workdir("unsupervised-login") as name:
        login = login_trial(Path(name), args.wait_s)
    out("seconds unsupervised after the monitor died (localhost Slurm)")
    out(f"  ours, --supervisor slurm, monitor job scancelled: median {statistics.median(ours):.1f} s "
        f"(min {min(ours):.1f}, max {max(ours):.1f}; {trials} trials: {ours})")  # fmt: skip
    shown = (
        f"{login:.1f} s"
        if login is not None
        else f"never within {args.wait_s:.0f} s (a human must resume it)"
    )
    out(
        f"  baseline, a monitor on the login node (today's default; upstream's supervisor) SIGKILLed: {shown}"
    )
    save_result("unsupervised", args, {"ours_s": ours, "ours_median_s": statistics.median(ours),
                                       "login_s": login, "login_wait_s": args.wait_s}, out.text)  # fmt: skip


if __name__ == "__main__":
    main()

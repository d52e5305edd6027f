#!/usr/bin/env python3
"""Scenario harness: real failures of the `train` workload, run through `autoexp` as a user would.

    scripts/test_auto_restart.py --scenario all
    scripts/test_auto_restart.py --scenario scancel --iterations 3
    scripts/test_auto_restart.py --scenario oom --slurm-preset juwels --config-dir my/config

Each scenario submits config/experiments/train_local_slurm.yaml (or --config) with
`autoexp submit` into its own state dir, so a detached monitor (pid file + log under the
state dir) watches it, then makes the job fail for real and checks what the monitor did by
reading the session database (attempts, decisions and their reasons), not only squeue:

  scancel      plain `scancel` of the RUNNING job -> restart as a new Slurm job id (N times)
  hang         one rank stops (`--fault hang`), the other blocks in its all-reduce; the
               monitor's no-progress limit fires first -> `Transient failure detected (error_type=hang)`
  nccl         the same stop, but gloo's process-group timeout fires first: a real collective
               failure on CPU, which the pattern library classifies as `nccl_timeout` -> restart
  oom          a real host allocation failure (`--fault oom`) -> no restart,
               `Permanent failure detected (excluded error_type: oom)`
  max_retries  four scancels: restarts after 1-3, none after 4, `retry budget exhausted (attempt 4/3)`

The localhost cluster is the default (`scripts/slurm_local.sh env` names its slurm.conf when
SLURM_CONF is unset); `--slurm-preset NAME` swaps the `slurm:` group for any real cluster.
A monitor that is not running (killed, crashed, or `--no-monitor`) is reported at once as
`✗ monitor not running`, never waited for. Exit 0 when every scenario passed, 1 otherwise.
Every session is ended with `autoexp cancel` and its monitor stopped, pass or fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run from a checkout without installing

from oellm_autoexp.adapters.store.sqlite_store import (  # noqa: E402
    AttemptInfo,
    DecisionInfo,
    JobInfo,
    JobStatus,
    SQLiteStore,
)
from oellm_autoexp.daemon.session_lock import monitor_liveness, pid_runs  # noqa: E402

T = TypeVar("T")
SCENARIOS = ("scancel", "hang", "nccl", "oom", "max_retries")
DEFAULT_CONFIG = REPO_ROOT / "config" / "experiments" / "train_local_slurm.yaml"

# -- timing (seconds). The localhost cluster starts a job in < 1 s; torch needs ~10-15 s to
# import in 3 processes on 2 cores (more when scenarios run side by side).
WAIT_POLL_S = 0.5
RUNNING_TIMEOUT_S = 120.0  # submit -> squeue RUNNING (a busy real cluster needs --timeout-scale)
DECISION_TIMEOUT_S = 90.0  # a scancel -> the monitor's decision (poll 2 s, sacct lag ~5 s)
FAULT_TIMEOUT_S = 240.0  # submit -> the fault's decision (torch start-up + steps + detection)
RESUBMIT_TIMEOUT_S = 60.0  # a restart decision -> the next attempt's job id
NO_RESTART_WATCH_S = 8.0  # after a stop: no further attempt may appear in this long
MONITOR_STOP_S = 20.0  # after `autoexp cancel`, the monitor ends by itself within this
# A heartbeat older than this means the monitor holding the session is gone (the config's
# heartbeat_interval_s is 2 s; the monitor's own stale-lock limit is 120 s).
HEARTBEAT_STALE_S = 60.0
# megatron_transient's `transient` rule grants 3 restarts; a longer scancel series is split
# into sessions of at most this many cancels, so every cancel is expected to restart.
CANCELS_PER_SESSION = 3

# -- the workload per scenario: train's own flags (backend.args) and monitor settings.
TRAIN_ARGS = ["--steps", "2000", "--save-interval", "5", "--step-time-s", "0.5", "--device", "cpu"]
FAULT_STEP = "7"  # after the checkpoint at 5: the next attempt resumes from it
REASON_CANCEL = "Transient failure detected (error_type=cancelled)"
REASON_HANG = "Transient failure detected (error_type=hang)"
REASON_NCCL = re.compile(r"Transient failure detected \(error_type=(nccl|nccl_timeout)\)")
REASON_OOM = "Permanent failure detected (excluded error_type: oom)"
REASON_BUDGET = "retry budget exhausted (attempt 4/3)"
HANG_MONITORING = [  # the monitor's progress limit (10 s) beats gloo's 600 s default
    "monitoring.hang.progress_factor=10",
    "monitoring.hang.progress_floor_s=10",
    "monitoring.hang.no_output_timeout_s=20",
]
NCCL_PG_TIMEOUT_S = "8"  # gloo gives up after 8 s; the monitor's limits are far longer
NCCL_MONITORING = ["monitoring.hang.progress_floor_s=300", "monitoring.hang.no_output_timeout_s=300"]

_print_lock = threading.Lock()


class ScenarioFailed(Exception):
    """A check failed; the message is printed after ✗."""


def say(scenario: str, ok: bool | None, message: str) -> None:
    """`[10:30:20] ✓ [scancel] Submitted job 12345` (✓ pass, ✗ fail, · information)."""
    mark = {True: "✓", False: "✗", None: "·"}[ok]
    with _print_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {mark} [{scenario}] {message}", flush=True)


@dataclass
class Options:
    config: Path
    work_dir: Path
    overrides: list[str]
    config_dirs: list[str]
    no_monitor: bool
    timeout_scale: float


@dataclass
class Session:
    """One `autoexp submit` into its own state dir, and the ways to look at it."""

    scenario: str
    state_dir: Path
    opts: Options
    session_id: int | None = None
    store: SQLiteStore | None = None
    seen_job_ids: set[str] = field(default_factory=set)

    # -- starting and ending ----------------------------------------------------------------

    def autoexp(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(self.state_dir), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)

    def submit(self, train_args: list[str], overrides: list[str]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        out_dir = self.state_dir / "out"
        args = ["submit"]  # options first: the overrides after CONFIG are one positional list
        for d in self.opts.config_dirs:
            args += ["--config-dir", d]
        if self.opts.no_monitor:
            args.append("--no-monitor")
        args.append(str(self.opts.config))
        ckpt = ["--ckpt-dir", str(out_dir / "checkpoints")]
        args += [
            f"experiment.output_dir={out_dir}",
            f"backend.args={json.dumps([*train_args, *ckpt])}",  # YAML flow list of strings
            *self.opts.overrides,
            *overrides,
        ]
        proc = self.autoexp(*args)
        if proc.returncode != 0:
            raise ScenarioFailed(
                f"autoexp submit failed (exit {proc.returncode}): {proc.stderr or proc.stdout}"
            )
        self.store = SQLiteStore(self.state_dir)
        sessions = self.store.list_sessions()
        if not sessions:
            raise ScenarioFailed(f"autoexp submit made no session in {self.state_dir}: {proc.stdout}")
        self.session_id = sessions[-1].id
        attempt = self.wait(lambda: self.attempt(1), RESUBMIT_TIMEOUT_S, "attempt 1 to be submitted")
        self.seen_job_ids.add(attempt.executor_job_id or "")
        say(self.scenario, True, f"Submitted job {attempt.executor_job_id} (session {self.session_id})")

    def close(self) -> None:
        """End the session for good (`autoexp cancel`), stop its monitor, scancel leftovers."""
        if self.session_id is not None:
            self.autoexp("cancel", "--session", str(self.session_id), timeout_s=60.0)
            pid = self.monitor_pid()
            deadline = time.monotonic() + MONITOR_STOP_S
            while pid is not None and is_alive(pid) and time.monotonic() < deadline:
                time.sleep(WAIT_POLL_S)
            if pid is not None and is_alive(pid):
                say(self.scenario, None, f"monitor pid {pid} still running after cancel; sending SIGTERM")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            live = [a.executor_job_id for a in self.attempts() if a.executor_job_id]
            if live:
                subprocess.run(["scancel", *live], capture_output=True, timeout=60, check=False)
        if self.store is not None:
            self.store.close()

    # -- reading the store ------------------------------------------------------------------

    def job(self) -> JobInfo:
        assert self.store is not None and self.session_id is not None
        jobs = self.store.jobs_for_session(self.session_id)
        if len(jobs) != 1:
            raise ScenarioFailed(f"expected one job in session {self.session_id}, found {len(jobs)}")
        return jobs[0]

    def attempts(self) -> list[AttemptInfo]:
        if self.store is None or self.session_id is None:
            return []
        return self.store.attempts_for_session(self.session_id)

    def attempt(self, number: int) -> AttemptInfo | None:
        """Attempt `number` once it has a Slurm job id."""
        for a in self.attempts():
            if a.attempt_no == number and a.executor_job_id:
                return a
        return None

    def decision_for(self, attempt: AttemptInfo) -> DecisionInfo | None:
        """The decision taken about an attempt (the last one, if there were several)."""
        assert self.store is not None
        found = [d for d in self.store.decisions_for_job(attempt.job_id) if d.attempt_id == attempt.id]
        return found[-1] if found else None

    # -- the monitor ------------------------------------------------------------------------

    def monitor_pid(self) -> int | None:
        pid_file = self.state_dir / f"monitor-{self.session_id}.pid"
        try:
            return int(pid_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    def monitor_problem(self) -> str | None:
        """Why the session's monitor is not running, or None while it is."""
        pid = self.monitor_pid()
        if pid is None:
            return f"no monitor pid file in {self.state_dir} (submitted with --no-monitor?)"
        if not is_alive(pid):
            log = self.state_dir / f"monitor-{self.session_id}.log"
            return f"monitor pid {pid} is not running (its log: {log}{last_line(log)})"
        assert self.store is not None and self.session_id is not None
        session = self.store.get_session(self.session_id)
        if session is None or session.monitor_heartbeat is None:
            return None  # the lock is not taken yet (or already released): nothing to judge
        live = monitor_liveness(session, datetime.now(UTC), HEARTBEAT_STALE_S)
        return None if live.alive else f"monitor {live.detail}"

    # -- waiting ----------------------------------------------------------------------------

    def wait(self, found: Callable[[], T | None], timeout_s: float, what: str) -> T:
        """Poll `found` until it returns a value; fail loudly when the monitor is gone or time is up.

        The monitor is checked on every poll while the job is still active: a dead monitor
        would make every wait run into its timeout, so it is reported at once instead.
        """
        deadline = time.monotonic() + timeout_s * self.opts.timeout_scale
        while True:
            value = found()
            if value is not None:
                return value
            if self.session_id is not None:
                job = self.job()
                if job.status == JobStatus.ACTIVE and (problem := self.monitor_problem()):
                    raise ScenarioFailed(f"monitor not running: {problem}; gave up waiting for {what}")
                if job.status != JobStatus.ACTIVE:
                    raise ScenarioFailed(f"job ended ({job.status}: {job.status_reason}) before {what}")
            if time.monotonic() > deadline:
                raise ScenarioFailed(
                    f"timed out after {timeout_s * self.opts.timeout_scale:.0f} s waiting for {what}"
                )
            time.sleep(WAIT_POLL_S)

    def wait_running(self, attempt: AttemptInfo) -> None:
        job_id = attempt.executor_job_id or ""
        self.wait(
            lambda: squeue_state(job_id) == "RUNNING" or None, RUNNING_TIMEOUT_S, f"job {job_id} RUNNING"
        )
        say(self.scenario, True, f"Job {job_id} is RUNNING")

    def wait_decision(self, attempt: AttemptInfo, timeout_s: float) -> DecisionInfo:
        decision = self.wait(
            lambda: self.decision_for(attempt), timeout_s, f"a decision about job {attempt.executor_job_id}"
        )
        say(
            self.scenario,
            None,
            f"Decision on job {attempt.executor_job_id}: {decision.action}: {decision.reason}",
        )
        return decision

    def wait_restarted(self, previous: AttemptInfo) -> AttemptInfo:
        nxt = self.wait(
            lambda: self.attempt(previous.attempt_no + 1), RESUBMIT_TIMEOUT_S, "the restarted job"
        )
        if nxt.executor_job_id in self.seen_job_ids:
            raise ScenarioFailed(f"attempt {nxt.attempt_no} reuses job id {nxt.executor_job_id}")
        self.seen_job_ids.add(nxt.executor_job_id or "")
        say(self.scenario, True, f"Found restarted job: {nxt.executor_job_id} (attempt {nxt.attempt_no})")
        return nxt

    def expect_no_restart(self, attempt: AttemptInfo) -> None:
        time.sleep(NO_RESTART_WATCH_S)
        extra = [a for a in self.attempts() if a.attempt_no > attempt.attempt_no]
        if extra:
            raise ScenarioFailed(f"job was restarted anyway: job {extra[0].executor_job_id}")
        job = self.job()
        if job.status != JobStatus.STOPPED:
            raise ScenarioFailed(f"job status is {job.status!r}, expected {JobStatus.STOPPED.value!r}")
        say(
            self.scenario,
            True,
            f"No restart after job {attempt.executor_job_id}; job stopped: {job.status_reason}",
        )


# -- helpers -------------------------------------------------------------------------------------


def is_alive(pid: int) -> bool:
    """A live process (a zombie is not alive); signal 0 only asks."""
    if not pid_runs(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; last line: {lines[-1]}" if lines else ""


def squeue_state(job_id: str) -> str | None:
    proc = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def scancel(job_id: str) -> None:
    proc = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise ScenarioFailed(f"scancel {job_id} failed: {proc.stderr.strip()}")


def expect_reason(decision: DecisionInfo, action: str, reason: str | re.Pattern[str]) -> None:
    matches = reason.search(decision.reason) if isinstance(reason, re.Pattern) else reason in decision.reason
    if decision.action != action or not matches:
        want = reason.pattern if isinstance(reason, re.Pattern) else reason
        raise ScenarioFailed(f"expected {action} with {want!r}, got {decision.action}: {decision.reason!r}")


def evidence_of(decision: DecisionInfo, key: str) -> object:
    return decision.evidence.get(key) if isinstance(decision.evidence, dict) else None


# -- scenarios -----------------------------------------------------------------------------------


def cancel_and_expect(s: Session, attempt: AttemptInfo, *, restart: bool) -> AttemptInfo | None:
    """scancel a RUNNING attempt; the decision must restart it (or, at the end of the budget, stop)."""
    s.wait_running(attempt)
    scancel(attempt.executor_job_id or "")
    say(s.scenario, True, f"Cancelled job {attempt.executor_job_id} (plain scancel)")
    decision = s.wait_decision(attempt, DECISION_TIMEOUT_S)
    if not restart:
        expect_reason(decision, "stop", REASON_BUDGET)
        s.expect_no_restart(attempt)
        return None
    expect_reason(decision, "restart", REASON_CANCEL)
    return s.wait_restarted(attempt)


def scenario_scancel(s_factory: Callable[[int], Session], iterations: int) -> None:
    done, chunk = 0, 0
    while done < iterations:
        s = s_factory(chunk)
        try:
            s.submit(TRAIN_ARGS, [])
            attempt = s.attempt(1)
            assert attempt is not None
            for _ in range(min(CANCELS_PER_SESSION, iterations - done)):
                attempt = cancel_and_expect(s, attempt, restart=True)
                assert attempt is not None
                done += 1
                say(
                    s.scenario,
                    True,
                    f"scancel {done}/{iterations}: restarted as job {attempt.executor_job_id}",
                )
        finally:
            s.close()
        chunk += 1


def scenario_max_retries(s: Session) -> None:
    s.submit(TRAIN_ARGS, [])
    attempt = s.attempt(1)
    for n in range(1, 5):
        assert attempt is not None
        attempt = cancel_and_expect(s, attempt, restart=n <= 3)
    attempts = s.attempts()
    if len(attempts) != 4:
        raise ScenarioFailed(f"expected 4 attempts, found {len(attempts)}")
    say(s.scenario, True, "4 attempts, restarts after 1-3, none after 4 (budget exhausted)")


def fault_args(fault: str, *extra: str) -> list[str]:
    return [*TRAIN_ARGS, "--fault", fault, "--fault-at-step", FAULT_STEP, "--fault-rank", "1", *extra]


def scenario_hang(s: Session) -> None:
    s.submit(fault_args("hang"), HANG_MONITORING)
    attempt = s.attempt(1)
    assert attempt is not None
    decision = s.wait_decision(attempt, FAULT_TIMEOUT_S)
    expect_reason(decision, "restart", REASON_HANG)
    if evidence_of(decision, "error_type") != "hang":
        raise ScenarioFailed(f"decision evidence error_type is {evidence_of(decision, 'error_type')!r}")
    say(s.scenario, True, f"error_type: hang ({evidence_of(decision, 'signal')}), reason recorded")
    s.wait_restarted(attempt)


def scenario_nccl(s: Session) -> None:
    s.submit(fault_args("hang", "--pg-timeout-s", NCCL_PG_TIMEOUT_S), NCCL_MONITORING)
    attempt = s.attempt(1)
    assert attempt is not None
    decision = s.wait_decision(attempt, FAULT_TIMEOUT_S)
    expect_reason(decision, "restart", REASON_NCCL)
    assert s.store is not None
    gloo = [sig for sig in s.store.signals_for_attempt(attempt.id) if sig.subsystem == "gloo"]
    if not gloo:
        raise ScenarioFailed("no gloo collective-failure line was classified")
    say(
        s.scenario,
        True,
        f"real gloo collective failure on a CPU cluster, classified error_type={gloo[0].error_type} "
        f"(pattern {gloo[0].pattern}): {gloo[0].line.strip()[:120]}",
    )
    s.wait_restarted(attempt)


def scenario_oom(s: Session) -> None:
    s.submit(fault_args("oom"), [])
    attempt = s.attempt(1)
    assert attempt is not None
    decision = s.wait_decision(attempt, FAULT_TIMEOUT_S)
    expect_reason(decision, "stop", REASON_OOM)
    say(s.scenario, True, f"error_type: {evidence_of(decision, 'error_type')}, not restarted")
    s.expect_no_restart(attempt)


# -- running -------------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    passed: bool
    seconds: float
    message: str = ""


def run_scenario(name: str, opts: Options, iterations: int) -> Result:
    start = time.monotonic()
    sessions: list[Session] = []

    def new_session(index: int = 0) -> Session:
        suffix = f"-{index}" if index else ""
        session = Session(name, opts.work_dir / f"{name}{suffix}", opts)
        sessions.append(session)
        return session

    say(name, None, "starting")
    try:
        if name == "scancel":
            scenario_scancel(new_session, iterations)
        else:
            s = new_session()
            try:
                {"hang": scenario_hang, "nccl": scenario_nccl, "oom": scenario_oom,
                 "max_retries": scenario_max_retries}[name](s)  # fmt: skip
            finally:
                s.close()
    except ScenarioFailed as exc:
        say(name, False, str(exc))
        say(name, False, f"{name}: FAILED")
        return Result(name, False, time.monotonic() - start, str(exc))
    except Exception as exc:  # an unexpected error is a failed scenario, with its type
        say(name, False, f"{type(exc).__name__}: {exc}")
        say(name, False, f"{name}: FAILED")
        return Result(name, False, time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    say(name, True, f"{name}: PASSED")
    return Result(name, True, time.monotonic() - start)


def ensure_slurm(preset: str | None) -> str | None:
    """Point SLURM_CONF at the localhost cluster unless set or a preset names another; error text or None."""
    if preset or os.environ.get("SLURM_CONF"):
        return None
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "slurm_local.sh"), "env"], capture_output=True, text=True, check=False
    )
    match = re.search(r"export SLURM_CONF=(\S+)", proc.stdout)
    if not match or not Path(match.group(1)).is_file():
        return "the localhost cluster is not up: run `SLURM_LOCAL_NODES=2 scripts/slurm_local.sh up`"
    os.environ["SLURM_CONF"] = match.group(1)
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=[*SCENARIOS, "all"], required=True)
    p.add_argument("--iterations", type=int, default=2, help="scancel: how many cancels (default 2)")
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="experiment running the train workload"
    )
    p.add_argument("--slurm-preset", help="slurm config group for a real cluster (e.g. juwels)")
    p.add_argument("--config-dir", action="append", default=[], help="passed to autoexp (repeatable)")
    p.add_argument("--override", action="append", default=[], help="extra autoexp override (repeatable)")
    p.add_argument(
        "--work-dir", type=Path, help="state dirs and outputs (default ./autoexp_scenarios/<time>)"
    )
    p.add_argument("--parallel", action="store_true", help="run the scenarios of `all` side by side")
    p.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every wait (busy clusters)")
    p.add_argument("--no-monitor", action="store_true", help="submit without a monitor (must fail loudly)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if problem := ensure_slurm(args.slurm_preset):
        say("setup", False, problem)
        return 1
    work_dir = (args.work_dir or Path("autoexp_scenarios") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    overrides = ([f"slurm={args.slurm_preset}"] if args.slurm_preset else []) + args.override
    opts = Options(
        args.config.resolve(), work_dir, overrides, args.config_dir, args.no_monitor, args.timeout_scale
    )
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    say("setup", None, f"scenarios {', '.join(names)}; state and outputs under {work_dir}")
    start = time.monotonic()
    if args.parallel and len(names) > 1:
        results: dict[str, Result] = {}
        threads = [
            threading.Thread(
                target=lambda n=n: results.__setitem__(n, run_scenario(n, opts, args.iterations))
            )
            for n in names
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ordered = [results[n] for n in names]
    else:
        ordered = [run_scenario(n, opts, args.iterations) for n in names]
    print("\nSummary:")
    for r in ordered:
        mark = "✓" if r.passed else "✗"
        print(
            f"  {mark} {r.scenario:<12} {'PASSED' if r.passed else 'FAILED'} in {r.seconds:5.1f} s  {r.message}"
        )
    passed = sum(r.passed for r in ordered)
    print(f"{passed}/{len(ordered)} scenarios passed in {time.monotonic() - start:.1f} s")
    return 0 if passed == len(ordered) else 1


if __name__ == "__main__":
    sys.exit(main())

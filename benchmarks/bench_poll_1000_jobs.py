"""1,000 RUNNING jobs on the localhost cluster, logs growing, through the public run loop (goals: <= 2 Slurm
calls per poll, one core <= 20 % busy, fatal line -> decision p99 < 2 s beyond the settle window).

Setup: an experiment of N jobs (a sweep over BENCH_TRIAL, Slurm executor, restart policy
`megatron_transient`), submitted by `start_session` and watched by the real `Monitor.run` in
a thread, exactly as `autoexp run` does. Each job is a small bash loop (no Python: 1,000
interpreters would not fit): a Megatron iteration line every LINE_EVERY_S seconds (bash
builtins only, no fork per line). One job in FATAL_EVERY prints an NCCL "remote process
exited" error at a random time in the window, stamped `[bench t=...]`, and then nothing
(survivors blocked): the monitor decides at that line once `fatal_settle_s` passed, cancels,
and resubmits; the replacement exits 0 at once.

Needs enough emulated CPUs for N single-CPU jobs, e.g. for 1,000:
    SLURM_LOCAL_NODES=4 SLURM_LOCAL_CPUS=256 scripts/slurm_local.sh up   (config_overrides is set)

Measured over WINDOW_S once every job is RUNNING (the steady window):
  Slurm calls per poll: squeue/sacct calls between two polls (the loop's `on_poll` hook),
     counted by wrapping run_slurm_command; sbatch/scancel (the restarts) counted apart.
  CPU: this process's user+sys (the monitor, its log tailer and classifier) over the window,
     as a share of one core; and per poll (median).
  RSS: VmRSS at the end and VmHWM (peak).
  Fatal line -> decision: the line's stamp to the monitor's `restart:` line (said after the
     decision is committed).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from _common import (
    MonitorRun,
    Report,
    line_time,
    parse_args,
    require_slurm,
    rss_now_mib,
    save_result,
    summary,
    verdict,
    workdir,
)

import oellm_autoexp.adapters.executors.slurm as slurm_executor

LINE_EVERY_S = 5.0
FATAL_EVERY = 50  # one job in 50 prints a fatal line during the window
SETTLE_S = 5.0
GOAL_CALLS, GOAL_CPU_PERCENT, GOAL_P99_S = 2, 20.0, 2.0
MARKER = "NCCL error"
# Bash builtins only: printf's %()T for the stamp, $EPOCHREALTIME for the bench stamp, and a
# read with a timeout on a pipe nobody writes to as the sleep (no fork per line). No `${`: the
# experiment file would read it as an interpolation.
JOB = r"""
[ -e "$AUTOEXP_OUTPUT_DIR/.fired" ] && { echo "replacement attempt: nothing to do"; exit 0; }
touch "$AUTOEXP_OUTPUT_DIR/.fired"
exec {sleeper}<> <(:)
fatal_at=$BENCH_FATAL_AT; i=0; start=$EPOCHSECONDS
while :; do
  i=$((i + 1))
  printf ' [%(%Y-%m-%d %H:%M:%S)T] iteration %8d/  500000 | consumed samples: %12d | elapsed time per iteration (ms): 5000.0 | lm loss: 1.873001E+00 | loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | number of nan iterations:   0 |\n' -1 "$i" "$((i * 1024))"
  if ((fatal_at > 0 && EPOCHSECONDS - start >= fatal_at)); then
    echo "[rank1]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5 [bench t=$EPOCHREALTIME]"
    read -rt 3600 -u "$sleeper" || :
  fi
  read -rt __EVERY__ -u "$sleeper" || :
done
"""


class CallCounter:
    """Wraps run_slurm_command to count the Slurm CLI calls made through it, by command."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self._real = slurm_executor.run_slurm_command
        self._lock = threading.Lock()

    def __enter__(self) -> CallCounter:
        def counted(argv, *args, **kwargs):
            with self._lock:
                self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
            return self._real(argv, *args, **kwargs)

        slurm_executor.run_slurm_command = counted
        return self

    def __exit__(self, *exc: object) -> None:
        slurm_executor.run_slurm_command = self._real

    def queries(self) -> int:
        return self.calls.get("squeue", 0) + self.calls.get("sacct", 0)


class PolledRun(MonitorRun):
    """MonitorRun whose Monitor reports each finished poll (the public `on_poll` hook)."""

    polls: list[dict[str, float]]
    counter: CallCounter

    def start(self) -> None:
        from oellm_autoexp.daemon.monitor import Monitor

        self.polls = []

        def on_poll() -> None:
            r = resource.getrusage(resource.RUSAGE_SELF)
            self.polls.append(
                {"t": time.time(), "cpu": r.ru_utime + r.ru_stime, "queries": self.counter.queries()}
            )

        monitor = Monitor(
            self.store, [self.session_id], state_dir=self.state_dir, say=self.say, on_poll=on_poll
        )

        def body() -> None:
            self.exit_code = monitor.run(self.stop)

        self.thread = threading.Thread(target=body, name="bench-monitor", daemon=True)
        self.thread.start()


def write_experiment(work: Path, n: int, window_s: float, seed: int) -> Path:
    rng = random.Random(seed)
    trials = [f"{'f' if i % FATAL_EVERY == 1 else 'r'}{i:04d}" for i in range(n)]
    fatal_at = {t: round(rng.uniform(0.3, 0.8) * window_s) for t in trials if t[0] == "f"}
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "bench4", "output_dir": str(work / "out")},
        "executor": "slurm",
        "slurm": {"env": {"BENCH_TRIAL": "none", "BENCH_FATAL_AT": "0"},
                  "sbatch": {"mem": "10M", "time": "01:00:00"}},
        "monitoring": {"include": ["megatron_production"], "log_watch": "inotify", "fatal_settle_s": SETTLE_S},
        "backend": {"command": ["bash", "-c", JOB.replace("__EVERY__", f"{LINE_EVERY_S:g}")]},
        "sweep": {"list": [{"slurm.env.BENCH_TRIAL": t, "slurm.env.BENCH_FATAL_AT": str(fatal_at.get(t, 0))}
                           for t in trials]},
    }  # fmt: skip
    path = work / "bench4.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def start_polled_run(experiment: Path, work: Path) -> PolledRun:
    """start_monitor_run (benchmarks/_common.py), with the polled Monitor."""
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.config.experiment import load_jobs
    from oellm_autoexp.daemon.session import start_session
    from oellm_autoexp.plan.plan import build_plans

    plans = build_plans(load_jobs(str(experiment), [], []), str(work))
    state = work / "state"
    store = SQLiteStore(state)
    run = PolledRun(store, 0, state)
    session, failed = start_session(store, plans, config_path=str(experiment), state_dir=state,
                                    now_s=time.time(), say=run.say)  # fmt: skip
    if failed:
        raise RuntimeError(f"first submission refused for {len(failed)} jobs")
    run.session_id = session.id
    return run


def running(run: PolledRun) -> int:
    return sum(1 for a in run.attempts() if a.attempt_no == 1 and a.state == "RUNNING")


def rss_peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--jobs", type=int, default=1000)
        parser.add_argument("--window", type=float, default=180.0)

    args = parse_args(__doc__, options)
    require_slurm()
    n, window_s = (12, 60.0) if args.quick else (args.jobs, args.window)
    out = Report()
    nodes = len(
        subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    with workdir("poll") as tmp, CallCounter() as counter:
        work = Path(tmp)
        experiment = write_experiment(work, n, window_s, seed=4)
        t0 = time.time()
        run = start_polled_run(experiment, work)
        submit_s = time.time() - t0
        run.counter = counter
        try:
            run.start()
            all_running = run.wait_until(lambda: running(run) >= n, 600)
            t_steady, polls_before = time.time(), len(run.polls)
            cpu0, calls0 = resource.getrusage(resource.RUSAGE_SELF), dict(counter.calls)
            time.sleep(window_s)
            cpu1, t_end = resource.getrusage(resource.RUSAGE_SELF), time.time()
            polls = run.polls[polls_before:]
            monitor_alive = run.thread is not None and run.thread.is_alive()  # a dead monitor decides nothing
            fatal, undecided = fatal_latencies(run)
        finally:
            run.wait(0)
            run.cancel_leftovers()
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        restarts = {k: v - calls0.get(k, 0) for k, v in counter.calls.items() if k in ("sbatch", "scancel")}
        run.store.close()
    report(out, args, n, nodes, all_running, submit_s, window_s, t_end - t_steady, polls, cpu, restarts,
           fatal, undecided, monitor_alive)  # fmt: skip


def fatal_latencies(run: PolledRun) -> tuple[list[float], int]:
    """Each fatal job's line -> decision, and how many fatal jobs got no decision."""
    jobs = {j.id: j for j in run.store.jobs_for_session(run.session_id)}
    found, missing = [], []
    for attempt in (a for a in run.attempts() if a.attempt_no == 1):
        name = jobs[attempt.job_id].name
        if "TRIAL-f" not in name:  # bench4_BENCH-TRIAL-f0001_BENCH-FATAL-AT-25: a fatal one
            continue
        t_line = line_time(attempt.log_path, MARKER)
        decided = next(
            (s.at for s in run.said if f"{name} attempt 1 " in s.text and ": restart:" in s.text), None
        )
        if t_line is not None and decided is not None:
            found.append(decided - t_line)
        else:
            missing.append(f"{name}: line stamp {t_line}, decision {decided}, log {attempt.log_path}")
    for line in missing:
        print("  no latency for", line)
    return found, len(missing)


def report(out: Report, args: Any, n: int, nodes: int, all_running: bool, submit_s: float, window_s: float,
           wall_s: float, polls: list[dict[str, float]], cpu_s: float, restarts: dict[str, int],
           fatal: list[float], undecided: int, monitor_alive: bool) -> None:  # fmt: skip
    per_poll_calls = [b["queries"] - a["queries"] for a, b in pairwise(polls)]
    per_poll_cpu = [b["cpu"] - a["cpu"] for a, b in pairwise(polls)]
    cpu_percent = 100.0 * cpu_s / wall_s
    fatal_s = summary(fatal)
    out(f"{n} jobs ({'all RUNNING' if all_running else 'NOT all running'}) on {nodes} node(s); submitted in "
        f"{submit_s:.0f} s; steady window {wall_s:.0f} s, {len(polls)} polls; a line per job every {LINE_EVERY_S:g} s")  # fmt: skip
    out(f"  Slurm queries per poll: max {max(per_poll_calls, default=0)}, median "
        f"{statistics.median(per_poll_calls) if per_poll_calls else 0}; restarts' sbatch/scancel {restarts}")  # fmt: skip
    out(f"  CPU of this process over the window: {cpu_s:.1f} s = {cpu_percent:.1f} % of one core; per poll median "
        f"{statistics.median(per_poll_cpu) if per_poll_cpu else 0:.3f} s")  # fmt: skip
    out(f"  RSS {rss_now_mib():.0f} MiB, peak {rss_peak_mib():.0f} MiB")
    out(f"  fatal line -> decision (n={fatal_s['n']}): p50 {fatal_s['p50']:.2f} s, p99 {fatal_s['p99']:.2f} s "
        f"(fatal_settle_s {SETTLE_S:g} s); fatal lines with no decision: {undecided}")  # fmt: skip
    if not monitor_alive:
        out("  THE MONITOR THREAD DIED during the window (its traceback is above)")
    met = (all_running and monitor_alive and undecided == 0 and max(per_poll_calls, default=99) <= GOAL_CALLS
           and cpu_percent <= GOAL_CPU_PERCENT and bool(fatal) and fatal_s["p99"] < SETTLE_S + GOAL_P99_S)  # fmt: skip
    out(verdict(f"<= {GOAL_CALLS} Slurm calls/poll, <= {GOAL_CPU_PERCENT:g} % of a core, "
                f"p99 < settle + {GOAL_P99_S:g} s", met))  # fmt: skip
    save_result(
        "poll_1000_jobs", args,
        {"goal": f"<= {GOAL_CALLS} calls/poll, <= {GOAL_CPU_PERCENT:g} % CPU, fatal p99 < settle + {GOAL_P99_S:g} s",
         "goal_met": met, "running_jobs": n, "all_running": all_running, "nodes": nodes,
         "line_every_s": LINE_EVERY_S, "fatal_settle_s": SETTLE_S, "submit_s": round(submit_s, 1),
         "window_s": wall_s, "polls": len(polls),
         "steady": {"calls_per_poll_max": max(per_poll_calls, default=0), "calls_per_poll": per_poll_calls,
                    "cpu_s": round(cpu_s, 2), "cpu_percent_of_one_core": round(cpu_percent, 2),
                    "cpu_per_poll_median_s": statistics.median(per_poll_cpu) if per_poll_cpu else None},
         "restart_calls": restarts, "rss_end_mib": round(rss_now_mib(), 1), "rss_peak_mib": round(rss_peak_mib(), 1),
         "fatal_to_decision": fatal_s, "fatal_rows": fatal, "fatal_undecided": undecided,
         "monitor_alive": monitor_alive, "load_avg_1min": os.getloadavg()[0]},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""Slurm calls per poll, time per poll, daemon CPU and RSS with 1,000 live jobs (real localhost Slurm).

Setup: 1,000 held jobs (`sbatch --hold --wrap true`, one sbatch each; they never
run) on the real cluster, registered as live attempts in a fresh SQLite store
through its API (create_session / add_job / record_intent / confirm_submitted),
every job with the same real plan (Slurm executor, megatron_production patterns).
Every held job is scancel'ed at the end, whatever happens.

OURS, two levels, P polls each:
  executor: SlurmExecutor.query(all 1,000 ids): one squeue (and one sacct only for
            ids squeue does not list; held jobs are listed, so none here).
  monitor:  the real Monitor's poll path, Monitor._poll(now) (query + observe each
            attempt + hang checks + the status snapshot), after _load_runtimes and
            _resume attached the 1,000 attempts. The first poll stores 1,000 state
            changes (UNKNOWN -> PENDING) and is reported on its own.
Slurm calls are counted by wrapping run_slurm_command (every sbatch/squeue/sacct/
scancel of the package goes through it). CPU = this process's user+sys
(getrusage SELF) and the Slurm clients' (getrusage CHILDREN); RSS = VmRSS / peak.

BASELINE (same run): what a naive supervisor does, one `squeue -j <id>` per job per
poll, with the same format string. Measured on a subset of 100 jobs and multiplied
by 10 for 1,000 (stated as extrapolated; the calls are independent and sequential).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from _common import (
    Report,
    parse_args,
    require_slurm,
    rss_now_mib,
    rusage_self,
    save_result,
    scancel,
    workdir,
    write_experiment,
)

import oellm_autoexp.adapters.slurm_executor as slurm_executor

BASELINE_SUBSET = 100


class CallCounter:
    """Wraps run_slurm_command to count the Slurm CLI calls made through it, by command."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self._real = slurm_executor.run_slurm_command

    def __enter__(self) -> CallCounter:
        def counted(argv, *args, **kwargs):
            self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
            return self._real(argv, *args, **kwargs)

        slurm_executor.run_slurm_command = counted
        return self

    def __exit__(self, *exc: object) -> None:
        slurm_executor.run_slurm_command = self._real

    def total(self) -> int:
        return sum(self.calls.values())


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def submit_held(n: int, ids: list[str]) -> None:
    argv = ["sbatch", "--parsable", "--hold", "-J", "bench4-held", "-p", "debug", "-c", "1",
            "--mem=10M", "-t", "1", "-o", "/dev/null", "--wrap", "true"]  # fmt: skip

    def one(_: int) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
        return done.stdout.strip().split(";")[0]

    with ThreadPoolExecutor(4) as pool:
        for job_id in pool.map(one, range(n)):
            ids.append(job_id)  # appended as they come, so cleanup sees every id


def register(store, plan_dict: dict, ids: list[str], log_dir: Path) -> int:
    now = datetime.now(UTC)
    session = store.create_session("bench4", config_path="bench4.yaml", config={}, now=now)
    for i, job_id in enumerate(ids):
        job = store.add_job(session.id, job_key=f"j{i:04d}", name=f"bench4-j{i:04d}", plan=plan_dict, now=now)
        log = str(log_dir / f"slurm-{job_id}.out")
        attempt = store.record_intent(job.id, 1, f"bench4-{session.id}-{job.id}-1", now=now, log_path=log)
        store.confirm_submitted(attempt, job_id, now=now, log_path=log)
    return session.id


def timed_polls(poll, polls: int) -> list[dict]:
    rows = []
    for _ in range(polls):
        cpu0, child0, t0 = rusage_self()[0], cpu_children(), time.perf_counter()
        with CallCounter() as counter:
            poll()
        rows.append({"wall_s": time.perf_counter() - t0, "cpu_self_s": rusage_self()[0] - cpu0,
                     "cpu_slurm_clients_s": cpu_children() - child0, "calls": counter.total(),
                     "by_command": dict(counter.calls)})  # fmt: skip
    return rows


def naive_poll(ids: list[str]) -> None:
    """One squeue per job, through the same wrapper (so it is counted the same way)."""
    for job_id in ids:
        argv = ["squeue", "--noheader", "--jobs", job_id, "-o", slurm_executor.SQUEUE_FORMAT]
        slurm_executor.run_slurm_command(argv)


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else float("nan")


def main() -> None:
    args = parse_args(__doc__)
    require_slurm()
    n, polls = (200, 3) if args.quick else (1000, 10)
    out = Report()
    ids: list[str] = []
    result: dict = {"live_jobs": n, "polls": polls}
    with workdir("poll") as tmp:
        work = Path(tmp)
        try:
            t0 = time.perf_counter()
            submit_held(n, ids)
            result["submit_s"] = round(time.perf_counter() - t0, 1)
            result.update(measure(work, ids, polls, out))
        finally:
            t0 = time.perf_counter()
            scancel(ids)
            print(f"scancel'ed {len(ids)} held jobs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    save_result("poll_1000_jobs", args, result, out.text)


def measure(work: Path, ids: list[str], polls: int, out: Report) -> dict:
    from oellm_autoexp.adapters.store import SQLiteStore
    from oellm_autoexp.config.experiment import load_jobs
    from oellm_autoexp.core.plan import build_plans
    from oellm_autoexp.daemon.monitor import Monitor
    from oellm_autoexp.daemon.session import plan_to_dict

    n = len(ids)
    experiment = write_experiment(work, name="bench4", executor="slurm", job_args=["hang", "0", "0"],
                                  trials=["h00"], monitoring={})  # fmt: skip
    plan = build_plans(load_jobs(str(experiment), [], []), str(work))[0]
    store = SQLiteStore(work / "state")
    rss_before = rss_now_mib()
    sid = register(store, plan_to_dict(plan), ids, work / "logs")

    executor_rows = timed_polls(lambda: slurm_executor.SlurmExecutor().query(ids), polls)

    monitor = Monitor(store, [sid], state_dir=work / "state", say=lambda _line: None)
    t0 = time.perf_counter()
    monitor._load_runtimes()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    monitor._resume(time.time())
    resume_s = time.perf_counter() - t0
    rss_monitor = rss_now_mib()
    first = timed_polls(lambda: monitor._poll(time.time()), 1)[0]
    steady = timed_polls(lambda: monitor._poll(time.time()), polls)
    states = {a.state for a in store.attempts_for_session(sid)}

    subset = ids[:BASELINE_SUBSET]
    naive_rows = timed_polls(lambda: naive_poll(subset), max(2, polls // 3))
    scale = n / len(subset)
    peak_rss = rusage_self()[1]
    store.close()

    calls = executor_rows[0]["by_command"]
    out(
        f"Slurm poll with {n} live (held) jobs on localhost Slurm 22.05; {polls} polls each; states seen: {sorted(states)}"
    )
    out(f"{'':<46}{'calls/poll':>11}{'wall/poll':>12}{'CPU self':>11}{'CPU squeue':>12}")
    row = "{:<46}{:>11}{:>10.3f} s{:>9.3f} s{:>10.3f} s"
    out(row.format("OURS  SlurmExecutor.query (all ids)", f"{mean(executor_rows, 'calls'):.0f}",
                   mean(executor_rows, "wall_s"), mean(executor_rows, "cpu_self_s"),
                   mean(executor_rows, "cpu_slurm_clients_s")))  # fmt: skip
    out(row.format(f"OURS  Monitor._poll, first (stores {n} states)", f"{first['calls']}",
                   first["wall_s"], first["cpu_self_s"], first["cpu_slurm_clients_s"]))  # fmt: skip
    out(row.format("OURS  Monitor._poll, steady state", f"{mean(steady, 'calls'):.0f}",
                   mean(steady, "wall_s"), mean(steady, "cpu_self_s"), mean(steady, "cpu_slurm_clients_s")))  # fmt: skip
    out(row.format(f"BASE  squeue per job, {len(subset)} jobs (measured)", f"{mean(naive_rows, 'calls'):.0f}",
                   mean(naive_rows, "wall_s"), mean(naive_rows, "cpu_self_s"),
                   mean(naive_rows, "cpu_slurm_clients_s")))  # fmt: skip
    out(row.format(f"BASE  squeue per job, {n} jobs (x{scale:g}, extrapolated)", f"{mean(naive_rows, 'calls') * scale:.0f}",
                   mean(naive_rows, "wall_s") * scale, mean(naive_rows, "cpu_self_s") * scale,
                   mean(naive_rows, "cpu_slurm_clients_s") * scale))  # fmt: skip
    out(f"OURS  calls per executor poll by command: {calls}")
    out(f"OURS  monitor start for {n} jobs: _load_runtimes {load_s:.2f} s, _resume (attach) {resume_s:.2f} s")
    out(f"OURS  RSS: {rss_before:.0f} MiB before the store, {rss_monitor:.0f} MiB with the monitor "
        f"holding {n} attempts; peak (whole run) {peak_rss:.0f} MiB")  # fmt: skip
    return {
        "executor_query": executor_rows, "monitor_first_poll": first, "monitor_steady_polls": steady,
        "baseline_subset": len(subset), "baseline_polls": naive_rows, "baseline_scale": scale,
        "monitor_load_runtimes_s": round(load_s, 3), "monitor_resume_s": round(resume_s, 3),
        "rss_before_mib": round(rss_before, 1), "rss_monitor_mib": round(rss_monitor, 1),
        "rss_peak_mib": round(peak_rss, 1), "states_seen": sorted(states),
    }  # fmt: skip


if __name__ == "__main__":
    main()

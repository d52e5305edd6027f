"""Silent hang -> hang decision, through the real Monitor (no_output_timeout_s given).

OURS: start_session + the real Monitor; each job (benchmarks/_fake_job.py `hang`)
waits HANG_AFTER_S = 5 s (the monitor watches its log by then), prints three healthy Megatron
iteration lines, the last stamped with time.time(),
then sleeps without printing. Hang settings: no_output_timeout_s = T, and the
startup / no-progress / checkpoint limits far away (600 s) so only "no output"
can fire. Latency = the monitor's "restart" decision line (after the decision row
is committed) - the last line's stamp; we report that minus T, the detection
latency BEYOND the timeout. The monitor checks hangs on its Slurm/local poll
tick, so this is bounded by the poll interval:

  local executor: poll 1 s (its default), T = 5 s
  Slurm executor: poll 10 s (its default), T = 10 s (left out with --quick)

BASELINE 1, UPSTREAM (measured in the same run): the upstream project's inactivity event, the only
hang detection it has (github:OpenEuroLLM/oellm-autoexp, read on HEAD main c6d0cc0 and on its
production branch prod/oellm_32b_dense 0bf06da; facts written out in `UpstreamInactivity`, no
code copied). The same fake jobs (N of them, started beside ours, same script, same stagger) run
without our monitor; a watcher applies upstream's rule to their logs with OUR poll interval and T
(`inactivity_timeout_s` = T) and upstream's `inactivity_polls` = 5 (both its configs), so the rows
compare the rules, not the poll rates. Latency = the watcher's fire - the last line's stamp. The
watcher also counts fires BEFORE a job's first line: upstream has no start-up allowance, and a
job silent for T and 5 polls while it starts is "inactive" to it.

BASELINE 2, UPSTREAM as shipped (computed from the same rule, stated): 60 s polls (MonitorLoop's
default; no production entry point sets another), 5 polls AND 300 s (HEAD's auto_restart.yaml)
or 1200 s (the production branch's auto_restart_ckptreset.yaml): from the last line, one poll to
read it (0-60 s), one to start the streak, then max(4, T/60) polls.

BASELINE 3 (computed, stated): no hang detection. The job sits until its wall-clock
limit: the attempt's start (taken as its submission) + --time (+ up to 30 s: slurmctld checks limits every
30 s), i.e. (start + limit) - last line. Shown for the shipped local preset
(--time 00:10:00) per trial, and for the juwels preset (24:00:00): a hang at a
uniformly random point of a 24 h allocation wastes 12 h on average.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import (
    FAKE_JOB,
    Report,
    fmt_summary,
    line_time,
    parse_args,
    require_slurm,
    save_result,
    scancel,
    start_monitor_run,
    summary,
    trial_of,
    workdir,
    write_experiment,
)

LOCAL_LIMIT_S = 600.0  # config/slurm/local.yaml: time "00:10:00"
JUWELS_LIMIT_S = 24 * 3600.0  # config/slurm/juwels.yaml: time "24:00:00"
SLURM_LIMIT_CHECK_S = 30.0  # slurmctld's PERIODIC_TIMEOUT
HANG_AFTER_S = 5.0  # a job prints its lines this long after it starts: the monitor is watching by then
UPSTREAM_POLLS = 5  # inactivity_polls in upstream HEAD's auto_restart.yaml and its production policy
UPSTREAM_POLL_S = 60.0  # MonitorLoop's default poll_interval_seconds (orchestrator: observe, then sleep it)
UPSTREAM_SHIPPED = {  # inactivity_timeout_s of each shipped policy
    "HEAD, auto_restart.yaml": 300.0,
    "production, auto_restart_ckptreset.yaml": 1200.0,
}


class UpstreamInactivity:
    """Upstream's inactivity event on a set of logs (facts from its monitor/loop.py and actions.py):

    - its loop calls `observe_once()` then sleeps `poll_interval_seconds`; each observe reads every
      job's log from its cursor to the end (nothing while the log does not exist);
    - a poll that read any new text clears the job's streak; a silent poll starts one (count 1,
      first_seen = last_seen = now) or extends it (count + 1, last_seen = now);
    - the event fires when count >= inactivity_polls AND last_seen - first_seen >=
      inactivity_timeout_s; firing clears the streak (it must build up again).
    """

    def __init__(
        self, logs: list[Path], *, poll_s: float, timeout_s: float, polls: int = UPSTREAM_POLLS
    ) -> None:
        self.logs, self.poll_s, self.timeout_s, self.polls = logs, poll_s, timeout_s, polls
        self.cursor = dict.fromkeys(logs, 0)
        self.streak: dict[Path, tuple[int, float, float]] = {}  # count, first_seen, last_seen
        self.first_text: dict[Path, float] = {}  # the poll that first read text
        self.fired: dict[Path, list[float]] = {log: [] for log in logs}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="upstream-inactivity", daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.observe_once(time.time())
            self.stop.wait(self.poll_s)

    def observe_once(self, now: float) -> None:
        for log in self.logs:
            if not log.exists():
                continue
            with log.open("rb") as handle:
                handle.seek(self.cursor[log])
                new = handle.read()
                self.cursor[log] = handle.tell()
            if new:
                self.first_text.setdefault(log, now)
                self.streak.pop(log, None)
                continue
            count, first, _ = self.streak.get(log, (0, now, now))
            count += 1
            if count >= self.polls and now - first >= self.timeout_s:
                self.fired[log].append(now)
                self.streak.pop(log, None)
            else:
                self.streak[log] = (count, first, now)


def start_baseline_jobs(
    executor: str, work: Path, n: int, stagger_s: float
) -> tuple[list[Path], list[str], list[subprocess.Popen[bytes]]]:
    """The same fake hang jobs as ours, started without our monitor: (logs, Slurm ids, local processes)."""
    logs, ids, procs = [], [], []
    for i in range(n):
        out = work / f"upstream-h{i:02d}"
        out.mkdir(parents=True)
        log = out / "job.log"
        logs.append(log)
        env = {**os.environ, "BENCH_TRIAL": f"h{i:02d}", "AUTOEXP_OUTPUT_DIR": str(out)}
        argv = [sys.executable, str(FAKE_JOB), "hang", str(HANG_AFTER_S), str(stagger_s)]
        if executor == "local":
            with log.open("wb") as handle:
                procs.append(subprocess.Popen(argv, env=env, stdout=handle, stderr=subprocess.STDOUT))
        else:
            done = subprocess.run(
                ["sbatch", "--parsable", "--job-name", f"bench-upstream-h{i:02d}", "--output", str(log),
                 "--time", "00:10:00", "--wrap", shlex.join(argv)],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            ids.append(done.stdout.strip().split(";")[0])
    return logs, ids, procs


def upstream_rows(watcher: UpstreamInactivity, timeout_s: float) -> tuple[list[dict], int]:
    """Per log: the last line's stamp, the first fire after it; and how many fired before the first line."""
    rows, early = [], 0
    for log in watcher.logs:
        t_last = line_time(str(log), "bench t=")
        first_text = watcher.first_text.get(log, math.inf)
        early += sum(1 for t in watcher.fired[log] if t < first_text)
        after = [t for t in watcher.fired[log] if t_last is not None and t > t_last]
        row = {"trial": log.parent.name.rsplit("-", 1)[-1], "last_line_t": t_last}
        if after and t_last is not None:
            row["fire_s"] = after[0] - t_last
            row["beyond_timeout_s"] = after[0] - t_last - timeout_s
        rows.append(row)
    return rows, early


def upstream_shipped_range(timeout_s: float, poll_s: float = UPSTREAM_POLL_S) -> tuple[float, float]:
    """Last line -> fire at upstream's shipped settings: the poll that reads the line comes 0 to one
    poll later, the next starts the streak, and it fires max(polls - 1, ceil(T / poll)) polls after."""
    after = poll_s * (1 + max(UPSTREAM_POLLS - 1, math.ceil(timeout_s / poll_s)))
    return after, after + poll_s


def run_variant(executor: str, timeout_s: float, poll_s: float, n: int, stagger_s: float) -> dict:
    far = 600.0
    hang = {"no_output_timeout_s": timeout_s, "progress_floor_s": far, "startup_timeout_s": far,
            "checkpoint_grace_s": far}  # fmt: skip
    with workdir(f"hang-{executor}") as tmp:
        work = Path(tmp)
        experiment = write_experiment(
            work, name="bench3", executor=executor, job_args=["hang", str(HANG_AFTER_S), str(stagger_s)],
            trials=[f"h{i:02d}" for i in range(n)],
            monitoring={"log_watch": "inotify", "poll_interval_s": poll_s, "hang": hang},
        )  # fmt: skip
        logs, slurm_ids, procs = start_baseline_jobs(executor, work, n, stagger_s)
        watcher = UpstreamInactivity(logs, poll_s=poll_s, timeout_s=timeout_s)
        watcher.thread.start()
        run = start_monitor_run(experiment, work)
        t0 = time.time()
        try:

            def all_decided() -> bool:
                ours = sum(1 for s in run.said if " attempt 1 " in s.text and ": restart:" in s.text) >= n
                theirs = all(any(t > (line_time(str(log), "bench t=") or math.inf) for t in watcher.fired[log])
                             for log in logs)  # fmt: skip
                return ours and theirs

            upstream_s = poll_s * (2 + max(UPSTREAM_POLLS - 1, math.ceil(timeout_s / poll_s)))
            run.wait_until(all_decided, n * stagger_s + HANG_AFTER_S + upstream_s + 3 * poll_s + 30)
        finally:
            run.wait(0)
            run.cancel_leftovers()
            watcher.stop.set()
            for proc in procs:
                proc.kill()
                proc.wait()
            scancel(slurm_ids)
        wall = time.time() - t0
        theirs, early = upstream_rows(watcher, timeout_s)
        rows = []
        jobs = {j.id: j for j in run.store.jobs_for_session(run.session_id)}
        for attempt in (a for a in run.attempts() if a.attempt_no == 1):
            job = jobs[attempt.job_id]
            t_last = line_time(attempt.log_path, "bench t=")
            said = next((s.at for s in run.said if f"{job.name} attempt 1 " in s.text and ": restart:" in s.text), None)  # fmt: skip
            # The job starts within ~0.3 s of its submission here (SLURM_LOCAL.md); the stored
            # started_at is the first poll that saw it RUNNING, up to a poll interval late.
            started = attempt.submitted_at.timestamp() if attempt.submitted_at else None
            row = {"trial": trial_of(job.name), "last_line_t": t_last}
            if t_last is not None and said is not None:
                row["decision_s"] = said - t_last
                row["beyond_timeout_s"] = said - t_last - timeout_s
            if t_last is not None and started is not None:
                row["walltime_local_preset_s"] = started + LOCAL_LIMIT_S - t_last
            rows.append(row)
        run.store.close()
    return {
        "executor": executor,
        "timeout_s": timeout_s,
        "poll_s": poll_s,
        "wall_s": round(wall, 1),
        "rows": rows,
        "upstream_rows": theirs,
        "upstream_fired_during_startup": early,
    }


def main() -> None:
    args = parse_args(__doc__)
    variants = [("local", 5.0, 1.0, 8 if args.quick else 20, 0.4)]
    if not args.quick:
        require_slurm()
        variants.append(("slurm", 10.0, 10.0, 10, 1.0))
    out = Report()
    out("silent hang -> hang decision recorded (real Monitor; no_output_timeout_s = T)")
    results = {}
    for executor, timeout_s, poll_s, n, stagger_s in variants:
        res = run_variant(executor, timeout_s, poll_s, n, stagger_s)
        rows = res["rows"]
        beyond = [r["beyond_timeout_s"] for r in rows if "beyond_timeout_s" in r]
        total = [r["decision_s"] for r in rows if "decision_s" in r]
        walls = [r["walltime_local_preset_s"] for r in rows if "walltime_local_preset_s" in r]
        out(f"-- {executor} executor, poll {poll_s:g} s, T = {timeout_s:g} s, {len(beyond)}/{n} hangs decided, wall {res['wall_s']:.0f} s")  # fmt: skip
        up_total = [r["fire_s"] for r in res["upstream_rows"] if "fire_s" in r]
        up_beyond = [r["beyond_timeout_s"] for r in res["upstream_rows"] if "beyond_timeout_s" in r]
        out(fmt_summary("OURS  last line -> hang decision", total))
        out(fmt_summary("BASE  upstream inactivity (same poll, T): last line -> fire", up_total))
        out(fmt_summary("OURS  beyond the timeout (decision - last line - T)", beyond))
        out(fmt_summary("BASE  upstream inactivity: beyond the timeout", up_beyond))
        out(f"  upstream's rule fired {res['upstream_fired_during_startup']} time(s) before a job's first line "
            f"(start-up silence of {HANG_AFTER_S:g} s plus the stagger; upstream has no start-up allowance)")  # fmt: skip
        out(fmt_summary("BASE  no hang detection: until --time 00:10:00 (computed)", walls)
            + f"  (+ up to {SLURM_LIMIT_CHECK_S:g} s)")  # fmt: skip
        out(
            f"  expected: beyond-timeout within one poll interval ({poll_s:g} s), plus the time the loop spends on other work"
        )
        results[executor] = {**res, "ours_decision": summary(total), "ours_beyond_timeout": summary(beyond),
                             "upstream_fire": summary(up_total), "upstream_beyond_timeout": summary(up_beyond),
                             "baseline_walltime_local_preset": summary(walls)}  # fmt: skip
    shipped = {}
    for label, timeout_s in UPSTREAM_SHIPPED.items():
        low, high = upstream_shipped_range(timeout_s)
        shipped[label] = {"timeout_s": timeout_s, "poll_s": UPSTREAM_POLL_S, "polls": UPSTREAM_POLLS,
                          "last_line_to_fire_s": [low, high]}  # fmt: skip
        out(f"BASE  upstream as shipped ({label}: poll {UPSTREAM_POLL_S:g} s, {UPSTREAM_POLLS} polls AND "
            f"{timeout_s:g} s; computed): last line -> fire {low:g}-{high:g} s, beyond its T {low - timeout_s:g}-"
            f"{high - timeout_s:g} s")  # fmt: skip
    out(f"BASE  no hang detection, juwels preset --time 24:00:00 (computed): a hang at a uniformly random "
        f"point wastes {JUWELS_LIMIT_S / 2 / 3600:.0f} h on average, up to {JUWELS_LIMIT_S / 3600:.0f} h of the allocation")  # fmt: skip
    save_result("hang_detection", args, {"variants": results, "upstream_shipped": shipped,
                "baseline_juwels_mean_waste_s": JUWELS_LIMIT_S / 2}, out.text)  # fmt: skip


if __name__ == "__main__":
    main()

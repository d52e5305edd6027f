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

BASELINE (computed, stated): no hang detection. The job sits until its wall-clock
limit: the attempt's start (taken as its submission) + --time (+ up to 30 s: slurmctld checks limits every
30 s), i.e. (start + limit) - last line. Shown for the shipped local preset
(--time 00:10:00) per trial, and for the juwels preset (24:00:00): a hang at a
uniformly random point of a 24 h allocation wastes 12 h on average.
"""

from __future__ import annotations

import time
from pathlib import Path

from _common import (
    Report,
    fmt_summary,
    line_time,
    parse_args,
    require_slurm,
    save_result,
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
        run = start_monitor_run(experiment, work)
        t0 = time.time()
        try:

            def all_decided() -> bool:
                return sum(1 for s in run.said if " attempt 1 " in s.text and ": restart:" in s.text) >= n

            run.wait_until(all_decided, n * stagger_s + timeout_s + 3 * poll_s + 20)
        finally:
            run.wait(0)
            run.cancel_leftovers()
        wall = time.time() - t0
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
        out(fmt_summary("OURS  last line -> hang decision", total))
        out(fmt_summary("OURS  beyond the timeout (decision - last line - T)", beyond))
        out(fmt_summary("BASE  no hang detection: until --time 00:10:00 (computed)", walls)
            + f"  (+ up to {SLURM_LIMIT_CHECK_S:g} s)")  # fmt: skip
        out(
            f"  expected: beyond-timeout within one poll interval ({poll_s:g} s), plus the time the loop spends on other work"
        )
        results[executor] = {**res, "ours_decision": summary(total), "ours_beyond_timeout": summary(beyond),
                             "baseline_walltime_local_preset": summary(walls)}  # fmt: skip
    out(f"BASE  no hang detection, juwels preset --time 24:00:00 (computed): a hang at a uniformly random "
        f"point wastes {JUWELS_LIMIT_S / 2 / 3600:.0f} h on average, up to {JUWELS_LIMIT_S / 3600:.0f} h of the allocation")  # fmt: skip
    save_result("hang_detection", args, {"variants": results,
                "baseline_juwels_mean_waste_s": JUWELS_LIMIT_S / 2}, out.text)  # fmt: skip


if __name__ == "__main__":
    main()

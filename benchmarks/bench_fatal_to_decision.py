"""Fatal log line -> decision recorded, through the real Monitor (goal: p99 < fatal_settle_s + 0.5 s, local file).

The monitor waits `fatal_settle_s` (5 s) after a job's first fatal line on purpose, so that
the cause lines its ranks print after it are read before it judges (the multi-GPU root-cause
issue); the goal is what it spends beyond that wait (it was p99 < 0.5 s before the wait existed).

OURS: `autoexp run`'s path with the local executor: start_session submits N jobs
(benchmarks/_fake_job.py), the real Monitor watches their logs (LogTailer on
inotify -> Classifier -> policy.decide() -> decision row in SQLite). Each job
prints healthy Megatron iterations, then an NCCL watchdog timeout line stamped with
time.time() just before the write, then sleeps. The restart policy
megatron_transient cancels at once on nccl_timeout (`early_cancel_on`), so the
decision is taken on the line, while the job still runs. Latency = the moment the
monitor reports the decision (its `say` line, emitted after the decision row is
committed) - the line's stamp. The stored `decided_at` is printed too.

BASELINE (same run, same log files): what a poll-based supervisor does. A thread
re-reads every job log every `poll_interval_s` (tail from the last offset + the
same NCCL regex, i.e. `tail | grep`), at 2 s and at the seed's 10 s. Latency = the
poll that first sees the line - the line's stamp. It decides nothing and writes no
database row, so it is a lower bound for a poll-based supervisor.
"""

from __future__ import annotations

import glob
import re
import threading
import time
from pathlib import Path

from _common import (
    Report,
    fmt_summary,
    line_time,
    parse_args,
    save_result,
    start_monitor_run,
    summary,
    trial_of,
    verdict,
    workdir,
    write_experiment,
)

GOAL_P99_S = 0.5  # beyond the settle window
SETTLE_S = 5.0
BASE_S = 3.0  # the monitor has seen every job RUNNING (local poll: 1 s) before its fatal line
STAGGER_S = 0.6  # trials apart, so one decision does not queue behind another
BASELINE_POLLS_S = (2.0, 10.0)


class PollingGrep:
    """The baseline: every interval_s, read each log's new bytes and grep for the fatal line."""

    def __init__(self, pattern: str, logs_glob: str, interval_s: float) -> None:
        self.regex = re.compile(pattern)
        self.logs_glob = logs_glob
        self.interval_s = interval_s
        self.offsets: dict[str, int] = {}
        self.seen: dict[str, float] = {}  # log path -> when a poll first saw the line
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"grep-{interval_s:g}s", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.interval_s):
            for path in glob.glob(self.logs_glob):
                if path not in self.seen and self._grep(path):
                    self.seen[path] = time.time()

    def _grep(self, path: str) -> bool:
        with open(path, "rb") as handle:
            handle.seek(self.offsets.get(path, 0))
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self.offsets[path] = self.offsets.get(path, 0) + end
        return any(self.regex.search(line) for line in data[:end].decode(errors="replace").splitlines())


def main() -> None:
    args = parse_args(__doc__)
    trials = [f"a{i:02d}" for i in range(5 if args.quick else 20)]
    out = Report()
    with workdir("decision") as tmp:
        work = Path(tmp)
        experiment = write_experiment(
            work, name="bench1", executor="local", job_args=["nccl-timeout", str(BASE_S), str(STAGGER_S)],
            trials=trials, monitoring={"log_watch": "inotify", "fatal_settle_s": SETTLE_S},
        )  # fmt: skip
        from oellm_autoexp.adapters.logs.pattern_files import load_patterns

        nccl = next(p for p in load_patterns().patterns if p.name == "nccl_watchdog_timeout")
        logs = str(work / "out" / "*" / "logs" / "*.out")
        greps = [PollingGrep(nccl.regex, logs, s) for s in BASELINE_POLLS_S]
        run = start_monitor_run(experiment, work)
        for g in greps:
            g.thread.start()
        try:
            finished = run.wait(BASE_S + len(trials) * STAGGER_S + 30)
            deadline = time.time() + max(BASELINE_POLLS_S) + 5
            while time.time() < deadline and any(len(g.seen) < len(trials) for g in greps):
                time.sleep(0.2)
        finally:
            for g in greps:
                g.stop.set()
            run.cancel_leftovers()
        rows = measure(run, greps)
        run.store.close()
    report(out, args, rows, finished)


def measure(run, greps: list[PollingGrep]) -> list[dict[str, float | str | None]]:
    jobs = {j.id: j for j in run.store.jobs_for_session(run.session_id)}
    decided_at = {
        d.attempt_id: d.decided_at.timestamp() for d in run.store.decisions_for_session(run.session_id)
    }
    rows = []
    for attempt in run.attempts():
        if attempt.attempt_no != 1:
            continue
        job = jobs[attempt.job_id]
        t_line = line_time(attempt.log_path, "Watchdog caught")
        who = f"{job.name} attempt 1 "
        said = next((s.at for s in run.said if s.text.find(who) > 0 and ": restart:" in s.text), None)
        sub2 = next((s.at for s in run.said if f"Submitted {job.name} attempt 2" in s.text), None)
        row: dict[str, float | str | None] = {"trial": trial_of(job.name), "line_t": t_line}
        if t_line is not None:
            row["ours_decision_s"] = None if said is None else said - t_line
            row["ours_decided_at_s"] = decided_at[attempt.id] - t_line if attempt.id in decided_at else None
            row["ours_resubmitted_s"] = None if sub2 is None else sub2 - t_line
            for g in greps:
                seen = g.seen.get(attempt.log_path or "")
                row[f"baseline_poll_{g.interval_s:g}s"] = None if seen is None else seen - t_line
        rows.append(row)
    return rows


def report(out: Report, args, rows: list[dict], finished: bool) -> None:
    def col(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    ours = col("ours_decision_s")
    out("fatal line -> decision recorded (local file, local executor, real Monitor, inotify)")
    out(f"trials: {len(rows)}; jobs with a decision: {len(ours)}; monitor ended by itself: {finished}")
    out(fmt_summary("OURS  line -> decision row committed (monitor's say)", ours))
    out(fmt_summary("OURS  line -> stored decided_at", col("ours_decided_at_s")))
    out(fmt_summary("OURS  line -> replacement submitted (local executor)", col("ours_resubmitted_s")))
    for interval in BASELINE_POLLS_S:
        out(
            fmt_summary(
                f"BASE  re-read logs every {interval:g} s (tail+grep), line seen",
                col(f"baseline_poll_{interval:g}s"),
            )
        )
    met = len(ours) == len(rows) and bool(ours) and summary(ours)["p99"] < SETTLE_S + GOAL_P99_S
    out(verdict(f"p99 < fatal_settle_s ({SETTLE_S:g} s) + {GOAL_P99_S} s", met))
    save_result(
        "fatal_to_decision", args,
        {"goal": f"p99 < fatal_settle_s ({SETTLE_S:g} s) + {GOAL_P99_S} s", "goal_met": met,
         "fatal_settle_s": SETTLE_S,
         "ours_decision": summary(ours), "ours_decided_at": summary(col("ours_decided_at_s")),
         "ours_resubmitted": summary(col("ours_resubmitted_s")),
         **{f"baseline_poll_{i:g}s": summary(col(f"baseline_poll_{i:g}s")) for i in BASELINE_POLLS_S},
         "trials": rows},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

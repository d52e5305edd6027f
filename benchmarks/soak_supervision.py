"""Chaos soak of the watcher itself: restart cycles on the localhost Slurm while the monitor is
SIGKILLed, SIGSTOPped for seconds, and taken over from another host (`unshare --uts`) while paused.

One job trains (an iteration line every 0.3 s) and fails on purpose (exit 1) at the end of each of
its first CYCLES runs; the next run completes. The hang limit (6 s) is shorter than the longest
pauses, so a monitor that took its own pause for the job's hang would cancel healthy runs.
Meanwhile, at random moments, the current monitor is
- SIGKILLed (a reaped login-node process) and a new one started at once;
- SIGSTOPped for 2-20 s (a suspended or overloaded login node), then SIGCONTed;
- SIGSTOPped past the lock's stale limit while a second monitor on another host name takes the
  session over; then woken: it must exit 3 (fenced off) without acting.
It ends when the job is completed, then counts from the store and Slurm's accounting:
- overlaps: two Slurm jobs of the session RUNNING at the same time (sacct Start/End);
- charged twice: restart decisions beyond the CYCLES failures;
- healthy cancelled: hang decisions (every run printed progress until it ended);
- failures not restarted, and the soak_restarts counts (lost, duplicates, missing decisions).
All must be 0 and the job completed. A benchmark, not a test (the lead runs it):

    python benchmarks/soak_supervision.py --cycles 30
    python benchmarks/soak_supervision.py --quick          # 8 cycles
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import Report, parse_args, require_slurm, save_result, scancel, workdir
from benchmarks.soak_restarts import autoexp, count, job_status, setup
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

STALE_S = 5  # monitoring.lock_stale_after_s: a paused holder may be taken over after this
HANG_S = 6  # monitoring.hang.no_output_timeout_s: shorter than the longest pause
PAUSE_S = (2.0, 20.0)
LIVE_S = (1.0, 8.0)  # a monitor runs this long before the next chaos event
OTHER_HOST = "login-b"
JOB_SCRIPT = """#!/bin/bash
here="$(dirname "$0")"
n=$(( $(cat "$here/runs" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$here/runs"
echo "run $n (slurm job $SLURM_JOB_ID)"
for i in $(seq 1 12); do echo " iteration $i/ 12 | lm loss: 1.0 |"; sleep 0.3; done
if [ "$n" -le {cycles} ]; then echo "run $n fails on purpose" >&2; exit 1; fi
echo "run $n completes"
"""


def prepare(tmp: Path, cycles: int) -> tuple[Path, dict[str, str]]:
    path, env = setup(tmp, cycles, 0.0)
    (tmp / "job.sh").write_text(JOB_SCRIPT.format(cycles=cycles), encoding="utf-8")
    data = yaml.safe_load(path.read_text())
    data["monitoring"] |= {"lock_stale_after_s": STALE_S, "hang": {"no_output_timeout_s": HANG_S}}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, env


def monitor(tmp: Path, env: dict[str, str], log: Any, *, other_host: bool = False) -> subprocess.Popen[bytes]:
    argv = autoexp(tmp, "monitor-session", "--session-id", "1")
    if other_host:
        argv = ["unshare", "--uts", "sh", "-c", f'hostname {OTHER_HOST} && exec "$@"', "sh", *argv]
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def lock(tmp: Path) -> tuple[int | None, int]:
    """(holder pid, lock generation) of the session."""
    with SQLiteStore(tmp / "state", read_only=True) as store:
        session = store.get_session(1)
        return (session.monitor_pid, session.monitor_generation) if session else (None, 0)


def wait_holding(tmp: Path, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> bool:
    """Until `proc` holds the session's lock (it started and resumed), or it ended."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        if lock(tmp)[0] == proc.pid:
            return True
        time.sleep(0.2)
    return False


def chaos(tmp: Path, env: dict[str, str], deadline_s: float, rng: random.Random) -> dict[str, Any]:
    """Monitors under kills, pauses and takeovers until the job is no longer active."""
    tally = {"started": 0, "killed": 0, "paused": 0, "taken_over": 0, "fenced_exit_3": 0}
    woken: dict[int, int] = {}  # exit code of each monitor woken after a takeover -> how many
    log = (tmp / "monitors.log").open("ab")
    deadline = time.monotonic() + deadline_s
    current = None
    while job_status(tmp) == "active" and time.monotonic() < deadline:
        if current is None or current.poll() is not None:
            current = monitor(tmp, env, log, other_host=rng.random() < 0.5)
            tally["started"] += 1
            if not wait_holding(tmp, current):
                continue  # ended before it took the lock (the job completed meanwhile)
        try:
            current.wait(timeout=rng.uniform(*LIVE_S))
            continue
        except subprocess.TimeoutExpired:
            pass
        event = rng.choice(("kill", "pause", "takeover"))
        if event == "kill":
            current.send_signal(signal.SIGKILL)
            current.wait()
            tally["killed"] += 1
            continue
        current.send_signal(signal.SIGSTOP)
        tally["paused"] += 1
        if event == "pause":
            time.sleep(rng.uniform(*PAUSE_S))
            current.send_signal(signal.SIGCONT)
            continue
        time.sleep(STALE_S + 2)
        taker = monitor(tmp, env, log, other_host=True)
        tally["started"] += 1
        taken = wait_holding(tmp, taker)
        tally["taken_over"] += taken
        current.send_signal(signal.SIGCONT)
        try:
            code = current.wait(timeout=30)
        except subprocess.TimeoutExpired:
            current.kill()
            code = current.wait()
        woken[code] = woken.get(code, 0) + 1
        tally["fenced_exit_3"] += taken and code == 3
        current = taker
    if current is not None and current.poll() is None:
        current.wait(timeout=120)
    log.close()
    return {**tally, "woken_exit_codes": woken}  # type: ignore[dict-item]


def overlaps(slurm_ids: list[str]) -> int:
    """Pairs of the session's Slurm jobs whose run times overlap, from sacct."""
    if not slurm_ids:
        return 0
    lines = subprocess.run(["sacct", "--noheader", "--parsable2", "-X", "--format=Start,End", "--jobs",
                            ",".join(slurm_ids)], capture_output=True, text=True, timeout=60, check=True
                           ).stdout.splitlines()  # fmt: skip
    spans = sorted(
        (datetime.fromisoformat(s), datetime.fromisoformat(e))
        for s, e in (line.split("|") for line in lines if line.strip())
        if s[:1].isdigit() and e[:1].isdigit()
    )
    return sum(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def hang_decisions(tmp: Path) -> int:
    with SQLiteStore(tmp / "state", read_only=True) as store:
        job = store.jobs_for_session(1)[0]
        return sum("hang" in d.reason for d in store.decisions_for_job(job.id))


def _options(parser: Any) -> None:
    parser.add_argument("--cycles", type=int, default=30, help="failing runs before the job completes")
    parser.add_argument("--seed", type=int, default=7, help="for the chaos events")


def main() -> None:
    args = parse_args(__doc__, _options)
    cycles = 8 if args.quick else args.cycles
    require_slurm()
    out = Report()
    rng = random.Random(args.seed)
    with workdir("soak-supervision") as name:
        tmp = Path(name)
        path, env = prepare(tmp, cycles)
        begin = time.monotonic()
        submitted = subprocess.run(autoexp(tmp, "submit", str(path), "--no-monitor"), env=env,
                                   capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        if submitted.returncode != 0:
            sys.exit(f"submit failed: {submitted.stdout}{submitted.stderr}")
        tally = chaos(tmp, env, 90.0 * (cycles + 1), rng)
        taken = time.monotonic() - begin
        figures = count(tmp, cycles)
        slurm_ids = figures.pop("slurm_ids")
        figures["overlaps"] = overlaps(slurm_ids)
        figures["healthy_cancelled"] = hang_decisions(tmp)
        figures["charged_twice"] = max(0, figures["restarts"] - cycles)
        figures["failures_not_restarted"] = max(0, cycles - figures["restarts"])
        scancel(slurm_ids)
        out(f"soak_supervision: {cycles} restart cycles; hang limit {HANG_S} s, lock stale after {STALE_S} s")
        out(f"  monitors started {tally['started']}, SIGKILLed {tally['killed']}, SIGSTOPped {tally['paused']} "
            f"(pauses {PAUSE_S[0]:g}-{PAUSE_S[1]:g} s), taken over from another host {tally['taken_over']}, "
            f"woken and fenced off (exit 3) {tally['fenced_exit_3']} (exit codes of the woken: "
            f"{tally['woken_exit_codes']}); time taken {taken:.0f} s")  # fmt: skip
        out(f"  job {figures['job_status']}: {figures['attempts']} attempts, {figures['slurm_jobs']} Slurm jobs, "
            f"{figures['runs']} runs, {figures['restarts']} restarts")  # fmt: skip
        keys = ("overlaps", "charged_twice", "healthy_cancelled", "failures_not_restarted", "jobs_lost",
                "duplicates", "spurious_restarts", "decisions_missing")  # fmt: skip
        for key in keys:
            out(f"  {key.replace('_', ' ')}: {figures[key]}")
        figures["takeovers_not_fenced"] = tally["taken_over"] - tally["fenced_exit_3"]
        keys = (*keys, "takeovers_not_fenced")
        ok = figures["job_status"] == "completed" and not any(figures[k] for k in keys)
        out(f"  verdict: {'PASS' if ok else 'FAIL'} (all 0 and the job completed)")
        if not ok:  # what the monitors said, for the post-mortem (the work dir goes)
            kept = Path(tempfile.gettempdir()) / "soak_supervision_monitors.log"
            kept.write_bytes((tmp / "monitors.log").read_bytes())
            out(f"  the monitors' output: {kept}")
        save_result("soak_supervision", args, {"cycles": cycles, "seed": args.seed, "seconds": round(taken, 1),
                                               **tally, **figures}, out.text)  # fmt: skip


if __name__ == "__main__":
    main()

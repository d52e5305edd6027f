"""Soak: many restart cycles on the localhost Slurm while the monitor is SIGKILLed and Slurm flakes.

One job fails on purpose (exit 1) on each of its first CYCLES runs and succeeds on the next; the
restart policy restarts every failure. Meanwhile the monitor (`autoexp monitor-session`) is
SIGKILLed at random moments and started again at once, and a fraction of squeue and sacct calls
fail (exit 1) or hang past the executor's timeout (wrappers on PATH). It ends when the job is
completed, then counts, from the store, Slurm (squeue + sacct by the session's submit tags) and
the job's own run counter:

- jobs lost: Slurm jobs of the session the store does not know, or attempts never seen to end;
- duplicates: runs of the job beyond the recorded attempts, attempts with more than one Slurm job;
- spurious restarts: restart decisions beyond the CYCLES failures, or for another reason;
- decisions missing: ended attempts without exactly one decision.
All four must be 0. Usage (the lead runs the long one; a benchmark, not a test):

    python benchmarks/soak_restarts.py --cycles 100 --flaky 0.2
    python benchmarks/soak_restarts.py --quick          # 10 cycles
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import Report, parse_args, require_slurm, save_result, scancel, workdir
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

FLAKY_COMMANDS = ("squeue", "sacct")
SLURM_TIMEOUT_S = 2  # the executor's timeout: a hanging call costs this much
KILL_AFTER_S = (0.5, 8.0)  # a monitor lives this long (uniform) before its SIGKILL
DEADLINE_PER_CYCLE_S = 60.0
RESTART_POLICY = {
    "rules": [{"name": "soak", "match": {"kinds": ["crash"]}, "action": "restart", "max_retries": 100_000}]
}
JOB_SCRIPT = """#!/bin/bash
here="$(dirname "$0")"
n=$(( $(cat "$here/runs" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$here/runs"
echo "run $n (slurm job $SLURM_JOB_ID)"
sleep 1
if [ "$n" -le {cycles} ]; then echo "run $n fails on purpose" >&2; exit 1; fi
echo "run $n completes"
"""


def flaky_wrapper(bin_dir: Path, name: str, rate: float) -> None:
    """`name` on PATH: fails with probability rate/2, hangs with rate/2, else runs the real one."""
    real = shutil.which(name)
    if real is None:
        sys.exit(f"{name} not found")
    per_mille = int(rate * 1000)
    wrapper = bin_dir / name
    wrapper.write_text(
        f"""#!/bin/bash
r=$(( RANDOM % 1000 ))
if [ $r -lt {per_mille // 2} ]; then echo "{name}: error: Unable to contact slurm controller" >&2; exit 1; fi
if [ $r -lt {per_mille} ]; then exec sleep 60; fi
exec {real!r} "$@"
""",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)


def setup(tmp: Path, cycles: int, rate: float) -> tuple[Path, dict[str, str]]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in FLAKY_COMMANDS:
        flaky_wrapper(bin_dir, name, rate)
    script = tmp / "job.sh"
    script.write_text(JOB_SCRIPT.format(cycles=cycles), encoding="utf-8")
    script.chmod(0o755)
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "soak", "output_dir": str(tmp / "out")},
        "executor": "slurm",
        "backend": {"command": ["bash", str(script)]},
        "monitoring": {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5},
        "restart": RESTART_POLICY,
    }
    path = tmp / "soak.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "AUTOEXP_SLURM_TIMEOUT_S": str(SLURM_TIMEOUT_S), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    return path, env


def autoexp(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp / "state"), *args]


def job_status(tmp: Path) -> str:
    with SQLiteStore(tmp / "state", read_only=True) as store:
        return store.jobs_for_session(1)[0].status


def run_with_kills(tmp: Path, env: dict[str, str], deadline_s: float, rng: random.Random) -> tuple[int, int]:
    """Monitors, each SIGKILLed after a random time, until the job is no longer active.

    Returns (monitors started, monitors SIGKILLed).
    """
    started = killed = 0
    log = (tmp / "monitors.log").open("ab")
    deadline = time.monotonic() + deadline_s
    while job_status(tmp) == "active" and time.monotonic() < deadline:
        proc = subprocess.Popen(autoexp(tmp, "monitor-session", "--session-id", "1"), env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        started += 1
        try:
            proc.wait(timeout=rng.uniform(*KILL_AFTER_S))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed += 1
    log.close()
    return started, killed


def tagged_slurm_jobs(tags: set[str]) -> dict[str, str]:
    """Slurm id -> submit tag, for every job (live or ended) carrying one of `tags` (no flaky wrapper)."""
    found: dict[str, str] = {}
    sacct = ["sacct", "--noheader", "--parsable2", "-X", "--format=JobID,Comment", "--starttime=now-1days"]
    squeue = ["squeue", "--noheader", "--states=all", "-o", "%i|%k"]
    for argv in (sacct, squeue):
        for line in subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines():
            job_id, _, comment = line.partition("|")
            if comment.strip() in tags:
                found[job_id.strip()] = comment.strip()
    return found


def count(tmp: Path, cycles: int) -> dict[str, Any]:
    with SQLiteStore(tmp / "state", read_only=True) as store:
        job = store.jobs_for_session(1)[0]
        attempts = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    by_tag = {a.submit_tag: a for a in attempts}
    slurm = tagged_slurm_jobs(set(by_tag))
    recorded = {a.executor_job_id for a in attempts if a.executor_job_id}
    submitted = [a for a in attempts if a.executor_job_id]
    per_attempt = Counter(slurm.values())
    runs = int((tmp / "runs").read_text()) if (tmp / "runs").exists() else 0
    per_decision = Counter(d.attempt_id for d in decisions)
    restarts = [d for d in decisions if d.action == "restart"]
    return {
        "job_status": job.status,
        "attempts": len(submitted),
        "abandoned_intents": sum(a.intent == "abandoned" for a in attempts),
        "slurm_jobs": len(slurm),
        "runs": runs,
        "jobs_lost": len(set(slurm) - recorded) + sum(a.ended_at is None for a in submitted),
        "duplicates": max(0, runs - len(submitted)) + sum(n - 1 for n in per_attempt.values() if n > 1),
        "spurious_restarts": max(0, len(restarts) - cycles)
        + sum(not d.reason.startswith("Transient failure detected (error_type=crash)") for d in restarts),
        "decisions_missing": sum(per_decision[a.id] != 1 for a in submitted if a.ended_at is not None),
        "restarts": len(restarts),
        "slurm_ids": sorted(set(slurm) | recorded),
    }


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=100, help="failing runs before the job completes")
    parser.add_argument(
        "--flaky", type=float, default=0.2, help="fraction of squeue/sacct calls that fail or hang"
    )
    parser.add_argument("--seed", type=int, default=13, help="for the kill times")


def main() -> None:
    args = parse_args(__doc__, _options)
    cycles = 10 if args.quick else args.cycles
    require_slurm()
    out = Report()
    rng = random.Random(args.seed)
    with workdir("soak") as name:
        tmp = Path(name)
        path, env = setup(tmp, cycles, args.flaky)
        begin = time.monotonic()
        submitted = subprocess.run(autoexp(tmp, "submit", str(path), "--no-monitor"), env=env, capture_output=True,
                                   text=True, timeout=120, check=False)  # fmt: skip
        if submitted.returncode != 0:
            sys.exit(f"submit failed: {submitted.stdout}{submitted.stderr}")
        started, killed = run_with_kills(tmp, env, DEADLINE_PER_CYCLE_S * (cycles + 1), rng)
        taken = time.monotonic() - begin
        figures = count(tmp, cycles)
        scancel(figures.pop("slurm_ids"))  # a failed soak may leave one running: ours only
        out(f"soak: {cycles} restart cycles, {args.flaky:.0%} of squeue/sacct calls failing or hanging "
            f"(timeout {SLURM_TIMEOUT_S} s), monitor SIGKILLed after {KILL_AFTER_S[0]}-{KILL_AFTER_S[1]} s")  # fmt: skip
        out(f"  monitors started {started}, SIGKILLed {killed}; time taken {taken:.0f} s")
        out(f"  job {figures['job_status']}: {figures['attempts']} attempts ({figures['abandoned_intents']} "
            f"abandoned intents), {figures['slurm_jobs']} Slurm jobs, {figures['runs']} runs, "
            f"{figures['restarts']} restarts")  # fmt: skip
        for key in ("jobs_lost", "duplicates", "spurious_restarts", "decisions_missing"):
            out(f"  {key.replace('_', ' ')}: {figures[key]}")
        ok = figures["job_status"] == "completed" and not any(
            figures[k] for k in ("jobs_lost", "duplicates", "spurious_restarts", "decisions_missing")
        )
        out(f"  verdict: {'PASS' if ok else 'FAIL'} (all four 0 and the job completed)")
        data = {"cycles": cycles, "flaky": args.flaky, "seed": args.seed, "monitors_started": started,
                "monitors_killed": killed, "seconds": round(taken, 1), **figures}  # fmt: skip
        save_result("soak_restarts", args, data, out.text)
        if not ok:
            sys.exit(1)


if __name__ == "__main__":
    main()

"""Shared by the benchmarks: percentiles, result files, a real Monitor run in a thread, Slurm cleanup.

Nothing here is timed itself. Every benchmark prints OUR figure beside ITS
BASELINE, both measured in the same run (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
FAKE_JOB = BENCH_DIR / "_fake_job.py"
MACHINE = os.environ.get("AUTOEXP_BENCH_MACHINE", "2-core VM, shared")
TIME_RE = re.compile(r"\[bench t=(?P<t>\d+\.\d+)\]")  # what _fake_job.py stamps into its lines


def parse_args(doc: str | None, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help="a short run (< 30 s): fewer trials")
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


# -- figures --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default). With N=20, p99 ~ the max."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """n, p50/p90/p99, min, max (seconds, rounded to ms)."""
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 4),
        "p90": round(percentile(values, 90), 4),
        "p99": round(percentile(values, 99), 4),
        "min": round(min(values), 4) if values else float("nan"),
        "max": round(max(values), 4) if values else float("nan"),
    }


def fmt_summary(label: str, values: Sequence[float], unit: str = "s") -> str:
    s = summary(values)
    return (
        f"{label:<58} n={s['n']:>3}  p50={s['p50']:8.3f} {unit}  p90={s['p90']:8.3f} {unit}  "
        f"p99={s['p99']:8.3f} {unit}  max={s['max']:8.3f} {unit}"
    )


def verdict(goal: str, met: bool) -> str:
    return f"GOAL {goal}: {'MET' if met else 'MISSED'}"


def source_state() -> dict[str, Any]:
    """The commit the figures were measured on and whether the tree differed from it (`dirty`).

    Files under benchmarks/results/ do not count: a run writes its own result there.
    """
    root = BENCH_DIR.parent

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", *argv], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or None
    changed = [
        line for line in git("status", "--porcelain").splitlines() if "benchmarks/results/" not in line
    ]
    return {"commit": commit, "dirty": bool(changed) if commit else None}


# Taken when a benchmark starts (it imports this module first): the code measured, not the
# tree as it is when the run ends.
SOURCE_AT_START = source_state()


def environment() -> dict[str, Any]:
    return {
        "date": dt.date.today().isoformat(),
        "machine": MACHINE,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **SOURCE_AT_START,
    }


def save_result(name: str, args: Any, data: dict[str, Any], text: str) -> None:
    """benchmarks/results/<name>-<date>.json (figures) and .txt (what was printed)."""
    if args.no_save:
        return
    RESULTS_DIR.mkdir(exist_ok=True)
    stem = f"{name}-{dt.date.today().isoformat()}{'-quick' if args.quick else ''}"
    payload = {"benchmark": name, "quick": bool(args.quick), **environment(), **data}
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    (RESULTS_DIR / f"{stem}.txt").write_text(text.rstrip() + "\n", encoding="utf-8")
    print(f"saved benchmarks/results/{stem}.json and .txt")


class Report:
    """Collects the printed lines, so the .txt result is exactly what was shown."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# -- Slurm -----------------------------------------------------------------------------------------


def require_slurm() -> None:
    """Exit with a clear line when the localhost cluster does not answer."""
    try:
        subprocess.run(["sinfo", "-h"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        sys.exit(
            f"Slurm does not answer ({exc}); bring it up with scripts/slurm_local.sh up and export SLURM_CONF"
        )


def scancel(job_ids: Iterable[str]) -> None:
    """Cancel OUR job ids only (never by name or user), in chunks."""
    ids = [i for i in dict.fromkeys(job_ids) if i]
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start : start + 500]], capture_output=True, timeout=60, check=False)


# -- a real Monitor over a real session ------------------------------------------------------------


def write_experiment(
    directory: Path,
    *,
    name: str,
    executor: str,
    job_args: Sequence[str],
    trials: Sequence[str],
    monitoring: dict[str, Any],
    restart: str = "megatron_transient",
) -> Path:
    """An experiment with one job per trial (a sweep over BENCH_TRIAL) running _fake_job.py."""
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": restart}],
        "experiment": {"name": name, "output_dir": str(directory / "out")},
        "executor": executor,
        "slurm": {"env": {"BENCH_TRIAL": "none"}, "sbatch": {"mem": "100M"}},
        "monitoring": {"include": ["megatron_production"], **monitoring},
        "backend": {"command": [sys.executable, "-u", str(FAKE_JOB), *job_args]},
        "sweep": {"grid": {"slurm.env.BENCH_TRIAL": list(trials)}},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class SayLine:
    at: float  # time.time() when the monitor said it (after the store write it reports)
    text: str


@dataclass
class MonitorRun:
    """A session started like `autoexp run` does, then the real Monitor in a thread."""

    store: Any
    session_id: int
    state_dir: Path
    said: list[SayLine] = field(default_factory=list)
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    exit_code: int | None = None

    def say(self, line: str) -> None:
        self.said.append(SayLine(time.time(), line))

    def start(self) -> None:
        from oellm_autoexp.daemon.monitor import Monitor

        monitor = Monitor(self.store, [self.session_id], state_dir=self.state_dir, say=self.say)

        def body() -> None:
            self.exit_code = monitor.run(self.stop)

        self.thread = threading.Thread(target=body, name="bench-monitor", daemon=True)
        self.thread.start()

    def wait(self, timeout_s: float) -> bool:
        """True if the monitor finished by itself within timeout_s (else it is stopped)."""
        assert self.thread is not None
        self.thread.join(timeout_s)
        finished = not self.thread.is_alive()
        self.stop.set()
        self.thread.join(30)
        return finished

    def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Poll `done` every 0.2 s until it holds (True) or timeout_s passes (False)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if done():
                return True
            time.sleep(0.2)
        return False

    def attempts(self) -> list[Any]:
        return self.store.attempts_for_session(self.session_id)

    def cancel_leftovers(self) -> None:
        """Cancel every attempt of this session that has not ended (ours only)."""
        from oellm_autoexp.adapters.executors.factory import make_executor

        for attempt in self.attempts():
            if attempt.executor_job_id and attempt.ended_at is None:
                name = "local" if attempt.executor_job_id.startswith("local") else "slurm"
                try:
                    make_executor(name, self.state_dir).cancel(attempt.executor_job_id)
                except Exception as exc:  # cleanup goes on whatever one cancel says
                    print(f"warning: cancel {attempt.executor_job_id}: {exc}")


def start_monitor_run(experiment: Path, workdir: Path) -> MonitorRun:
    """Plan the experiment, create the session and submit first attempts, start the Monitor."""
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.config.experiment import load_jobs
    from oellm_autoexp.daemon.session import start_session
    from oellm_autoexp.plan.plan import build_plans

    plans = build_plans(load_jobs(str(experiment), [], []), str(workdir))
    state = workdir / "state"
    store = SQLiteStore(state)
    run = MonitorRun(store, 0, state)
    session, failed = start_session(
        store, plans, config_path=str(experiment), state_dir=state, now_s=time.time(), say=run.say
    )
    if failed:
        raise RuntimeError(f"first submission refused for {failed}")
    run.session_id = session.id
    run.start()
    return run


def trial_of(job_name: str) -> str:
    """bench_BENCH-TRIAL-a07 -> a07."""
    return job_name.rsplit("-", 1)[-1]


def line_time(log_path: str | None, marker: str = "") -> float | None:
    """The [bench t=...] stamp of the first log line that contains `marker`."""
    if not log_path or not os.path.exists(log_path):
        return None
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if marker in line:
                m = TIME_RE.search(line)
                if m:
                    return float(m.group("t"))
    return None


def workdir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A scratch directory; on the same filesystem kind as a job's output dir (inotify works)."""
    return tempfile.TemporaryDirectory(prefix=f"autoexp-bench-{prefix}-")


def rusage_self() -> tuple[float, float]:
    """(CPU seconds user+sys of this process, peak RSS MiB)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024.0


def rss_now_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")

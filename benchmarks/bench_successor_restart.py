"""Failure -> next attempt RUNNING, localhost Slurm: today's fresh submission vs the queued successor
(`restart.queued_successor`), with a live monitor and with none. All rows in the same run.

Each trial is one job whose attempt 1 prints `[bench fail t=...]` and exits 1 (a crash:
`megatron_transient` restarts it) a staggered few seconds after it started; attempt 2 prints
`[bench start t=...]` as its first line. The figure is attempt 2's stamp minus attempt 1's,
both taken by `date` in the jobs (one host, one clock): the restart as the training sees it.

  fresh      (today) the real Monitor notices the end (its poll), judges, and `sbatch`es attempt 2.
  successor  the same Monitor; attempt 2 was queued with attempt 1 (afternotok, held by --begin):
             the restart decision adopts it and releases it (`scontrol update StartTime=now`).
  no monitor attempt 2 queued the same way, unheld (queued_successor_hold_s: 0), and NO monitor
             runs: Slurm starts it when attempt 1 fails. (With a hold, add what is left of the
             hold after the monitor's death.)

The monitor runs with its defaults (10 s Slurm poll, 5 s fatal settle): rows 1 and 2 share
them, so the difference is the submission (sbatch and a new job's scheduling vs a release).
On this idle 2-node cluster a new job is scheduled within seconds; on a busy cluster a fresh
submission queues behind others and a successor has been accruing priority since attempt 1
was submitted: this run cannot show that part.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import (
    Report,
    fmt_summary,
    parse_args,
    require_slurm,
    save_result,
    scancel,
    start_monitor_run,
    summary,
)

NAME = "successor_restart"
FAIL_AFTER_S = 14.0  # attempt 1 runs this long (plus its stagger) before it fails: the monitor saw it RUNNING
STAGGER_S = 1.7  # trial i fails i * STAGGER_S later, so the failures spread over the monitor's 10 s poll
WAIT_S = 120.0  # per row: every trial's attempt 2 has started by then, or the trial counts as missed
JOB = (  # @FAIL@ and @STAGGER@ are filled in; BENCH_TRIAL t3 -> i = 3
    'n="${AUTOEXP_ATTEMPT:-1}"; i="${BENCH_TRIAL#t}"; echo "[bench start t=$(date +%s.%N)] attempt $n"; '
    'if [ "$n" = 1 ]; then sleep "$(awk -v i="$i" \'BEGIN { print @FAIL@ + i * @STAGGER@ }\')"; '
    'echo "[bench fail t=$(date +%s.%N)]"; exit 1; fi; sleep 2; echo "attempt $n done"'
)
ROWS = {
    "fresh": ("today: fresh sbatch by the live monitor", {"queued_successor": False}, True),
    "successor_live": ("queued successor, released by the live monitor", {"queued_successor": True}, True),
    "successor_no_monitor": (
        "queued successor, no monitor (Slurm starts it)",
        {"queued_successor": True, "queued_successor_hold_s": 0},
        False,
    ),
}


def git_state() -> dict[str, Any]:
    """The commit measured, and whether the tree had uncommitted changes."""
    repo = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=False
    )
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def write_experiment(directory: Path, trials: list[str], restart: dict[str, Any]) -> Path:
    # A script file: `${...}` in the config itself would be read as a config reference.
    script = directory / "job.sh"
    script.write_text(JOB.replace("@FAIL@", str(FAIL_AFTER_S)).replace("@STAGGER@", str(STAGGER_S)) + "\n")
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "succ", "output_dir": str(directory / "out")},
        "executor": "slurm",
        "slurm": {"env": {"BENCH_TRIAL": "none"}, "sbatch": {"mem": "100M"}},
        "backend": {"command": ["bash", str(script)]},
        "restart": restart,
        "sweep": {"grid": {"slurm.env.BENCH_TRIAL": trials}},
    }
    path = directory / "succ.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def stamp(log: str | None, word: str) -> float | None:
    """The `[bench WORD t=...]` stamp in a log, if it is there yet."""
    if not log or not Path(log).exists():
        return None
    for line in Path(log).read_text(errors="replace").splitlines():
        if line.startswith(f"[bench {word} t="):
            return float(line.split("t=", 1)[1].split("]", 1)[0])
    return None


def latencies(store: Any, session_id: int) -> dict[str, float]:
    """job name -> attempt 2's start stamp minus attempt 1's fail stamp, for the trials done so far."""
    found = {}
    for job in store.jobs_for_session(session_id, with_plan=False):
        attempts = {a.attempt_no: a for a in store.attempts_for_job(job.id)}
        if 1 not in attempts or 2 not in attempts:
            continue
        failed = stamp(attempts[1].log_path, "fail")
        started = stamp(attempts[2].log_path, "start")
        if failed is not None and started is not None:
            found[job.name] = started - failed
    return found


def run_row(key: str, trials: list[str], out: Report) -> dict[str, Any]:
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.config.experiment import load_jobs
    from oellm_autoexp.daemon.session import start_session
    from oellm_autoexp.plan.plan import build_plans

    label, restart, monitored = ROWS[key]
    with tempfile.TemporaryDirectory(prefix=f"autoexp-bench-{key}-") as tmp:
        work = Path(tmp)
        experiment = write_experiment(work, trials, restart)
        if monitored:
            run = start_monitor_run(experiment, work)
            store, session_id = run.store, run.session_id
        else:
            plans = build_plans(load_jobs(str(experiment), [], []), str(work))
            store = SQLiteStore(work / "state")
            session, failed = start_session(store, plans, config_path=str(experiment), state_dir=work / "state",
                                            now_s=time.time(), say=lambda _line: None)  # fmt: skip
            assert not failed, failed
            session_id, run = session.id, None
        deadline = time.time() + WAIT_S + FAIL_AFTER_S + len(trials) * STAGGER_S
        while time.time() < deadline and len(latencies(store, session_id)) < len(trials):
            time.sleep(0.5)
        found = latencies(store, session_id)
        ids = [a.executor_job_id for a in store.attempts_for_session(session_id) if a.executor_job_id]
        if run is not None:
            run.stop.set()
            run.wait(30)
        scancel([i for i in ids if i])
        store.close()
    values = list(found.values())
    out(fmt_summary(f"{label}", values))
    return {"label": label, "monitor": monitored, "missed": len(trials) - len(values),
            "restart": restart, **summary(values), "values": [round(v, 3) for v in values]}  # fmt: skip


def main() -> None:
    args = parse_args(__doc__)
    require_slurm()
    trials = [f"t{i}" for i in range(2 if args.quick else 6)]
    out = Report()
    out(f"failure -> next attempt RUNNING (attempt 2's first line minus attempt 1's last), {len(trials)} "
        f"trials per row, failures {STAGGER_S:g} s apart; monitor defaults (10 s poll)")  # fmt: skip
    rows = {key: run_row(key, trials, out) for key in ROWS}
    fresh, live = rows["fresh"]["p50"], rows["successor_live"]["p50"]
    out(f"p50: fresh {fresh:.2f} s, successor with a monitor {live:.2f} s, "
        f"with no monitor {rows['successor_no_monitor']['p50']:.2f} s")  # fmt: skip
    save_result(NAME, args, {**git_state(), "fail_stagger_s": STAGGER_S, "trials": len(trials), "rows": rows},
                out.text)  # fmt: skip


if __name__ == "__main__":
    main()

"""Fault scenarios under `autoexp run` on a multi-GPU machine, side by side, and their outcome table.

Each scenario is one experiment (local executor, torchrun over all GPUs, the project's
training workload, `restart: megatron_transient`) with one fault on rank 1 at iteration 230,
run to its end by `autoexp run` with its own state dir. The fault fires once
(`--fault-once-file`), so a restarted run resumes from its checkpoint and completes.

    python scripts/device/gpu_scenarios.py start-healthy WORK      # detached, >= 10 min
    python scripts/device/gpu_scenarios.py faults WORK [--timeouts 600,30] [--faults oom,crash]
    python scripts/device/gpu_scenarios.py recovery WORK           # load fail, full disk, in-job
                                                                   # restarts, the monitor killed
    python scripts/device/gpu_scenarios.py table WORK OUT.json     # results from the session DBs

`--device cpu` (gloo) makes a quick dry run of the plumbing on a machine without GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
FAULT_AT = 230  # iteration at whose start rank 1 fails (checkpoints every 50: resume from 200)
SETTINGS = {
    "poll_interval_s": 1,
    "log_poll_interval_s": 1,
    "heartbeat_interval_s": 5,
    "hang": {"progress_floor_s": 30},
}
HEALTHY_ARGS = [
    "--steps",
    "1800",
    "--step-time-s",
    "0.3",
    "--log-interval",
    "10",
    "--slow-steps",
    "400-460:2",
]


def experiment(
    name: str, work: Path, args: list[str], device: str, nproc: int, torchrun: list[str] | None = None
) -> Path:
    """One scenario's experiment file. Each gets its own rendezvous port: the local executor numbers
    jobs per state dir, so the port derived from the job number would be the same for all."""
    out = work / name
    # From the name, not from how many scenarios exist yet: two launchers started at once (faults
    # and paused, side by side) counted the same and gave two runs one port (EADDRINUSE).
    port = 21000 + 50 * (zlib.crc32(name.encode()) % 300)
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "defaults": [
            {"slurm": "local"},
            {"backend": "torchrun"},
            {"monitoring": "autoexp_workloads"},
            {"restart": "megatron_transient"},
        ],
        "experiment": {"name": name, "output_dir": str(out)},
        "executor": "local",
        "slurm": {"master_port": port},
        "backend": {
            "torchrun_args": [*(torchrun or []), "-m"],
            "script": "oellm_autoexp.workloads.train",
            "nproc_per_node": nproc,
            "args": [
                "--save-interval",
                "50",
                "--device",
                device,
                "--ckpt-dir",
                str(out / "checkpoints"),
                "--fault-once-file",
                str(out / "fault_fired"),
                *args,
            ],
        },
        "monitoring": SETTINGS,
    }
    path = out / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def launch(
    name: str,
    work: Path,
    args: list[str],
    device: str,
    nproc: int,
    detach: bool = False,
    torchrun: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    path = experiment(name, work, args, device, nproc, torchrun)
    argv = [
        sys.executable,
        "-m",
        "oellm_autoexp",
        "--state-dir",
        str(work / name / "state"),
        "run",
        str(path),
    ]
    log = (work / name / "monitor.log").open("wb")
    started = time.time()
    (work / name / "started").write_text(str(started))
    return subprocess.Popen(
        argv,
        cwd=work / name,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=detach,
    )


def run_faults(
    work: Path, faults: list[str], timeouts: list[int], device: str, nproc: int, limit_s: float
) -> None:
    procs = {}
    for timeout in timeouts:
        for fault in faults:
            name = f"{fault}_pg{timeout}"
            args = [
                "--steps",
                "600",
                "--step-time-s",
                "0.02",
                "--pg-timeout-s",
                str(timeout),
                "--fault",
                fault,
                "--fault-rank",
                str(nproc - 1),  # the last rank: rank 1 of 2 (a survivor blocks), rank 0 alone
                "--fault-at-step",
                str(FAULT_AT),
            ]
            procs[name] = launch(name, work, args, device, nproc)
    deadline = time.monotonic() + limit_s
    for name, proc in procs.items():
        rc = wait_recorded(work / name, proc, deadline)
        print(f"{name}: autoexp run exited {rc}", flush=True)


def wait_recorded(scenario: Path, proc: subprocess.Popen[bytes], deadline: float) -> int:
    """`autoexp run`'s exit code (-9: killed at the deadline), kept in the scenario's monitor.rc."""
    try:
        rc = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
    (scenario / "monitor.rc").write_text(str(rc))
    return rc


def run_paused(work: Path, device: str, nproc: int, pause_s: float, limit_s: float) -> None:
    """A healthy run whose MONITOR is SIGSTOPped for `pause_s` (longer than the hang floor) mid-run:
    on waking it must read what was written meanwhile, not call its own pause the job's hang."""
    name = "monitor_paused"
    args = ["--steps", "900", "--step-time-s", "0.1"]
    proc = launch(name, work, args, device, nproc)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not any(
        "iteration" in f.read_text(errors="replace") for f in (work / name).rglob("*.out")
    ):
        time.sleep(1)
    time.sleep(10)  # well into training
    (work / name / "paused").write_text(f"{time.time()} {pause_s}")
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(pause_s)
    os.kill(proc.pid, signal.SIGCONT)
    rc = wait_recorded(work / name, proc, deadline)
    print(f"{name}: autoexp run exited {rc} after a {pause_s:g} s pause of the monitor", flush=True)


FAST = ["--steps", "600", "--step-time-s", "0.02", "--pg-timeout-s", "600"]
KILL_AT = ["--fault", "kill", "--fault-at-step", str(FAULT_AT)]


def _wait_file(path: Path, deadline: float) -> bool:
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.02)
    return path.exists()


def _kill_rank(scenario: Path, rank: int) -> bool:
    """SIGKILL one training rank of the scenario, found by its checkpoint folder on the command line."""
    found = subprocess.run(
        [sys.executable, str(REPO / "scripts/device/rank_pid.py"), f"{scenario}/checkpoints ", str(rank)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for pid in found:
        os.kill(int(pid), signal.SIGKILL)
    return bool(found)


def _event(scenario: Path, what: str) -> None:
    with (scenario / "events.txt").open("a") as events:
        events.write(f"{time.time():.3f} {what}\n")


def recovery_loadfail(work: Path, device: str, nproc: int, deadline: float) -> int:
    """Rank 0 alone reads the checkpoint (--load-on-main): the newest one gets same-length garbage
    and rank 1 is killed; the next attempt fails to load on rank 0 while rank 1 blocks in the
    broadcast -> quarantine, roll back to the previous checkpoint, complete."""
    name = "loadfail_rank0"
    proc = launch(name, work, [*FAST, "--load-on-main"], device, nproc)
    scenario = work / name
    newest = scenario / "checkpoints" / "iter_0000250.pt"
    if _wait_file(newest, deadline):
        time.sleep(0.3)  # the rename is atomic; the tracker follows at once
        size = newest.stat().st_size
        with newest.open("r+b") as handle:
            handle.seek(64)
            handle.write(bytes(range(256)) * 4)
        assert newest.stat().st_size == size
        _event(scenario, "damaged iter_0000250.pt")
        if _kill_rank(scenario, nproc - 1):
            _event(scenario, "killed rank 1")
    return wait_recorded(scenario, proc, deadline)


def recovery_savefull(work: Path, device: str, nproc: int, deadline: float) -> int:
    """The checkpoint folder is a 64 MiB tmpfs; once the first checkpoint is saved a filler leaves
    half its size free: rank 0 (the only writer) fails in torch.save at the next save while rank 1
    blocks in the next collective -> stop, the reason names the disk."""
    name = "savefull_rank0"
    scenario = work / name
    folder = scenario / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        _event(scenario, f"not run: mount refused: {mounted.stderr.strip()}")
        return -1
    proc = launch(name, work, FAST, device, nproc)
    try:
        first = folder / "iter_0000050.pt"
        if _wait_file(first, deadline):
            time.sleep(0.3)
            leave = first.stat().st_size // 2
            subprocess.run([sys.executable, str(REPO / "scripts/device/disk_faults.py"), "fill", str(folder),
                            str(leave)], check=False)  # fmt: skip
            _event(scenario, f"filled, {leave} B left free")
        return wait_recorded(scenario, proc, deadline)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def recovery_injob(
    work: Path, device: str, nproc: int, deadline: float, times: int, rdzv: str = "static"
) -> int:
    """torchrun --max-restarts 1 restarts the workers in place: rank 1 killed once is a recovery the
    monitor must leave alone; killed twice, torchrun gives up and the attempt is decided after it.
    `rdzv` c10d: torchrun's c10d rendezvous instead of the static one the backend renders (a new
    store per round; the static round 2 met rank 0's stale NCCL bootstrap address on 2x H100)."""
    name = f"injob_killed{times}" + ("" if rdzv == "static" else f"_{rdzv}")
    args = [*FAST, *KILL_AT, "--fault-rank", str(nproc - 1), "--fault-once-file",
            str(work / name / "fault_fired"), "--fault-times", str(times)]  # fmt: skip
    port = 23000 + zlib.crc32(name.encode()) % 2000
    extra = [] if rdzv == "static" else ["--rdzv-backend", rdzv, "--rdzv-endpoint", f"127.0.0.1:{port}"]
    proc = launch(name, work, args, device, nproc, torchrun=["--max-restarts", "1", *extra])
    return wait_recorded(work / name, proc, deadline)


def recovery_monitor_killed(work: Path, device: str, nproc: int, deadline: float) -> int:
    """The monitor is SIGKILLed mid-run and a new one takes the session over (what the Slurm
    supervisor's next monitor job runs: `autoexp monitor-session`); rank 1 is then killed at
    iteration 400: the new monitor must restart the job, which completes."""
    name = "monitor_killed"
    scenario = work / name
    args = ["--steps", "700", "--step-time-s", "0.05", "--pg-timeout-s", "600", "--fault", "kill",
            "--fault-at-step", "400", "--fault-rank", str(nproc - 1)]  # fmt: skip
    proc = launch(name, work, args, device, nproc)
    if _wait_file(scenario / "checkpoints" / "iter_0000100.pt", deadline):
        proc.kill()
        proc.wait()
        _event(scenario, "monitor SIGKILLed")
        time.sleep(2)
        argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(scenario / "state"),
                "monitor-session", "--session-id", "1"]  # fmt: skip
        log = (scenario / "monitor2.log").open("wb")
        proc = subprocess.Popen(
            argv, cwd=scenario, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        _event(scenario, "second monitor started")
    return wait_recorded(scenario, proc, deadline)


def run_recovery(work: Path, device: str, nproc: int, limit_s: float, which: str = "") -> None:
    import threading

    deadline = time.monotonic() + limit_s
    runs = {
        "loadfail_rank0": lambda: recovery_loadfail(work, device, nproc, deadline),
        "savefull_rank0": lambda: recovery_savefull(work, device, nproc, deadline),
        "injob_killed1": lambda: recovery_injob(work, device, nproc, deadline, 1),
        "injob_killed2": lambda: recovery_injob(work, device, nproc, deadline, 2),
        "injob_killed1_c10d": lambda: recovery_injob(work, device, nproc, deadline, 1, "c10d"),
        "injob_killed2_c10d": lambda: recovery_injob(work, device, nproc, deadline, 2, "c10d"),
        "monitor_killed": lambda: recovery_monitor_killed(work, device, nproc, deadline),
    }
    if which:
        runs = {name: run for name, run in runs.items() if name in which.split(",")}
    results: dict[str, int] = {}
    threads = [threading.Thread(target=lambda n=n, f=f: results.__setitem__(n, f())) for n, f in runs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, rc in results.items():
        print(f"{name}: autoexp exited {rc}", flush=True)


def scenario_row(scenario: Path) -> dict[str, Any]:
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore  # the package under test, from the repo

    with SQLiteStore(scenario / "state") as store:
        (job,) = store.jobs_for_session(1)
        attempts = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    rc = scenario / "monitor.rc"
    started = float((scenario / "started").read_text())
    return {
        "scenario": scenario.name,
        "status": job.status,
        "attempts": [
            {
                "no": a.attempt_no,
                "state": a.state.value,
                "exit_code": a.exit_code,
                "last_iteration": a.last_iteration,
            }
            for a in attempts
        ],
        "decisions": [
            {
                "action": d.action,
                "reason": d.reason,
                "at_s": round(d.decided_at.timestamp() - started, 1),
                "trigger": (d.evidence or {}).get("trigger"),
                "error_type": (d.evidence or {}).get("error_type"),
                "kind": (d.evidence or {}).get("kind"),
                "after_first_fatal_s": (d.evidence or {}).get("after_first_fatal_s"),
                "first_fatal_line": (d.evidence or {}).get("first_fatal_line"),
                "observed": (d.evidence or {}).get("observed"),
            }
            for d in decisions
        ],
        "completed": job.status == "completed",
        "events": (scenario / "events.txt").read_text().splitlines()
        if (scenario / "events.txt").exists()
        else [],
        "monitor_rc": int(rc.read_text()) if rc.exists() else None,
    }


def table(work: Path, out: Path) -> None:
    rows = [scenario_row(p) for p in sorted(work.iterdir()) if (p / "state" / "autoexp.db").exists()]
    out.write_text(json.dumps({"machine": os.uname().nodename, "rows": rows}, indent=2))
    for row in rows:
        first = row["decisions"][0] if row["decisions"] else {}
        print(
            f"{row['scenario']:<16} attempts={len(row['attempts'])} completed={row['completed']} "
            f"first: {first.get('action')} {first.get('reason')} "
            f"after_fatal={first.get('after_first_fatal_s')} trigger={first.get('trigger')}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["start-healthy", "faults", "paused", "recovery", "table"])
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--faults", default="oom,crash,segv,kill,hang,nan")
    parser.add_argument("--timeouts", default="600,30")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--limit-s", type=float, default=420.0)
    parser.add_argument("--pause-s", type=float, default=75.0, help="paused: how long the monitor is stopped")
    parser.add_argument("--which", default="", help="recovery: only these scenarios (comma-separated)")
    parser.add_argument("--healthy-args", default=" ".join(HEALTHY_ARGS))
    a = parser.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    if a.what == "start-healthy":
        launch("healthy", a.work, a.healthy_args.split(), a.device, a.nproc, detach=True)
    elif a.what == "paused":
        run_paused(a.work, a.device, a.nproc, a.pause_s, a.limit_s)
    elif a.what == "recovery":
        run_recovery(a.work, a.device, a.nproc, a.limit_s, a.which)
    elif a.what == "faults":
        timeouts = [int(t) for t in a.timeouts.split(",")]
        run_faults(a.work, a.faults.split(","), timeouts, a.device, a.nproc, a.limit_s)
    else:
        table(a.work, a.out or a.work / "outcomes.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

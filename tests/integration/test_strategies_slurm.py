"""Allocation strategies on a real Slurm with several partitions and GPU types (docs/strategies.md).

The `strategy_cluster` (tests/conftest.py): partition a100 (node1, a100), h100 (node2, h100) and
a100_spill (node3: named a100, holds h100). A blocking job fills a100; the fan-out's free
strategy wins, the others are cancelled in the same poll; a maintenance reservation on node1
opens a backfill window that a shorter walltime fits, run as checkpointed segments.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.candidates import candidates_for_attempt
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.plan.fanout_pick import pick

pytestmark = [pytest.mark.slurm]

RUN_TIMEOUT_S = 240  # a segmented run: the first segment's warning comes 30-90 s after its start
SETTINGS = {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5}
# A training stand-in: a step a second; SIGUSR1 saves the step and exits 75 (the walltime cycle's
# line); resumed from a checkpoint it runs 3 more steps and completes. Without one it runs until
# the warning, so the run needs at least two segments whenever the warning comes.
TRAIN = """\
import os, signal, sys, time
ck = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ckpt")
step = int(open(ck).read()) if os.path.exists(ck) else 0
total = step + 3 if step else 10**6
print(f"resuming at iteration {step}", flush=True)
def save(*_):
    open(ck + ".tmp", "w").write(str(step)); os.replace(ck + ".tmp", ck)
    print(f"exiting program after receiving SIGUSR1 at iteration {step} (checkpoint saved)", flush=True)
    sys.exit(75)
signal.signal(signal.SIGUSR1, save)
while step < total:
    step += 1
    print(f" iteration {step}/ {total} | lm loss: 1.0", flush=True)
    time.sleep(1)
print("Job completed successfully", flush=True)
"""


@pytest.fixture
def slurm_env(strategy_cluster: Path) -> Iterator[dict[str, str]]:
    """The environment that points Slurm commands at the strategies cluster; its jobs are cancelled after."""
    env = {**os.environ, "SLURM_CONF": str(strategy_cluster)}
    yield env
    subprocess.run(["scancel", "--me"], env=env, check=False, capture_output=True)
    subprocess.run(["scontrol", "delete", "reservation=maint"], env=env, check=False, capture_output=True)


def slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout.strip()


def block_a100(env: dict[str, str]) -> str:
    """A job holding both a100 GPUs for 10 minutes; returns once it runs."""
    job = slurm(
        env,
        "sbatch",
        "--parsable",
        "-p",
        "a100",
        "--gres=gpu:a100:2",
        "--time=10",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    )
    deadline = time.monotonic() + 30
    while slurm(env, "squeue", "-h", "-j", job, "-o", "%T") != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    return job


def experiment(tmp: Path, command: list[str], slurm_section: dict[str, Any]) -> Path:
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"},
                     {"monitoring": "autoexp_workloads"}],
        "experiment": {"name": "ttfg", "output_dir": str(tmp / "out")},
        "executor": "slurm",
        "backend": {"command": command},
        "monitoring": SETTINGS,
        "slurm": {"gpus_per_node": 1, "sbatch": {"time": "00:30:00", "partition": "any"}, **slurm_section},
    }  # fmt: skip
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def autoexp(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp / "state"), *args]
    return subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)  # fmt: skip


def test_free_partition_wins_losers_are_cancelled_in_the_same_poll_and_a_gpu_mismatch_warns(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    """a100 is full: --test-only puts it ~10 min out, a free strategy wins, the rest are cancelled at once."""
    blocker = block_a100(slurm_env)
    done = tmp_path / "job.sh"
    done.write_text("#!/bin/bash\nsleep 2\necho 'Job completed successfully'\n", encoding="utf-8")
    done.chmod(0o755)
    path = experiment(tmp_path, [str(done)], {
        "strategies": [{"name": "a100", "partition": "a100", "gpu_type": "a100"},
                       {"name": "spill", "partition": "a100_spill", "gpu_type": "a100", "type_in_request": False},
                       {"name": "h100", "partition": "h100", "gpu_type": "h100"}],
        "allocation": {"fan_out": 3},
    })  # fmt: skip
    plan = autoexp(tmp_path, slurm_env, "plan", str(path), "--strategies")
    assert plan.returncode == 0, plan.stderr
    assert "a100" in plan.stdout and "in 10 min" in plan.stdout and "now" in plan.stdout
    run = autoexp(tmp_path, slurm_env, "run", str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "asked for a100 GPUs on partition a100_spill, Slurm allocated h100" in run.stdout
    with SQLiteStore(tmp_path / "state") as store:
        (attempt,) = store.attempts_for_session(1)
        cands = {c.strategy: c for c in candidates_for_attempt(store, attempt.id)}
        decisions = [d for d in store.decisions_for_job(attempt.job_id) if d.reason.startswith("fan-out")]
    assert {c.outcome for c in cands.values()} == {"won", "cancelled"} and len(cands) == 3
    winner = next(c for c in cands.values() if c.outcome == "won")
    assert winner.strategy in ("spill", "h100") and attempt.executor_job_id == winner.executor_job_id
    assert cands["a100"].outcome == "cancelled"
    # --test-only: the full partition starts when the blocker's 10 minutes end, the free ones now.
    assert (
        datetime.fromisoformat(cands["a100"].estimate) - datetime.fromisoformat(winner.estimate)
    ).total_seconds() > 500
    # The same poll: every loser closed at the winner's moment, and said so in one decision row.
    assert {c.closed_at for c in cands.values()} == {winner.closed_at}
    assert (
        len(decisions) == 1
        and "won after" in decisions[0].reason
        and "cancelled after" in decisions[0].reason
    )
    losers = [c.executor_job_id or "" for c in cands.values() if c.outcome == "cancelled"]
    states = slurm(slurm_env, "sacct", "-n", "-X", "-P", "-o", "State", "-j", ",".join(losers)).splitlines()
    assert states and all(s.startswith("CANCELLED") for s in states)
    assert slurm(slurm_env, "squeue", "-h", "-j", blocker, "-o", "%T") == "RUNNING"
    status = autoexp(tmp_path, slurm_env, "status")
    assert winner.strategy in status.stdout and "h100" in status.stdout


def test_two_candidates_running_in_one_poll_leave_exactly_one(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """Both start before the poll: the better-ranked keeps running, the other is cancelled in that poll."""
    script = tmp_path / "sleep.sh"
    script.write_text("#!/bin/bash\nsleep 60\n", encoding="utf-8")
    executor = SlurmExecutor()
    os.environ["SLURM_CONF"] = slurm_env["SLURM_CONF"]
    try:
        ids = [executor.submit(script, extra_args=[f"--partition={p}", "--gres=gpu:1", "--time=2",
                                                   f"--output={tmp_path}/%j.out"]) for p in ("h100", "a100_spill")]  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            records = executor.query(ids)
            if all(r.state is JobState.RUNNING for r in records.values()):
                break
            time.sleep(0.2)
        result = pick(ids, {i: r.state for i, r in records.items()})
        assert result.winner == ids[0] and result.cancel == (ids[1],)
        executor.cancel_many(result.cancel)
        after = executor.query(ids)
        assert after[ids[0]].state is JobState.RUNNING and after[ids[1]].state is not JobState.RUNNING
    finally:
        os.environ.pop("SLURM_CONF", None)


def test_backfill_fit_runs_in_segments_that_resume_from_the_checkpoint(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    """A maintenance window in 5 min: 30 min would start after it, 2 min segments start now and resume."""
    slurm(slurm_env, "scontrol", "create", "reservation", "reservationname=maint", "starttime=now+5minutes",
          "duration=60", "nodes=node1", "users=root", "flags=maint,ignore_jobs")  # fmt: skip
    train = tmp_path / "train.py"
    train.write_text(TRAIN, encoding="utf-8")
    path = experiment(tmp_path, [sys.executable, str(train)], {
        "signal": {"enabled": True, "seconds_before": 60},
        "strategies": [{"name": "a100", "partition": "a100", "gpu_type": "a100"}],
        "allocation": {"segment_minutes": [2], "save_buffer_s": 30},
    })  # fmt: skip
    run = autoexp(tmp_path, slurm_env, "run", str(path))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "save buffer 30 s raised to 60 s" in run.stdout
    with SQLiteStore(tmp_path / "state") as store:
        attempts = store.attempts_for_session(1)
        labels = {c.strategy for a in attempts for c in candidates_for_attempt(store, a.id)}
    assert labels == {"a100/seg2m"} and len(attempts) >= 2
    logs = [Path(a.log_path or "").read_text(errors="replace") for a in attempts]
    assert "exiting program after receiving SIGUSR1" in logs[0]
    resumed = int(logs[-1].split("resuming at iteration ")[1].split()[0])
    assert resumed > 0 and "Job completed successfully" in logs[-1]
    status = autoexp(tmp_path, slurm_env, "status")
    assert "elapsed" in status.stdout


def test_a_race_left_by_a_submit_without_monitor_is_resumed_without_a_second_submission(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    """`submit --no-monitor` leaves queued candidates; the monitor resumes that race and submits nothing new."""
    block_a100(slurm_env)
    done = tmp_path / "job.sh"
    done.write_text("#!/bin/bash\nsleep 1\necho 'Job completed successfully'\n", encoding="utf-8")
    done.chmod(0o755)
    path = experiment(tmp_path, [str(done)], {
        "strategies": [{"name": "a100", "partition": "a100", "gpu_type": "a100"},
                       {"name": "h100", "partition": "h100", "gpu_type": "h100"}],
        "allocation": {"fan_out": 2},
    })  # fmt: skip
    submitted = autoexp(tmp_path, slurm_env, "submit", str(path), "--no-monitor")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    resumed = autoexp(tmp_path, slurm_env, "monitor-session", "--session-id", "1")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "fan-out resumed" in resumed.stdout
    with SQLiteStore(tmp_path / "state") as store:
        attempts = store.attempts_for_session(1)
        cands = candidates_for_attempt(store, attempts[0].id)
    assert len(attempts) == 1 and len(cands) == 2
    assert {c.strategy: c.outcome for c in cands} == {"h100": "won", "a100": "cancelled"}

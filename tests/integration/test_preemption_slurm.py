"""Preemption, produced for real on the localhost Slurm.

Partition `debug-urgent` (PriorityTier=10, PreemptType=preempt/partition_prio, PreemptMode=REQUEUE)
covers the same nodes as `debug`. The project's torch workload runs under `autoexp run` on `debug`,
alone on one node (`--exclusive`, `--nodelist`); once it saved iteration 10, the test sbatches an
urgent job that needs that whole node to `debug-urgent`, and Slurm preempts the training job. Only
the test's own job is ever preempted: it holds its node alone, and the urgent job asks for that node.

What Slurm 22.05 reports (seen on this cluster, the basis of what the monitor does):
- requeue allowed (the batch default): squeue says RUNNING, COMPLETING, then PENDING (reason
  BeginTime, then Resources while the urgent job holds the node), never PREEMPTED; `sacct -X` says
  PREEMPTED for a few seconds, then PENDING, and `sacct --duplicates` keeps the preempted run as
  PREEMPTED. The log gets slurmstepd's `*** JOB N ON node CANCELLED AT ... DUE TO PREEMPTION ***`,
  and is truncated when the same id runs again.
- `--no-requeue`: squeue says COMPLETING, then PREEMPTED until MinJobAge forgets the job; sacct
  PREEMPTED, exit 0:0.

What the docs say autoexp does (docs/restart_policy.md): a job Slurm requeued runs again under its
id and is waited for, not restarted (no decision, no budget spent, no second Slurm job); an attempt
that ended PREEMPTED is a planned end, resubmitted by the `scheduler` rule ("preempted at
iteration N: resubmitted to continue"), charged only if the next attempt makes no progress. Either
way the training resumes from its newest checkpoint, and never two runs at once.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.core.decide.policy import refill_point
from oellm_autoexp.daemon.watch import job_history
from tests.integration.test_monitor_slurm import (
    COMPLETED,
    AutoexpEnv,
    slurm_lines,
    squeue_state,
    wait_until,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

URGENT_PARTITION = "debug-urgent"
RUN_TIMEOUT_S = 240.0
# Hang limits well under the time the job waits in the queue while preempted (BeginTime alone is
# ~10 s after a requeue on this cluster, and the test holds the urgent job longer than these): a
# monitor that kept the preempted run's clock would call the requeued run hung the moment it starts.
HANG = {"no_output_timeout_s": 6, "progress_floor_s": 6, "checkpoint_grace_s": 30, "startup_timeout_s": 120}
SETTINGS = {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5, "hang": HANG}
# The first run is slow past its iteration-10 checkpoint, so the urgent job finds it running.
WORKLOAD = """\
#!/bin/bash
slow=()
if [ "${{AUTOEXP_ATTEMPT:-1}}" = 1 ] && [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then slow=(--slow-steps 11-20:1); fi
echo "run: attempt ${{AUTOEXP_ATTEMPT:-?}} restart ${{SLURM_RESTART_COUNT:-0}} on $(hostname) job ${{SLURM_JOB_ID:-}}"
exec {python} -m oellm_autoexp.workloads.train --device cpu --steps 20 --save-interval 5 --step-time-s 0.1 \\
  --ckpt-dir {ckpt} "${{slow[@]}}"
"""
URGENT = """\
#!/bin/bash
for _ in $(seq 3000); do [ -e {flag} ] && exit 0; sleep 0.1; done
"""


def free_node() -> str:
    """A node no job runs on now (node1 if both are busy: the exclusive job then waits for it)."""
    for node in ("node1", "node2"):
        if not slurm_lines(["squeue", "--noheader", "-w", node, "-o", "%i"]):
            return node
    return "node1"


def experiment(autoexp: AutoexpEnv, node: str, **sbatch: Any) -> Path:
    ckpt = autoexp.tmp / "out" / "checkpoints"
    script = autoexp.tmp / "train.sh"
    script.write_text(WORKLOAD.format(python=sys.executable, ckpt=ckpt), encoding="utf-8")
    script.chmod(0o755)
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"monitoring": "autoexp_workloads"},
                     {"restart": "megatron_transient"}],
        "experiment": {"name": "preempt", "output_dir": str(autoexp.tmp / "out")},
        "executor": "slurm",
        "backend": {"command": ["bash", str(script)]},
        "slurm": {"sbatch": {"exclusive": True, "nodelist": node, **sbatch}},
        "monitoring": SETTINGS,
    }  # fmt: skip
    path = autoexp.tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def saved(autoexp: AutoexpEnv) -> int | None:
    tracker = autoexp.tmp / "out" / "checkpoints" / "latest_checkpointed_iteration.txt"
    text = tracker.read_text().strip() if tracker.exists() else ""
    return int(text) if text.isdigit() else None


class Urgent:
    """The urgent job on `debug-urgent`: the whole node, until the test lets it end."""

    def __init__(self, autoexp: AutoexpEnv, node: str) -> None:
        self.flag = autoexp.tmp / "urgent-done"
        script = autoexp.tmp / "urgent.sh"
        script.write_text(URGENT.format(flag=self.flag), encoding="utf-8")
        argv = ["sbatch", "--parsable", f"--partition={URGENT_PARTITION}", f"--nodelist={node}", "--exclusive",
                "--job-name=autoexp-test-urgent", f"--output={autoexp.tmp}/urgent-%j.out", str(script)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        self.job_id = done.stdout.strip().split(";")[0]
        autoexp.extra_jobs.append(self.job_id)

    def end(self) -> None:
        self.flag.touch()

    def cancel(self) -> None:
        subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30, check=False)


def runs(job_id: str) -> list[tuple[str, datetime | None, datetime | None]]:
    """Every run of a Slurm id (`sacct --duplicates`): state, start, end."""
    argv = [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        "--duplicates",
        "--format=State,Start,End",
        "--jobs",
        job_id,
    ]
    found = []
    for line in slurm_lines(argv):
        state, start, end = line.split("|")
        found.append((state.split()[0], stamp(start), stamp(end)))
    return found


def stamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


@pytest.fixture
def urgent_jobs() -> Iterator[list[Urgent]]:
    """Urgent jobs a test submitted; cancelled whatever happens."""
    made: list[Urgent] = []
    try:
        yield made
    finally:
        for job in made:
            job.cancel()


def preempt(autoexp: AutoexpEnv, node: str, urgent_jobs: list[Urgent]) -> tuple[str, Urgent]:
    """Wait for the attempt to run past its iteration-10 checkpoint, then preempt it."""
    job_id = autoexp.running(1)
    wait_until(lambda: (saved(autoexp) or 0) >= 10, "checkpoint 10 of the first run", RUN_TIMEOUT_S)
    assert (autoexp.attempts()[0].nodes or ("",))[0] == node
    urgent = Urgent(autoexp, node)
    urgent_jobs.append(urgent)
    wait_until(lambda: squeue_state(urgent.job_id) == "RUNNING", "the urgent job to run", RUN_TIMEOUT_S)
    return job_id, urgent


def test_a_preempted_job_that_slurm_requeues_is_waited_for_and_resumes(
    autoexp: AutoexpEnv, urgent_jobs: list[Urgent]
) -> None:
    """Slurm preempts and requeues the attempt under its id: the monitor neither restarts it nor
    submits a second job, spends no budget, and does not call the requeued run hung for the time it
    waited in the queue; the run resumes from its checkpoint once the urgent job ended, and completes."""
    node = free_node()
    monitor = autoexp.start("run", str(experiment(autoexp, node)))
    job_id, urgent = preempt(autoexp, node, urgent_jobs)
    wait_until(lambda: autoexp.attempts()[0].state.value == "PENDING", "the monitor to see it requeued")
    at_requeue = saved(autoexp)
    urgent.end()
    assert autoexp.finish(monitor, RUN_TIMEOUT_S) == 0, autoexp.output(monitor)
    (attempt,) = autoexp.attempts()
    assert attempt.executor_job_id == job_id and attempt.state.value == "COMPLETED"
    assert autoexp.reasons() == [("stop", COMPLETED)], autoexp.reasons()
    assert autoexp.job().restart_count == 0
    output = autoexp.output(monitor)
    assert "requeued by Slurm (preempted): it runs again under the same id" in output, output
    assert "hang detected" not in output, output  # the time it was queued is not the new run's silence
    log = (autoexp.tmp / "out" / "logs" / f"slurm-{job_id}.out").read_text()
    assert "restart 1" in log, log
    assert (
        f"successfully loaded checkpoint from {autoexp.tmp}/out/checkpoints at iteration {at_requeue}" in log
    ), log
    preempted, rerun = runs(job_id)
    assert preempted[0] == "PREEMPTED" and rerun[0] == "COMPLETED", (preempted, rerun)
    [(_, urgent_start, urgent_end)] = runs(urgent.job_id)
    # One run at a time: the preempted run ended before the urgent job started, the rerun after it ended.
    assert preempted[2] and urgent_start and urgent_end and rerun[1]
    assert preempted[2] <= urgent_start and urgent_end <= rerun[1]


def test_a_preempted_job_that_is_not_requeued_is_resubmitted_as_a_planned_end(
    autoexp: AutoexpEnv, urgent_jobs: list[Urgent]
) -> None:
    """`--no-requeue`: the preempted attempt ends PREEMPTED. The monitor resubmits it at once (not
    when squeue forgets the job, MinJobAge later) by the `scheduler` rule as a planned end, charged
    only if the next attempt makes no progress; the next attempt waits for the node, runs after the
    urgent job ended, resumes from the preempted run's checkpoint and completes."""
    node = free_node()
    monitor = autoexp.start("run", str(experiment(autoexp, node, **{"no-requeue": True})))
    first, urgent = preempt(autoexp, node, urgent_jobs)
    wait_until(lambda: len(autoexp.attempts()) == 2, "the resubmission", RUN_TIMEOUT_S)
    at_preemption = saved(autoexp)
    urgent.end()
    assert autoexp.finish(monitor, RUN_TIMEOUT_S) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["PREEMPTED", "COMPLETED"], attempts
    restart, stop = autoexp.decisions()
    assert (restart.action, stop.action, stop.reason) == ("restart", "stop", COMPLETED)
    assert restart.reason.startswith("preempted at iteration ") and (
        "resubmitted to continue (counts against the budget only if the next attempt does not get past "
        "iteration " in restart.reason
    ), restart.reason
    # The scheduler's rule, not the failure budget (`transient`); forgiven, as attempt 2 got past it.
    assert (restart.evidence["rule"], restart.evidence["kind"]) == ("scheduler", "preempted")
    assert attempts[1].last_iteration == 20
    assert refill_point(job_history(autoexp.decisions(), 2, attempts[1].last_iteration)) == 1
    second = attempts[1].executor_job_id or ""
    log = (autoexp.tmp / "out" / "logs" / f"slurm-{second}.out").read_text()
    assert (
        f"successfully loaded checkpoint from {autoexp.tmp}/out/checkpoints at iteration {at_preemption}"
        in log
    )
    [(state, _, ended)] = runs(first)
    [(_, urgent_start, urgent_end)] = runs(urgent.job_id)
    [(_, started, _)] = runs(second)
    assert state == "PREEMPTED" and ended and urgent_start and urgent_end and started
    assert ended <= urgent_start and urgent_end <= started
    # Resubmitted when Slurm said the job ended, not when squeue forgot it (MinJobAge).
    assert (restart.decided_at.timestamp() - ended.timestamp()) < min_job_age_s(), (restart.decided_at, ended)


def min_job_age_s() -> float:
    shown = slurm_lines(["scontrol", "show", "config"])
    [line] = [line for line in shown if line.split("=")[0].strip() == "MinJobAge"]
    return float(line.split("=", 1)[1].split()[0])

"""Experiments end to end on the real localhost Slurm cluster, and the same configs on the local executor."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor, run_slurm_command
from oellm_autoexp.core.jobs.job_state import JobState

DDP_SCRIPT = Path(__file__).parent / "ddp_script.py"

EXECUTORS = [pytest.param("slurm", marks=pytest.mark.slurm), "local"]
REPORT = "import os; print('REPORT', os.environ['NODE_RANK'], os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'], os.environ['AUTOEXP_JOB_KEY'], os.environ.get('SLURMD_NODENAME', 'localhost'))"


def _command(executor: str, **extra) -> dict:
    return {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "cmd", "output_dir": "runs/${experiment.name}"},
        "executor": executor,
        "backend": {"command": ["python", "-c", REPORT]},
        **extra,
    }


def _reports(log: str) -> list[list[str]]:
    return [line.split()[1:] for line in log.splitlines() if line.startswith("REPORT ")]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_command_job_completes(runner, executor: str) -> None:
    """A `command` job runs once, as node 0, and ends COMPLETED with exit code 0."""
    (job,) = runner.run(_command(executor))
    assert (job.record.state, job.record.exit_code) == (JobState.COMPLETED, 0), job.log
    assert [r[0] for r in _reports(job.log)] == ["0"]


@pytest.mark.torch
@pytest.mark.parametrize("executor", EXECUTORS)
def test_torchrun_job_runs_real_two_process_ddp(runner, executor: str) -> None:
    """torchrun starts 2 gloo processes that all-reduce for real; rank 0 saves into the checkpoint dir."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "torchrun"}],
        "experiment": {"name": "ddp", "output_dir": "runs/ddp"},
        "executor": executor,
        "slurm": {"cpus_per_task": 2},
        "backend": {"script": str(DDP_SCRIPT), "nproc_per_node": 2, "args": ["--steps", "5"]},
    }
    (job,) = runner.run(experiment)
    assert job.record.state is JobState.COMPLETED, job.log
    done = json.loads((Path(job.plan.checkpoint_dir) / "ddp_done.json").read_text())
    assert done["world_size"] == 2
    # Not anchored: the two ranks write to one log and their lines can interleave.
    assert sorted(re.findall(r"rank (\d)/2 loss", job.log)) == ["0", "1"]


@pytest.mark.slurm
def test_two_node_job_sees_distinct_node_ranks_and_one_master(runner) -> None:
    """With nodes=2 each node's task gets its own NODE_RANK (0 and 1) and the same MASTER_ADDR:PORT."""
    (job,) = runner.run(_command("slurm"), ["slurm.nodes=2"])
    assert job.record.state is JobState.COMPLETED, job.log
    reports = _reports(job.log)
    assert sorted(r[0] for r in reports) == ["0", "1"]
    assert len({(r[1], r[2]) for r in reports}) == 1
    assert sorted(r[4] for r in reports) == ["node1", "node2"]


@pytest.mark.torch
@pytest.mark.slurm
def test_two_node_torchrun_forms_one_world(runner) -> None:
    """torchrun on 2 nodes x 1 process: one world of 2 with node ranks 0 and 1, as the log's rank
    layout line says."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "torchrun"}],
        "experiment": {"name": "ddp2", "output_dir": "runs/ddp2"},
        "slurm": {"nodes": 2, "cpus_per_task": 1},
        "backend": {"script": str(DDP_SCRIPT), "nproc_per_node": 1, "args": ["--steps", "3"]},
    }
    (job,) = runner.run(experiment)
    assert job.record.state is JobState.COMPLETED, job.log
    done = json.loads((Path(job.plan.checkpoint_dir) / "ddp_done.json").read_text())
    assert (done["world_size"], sorted(done["node_ranks"])) == (2, [0, 1])
    # The script announces the rank layout the monitor's node blame reads (core/decide/node_blame.py).
    assert "autoexp: rank layout: 1 ranks per node (node rank = SLURM_NODEID)" in job.log


@pytest.mark.parametrize("executor", EXECUTORS)
def test_four_point_sweep_submits_four_jobs(runner, executor: str) -> None:
    """A 2 x 2 grid gives 4 jobs with their own names and output dirs; all complete."""
    sweep = {"grid": {"slurm.env.A": [1, 2], "slurm.env.B": ["x", "y"]}}
    finished = runner.run(_command(executor, slurm={"env": {"A": 0, "B": ""}}, sweep=sweep))
    assert len({f.record.job_id for f in finished}) == 4
    assert [f.plan.job_key for f in finished] == ["A-1_B-x", "A-1_B-y", "A-2_B-x", "A-2_B-y"]
    assert len({f.plan.output_dir for f in finished}) == 4
    assert all(f.record.state is JobState.COMPLETED for f in finished), [f.log for f in finished]
    assert [_reports(f.log)[0][3] for f in finished] == [f.plan.job_key for f in finished]


@pytest.mark.slurm
def test_slurm_executor_cancel_array_dependency_and_unknown(tmp_path: Path) -> None:
    """Cancel -> CANCELLED (0:15 from the batch step); array tasks by `id_n`; afterok chains; unknown ids."""
    executor = SlurmExecutor()
    script = tmp_path / "s.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --output={tmp_path}/%j.out\n#SBATCH --time=2\nsleep ${{SLEEP:-0}}\n"
    )
    long = executor.submit(script, env={"SLEEP": "300"})
    array = executor.submit(script, extra_args=["--array=1-2"])
    child = executor.submit(script, extra_args=[f"--dependency=afterok:{long}"])
    _until(executor, long, {JobState.RUNNING})
    executor.cancel(long)
    final = _until(executor, [long, f"{array}_1", f"{array}_2", child], None)
    final.update(executor.query(["999999"]))
    assert (final[long].state, final[long].signal) == (JobState.CANCELLED, 15)
    assert final[f"{array}_1"].state is final[f"{array}_2"].state is JobState.COMPLETED
    assert final[child].state is JobState.CANCELLED  # kill_invalid_depend: its parent failed
    assert (final["999999"].state, final["999999"].source) == (JobState.UNKNOWN, "none")
    executor.cancel(long)  # already ended: not an error


def _until(executor, ids, states, timeout_s: float = 60.0):
    """Poll until every id is in `states` (None: ended); sacct lists array tasks seconds late."""
    ids = [ids] if isinstance(ids, str) else ids
    deadline = time.monotonic() + timeout_s
    while True:
        seen = executor.query(ids)
        wanted = states or {JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED}
        if all(r.state in wanted for r in seen.values()) or time.monotonic() > deadline:
            return seen if len(ids) > 1 else seen[ids[0]]
        time.sleep(0.5)


def test_slurm_commands_fail_as_executor_errors() -> None:
    """A missing binary or a hung command becomes ExecutorError, never a crash or a hang."""
    with pytest.raises(ExecutorError, match="not found"):
        run_slurm_command(["autoexp-no-such-sbatch"])
    with pytest.raises(ExecutorError, match="did not answer"):
        run_slurm_command(["sleep", "5"], timeout_s=0.2)
    with pytest.raises(ExecutorError, match="failed"):
        run_slurm_command(["false"])

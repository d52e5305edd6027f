"""Write a JobPlan's script to disk and submit it: what `submit`, `run` and a restart share.

The monitor resubmits a job with `submit_plan(executor, plan, extra_args=[...])`
(e.g. `--dependency=afterany:<id>` or `--exclude=<node>`); the script on disk
is rewritten from the plan each time, so a re-planned job never runs a stale one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from oellm_autoexp.adapters.executors.base import Executor
from oellm_autoexp.adapters.executors.local import LocalExecutor
from oellm_autoexp.adapters.executors.slurm import COMMAND_TIMEOUT_S, SlurmExecutor
from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.adapters.fs.state_dir import DEFAULT_STATE_DIR as DEFAULT_STATE_DIR
from oellm_autoexp.adapters.fs.state_dir import STATE_DIR_ENV as STATE_DIR_ENV
from oellm_autoexp.adapters.fs.state_dir import state_dir as state_dir
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.plan import JobPlan, log_path_for

# Seconds before a hanging sbatch/squeue/sacct/scancel counts as "no answer" (default COMMAND_TIMEOUT_S).
SLURM_TIMEOUT_ENV = "AUTOEXP_SLURM_TIMEOUT_S"
SUBMISSIONS_FILE = "submissions.jsonl"  # in each job's output dir: one line per submission


def make_executor(name: str, state: Path) -> Executor:
    """The executor a plan names: "slurm" or "local" (whose job state lives under `state`)."""
    if name == "local":
        return LocalExecutor(state)
    return SlurmExecutor(timeout_s=slurm_timeout_s())


def slurm_timeout_s() -> float:
    """The Slurm command timeout: $AUTOEXP_SLURM_TIMEOUT_S, else COMMAND_TIMEOUT_S."""
    raw = os.environ.get(SLURM_TIMEOUT_ENV, "").strip()
    if not raw:
        return COMMAND_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise UserError(f"{SLURM_TIMEOUT_ENV}={raw!r}: expected a number of seconds > 0")
    return value


def write_script(plan: JobPlan) -> Path:
    path = Path(plan.script_path)
    Path(plan.log_path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, plan.script)  # a job never starts from a half-written script
    return path


def submit_plan(
    executor: Executor, plan: JobPlan, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> str:
    """Write the script, submit it with the plan's and the extra sbatch args, record it; the job id.

    `env`: added to the submitting environment (sbatch passes it on to the job).
    """
    script = write_script(plan)
    job_id = executor.submit(script, extra_args=[*plan.sbatch_args, *extra_args], env=env)
    record = {
        "job_id": job_id,
        "job_key": plan.job_key,
        "name": plan.name,
        "executor": executor.name,
        "log": log_path_for(plan, job_id),
        "submitted": time.time(),
        "extra_args": list(extra_args),
    }
    with (Path(plan.output_dir) / SUBMISSIONS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return job_id

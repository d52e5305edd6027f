"""The Slurm commands of the monitor's own job (plan/monitor_job.py): find, submit, cancel the
queued successor, and read or write the user's scrontab. Every call goes through
`run_slurm_command`, and every submission runs in a scrubbed environment (no SLURM_*, SBATCH_*,
PMIX_* inherited from the allocation it may be submitted from).
"""

from __future__ import annotations

import getpass
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.slurm import run_slurm_command
from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.core.jobs.slurm_parse import parse_sbatch_parsable
from oellm_autoexp.plan.monitor_job import MonitorJobSpec, render_monitor_script, scrubbed_environment

MISSING_SCRONTAB = (
    "this Slurm client has no `scrontab` command (Debian's slurm-client 22.05 does not ship it, and a "
    "site must also set ScronParameters=enable)"
)


@dataclass(frozen=True)
class MonitorJob:
    """A monitor job Slurm lists: its id and state (RUNNING, PENDING...)."""

    job_id: str
    state: str


def monitor_jobs(name: str) -> list[MonitorJob]:
    """This user's live jobs named `name`, in squeue's order."""
    done = run_slurm_command(["squeue", "--noheader", "--me", f"--name={name}", "-o", "%i|%T"])
    jobs = []
    for line in done.stdout.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id:
            jobs.append(MonitorJob(job_id, state))
    return jobs


def write_monitor_script(spec: MonitorJobSpec, path: Path) -> Path:
    write_text_atomic(path, render_monitor_script(spec))
    return path


def submit_monitor_job(script: Path) -> str:
    """sbatch the monitor job's script from a scrubbed environment; its Slurm id."""
    done = run_slurm_command(["sbatch", "--parsable", str(script)], base_env=scrubbed_environment(os.environ))
    job_id = parse_sbatch_parsable(done.stdout)
    if not job_id:
        raise ExecutorError(f"sbatch printed no job id: {done.stdout.strip()!r}")
    return job_id


def queue_successor(name: str, script: Path, own_id: str | None) -> str | None:
    """Queue the next monitor job behind this one unless one is queued already; its id, or None.

    Only the running monitor job calls this (the singleton runs one at a time), so two never
    race to queue one each.
    """
    if any(job.state == "PENDING" and job.job_id != own_id for job in monitor_jobs(name)):
        return None
    return submit_monitor_job(script)


def cancel_queued(name: str) -> None:
    """Cancel this user's PENDING jobs named `name` (the successor of a monitor whose sessions ended)."""
    run_slurm_command(["scancel", f"--name={name}", "--state=PENDING", f"--user={getpass.getuser()}"])


def has_scrontab() -> bool:
    return shutil.which("scrontab") is not None


def read_scrontab() -> str:
    """The user's scrontab ('' when there is none yet)."""
    try:
        return run_slurm_command(["scrontab", "-l"]).stdout
    except ExecutorError as exc:
        if "no crontab" in str(exc).lower() or "no scrontab" in str(exc).lower():
            return ""
        raise


def write_scrontab(text: str) -> None:
    run_slurm_command(["scrontab", "-"], stdin_text=text)

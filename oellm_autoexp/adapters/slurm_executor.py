"""SlurmExecutor: the ONLY module that runs sbatch, squeue, sacct and scancel.

Every call goes through `run_slurm_command`, which has a timeout and turns any
failure into ExecutorError, so a flaky controller is "no information this
poll" for the monitor, never a failed job. Parsing lives in core/slurm_parse.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from oellm_autoexp.adapters.executor import ExecutorError
from oellm_autoexp.core.exclusions import scontrol_exclude_command
from oellm_autoexp.core.job_record import JobRecord
from oellm_autoexp.core.job_state import JobState
from oellm_autoexp.core.slurm_parse import (
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    find_comment,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
)
from oellm_autoexp.core.spend import SPEND_SACCT_FORMAT, AttemptUsage, parse_usage

COMMAND_TIMEOUT_S = 30.0
# Printed by squeue/scancel for ids the controller has already forgotten (MinJobAge).
_FORGOTTEN = ("Invalid job id", "already completing or completed", "Job/step already")


def run_slurm_command(
    argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one Slurm CLI command; ExecutorError if it is missing, hangs or fails."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
        )
    except FileNotFoundError as exc:
        raise ExecutorError(f"{argv[0]}: command not found (is Slurm installed?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ExecutorError(f"{argv[0]} did not answer within {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise ExecutorError(f"{argv[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


class SlurmExecutor:
    name = "slurm"

    def __init__(self, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def submit(
        self, script: Path, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> str:
        done = run_slurm_command(["sbatch", "--parsable", *extra_args, str(script)], self.timeout_s, env)
        job_id = parse_sbatch_parsable(done.stdout)
        if not job_id:
            raise ExecutorError(f"sbatch printed no job id: {done.stdout.strip()!r}")
        return job_id

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        live = self._squeue(ids)
        missing = [i for i in ids if i not in live]
        done = self._sacct(missing) if missing else {}
        none = {i: JobRecord(i, JobState.UNKNOWN, "none") for i in ids}
        return {i: live.get(i) or done.get(i) or none[i] for i in ids}

    def find_by_tag(self, tag: str) -> str | None:
        """The job submitted with `--comment=<tag>`: squeue first, then sacct (ended jobs).

        sacct keeps comments only with AccountingStoreFlags=job_comment; without
        it an ended job is not found, and the caller resubmits (the old one ended).
        """
        live = run_slurm_command(["squeue", "--noheader", "--states=all", "-o", "%i|%k"], self.timeout_s)
        found = find_comment(live.stdout, tag)
        if found is None:
            argv = [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "--format=JobID,Comment",
                "--starttime=now-7days",
            ]
            found = find_comment(run_slurm_command(argv, self.timeout_s).stdout, tag)
        return found

    def cancel(self, job_id: str) -> None:
        try:
            run_slurm_command(["scancel", job_id], self.timeout_s)
        except ExecutorError as exc:
            if not any(text in str(exc) for text in _FORGOTTEN):
                raise

    def usage(self, job_ids: Sequence[str]) -> list[AttemptUsage]:
        """What every run of these ids held, and for how long (one sacct; core/spend.py).

        `--duplicates` lists each run of a requeued id; a running job's elapsed time is its
        time so far.
        """
        if not job_ids:
            return []
        argv = ["sacct", "--allocations", "--duplicates", "--noheader", "--parsable2",
                "--format", SPEND_SACCT_FORMAT, "--jobs", ",".join(dict.fromkeys(job_ids))]  # fmt: skip
        return parse_usage(run_slurm_command(argv, self.timeout_s).stdout)

    def update_excluded_nodes(self, job_id: str, nodes: str) -> None:
        """Set a PENDING job's excluded nodes (`nodes` is the whole list: it replaces, not adds)."""
        run_slurm_command(scontrol_exclude_command(job_id, nodes), self.timeout_s)

    def _squeue(self, ids: list[str]) -> dict[str, JobRecord]:
        argv = ["squeue", "--noheader", "--jobs", ",".join(ids), "-o", SQUEUE_FORMAT]
        try:
            done = run_slurm_command(argv, self.timeout_s)
        except ExecutorError as exc:
            # squeue refuses a list whose only ids have been purged; that means "none live".
            if "Invalid job id" in str(exc):
                return {}
            raise
        return parse_squeue(done.stdout)

    def _sacct(self, ids: list[str]) -> dict[str, JobRecord]:
        argv = ["sacct", "--noheader", "--parsable2", "--format", SACCT_FORMAT, "--jobs", ",".join(ids)]
        return parse_sacct(run_slurm_command(argv, self.timeout_s).stdout)

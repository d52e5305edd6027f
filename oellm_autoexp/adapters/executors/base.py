"""The executor interface: how the supervisor submits, observes and cancels jobs.

Two adapters implement it: `SlurmExecutor` (adapters/executors/slurm.py, the
only module that runs sbatch/squeue/sacct/scancel) and `LocalExecutor`
(adapters/executors/local.py, the same rendered script as a local process
group). The monitor only ever talks to this interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.strays import TaggedJob


class ExecutorError(Exception):
    """The executor could not do what was asked (submit refused, CLI missing...).

    A *query* that fails or times out raises this too; the monitor treats that
    as "no information this poll", never as a failed job.
    """


class ExecutorTimeout(ExecutorError):
    """A command did not answer in time: it may still have done what it was asked (sbatch)."""


class Executor(Protocol):
    name: str  # "slurm" | "local"
    # Seconds after which a submission started by a monitor that died can no longer appear:
    # the submit command's timeout plus the controller's lag. Younger unconfirmed intents
    # are never abandoned (their sbatch may still be running).
    settle_s: float

    def submit(
        self,
        script: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Submit a rendered sbatch script; return the new job id.

        `extra_args` are sbatch options added on the command line (e.g.
        `--exclude=node3`, `--dependency=afterany:123`, `--comment=<tag>`).
        """
        ...

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Observe many jobs at once; every requested id is in the result.

        Slurm: ONE squeue call for all ids, then ONE sacct call for the ids
        squeue no longer lists. An id neither knows is JobState.UNKNOWN with
        source "none". Raises ExecutorError if the commands fail or hang.
        """
        ...

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        """query(), plus the live jobs that carry a submit tag (`--comment`), from the same call.

        What the stray net (core/jobs/strays.py) matches against the attempts the store knows.
        """
        ...

    def find_by_tag(self, tag: str) -> str | None:
        """The id of the job submitted with `--comment=<tag>`, or None if there is none.

        How a resumed monitor recognises a submission whose id it never
        recorded (it died between sbatch and the database commit). Raises
        ExecutorError when it cannot tell.
        """
        ...

    def cancel(self, job_id: str) -> None:
        """Cancel a job; cancelling an already-ended job is not an error."""
        ...

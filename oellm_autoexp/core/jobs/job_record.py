"""What one look at Slurm (or the local executor) says about one job. No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from oellm_autoexp.core.jobs.job_state import JobState


@dataclass(frozen=True)
class JobRecord:
    """One job's state as last observed.

    `source` says where it came from, because the two Slurm views differ in
    trust: squeue is live, sacct lags for pending jobs and array tasks, and
    `none` means neither knew the job (UNKNOWN, never "gone").
    """

    job_id: str
    state: JobState
    source: str  # "squeue" | "sacct" | "local" | "none"
    exit_code: int | None = None  # the process exit status, when the job has ended
    signal: int | None = None  # the signal that ended the batch step, if any (e.g. 9, 15)
    nodes: tuple[str, ...] = field(default_factory=tuple)  # expanded host names
    reason: str = ""  # squeue's REASON or sacct's "by UID" text; informational
    start: datetime | None = None
    end: datetime | None = None


def allocation(known: tuple[str, ...], record: JobRecord) -> tuple[str, ...]:
    """The attempt's nodes: as Slurm lists them while it runs. A COMPLETING job's squeue line
    names only the nodes still completing, and node blame needs the whole allocation."""
    if record.state is JobState.RUNNING or not known:
        return record.nodes or known
    return known

"""A supervised job's status, as the supervisor sees it (not Slurm's state). No I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from enum import StrEnum


class JobStatus(StrEnum):
    ACTIVE = "active"  # the monitor keeps it running (submits, restarts)
    STOPPED = "stopped"  # the policy gave up (budget spent, non-retriable error)
    COMPLETED = "completed"  # the last attempt finished successfully
    CANCELLED_BY_USER = "cancelled_by_user"  # `autoexp cancel`: never restarted


ENDED = "ended"  # a session whose jobs all reached a final status, not all of them completed


def session_word(stored: str, job_statuses: Iterable[str]) -> str:
    """What `status` and `sessions` call a session: `completed` only when every job completed.

    The store marks a session "completed" once no job is active any more (a monitor has nothing
    left to do), whatever each job's end; a session whose job was stopped for OOM is `ended`.
    """
    statuses = list(job_statuses)
    if stored != "completed":
        return stored
    return "completed" if statuses and all(s == JobStatus.COMPLETED.value for s in statuses) else ENDED


def jobs_by_status(job_statuses: Iterable[str]) -> str:
    """`1 completed, 2 stopped`: a session's jobs counted by status, in JobStatus order."""
    counts = Counter(job_statuses)
    order = [s.value for s in JobStatus] + sorted(set(counts) - {s.value for s in JobStatus})
    return ", ".join(f"{counts[s]} {s}" for s in order if counts[s])

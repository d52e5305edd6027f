"""A supervised job's status, as the supervisor sees it (not Slurm's state). No I/O."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    ACTIVE = "active"  # the monitor keeps it running (submits, restarts)
    STOPPED = "stopped"  # the policy gave up (budget spent, non-retriable error)
    COMPLETED = "completed"  # the last attempt finished successfully
    CANCELLED_BY_USER = "cancelled_by_user"  # `autoexp cancel`: never restarted

"""Slurm job states as the supervisor understands them. No I/O.

Slurm prints states in several spellings (`CANCELLED by 0`, `CA`, `NODE_FAIL`,
`OUT_OF_MEMORY`); `parse_state` maps every one of them onto `JobState`.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"  # queued, waiting for resources or a dependency
    CONFIGURING = "CONFIGURING"  # nodes allocated, booting/configuring
    RUNNING = "RUNNING"  # at least one step is running
    COMPLETING = "COMPLETING"  # processes ending; epilog running
    SUSPENDED = "SUSPENDED"  # paused by an admin or gang scheduler; still alive
    REQUEUED = "REQUEUED"  # sent back to the queue; will run again under the same id
    PREEMPTED = "PREEMPTED"  # preempted; may be requeued (not terminal while queued)
    RESIZING = "RESIZING"  # changing size; still alive
    COMPLETED = "COMPLETED"  # every process exited 0
    FAILED = "FAILED"  # non-zero exit or launch failure
    CANCELLED = "CANCELLED"  # scancel, by a user or an admin
    TIMEOUT = "TIMEOUT"  # hit its time limit
    NODE_FAIL = "NODE_FAIL"  # a node it ran on failed
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # the cgroup OOM killer ended it
    BOOT_FAIL = "BOOT_FAIL"  # a node failed to boot
    DEADLINE = "DEADLINE"  # passed its --deadline
    UNKNOWN = "UNKNOWN"  # Slurm said nothing reliable (yet); never a reason to restart


_ALIVE = {
    JobState.PENDING,
    JobState.CONFIGURING,
    JobState.RUNNING,
    JobState.COMPLETING,
    JobState.SUSPENDED,
    JobState.REQUEUED,
    JobState.RESIZING,
}

_TERMINAL = {
    JobState.COMPLETED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.TIMEOUT,
    JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY,
    JobState.BOOT_FAIL,
    JobState.DEADLINE,
}

_SHORT_CODES = {
    "PD": JobState.PENDING,
    "CF": JobState.CONFIGURING,
    "R": JobState.RUNNING,
    "CG": JobState.COMPLETING,
    "S": JobState.SUSPENDED,
    "RQ": JobState.REQUEUED,
    "RH": JobState.REQUEUED,  # REQUEUE_HOLD
    "RF": JobState.REQUEUED,  # REQUEUE_FED
    "RS": JobState.RESIZING,
    "PR": JobState.PREEMPTED,
    "CD": JobState.COMPLETED,
    "F": JobState.FAILED,
    "CA": JobState.CANCELLED,
    "TO": JobState.TIMEOUT,
    "NF": JobState.NODE_FAIL,
    "OOM": JobState.OUT_OF_MEMORY,
    "BF": JobState.BOOT_FAIL,
    "DL": JobState.DEADLINE,
}

_SYNONYMS = {
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "STOPPED": JobState.SUSPENDED,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING,
    "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.CANCELLED,
}


def parse_state(text: str) -> JobState:
    """Map any Slurm spelling of a state onto JobState; UNKNOWN if unrecognised.

    `CANCELLED by 0`, `CANCELLED+`, `cancelled` and `CA` all give CANCELLED.
    """
    word = text.strip().split(" ", 1)[0].rstrip("+").upper()
    if not word:
        return JobState.UNKNOWN
    if word in JobState.__members__:
        return JobState[word]
    return _SHORT_CODES.get(word) or _SYNONYMS.get(word) or JobState.UNKNOWN


def is_alive(state: JobState) -> bool:
    """True while Slurm may still run (or run again) the job under this id."""
    return state in _ALIVE


def is_terminal(state: JobState) -> bool:
    """True once the job will never run again under this id.

    PREEMPTED is neither alive nor terminal on its own: a preempted job that is
    requeued shows up as PENDING/REQUEUED next; callers treat it as terminal only
    once squeue no longer lists it.
    """
    return state in _TERMINAL


# Where a job that ran is again when Slurm put it back in the queue (a requeue: preemption with
# PreemptMode=REQUEUE, a node failure without --no-requeue, `scontrol requeue`).
_RAN = {JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED, JobState.RESIZING}
_QUEUED_AGAIN = {JobState.PENDING, JobState.REQUEUED}


def has_ended_in_squeue(state: JobState) -> bool:
    """True when squeue lists a job that will not run again under its id.

    `squeue --states=all` keeps ended jobs for MinJobAge (300 s by default). Slurm 22.05 shows a
    preempted job it requeues as COMPLETING, then PENDING, never PREEMPTED; one it does not
    requeue (PreemptMode=CANCEL, `--no-requeue`) stays PREEMPTED there: that job is over.
    """
    return state in _TERMINAL or state is JobState.PREEMPTED


def is_requeue(before: JobState, after: JobState) -> bool:
    """True when a job seen running is queued again: the same id will run again (a new run)."""
    return before in _RAN and after in _QUEUED_AGAIN

"""When a failed scancel is tried again, and how its failure is told. Pure.

A decision that cancels a running attempt (a stop, or a restart on a fatal line) is not carried
out until Slurm says the attempt ended: while `scancel` fails the attempt may run on (it holds
its nodes, and writes to the job's checkpoint directory). The monitor tries again on a bounded
backoff: after 5 s, then 10, 20, 40, and every 60 s from then on, for as long as it fails.
"""

from __future__ import annotations

CANCEL_RETRY_S = 5.0  # the first try again after a failed scancel
CANCEL_RETRY_MAX_S = 60.0  # the backoff stops growing here: a failing scancel is tried once a minute

_COMMAND_FAILED = " failed ("  # run_slurm_command's "scancel failed (1): <stderr>"


def retry_after_s(failures: int) -> float:
    """Seconds from the `failures`-th failed scancel (1 = the first) to the next try."""
    if failures < 1:
        return 0.0
    return min(CANCEL_RETRY_S * 2 ** min(failures - 1, 16), CANCEL_RETRY_MAX_S)


def cancel_error(message: str) -> str:
    """What scancel itself said, from the executor's error message (its stderr, on one line)."""
    head, sep, rest = message.partition("): ")
    text = rest if sep and _COMMAND_FAILED in head else message
    return " ".join(text.split()) or "no error text"


def failing_line(action: str, error: str) -> str:
    """The event, and `status`'s last decision, while a decision's cancel fails."""
    return f"{action} requested, cancel failing: {error}"


def cancelled_line(executor_id: str, failures: int | None) -> str:
    """The event once the cancel went through (Slurm ends the attempt next); `failures` None: an
    earlier monitor's scancels failed (how often, this one does not know)."""
    if failures is None:
        return f"job {executor_id} cancelled (an earlier monitor's scancel had failed)"
    return f"job {executor_id} cancelled after {failures} failed scancel{'s' if failures != 1 else ''}"


def is_failing_line(reason: str) -> bool:
    """Is this recorded reason a `failing_line` (the cancel it tells of has not gone through)?"""
    return ", cancel failing: " in reason


def ended_line(executor_id: str, state: str) -> str:
    """The event when the attempt ended by itself while its cancel was failing."""
    return f"job {executor_id} ended ({state}) while its cancel was failing; no cancel needed any more"

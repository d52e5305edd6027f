"""The attempt's allocation the monitor keeps from squeue/sacct records (daemon/monitor.py `allocation`)."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.jobs.job_record import JobRecord, allocation
from oellm_autoexp.core.jobs.job_state import JobState

BOTH = ("node1", "node2")


@pytest.mark.parametrize(
    ("known", "state", "listed", "expected"),
    [
        ((), JobState.RUNNING, BOTH, BOTH),
        (BOTH, JobState.COMPLETING, ("node1",), BOTH),  # squeue names only the nodes still completing
        (BOTH, JobState.FAILED, ("node1",), BOTH),
        ((), JobState.FAILED, BOTH, BOTH),  # ended before the monitor saw it run: sacct's list
        (BOTH, JobState.RUNNING, ("node3", "node4"), ("node3", "node4")),  # requeued elsewhere
        (BOTH, JobState.RUNNING, (), BOTH),
    ],
)
def test_allocation_never_shrinks_to_the_nodes_still_completing(
    known: tuple[str, ...], state: JobState, listed: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Node blame judges against the whole allocation: a running job's list is taken, a later partial
    list (COMPLETING, or an end record) does not replace it."""
    assert allocation(known, JobRecord("7", state, "squeue", nodes=listed)) == expected

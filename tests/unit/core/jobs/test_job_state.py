"""Which states say a Slurm job is over, and which transitions are a requeue (a new run, same id).

The sequences are what Slurm 22.05 printed on the localhost cluster for a job preempted by a
higher-tier partition (tests/integration/test_preemption_slurm.py).
"""

from __future__ import annotations

import pytest

from oellm_autoexp.core.jobs.job_state import JobState, has_ended_in_squeue, is_requeue

S = JobState


@pytest.mark.parametrize(
    ("state", "ended"),
    [(S.PREEMPTED, True),   # --no-requeue: squeue keeps showing it PREEMPTED until MinJobAge
     (S.COMPLETED, True), (S.FAILED, True), (S.CANCELLED, True), (S.NODE_FAIL, True),
     (S.COMPLETING, False),  # a requeued one passes through COMPLETING to PENDING
     (S.PENDING, False), (S.REQUEUED, False), (S.RUNNING, False), (S.UNKNOWN, False)],
)  # fmt: skip
def test_has_ended_in_squeue(state: JobState, ended: bool) -> None:
    assert has_ended_in_squeue(state) is ended


@pytest.mark.parametrize(
    ("before", "after", "requeue"),
    [(S.RUNNING, S.PENDING, True),      # requeued between two polls
     (S.COMPLETING, S.PENDING, True),   # PreemptMode=REQUEUE: RUNNING, COMPLETING, PENDING
     (S.RUNNING, S.REQUEUED, True),
     (S.PENDING, S.RUNNING, False), (S.PENDING, S.PENDING, False), (S.UNKNOWN, S.PENDING, False),
     (S.RUNNING, S.COMPLETING, False), (S.COMPLETING, S.PREEMPTED, False), (S.RUNNING, S.COMPLETED, False)],
)  # fmt: skip
def test_is_requeue(before: JobState, after: JobState, requeue: bool) -> None:
    assert is_requeue(before, after) is requeue

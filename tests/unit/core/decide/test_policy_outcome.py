"""Outcome kinds: how Slurm's state, the log's root cause and the monitor's knowledge combine."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind, outcome_kind
from oellm_autoexp.core.watch.progress import HangKind

S = JobState
K = OutcomeKind


@pytest.mark.parametrize(
    ("state", "error_type", "kind"),
    [
        (S.COMPLETED, None, K.SUCCESS),
        (S.COMPLETED, "nccl", K.SUCCESS),
        (S.FAILED, None, K.CRASH),
        (S.FAILED, "nccl", K.CRASH),
        (S.FAILED, "oom", K.OOM),
        (S.CANCELLED, None, K.CANCELLED),
        (S.CANCELLED, "time_limit", K.TIMEOUT),
        (S.CANCELLED, "preempted", K.PREEMPTED),
        (S.CANCELLED, "node_failure", K.NODE_FAIL),
        (S.FAILED, "gpu_hardware", K.NODE_FAIL),
        (S.FAILED, "hang", K.HANG),
        (S.TIMEOUT, None, K.TIMEOUT),
        (S.DEADLINE, None, K.TIMEOUT),
        (S.NODE_FAIL, None, K.NODE_FAIL),
        (S.BOOT_FAIL, None, K.NODE_FAIL),
        (S.OUT_OF_MEMORY, None, K.OOM),
        (S.PREEMPTED, None, K.PREEMPTED),
        (S.UNKNOWN, None, K.UNKNOWN),
        (S.UNKNOWN, "nccl", K.UNKNOWN),
        (S.PENDING, None, K.ALIVE),
        (S.RUNNING, "nccl", K.ALIVE),
        (S.REQUEUED, None, K.ALIVE),
    ],
)
def test_kind_of_an_ended_job(state: JobState, error_type: str | None, kind: OutcomeKind) -> None:
    """The log's error type refines Slurm's state, except that COMPLETED is always a success,
    UNKNOWN always unknown, and a job that is still queued or running is simply alive."""
    assert outcome_kind(state, error_type) is kind


@pytest.mark.parametrize("state", [S.CANCELLED, S.FAILED, S.RUNNING, S.COMPLETED])
def test_user_cancel_wins_over_everything(state: JobState) -> None:
    """`autoexp cancel` is the user's wish; no state or log line turns it into a failure."""
    assert outcome_kind(state, "nccl", user_cancelled=True) is K.USER_CANCELLED


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        (Outcome(S.PREEMPTED, in_queue=True), K.ALIVE),
        (Outcome(S.PREEMPTED), K.PREEMPTED),
        (Outcome(S.CANCELLED, "requeue", in_queue=True), K.ALIVE),
        (Outcome(S.CANCELLED, "requeue"), K.CANCELLED),
    ],
)
def test_requeued_or_preempted_is_terminal_only_once_off_the_queue(
    outcome: Outcome, kind: OutcomeKind
) -> None:
    """A job Slurm will run again under its id (preempted, or cancelled DUE TO JOB REQUEUE and
    still queued) is alive: resubmitting it would train twice on one checkpoint directory."""
    assert outcome.kind is kind


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        (
            Outcome(S.RUNNING, "nccl_timeout", still_running=True),
            K.HANG,
        ),  # a hang seen from the waiting ranks
        (Outcome(S.RUNNING, "nccl", still_running=True), K.CRASH),
        (Outcome(S.RUNNING, hang=HangKind.NO_PROGRESS, still_running=True), K.HANG),
        (Outcome(S.RUNNING, "oom", still_running=True), K.OOM),
    ],
)
def test_kind_of_a_running_job_with_a_fatal_sign(outcome: Outcome, kind: OutcomeKind) -> None:
    """When the monitor asks about a RUNNING job (a fatal signal or a hang verdict), the kind is
    what the job is about to become."""
    assert outcome.kind is kind


def test_names_and_cause() -> None:
    """Selectors see both the classifier's error type and the kind; reasons name the error type,
    and fall back to the kind when the classifier found nothing."""
    assert Outcome(S.FAILED, "nccl").names == {"nccl", "crash"}
    assert Outcome(S.FAILED, "nccl").cause == "nccl"
    assert Outcome(S.CANCELLED).cause == "cancelled"

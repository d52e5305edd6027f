"""A Slurm resubmission waits in Slurm for a predecessor that may still be COMPLETING."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.presubmit import RECENT_END_S, after_recent_end

NOW = datetime(2026, 11, 25, 18, 0, tzinfo=UTC)


def attempt(ended_s_ago: float | None, executor_id: str | None = "4711") -> AttemptInfo:
    ended = None if ended_s_ago is None else NOW - timedelta(seconds=ended_s_ago)
    return AttemptInfo(
        id=1, job_id=1, attempt_no=1, submit_tag="t", intent="confirmed", executor_job_id=executor_id,
        nodes=(), intended_at=NOW, submitted_at=NOW, started_at=NOW, ended_at=ended,
        state=JobState.CANCELLED, exit_code=None, log_path=None, last_iteration=None,
    )  # fmt: skip


def test_a_predecessor_cancelled_moments_ago_is_waited_for_by_slurm() -> None:
    assert after_recent_end(attempt(2.0), "slurm", NOW) == ("--dependency=afterany:4711",)


def test_a_predecessor_not_seen_ended_yet_is_waited_for() -> None:
    """Just cancelled, squeue not read since: it is surely in Slurm's tables (maybe COMPLETING)."""
    assert after_recent_end(attempt(None), "slurm", NOW) == ("--dependency=afterany:4711",)


def test_a_long_gone_predecessor_is_not_named() -> None:
    """Slurm forgets an ended job after MinJobAge; a dependency on it would refuse the sbatch."""
    assert after_recent_end(attempt(RECENT_END_S + 1), "slurm", NOW) == ()


def test_no_dependency_for_the_local_executor_or_a_first_attempt() -> None:
    assert after_recent_end(attempt(1.0), "local", NOW) == ()
    assert after_recent_end(None, "slurm", NOW) == ()
    assert after_recent_end(attempt(1.0, executor_id=None), "slurm", NOW) == ()

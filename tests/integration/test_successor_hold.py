"""Which queued successors a live monitor keeps held, releases and adopts (daemon/successor.py), on a
real SQLite store with a recording stand-in for the Slurm executor (no cluster needed): never the
attempt that runs or a fresh restart waiting in the queue, always the successor behind it until the
restart adopts it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.successor import Successors, watched_attempt

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class RecordingSlurm:
    """Answers squeue with `states`; records every hold/release and cancel."""

    name = "slurm"

    def __init__(self) -> None:
        self.states: dict[str, JobState] = {}
        self.starts: list[tuple[tuple[str, ...], int]] = []
        self.cancelled: list[str] = []

    def set_start_time(self, job_ids: Sequence[str], from_now_s: int) -> None:
        self.starts.append((tuple(job_ids), from_now_s))

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        return {i: JobRecord(i, self.states.get(i, JobState.PENDING), "squeue") for i in job_ids}

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def setup(tmp_path: Path) -> tuple[SQLiteStore, Any, RecordingSlurm]:
    store = SQLiteStore(tmp_path / "state")
    session = store.create_session("s", config_path="x.yaml", config={}, now=NOW)
    job = store.add_job(session.id, job_key="main", name="j", plan={}, now=NOW)
    executor = RecordingSlurm()
    # No restart rule: nothing is queued behind an adopted successor (that needs a plan to render).
    policy = RestartPolicy.model_validate({"queued_successor": True, "queued_successor_hold_s": 300})
    return store, SimpleNamespace(job=job, policy=policy, executor=executor), executor


def submitted(store: SQLiteStore, job_id: int, attempt_no: int, executor_id: str) -> int:
    attempt_id = store.record_intent(
        job_id, attempt_no, f"autoexp-1-{job_id}-{attempt_no}-0000000{attempt_no}", now=NOW
    )
    store.confirm_submitted(attempt_id, executor_id, now=NOW)
    return attempt_id


def test_only_the_successor_behind_the_running_attempt_is_held(tmp_path: Path) -> None:
    """Attempt 1 runs (or waits for resources) and attempt 2 waits behind it: only attempt 2 is held."""
    store, rt, slurm = setup(tmp_path)
    with store:
        submitted(store, rt.job.id, 1, "101")
        submitted(store, rt.job.id, 2, "102")
        successors = Successors(store, lambda _line: None, 0.0)
        successors.keep_held([rt], now=1000.0)
        assert slurm.starts == [(("102",), 300)]
        successors.keep_held([rt], now=1010.0)  # renewed every hold / 3, not every heartbeat
        successors.keep_held([rt], now=1101.0)
        assert len(slurm.starts) == 2
        assert watched_attempt(store, rt.job.id).executor_job_id == "101"  # type: ignore[union-attr]


def test_restart_adopts_and_releases_the_successor_and_never_holds_it_again(tmp_path: Path) -> None:
    """Attempt 1 failed and a restart was decided: attempt 2 is adopted and released (StartTime=now);
    later renewals leave it alone even while attempt 1's end is not recorded yet (a cancel on a fatal line)."""
    store, rt, slurm = setup(tmp_path)
    with store:
        first = submitted(store, rt.job.id, 1, "101")
        submitted(store, rt.job.id, 2, "102")
        store.record_decision(rt.job.id, attempt_id=first, action="restart", reason="crash", now=NOW)
        successors = Successors(store, lambda _line: None, 0.0)
        adopted = successors.adopt(rt, (), now=1000.0)
        assert adopted is not None and adopted.executor_job_id == "102"
        assert (("102",), 0) in slurm.starts
        slurm.starts.clear()
        successors.keep_held([rt], now=2000.0)
        assert all("102" not in ids for ids, _ in slurm.starts)


def test_a_fresh_restart_waiting_for_resources_is_not_held(tmp_path: Path) -> None:
    """No successor existed: the restart submitted attempt 2 afresh; it is the lowest open attempt and
    this monitor did not queue it as a successor, so it is never held."""
    store, rt, slurm = setup(tmp_path)
    with store:
        first = submitted(store, rt.job.id, 1, "101")
        store.update_attempt_state(first, JobState.FAILED, ended_at=NOW)
        store.record_decision(rt.job.id, attempt_id=first, action="restart", reason="crash", now=NOW)
        submitted(store, rt.job.id, 2, "102")
        Successors(store, lambda _line: None, 0.0).keep_held([rt], now=1000.0)
        assert slurm.starts == []


def test_stop_writes_the_stop_file_before_cancelling_the_successor(tmp_path: Path) -> None:
    store, rt, slurm = setup(tmp_path)
    with store:
        submitted(store, rt.job.id, 1, "101")
        second = submitted(store, rt.job.id, 2, "102")
        successors = Successors(store, lambda _line: None, 0.0)
        seen: list[bool] = []
        stop_file = tmp_path / "state" / "stop" / f"job-{rt.job.id}"
        successors.on_cancel = lambda _id: seen.append(stop_file.exists())
        successors.drop(rt, "oom: not restarted", now=1000.0, after_attempt_no=1)
        assert slurm.cancelled == ["102"] and seen == [True]
        assert stop_file.read_text() == "oom: not restarted\n"
        ended = next(a for a in store.attempts_for_job(rt.job.id) if a.id == second)
        assert ended.state is JobState.CANCELLED and ended.ended_at is not None


def test_a_resumed_monitor_watches_the_restart_not_the_attempt_it_replaced(tmp_path: Path) -> None:
    """A restart decided on attempt 1's fatal line while it still ran, attempt 2 submitted, then the
    monitor died before attempt 1's end was recorded: the next monitor watches attempt 2 (resubmitting
    from attempt 1 would submit a third job). With no decision yet, the lowest open attempt is watched."""
    store, rt, _ = setup(tmp_path)
    with store:
        first = submitted(store, rt.job.id, 1, "101")
        submitted(store, rt.job.id, 2, "102")
        assert watched_attempt(store, rt.job.id).executor_job_id == "101"  # type: ignore[union-attr]
        store.record_decision(rt.job.id, attempt_id=first, action="restart", reason="nccl", now=NOW)
        assert watched_attempt(store, rt.job.id).executor_job_id == "102"  # type: ignore[union-attr]

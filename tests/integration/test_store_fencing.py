"""The monitor lock's fencing token on a real SQLite file (adapters/store/sqlite_store.py).

Two stores on one state dir play two monitors: the first takes the lock, stops beating
(paused), the second takes the stale lock. From then on every write of the first is refused
inside its own transaction, before anything is written, and its check before sbatch/scancel
refuses too; the second writes as usual.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import Fenced, SQLiteStore

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def two_monitors(tmp_path: Path) -> tuple[SQLiteStore, SQLiteStore, int, int]:
    first, second = SQLiteStore(tmp_path), SQLiteStore(tmp_path)
    sid = first.create_session("s", config_path="e.yaml", config={}, now=T0).id
    job = first.add_job(sid, job_key="k", name="j", plan={}, now=T0).id
    assert first.acquire_monitor_lock(sid, pid=10, host="login1", now=T0, stale_after_s=60, interval_s=10)
    return first, second, sid, job


def test_a_monitor_whose_lock_was_taken_over_writes_nothing(tmp_path: Path) -> None:
    """The first monitor (generation 1) paused past the stale limit; the second took the lock
    (generation 2). Every write of the first raises Fenced, and none of them reached the file."""
    first, second, sid, job = two_monitors(tmp_path)
    with first, second:
        assert first.fence_generation(sid) == 1
        later = T0 + timedelta(seconds=90)
        assert second.acquire_monitor_lock(sid, pid=20, host="login2", now=later, stale_after_s=60)
        assert second.fence_generation(sid) == 2
        with pytest.raises(Fenced, match=r"generation 1.*generation 2"):
            first.record_decision(job, attempt_id=None, action="restart", reason="again", now=later)
        with pytest.raises(Fenced):
            first.record_intent(job, 1, "autoexp-1-1-1-00000000-g1", now=later)
        with pytest.raises(Fenced):
            first.set_job_status(job, "stopped", "late")
        with pytest.raises(Fenced):
            first.check_fence()  # what sbatch and scancel ask first
        assert second.decisions_for_job(job) == [] and second.attempts_for_job(job) == []
        assert second.get_job(job).status == "active"  # type: ignore[union-attr]
        second.record_decision(job, attempt_id=None, action="restart", reason="ours", now=later)
        assert [d.reason for d in second.decisions_for_job(job)] == ["ours"]


def test_a_fenced_monitor_can_neither_beat_nor_release_the_new_holders_lock(tmp_path: Path) -> None:
    """Its heartbeat says the lock is lost, and its release leaves the new holder's lock alone."""
    first, second, sid, _ = two_monitors(tmp_path)
    with first, second:
        later = T0 + timedelta(seconds=90)
        assert second.acquire_monitor_lock(sid, pid=20, host="login2", now=later, stale_after_s=60)
        assert not first.heartbeat(sid, pid=10, host="login1", now=later)
        first.release_monitor_lock(sid, pid=10, host="login1", now=later)
        held = second.get_session(sid)
        assert held is not None and (held.monitor_pid, held.monitor_generation) == (20, 2)


def test_the_same_pid_and_host_taking_the_lock_again_is_a_new_generation(tmp_path: Path) -> None:
    """A restarted monitor may get its old pid back (containers, pid reuse): the generation, not the
    pid, tells the two incarnations apart, so the old one's store is fenced off all the same."""
    first, second, sid, job = two_monitors(tmp_path)
    with first, second:
        later = T0 + timedelta(seconds=90)
        assert second.acquire_monitor_lock(sid, pid=10, host="login1", now=later, stale_after_s=60)
        with pytest.raises(Fenced):
            first.record_decision(job, attempt_id=None, action="restart", reason="old", now=later)


def test_release_records_since_when_the_session_is_unsupervised(tmp_path: Path) -> None:
    """A clean stop frees the lock and says when; status shows `unsupervised since` from it."""
    first, second, sid, _ = two_monitors(tmp_path)
    with first, second:
        left = T0 + timedelta(minutes=5)
        first.release_monitor_lock(sid, pid=10, host="login1", now=left)
        session = second.get_session(sid)
        assert session is not None and session.monitor_pid is None and session.monitor_left_at == left
        assert first.fence_generation(sid) is None  # it holds nothing: later writes are not fenced

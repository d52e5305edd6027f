"""The stray net's sweep over a real store: watched jobs are never strays, and a poll whose tagged
jobs are all watched does not read the store (the usual poll of a 1,000-job monitor)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.strays import TaggedJob
from oellm_autoexp.daemon.strays import StrayNet

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class CancelLog:
    """An executor that only records what it was asked to cancel."""

    name = "slurm"

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


class CountingStore(SQLiteStore):
    reads = 0

    def attempts_for_session(self, session_id: int) -> list:  # type: ignore[override]
        self.reads += 1
        return super().attempts_for_session(session_id)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    with CountingStore(tmp_path / ".oellm_state") as s:
        yield s


def _attempt(store: SQLiteStore, tag: str, executor_id: str) -> int:
    sid = store.create_session("s", config_path="exp.yaml", config={}, now=T0).id
    jid = store.add_job(sid, job_key="k", name="s-k", plan={"script": "a.sbatch"}, now=T0).id
    aid = store.record_intent(jid, 1, tag, now=T0)
    store.confirm_submitted(aid, executor_id, now=T0)
    return sid


def _sweep(net: StrayNet, jobs: Sequence[TaggedJob], watched: set[str]) -> list[str]:
    executor = CancelLog()
    net.sweep(executor, jobs, T0, watched=watched)  # type: ignore[arg-type]
    return executor.cancelled


def test_a_poll_of_watched_jobs_only_reads_nothing_and_cancels_nothing(store: CountingStore) -> None:
    tag = "autoexp-1-1-1-0123abcd"
    sid = _attempt(store, tag, "100")
    net = StrayNet(store, [sid], say=lambda _: None)
    assert _sweep(net, [TaggedJob("100", tag, JobState.RUNNING)], watched={"100"}) == []
    assert store.reads == 0


def test_a_second_job_with_a_watched_attempts_tag_is_still_cancelled(store: CountingStore) -> None:
    tag = "autoexp-1-1-1-0123abcd"
    sid = _attempt(store, tag, "100")
    net = StrayNet(store, [sid], say=lambda _: None)
    jobs = [TaggedJob("100", tag, JobState.RUNNING), TaggedJob("101", tag, JobState.RUNNING)]
    assert _sweep(net, jobs, watched={"100"}) == ["101"]
    assert store.reads == 1
    # Without the watched list, the store is read and the watched job is still no stray.
    assert _sweep(StrayNet(store, [sid], say=lambda _: None), jobs, watched=set()) == ["101"]

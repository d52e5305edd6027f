"""A cancel whose scancel fails (daemon/cancels.py), over the real SlurmExecutor with the scancel
process faked at the subprocess boundary: said as an event once per error, tried again on the
backoff, holding the job's next attempt, and over once a scancel goes through or the job ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from oellm_autoexp.adapters.executors import slurm
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.cancels import Cancels

STDERR = "scancel: error: Kill job error on job id 4242: Unexpected message received"


@dataclass
class FakeScancel:
    """Stands in for subprocess.Popen: each scancel exits 1 with STDERR while `failing` is set."""

    failing: bool = True
    calls: list[list[str]] = field(default_factory=list)
    stderr: str = STDERR  # what a failing scancel says

    def popen(self, argv: list[str], **_kwargs: Any) -> SimpleNamespace:
        self.calls.append(list(argv))
        code, err = (1, self.stderr + "\n") if self.failing else (0, "")
        return SimpleNamespace(pid=0, returncode=code, communicate=lambda *_a, **_k: ("", err))


@dataclass
class FakeStore:
    """The store calls Cancels makes: the fence check, the job's decisions, the events written."""

    decisions: list[SimpleNamespace] = field(default_factory=list)
    fence_checks: int = 0
    reads: int = 0  # decisions_for_job calls

    def check_fence(self) -> None:
        self.fence_checks += 1

    def decisions_for_job(self, job_id: int) -> list[SimpleNamespace]:
        self.reads += 1
        return [d for d in self.decisions if d.job_id == job_id]

    def record_decision(self, job_id: int, *, attempt_id: int | None, action: str, reason: str,
                        now: datetime) -> int:  # fmt: skip
        self.decisions.append(
            SimpleNamespace(job_id=job_id, attempt_id=attempt_id, action=action, reason=reason)
        )
        return len(self.decisions)

    def events(self) -> list[str]:
        return [d.reason for d in self.decisions if d.action == "none"]


@pytest.fixture
def scancel(monkeypatch: pytest.MonkeyPatch) -> FakeScancel:
    fake = FakeScancel()
    monkeypatch.setattr(slurm.subprocess, "Popen", fake.popen)
    return fake


def _live(job_id: int = 1, attempt_id: int = 10, executor_id: str = "4242") -> Any:
    runtime = SimpleNamespace(executor=SlurmExecutor(), job=SimpleNamespace(id=job_id, name="train"))
    return SimpleNamespace(runtime=runtime, attempt=SimpleNamespace(id=attempt_id, attempt_no=1),
                           executor_id=executor_id, state=JobState.RUNNING)  # fmt: skip


def _stopped(store: FakeStore, live: Any) -> None:
    store.record_decision(live.runtime.job.id, attempt_id=live.attempt.id, action="stop",
                          reason="Permanent failure detected (excluded error_type: oom)", now=datetime.now())  # fmt: skip


def test_a_failing_cancel_is_said_once_tried_on_its_backoff_and_over_once_it_goes_through(
    scancel: FakeScancel,
) -> None:
    """The stop's scancel fails: one event naming the decision and scancel's stderr; a poll before
    the try is due runs no scancel; the due try fails again with the same error (no new event); the
    next goes through: an event, nothing held any more, nothing tried again."""
    store, said = FakeStore(), []
    cancels = Cancels(store, said.append)  # type: ignore[arg-type]
    live = _live()
    _stopped(store, live)
    assert cancels.cancel(live, now=100.0) is False
    assert store.events() == [f"stop requested, cancel failing: {STDERR}"]
    assert "WARNING" in said[-1] and "cancelling again in 5 s" in said[-1]
    assert [h.live for h in cancels.holding(1, now=101.0)] == [live]
    cancels.retry_due(now=104.9)
    assert len(scancel.calls) == 1  # not due yet
    cancels.retry_due(now=105.0)
    assert scancel.calls == [["scancel", "4242"]] * 2
    assert len(store.events()) == 1 and "cancelling again in 10 s" in said[-1]
    scancel.failing = False
    cancels.retry_due(now=114.0)
    assert len(scancel.calls) == 2  # the backoff doubled: due at 115 s
    cancels.retry_due(now=115.0)
    assert store.events()[-1] == "job 4242 cancelled after 2 failed scancels"
    assert cancels.holding(1, now=200.0) == []
    cancels.retry_due(now=1000.0)
    assert len(scancel.calls) == 3 and store.fence_checks == 3  # every scancel checked the fence first


def test_a_new_error_is_a_new_event_and_the_attempts_of_other_jobs_are_not_held(scancel: FakeScancel) -> None:
    """A different stderr is said again; `holding` answers for the asked job only, and tries its
    due cancel itself (a resubmission's check needs no poll first)."""
    store = FakeStore()
    cancels = Cancels(store, lambda _line: None)  # type: ignore[arg-type]
    mine, other = _live(1, 10, "4242"), _live(2, 20, "5353")
    _stopped(store, mine)
    cancels.cancel(mine, now=0.0)
    cancels.cancel(other, now=0.0)
    assert store.events()[-1] == f"cancel requested, cancel failing: {STDERR}"  # no decision about it
    assert cancels.holding(3, now=50.0) == [] and len(scancel.calls) == 2
    assert [h.live for h in cancels.holding(1, now=50.0)] == [mine] and len(scancel.calls) == 3


def test_an_attempt_that_ended_by_itself_meanwhile_is_no_longer_cancelled(scancel: FakeScancel) -> None:
    """Slurm ends the job (its time limit, a cancel by hand) while scancel still fails: an event
    says so; no further scancel, nothing held."""
    store = FakeStore()
    cancels = Cancels(store, lambda _line: None)  # type: ignore[arg-type]
    live = _live()
    _stopped(store, live)
    cancels.cancel(live, now=0.0)
    live.state = JobState.TIMEOUT
    cancels.ended(live, now=3.0)
    assert (
        store.events()[-1]
        == "job 4242 ended (TIMEOUT) while its cancel was failing; no cancel needed any more"
    )
    cancels.retry_due(now=100.0)
    assert len(scancel.calls) == 1 and cancels.holding(1, now=100.0) == []
    cancels.ended(_live(), now=101.0)  # an end without a failing cancel says nothing
    assert len(store.events()) == 2
    lost = _live(2, 20, "5353")
    cancels.cancel(lost, now=0.0)
    cancels.ended(lost, now=700.0)  # lost: unknown to squeue and sacct, its last state still RUNNING
    assert store.events()[-1].startswith("job 5353 ended (UNKNOWN) while its cancel was failing")


def test_a_cancel_that_works_at_once_says_nothing(scancel: FakeScancel) -> None:
    scancel.failing = False
    store = FakeStore()
    cancels = Cancels(store, lambda _line: None)  # type: ignore[arg-type]
    assert cancels.cancel(_live(), now=0.0) is True
    assert store.events() == [] and scancel.calls == [["scancel", "4242"]]


def test_a_cancel_an_earlier_monitor_left_failing_is_said_when_it_goes_through(scancel: FakeScancel) -> None:
    """The store's last event about the attempt says its cancel was failing (another monitor's):
    the scancel that goes through now says so, so `status` no longer shows the failure."""
    scancel.failing = False
    store = FakeStore()
    live = _live()
    _stopped(store, live)
    store.record_decision(1, attempt_id=10, action="none", reason=f"stop requested, cancel failing: {STDERR}",
                          now=datetime.now())  # fmt: skip
    assert Cancels(store, lambda _line: None).cancel(live, now=0.0) is True  # type: ignore[arg-type]
    assert store.events()[-1] == "job 4242 cancelled (an earlier monitor's scancel had failed)"


def test_a_pass_over_many_failing_cancels_reads_no_decisions(scancel: FakeScancel) -> None:
    """Each first cancel reads its job's decisions once (what it carries out, whether an earlier
    monitor left it failing); the retries read none, whatever their number: a new error (each
    says the decision it carries out) and the scancels that go through cost no store read."""
    store = FakeStore()
    cancels = Cancels(store, lambda _line: None)  # type: ignore[arg-type]
    lives = [_live(j, 10 * j, str(4240 + j)) for j in range(1, 6)]
    for live in lives:
        _stopped(store, live)
        cancels.cancel(live, now=0.0)
    assert store.reads == len(lives)
    scancel.stderr = "scancel: error: Socket timed out on send/recv operation"
    cancels.retry_due(now=5.0)
    assert store.events()[-len(lives) :] == [f"stop requested, cancel failing: {scancel.stderr}"] * len(lives)
    scancel.failing = False
    assert [h.live for h in cancels.holding(1, now=15.0)] == []
    cancels.retry_due(now=15.0)
    assert store.events()[-1] == "job 4245 cancelled after 2 failed scancels"
    assert store.reads == len(lives) and len(scancel.calls) == 3 * len(lives)


def test_then_runs_once_when_a_scancel_goes_through_at_a_later_try(scancel: FakeScancel) -> None:
    """A cancel's `then` (a queued successor's bookkeeping, daemon/successor.py) waits while scancel
    fails and runs once, at the try that goes through, even when that try is a retry."""
    store = FakeStore()
    cancels = Cancels(store, lambda _line: None)  # type: ignore[arg-type]
    done: list[float] = []
    live = _live()
    assert cancels.cancel(live, now=0.0, then=done.append) is False
    assert done == [] and cancels.is_failing(10) and [f.live for f in cancels.failing()] == [live]
    scancel.failing = False
    cancels.retry_due(now=5.0)
    assert done == [5.0] and not cancels.is_failing(10)
    cancels.retry_due(now=100.0)
    assert done == [5.0]

"""Step 2 of the checks before a resubmission (daemon/presubmit.py): may an earlier attempt of the
job still run? One whose scancel failed holds the submission (and is cancelled again on its
backoff); one that ended moments ago, or is not seen ended yet, is named in the sbatch's
`--dependency=afterany`; one long gone, or any on the local executor, is not. On a real SQLite
store and the real SlurmExecutor, its scancel faked at the subprocess boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oellm_autoexp.adapters.executors import slurm
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.cancels import Cancels
from oellm_autoexp.daemon.presubmit import RECENT_END_S, PreSubmission
from tests.unit.daemon.test_cancels import FakeScancel

T0 = datetime(2026, 11, 25, 18, 0, tzinfo=UTC)


@dataclass
class FakeSubmitter:
    """What step 2 asks of the submitter: a submission (its one-off sbatch args), a later look."""

    submitted: list[tuple[str, ...]] = field(default_factory=list)
    scheduled: list[float] = field(default_factory=list)
    successors: Any = field(default_factory=lambda: SimpleNamespace(drop=lambda *_a, **_k: None))

    def submit(self, rt: Any, exclude: tuple[str, ...], now: float, *, first_only: tuple[str, ...]) -> str:
        self.submitted.append(tuple(first_only))
        return "submitted"

    def schedule(self, job_id: int, at_s: float, nodes: tuple[str, ...]) -> None:
        self.scheduled.append(at_s)


@pytest.fixture
def scancel(monkeypatch: pytest.MonkeyPatch) -> FakeScancel:
    fake = FakeScancel()
    monkeypatch.setattr(slurm.subprocess, "Popen", fake.popen)
    return fake


def _setup(tmp_path: Path, executor: Any) -> tuple[SQLiteStore, Any, int]:
    """A job whose attempt 1 (Slurm job 4242) was stopped; a missing checkpoint dir (nothing to check)."""
    store = SQLiteStore(tmp_path / "state")
    session = store.create_session("s", config_path="x.yaml", config={}, now=T0)
    job = store.add_job(session.id, job_key="main", name="train", plan={}, now=T0)
    attempt_id = store.record_intent(job.id, 1, "autoexp-1-1-1-00000001", now=T0)
    store.confirm_submitted(attempt_id, "4242", now=T0)
    store.record_decision(job.id, attempt_id=attempt_id, action="restart", reason="crash", now=T0)
    plan = SimpleNamespace(config=SimpleNamespace(backend=SimpleNamespace(args=[])),
                           checkpoint_dir=str(tmp_path / "no-checkpoints"))  # fmt: skip
    policy = SimpleNamespace(max_checkpoint_rollbacks=2)
    return store, SimpleNamespace(job=job, executor=executor, plan=plan, policy=policy), attempt_id


def test_a_failing_cancel_holds_then_the_sbatch_waits_for_the_cancelled_one(
    tmp_path: Path, scancel: FakeScancel
) -> None:
    """The restart's scancel failed: nothing is submitted, a look is scheduled at the cancel's next
    try; there the cancel goes through, and the submission names the cancelled job (not seen
    ended yet) in --dependency=afterany."""
    store, rt, attempt_id = _setup(tmp_path, SlurmExecutor())
    with store:
        said: list[str] = []
        cancels, submitter = Cancels(store, said.append), FakeSubmitter()
        presubmit = PreSubmission(store, submitter, cancels, said.append)  # type: ignore[arg-type]
        live = SimpleNamespace(runtime=rt, attempt=SimpleNamespace(id=attempt_id, attempt_no=1),
                               executor_id="4242", state=JobState.RUNNING)  # fmt: skip
        now = T0.timestamp() + 60
        assert cancels.cancel(live, now) is False  # type: ignore[arg-type]
        assert presubmit.next_attempt(rt, now + 1) is None
        assert submitter.submitted == [] and submitter.scheduled == [now + 5]
        assert "not resubmitting while attempt 1 (job 4242) may still run" in said[-1]
        scancel.failing = False
        assert presubmit.next_attempt(rt, now + 5) == "submitted"
        assert submitter.submitted == [("--dependency=afterany:4242",)]
        assert scancel.calls == [["scancel", "4242"]] * 2


@pytest.mark.parametrize(
    ("ended_s_ago", "executor", "expected"),
    [
        (2.0, "slurm", ("--dependency=afterany:4242",)),  # may still be COMPLETING
        (RECENT_END_S + 1, "slurm", ()),  # Slurm may have forgotten it: a dependency would refuse the sbatch
        (2.0, "local", ()),  # no dependencies there
    ],
)
def test_an_ended_predecessor_is_named_while_it_may_still_be_completing(
    tmp_path: Path, ended_s_ago: float, executor: str, expected: tuple[str, ...]
) -> None:
    store, rt, attempt_id = _setup(tmp_path, SimpleNamespace(name=executor))
    with store:
        now = T0 + timedelta(minutes=5)
        store.update_attempt_state(
            attempt_id, JobState.CANCELLED, ended_at=now - timedelta(seconds=ended_s_ago)
        )
        submitter = FakeSubmitter()
        cancels = Cancels(store, lambda _line: None)
        presubmit = PreSubmission(store, submitter, cancels, lambda _line: None)  # type: ignore[arg-type]
        assert presubmit.next_attempt(rt, now.timestamp()) == "submitted"
        assert submitter.submitted == [expected]

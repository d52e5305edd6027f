"""A queued successor whose scancel fails when its job stops (daemon/successor.py `drop`) is
cancelled again on the same bounded backoff as a stop's cancel (core/jobs/cancel_retry.py),
until a scancel goes through; meanwhile the monitor no longer holds it back (should Slurm start
it, its stop file ends it at once). On a real SQLite store and the real SlurmExecutor, its
scancel and scontrol faked at the subprocess boundary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from oellm_autoexp.adapters.executors import slurm
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.successor import Successors, stop_file
from tests.unit.daemon.test_cancels import STDERR, FakeScancel

T0 = datetime(2026, 11, 25, 18, 0, tzinfo=UTC)


@pytest.fixture
def scancel(monkeypatch: pytest.MonkeyPatch) -> FakeScancel:
    fake = FakeScancel()
    monkeypatch.setattr(slurm.subprocess, "Popen", fake.popen)
    return fake


def test_a_successor_whose_scancel_fails_is_cancelled_again_until_it_goes_through(
    tmp_path: Path, scancel: FakeScancel
) -> None:
    """The job stops; its successor's scancel fails: said with the backoff, the stop file already
    written; no try before it is due; the same error again is said as a repeat; the monitor
    stops holding it; once scancel works the successor is recorded cancelled (the dropped event)
    and nothing is tried again."""
    with SQLiteStore(tmp_path / "state") as store:
        session = store.create_session("s", config_path="x.yaml", config={}, now=T0)
        job = store.add_job(session.id, job_key="main", name="train", plan={}, now=T0)
        for no, slurm_id in ((1, "101"), (2, "102")):
            attempt_id = store.record_intent(job.id, no, f"autoexp-1-1-{no}-0000000{no}", now=T0)
            store.confirm_submitted(attempt_id, slurm_id, now=T0)
        policy = RestartPolicy.model_validate({"queued_successor": True, "queued_successor_hold_s": 300})
        rt = SimpleNamespace(job=job, policy=policy, executor=SlurmExecutor())
        said: list[str] = []
        heard: list[str] = []
        successors = Successors(store, said.append, 0.0)
        successors.on_cancel = heard.append

        successors.drop(rt, "oom: stop", 100.0, after_attempt_no=1)  # type: ignore[arg-type]
        assert stop_file(store.path.parent, job.id).read_text() == "oom: stop\n"
        assert scancel.calls == [["scancel", "102"]] and successors.cancelling()
        assert said[-1] == (
            f"warning: train: cancelling queued successor job 102 failed: scancel failed (1): {STDERR}; "
            "cancelling again in 5 s"
        )
        successors.retry_due(104.9)
        assert len(scancel.calls) == 1  # not due yet
        successors.retry_due(105.0)
        assert scancel.calls[-1] == ["scancel", "102"] and len(scancel.calls) == 2
        assert "failed again (2 times)" in said[-1] and said[-1].endswith("cancelling again in 10 s")
        successors.keep_held([rt], 110.0)  # type: ignore[list-item]
        assert not any(call[0] == "scontrol" and "102" in " ".join(call) for call in scancel.calls)
        assert store.attempts_for_job(job.id)[1].ended_at is None and heard == []

        scancel.failing = False
        successors.retry_due(115.0)
        second = store.attempts_for_job(job.id)[1]
        assert second.state is JobState.CANCELLED and second.ended_at is not None
        assert [d.reason for d in store.decisions_for_job(job.id)] == [
            "queued successor attempt 2 (job 102) cancelled: oom: stop"
        ]
        assert heard == ["102"] and not successors.cancelling()
        calls = len(scancel.calls)
        successors.retry_due(1000.0)
        assert len(scancel.calls) == calls

"""A queued successor whose scancel fails when its job stops (daemon/successor.py `drop`) is
cancelled again through daemon/cancels.py, on the same bounded backoff as a stop's cancel
(core/jobs/cancel_retry.py), until a scancel goes through; meanwhile the monitor no longer holds
it back (should Slurm start it, its stop file ends it at once). The failing cancel is an event in
the store: a NEW monitor on the session cancels it again. On a real SQLite store and the real
SlurmExecutor, its scancel and scontrol faked at the subprocess boundary."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from oellm_autoexp.adapters.executors import slurm
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.monitor import Monitor
from oellm_autoexp.daemon.session import create_session, job_runtime
from oellm_autoexp.daemon.successor import Successors, stop_file
from oellm_autoexp.plan.plan import build_plans
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
        failing = f"cancel requested, cancel failing: {STDERR}"
        assert (
            said[-1]
            == f"WARNING: train attempt 2 (job 102): {failing}; it may still run; cancelling again in 5 s"
        )
        successors.cancels.retry_due(104.9)
        assert len(scancel.calls) == 1  # not due yet
        successors.cancels.retry_due(105.0)
        assert scancel.calls[-1] == ["scancel", "102"] and len(scancel.calls) == 2
        assert "scancel failed again (2 times)" in said[-1] and said[-1].endswith("cancelling again in 10 s")
        successors.keep_held([rt], 110.0)  # type: ignore[list-item]
        assert not any(call[0] == "scontrol" and "102" in " ".join(call) for call in scancel.calls)
        assert store.attempts_for_job(job.id)[1].ended_at is None and heard == []

        scancel.failing = False
        successors.cancels.retry_due(115.0)
        second = store.attempts_for_job(job.id)[1]
        assert second.state is JobState.CANCELLED and second.ended_at is not None
        assert [d.reason for d in store.decisions_for_job(job.id)] == [
            failing,  # persisted: a monitor that resumes cancels it again (test below)
            "job 102 cancelled after 2 failed scancels",
            "queued successor attempt 2 (job 102) cancelled: oom: stop",
        ]
        assert heard == ["102"] and not successors.cancelling()
        calls = len(scancel.calls)
        successors.cancels.retry_due(1000.0)
        assert len(scancel.calls) == calls


def test_a_successor_cancel_left_failing_by_one_monitor_is_cancelled_by_the_next(
    tmp_path: Path, scancel: FakeScancel
) -> None:
    """Monitor 1 stops the job (attempt 1 failed) and cannot cancel the successor queued behind
    it; it goes away (its memory with it). The failing cancel is an event in the store, so a NEW
    Monitor on the session loads the stopped job, cancels the successor (scancel works now),
    records it cancelled and ends the session. Before, the retry lived in monitor 1's memory
    only: the next monitor never loaded the job and left the successor in Slurm's queue."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "succ", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": ["true"]},
        "restart": {"queued_successor": True},
        "monitoring": {"poll_interval_s": 0.2, "log_poll_interval_s": 0.2},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    plans = build_plans(load_jobs(path, []), str(tmp_path))
    slurm_executor = SlurmExecutor()  # every runtime's executor: scancel faked at the subprocess
    with SQLiteStore(tmp_path / "state") as store:
        session, _ = create_session(store, plans, name="succ", config_path=str(path), now=T0)
        (job,) = store.jobs_for_session(session.id)
        ids = []
        for no, slurm_id in ((1, "101"), (2, "102")):
            ids.append(store.record_intent(job.id, no, f"autoexp-1-1-{no}-0000000{no}", now=T0))
            store.confirm_submitted(ids[-1], slurm_id, now=T0)
        store.update_attempt_state(ids[0], JobState.FAILED, exit_code=1, ended_at=T0)
        stop = "Permanent failure detected (excluded error_type: oom)"
        store.record_decision(job.id, attempt_id=ids[0], action="stop", reason=stop, now=T0)
        store.set_job_status(job.id, "stopped", stop)
        rt = job_runtime(job, tmp_path / "state", lambda _name, _state: slurm_executor)
        first = Successors(store, lambda _line: None, 0.0)  # monitor 1's
        first.drop(rt, stop, 100.0, after_attempt_no=1)
        assert first.cancelling() and scancel.calls == [["scancel", "102"]]
        del first  # monitor 1 is gone

        scancel.failing = False
        said: list[str] = []
        monitor = Monitor(store, [session.id], state_dir=tmp_path / "state", say=said.append,
                          executor_factory=lambda _name, _state: slurm_executor)  # fmt: skip
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(monitor.run(threading.Event())))
        thread.start()
        thread.join(30.0)
        assert result == [1], said  # ended: the job was stopped
        assert ["scancel", "102"] in scancel.calls[1:], scancel.calls
        second = store.attempts_for_job(job.id)[1]
        assert second.state is JobState.CANCELLED and second.ended_at is not None
        assert [d.reason for d in store.decisions_for_job(job.id)][1:] == [
            f"cancel requested, cancel failing: {STDERR}",
            "job 102 cancelled (an earlier monitor's scancel had failed)",
            f"queued successor attempt 2 (job 102) cancelled: {stop}",
        ]
        assert store.get_session(session.id).status == "completed"

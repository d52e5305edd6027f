"""A stop whose scancel fails, across monitors (daemon/cancels.py, daemon/resume.py): the real
Monitor over an injected executor (no Slurm), real files, SQLite and tailer.

A monitor stopped while a stopped job's cancel still fails leaves the session active (the job
may still run), and the next monitor on the session cancels it again, sees it end, and only
then ends the session."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import yaml

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.daemon.monitor import Monitor
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.plan.plan import build_plans, log_path_for
from tests.integration.test_monitor_injected import DEADLINE_S, OOM, ScriptedExecutor, _wait

SCANCEL_ERROR = "scancel: error: Kill job error on job id: Unexpected message received"


class BrokenCancel(ScriptedExecutor):
    """Its scancel fails as Slurm's does (run_slurm_command's message) while `broken` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True
        self.tries = 0

    def cancel(self, job_id: str) -> None:
        self.tries += 1
        if self.broken:
            raise ExecutorError(f"scancel failed (1): {SCANCEL_ERROR}")
        super().cancel(job_id)


def _start(store: SQLiteStore, session_id: int, tmp_path: Path, executor: ScriptedExecutor):  # type: ignore[no-untyped-def]
    stop, result = threading.Event(), []
    monitor = Monitor(store, [session_id], state_dir=tmp_path / "state", say=lambda _l: None,
                      executor_factory=lambda _name, _state: executor)  # fmt: skip
    thread = threading.Thread(target=lambda: result.append(monitor.run(stop)))
    thread.start()
    return stop, thread, result


def test_a_stop_left_failing_by_one_monitor_is_cancelled_by_the_next(tmp_path: Path) -> None:
    """Monitor 1 stops the job on an OOM line but cannot cancel it; asked to stop, it exits 0 and
    leaves the session active. Monitor 2 cancels it on resume (scancel works again), sees it end,
    and ends the session (exit 1: the job was stopped), with an event for the cancel."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "inj", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": ["true"]},
        "monitoring": {"poll_interval_s": 0.2, "log_poll_interval_s": 0.2, "fatal_settle_s": 0.5},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    plans = build_plans(load_jobs(path, []), str(tmp_path))
    executor = BrokenCancel()
    with SQLiteStore(tmp_path / "state") as store:
        session, _ = create_session(store, plans, name="inj", config_path=str(path), now=datetime.now(UTC))
        (job,) = store.jobs_for_session(session.id)
        stop, thread, result = _start(store, session.id, tmp_path, executor)
        try:
            job_id = _wait(lambda: executor.submitted and executor.submitted[0], "the first submission")
            log = Path(log_path_for(plans[0], job_id))
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"{OOM}\n")
            failing = f"stop requested, cancel failing: {SCANCEL_ERROR}"
            _wait(lambda: failing in [d.reason for d in store.decisions_for_job(job.id)], "the failing event")
        finally:
            stop.set()
            thread.join(DEADLINE_S)
        assert result == [0] and executor.cancelled == []
        assert store.get_session(session.id).status == "active"  # the job may still run
        assert store.get_job(job.id).status == "stopped"

        executor.broken = False
        stop, thread, result = _start(store, session.id, tmp_path, executor)
        thread.join(DEADLINE_S)
        stop.set()
        assert result == [1] and executor.cancelled == [job_id] and executor.submitted == [job_id]
        (attempt,) = store.attempts_for_job(job.id)
        assert attempt.state.value == "CANCELLED" and attempt.ended_at is not None
        reasons = [(d.action, d.reason) for d in store.decisions_for_job(job.id)]
        assert reasons == [
            ("stop", "Permanent failure detected (excluded error_type: oom)"),
            ("none", failing),
            ("none", f"job {job_id} cancelled (an earlier monitor's scancel had failed)"),
        ], reasons
        assert store.get_session(session.id).status == "completed"

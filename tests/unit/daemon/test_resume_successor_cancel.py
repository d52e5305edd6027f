"""A resuming monitor retries a queued successor's cancel that an earlier monitor left failing
(daemon/resume.py `cancel_left_failing`), for an ACTIVE job too: a restart excluded the node the
successor already ran on, so it had to go, and its scancel failed. The next monitor cancels it
again instead of watching it, then submits the restart's attempt with the node excluded; it
cancels nothing else. The real Monitor, a real SQLite store and files; the executor is a small
stand-in for Slurm (its scancel fails while `broken`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import yaml

from oellm_autoexp.adapters.executors.base import ExecutorError, TaggedJob
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.monitor import Monitor
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.plan.plan import build_plans, log_path_for

DEADLINE_S = 30.0
SCANCEL_ERROR = "scancel: error: Kill job error on job id: Unexpected message received"
NCCL = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"
)
XID = "node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
T = TypeVar("T")


class FakeSlurm:
    """Jobs keep the state and nodes the test gives them; scancel fails while `broken`."""

    name = "slurm"  # queued successors are a Slurm feature
    settle_s = 0.0

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[JobState, tuple[str, ...], int | None]] = {}
        self.args: dict[str, list[str]] = {}
        self.cancels: list[str] = []  # every scancel tried, failed or not
        self.released: list[str] = []  # queued successors released (scontrol update StartTime=now)
        self.broken = True

    def submit(
        self, script: Path, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> str:
        job_id = str(101 + len(self.jobs))
        self.jobs[job_id] = (JobState.PENDING, (), None)
        self.args[job_id] = list(extra_args)
        return job_id

    def set(
        self, job_id: str, state: JobState, nodes: tuple[str, ...] = ("node1",), code: int | None = None
    ) -> None:
        self.jobs[job_id] = (state, nodes, code)

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        return {j: JobRecord(j, *self.jobs[j][:1], "squeue", exit_code=self.jobs[j][2], nodes=self.jobs[j][1])
                for j in job_ids if j in self.jobs}  # fmt: skip

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        return self.query(job_ids), []

    def find_by_tag(self, tag: str) -> str | None:
        return None

    def cancel(self, job_id: str) -> None:
        self.cancels.append(job_id)
        if self.broken:
            raise ExecutorError(f"scancel failed (1): {SCANCEL_ERROR}")
        self.set(job_id, JobState.CANCELLED, self.jobs[job_id][1])

    def set_start_time(self, job_ids: Sequence[str], from_now_s: int) -> None:
        if from_now_s <= 0:
            self.released.extend(job_ids)

    def update_excluded_nodes(self, job_id: str, nodes: str) -> None:
        self.args[job_id].append(f"--exclude={nodes}")


def _wait(condition: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + DEADLINE_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def _run(
    store: SQLiteStore, session_id: int, tmp_path: Path, slurm: FakeSlurm
) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    monitor = Monitor(store, [session_id], state_dir=tmp_path / "state", say=lambda _line: None,
                      executor_factory=lambda _name, _state: slurm)  # fmt: skip
    thread = threading.Thread(target=monitor.run, args=(stop,))
    thread.start()
    return stop, thread


@contextmanager
def _monitor(store: SQLiteStore, session_id: int, tmp_path: Path, slurm: FakeSlurm) -> Iterator[None]:
    """A real Monitor on the session while the block runs; stopped (as by Ctrl-C) at its end."""
    stop, thread = _run(store, session_id, tmp_path, slurm)
    try:
        yield
    finally:
        stop.set()
        thread.join(DEADLINE_S)


def _session(store: SQLiteStore, tmp_path: Path) -> tuple[int, int, Path]:
    """The experiment's session (a queued successor behind each attempt, never held): its id, its
    one job's id, and where job 101's log is."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "succ", "output_dir": str(tmp_path / "out")},
        "executor": "slurm",
        "backend": {"command": ["true"]},
        "restart": {"queued_successor": True, "queued_successor_hold_s": 0},
        "monitoring": {"poll_interval_s": 0.1, "log_poll_interval_s": 0.1, "fatal_settle_s": 0.2},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    plans = build_plans(load_jobs(path, []), str(tmp_path))
    session, _ = create_session(store, plans, name="succ", config_path=str(path), now=datetime.now(UTC))
    (job,) = store.jobs_for_session(session.id)
    log = Path(log_path_for(plans[0], "101"))
    log.parent.mkdir(parents=True, exist_ok=True)
    return session.id, job.id, log


def _reasons(store: SQLiteStore, job_id: int) -> list[str]:
    return [d.reason for d in store.decisions_for_job(job_id)]


def test_a_resuming_monitor_cancels_a_successor_left_running_on_an_excluded_node(tmp_path: Path) -> None:
    """Monitor 1: attempt 1 (job 101, node1) fails on an Xid naming node1; the restart excludes node1
    and finds the queued successor (job 102) already running there: it must go, and its scancel
    fails (an event); monitor 1 submits nothing beside it meanwhile. Monitor 1 is stopped. Monitor 2
    resumes the session: it does not watch job 102 but cancels it (scancel works now), records it
    cancelled, and submits the restart's attempt with --exclude=node1; it cancels no other job (not
    that attempt, nor the successor queued behind it). Before, monitor 1 submitted the restart at
    once, beside job 102, and monitor 2 watched job 102."""
    slurm = FakeSlurm()
    with SQLiteStore(tmp_path / "state") as store:
        session_id, job_id, log = _session(store, tmp_path)
        with _monitor(store, session_id, tmp_path, slurm):
            _wait(lambda: "102" in slurm.jobs, "attempt 2 queued behind attempt 1")
            assert slurm.args["102"][0] == "--dependency=afternotok:101"
            slurm.set("101", JobState.RUNNING)
            log.write_text(f"{XID}\n")
            slurm.set("102", JobState.RUNNING)  # Slurm started it when attempt 1 failed
            slurm.set("101", JobState.FAILED, code=1)
            failing = f"cancel requested, cancel failing: {SCANCEL_ERROR}"
            _wait(lambda: failing in _reasons(store, job_id), "the failing event")
        assert slurm.cancels == ["102"] and store.attempts_for_job(job_id)[1].ended_at is None
        assert sorted(slurm.jobs) == ["101", "102"]  # no restart beside a successor that may still run
        restart = next(d for d in store.decisions_for_job(job_id) if d.action == "restart")
        assert restart.attempt_id == store.attempts_for_job(job_id)[0].id

        slurm.broken = False
        with _monitor(store, session_id, tmp_path, slurm):
            third = _wait(lambda: next((a for a in store.attempts_for_job(job_id)
                                        if a.attempt_no == 3 and a.executor_job_id), None),
                          "the restart's attempt, submitted")  # fmt: skip
            second = store.attempts_for_job(job_id)[1]
            assert second.state is JobState.CANCELLED and second.ended_at is not None
            assert slurm.jobs["102"][0] is JobState.CANCELLED
            assert "--exclude=node1" in slurm.args[third.executor_job_id or ""]
            reasons = _reasons(store, job_id)
            cancelled = reasons.index("job 102 cancelled (an earlier monitor's scancel had failed)")
            assert reasons[cancelled + 1] == (
                "queued successor attempt 2 (job 102) cancelled: an earlier monitor's cancel of it had not gone through"
            )
        assert slurm.cancels == ["102", "102"]  # the one left failing, once more; nothing else


def test_a_resuming_monitor_cancels_again_the_attempt_a_restart_left_running_behind_its_successor(
    tmp_path: Path,
) -> None:
    """Monitor 1: attempt 1 (job 101) prints NCCL's error while it runs: a restart, whose scancel
    fails; the successor (job 102, queued behind it) waits. Monitor 1 is stopped. Monitor 2 must
    not just watch job 102 (the lowest attempt past the restart): it cancels job 101 again, then
    the restart adopts job 102 (released, no new sbatch for it). Before, job 101 was never
    cancelled again and ran on to its time limit."""
    slurm = FakeSlurm()
    with SQLiteStore(tmp_path / "state") as store:
        session_id, job_id, log = _session(store, tmp_path)
        with _monitor(store, session_id, tmp_path, slurm):
            _wait(lambda: "102" in slurm.jobs, "attempt 2 queued behind attempt 1")
            slurm.set("101", JobState.RUNNING)
            log.write_text(f"{NCCL}\n")
            failing = f"restart requested, cancel failing: {SCANCEL_ERROR}"
            _wait(lambda: failing in _reasons(store, job_id), "the failing event")
        assert slurm.cancels == ["101"] and sorted(slurm.jobs) == ["101", "102"] and slurm.released == []

        slurm.broken = False
        with _monitor(store, session_id, tmp_path, slurm):
            _wait(lambda: "102" in slurm.released, "attempt 2 adopted and released")
            assert slurm.cancels == ["101", "101"]  # job 101 once more; never the successor
            second = store.attempts_for_job(job_id)[1]
            assert slurm.jobs["101"][0] is JobState.CANCELLED and second.executor_job_id == "102"
            assert "job 101 cancelled (an earlier monitor's scancel had failed)" in _reasons(store, job_id)

"""The real Monitor over an injected executor: no Slurm, no processes; real files, SQLite and tailer.

The executor is the boundary the monitor acts through, so a scripted one shows exactly what the
monitor asked of it (submissions, cancels) for log lines the test writes itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.strays import TaggedJob
from oellm_autoexp.daemon.monitor import Monitor
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.plan.plan import JobPlan, build_plans, log_path_for

DEADLINE_S = 30.0
OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB."
TEARDOWN = "W1123 08:38:16.716000 655 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 782 closing signal SIGTERM"


class ScriptedExecutor:
    """Jobs that run until cancelled; every call the monitor makes is kept."""

    name = "scripted"
    settle_s = 0.0  # submissions happen in-process: none can be pending after a crash

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.cancelled: list[str] = []

    def submit(
        self, script: Path, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> str:
        self.submitted.append(f"scripted-{len(self.submitted) + 1}")
        return self.submitted[-1]

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        state = {True: JobState.CANCELLED, False: JobState.RUNNING}
        return {j: JobRecord(j, state[j in self.cancelled], "scripted", nodes=("gpu07",)) for j in job_ids}

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        return self.query(job_ids), []  # no job carries a tag the store did not record

    def find_by_tag(self, tag: str) -> str | None:
        return None

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def _wait(condition, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


@dataclass
class Running:
    """A real Monitor over an injected executor, running in a thread (`monitor_running`)."""

    plans: list[JobPlan]
    store: SQLiteStore
    session_id: int
    thread: threading.Thread
    result: list[int]  # the monitor's exit code, once it returned


@contextmanager
def monitor_running(tmp_path: Path, experiment: dict, executor: ScriptedExecutor) -> Iterator[Running]:
    """Plan `experiment`, create its session and run the Monitor over `executor` until the block ends."""
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    plans = build_plans(load_jobs(path, []), str(tmp_path))
    stop = threading.Event()
    result: list[int] = []
    with SQLiteStore(tmp_path / "state") as store:
        session, _ = create_session(store, plans, name="inj", config_path=str(path), now=datetime.now(UTC))
        monitor = Monitor(store, [session.id], state_dir=tmp_path / "state", say=lambda _l: None,
                          executor_factory=lambda _name, _state: executor)  # fmt: skip
        thread = threading.Thread(target=lambda: result.append(monitor.run(stop)))
        thread.start()
        try:
            yield Running(plans, store, session.id, thread, result)
        finally:
            stop.set()
            thread.join(DEADLINE_S)


def test_a_fatal_line_in_a_running_job_is_judged_and_carried_out(tmp_path: Path) -> None:
    """With the executor injected, the monitor submits through it, reads the job's log, and on a rank's
    OOM (the job still RUNNING, as blocked NCCL peers keep it) cancels it through the executor and
    records one stop, after the settle window, within seconds."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "inj", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": ["true"]},
        "monitoring": {"poll_interval_s": 0.2, "log_poll_interval_s": 0.2, "fatal_settle_s": 1},
    }
    executor = ScriptedExecutor()
    with monitor_running(tmp_path, experiment, executor) as run:
        job_id = _wait(lambda: executor.submitted and executor.submitted[0], "the first submission")
        log = Path(log_path_for(run.plans[0], job_id))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(" iteration        1/     100 | lm loss: 1.0 |\n")
        time.sleep(0.5)
        with log.open("a") as handle:
            handle.write(f"{OOM}\n{TEARDOWN}\n")
        written = time.monotonic()
        _wait(lambda: executor.cancelled, "the cancel")
        took = time.monotonic() - written
        run.thread.join(DEADLINE_S)
        (job,) = run.store.jobs_for_session(run.session_id)
        decisions = run.store.decisions_for_job(job.id)
    result = run.result
    assert result == [1] and executor.cancelled == ["scripted-1"] and executor.submitted == ["scripted-1"]
    assert 1.0 <= took < 10.0
    assert [(d.action, d.reason) for d in decisions] == [
        ("stop", "Permanent failure detected (excluded error_type: oom)")
    ]
    assert job.status == "stopped" and decisions[0].evidence["trigger"] == "fatal_line"


class EndingExecutor(ScriptedExecutor):
    """Its one job fails on its own at `ends_at` (monotonic); every query is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.ends_at = float("inf")
        self.queried: list[tuple[str, ...]] = []  # query(): one attempt, asked about alone
        self.full_polls = 0  # query_tagged(): every live attempt and the stray net

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        self.queried.append(tuple(job_ids))
        return self._records(job_ids)

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        self.full_polls += 1
        return self._records(job_ids), []

    def _records(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        ended = time.monotonic() >= self.ends_at
        state = JobState.FAILED if ended else JobState.RUNNING
        return {j: JobRecord(j, state, "scripted", exit_code=1 if ended else None) for j in job_ids}


def test_after_a_fatal_line_the_job_alone_is_followed_up(tmp_path: Path) -> None:
    """A fatal line brings follow-up looks at THAT job (`query([id])`, i.e. `squeue --jobs`), not
    full polls of every job: with 1,000 jobs a full poll parses and observes all of them. Each job's
    own end a second later is noticed by a follow-up, long before the next regular poll (60 s)
    or the settle window (5 s), and judged at its end. Three jobs at once: one's end is judged
    while the others' follow-ups wait on the loop's queue (which once stopped the loop)."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "inj", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "slurm": {"env": {"TRIAL": "0"}},
        "backend": {"command": ["true"]},
        "monitoring": {"poll_interval_s": 60, "log_poll_interval_s": 0.2, "fatal_settle_s": 5},
        "sweep": {"list": [{"slurm.env.TRIAL": str(i)} for i in range(3)]},
    }
    executor = EndingExecutor()
    with monitor_running(tmp_path, experiment, executor) as run:
        _wait(lambda: len(executor.submitted) == len(run.plans), "the first submissions")
        job_ids = dict(zip(sorted(p.name for p in run.plans), executor.submitted, strict=True))
        logs = [Path(log_path_for(p, job_ids[p.name])) for p in run.plans]
        for log in logs:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(" iteration        1/     100 | lm loss: 1.0 |\n")
        time.sleep(0.5)
        polls_before = executor.full_polls
        for log in logs:
            with log.open("a") as handle:
                handle.write(f"{OOM}\n")
        written = time.monotonic()
        executor.ends_at = written + 1.0
        run.thread.join(DEADLINE_S)
        took = time.monotonic() - written
        jobs = run.store.jobs_for_session(run.session_id)
        decisions = [d for job in jobs for d in run.store.decisions_for_job(job.id)]
        attempts = [a for job in jobs for a in run.store.attempts_for_job(job.id)]
    result, plans = run.result, run.plans
    assert result == [1] and executor.cancelled == []
    assert took < 4.0, took
    assert executor.full_polls == polls_before  # no full poll after the fatal lines
    assert executor.queried and all(len(ids) == 1 for ids in executor.queried)
    assert {ids[0] for ids in executor.queried} == set(executor.submitted)
    assert [(d.evidence["trigger"], d.reason) for d in decisions] == [
        ("end", "Permanent failure detected (excluded error_type: oom)")
    ] * len(plans)
    assert all(a.state is JobState.FAILED for a in attempts) and len(attempts) == len(plans)


PREEMPTED = "slurmstepd: error: *** JOB 7 ON gpu07 CANCELLED AT 2026-11-25T17:04:04 DUE TO PREEMPTION ***"


class RequeuingExecutor(ScriptedExecutor):
    """Its job is in the state the test sets (Slurm requeues it: RUNNING, PENDING, RUNNING); polls counted."""

    def __init__(self) -> None:
        super().__init__()
        self.state = JobState.RUNNING
        self.polls = 0

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        self.polls += 1
        state = {True: JobState.CANCELLED, False: self.state}
        return {j: JobRecord(j, state[j in self.cancelled], "scripted", nodes=("gpu07",)) for j in job_ids}


def test_a_requeued_run_is_judged_on_its_own_log_and_clock(tmp_path: Path) -> None:
    """Slurm preempts and requeues a job (slurmstepd's `DUE TO PREEMPTION` line, then PENDING longer
    than the hang limits, then RUNNING again under the same id, its log truncated). The new run is
    a run of its own: the time it waited in the queue is no hang, and when it then hangs for real the
    hang is acted on. Before, the last run's preemption line stayed the cause of every verdict (a
    cause the scheduler ends by itself: "wait for the end"), so a hung requeued run was never cancelled,
    and the queued time was reported as a hang at every poll once it ran again."""
    hang = {"no_output_timeout_s": 2, "progress_floor_s": 2, "startup_timeout_s": 30}
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "inj", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": ["true"]},
        "monitoring": {"poll_interval_s": 0.2, "log_poll_interval_s": 0.1, "hang": hang},
    }
    executor = RequeuingExecutor()
    with monitor_running(tmp_path, experiment, executor) as run:
        job_id = _wait(lambda: executor.submitted and executor.submitted[0], "the first submission")
        (job,) = run.store.jobs_for_session(run.session_id)
        log = Path(log_path_for(run.plans[0], job_id))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(
            "".join(f" iteration {i:8d}/     100 | lm loss: 1.0 |\n" for i in (1, 2, 3)) + PREEMPTED + "\n"
        )
        _wait(lambda: any(s.error_type == "preempted" for a in run.store.attempts_for_job(job.id)
                          for s in run.store.signals_for_attempt(a.id)), "the preemption line")  # fmt: skip
        executor.state = JobState.PENDING
        queued = time.monotonic()
        _wait(lambda: run.store.attempts_for_job(job.id)[0].state is JobState.PENDING, "the requeue")
        # Queued past both hang limits, as seen by the monitor's own polls.
        polls = executor.polls
        _wait(lambda: executor.polls > polls + 10 and time.monotonic() - queued > 3.0, "polls while queued")
        log.write_text(" iteration        2/     100 | lm loss: 1.0 |\n")  # resumed from its checkpoint
        executor.state = JobState.RUNNING
        rerun = time.monotonic()
        _wait(lambda: executor.cancelled, "the hang's cancel")
        took = time.monotonic() - rerun
        decisions = run.store.decisions_for_job(job.id)
    assert executor.cancelled == ["scripted-1"]
    assert [(d.action, d.reason) for d in decisions][:1] == [
        ("restart", "Transient failure detected (error_type=hang)")
    ], decisions
    assert decisions[0].evidence["trigger"] == "hang"
    assert took >= 2.0, took  # the new run's own silence, not the time it was queued

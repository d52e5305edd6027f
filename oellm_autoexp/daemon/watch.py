"""What the monitor keeps about each live attempt, and the glue from stored
records to the judge's inputs (core/decide/judge.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oellm_autoexp.adapters.executors.base import Executor
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, DecisionInfo, JobInfo
from oellm_autoexp.config.monitoring import MonitorSettings
from oellm_autoexp.core.decide.judge import PastDecision, history_from
from oellm_autoexp.core.decide.policy import RestartHistory, RestartPolicy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.replay.read_times import ReadMark
from oellm_autoexp.core.watch.attempt_view import AttemptView, EarlySettings
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.progress import StartupLimit
from oellm_autoexp.core.watch.schedule import PauseSchedule, megatron_schedule
from oellm_autoexp.plan.plan import JobPlan


@dataclass(frozen=True)
class JobRuntime:
    """Everything fixed about one job for the monitor: how to (re)submit and judge it."""

    job: JobInfo
    plan: JobPlan
    policy: RestartPolicy
    settings: MonitorSettings
    executor: Executor
    patterns: Any  # PatternSet
    in_job_restarts: bool = False  # the backend's launcher restarts workers in place

    def early_settings(self) -> EarlySettings:
        return early_settings(self.settings, self.in_job_restarts)

    def new_view(self, log_path: str | None, startup: StartupLimit | None = None) -> AttemptView:
        """An empty view of one run of an attempt's log (`startup`: its learned start-up limit)."""
        return AttemptView(
            self.patterns,
            source=log_path,
            early=self.early_settings(),
            startup=startup,
            schedule=pause_schedule(self.plan.config.backend),
        )


def pause_schedule(backend: object) -> PauseSchedule | None:
    """When the job's loop pauses on purpose, from the backend it was launched with (Megatron's
    arguments: core/watch/schedule.py); None for a backend whose schedule we cannot read."""
    if getattr(backend, "kind", None) != "megatron_torchrun":
        return None
    return megatron_schedule(getattr(backend, "megatron", None) or {})


def early_settings(settings: MonitorSettings, backend_in_job_restarts: bool = False) -> EarlySettings:
    """How a running attempt's fatal lines are acted on, from the monitoring settings."""
    in_job = settings.in_job_restarts
    return EarlySettings(
        settle_s=settings.fatal_settle_s,
        in_job_restarts=backend_in_job_restarts if in_job is None else in_job,
        recovery_window_s=settings.recovery_window_s,
        recovery_window_startup_s=settings.recovery_window_startup_s,
    )


@dataclass
class LiveAttempt:
    """One submitted attempt the monitor is watching."""

    runtime: JobRuntime
    attempt: AttemptInfo
    view: AttemptView
    log_path: str | None
    state: JobState = JobState.UNKNOWN
    unknown_since_s: float | None = None  # first poll at which neither squeue nor sacct knew it
    cancelled_by_monitor: bool = False  # our own scancel: its CANCELLED end is not a new outcome
    decided_early: bool = False  # a decision was already taken while it ran
    waiting_on_fatal: bool = False  # a settled fatal line was judged "wait for the end"
    signals_recorded: int = 0  # how many of the classifier's signals are in the store
    nodes: tuple[str, ...] = field(default_factory=tuple)
    last_read: ReadMark | None = None  # the timing record's newest row (Monitor._record_read_time)
    # Rows not saved yet, or grown since saved, oldest first: a poll saves them all at once.
    unsaved_reads: list[ReadMark] = field(default_factory=list)
    read_inode: int = 0  # the log's inode at the newest read: its consumed offset belongs to it
    requeued: bool = False  # Slurm queued it again; its log not restarted since (a new run's lines follow)
    startup_noted: bool = (
        False  # its first iteration's time is in the store, or will never be (daemon/startup.py)
    )

    @property
    def executor_id(self) -> str:
        return self.attempt.executor_job_id or ""

    def start_new_run(self, *, requeued: bool) -> None:
        """Slurm runs the job again under its id: what is read from now on is a new run.

        The last run's view must not judge it: its cause (slurmstepd's `DUE TO PREEMPTION`, a
        cause the scheduler ends by itself, made every hang of the new run "wait for the end")
        and its progress clock (the time spent queued counted as a hang once it ran again).
        Its signals are in the store already.
        """
        self.view = self.runtime.new_view(self.log_path, self.view.startup)  # the job's start-ups still hold
        self.signals_recorded = 0
        self.waiting_on_fatal = False
        self.requeued = requeued


def past_decisions(decisions: Sequence[DecisionInfo]) -> list[PastDecision]:
    """Stored decision rows as the judge reads them (typed evidence).

    A row whose evidence is not a mapping (a foreign or hand-made row) says nothing
    a budget could count, and is left out.
    """
    return [
        PastDecision(d.action, d.decided_at.timestamp(), Evidence.from_json(d.evidence))
        for d in decisions
        if isinstance(d.evidence, Mapping)
    ]


def job_history(
    decisions: Sequence[DecisionInfo],
    attempt_no: int,
    iteration: int | None,
    first_iteration: int | None = None,
) -> RestartHistory:
    """The restart history of a job, rebuilt from its recorded decisions."""
    past = past_decisions(decisions)
    return history_from(past, attempt_no, iteration, first_iteration)

"""What the monitor keeps about each live attempt, and the pure glue from
observations (JobRecord, classifier signals, progress verdicts, stored
decisions) to the policy's inputs (Outcome, RestartHistory)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oellm_autoexp.adapters.executor import Executor
from oellm_autoexp.adapters.store import AttemptInfo, DecisionInfo, JobInfo, JobStatus
from oellm_autoexp.core import progress
from oellm_autoexp.core.classify import Classifier
from oellm_autoexp.core.job_record import JobRecord
from oellm_autoexp.core.job_state import JobState
from oellm_autoexp.core.outcome import Outcome, OutcomeKind
from oellm_autoexp.core.plan import JobPlan
from oellm_autoexp.core.policy import Decision, DecisionAction, RestartHistory, RestartPolicy, RestartRecord
from oellm_autoexp.core.progress import HangVerdict, ProgressEvent, ProgressState
from oellm_autoexp.core.signals import Signal
from oellm_autoexp.daemon.settings import MonitorSettings

# Node names come from these named groups of hardware/NCCL patterns.
_NODE_GROUPS = ("node", "host", "hostname")
# Causes that blame the node they name (policy `exclude_failing_node`). A cancel, time limit,
# preemption or a task's exit line also names a node, but says nothing bad about it: excluding
# it would soon leave no node to run on.
NODE_FAULT_ERROR_TYPES = frozenset({"gpu_hardware", "node_failure", "nccl", "nccl_timeout"})


@dataclass(frozen=True)
class JobRuntime:
    """Everything fixed about one job for the monitor: how to (re)submit and judge it."""

    job: JobInfo
    plan: JobPlan
    policy: RestartPolicy
    settings: MonitorSettings
    executor: Executor
    patterns: Any  # PatternSet


@dataclass
class LiveAttempt:
    """One submitted attempt the monitor is watching."""

    runtime: JobRuntime
    attempt: AttemptInfo
    classifier: Classifier
    log_path: str | None
    tracker: ProgressState | None = None  # started when the job is first seen RUNNING
    state: JobState = JobState.UNKNOWN
    unknown_since_s: float | None = None  # first poll at which neither squeue nor sacct knew it
    cancelled_by_monitor: bool = False  # our own scancel: its CANCELLED end is not a new outcome
    decided_early: bool = False  # a decision was already taken while it ran
    signals_recorded: int = 0  # how many of classifier.signals are in the store
    nodes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def executor_id(self) -> str:
        return self.attempt.executor_job_id or ""


def progress_event(signal: Signal) -> ProgressEvent | None:
    """The progress tracker's event for a progress signal (checkpoint save start/end, iteration)."""
    name = signal.pattern
    if name.endswith("save_start") or name.endswith("saving"):
        return progress.CheckpointStart()
    if name.endswith("saved"):
        return progress.CheckpointDone()
    value = signal.groups.get("iteration") or signal.groups.get("step")
    if value is not None and value.isdigit() and "loaded" not in name:
        return progress.Iteration(int(value))
    return None


def node_of(signal: Signal | None) -> str | None:
    """The node a hardware/NCCL cause blames; None for other causes (see NODE_FAULT_ERROR_TYPES)."""
    if signal is None or signal.error_type not in NODE_FAULT_ERROR_TYPES:
        return None
    for key in _NODE_GROUPS:
        if signal.groups.get(key):
            return signal.groups[key]
    return None


def end_outcome(record: JobRecord, cause: Signal | None, *, user_cancelled: bool) -> Outcome:
    """The policy's view of an attempt that Slurm says has ended."""
    return Outcome(
        state=record.state,
        error_type=cause.error_type if cause else None,
        exit_code=record.exit_code,
        subsystem=cause.subsystem if cause else None,
        signal=cause.pattern if cause else None,
        node=node_of(cause),
        user_cancelled=user_cancelled,
    )


def running_outcome(cause: Signal) -> Outcome:
    """A fatal root signal seen while the job still runs (the policy may act early)."""
    return Outcome(
        state=JobState.RUNNING,
        error_type=cause.error_type,
        subsystem=cause.subsystem,
        signal=cause.pattern,
        node=node_of(cause),
        still_running=True,
    )


def hang_outcome(verdict: HangVerdict) -> Outcome:
    return Outcome(JobState.RUNNING, "hang", subsystem="progress", signal=verdict.kind.value,
                   still_running=True, hang=verdict.kind)  # fmt: skip


def lost_outcome() -> Outcome:
    """A job that stayed unknown to squeue and sacct past the deadline: gone without a trace."""
    return Outcome(JobState.FAILED, "lost", subsystem="slurm", signal="unknown_deadline")


def stopped_status(kind: OutcomeKind | str | None) -> JobStatus:
    """A job's status once a stop decision about an outcome of this kind is carried out."""
    if kind == OutcomeKind.SUCCESS.value:
        return JobStatus.COMPLETED
    if kind == OutcomeKind.USER_CANCELLED.value:
        return JobStatus.CANCELLED_BY_USER
    return JobStatus.STOPPED


def decision_evidence(outcome: Outcome, decision: Decision, iteration: int | None,
                      lines: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """What a decision record keeps besides its reason: enough to rebuild the restart history."""
    return {
        "rule": decision.rule,
        "kind": outcome.kind.value,
        "state": outcome.state.value,
        "error_type": outcome.error_type,
        "signal": outcome.signal,
        "node": outcome.node,
        "iteration": iteration,
        "exclude_nodes": list(decision.exclude_nodes),
        "delay_s": decision.delay_s,
        "lines": list(lines),
    }


def history_from(decisions: Sequence[DecisionInfo], attempt_no: int, iteration: int | None) -> RestartHistory:
    """The restart history of a job, rebuilt from its recorded restart decisions."""
    restarts = []
    excluded: list[str] = []
    for d in decisions:
        if d.action != DecisionAction.RESTART.value or not isinstance(d.evidence, dict):
            continue
        ev = d.evidence
        restarts.append(
            RestartRecord(
                time_s=d.decided_at.timestamp(),
                rule=ev.get("rule") or "",
                kind=OutcomeKind(ev.get("kind", OutcomeKind.CRASH.value)),
                error_type=ev.get("error_type"),
                iteration=ev.get("iteration"),
            )
        )
        excluded.extend(n for n in ev.get("exclude_nodes", []) if n not in excluded)
    return RestartHistory(attempt=attempt_no, restarts=tuple(restarts), iteration=iteration,
                          excluded_nodes=tuple(excluded))  # fmt: skip

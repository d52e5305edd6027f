"""What the store returns: frozen records, never ORM objects (nothing outside the store
holds a database session), and the converters from rows.

The records are NamedTuples, not frozen dataclasses: `autoexp status` is typed in loops and builds
a thousand of them, and on Python 3.11 each frozen dataclass costs about a millisecond to define
(six generated methods, each through `exec`) and several times a tuple's time to build. Read them
by field name only; nothing relies on them being tuples.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from oellm_autoexp.adapters.store.vocab import Intent
from oellm_autoexp.core.jobs.job_state import JobState

if TYPE_CHECKING:  # the converters only read attributes: the read-only commands import no ORM
    from oellm_autoexp.adapters.store.schema import AttemptRow, DecisionRow, JobRow, SessionRow, SignalRow

    # A type only: core's value type (core imports nothing of adapters); `status` never builds one
    # unless a job has exclusions (adapters/store/reader.py imports it then).
    from oellm_autoexp.core.decide.exclusions import Exclusion


class SessionInfo(NamedTuple):
    id: int
    name: str
    config_path: str
    config: dict[str, Any]
    created_at: datetime
    status: str  # SessionStatus value
    monitor_pid: int | None
    monitor_host: str | None
    monitor_heartbeat: datetime | None
    monitor_generation: int = 0  # the lock's fencing token (+1 per monitor that took it)
    monitor_interval_s: float | None = None  # the holder's heartbeat interval
    monitor_job: str | None = None  # the holder's Slurm job id, when the monitor runs as a Slurm job
    monitor_left_at: datetime | None = None  # when the last holder let go (unsupervised since)


class JobInfo(NamedTuple):
    id: int
    session_id: int
    job_key: str
    name: str
    plan: dict[str, Any]  # empty when read without it (`jobs_for_session(with_plan=False)`)
    status: str  # JobStatus value
    status_reason: str
    restart_count: int  # restarts granted so far (counted from the restart decisions)
    restart_counts: dict[str, int]  # the same by cause (error type, else outcome kind)
    created_at: datetime


class AttemptInfo(NamedTuple):
    id: int
    job_id: int
    attempt_no: int
    submit_tag: str
    intent: str  # Intent value
    executor_job_id: str | None
    nodes: tuple[str, ...]
    intended_at: datetime
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    state: JobState
    exit_code: int | None
    log_path: str | None
    last_iteration: int | None
    first_iteration_at: datetime | None = None  # when its first iteration line was read (v7)


class NewSignal(NamedTuple):
    """A classified log line to record (what core/classify/classifier.py produces, flattened)."""

    pattern: str
    error_type: str | None
    subsystem: str
    role: str
    line_no: int
    line: str
    observed_at: datetime
    evidence: tuple[str, ...] = ()


class SignalInfo(NamedTuple):
    id: int
    attempt_id: int
    pattern: str
    error_type: str | None
    subsystem: str
    role: str
    line_no: int
    line: str
    evidence: tuple[str, ...]
    observed_at: datetime


class DecisionInfo(NamedTuple):
    id: int
    job_id: int
    attempt_id: int | None
    action: str
    reason: str
    budget_before: int | None
    budget_after: int | None
    evidence: Any
    decided_at: datetime


class CandidateInfo(NamedTuple):
    """One candidate of a fanned-out attempt as stored (table `candidates`, adapters/store/candidates.py)."""

    id: int
    attempt_id: int
    rank: int
    strategy: str
    strategy_json: dict[str, Any]
    submit_tag: str
    intent: str
    executor_job_id: str | None
    estimate: str
    intended_at: datetime
    submitted_at: datetime | None
    closed_at: datetime | None
    outcome: str
    gpu_types: str | None

    @property
    def is_open(self) -> bool:
        return self.outcome == "queued" and self.intent != Intent.ABANDONED.value


class LogReadInfo(NamedTuple):
    """A stretch of an attempt's log and when the monitor read it (store_schema.LogReadRow)."""

    id: int
    attempt_id: int
    start_offset: int
    end_offset: int
    read_at: datetime


class LogReadWrite(NamedTuple):
    """One timing-record row to save: a new one (`row_id` None) or row `row_id` grown to `end_offset`."""

    attempt_id: int
    row_id: int | None
    start_offset: int
    end_offset: int
    read_at: datetime
    consumed: tuple[str, int] | None = None  # (path, inode): `end_offset` is also that log's consumed offset


def session_info(r: SessionRow) -> SessionInfo:
    return SessionInfo(
        r.id, r.name, r.config_path, r.config_json, r.created_at, r.status,
        r.monitor_pid, r.monitor_host, r.monitor_heartbeat, r.monitor_generation or 0, r.monitor_interval_s,
        r.monitor_job, r.monitor_left_at,
    )  # fmt: skip


def job_info(r: JobRow, restart_counts: dict[str, int], *, with_plan: bool = True) -> JobInfo:
    """A job row with its restart counts (counted from its restart decisions by the store)."""
    return JobInfo(
        r.id, r.session_id, r.job_key, r.name, r.plan_json if with_plan else {}, r.status, r.status_reason,
        sum(restart_counts.values()), dict(restart_counts), r.created_at,
    )  # fmt: skip


def attempt_info(r: AttemptRow) -> AttemptInfo:
    return AttemptInfo(
        r.id, r.job_id, r.attempt_no, r.submit_tag, r.intent, r.executor_job_id, tuple(r.nodes_json),
        r.intended_at, r.submitted_at, r.started_at, r.ended_at, JobState(r.state), r.exit_code,
        r.log_path, r.last_iteration, r.first_iteration_at,
    )  # fmt: skip


def signal_info(r: SignalRow) -> SignalInfo:
    return SignalInfo(
        r.id, r.attempt_id, r.pattern, r.error_type, r.subsystem, r.role, r.line_no, r.line,
        tuple(r.evidence_json), r.observed_at,
    )  # fmt: skip


def decision_info(r: DecisionRow) -> DecisionInfo:
    return DecisionInfo(
        r.id, r.job_id, r.attempt_id, r.action, r.reason, r.budget_before, r.budget_after,
        r.evidence_json, r.decided_at,
    )  # fmt: skip


class JudgeRecords(NamedTuple):
    """Everything stored that judging one attempt of a job rests on, read in ONE transaction
    (SQLiteStore.judge_records), so that no write between two reads can mix two states."""

    job: JobInfo | None  # None: the job was deleted under the monitor
    decisions: list[DecisionInfo]  # every decision about the job, oldest first: the budgets' history
    exclusions: list[Exclusion]  # every node exclusion of the job, expired ones too
    attempts: list[AttemptInfo]  # every attempt, for the spend when the policy has a budget

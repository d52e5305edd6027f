"""The pure glue in daemon/watch.py: observations in, the policy's inputs (Outcome, RestartHistory) out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.store import DecisionInfo, JobStatus
from oellm_autoexp.core import progress
from oellm_autoexp.core.job_record import JobRecord
from oellm_autoexp.core.job_state import JobState
from oellm_autoexp.core.outcome import Outcome, OutcomeKind
from oellm_autoexp.core.policy import Decision, DecisionAction, decide, load_policy
from oellm_autoexp.core.progress import HangKind, HangVerdict
from oellm_autoexp.core.signals import Signal
from oellm_autoexp.daemon.watch import (
    decision_evidence,
    end_outcome,
    hang_outcome,
    history_from,
    lost_outcome,
    node_of,
    progress_event,
    running_outcome,
    stopped_status,
)

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "restart"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def sig(pattern: str = "p", error_type: str | None = None, **groups: str) -> Signal:
    return Signal(pattern=pattern, error_type=error_type, subsystem="test", role="root", line="l", line_no=1,
                  groups=groups)  # fmt: skip


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        (sig("megatron_iteration", iteration="42"), progress.Iteration(42)),
        (sig("generic_step", iteration="7"), progress.Iteration(7)),
        (sig("train_step", step="3"), progress.Iteration(3)),
        (sig("megatron_checkpoint_save_start", iteration="40"), progress.CheckpointStart()),
        (sig("torch_saving"), progress.CheckpointStart()),
        (sig("megatron_checkpoint_saved", iteration="40"), progress.CheckpointDone()),
        (sig("megatron_checkpoint_loaded", iteration="40"), None),  # a resume is not progress
        (sig("megatron_iteration", iteration="x"), None),
        (sig("info_line"), None),
    ],
)
def test_progress_event(signal: Signal, expected: progress.ProgressEvent | None) -> None:
    """Iteration lines advance the counter, save lines open/close a checkpoint; a load does neither."""
    assert progress_event(signal) == expected


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        (None, None),
        (sig("xid", "gpu_hardware", node="gpu07"), "gpu07"),
        (sig("slurm_node_fail", "node_failure", node="node3"), "node3"),
        (sig("nccl_remote", "nccl", host="node4"), "node4"),
        (sig("nccl_watchdog", "nccl_timeout", hostname="node5"), "node5"),
        (sig("xid", "gpu_hardware"), None),  # no host named
        (sig("xid", "gpu_hardware", node=""), None),
        # A cancel, a time limit or a task's exit names its node without blaming it.
        (sig("slurm_cancelled", "cancelled", node="node1"), None),
        (sig("slurm_time_limit", "time_limit", node="node1"), None),
        (sig("srun_task_killed", "killed", node="node1"), None),
        (sig("srun_task_exit", None, node="node1"), None),
    ],
)
def test_node_of_blames_only_hardware_and_nccl_causes(signal: Signal | None, expected: str | None) -> None:
    """Only a hardware/NCCL/node-failure cause puts its node on the exclude list."""
    assert node_of(signal) == expected


def test_end_outcome_carries_slurm_state_and_the_root_cause() -> None:
    """An ended attempt's outcome is Slurm's state and exit code, refined by the classifier's cause."""
    record = JobRecord("12", JobState.FAILED, "sacct", exit_code=1)
    outcome = end_outcome(record, sig("nccl_error", "nccl", node="node2"), user_cancelled=False)
    assert (outcome.state, outcome.exit_code, outcome.error_type) == (JobState.FAILED, 1, "nccl")
    assert (outcome.signal, outcome.node, outcome.kind) == ("nccl_error", "node2", OutcomeKind.CRASH)
    assert outcome.cause == "nccl"


@pytest.mark.parametrize(
    ("state", "user_cancelled", "kind"),
    [
        (JobState.COMPLETED, False, OutcomeKind.SUCCESS),
        (JobState.FAILED, False, OutcomeKind.CRASH),
        (JobState.CANCELLED, False, OutcomeKind.CANCELLED),
        (JobState.CANCELLED, True, OutcomeKind.USER_CANCELLED),
        (JobState.TIMEOUT, False, OutcomeKind.TIMEOUT),
    ],
)
def test_end_outcome_without_a_cause(state: JobState, user_cancelled: bool, kind: OutcomeKind) -> None:
    """Without any classified line the outcome's kind comes from Slurm's state alone."""
    outcome = end_outcome(JobRecord("1", state, "sacct"), None, user_cancelled=user_cancelled)
    assert outcome.kind is kind
    assert (outcome.error_type, outcome.signal, outcome.node) == (None, None, None)


def test_running_hang_and_lost_outcomes() -> None:
    """A cause seen while running asks for early action; a hang verdict is a running hang; a job
    unknown past the deadline is a FAILED `lost` job."""
    running = running_outcome(sig("nccl_watchdog", "nccl_timeout"))
    assert (
        running.still_running and running.state is JobState.RUNNING and running.error_type == "nccl_timeout"
    )
    verdict = HangVerdict(HangKind.NO_OUTPUT, waited_s=11.0, limit_s=10.0, iteration=3, detail="quiet")
    hang = hang_outcome(verdict)
    assert hang.still_running and hang.hang is HangKind.NO_OUTPUT
    assert (hang.kind, hang.cause, hang.signal) == (OutcomeKind.HANG, "hang", "no_output")
    lost = lost_outcome()
    assert (lost.state, lost.error_type, lost.kind) == (JobState.FAILED, "lost", OutcomeKind.CRASH)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (OutcomeKind.SUCCESS, JobStatus.COMPLETED),
        ("success", JobStatus.COMPLETED),
        (OutcomeKind.USER_CANCELLED, JobStatus.CANCELLED_BY_USER),
        (OutcomeKind.OOM, JobStatus.STOPPED),
        (OutcomeKind.CRASH, JobStatus.STOPPED),
        (None, JobStatus.STOPPED),  # a decision record without a kind
    ],
)
def test_stopped_status(kind: OutcomeKind | str | None, status: JobStatus) -> None:
    """A stop after success completes the job, after `autoexp cancel` it is cancelled, else stopped."""
    assert stopped_status(kind) is status


def recorded(decisions: list[tuple[Outcome, Decision]]) -> list[DecisionInfo]:
    """Decisions as the store hands them back: evidence as written by decision_evidence."""
    return [
        DecisionInfo(id=i, job_id=1, attempt_id=i, action=d.action.value, reason=d.reason,
                     budget_before=d.budget_before, budget_after=d.budget_after,
                     evidence=decision_evidence(o, d, 10 * i, ["line"]), decided_at=T0 + timedelta(minutes=i))
        for i, (o, d) in enumerate(decisions, start=1)
    ]  # fmt: skip


def test_decision_evidence_keeps_what_history_needs() -> None:
    """The evidence names rule, kind, cause, node, iteration and excluded nodes, and is plain JSON data."""
    outcome = Outcome(JobState.FAILED, "nccl", node="node2")
    decision = Decision(DecisionAction.RESTART, "r", rule="transient", exclude_nodes=("node2",), delay_s=5.0)
    ev = decision_evidence(outcome, decision, 120, ("a", "b"))
    assert ev == {"rule": "transient", "kind": "crash", "state": "FAILED", "error_type": "nccl",
                  "signal": None, "node": "node2", "iteration": 120, "exclude_nodes": ["node2"],
                  "delay_s": 5.0, "lines": ["a", "b"]}  # fmt: skip


def test_history_from_counts_only_restart_decisions() -> None:
    """The rebuilt history holds one record per restart decision (stops and `none` are skipped),
    with rule, kind, error type, iteration and time, and the union of excluded nodes."""
    crash = Outcome(JobState.FAILED, "nccl", node="node2")
    restart = Decision(DecisionAction.RESTART, "r", rule="transient", exclude_nodes=("node2",))
    stop = Decision(DecisionAction.STOP, "s")
    infos = recorded([(crash, restart), (crash, restart), (Outcome(JobState.COMPLETED), stop)])
    history = history_from(infos, attempt_no=3, iteration=99)
    assert history.attempt == 3 and history.iteration == 99
    assert [(r.rule, r.kind, r.error_type, r.iteration) for r in history.restarts] == [
        ("transient", OutcomeKind.CRASH, "nccl", 10),
        ("transient", OutcomeKind.CRASH, "nccl", 20),
    ]
    assert history.restarts[0].time_s == (T0 + timedelta(minutes=1)).timestamp()
    assert history.excluded_nodes == ("node2",)


def test_history_from_ignores_records_without_evidence() -> None:
    """A restart record whose evidence is not a mapping (an older or foreign row) is skipped."""
    info = DecisionInfo(1, 1, 1, "restart", "r", None, None, ["not", "a", "dict"], T0)
    assert history_from([info], attempt_no=2, iteration=None).restarts == ()


def test_history_round_trip_gives_the_shipped_budget() -> None:
    """Three recorded scancel restarts, read back through history_from, leave the 4th scancel
    with `retry budget exhausted (attempt 4/3)` under the shipped megatron_transient policy."""
    policy = load_policy(yaml.safe_load((SHIPPED / "megatron_transient.yaml").read_text()))
    cancelled = Outcome(JobState.CANCELLED, "cancelled")
    made: list[tuple[Outcome, Decision]] = []
    for attempt in range(1, 5):
        history = history_from(recorded(made), attempt_no=attempt, iteration=None)
        decision = decide(policy, cancelled, history, now=T0.timestamp() + attempt)
        made.append((cancelled, decision))
    assert [d.action for _, d in made] == [DecisionAction.RESTART] * 3 + [DecisionAction.STOP]
    assert made[-1][1].reason == "retry budget exhausted (attempt 4/3)"

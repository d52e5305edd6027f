"""Judging one attempt: what was observed + its log's signals + the job's history -> one Judgement. No I/O.

This is the single step between watching and acting. The monitor (and `autoexp
replay`) hand it a `Verdict` (the job ended; a fatal line settled; the hang
tracker fired; the job was lost), and it returns everything to record and carry
out, so that the monitor writes it in ONE store transaction and then acts:

    verdict + cause + history + policy + now
        -> outcome (core/watch/outcome.py) -> decision (core/decide/policy.py `decide`)
        -> Judgement(outcome, decision, evidence, effects)

The root cause decides. A hang or a collective timeout observed while the log
already holds a root signal from any rank (an OOM, a segfault, an exception...)
is a cascade of that root: the outcome carries the root's error type, and the
hang is kept as what was observed (`Evidence.observed`).

Evidence is a typed record (`Evidence`), stored as JSON in the decision row; the
restart history that budgets count is rebuilt from those records alone
(`history_from`): the decision records are the one source of truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from oellm_autoexp.core.checkpoint.disk import RULE as DISK_RULE
from oellm_autoexp.core.checkpoint.disk import is_save_failure, save_failed_reason
from oellm_autoexp.core.classify.guess import REFINES, is_guess
from oellm_autoexp.core.classify.root_cause import evidence as evidence_lines
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.load_failure import load_failure, with_failed_load
from oellm_autoexp.core.decide.node_blame import DEFAULT_MAX_SHARE, Blame, BlameResult, blame_nodes
from oellm_autoexp.core.decide.policy import (
    Decision,
    DecisionAction,
    RestartHistory,
    RestartPolicy,
    RestartRecord,
    decide,
)
from oellm_autoexp.core.decide.recurring_blame import blame_again, network_named
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.job_status import JobStatus
from oellm_autoexp.core.jobs.slurm_nodes import NodeHealth
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import EARLY_EXIT_ERROR_TYPE, Outcome, OutcomeKind
from oellm_autoexp.core.watch.verdict import Trigger, Verdict

# Node names come from these named groups of hardware/NCCL patterns.
_NODE_GROUPS = ("node", "host", "hostname")
# Causes whose node is shown as evidence (`Evidence.node`). Which nodes are EXCLUDED is decided
# on evidence that singles a node out, with a share guard (core/decide/node_blame.py; `judge`).
NODE_FAULT_ERROR_TYPES = frozenset({"gpu_hardware", "node_failure", "nccl", "nccl_timeout"})
MEGATRON_RERUN_EXIT = 16  # Megatron's rerun state machine: "resume to disambiguate" after NaN/Inf


@dataclass(frozen=True)
class Effects:
    """What the monitor carries out once the judgement is recorded."""

    cancel: bool = False  # the job still runs: scancel it first
    resubmit_after_s: float | None = None  # schedule a new attempt this long from now
    exclude_nodes: tuple[str, ...] = ()  # pass as --exclude on resubmit
    job_status: JobStatus | None = None  # the job's new status (None: stays active)


@dataclass(frozen=True)
class Judgement:
    """The one result of judging an attempt: record `decision` + `evidence`, then apply `effects`."""

    outcome: Outcome
    decision: Decision
    evidence: Evidence
    effects: Effects
    record: bool  # False for "still running, nothing to do": nothing is written
    blame: BlameResult = field(default_factory=lambda: BlameResult(()))  # nodes the evidence singles out

    @property
    def ends_attempt(self) -> bool:
        """True when no later verdict about this attempt may be acted on."""
        return self.record and self.decision.action is not DecisionAction.NONE


@dataclass(frozen=True)
class PastDecision:
    """One stored decision, as history_from reads it."""

    action: str  # DecisionAction value
    time_s: float  # when it was decided (epoch seconds)
    evidence: Evidence


# -- building the outcome ---------------------------------------------------------------------


def node_of(signal: Signal | None) -> str | None:
    """The node a hardware/NCCL cause names (evidence only); None for other causes."""
    if signal is None or signal.error_type not in NODE_FAULT_ERROR_TYPES:
        return None
    for key in _NODE_GROUPS:
        if signal.groups.get(key):
            return signal.groups[key]
    return None


def outcome_of(verdict: Verdict, *, user_cancelled: bool = False, early_exit_is_end: bool = False) -> Outcome:
    """The policy's view of a verdict (see the module docstring: the root cause decides)."""
    cause = verdict.cause
    if verdict.trigger is Trigger.LOST:
        return Outcome(JobState.FAILED, "lost", subsystem="slurm", signal="unknown_deadline")
    if verdict.trigger is Trigger.END and verdict.record is not None:
        return _end_outcome(verdict, verdict.record, user_cancelled, early_exit_is_end)
    if cause is not None:
        # A fatal line, or a hang observed after a root: the root's error type decides.
        return Outcome(
            JobState.RUNNING, cause.error_type, subsystem=cause.subsystem, signal=cause.pattern,
            node=node_of(cause), user_cancelled=user_cancelled, still_running=True,
        )  # fmt: skip
    hang = verdict.hang
    return Outcome(
        JobState.RUNNING, "hang", subsystem="progress", signal=hang.kind.value if hang else None,
        user_cancelled=user_cancelled, still_running=True, hang=hang.kind if hang else None,
    )  # fmt: skip


def _end_outcome(
    verdict: Verdict, record: JobRecord, user_cancelled: bool, early_exit_is_end: bool
) -> Outcome:
    """Slurm's end state, refined by the log's cause and by Megatron's exit protocol.

    Megatron (see PITFALLS): exit 0 before the last iteration is a save mid-run (its signal
    handler, `--exit-interval`, `--exit-duration-in-mins`), not completion, unless the
    experiment says an early exit is its intended end; exit 16 is its rerun machinery's
    "resume to disambiguate" after a NaN/Inf (recorded as numerical_instability; the rule
    matching `exit_codes: [16]` decides), 17 a failed validation.
    """
    cause = verdict.cause
    exit_code = verdict.worker_exit_code if verdict.worker_exit_code is not None else record.exit_code
    error_type, signal = (cause.error_type, cause.pattern) if cause else (None, None)
    node = node_of(cause)
    short = _stopped_short(verdict)
    if record.state is JobState.COMPLETED and short and not early_exit_is_end:
        error_type, signal = EARLY_EXIT_ERROR_TYPE, "iteration_short_of_total"
    elif exit_code == MEGATRON_RERUN_EXIT and error_type is None:
        error_type, signal = "numerical_instability", "megatron_exit_16"
    if exit_code == MEGATRON_RERUN_EXIT and node is None and len(record.nodes) == 1:
        node = record.nodes[0]  # "rerun on a different GPU": keep a one-node job off its node
    return Outcome(
        state=record.state,
        error_type=error_type,
        exit_code=exit_code,
        subsystem=cause.subsystem if cause else None,
        signal=signal,
        node=node,
        user_cancelled=user_cancelled,
    )


def _stopped_short(verdict: Verdict) -> bool:
    """Did the counter stop before its total? Within one log interval of it is the end: Megatron
    logs every --log-interval iterations, so 300/305 may be the last line of a finished run."""
    total, reached, stride = verdict.total_iterations, verdict.iteration or 0, verdict.log_stride
    if total is None or reached >= total:
        return False
    return stride is None or total - reached >= stride


# -- judging ----------------------------------------------------------------------------------


def judge(
    policy: RestartPolicy,
    verdict: Verdict,
    history: RestartHistory,
    signals: Sequence[Signal] = (),
    *,
    user_cancelled: bool = False,
    early_exit_is_end: bool = False,
    allocation: Sequence[str] = (),
    unhealthy: Sequence[NodeHealth] = (),
) -> Judgement:
    """Judge one verdict: the outcome, the decision, its evidence and the effects to carry out.

    `early_exit_is_end`: the experiment ends on purpose before its last iteration (a speed
    test stopping at `--exit-interval`), so an exit 0 there is completion.
    `allocation`: the attempt's nodes; blame (core/decide/node_blame.py) is judged against it.
    `unhealthy`: the allocation's nodes Slurm reports DOWN/DRAIN/FAIL when judged (evidence too).

    A cause guessed from the log's words (core/classify/guess.py) names the class and the reason
    says so, but a guess never makes the decision more drastic than the reading it replaced: where
    that reading restarts (or waits for a running job's end) and the guess would not, the job is
    judged as without the guess (the restart budget bounds a wrong guess; a wrong stop waits for a
    human). Where both stop, the reading's own reason stands and the guess is a note.
    """
    judged = _judge(policy, verdict, history, signals, user_cancelled=user_cancelled,
                    early_exit_is_end=early_exit_is_end, allocation=allocation, unhealthy=unhealthy)  # fmt: skip
    cause = verdict.cause
    if cause is None or not is_guess(cause):
        return judged
    note = guess_note(cause)
    if judged.decision.action is not DecisionAction.RESTART:
        plain = _judge(policy, replace(verdict, cause=verdict.unguessed, unguessed=None), history, signals,
                       user_cancelled=user_cancelled, early_exit_is_end=early_exit_is_end,
                       allocation=allocation, unhealthy=unhealthy)  # fmt: skip
        if plain.decision.action in (DecisionAction.RESTART, DecisionAction.NONE):
            # restarting, or waiting for the job's end: the guess may not stop it instead
            reason = f"{plain.decision.reason}; {note}; a guess never stops a run"
            return replace(plain, decision=replace(plain.decision, reason=reason))
        if plain.decision.action is judged.decision.action:
            # both stop: the reading's own reason stands (a catch-all exception stops as the class its
            # words read as would); the guess is a note, not the reason
            return replace(plain, decision=replace(plain.decision, reason=f"{plain.decision.reason}; {note}"))
    return replace(judged, decision=replace(judged.decision, reason=f"{judged.decision.reason}; {note}"))


def _judge(
    policy: RestartPolicy,
    verdict: Verdict,
    history: RestartHistory,
    signals: Sequence[Signal],
    *,
    user_cancelled: bool,
    early_exit_is_end: bool,
    allocation: Sequence[str],
    unhealthy: Sequence[NodeHealth],
) -> Judgement:
    outcome = outcome_of(verdict, user_cancelled=user_cancelled, early_exit_is_end=early_exit_is_end)
    outcome = replace(outcome, nodes=len(allocation))  # a rule may depend on the job's size
    blame = blame_for(policy, outcome, signals, allocation, unhealthy)
    named = network_named(signals, allocation, outcome.error_type)
    if not blame.blamed:  # a node NCCL's network errors named in an earlier failure too
        again = blame_again(
            named, history.restarts, verdict.now_s, len(allocation), blame_share(policy, outcome)
        )
        blame = again if again.blamed or again.withheld else blame
    decision = decide(policy, outcome, history, verdict.now_s, blamed=blame.nodes)
    failed_load = None
    if outcome.kind is not OutcomeKind.SUCCESS and not user_cancelled:
        failed_load = load_failure(signals, verdict.cause, history.iteration)
        decision = with_failed_load(decision, failed_load, history, outcome.still_running)
        if is_save_failure(verdict.cause) and verdict.cause is not None:
            # Not into the same full disk: stop, naming it and its free space.
            reason = save_failed_reason(history.checkpoint_disk, verdict.cause)
            decision = Decision(
                DecisionAction.STOP, reason, rule=DISK_RULE, cancel_first=outcome.still_running
            )
    record = not (decision.action is DecisionAction.NONE and outcome.still_running)
    evidence = _evidence(verdict, outcome, decision, history.iteration, signals)
    if failed_load is not None:
        evidence = evidence._replace(failed_load_iteration=failed_load.iteration)
    return Judgement(
        outcome=outcome,
        decision=decision,
        evidence=evidence._replace(
            blamed=tuple(f"{b.node}: {b.evidence}" for b in blame.blamed),
            blame_withheld=blame.withheld,
            named_nodes=named,
        ),
        effects=_effects(outcome, decision, verdict.now_s),
        record=record,
        blame=blame,
    )


def guess_note(cause: Signal) -> str:
    """What a reason adds when its class was guessed (core/classify/guess.py): no pattern named it."""
    probability = cause.groups.get("probability", "?")
    refined = cause.groups.get(REFINES)
    why = (f"a catch-all {refined}: its class and message matched no rule" if refined
           else "no pattern matched it")  # fmt: skip
    return (f"{cause.error_type} guessed from the words of line {cause.line_no} "
            f"({why}; p={probability}): {cause.line.strip()[:160]}")  # fmt: skip


def blame_for(
    policy: RestartPolicy,
    outcome: Outcome,
    signals: Sequence[Signal],
    allocation: Sequence[str],
    unhealthy: Sequence[NodeHealth] = (),
) -> BlameResult:
    """The nodes the attempt's lines (and Slurm's node states) single out, with the guard share of
    the rule that decides."""
    found = blame_nodes(signals, allocation, unhealthy, max_share=blame_share(policy, outcome))
    if not found.blamed and outcome.exit_code == MEGATRON_RERUN_EXIT and outcome.node:
        # Megatron's rerun machinery asks for "a different GPU": a one-node job leaves its node.
        rerun = Blame(outcome.node, "Megatron's rerun state machine exited 16 (rerun elsewhere)", "log")
        return BlameResult((rerun,))
    return found


def blame_share(policy: RestartPolicy, outcome: Outcome) -> float:
    """The blame guard's share of the rule that decides this outcome."""
    rule = policy.rule_for(outcome)
    return rule.blame_max_share if rule is not None else DEFAULT_MAX_SHARE


def _evidence(
    verdict: Verdict, outcome: Outcome, decision: Decision, iteration: int | None, signals: Sequence[Signal]
) -> Evidence:
    cause, first = verdict.cause, verdict.first_fatal
    lines = evidence_lines(signals, cause)
    if cause is not None and cause.line not in lines:
        lines.insert(0, cause.line)  # a synthetic cause (`killed`) is not among the signals
    return Evidence(
        rule=decision.rule,
        kind=outcome.kind.value,
        state=outcome.state.value,
        error_type=outcome.error_type,
        signal=outcome.signal,
        node=outcome.node,
        iteration=iteration,
        exclude_nodes=decision.exclude_nodes,
        delay_s=decision.delay_s,
        lines=tuple(lines),
        trigger=verdict.trigger.value,
        observed=verdict.observed,
        root_line_no=cause.line_no if cause else None,
        first_fatal_line_no=first.signal.line_no if first else None,
        first_fatal_line=first.signal.line if first else None,
        after_first_fatal_s=round(verdict.now_s - first.at_s, 3) if first else None,
        override_set=decision.override_set,
        overrides=decision.overrides,
    )


def _effects(outcome: Outcome, decision: Decision, now_s: float) -> Effects:
    action = decision.action
    if action is DecisionAction.RESTART:
        return Effects(decision.cancel_first, now_s + decision.delay_s, decision.exclude_nodes)
    if action is DecisionAction.STOP:
        return Effects(decision.cancel_first, job_status=stopped_status(outcome.kind))
    if action is DecisionAction.NOTIFY and not outcome.still_running:
        return Effects(decision.cancel_first, job_status=JobStatus.STOPPED)
    return Effects(decision.cancel_first)


def stopped_status(kind: OutcomeKind | str | None) -> JobStatus:
    """A job's status once a stop decision about an outcome of this kind is carried out."""
    if kind == OutcomeKind.SUCCESS.value:
        return JobStatus.COMPLETED
    if kind == OutcomeKind.USER_CANCELLED.value:
        return JobStatus.CANCELLED_BY_USER
    return JobStatus.STOPPED


# -- history ----------------------------------------------------------------------------------


def history_from(
    decisions: Sequence[PastDecision],
    attempt_no: int,
    iteration: int | None,
    first_iteration: int | None = None,
) -> RestartHistory:
    """The restart history of a job, rebuilt from its recorded restart decisions alone; `iteration` and
    `first_iteration` are the attempt's own (AttemptView's)."""
    restarts = []
    excluded: list[str] = []
    for d in decisions:
        if d.action != DecisionAction.RESTART.value:
            continue
        ev = d.evidence
        restarts.append(
            RestartRecord(
                time_s=d.time_s,
                rule=ev.rule or "",
                kind=OutcomeKind(ev.kind),
                error_type=ev.error_type,
                iteration=ev.iteration,
                override_set=ev.override_set,
                failed_load_iteration=ev.failed_load_iteration,
                named_nodes=ev.named_nodes,
            )
        )
        excluded.extend(n for n in ev.exclude_nodes if n not in excluded)
    return RestartHistory(attempt=attempt_no, restarts=tuple(restarts), iteration=iteration,
                          excluded_nodes=tuple(excluded), first_iteration=first_iteration)  # fmt: skip


def restart_counts(decisions: Sequence[PastDecision]) -> dict[str, int]:
    """Restarts granted so far, by cause (error type, else kind): what `status` shows."""
    counts: dict[str, int] = {}
    for d in decisions:
        if d.action == DecisionAction.RESTART.value:
            cause = d.evidence.error_type or d.evidence.kind
            counts[cause] = counts.get(cause, 0) + 1
    return counts


def attempt_overrides(decisions: Sequence[PastDecision]) -> tuple[str, ...]:
    """The config overrides the job's next attempt runs with: the last override set a restart applied."""
    for d in reversed(decisions):
        if d.action == DecisionAction.RESTART.value and d.evidence.override_set is not None:
            return d.evidence.overrides
    return ()


def previous_cause(decisions: Sequence[PastDecision]) -> str:
    """What ended the attempt before the next one (error type, else kind); "" before the first restart."""
    for d in reversed(decisions):
        if d.action == DecisionAction.RESTART.value:
            return d.evidence.error_type or d.evidence.kind
    return ""

"""Where a restart is decided: policy + outcome + history + now -> Decision. No I/O.

`decide()` is the one entry point; docs/restart_policy.md describes the YAML and
every reason it can return. The order of questions, each answered by a reason:

1. Fixed answers no policy can change: alive -> none; UNKNOWN -> none;
   `autoexp cancel` -> stop; COMPLETED -> stop.
2. A job that is still running (a fatal line settled, or a hang verdict) is acted
   on at once (cancel, then restart or stop), unless its rule says to wait for the
   end: `act_on_fatal_line: false`, or the error type is in `wait_for_end_on` or is
   one the scheduler ends by itself (time limit, preemption, a cancel, a node
   failure: Slurm's own end state follows and says more) -> none.
3. The first rule whose `match` fits; none fits -> stop.
4. An excluded error type -> stop ("Permanent failure detected ..."); a configuration
   error (outcome.PERMANENT_ERROR_TYPES) always is one, listed or not, unless the attempt
   trained first (`config_error_after_training`: the environment changed; steps 6-7 decide).
5. A stop/notify rule -> that action.
6. Budgets: first the job's cumulative GPU-/wall-hours (`max_gpu_hours`,
   `max_wall_hours`, from `history.spent`), then, most specific first: per-error-type,
   the rule's `max_retries`, the rate window. One run out -> stop, naming the budget
   and its numbers. A rule with `charge_budget: false` spends neither of the first two
   (a node failing its pre-flight costs no training); its window still counts.
7. Otherwise restart, after `delay_s`, excluding the nodes the evidence blamed if asked.

Adaptive restarts. A restart rule with `overrides:` (a list of config override
sets) restarts the outcomes it takes with the next unused set, before questions 4
and 6: an error type the rule excludes (an OOM) becomes restartable with a changed
config, and these restarts are not charged to the rule's budgets (the list's length
is their budget; the rate window still counts them). The set applied stays in
effect for every later attempt of the job. When the list is used up, questions 4-7
decide as without it: an excluded type stops, others spend the normal budget.

Budget arithmetic. The first submission is attempt 1 and each restart adds one.
A rule's budget counts the restarts it granted (since the last refill, see below);
`used` of them leaves `max_retries - used`. When an attempt ends with `used`
restarts already granted, it is the budget's attempt `used + 1`, and it is
restarted only while `used < max_retries`. With max_retries=3: attempts 1, 2, 3
end with used = 0, 1, 2 and are restarted; attempt 4 ends with used = 3 and
stops with `retry budget exhausted (attempt 4/3)`. Exactly 3 restarts.

Refill on progress: a restart is forgiven once a later attempt got past the
highest iteration any attempt had reached before it (checkpoints make a resumed
attempt start lower; only new ground counts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from oellm_autoexp.core.checkpoint.disk import DiskSpace
from oellm_autoexp.core.classify.signals import ENDED_BY_SCHEDULER
from oellm_autoexp.core.decide.node_blame import DEFAULT_MAX_SHARE
from oellm_autoexp.core.decide.spend import Spend, SpendLimits, budget_reason
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import PERMANENT_ERROR_TYPES, Outcome, OutcomeKind
from oellm_autoexp.errors import UserError


class RuleAction(StrEnum):
    RESTART = "restart"  # cancel if still running, resubmit as a new attempt (resumes from its checkpoint)
    STOP = "stop"  # do not restart; the job is finished for good
    NOTIFY = "notify"  # do not restart; log at warning level and notify a human


class DecisionAction(StrEnum):
    RESTART = "restart"  # resubmit the same job as a new attempt after delay_s
    STOP = "stop"  # finished for good; nothing is resubmitted
    NOTIFY = "notify"  # not resubmitted; a human is told
    NONE = "none"  # nothing to do yet: still alive, UNKNOWN, or waiting for a doomed job to end


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Model):
    """Which outcomes a rule applies to. Every non-empty selector must fit (AND);
    within one selector any entry fits (OR). An empty match fits every outcome."""

    kinds: tuple[OutcomeKind, ...] = ()  # outcome kinds (see core/watch/outcome.py)
    states: tuple[JobState, ...] = ()  # Slurm states
    error_types: tuple[str, ...] = ()  # compared with the classifier's error_type and the kind
    exit_codes: tuple[int, ...] = ()  # the training process's exit status (Megatron: 16, 17)
    # The attempt ran on at least this many nodes (0: any size). An allocation of unknown size
    # (outcome.nodes 0) never fits a rule that asks for one.
    min_nodes: int = Field(default=0, ge=0)

    def fits(self, outcome: Outcome) -> bool:
        """True when every non-empty selector fits `outcome`."""
        return (
            (not self.kinds or outcome.kind in self.kinds)
            and (not self.states or outcome.state in self.states)
            and (not self.error_types or bool(outcome.names & set(self.error_types)))
            and (not self.exit_codes or outcome.exit_code in self.exit_codes)
            and (not self.min_nodes or outcome.nodes >= self.min_nodes)
        )


class Backoff(_Model):
    """Grow the delay: restart n (0-based within the budget) waits cooldown_s x factor**n, capped."""

    factor: float = Field(default=2.0, ge=1.0)  # multiplier per restart already granted
    max_s: float = Field(default=3600.0, ge=0)  # the delay never exceeds this


class Window(_Model):
    """A rate limit: at most `max_restarts` restarts by this rule within the last `hours`."""

    max_restarts: int = Field(ge=1)  # restarts allowed inside the window
    hours: float = Field(gt=0)  # the window's length, ending now


class RestartRule(_Model):
    """Binds outcomes (`match`) to an action, with the conditions for restarting."""

    name: str = Field(min_length=1)  # unique in the policy; past restarts are counted by it
    match: Match = Match()  # which outcomes this rule takes; first fitting rule wins
    action: RuleAction = RuleAction.RESTART  # what to do with them
    reason: str | None = None  # the reason for a stop/notify rule (a default names the rule)
    max_retries: int = Field(default=3, ge=0)  # restarts this rule may grant (until a refill)
    error_type_budgets: dict[str, int] = Field(default_factory=dict)  # error_type -> max restarts
    exclude_error_types: tuple[str, ...] = ()  # permanent failures: never restarted
    cooldown_s: float = Field(default=0.0, ge=0)  # delay before resubmitting (see backoff)
    backoff: Backoff | None = None  # grow the delay with each restart; None: always cooldown_s
    window: Window | None = None  # rate limit over a sliding time window
    refill_on_progress: bool = False  # forgive restarts once the job got past its best iteration
    # Also forgive `max_retries` (not the error-type budgets, not the window) once an attempt trained
    # and failed at an iteration no attempt since the last refill failed at (`training_refill_point`):
    # at fleet scale independent faults come faster than a resumed attempt regains its lost work.
    refill_on_training: bool = False
    # False: restarts by this rule spend no retry budget (max_retries, error_type_budgets); the
    # window and the job's GPU-/wall-hour budgets still apply. For failures that cost no training
    # and move the job elsewhere (a node failing its pre-flight check, docs/preflight.md).
    charge_budget: bool = True
    # Keep the next attempts off a node the evidence singles out (core/decide/node_blame.py: a hardware
    # line with its host, srun's `Node failure on X`), unless it names more than this share of
    # the allocation: then the failure is job-wide and no node is blamed.
    exclude_failing_node: bool = False
    blame_max_share: float = Field(default=DEFAULT_MAX_SHARE, gt=0, le=1)  # see exclude_failing_node
    # Act on a RUNNING job as soon as its fatal line settled (cancel, then restart or stop)
    # rather than wait for it to end: with NCCL the survivors of a dead rank block for the
    # whole collective timeout while Slurm says RUNNING.
    act_on_fatal_line: bool = True
    wait_for_end_on: tuple[str, ...] = ()  # error types still waited out (the job's own protocol)
    early_cancel_on: tuple[str, ...] = ()  # error types acted on early even with act_on_fatal_line off
    # Config override sets (`key.path=value` each) for the next attempts, tried in order;
    # each one restarts once, even an excluded error type (module docstring: adaptive restarts).
    overrides: tuple[tuple[str, ...], ...] = ()
    # Restarts a configuration error gets when the attempt that met it trained (logged an iteration past
    # its first one, a loaded checkpoint's): the same arguments worked, so what changed is
    # the environment (a hub or mount that stopped answering, a module the site updated), which a
    # later attempt may not meet. Counted among the rule's restarts since its last refill; 0: never.
    config_error_after_training: int = Field(default=1, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _one_override_is_a_set(cls, data: Any) -> Any:
        # `- backend.x=8` is read as the set [backend.x=8].
        if isinstance(data, Mapping) and isinstance(data.get("overrides"), list):
            sets = [[entry] if isinstance(entry, str) else entry for entry in data["overrides"]]
            data = {**data, "overrides": sets}
        return data

    @model_validator(mode="after")
    def _budgets_not_negative(self) -> RestartRule:
        bad = [k for k, v in self.error_type_budgets.items() if v < 0]
        if bad:
            raise ValueError(f"error_type_budgets must be >= 0 (got negative for {', '.join(bad)})")
        return self

    @model_validator(mode="after")
    def _overrides_well_formed(self) -> RestartRule:
        if self.overrides and self.action is not RuleAction.RESTART:
            raise ValueError(f"overrides need action restart (rule {self.name} is {self.action.value})")
        for number, entries in enumerate(self.overrides, start=1):
            bad = [e for e in entries if "=" not in e or not e.partition("=")[0].strip()]
            if not entries or bad:
                got = bad[0] if bad else "an empty set"
                raise ValueError(
                    f"overrides set {number} of rule {self.name}: expected key.path=value, got {got!r}"
                )
        return self


class RestartPolicy(_Model):
    """An ordered list of rules; the first rule whose match fits an outcome decides it."""

    description: str = ""  # one line for `autoexp` listings and logs
    rules: tuple[RestartRule, ...] = ()  # tried in order
    # Cumulative budgets over every attempt of a job (allocation x elapsed, from sacct), checked
    # before each restart; spent -> stop with the figures. None: no limit.
    max_gpu_hours: float | None = Field(default=None, gt=0)  # GPU-hours over all attempts
    max_wall_hours: float | None = Field(default=None, gt=0)  # elapsed hours over all attempts
    # Incomplete checkpoints moved aside before a resubmission (docs/checkpoints.md); past this
    # many per run the job stops instead.
    max_checkpoint_rollbacks: int = Field(default=2, ge=0)
    # Submit each attempt with its successor already queued behind it (afternotok): a failure
    # while no monitor runs is restarted by Slurm itself (core/decide/successor.py, docs/supervision.md).
    # Off by default: the successor is rendered before the failure is known (no adaptive override
    # set, no cause in its env), it doubles the job's queue entries, and it races a live monitor.
    queued_successor: bool = False
    # ... held back this long (`--begin=now+N`), renewed by a live monitor, which releases it on its
    # restart decision: a successor starts by itself only once no monitor renewed it for this long.
    # 0: never held (it then races a live monitor's decision).
    queued_successor_hold_s: int = Field(default=300, ge=0)

    @property
    def spend_limits(self) -> SpendLimits | None:
        """The cumulative budgets, or None when the policy sets none (nothing to measure)."""
        if self.max_gpu_hours is None and self.max_wall_hours is None:
            return None
        return SpendLimits(self.max_gpu_hours, self.max_wall_hours)

    @model_validator(mode="after")
    def _unique_names(self) -> RestartPolicy:
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique (repeated: {', '.join(dupes)})")
        return self

    def rule_for(self, outcome: Outcome) -> RestartRule | None:
        """The first rule whose match fits, or None."""
        return next((r for r in self.rules if r.match.fits(outcome)), None)


def load_policy(data: Mapping[str, Any], source: str = "restart") -> RestartPolicy:
    """Validate a parsed `restart:` mapping; a bad one raises UserError naming the key path."""
    try:
        return RestartPolicy.model_validate(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in (source, *first["loc"]))
        raise UserError(f"{path}: {first['msg']} ({exc.error_count()} error(s) in {source})") from None


@dataclass(frozen=True)
class RestartRecord:
    """One restart already granted (the monitor stores these)."""

    time_s: float  # when it was decided (epoch seconds)
    rule: str  # the rule that granted it; its budget is charged
    kind: OutcomeKind  # the outcome kind that caused it
    error_type: str | None = None  # the classifier's root cause, if any
    iteration: int | None = None  # the highest iteration the ended attempt had reached
    override_set: int | None = None  # the rule's override set it applied (1-based), if any
    failed_load_iteration: int | None = None  # the checkpoint it quarantined: the attempt failed loading it
    named_nodes: tuple[str, ...] = ()  # nodes its NCCL network errors named (core/decide/recurring_blame.py)


@dataclass(frozen=True)
class RestartHistory:
    """Everything decide() needs to know about the job's past."""

    attempt: int = 1  # the attempt that just ended (or is running); the first submission is 1
    restarts: tuple[RestartRecord, ...] = ()  # granted restarts, oldest first
    iteration: int | None = None  # the highest iteration this attempt reached
    excluded_nodes: tuple[str, ...] = ()  # nodes already excluded on resubmit
    spent: Spend | None = None  # what all attempts spent so far (None: not measured)
    checkpoint_disk: DiskSpace | None = None  # the checkpoint dir's free space, read after a failed save
    # The first iteration this attempt logged: the checkpoint it loaded, or its first log interval. Above it,
    # `iteration` says the attempt trained (a configuration error after training restarts: rule docs).
    first_iteration: int | None = None


@dataclass(frozen=True)
class Decision:
    """What to do, and the one-line reason that goes to the record and the log."""

    action: DecisionAction  # what the monitor does
    reason: str  # exact text for the decision record and the log
    rule: str | None = None  # the rule that decided; None for fixed answers
    budget_before: int | None = None  # the rule's retries left before this decision
    budget_after: int | None = None  # retries left after it (one less on restart)
    delay_s: float = 0.0  # wait this long before resubmitting (cooldown/backoff)
    exclude_nodes: tuple[str, ...] = field(default_factory=tuple)  # pass as --exclude on resubmit
    cancel_first: bool = False  # the job still runs: scancel it before anything else
    override_set: int | None = None  # the rule's override set the next attempt runs with (1-based)
    overrides: tuple[str, ...] = ()  # that set's `key.path=value` entries
    # A configuration error restarted because the attempt trained first (`config_error_after_training`):
    # a failed checkpoint load's own decision takes precedence over it (core/decide/load_failure.py).
    environment_changed: bool = False


def decide(
    policy: RestartPolicy,
    outcome: Outcome,
    history: RestartHistory,
    now: float,
    *,
    blamed: Sequence[str] = (),
) -> Decision:
    """Decide what to do about `outcome` at `now` (epoch seconds). Every branch has a reason.

    `blamed`: the nodes the evidence singles out (core/decide/node_blame.py), excluded on restart
    when the rule says `exclude_failing_node`.
    """
    fixed = _fixed_decision(outcome)
    if fixed is not None:
        return fixed
    rule = policy.rule_for(outcome)
    if outcome.still_running and not _acts_early(rule, outcome):
        return Decision(DecisionAction.NONE, _waiting_reason(rule, outcome), rule=rule.name if rule else None)
    if rule is None:
        reason = f"no restart rule matches (kind={outcome.kind.value}, error_type={outcome.error_type})"
        return Decision(DecisionAction.STOP, reason, cancel_first=outcome.still_running)
    return _apply_rule(rule, outcome, history, now, policy.spend_limits, tuple(blamed))


def _fixed_decision(outcome: Outcome) -> Decision | None:
    kind = outcome.kind
    if kind is OutcomeKind.ALIVE:
        return Decision(DecisionAction.NONE, f"job still alive (state={outcome.state.value})")
    if kind is OutcomeKind.UNKNOWN:
        return Decision(DecisionAction.NONE, "state UNKNOWN: waiting for Slurm (never a reason to restart)")
    if kind is OutcomeKind.USER_CANCELLED:
        reason = "Cancelled by user (autoexp cancel); not restarting"
        return Decision(DecisionAction.STOP, reason, cancel_first=outcome.still_running)
    if kind is OutcomeKind.SUCCESS:
        return Decision(DecisionAction.STOP, "Job completed successfully")
    return None


def _acts_early(rule: RestartRule | None, outcome: Outcome) -> bool:
    # A hung job never ends by itself. A settled fatal line means the attempt is over even
    # while Slurm says RUNNING (peers blocked in NCCL): acting now saves the whole allocation
    # for the collective timeout, and the root cause is already known.
    if outcome.hang is not None:
        return True
    error_type = outcome.error_type
    if rule is not None and error_type in rule.early_cancel_on:
        return True
    if error_type in ENDED_BY_SCHEDULER:
        return False  # acting first would race the scheduler (and lose a preempted job Slurm requeues)
    if rule is None:
        return True  # no rule takes it: stopping now is what the end would bring
    return error_type not in rule.wait_for_end_on and rule.act_on_fatal_line


def _waiting_reason(rule: RestartRule | None, outcome: Outcome) -> str:
    if outcome.error_type in ENDED_BY_SCHEDULER:
        why = "the scheduler ends it by itself"
    elif rule is not None and outcome.error_type in rule.wait_for_end_on:
        why = f"in wait_for_end_on of rule {rule.name}"
    else:
        why = f"rule {rule.name if rule else '?'} has act_on_fatal_line off"
    return f"job still running; waiting for it to end (error_type={outcome.cause}: {why})"


def _apply_rule(
    rule: RestartRule,
    outcome: Outcome,
    history: RestartHistory,
    now: float,
    limits: SpendLimits | None,
    blamed: tuple[str, ...],
) -> Decision:
    excluded = _excluded_name(rule, outcome)
    adapted = _restart_with_next_set(rule, outcome, history, now, blamed)
    if adapted is not None:
        return adapted
    trained = _trained_iteration(history) if excluded in PERMANENT_ERROR_TYPES else None
    if trained is not None and _config_error_restart_left(rule, history):
        restart = _restart_within_budgets(rule, outcome, history, now, limits, blamed)
        return _after_training(restart, rule, trained)
    if excluded is not None:
        reason = f"Permanent failure detected (excluded error_type: {excluded})"
        if rule.overrides:
            reason += f"; override sets used up ({len(rule.overrides)}/{len(rule.overrides)})"
        if excluded in PERMANENT_ERROR_TYPES:
            reason += (
                f": the same configuration fails the same way on every attempt (signal {outcome.signal});"
                " change what that log line names, then resubmit"
            )
        return Decision(DecisionAction.STOP, reason, rule=rule.name, cancel_first=outcome.still_running)
    if rule.action is not RuleAction.RESTART:
        default = f"rule {rule.name}: {rule.action.value} on kind={outcome.kind.value}, error_type={outcome.error_type}"
        action = DecisionAction(rule.action.value)
        return Decision(action, rule.reason or default, rule=rule.name, cancel_first=outcome.still_running)
    return _restart_within_budgets(rule, outcome, history, now, limits, blamed)


def _after_training(restart: Decision, rule: RestartRule, trained: int) -> Decision:
    """A configuration error's restart after training (`config_error_after_training`), saying why; a
    budget's stop as it is."""
    if restart.action is not DecisionAction.RESTART:
        return restart
    allowed = rule.config_error_after_training
    restarts = "one restart" if allowed == 1 else f"up to {allowed} restarts"
    note = (
        f"; this configuration trained before (iteration {trained}), so the environment changed:"
        f" {restarts} for it (config_error_after_training: {allowed})"
    )
    return replace(restart, reason=restart.reason + note, environment_changed=True)


def _trained_iteration(history: RestartHistory) -> int | None:
    """The iteration the ended attempt trained to, if it trained: it logged an iteration past its first
    one. None: it never logged one, or only the checkpoint it loaded (an edited configuration that resumes
    and fails at once has not trained, whatever the checkpoint's iteration)."""
    first, last = history.first_iteration, history.iteration
    return last if first is not None and last is not None and last > first else None


def _config_error_restart_left(rule: RestartRule, history: RestartHistory) -> bool:
    """Is a configuration error's restart left to `rule`: fewer than `config_error_after_training` of
    its restarts since its last refill were for one?"""
    if rule.action is not RuleAction.RESTART:
        return False
    # Progress refills it, not refill_on_training: an outage met at a new iteration each time, short of the
    # best one, would otherwise restart on every attempt (docs/restart_policy.md: a second one stops).
    charged = charged_restarts(rule, history, count_training=False)
    used = sum(1 for r in charged if r.error_type in PERMANENT_ERROR_TYPES)
    return used < rule.config_error_after_training


def override_sets_used(rule: RestartRule, history: RestartHistory) -> int:
    """How many of the rule's override sets earlier restarts applied."""
    return sum(1 for r in history.restarts if r.rule == rule.name and r.override_set is not None)


def _restart_with_next_set(
    rule: RestartRule, outcome: Outcome, history: RestartHistory, now: float, blamed: tuple[str, ...] = ()
) -> Decision | None:
    """A restart with the rule's next override set; None when it has none left (or none at all)."""
    used = override_sets_used(rule, history)
    if rule.action is not RuleAction.RESTART or used >= len(rule.overrides):
        return None
    left = max(rule.max_retries - len(charged_restarts(rule, history)), 0)
    window = _window_reason(rule, history, now)
    if window is not None:
        return _budget_stop(rule, outcome, window, left)
    entries = rule.overrides[used]
    reason = (
        f"Restarting with a changed config (error_type={outcome.cause}): override set "
        f"{used + 1}/{len(rule.overrides)} of rule {rule.name}: {' '.join(entries)}"
    )
    return Decision(
        DecisionAction.RESTART, reason, rule=rule.name, budget_before=left, budget_after=left,
        delay_s=rule.cooldown_s, exclude_nodes=_exclude_nodes(rule, blamed, history),
        cancel_first=outcome.still_running, override_set=used + 1, overrides=entries,
    )  # fmt: skip


def _excluded_name(rule: RestartRule, outcome: Outcome) -> str | None:
    # The classifier's error_type is named first: it is the more precise of the two.
    for name in (outcome.error_type, outcome.kind.value):
        if name is not None and (name in rule.exclude_error_types or name in PERMANENT_ERROR_TYPES):
            return name
    return None


def _restart_within_budgets(
    rule: RestartRule,
    outcome: Outcome,
    history: RestartHistory,
    now: float,
    limits: SpendLimits | None,
    blamed: tuple[str, ...],
) -> Decision:
    charged = charged_restarts(rule, history)
    left = max(rule.max_retries - len(charged), 0)
    retries = (
        _error_type_budget_reason(rule, outcome, charged_restarts(rule, history, count_training=False))
        or _retry_budget_reason(rule, history, len(charged))
        if rule.charge_budget
        else None
    )
    exhausted = _spend_reason(limits, history.spent) or retries or _window_reason(rule, history, now)
    if exhausted is not None:
        return _budget_stop(rule, outcome, exhausted, left)
    reason = restart_reason(rule, outcome, history)
    if not rule.charge_budget:
        reason += f"; not charged to a retry budget (rule {rule.name})"
    return Decision(
        DecisionAction.RESTART,
        reason,
        rule=rule.name,
        budget_before=left,
        budget_after=left - 1 if rule.charge_budget else left,
        delay_s=restart_delay_s(rule, len(charged)),
        exclude_nodes=_exclude_nodes(rule, blamed, history),
        cancel_first=outcome.still_running,
    )


# Ends that are the plan working, not failures: a long run split over allocations (walltime),
# Megatron saving and exiting 0 mid-run (`--exit-interval`, `--exit-duration-in-mins`, its signal
# handler), the scheduler taking the nodes back. Their restarts say so (issue 28).
PLANNED_KINDS = {
    OutcomeKind.TIMEOUT: "time limit reached",
    OutcomeKind.EARLY_EXIT: "saved and exited before the last iteration",
    OutcomeKind.PREEMPTED: "preempted",
}


def restart_reason(rule: RestartRule, outcome: Outcome, history: RestartHistory) -> str:
    """The reason of a restart within the budgets: a planned resubmission says what it is,
    ("time limit reached at iteration 1200: resubmitted to continue (...)"); a failure keeps
    "Transient failure detected (error_type=...)"."""
    what = PLANNED_KINDS.get(outcome.kind)
    if what is None:
        return f"Transient failure detected (error_type={outcome.cause})"
    at = "" if history.iteration is None else f" at iteration {history.iteration}"
    if rule.refill_on_progress:
        best = max((i for i in (*(r.iteration for r in history.restarts), history.iteration) if i is not None),
                   default=None)  # fmt: skip
        budget = (
            f"counts against the budget only if the next attempt does not get past iteration {best}"
            if best is not None
            else "counts against the budget until an attempt makes progress"
        )
        if rule.refill_on_training and best is not None:
            budget = (
                "counts against the budget only if the next attempt dies starting up or where an "
                f"attempt died before, short of iteration {best}"
            )
    else:
        left = max(rule.max_retries - len(charged_restarts(rule, history)) - 1, 0)
        budget = f"{left} of {rule.max_retries} restarts left"
    return f"{what}{at}: resubmitted to continue ({budget})"


def _budget_stop(rule: RestartRule, outcome: Outcome, reason: str, left: int) -> Decision:
    """Stop: a budget ran out (`reason` names it, with numbers); the retries left stay as they were."""
    return Decision(DecisionAction.STOP, reason, rule.name, left, left, cancel_first=outcome.still_running)


def charged_restarts(
    rule: RestartRule, history: RestartHistory, *, count_training: bool = True
) -> tuple[RestartRecord, ...]:
    """The past restarts that count against `rule`'s budgets now (its own, since the last refill).

    `count_training=False`: the error-type budgets' count, which only progress refills."""
    first = _refill_index(rule, history, count_training=count_training)
    # Restarts with an override set have the list as their budget, not max_retries.
    return tuple(r for r in history.restarts[first:] if r.rule == rule.name and r.override_set is None)


def _refill_index(rule: RestartRule, history: RestartHistory, *, count_training: bool = True) -> int:
    point = refill_point(history) if rule.refill_on_progress else 0
    if rule.refill_on_training and count_training:
        point = max(point, training_refill_point(history))
    return point


def training_refill_point(history: RestartHistory) -> int:
    """How many of the oldest restarts are forgiven because a later attempt trained and then failed
    somewhere new: an independent fault, not a crash loop.

    Attempt j+1 reached `marks[j]` (None: it never logged an iteration, so it died starting up).
    A crash loop fails at start-up every time, or at the same iteration (a bad batch, a kernel
    bug at one shape), or within a few log intervals of its resume point, a handful of values it
    soon runs out of. An attempt whose mark no earlier attempt reached trained and met a new
    fault: at 16,384 GPUs one comes every 2-3 h, often before a resumed attempt regains
    the work it lost, so "past the best iteration" alone stops healthy runs in bursts (the
    simulated Kokolis year: docs/simulate_defaults.md).
    """
    marks = (*(r.iteration for r in history.restarts), history.iteration)
    seen: set[int] = set()
    point = 0
    for j, reached in enumerate(marks):
        if reached is None:
            continue
        if j > 0 and reached not in seen:
            point = j
        seen.add(reached)
    return point


def refill_point(history: RestartHistory) -> int:
    """How many of the oldest restarts are forgiven because a later attempt made progress.

    Attempt j+1 ran after restart j-1 and reached `marks[j]`; if that beats every
    iteration reached before, restarts 0..j-1 are forgiven. `marks` ends with the
    current attempt's iteration, so progress in the attempt that just ended counts.
    """
    marks = (*(r.iteration for r in history.restarts), history.iteration)
    best: int | None = None
    point = 0
    for j, reached in enumerate(marks):
        if reached is None:
            continue
        if j > 0 and (best is None or reached > best):
            point = j
        best = reached if best is None else max(best, reached)
    return point


def _error_type_budget_reason(
    rule: RestartRule, outcome: Outcome, charged: tuple[RestartRecord, ...]
) -> str | None:
    for name in sorted(outcome.names & rule.error_type_budgets.keys()):
        budget = rule.error_type_budgets[name]
        used = sum(1 for r in charged if name in (r.error_type, r.kind.value))
        if used >= budget:
            return f"retry budget exhausted for error_type={name} (attempt {used + 1}/{budget})"
    return None


def _retry_budget_reason(rule: RestartRule, history: RestartHistory, used: int) -> str | None:
    if used < rule.max_retries:
        return None
    # `used + 1` is this attempt's place in the budget; it equals the job's attempt number
    # unless other rules granted restarts or progress refilled the budget, which is then said.
    notes = []
    point = _refill_index(rule, history)
    if point:
        reached = (*(r.iteration for r in history.restarts), history.iteration)[point]
        notes.append(f"counted since progress to iteration {reached}")
    if used + 1 != history.attempt:
        notes.append(f"rule {rule.name}, job attempt {history.attempt}")
    extra = "".join(f"; {n}" for n in notes)
    return f"retry budget exhausted (attempt {used + 1}/{rule.max_retries}{extra})"


def _window_reason(rule: RestartRule, history: RestartHistory, now: float) -> str | None:
    if rule.window is None:
        return None
    since = now - rule.window.hours * 3600.0
    recent = sum(1 for r in history.restarts if r.rule == rule.name and r.time_s > since)
    if recent < rule.window.max_restarts:
        return None
    return (
        f"restart rate limit: {recent} restarts in the last {rule.window.hours:g}h "
        f"(max {rule.window.max_restarts})"
    )


def restart_delay_s(rule: RestartRule, used: int) -> float:
    """Seconds to wait before the restart that follows `used` charged restarts.

    Without backoff: cooldown_s every time. With it: cooldown_s x factor**used,
    at most backoff.max_s (cooldown 60, factor 2: 60, 120, 240, ...).
    """
    if rule.backoff is None:
        return rule.cooldown_s
    return min(rule.cooldown_s * rule.backoff.factor**used, rule.backoff.max_s)


def _spend_reason(limits: SpendLimits | None, spent: Spend | None) -> str | None:
    # The cumulative budget comes first: once it is spent no per-rule budget matters.
    if limits is None or spent is None:
        return None
    return budget_reason(limits, spent)


def _exclude_nodes(rule: RestartRule, blamed: tuple[str, ...], history: RestartHistory) -> tuple[str, ...]:
    nodes = history.excluded_nodes
    if rule.exclude_failing_node:
        nodes = (*nodes, *(n for n in blamed if n not in nodes))
    return nodes


def after_restart(
    history: RestartHistory, outcome: Outcome, decision: Decision, now: float
) -> RestartHistory:
    """The history of the new attempt once a restart `decision` was carried out at `now`."""
    record = RestartRecord(
        time_s=now,
        rule=decision.rule or "",
        kind=outcome.kind,
        error_type=outcome.error_type,
        iteration=history.iteration,
        override_set=decision.override_set,
    )
    return RestartHistory(
        attempt=history.attempt + 1,
        restarts=(*history.restarts, record),
        iteration=None,
        excluded_nodes=decision.exclude_nodes,
    )

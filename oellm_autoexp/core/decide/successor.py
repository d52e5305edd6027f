"""The queued successor: an attempt's next attempt, submitted with it, that Slurm starts if it fails. Pure.

With `restart.queued_successor: true` each attempt N is followed at once by attempt N+1,
submitted with `--dependency=afternotok:<N> --kill-on-invalid-dep=yes` (same script, same
checkpoint directory) and `--begin=now+<hold>`. Slurm starts N+1 only if N ends in a failed state
(non-zero exit, node failure, time limit, cancelled) and removes it when N completes. A live
monitor keeps pushing its begin time back (`renew_every_s`), so it never starts behind the
monitor's back; on a restart decision the monitor releases it (StartTime=now), on a stop decision
it cancels it. Once no monitor renews it, the hold lapses, and a failure is restarted by Slurm
from the checkpoint. A successor that starts after a stop exits at once (the batch script checks
the job's stop file, `STOP_FILE_ENV`).

Held to one queued successor per job and to the retry budget: none is queued once no restart
rule could grant another restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from oellm_autoexp.core.decide.policy import RestartPolicy, RuleAction

# Exported to every attempt's batch script: the file whose existence means "this job was
# stopped; do not train" (written by the monitor or `autoexp cancel` before they cancel).
STOP_FILE_ENV = "AUTOEXP_STOP_FILE"
ABANDONED_INTENT = "abandoned"  # the store's Intent.ABANDONED: a submission that never happened
RESTART_ACTION, NONE_ACTION = "restart", "none"  # DecisionAction values, as stored
DROPPED_PREFIX = "queued successor attempt "  # the event recorded when a successor is cancelled
# What a successor's AUTOEXP_PREVIOUS_CAUSE says: it is rendered before its predecessor ends.
SUCCESSOR_CAUSE = "unknown (queued successor)"


def may_queue_successor(policy: RestartPolicy, restarts_so_far: int) -> bool:
    """True when the policy asks for queued successors and some restart rule still has budget.

    `restarts_so_far`: the job's recorded restart decisions. A rule that refills on progress may
    grant more than its `max_retries`; the monitor then submits those restarts itself.
    """
    if not policy.queued_successor:
        return False
    return any(r.action is RuleAction.RESTART and restarts_so_far < r.max_retries for r in policy.rules)


def successor_args(predecessor_id: str, hold_s: int) -> tuple[str, ...]:
    """The sbatch arguments that queue a job behind `predecessor_id`, to start only if it fails,
    and not before `hold_s` from now unless a monitor releases it."""
    held = (f"--begin=now+{hold_s}",) if hold_s > 0 else ()
    return (f"--dependency=afternotok:{predecessor_id}", "--kill-on-invalid-dep=yes", *held)


def start_time_command(job_ids: Sequence[str], from_now_s: int) -> list[str]:
    """`scontrol update` that sets queued jobs' earliest start `from_now_s` from now (0: release them)."""
    when = "now" if from_now_s <= 0 else f"now+{from_now_s}"
    return ["scontrol", "update", f"JobId={','.join(job_ids)}", f"StartTime={when}"]


def renew_every_s(hold_s: int) -> float:
    """How often a live monitor pushes a successor's start back: three renewals per hold, so one
    missed (a slow poll, a controller hiccup) never lets it start under a live monitor."""
    return hold_s / 3


def unsupervised_line(attempt_no: int, executor_id: str, started: str, predecessor_no: int) -> str:
    """The event recorded when a monitor finds that a successor ran while none watched."""
    return (
        f"attempt {predecessor_no} failed while no monitor ran; restarted by the queued successor while "
        f"unsupervised: attempt {attempt_no} (job {executor_id}) started at {started}"
    )


class _Attempt(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def attempt_no(self) -> int: ...
    @property
    def executor_job_id(self) -> str | None: ...
    @property
    def ended_at(self) -> object: ...
    @property
    def intent(self) -> str: ...


class _Decision(Protocol):
    @property
    def attempt_id(self) -> int | None: ...
    @property
    def action(self) -> str: ...
    @property
    def reason(self) -> str: ...


A = TypeVar("A", bound=_Attempt)


def unended_of(attempts: Sequence[A]) -> list[A]:
    """The attempts that reached the executor and have not ended, lowest first."""
    return [a for a in attempts if a.executor_job_id and a.ended_at is None and a.intent != ABANDONED_INTENT]


def judged_no_of(attempts: Sequence[_Attempt], decisions: Sequence[_Decision]) -> int:
    """The highest attempt a restart was decided for (0: none)."""
    numbers = {a.id: a.attempt_no for a in attempts}
    decided = [numbers.get(d.attempt_id or -1, 0) for d in decisions if d.action == RESTART_ACTION]
    return max(decided, default=0)


def open_after_of(attempts: Sequence[A], decisions: Sequence[_Decision]) -> list[A]:
    """Not ended and past the last restart decision, lowest first: the one that runs (or waits
    to), then the successor queued behind it."""
    judged = judged_no_of(attempts, decisions)
    return [a for a in unended_of(attempts) if a.attempt_no > judged]


def shown_attempt_of(attempts: Sequence[A], decisions: Sequence[_Decision]) -> A | None:
    """The attempt `status` shows: the one watched, else the last that was not a cancelled successor."""
    open_ones = open_after_of(attempts, decisions)
    if open_ones:
        return open_ones[0]
    dropped = {
        d.attempt_id for d in decisions if d.action == NONE_ACTION and d.reason.startswith(DROPPED_PREFIX)
    }
    kept = [a for a in attempts if a.id not in dropped]
    return kept[-1] if kept else (attempts[-1] if attempts else None)

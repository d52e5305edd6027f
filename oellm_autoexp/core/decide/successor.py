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

from oellm_autoexp.core.decide.policy import RestartPolicy, RuleAction

# Exported to every attempt's batch script: the file whose existence means "this job was
# stopped; do not train" (written by the monitor or `autoexp cancel` before they cancel).
STOP_FILE_ENV = "AUTOEXP_STOP_FILE"
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

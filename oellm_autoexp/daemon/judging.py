"""The judge step, top to bottom: gather -> judge -> record -> carry out.

Every decision about an attempt, whatever made the monitor look (the job ended, a fatal
line settled, the hang tracker fired, the job was lost), goes through `judge_attempt`:

1. gather: ONE read of the store (the job's status, its decisions, its node exclusions,
   its attempts: `SQLiteStore.judge_records`), plus one `sacct` only when the policy has a
   spend budget. Nothing else the judge uses comes from outside.
2. judge: core/decide/judge.py `judge()`, pure: verdict + history + policy -> Judgement.
3. record: the judgement in ONE transaction (`record_judgement`: the attempt's last
   signals and end, the decision with its evidence, the blamed nodes, the job's status).
   A monitor killed before it leaves nothing; after it, its successor carries the rest out
   (daemon/resume.py `carry_out_recorded`).
4. carry out: tell the observers, cancel a job that still runs, give a queued successor
   the new exclusions, schedule the resubmission. Each is safe to repeat.

The loop hands itself in as a `JudgingLoop`: the few things only it can do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from oellm_autoexp.adapters.store.buffer import BufferedStore
from oellm_autoexp.adapters.store.sqlite_store import JobStatus, NewSignal, SQLiteStore
from oellm_autoexp.core.decide.exclusions import Exclusion, active_nodes, exclusions_from_blame
from oellm_autoexp.core.decide.judge import Judgement, judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import NodeHealth
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.judge_inputs import disk_if_save_failed, spend_of, unhealthy_after
from oellm_autoexp.daemon.watch import JobRuntime, LiveAttempt, job_history


class JudgingLoop(Protocol):
    """What the judge step needs from the monitor loop that runs it."""

    @property
    def store(self) -> SQLiteStore: ...

    @property
    def writes(self) -> BufferedStore: ...

    def record_end(self, live: LiveAttempt, ended: tuple[JobState, int | None], now: float) -> None:
        """Record an attempt's end (and its last signals) without a decision."""

    def announce(self, live: LiveAttempt, judgement: Judgement, now: float) -> None:
        """Tell the observers and the terminal what was decided."""

    def watching(self, live: LiveAttempt) -> bool:
        """True while the loop still watches the attempt (it has not seen its end)."""

    def cancel(self, live: LiveAttempt) -> None:
        """scancel the attempt (its end is then our own doing)."""

    def drop_successor(self, rt: JobRuntime, reason: str, now: float, *, after_attempt_no: int) -> None:
        """The job stops: its queued successor (restart.queued_successor) must never start."""

    def exclude_on_queued(self, rt: JobRuntime, now: float) -> None:
        """Give the job's queued attempts the current exclusion list."""

    def resubmit_after(
        self, rt: JobRuntime, after_s: float, exclude_nodes: tuple[str, ...], now: float
    ) -> None:
        """Schedule the job's next attempt at `after_s` (epoch seconds)."""


@dataclass(frozen=True)
class Gathered:
    """The judge's inputs from outside the attempt's own view."""

    user_cancelled: bool  # `autoexp cancel` stopped the job: its end is recorded, never restarted
    history: RestartHistory  # past decisions, active exclusions and, with a budget, the spend
    unhealthy: tuple[NodeHealth, ...] = ()  # the nodes Slurm reports unfit after a NODE_FAIL


def judge_attempt(
    loop: JudgingLoop,
    live: LiveAttempt,
    verdict: Verdict,
    now: float,
    *,
    ended: tuple[JobState, int | None] | None = None,
) -> Judgement:
    """Judge one verdict about `live`; record the judgement in one transaction, then carry it out."""
    rt = live.runtime
    gathered = gather(loop.store, live, verdict, now)
    judgement = judge(rt.policy, verdict, gathered.history, live.view.classifier.signals,
                      user_cancelled=gathered.user_cancelled, early_exit_is_end=rt.settings.early_exit_is_end,
                      allocation=live.nodes or live.attempt.nodes, unhealthy=gathered.unhealthy)  # fmt: skip
    if not judgement.record:  # still running and nothing to do yet: nothing is written
        live.waiting_on_fatal = verdict.trigger is Trigger.FATAL_LINE
        if ended is not None:
            loop.record_end(live, ended, now)
        return judgement
    excluding = record(loop.writes, live, judgement, now, ended=ended)
    loop.announce(live, judgement, now)
    carry_out(loop, live, judgement, now, excluding=excluding)
    return judgement


def gather(store: SQLiteStore, live: LiveAttempt, verdict: Verdict, now: float) -> Gathered:
    """One read of the store; one sacct when the policy has a spend budget, one `scontrol show
    node` for an attempt Slurm ended NODE_FAIL, one statvfs of the checkpoint dir after a failed save."""
    rt = live.runtime
    records = store.judge_records(rt.job.id)
    view = live.view
    history = job_history(
        records.decisions, live.attempt.attempt_no, view.last_iteration, view.first_iteration
    )
    history = replace(
        history,
        excluded_nodes=active_nodes(records.exclusions, rt.job.name, utc(now)),
        spent=spend_of(rt, records.attempts, utc(now)),
        checkpoint_disk=disk_if_save_failed(rt, live.view.cause()),
    )
    user_cancelled = records.job is not None and records.job.status == JobStatus.CANCELLED_BY_USER.value
    unhealthy = tuple(unhealthy_after(rt, verdict, live.nodes or live.attempt.nodes))
    return Gathered(user_cancelled, history, unhealthy)


def record(
    writes: BufferedStore,
    live: LiveAttempt,
    judgement: Judgement,
    now: float,
    *,
    ended: tuple[JobState, int | None] | None,
) -> bool:
    """Write the judgement in one transaction; True when it excludes nodes from the next attempts."""
    rt = live.runtime
    signals = unrecorded_signals(live, now)
    exclusions = new_exclusions(rt, judgement, utc(now))
    writes.record_judgement(rt.job.id, live.attempt.id, judgement, now=utc(now), signals=signals, ended=ended,
                            iteration=live.view.last_iteration, exclusions=exclusions)  # fmt: skip
    return bool(exclusions)


def new_exclusions(rt: JobRuntime, judgement: Judgement, now: datetime) -> list[Exclusion]:
    """The blamed nodes a judgement keeps off the next attempts (its rule asked for it)."""
    kept = [b for b in judgement.blame.blamed if b.node in judgement.effects.exclude_nodes]
    return exclusions_from_blame(rt.job.name, kept, now, timedelta(seconds=rt.settings.exclusion_ttl_s))


def unrecorded_signals(live: LiveAttempt, now: float) -> list[NewSignal]:
    """The classifier's signals not yet in the store (and, from now on, counted as stored)."""
    signals = live.view.classifier.signals
    fresh = signals[live.signals_recorded :]
    live.signals_recorded = len(signals)
    return [
        NewSignal(s.pattern, s.error_type, s.subsystem, s.role, s.line_no, s.line, utc(now)) for s in fresh
    ]


def carry_out(
    loop: JudgingLoop, live: LiveAttempt, judgement: Judgement, now: float, *, excluding: bool
) -> None:
    """Act on a recorded judgement: cancel, pass exclusions on, schedule the resubmission."""
    rt, effects = live.runtime, judgement.effects
    if excluding:
        loop.exclude_on_queued(rt, now)
    if judgement.outcome.still_running:
        live.decided_early = True
    if judgement.decision.action in (DecisionAction.STOP, DecisionAction.NOTIFY):  # stop file, cancel
        loop.drop_successor(rt, judgement.decision.reason, now, after_attempt_no=live.attempt.attempt_no)
    if effects.cancel and loop.watching(live):
        live.cancelled_by_monitor = True
        loop.cancel(live)
    if effects.resubmit_after_s is not None:
        loop.resubmit_after(rt, effects.resubmit_after_s, effects.exclude_nodes, now)

"""Fan-out: one attempt submitted as its best K strategies at once; the first to run wins.

The submitter records the attempt's intent (tag T) as always, then hands it here (`launch`):
every strategy variant is estimated with `sbatch --test-only` (plan/strategies.py ranks them),
and the best K are submitted, each with its own intent recorded first and its own tag
(`T-c1`, `T-c2`...; adapters/store/candidates.py). Each poll the monitor adds the open
candidates to its one squeue call and calls `settle`: the first candidate to run becomes the
attempt's job (the attempt is confirmed with its id) and every other one is cancelled in that
poll with ONE scancel (plan/fanout_pick.py: never two running for one attempt). A decision row
says which won and how long each waited; the winner's allocated GPU type is checked against
the one its strategy expects (`scontrol show job -d`), with a warning when they differ.

A restart is a fresh draw: the next attempt is estimated and ranked again, with the job's
excluded nodes passed to every estimate and candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.executors.factory import submit_plan, write_script
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.candidates import (
    CandidateInfo,
    candidates_for_attempt,
    close_candidate,
    confirm_candidate,
    record_candidate,
)
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, Intent, SQLiteStore
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.watch import JobRuntime
from oellm_autoexp.plan.fanout_pick import pick
from oellm_autoexp.plan.plan import JobPlan, log_path_for
from oellm_autoexp.plan.strategies import (
    Candidate,
    Strategy,
    best_per_strategy,
    format_wait,
    gpu_type_warning,
    rank,
    stored_strategy,
)
from oellm_autoexp.plan.strategy_plan import (
    has_strategies,
    job_strategies,
    submission_args,
    variants,
)

FANOUT_ACTION = "none"  # a decision row no budget counts: the race is a fact, not a restart
CANCEL_TRIES = 10  # polls a failed cancel of a losing candidate is retried before it is left to the user


@dataclass
class Race:
    """One attempt's open fan-out: its candidates best first."""

    rt: JobRuntime
    attempt: AttemptInfo
    candidates: list[CandidateInfo]


def applies(rt: JobRuntime) -> bool:
    """Strategies are used for Slurm jobs that list or derive them."""
    return isinstance(rt.executor, SlurmExecutor) and has_strategies(rt.plan.config.slurm)


def estimate_all(
    executor: SlurmExecutor, plan: JobPlan, extra: Sequence[str], script: Path | None = None
) -> list[Candidate]:
    """Every strategy variant of the plan with its `--test-only` estimate, ranked (refused last).

    `script`: the rendered script to test (default: the plan's, written to its place).
    """
    slurm = plan.config.slurm
    script = script or write_script(plan)
    found = []
    for strategy in variants(slurm, job_strategies(slurm)):
        args = [*plan.sbatch_args, *extra, *submission_args(slurm, strategy)[0]]
        found.append(Candidate(strategy, executor.estimate(script, args)))
    return rank(found)


class FanOut:
    def __init__(
        self, store: SQLiteStore, say: Callable[[str], None],
        schedule: Callable[[int, float, tuple[str, ...]], None],
    ) -> None:  # fmt: skip
        self.store = store
        self._say = say
        self._schedule = schedule  # the submitter's: a race with no candidate left is retried
        self._races: dict[int, Race] = {}  # attempt id -> open race
        # Losers whose scancel failed (a flaky controller): asked again at every poll, so that
        # one attempt never keeps two running jobs. executor name -> (executor, job id -> tries left).
        self._uncancelled: dict[str, tuple[Executor, dict[str, int]]] = {}

    def has_open(self) -> bool:
        return bool(self._races)

    def executors(self) -> dict[str, Executor]:
        return {race.rt.executor.name: race.rt.executor for race in self._races.values()}

    def open_ids(self, executor_name: str) -> list[str]:
        """The job ids of every queued candidate of this executor: they join the poll's one squeue."""
        return [c.executor_job_id for race in self._races.values() if race.rt.executor.name == executor_name
                for c in race.candidates if c.is_open and c.executor_job_id]  # fmt: skip

    # -- submitting ---------------------------------------------------------------------------

    def launch(
        self, rt: JobRuntime, plan: JobPlan, attempt: AttemptInfo, extra: Sequence[str], now: float
    ) -> None:
        """Estimate, rank and submit the best K candidates; ExecutorError if none could be submitted."""
        assert isinstance(rt.executor, SlurmExecutor)
        slurm = plan.config.slurm
        ranked = [
            c for c in best_per_strategy(estimate_all(rt.executor, plan, extra)) if not c.estimate.refused
        ]
        if not ranked:
            raise ExecutorError("Slurm refused every strategy (`autoexp plan --strategies` shows why)")
        submitted = 0
        for index, candidate in enumerate(ranked[: slurm.allocation.fan_out]):
            submitted += self._submit_one(rt, plan, attempt, index, candidate, extra, now)
        if not submitted:
            raise ExecutorError("no candidate could be submitted")
        self._races[attempt.id] = Race(rt, attempt, self._submitted(attempt.id))
        names = ", ".join(
            f"{c.strategy} (job {c.executor_job_id}, start {c.estimate})"
            for c in self._races[attempt.id].candidates
        )
        self._say(f"{rt.job.name} attempt {attempt.attempt_no}: fan-out over {names}")

    def _submit_one(
        self, rt: JobRuntime, plan: JobPlan, attempt: AttemptInfo, index: int, candidate: Candidate,
        extra: Sequence[str], now: float,
    ) -> bool:  # fmt: skip
        strategy = candidate.strategy
        args, warning = submission_args(plan.config.slurm, strategy)
        if warning:
            self._say(f"warning: {rt.job.name}: {warning}")
        tag = f"{attempt.submit_tag}-c{index + 1}"
        estimate = (
            candidate.estimate.start.isoformat()
            if candidate.estimate.start
            else candidate.estimate.describe(utc(now))
        )
        shape = {**asdict(strategy), "args": args}
        cid = record_candidate(
            self.store, attempt.id, index, strategy.label, shape, tag, estimate, now=utc(now)
        )
        try:
            job_id = submit_plan(rt.executor, plan, [*extra, *args, f"--comment={tag}"])
        except ExecutorError as exc:
            found = self._find(rt, tag)
            if found is None:
                self._say(f"✗ {rt.job.name}: candidate {strategy.label} not submitted: {exc}")
                close_candidate(self.store, cid, "abandoned", now=utc(now))
                return False
            job_id = found
        confirm_candidate(self.store, cid, job_id, now=utc(now))
        return True

    def _find(self, rt: JobRuntime, tag: str) -> str | None:
        try:
            return rt.executor.find_by_tag(tag)
        except ExecutorError:
            return None

    def _submitted(self, attempt_id: int) -> list[CandidateInfo]:
        return [c for c in candidates_for_attempt(self.store, attempt_id) if c.executor_job_id]

    # -- resuming -----------------------------------------------------------------------------

    def is_racing(self, job_id: int) -> bool:
        """True while one of the job's attempts has candidates queued here."""
        return any(race.rt.job.id == job_id for race in self._races.values())

    def holds(self, rt: JobRuntime, now: float) -> bool:
        """True if one of the job's attempts is racing: open here, or resumed from the store now."""
        if self.is_racing(rt.job.id):
            return True
        unconfirmed = [a for a in self.store.attempts_for_job(rt.job.id) if a.intent == Intent.INTENDED.value]
        return any(self.resume(rt, attempt, now) for attempt in unconfirmed)

    def resume(self, rt: JobRuntime, attempt: AttemptInfo, now: float) -> bool:
        """Re-open an unconfirmed attempt's race from its stored candidates; False if it has none."""
        stored = candidates_for_attempt(self.store, attempt.id)
        if not stored:
            return False
        for candidate in stored:
            if candidate.intent == Intent.INTENDED.value:
                found = self._find(rt, candidate.submit_tag)
                if found is None:
                    close_candidate(self.store, candidate.id, "abandoned", now=utc(now))
                else:
                    confirm_candidate(self.store, candidate.id, found, now=utc(now))
        self._races[attempt.id] = Race(rt, attempt, self._submitted(attempt.id))
        self._say(f"{rt.job.name} attempt {attempt.attempt_no}: fan-out resumed")
        return True

    # -- each poll ----------------------------------------------------------------------------

    def settle(
        self, executor_name: str, records: Mapping[str, JobRecord], now: float
    ) -> list[tuple[JobRuntime, AttemptInfo]]:
        """Decide every open race of this executor from this poll's records.

        Returns the attempts whose winner is now their job: the monitor watches them from here on.
        """
        self._retry_cancels(executor_name)
        won: list[tuple[JobRuntime, AttemptInfo]] = []
        for race in list(self._races.values()):
            if race.rt.executor.name != executor_name:
                continue
            attempt = self._settle_one(race, records, now)
            if attempt is not None:
                won.append((race.rt, attempt))
        return won

    def _settle_one(self, race: Race, records: Mapping[str, JobRecord], now: float) -> AttemptInfo | None:
        open_ = [c for c in race.candidates if c.is_open]
        order = [c.executor_job_id or "" for c in open_]
        result = pick(order, {i: records[i].state for i in order if i in records})
        by_id = {c.executor_job_id: c for c in open_}
        for job_id in result.out:
            close_candidate(self.store, by_id[job_id].id, "out", now=utc(now))
        if result.out:
            race.candidates = self._submitted(race.attempt.id)
        if result.winner is None:
            if set(result.out) == set(order):
                self._give_up(race, now)
            return None
        self._cancel(race, result.cancel)
        return self._crown(race, by_id[result.winner], [by_id[j] for j in result.cancel], records, now)

    def _cancel(self, race: Race, job_ids: Sequence[str]) -> None:
        if job_ids and not self._cancel_now(race.rt.executor, job_ids):
            _, pending = self._uncancelled.setdefault(race.rt.executor.name, (race.rt.executor, {}))
            pending.update(dict.fromkeys(job_ids, CANCEL_TRIES))

    def _cancel_now(self, executor: Executor, job_ids: Sequence[str]) -> bool:
        try:
            if isinstance(executor, SlurmExecutor):
                executor.cancel_many(job_ids)
            else:
                for job_id in job_ids:
                    executor.cancel(job_id)
        except ExecutorError as exc:
            self._say(f"warning: cancelling fan-out candidates {', '.join(job_ids)} failed: {exc}")
            return False
        return True

    def _retry_cancels(self, executor_name: str) -> None:
        executor, pending = self._uncancelled.get(executor_name, (None, {}))
        if executor is None or not pending:
            return
        if self._cancel_now(executor, list(pending)):
            del self._uncancelled[executor_name]
            return
        for job_id in list(pending):
            pending[job_id] -= 1
            if pending[job_id] <= 0:
                del pending[job_id]
                self._say(f"ERROR: fan-out candidate {job_id} could not be cancelled after {CANCEL_TRIES} "
                          f"polls: cancel it by hand (scancel {job_id})")  # fmt: skip

    def _crown(
        self, race: Race, winner: CandidateInfo, losers: list[CandidateInfo], records: Mapping[str, JobRecord],
        now: float,
    ) -> AttemptInfo:  # fmt: skip
        rt, attempt, when = race.rt, race.attempt, utc(now)
        job_id = winner.executor_job_id or ""
        allocated = self._allocated(rt, job_id)
        for loser in losers:
            close_candidate(self.store, loser.id, "cancelled", now=when)
        close_candidate(self.store, winner.id, "won", now=when, gpu_types=",".join(allocated))
        self.store.confirm_submitted(attempt.id, job_id, now=when, log_path=log_path_for(rt.plan, job_id))
        reason, evidence = race_record(winner, losers, allocated, when)
        self.store.record_decision(rt.job.id, attempt_id=attempt.id, action=FANOUT_ACTION, reason=reason,
                                   now=when, evidence=evidence)  # fmt: skip
        self._say(f"{rt.job.name} attempt {attempt.attempt_no}: {reason}")
        warning = gpu_type_warning(strategy_of(winner), allocated)
        if warning:
            self._say(f"warning: {rt.job.name} attempt {attempt.attempt_no} (job {job_id}): {warning}")
        del self._races[attempt.id]
        latest = self.store.latest_attempt(rt.job.id)
        assert latest is not None and latest.id == attempt.id
        return latest

    def _allocated(self, rt: JobRuntime, job_id: str) -> tuple[str, ...]:
        if not isinstance(rt.executor, SlurmExecutor):
            return ()
        try:
            return rt.executor.allocated_gpu_types(job_id)
        except ExecutorError:
            return ()  # ended and forgotten already: the type stays unknown

    def _give_up(self, race: Race, now: float) -> None:
        """Every candidate dropped out before running: abandon the attempt, submit afresh later."""
        rt = race.rt
        self.store.abandon_intent(race.attempt.id, now=utc(now))
        del self._races[race.attempt.id]
        self._say(f"✗ {rt.job.name} attempt {race.attempt.attempt_no}: every candidate ended before running;"
                  f" retrying in {rt.settings.submit_retry_s:g} s")  # fmt: skip
        self._schedule(rt.job.id, now + rt.settings.submit_retry_s, ())


def strategy_of(candidate: CandidateInfo) -> Strategy:
    """The stored strategy of a candidate (its shape as recorded)."""
    return stored_strategy(candidate.strategy_json)


def race_record(
    winner: CandidateInfo, losers: Sequence[CandidateInfo], allocated: Sequence[str], now: datetime
) -> tuple[str, dict[str, object]]:
    """The decision row of a race: which won, how long each waited, the GPU types allocated."""

    def waited(c: CandidateInfo) -> float:
        return max(0.0, (now - (c.submitted_at or c.intended_at)).total_seconds())

    lost = "; ".join(f"{c.strategy} cancelled after {format_wait(waited(c))}" for c in losers)
    reason = (
        f"fan-out: {winner.strategy} (job {winner.executor_job_id}) won after {format_wait(waited(winner))}"
    )
    evidence = {
        "fanout": [
            {
                "strategy": c.strategy,
                "job": c.executor_job_id,
                "waited_s": round(waited(c), 3),
                "outcome": "won" if c is winner else "cancelled",
                "estimate": c.estimate,
            }
            for c in (winner, *losers)
        ],
        "gpu_types": list(allocated),
    }
    return (f"{reason}; {lost}" if lost else reason), evidence

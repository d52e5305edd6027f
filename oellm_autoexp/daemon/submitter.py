"""Submitting attempts without ever submitting one twice.

Each attempt is rendered from the job's stored config (plan/attempt_plan.py): its
number and the previous attempt's cause in its environment, and the override set
of the last adaptive restart applied.

Protocol: record the intent (with a unique tag) BEFORE sbatch, pass the tag as
`--comment`, confirm the executor's job id after. A monitor that died in
between finds an unconfirmed intent on resume and asks the executor for the
tag: found, the job is adopted; not found, the intent is abandoned and the
attempt submitted afresh, but only once the intent is older than the
executor's `settle_s` (sbatch's timeout plus the controller's lag): a younger
one's sbatch may still be running, so the submission is tried again later.
Exactly one job per attempt, whatever dies when. A failed sbatch spends no
retry budget: the submission is tried again after `submit_retry_s`. An sbatch
that timed out may have submitted anyway: its intent stays open and is
resolved by its tag the same way.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from oellm_autoexp.adapters.executors.base import ExecutorError, ExecutorTimeout
from oellm_autoexp.adapters.executors.factory import submit_plan
from oellm_autoexp.adapters.store.buffer import is_disk_full
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, Intent, SQLiteStore
from oellm_autoexp.core.decide.judge import attempt_overrides, previous_cause
from oellm_autoexp.core.decide.suspicion import restarted_failures, suspicion
from oellm_autoexp.core.jobs.job_status import JobStatus
from oellm_autoexp.daemon.cancels import Cancels
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.fanout import FanOut
from oellm_autoexp.daemon.fanout import applies as fanout_applies
from oellm_autoexp.daemon.successor import Successors, stop_env
from oellm_autoexp.daemon.watch import JobRuntime, past_decisions
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.attempt_plan import attempt_plan, checks_on_suspicion
from oellm_autoexp.plan.plan import JobPlan, log_path_for


class IntentUnsettled(Exception):
    """An unconfirmed intent too young to abandon: its sbatch may still submit the job."""

    def __init__(self, message: str, ready_at_s: float) -> None:
        super().__init__(message)
        self.ready_at_s = ready_at_s  # when it may be abandoned if its tag is still unknown


def submit_tag(session_id: int, job_id: int, attempt_no: int, generation: int | None = None) -> str:
    """Unique per submission; safe inside an sbatch --comment (no spaces or quotes).

    `generation`: the submitting monitor's lock generation (core/jobs/strays.py `tag_generation`).
    """
    suffix = f"-g{generation}" if generation is not None else ""
    return f"autoexp-{session_id}-{job_id}-{attempt_no}-{uuid.uuid4().hex[:8]}{suffix}"


class Submitter:
    def __init__(
        self, store: SQLiteStore, say: Callable[[str], None], cancels: Cancels | None = None
    ) -> None:
        self.store = store
        self._say = say
        self._due: dict[int, tuple[float, tuple[str, ...]]] = {}  # job id -> (when, --exclude nodes)
        self._retry = True  # the current submit() call's
        self.fanout = FanOut(store, say, self.schedule)  # attempts with allocation strategies
        self.successors = Successors(store, say, time.time(), cancels)  # restart.queued_successor

    def schedule(self, job_id: int, at_s: float, exclude_nodes: tuple[str, ...]) -> None:
        self._due[job_id] = (at_s, exclude_nodes)

    def has_due(self) -> bool:
        return bool(self._due)

    def take_due(self, now: float) -> list[tuple[int, tuple[str, ...]]]:
        ready = [(job_id, nodes) for job_id, (at_s, nodes) in self._due.items() if at_s <= now]
        for job_id, _ in ready:
            del self._due[job_id]
        return ready

    def submit(
        self,
        rt: JobRuntime,
        exclude_nodes: tuple[str, ...],
        now: float,
        *,
        first_only: Sequence[str] = (),
        retry: bool = True,
    ) -> AttemptInfo | None:
        """Submit the job's next attempt; None if the executor refused (retried later if `retry`).

        `first_only` are sbatch args for this submission alone (a `--dependency`
        names jobs that a restart must not wait for again). `retry=False` (a first
        submission): a refusal is reported as final and nothing is scheduled.
        """
        self._retry = retry
        job = rt.job
        if self.fanout.holds(rt, now):
            return None  # an attempt's candidates are still racing (or were, before a restart)
        try:
            adopted = self._adopt_pending(rt, now)
        except ExecutorError as exc:
            self._retry_later(rt, exclude_nodes, now, f"cannot check earlier submissions: {exc}")
            return None
        except IntentUnsettled as exc:
            self._say(f"{job.name}: {exc}; checking again in {exc.ready_at_s - now:.0f} s")
            self.schedule(job.id, exc.ready_at_s, exclude_nodes)
            return None
        if adopted is not None:
            return adopted
        queued = self.successors.adopt(rt, exclude_nodes, now)
        if queued is not None:
            return queued  # Slurm starts (or started) it when its predecessor failed
        held = self.successors.cancels.holding(job.id, now)
        if held:
            # The successor adopt had to cancel (it runs on a node now excluded) may still run: its
            # scancel failed. Never a second attempt beside it; tried again at its next cancel.
            self._say(
                f"{job.name}: not submitting while its queued successor may still run (its scancel failed)"
            )
            self.schedule(job.id, min(f.retry_at_s for f in held), exclude_nodes)
            return None
        attempt_no = self.store.next_attempt_no(job.id)
        plan = self._attempt_plan(rt, attempt_no, now)
        if plan is None:
            return None
        tag = submit_tag(job.session_id, job.id, attempt_no, self.store.fence_generation(job.session_id))
        try:
            attempt_id = self.store.record_intent(job.id, attempt_no, tag, now=utc(now))
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            # No intent on disk, no sbatch: a job the store cannot remember must not be started.
            self._retry_later(
                rt, exclude_nodes, now, f"the state dir is full, cannot record attempt {attempt_no}"
            )
            return None
        extra = [*first_only]
        if exclude_nodes:
            extra.append(f"--exclude={','.join(exclude_nodes)}")
        if fanout_applies(rt):
            self._fan_out(rt, plan, attempt_id, extra, exclude_nodes, now)
            return None  # the monitor watches the attempt once a candidate wins
        extra.append(f"--comment={tag}")
        self.store.check_fence()  # a monitor paused since its intent was recorded must not submit now
        try:
            executor_id = submit_plan(rt.executor, plan, extra, env=stop_env(self.store.path.parent, job.id))
        except ExecutorError as exc:
            # sbatch may have failed after the controller took the job: ask for the tag.
            try:
                found = self._find(rt, tag)
            except ExecutorError:
                self._retry_later(rt, exclude_nodes, now, str(exc))
                return None  # the intent stays open: resolved by its tag before the next try
            if found is None and isinstance(exc, ExecutorTimeout):
                self._retry_later(rt, exclude_nodes, now, f"{exc}; it may still submit")
                return None  # open until it is found or older than the executor's settle time
            if found is None:
                self.store.abandon_intent(attempt_id, now=utc(now))
                self._retry_later(rt, exclude_nodes, now, str(exc))
                return None
            executor_id = found
        try:
            self._confirm(rt, attempt_id, executor_id, now)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            # The intent is on disk: the next try finds the job by its tag and adopts it.
            self._retry_later(rt, exclude_nodes, now, f"job {executor_id} runs but the state dir is full")
            return None
        self._say(f"✓ Submitted {job.name} attempt {attempt_no}: job {executor_id}")
        submitted = self.store.find_attempt_by_tag(tag)
        if submitted is not None:
            self.successors.queue_behind(rt, submitted, exclude_nodes, now)
        return submitted

    def _fan_out(
        self, rt: JobRuntime, plan: JobPlan, attempt_id: int, extra: list[str], exclude_nodes: tuple[str, ...],
        now: float,
    ) -> None:  # fmt: skip
        attempt = next(a for a in self.store.attempts_for_job(rt.job.id) if a.id == attempt_id)
        try:
            self.fanout.launch(rt, plan, attempt, extra, now)
        except ExecutorError as exc:
            self.store.abandon_intent(attempt_id, now=utc(now))
            self._retry_later(rt, exclude_nodes, now, str(exc))

    def _attempt_plan(self, rt: JobRuntime, attempt_no: int, now: float) -> JobPlan | None:
        """The attempt's own plan (plan/attempt_plan.py); None, and the job stopped, if it cannot be made.

        Override sets were checked when the session started, so this only fails for a
        session started by an older autoexp or a config changed under it.
        """
        decisions = past_decisions(self.store.decisions_for_job(rt.job.id))
        # A recent failure that may be a node's and named none: the pre-flight check on suspicion.
        window_s = rt.plan.config.preflight.suspicion_h * 3600.0
        suspect = suspicion(restarted_failures(decisions), now, window_s)
        cause = (suspect.cause or "unknown") if suspect is not None else None
        if checks_on_suspicion(rt.plan, cause):
            self._say(
                f"{rt.job.name} attempt {attempt_no}: pre-flight check on suspicion ({cause}, no node named)"
            )
        try:
            return attempt_plan(
                rt.plan, attempt_no, previous_cause(decisions), attempt_overrides(decisions), cause
            )
        except UserError as exc:
            self._say(f"✗ {rt.job.name} attempt {attempt_no}: cannot render: {exc}; stopping the job")
            self.store.set_job_status(
                rt.job.id, JobStatus.STOPPED.value, f"cannot render attempt {attempt_no}: {exc}"
            )
            return None

    def _adopt_pending(self, rt: JobRuntime, now: float) -> AttemptInfo | None:
        for attempt in self.store.attempts_for_job(rt.job.id):
            if attempt.intent == Intent.INTENDED.value:
                adopted = self.resolve_intent(rt, attempt, now)
                if adopted is not None:
                    return adopted
        return None

    def _retry_later(self, rt: JobRuntime, exclude_nodes: tuple[str, ...], now: float, why: str) -> None:
        if not self._retry:
            self._say(f"✗ submitting {rt.job.name} failed: {why}; not retried")
            return
        self._say(f"✗ submitting {rt.job.name} failed: {why}; retrying in {rt.settings.submit_retry_s:g} s")
        self.schedule(rt.job.id, now + rt.settings.submit_retry_s, exclude_nodes)

    def resolve_intent(self, rt: JobRuntime, attempt: AttemptInfo, now: float) -> AttemptInfo | None:
        """An intent a dead monitor left unconfirmed: adopt the job if the executor knows the tag.

        Not found and younger than the executor's settle time: IntentUnsettled (its
        sbatch may still be running); not found and older: abandoned.
        """
        executor_id = self._find(rt, attempt.submit_tag)
        age_s = now - attempt.intended_at.timestamp()
        if executor_id is None and age_s < rt.executor.settle_s:
            raise IntentUnsettled(
                f"attempt {attempt.attempt_no}'s sbatch may still be running (its intent is"
                f" {max(age_s, 0.0):.0f} s old, settled at {rt.executor.settle_s:g} s); not resubmitting yet",
                now + rt.executor.settle_s - age_s,
            )
        if executor_id is None:
            self.store.abandon_intent(attempt.id, now=utc(now))
            self._say(f"{rt.job.name} attempt {attempt.attempt_no}: never reached the executor; abandoned")
            return None
        self._confirm(rt, attempt.id, executor_id, now)
        self._say(f"{rt.job.name} attempt {attempt.attempt_no}: adopted job {executor_id} by its tag")
        return self.store.find_attempt_by_tag(attempt.submit_tag)

    def _confirm(self, rt: JobRuntime, attempt_id: int, executor_id: str, now: float) -> None:
        log_path = log_path_for(rt.plan, executor_id)
        self.store.confirm_submitted(attempt_id, executor_id, now=utc(now), log_path=log_path)

    def _find(self, rt: JobRuntime, tag: str) -> str | None:
        """The executor's id for a submission tag; ExecutorError when it cannot tell."""
        return rt.executor.find_by_tag(tag)

"""Fan-out: which of one attempt's queued candidates wins, and which are cancelled. Pure.

The candidates of one attempt are all in the one squeue call of a poll. The first to run wins;
where several run in the same poll the best-ranked one wins (its rank is its index in the
attempt's order), and every other live candidate is cancelled in that poll: never two running
for one attempt. A candidate cancelled by someone else is out; when all are out, the attempt
has no winner. A candidate that ran and failed is the winner: the attempt's end is judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oellm_autoexp.core.jobs.job_state import JobState

# Queued or unseen: still in the race. CANCELLED (by someone else): out. Anything else has run
# (or ended as a run: FAILED, TIMEOUT... are judged as the attempt's end, never hidden by a race).
_WAITING = (JobState.PENDING, JobState.REQUEUED, JobState.UNKNOWN)


@dataclass(frozen=True)
class FanoutPick:
    """The outcome of one poll for one attempt: the winner (or None), what to cancel, what is out."""

    winner: str | None
    cancel: tuple[str, ...] = ()
    out: tuple[str, ...] = ()  # cancelled by someone else before running


def pick(order: Sequence[str], states: Mapping[str, JobState]) -> FanoutPick:
    """Decide one poll: `order` is the candidates' job ids best first, `states` what squeue/sacct said.

    A job that started and ended between two polls is only in sacct: it has run all the same.
    """
    seen = {job_id: states.get(job_id, JobState.UNKNOWN) for job_id in order}
    out = tuple(j for j, state in seen.items() if state is JobState.CANCELLED)
    ran = [j for j, state in seen.items() if state not in _WAITING and j not in out]
    if not ran:
        return FanoutPick(None, (), out)
    winner = ran[0]
    cancel = tuple(j for j in order if j != winner and j not in out)
    return FanoutPick(winner, cancel, out)

"""Stray jobs: live jobs that carry one of our sessions' submit tags but are no attempt we watch. Pure.

The net under "exactly one job per attempt": an sbatch that outlived its monitor,
a job submitted twice by hand with a copied tag. Every poll, the jobs carrying a
tag (read in the same squeue call as the watched ones) are matched against the
attempts the store knows; a job whose tag the store recorded but which is not
the attempt it watches is cancelled, with a reason. A tag the store never
recorded is left alone: session numbers are per state dir, so it may be
another experiment's. A job whose tag belongs to an unconfirmed intent is not a stray: the
submitter adopts it by its tag.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from oellm_autoexp.core.jobs.job_state import JobState, is_alive

TAG_PREFIX = "autoexp-"
# submit_tag(): autoexp-<session>-<job>-<attempt>-<8 hex>[-g<generation>]; the generation is the
# submitting monitor's lock generation (its fencing token: Slurm checks none, so it travels in the
# job's comment). A fan-out candidate adds -c<N> (daemon/fanout.py) and belongs to the same attempt.
_TAG = re.compile(r"^(autoexp-(\d+)-(\d+)-(\d+)-[0-9a-f]{8}(?:-g(\d+))?)(?:-c\d+)?$")
_UNCONFIRMED = "intended"
_ABANDONED = "abandoned"


@dataclass(frozen=True)
class TaggedJob:
    """A job the executor lists with a submit tag (squeue's comment)."""

    executor_id: str
    tag: str
    state: JobState


@dataclass(frozen=True)
class KnownAttempt:
    """An attempt as the store records it."""

    attempt_id: int
    job_id: int
    attempt_no: int
    tag: str
    executor_id: str | None
    intent: str  # store_schema.Intent value
    ended: bool


@dataclass(frozen=True)
class Stray:
    """A job to cancel, the store's job and attempt its tag belongs to, and why."""

    executor_id: str
    tag: str
    job_id: int
    attempt_id: int
    reason: str


def parse_tag(tag: str) -> tuple[int, int, int] | None:
    """`autoexp-3-7-2-1a2b3c4d` -> (session 3, job 7, attempt 2); None for any other comment."""
    match = _TAG.match(tag.strip())
    return (int(match[2]), int(match[3]), int(match[4])) if match else None


def tag_generation(tag: str) -> int | None:
    """The lock generation of the monitor that submitted the job (`-g<N>`); None for older tags."""
    match = _TAG.match(tag.strip())
    return int(match[5]) if match and match[5] else None


def attempt_tag(tag: str) -> str:
    """The attempt's own tag: a fan-out candidate's `-c<N>` dropped."""
    match = _TAG.match(tag.strip())
    return match[1] if match else tag


def find_strays(
    tagged: Iterable[TaggedJob], known: Iterable[KnownAttempt], session_ids: Collection[int]
) -> list[Stray]:
    """The live jobs of `session_ids` (by their tag) that are not the attempt the store tracks."""
    by_tag = {a.tag: a for a in known}
    strays = []
    for job in tagged:
        parsed = parse_tag(job.tag)
        attempt = by_tag.get(attempt_tag(job.tag))
        if parsed is None or parsed[0] not in session_ids or attempt is None or not is_alive(job.state):
            # A tag this store never recorded may be another state dir's session of the same number.
            continue
        reason = _why_stray(job, attempt, parsed[0])
        if reason is not None:
            strays.append(Stray(job.executor_id, job.tag, attempt.job_id, attempt.attempt_id, reason))
    return strays


def _why_stray(job: TaggedJob, attempt: KnownAttempt, session: int) -> str | None:
    where = f"job {job.executor_id} ({job.state.value}) carries session {session}'s tag {job.tag}"
    attempt_no = attempt.attempt_no
    if attempt.intent == _UNCONFIRMED:
        return None  # its submission is being resolved: adopted by its tag, never doubled
    if attempt.intent == _ABANDONED:
        return (
            f"{where}: attempt {attempt_no} was given up before this job reached Slurm (an orphaned sbatch)"
        )
    if attempt.executor_id != job.executor_id:
        return f"{where}: attempt {attempt_no} is job {attempt.executor_id}; this one is a second submission"
    if attempt.ended:
        return f"{where}: attempt {attempt_no} was recorded as ended; its job must not run on"
    return None

"""Which checkpoint a run resumes from, and the rollback when the newest is incomplete. Pure.

A run's checkpoint directory holds Megatron's tracker `latest_checkpointed_iteration.txt`
(the iteration Megatron loads; `release` for converted checkpoints) and `iter_NNNNNNN/`
directories, or the project's workload files `iter_NNNNNNN.pt`. Megatron loads whatever the
tracker names, and megatron-core refuses to save into a non-empty directory, so an
incomplete `iter_*` newer than the tracker must go too: the run would die at its next save.

The walk goes newest first and stops at the first checkpoint at or below the tracker's
iteration that is not incomplete; everything incomplete on the way is moved aside as
`failed_<name>` (never deleted) and the tracker is pointed at the one found. At most
`max_rollbacks` moves per run, counted from the `failed_iter_*` entries on disk unless the
caller passes its own count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from oellm_autoexp.core.checkpoint.verdict import CheckpointVerdict

RunStatus = Literal["complete", "incomplete", "unverifiable", "empty"]

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"  # megatron's name; the workloads use it too
FAILED_PREFIX = "failed_"  # an incomplete checkpoint moved aside: failed_iter_0000300
DEFAULT_MAX_ROLLBACKS = 2
_CHECKPOINT = re.compile(r"^iter_(\d+)(?:\.pt)?$")


@dataclass(frozen=True)
class RunListing:
    """The names in a run's checkpoint directory and its tracker's text (None: no tracker)."""

    names: tuple[str, ...]
    tracker_text: str | None

    @property
    def checkpoints(self) -> list[tuple[int, str]]:
        """(iteration, name) of every checkpoint, newest first."""
        found = ((_CHECKPOINT.match(n), n) for n in self.names)
        return sorted(((int(m.group(1)), n) for m, n in found if m), reverse=True)

    @property
    def rollbacks_on_disk(self) -> int:
        return sum(1 for n in self.names if n.startswith(FAILED_PREFIX + "iter_"))


@dataclass(frozen=True)
class RollbackPlan:
    """Moves (name -> aside name, in this order) and the tracker's new text."""

    moves: tuple[tuple[str, str], ...]
    tracker_text: str | None  # None: the tracker is right as it is
    resume_iteration: int
    rollbacks_after: int
    max_rollbacks: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "moves": [list(m) for m in self.moves],
            "tracker": self.tracker_text,
            "resume_iteration": self.resume_iteration,
            "rollbacks_after": self.rollbacks_after,
            "max_rollbacks": self.max_rollbacks,
        }


@dataclass(frozen=True)
class RunVerdict:
    """The run's verdict: may it resume, from where, and what a rollback would do."""

    status: RunStatus
    iteration: int | None  # the iteration a resume starts from (None: from scratch / unknown)
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    judged: tuple[tuple[str, CheckpointVerdict], ...] = ()
    plan: RollbackPlan | None = None
    refused: str | None = None  # why no rollback is possible (budget spent, nothing complete)

    @property
    def may_resume(self) -> bool:
        return self.status in ("complete", "empty")

    def summary(self) -> str:
        """One line for a decision record or the CLI."""
        where = f"iteration {self.iteration}" if self.iteration is not None else "no checkpoint"
        head = {
            "complete": f"complete: resume from {where}",
            "empty": "no checkpoint yet: the run starts from scratch",
            "incomplete": "incomplete",
            "unverifiable": "unverifiable",
        }[self.status]
        detail = "; ".join(self.problems[:3]) + (
            f" (+{len(self.problems) - 3} more)" if len(self.problems) > 3 else ""
        )
        return f"{head}: {detail}" if detail else head

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "iteration": self.iteration,
            "summary": self.summary(),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "checkpoints": {name: v.to_dict() for name, v in self.judged},
            "rollback": self.plan.to_dict() if self.plan else None,
            "refused": self.refused,
        }


@dataclass
class _Walk:
    bad: list[tuple[int, str]] = field(default_factory=list)
    resume: tuple[int, str] | None = None


def parse_tracker(text: str | None) -> int | str | None:
    """The tracker's iteration; 'release'; None when absent. Anything else: the raw text (bad)."""
    if text is None:
        return None
    value = text.strip()
    return int(value) if value.isdigit() else value


def next_to_judge(listing: RunListing, verdicts: Mapping[str, CheckpointVerdict]) -> str | None:
    """The next checkpoint to read (newest first), or None once the resume point is known."""
    target = _target(listing)
    for iteration, name in listing.checkpoints:
        verdict = verdicts.get(name)
        if verdict is None:
            return name
        if iteration <= target and verdict.status != "incomplete":
            return None
    return None


def judge_run(
    listing: RunListing,
    verdicts: Mapping[str, CheckpointVerdict],
    max_rollbacks: int = DEFAULT_MAX_ROLLBACKS,
    rollbacks_done: int | None = None,
) -> RunVerdict:
    """The run's verdict from the checkpoints judged so far (see `next_to_judge`)."""
    tracker = parse_tracker(listing.tracker_text)
    judged = tuple((n, verdicts[n]) for _, n in listing.checkpoints if n in verdicts)
    if isinstance(tracker, str):
        what = "a release checkpoint" if tracker == "release" else f"{tracker!r}, not an iteration"
        return RunVerdict("unverifiable", None, (f"{TRACKER_FILENAME} names {what}; check it by hand",))
    if not listing.checkpoints and tracker is None:
        return RunVerdict("empty", None)
    walk = _walk(listing, verdicts)
    problems = [_named(name, p) for _, name in walk.bad for p in verdicts[name].problems]
    if tracker is not None and all(it != tracker for it, _ in listing.checkpoints):
        problems.insert(0, f"{TRACKER_FILENAME} names iteration {tracker}, which has no checkpoint")
    if walk.resume is not None and verdicts[walk.resume[1]].status == "unverifiable":
        found = [_named(walk.resume[1], p) for p in verdicts[walk.resume[1]].problems]
        return RunVerdict("unverifiable", walk.resume[0], tuple(found + problems), judged=judged)
    if not problems and walk.resume is not None:
        return RunVerdict("complete", walk.resume[0], notes=_notes(listing, tracker, walk), judged=judged)
    done = listing.rollbacks_on_disk if rollbacks_done is None else rollbacks_done
    plan, refused = _plan(listing, walk, tracker, done, max_rollbacks)
    iteration = walk.resume[0] if walk.resume else None
    return RunVerdict("incomplete", iteration, tuple(problems), judged=judged, plan=plan, refused=refused)


def rollback_line(verdict: RunVerdict) -> str:
    """The decision's evidence line: what was wrong, what was moved, where the tracker points."""
    if verdict.plan is None:
        return f"checkpoint {verdict.summary()}; no rollback: {verdict.refused}"
    plan = verdict.plan
    moved = ", ".join(f"{a} -> {b}" for a, b in plan.moves) or "nothing moved"
    return (
        f"checkpoint {verdict.summary()}; {moved}; resume from iteration {plan.resume_iteration} "
        f"(rollback {plan.rollbacks_after} of {plan.max_rollbacks})"
    )


# --------------------------------------------------------------------------- helpers


def _named(name: str, problem: str) -> str:
    """A problem prefixed with its checkpoint's name (once: a workload file names itself)."""
    return problem if problem.startswith(name + ":") else f"{name}: {problem}"


def _target(listing: RunListing) -> int:
    """The iteration a resume would load: the tracker's, else the newest checkpoint's."""
    tracker = parse_tracker(listing.tracker_text)
    if isinstance(tracker, int):
        return tracker
    checkpoints = listing.checkpoints
    return checkpoints[0][0] if checkpoints else -1


def _walk(listing: RunListing, verdicts: Mapping[str, CheckpointVerdict]) -> _Walk:
    target, walk = _target(listing), _Walk()
    for iteration, name in listing.checkpoints:
        verdict = verdicts.get(name)
        if verdict is None:
            break
        if verdict.status == "incomplete":
            walk.bad.append((iteration, name))
        elif iteration <= target:
            walk.resume = (iteration, name)
            break
    return walk


def _plan(
    listing: RunListing, walk: _Walk, tracker: int | None, done: int, max_rollbacks: int
) -> tuple[RollbackPlan | None, str | None]:
    if walk.resume is None:
        return None, "no complete checkpoint left to fall back to"
    after = done + len(walk.bad)
    if walk.bad and after > max_rollbacks:
        return (
            None,
            f"rollback budget spent: {done} of {max_rollbacks} rollbacks done, {len(walk.bad)} more needed",
        )
    taken = set(listing.names)
    moves = []
    for _, name in walk.bad:
        aside = aside_name(name, taken)
        taken.add(aside)
        moves.append((name, aside))
    resume = walk.resume[0]
    text = None if tracker == resume else str(resume)
    return RollbackPlan(tuple(moves), text, resume, after, max_rollbacks), None


def aside_name(name: str, taken: Iterable[str]) -> str:
    """`failed_iter_0000300`, or `failed_iter_0000300.2` (.3, ...) when that name is taken."""
    taken_set = set(taken)
    base = FAILED_PREFIX + name
    candidate, n = base, 1
    while candidate in taken_set:
        n += 1
        candidate = f"{base}.{n}"
    return candidate


def _notes(listing: RunListing, tracker: int | None, walk: _Walk) -> tuple[str, ...]:
    notes = []
    if tracker is None and walk.resume is not None and not walk.resume[1].endswith(".pt"):
        notes.append(f"no {TRACKER_FILENAME}: Megatron would start from scratch, not from {walk.resume[1]}")
    newer = [n for it, n in listing.checkpoints if walk.resume and it > walk.resume[0]]
    if newer:
        notes.append(
            f"newer than the tracker and complete: {', '.join(newer)} (Megatron loads the tracker's)"
        )
    tmp = [n for n in listing.names if n.startswith("iter_") and n.endswith(".tmp")]
    if tmp:
        notes.append(f"leftover saves cut short (ignored on resume): {', '.join(sorted(tmp))}")
    return tuple(notes)

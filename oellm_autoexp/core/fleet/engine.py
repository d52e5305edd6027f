"""What a policy is asked about a fault, and what it answers. No I/O.

The timeline (timeline.py) owns the clock, the checkpoints and the costs; a policy only
says, for each fault it meets, how long it takes to act and what it does:

- `restart` after `detect_s` (+ a cooldown), with the nodes it keeps out of the next attempt;
- `stop` after `detect_s`: the job waits for a human, paged (`notified`) or found at the
  next look;
- `human`: nobody acts, a human finds it `detect_s` later and does the right thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from oellm_autoexp.core.fleet.faults import Fault

RESTART, STOP, HUMAN = "restart", "stop", "human"


@dataclass(frozen=True)
class Strike:
    """A fault striking one attempt: the primary fault, or a repeat of one at start-up."""

    fault: Fault  # the fault whose lines the log shows (a repeat: the broken node's own fault)
    occurrence: int  # 0: the primary strike; n: the n-th repeat while handling one primary fault
    at_startup: bool  # the attempt never got to train (a repeat)
    # The highest iteration this attempt logged (for the restart budgets' refills); None for a
    # repeat: it died starting up, before its first iteration line, as the monitor sees it.
    iteration: int | None


@dataclass(frozen=True)
class Reaction:
    """A policy's answer to one strike."""

    action: str  # RESTART, STOP or HUMAN
    detect_s: float  # from the strike to the action
    delay_s: float = 0.0  # a cooldown before resubmitting
    excluded: frozenset[str] = frozenset()  # nodes kept out of the next attempt
    notified: bool = False  # a STOP pages a human (otherwise the next look finds it)
    why: str = ""  # the decision's reason, for the report
    cause: str | None = None  # what the policy thought it was (the classifier's error type)
    wrong_blame: int = 0  # healthy nodes it excluded
    preflight: bool = False  # the next attempt runs the pre-flight check (ours, on suspicion)
    extra: dict[str, str] = field(default_factory=dict)


class Policy(Protocol):
    """One supervisor under test."""

    name: str

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        """What it does about `strike` at `now` (`bad_nodes`: truly broken now, for the oracle)."""
        ...

    def human_took_over(self, now: float) -> None:
        """A human restarted the job by hand: a new session (budgets start again)."""
        ...

"""Should the next attempt run the pre-flight check: a failure that may be a node's named none. Pure.

A hang, an NCCL watchdog timeout or an NCCL error (a peer gone, a link down) is often one
node's fault (ByteRobust, arXiv 2509.16293 Table 2: 21 of 26 hangs on more than 2,000 GPUs were
infrastructure), but its lines seldom name the node: every rank waits on the same collective,
and NCCL's completion errors are printed by both ends of a broken connection. A restart then
lands on that node again whenever it is back in the allocation. The pre-flight check
(docs/preflight.md; with `pairwise`, the links between nodes) names such a node before training
starts, and the `preflight` rule restarts without it, charging no budget.

With `preflight.on_suspicion` the check runs only on the attempts that follow such a failure:
the one right after it, and every later one within `preflight.suspicion_h` of it (the node may
have been out of the next allocation and come back in a later one), so its seconds are paid
where a node is suspected, not on every attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oellm_autoexp.core.decide.judge import PastDecision
from oellm_autoexp.core.decide.nameless_causes import SUSPECT_CAUSES
from oellm_autoexp.core.decide.policy import DecisionAction


@dataclass(frozen=True)
class Failure:
    """One restarted failure, as far as suspicion goes."""

    time_s: float  # when the restart was decided
    cause: str | None  # its error type, else its kind
    blamed: tuple[str, ...]  # the nodes its evidence singled out


def suspects_a_node(failure: Failure) -> bool:
    """A failure a broken node can give, with no node named by its evidence."""
    return failure.cause in SUSPECT_CAUSES and not failure.blamed


def suspicion(restarts: Sequence[Failure], now_s: float, window_s: float) -> Failure | None:
    """The failure that makes the next attempt run the check, or None.

    The newest restart always counts; older ones while within `window_s` of `now_s`.
    """
    for i, failure in enumerate(reversed(restarts)):
        if i > 0 and now_s - failure.time_s > window_s:
            return None
        if suspects_a_node(failure):
            return failure
    return None


def restarted_failures(decisions: Sequence[PastDecision]) -> list[Failure]:
    """The job's stored restart decisions as failures, oldest first."""
    return [
        Failure(d.time_s, d.evidence.error_type or d.evidence.kind, d.evidence.blamed)
        for d in decisions
        if d.action == DecisionAction.RESTART.value
    ]

"""What a restart policy would do with one attempt ended by a given root-cause class. No I/O.

For scoring the classifier by its consequences (scripts/corpus_report.py, the corpus
test): a class error that leads to the same action costs little; one that stops a
healthy run's successor or restarts a configuration error costs a lot. The attempt is
taken as the job's first, ended FAILED with that root cause, with nothing spent yet,
so only the class decides (budgets never run out here).
"""

from __future__ import annotations

from enum import StrEnum

from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, RestartPolicy, decide
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome

# Classes whose evidence names a node (the node blame of core/decide/node_blame.py singles it out).
NODE_CLASSES = frozenset({"node_failure", "gpu_hardware"})
_NODE = "node-under-suspicion"  # a stand-in name: only whether some node is excluded matters


class ClassAction(StrEnum):
    RESTART = "restart"  # resubmit on any nodes
    RESTART_ELSEWHERE = "restart elsewhere"  # resubmit with the failing node excluded
    STOP = "stop"  # no restart (or a human is told)
    NOTHING = "nothing"  # no failure: nothing to decide


def action_for(error_type: str | None, policy: RestartPolicy) -> ClassAction:
    """What `policy` does with a first attempt that ended FAILED with root cause `error_type`.

    None (no cause: a healthy log) is NOTHING.
    """
    if error_type is None:
        return ClassAction.NOTHING
    blamed = (_NODE,) if error_type in NODE_CLASSES else ()
    outcome = Outcome(state=JobState.FAILED, error_type=error_type, node=blamed[0] if blamed else None)
    decision = decide(policy, outcome, RestartHistory(), now=0.0, blamed=blamed)
    if decision.action is DecisionAction.RESTART:
        return ClassAction.RESTART_ELSEWHERE if decision.exclude_nodes else ClassAction.RESTART
    if decision.action is DecisionAction.NONE:
        return ClassAction.NOTHING
    return ClassAction.STOP


def guessed_action_for(
    error_type: str | None, policy: RestartPolicy, unguessed: str | None = None
) -> ClassAction:
    """What the monitor does with a first attempt whose class was guessed from its words, as the judge
    does (core/decide/judge.py): the guess's action where it restarts; else, where the reading the
    guess replaced restarts, that restart (a guess never stops a run); else the guess's.

    `unguessed`: the class of the reading the guess replaced; None (no cause, or a failed attempt
    read only as a launcher's "exited 1") is a failed attempt with no class, which restarts as a crash.
    """
    action = action_for(error_type, policy)
    if action in (ClassAction.RESTART, ClassAction.RESTART_ELSEWHERE):
        return action
    plain = ClassAction.RESTART if unguessed is None else action_for(unguessed, policy)
    return plain if plain in (ClassAction.RESTART, ClassAction.RESTART_ELSEWHERE) else action

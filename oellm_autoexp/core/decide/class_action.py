"""What a restart policy would do with one attempt ended by a given root-cause class. No I/O.

For scoring the classifier by its consequences (scripts/corpus_report.py, the corpus
test): a class error that leads to the same action costs little; one that stops a
healthy run's successor or restarts a configuration error costs a lot. The attempt is
taken as the job's first, ended FAILED with that root cause, with nothing spent yet,
so only the class decides (budgets never run out here).
"""

from __future__ import annotations

from enum import StrEnum

from oellm_autoexp.core.classify.score import HEALTHY, Reading, Score, cause_of
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


_RESTARTS = (ClassAction.RESTART, ClassAction.RESTART_ELSEWHERE)


def action_for(error_type: str | None, policy: RestartPolicy) -> ClassAction:
    """What `policy` does with a first attempt that ended FAILED with root cause `error_type`.

    None (no cause: a healthy log) is NOTHING.
    """
    if error_type is None:
        return ClassAction.NOTHING
    return _failed_with(error_type, policy)


def unexplained_action(policy: RestartPolicy) -> ClassAction:
    """What `policy` does with a first attempt that ended FAILED and whose log gave no cause: the
    monitor judges it a crash (core/decide/judge.py), which a transient rule restarts."""
    return _failed_with(None, policy)


def _failed_with(error_type: str | None, policy: RestartPolicy, *, named_node: bool = True) -> ClassAction:
    """`named_node`: the cause's line names its node, as a node class's evidence does (not a guess's)."""
    blamed = (_NODE,) if named_node and error_type in NODE_CLASSES else ()
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

    `unguessed`: the class of the reading the guess replaced; None: no cause, a failed attempt the
    monitor judges a crash (`unexplained_action`).
    """
    action = _failed_with(error_type, policy, named_node=False)  # a guess's line names no node
    if action in _RESTARTS:
        return action
    plain = unexplained_action(policy) if unguessed is None else action_for(unguessed, policy)
    return plain if plain in _RESTARTS else action


def reading_action(reading: Reading, policy: RestartPolicy) -> ClassAction:
    """What the monitor does with one excerpt's reading, as the judge takes it: a class as `action_for`,
    a guess as `guessed_action_for`, a failure's excerpt with no cause as the crash it is judged
    (`unexplained_action`)."""
    if reading.guessed:
        return guessed_action_for(cause_of(reading.got), policy, reading.unguessed)
    if reading.got == HEALTHY and reading.excerpt.expected != HEALTHY:
        return unexplained_action(policy)
    return action_for(cause_of(reading.got), policy)


def label_action(label: str, policy: RestartPolicy) -> ClassAction:
    """What `policy` does with an attempt whose true class is the corpus label `label`."""
    return action_for(cause_of(label), policy)


def decision_accuracy(score: Score, policy: RestartPolicy) -> float:
    """The share of `score`'s excerpts whose reading leads to the action their label leads to under
    `policy` (`reading_action` against `label_action`)."""
    if not score.readings:
        return 1.0
    same = sum(reading_action(r, policy) == label_action(r.excerpt.expected, policy) for r in score.readings)
    return same / len(score.readings)

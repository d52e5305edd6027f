"""What the default restart policy does with a first attempt ended by each root-cause class."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.core.classify.score import HEALTHY, Excerpt, Reading, Score
from oellm_autoexp.core.decide.class_action import (
    ClassAction,
    action_for,
    decision_accuracy,
    guessed_action_for,
    unexplained_action,
)
from oellm_autoexp.core.decide.policy import load_policy
from tests.paths import REPO

DEFAULT = load_policy(
    yaml.safe_load((REPO / "config" / "restart" / "default.yaml").read_text(encoding="utf-8"))
)


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        (None, ClassAction.NOTHING),  # a healthy log: nothing to decide
        ("config_error", ClassAction.STOP),  # fails the same way on every retry
        ("oom", ClassAction.STOP),  # excluded by the transient rule
        ("numerical_instability", ClassAction.STOP),
        ("nccl", ClassAction.RESTART),
        ("killed", ClassAction.RESTART),
        ("time_limit", ClassAction.RESTART),  # the scheduler rule
        ("node_failure", ClassAction.RESTART_ELSEWHERE),  # the node its evidence names is excluded
        ("gpu_hardware", ClassAction.RESTART_ELSEWHERE),
    ],
)
def test_the_default_policy_acts_on_each_class(error_type: str | None, expected: ClassAction) -> None:
    """Each class leads to the action the default policy's rules give it."""
    assert action_for(error_type, DEFAULT) is expected


@pytest.mark.parametrize(
    ("guess", "unguessed", "expected"),
    [
        ("nccl", None, ClassAction.RESTART),  # the guess restarts: as guessed
        ("gpu_hardware", "exception", ClassAction.RESTART),  # a guess names no node to exclude
        ("config_error", None, ClassAction.RESTART),  # no cause: a crash restarts, a guess never stops it
        ("config_error", "killed", ClassAction.RESTART),  # a silent death restarts
        ("config_error", "exception", ClassAction.STOP),  # the catch-all it refines stops too
        ("oom", "exception", ClassAction.STOP),
    ],
)
def test_a_guess_acts_as_the_judge_lets_it(guess: str, unguessed: str | None, expected: ClassAction) -> None:
    """A guessed class's action, where it restarts; else the replaced reading's restart; else the guess's
    stop (core/decide/judge.py: a guess never makes a decision more drastic than the reading it replaced)."""
    assert guessed_action_for(guess, DEFAULT, unguessed) is expected


NONE = load_policy(yaml.safe_load((REPO / "config" / "restart" / "none.yaml").read_text(encoding="utf-8")))


def test_a_failed_attempt_with_no_cause_is_judged_a_crash() -> None:
    """A FAILED attempt whose log gave no cause is a crash to the judge: the default policy restarts it,
    the policy that never restarts stops it; a guess on such an attempt falls back on that."""
    assert unexplained_action(DEFAULT) is ClassAction.RESTART
    assert unexplained_action(NONE) is ClassAction.STOP
    assert guessed_action_for("config_error", NONE, None) is ClassAction.STOP


def test_the_decision_score_takes_each_reading_as_the_judge_does() -> None:
    """decision_accuracy: a failure's excerpt read as healthy counts as the crash restart (right for a
    transient label, wrong for a permanent one); a healthy excerpt read as healthy is NOTHING, right."""
    unread = Excerpt("some words no pattern knows", "nccl", "t#1")
    permanent = Excerpt("some words no pattern knows", "config_error", "t#2")
    healthy = Excerpt("all fine", HEALTHY, "t#3")
    readings = (Reading(unread, HEALTHY), Reading(permanent, HEALTHY), Reading(healthy, HEALTHY))
    assert decision_accuracy(Score(readings), DEFAULT) == 2 / 3
    assert decision_accuracy(Score(readings[1:]), NONE) == 1.0  # a crash stops there, as config_error does

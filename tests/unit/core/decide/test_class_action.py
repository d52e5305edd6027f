"""What the default restart policy does with a first attempt ended by each root-cause class."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.core.decide.class_action import ClassAction, action_for, guessed_action_for
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
        ("gpu_hardware", "exception", ClassAction.RESTART_ELSEWHERE),
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

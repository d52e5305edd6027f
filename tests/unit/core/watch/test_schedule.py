"""When the training loop pauses on purpose, from Megatron's launch arguments (core/watch/schedule.py)."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.watch.schedule import PauseSchedule, megatron_schedule


def test_megatron_defaults_evaluate_every_1000_iterations_and_save_never() -> None:
    schedule = megatron_schedule({})
    assert schedule == PauseSchedule((("evaluation", 1000),), "megatron eval_interval=1000")


def test_saves_and_evaluation_both_pause_and_the_basis_names_them() -> None:
    schedule = megatron_schedule(
        {"eval_interval": "500", "save-interval": 250, "non_persistent_save_interval": 100}
    )
    assert schedule is not None
    assert dict((n, w) for w, n in schedule.every) == {
        500: "evaluation",
        250: "checkpoint save",
        100: "checkpoint save",
    }
    assert schedule.basis == "megatron eval_interval=500, save_interval=250, non_persistent_save_interval=100"


def test_no_evaluation_when_eval_iters_is_zero() -> None:
    schedule = megatron_schedule({"eval_iters": 0, "eval_interval": 10, "save_interval": 50})
    assert schedule is not None and schedule.every == (("checkpoint save", 50),)
    assert "eval_iters=0" in schedule.basis


@pytest.mark.parametrize(
    "args",
    [{"eval_interval": "${oc.env:X}"}, {"save_interval": -5}, {"eval_interval": 0}, {"eval_iters": True}],
)
def test_a_value_that_is_not_a_whole_number_leaves_the_schedule_unknown(args: dict[str, object]) -> None:
    assert megatron_schedule(args) is None


@pytest.mark.parametrize(
    ("first", "last", "due"),
    [
        (1000, 1000, ("evaluation", "checkpoint save")),  # the counter stands at an evaluation and a save
        (990, 999, ()),  # the next line (1000) comes before the pauses after 1000
        (991, 1000, ("evaluation", "checkpoint save")),
        (1001, 1249, ()),
        (1001, 1250, ("checkpoint save",)),
        (5, 4, ()),  # an empty range
    ],
)
def test_pauses_between_are_the_multiples_in_the_range(first: int, last: int, due: tuple[str, ...]) -> None:
    schedule = PauseSchedule((("evaluation", 1000), ("checkpoint save", 250)), "test")
    assert schedule.pauses_between(first, last) == due

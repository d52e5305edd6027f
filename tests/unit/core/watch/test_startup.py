"""The start-up limit learned from a job's own earlier start-ups, and the tracker that applies it."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.watch.attempt_view import AttemptView
from oellm_autoexp.core.watch.progress import (
    HangConfig,
    HangKind,
    Iteration,
    advance,
    check_hang,
    next_deadline_s,
    start,
)
from oellm_autoexp.core.watch.startup import STARTUP_SAMPLES, Startup, configured, startup_limit
from tests.unit.core.watch.test_progress import CONFIG as SMALL

DEFAULTS = HangConfig()  # startup_timeout_s 3600, startup_factor 2, startup_floor_s 600


def startups(*durations: float | None) -> list[Startup]:
    """Start-ups of attempts 1, 2, ..., oldest first (None: never reached its first iteration)."""
    return [Startup(d) for d in durations]


@pytest.mark.parametrize(
    ("earlier", "limit", "basis", "learned"),
    [
        ([], 3600.0, "startup_timeout_s; no earlier attempt of this job reached its first iteration", False),
        (startups(900.0), 1800.0, "2 x this job's slowest start-up of 900s", True),
        (startups(700.0, 900.0, 800.0), 1800.0, "2 x this job's slowest start-up of 900s", True),
        # An attempt that never got to train between them does not count, and does not reset what was learned.
        (startups(900.0, None, 800.0), 1800.0, "2 x this job's slowest start-up of 900s", True),
        # Short start-ups: the floor (a slow filesystem day adds minutes).
        (startups(60.0), 600.0, "floor; 2 x this job's slowest start-up of 60s is 120s", True),
        # Never above the configured limit.
        (
            startups(2400.0),
            3600.0,
            "startup_timeout_s; 2 x this job's slowest start-up of 2400s is 4800s",
            False,
        ),
        # A negative duration (clocks of two hosts) is no measurement.
        (startups(900.0, -5.0), 1800.0, "2 x this job's slowest start-up of 900s", True),
        # Not trusted twice in a row: the last attempt never reached its first iteration.
        (startups(900.0, None), 3600.0, "startup_timeout_s; the job's last attempt never reached", False),
    ],
)
def test_limit_from_earlier_startups(earlier: list[Startup], limit: float, basis: str, learned: bool) -> None:
    """max(floor, factor x the slowest recent start-up), capped at startup_timeout_s; the basis says which."""
    found = startup_limit(earlier, DEFAULTS)
    assert (found.limit_s, found.learned) == (limit, learned)
    assert found.basis.startswith(basis)


def test_only_the_last_few_startups_count() -> None:
    """A start-up slow long ago (before the checkpoint shrank, another node count) no longer holds the limit up."""
    old_slow = startups(1500.0, *([500.0] * STARTUP_SAMPLES))
    assert startup_limit(old_slow, DEFAULTS).limit_s == 1000.0
    assert startup_limit(old_slow[:-1], DEFAULTS).limit_s == 3000.0  # the slow one still among the last few


def test_a_floor_at_the_ceiling_turns_learning_off() -> None:
    """startup_floor_s >= startup_timeout_s: every attempt gets the configured limit, as before learning existed."""
    off = HangConfig(startup_timeout_s=1200.0, startup_floor_s=1200.0)
    assert startup_limit(startups(30.0), off).limit_s == 1200.0
    assert configured(off).limit_s == 1200.0


def test_tracker_judges_a_startup_hang_at_the_learned_limit() -> None:
    """A restart whose predecessors started in 900 s is hung at 1801 s, and the detail says why."""
    limit = startup_limit(startups(900.0), DEFAULTS)
    state = start(1000.0)
    assert check_hang(state, 2800.0, DEFAULTS, limit) is None
    assert next_deadline_s(state, DEFAULTS, limit) == 2800.0
    verdict = check_hang(state, 2805.0, DEFAULTS, limit)
    assert verdict is not None and verdict.kind is HangKind.STARTUP and verdict.limit_s == 1800.0
    assert verdict.detail == (
        "no first iteration 1805s after start (startup limit 1800s: 2 x this job's slowest start-up of 900s)"
    )
    # Without a learned limit the same attempt still has until startup_timeout_s.
    assert check_hang(state, 2805.0, DEFAULTS) is None
    assert next_deadline_s(state, DEFAULTS) == 4600.0


def test_the_learned_limit_ends_at_the_first_iteration() -> None:
    """After the first iteration the start-up limit no longer applies: the progress clocks do."""
    limit = startup_limit(startups(10.0), HangConfig(startup_floor_s=20.0, progress_floor_s=900.0))
    state = advance(start(0.0), Iteration(1), 15.0)
    assert check_hang(state, 100.0, DEFAULTS, limit) is None


def test_attempt_view_applies_its_startup_limit_and_notes_the_first_iteration() -> None:
    """The view judges with the limit it was given, and keeps when its first iteration line was read."""
    limit = startup_limit(startups(100.0), SMALL.model_copy(update={"startup_floor_s": 50.0}))
    assert limit.limit_s == 200.0
    hung = AttemptView([], startup=limit)
    hung.mark_running(0.0)
    verdict = hung.hang_verdict(201.0, SMALL)
    assert verdict is not None and verdict.hang is not None and verdict.hang.limit_s == 200.0
    healthy = AttemptView([])
    healthy.mark_running(0.0)
    assert healthy.hang_verdict(201.0, SMALL) is None  # SMALL's startup_timeout_s is 1000 s
    assert healthy.first_iteration_s is None

"""Progress and hang tracking: pure state, events and `now` in, verdicts out."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from oellm_autoexp.core.watch.progress import (
    STEP_SAMPLES,
    CheckpointDone,
    CheckpointStart,
    HangConfig,
    HangKind,
    HangWarning,
    Iteration,
    Output,
    ProgressEvent,
    ProgressState,
    advance,
    advance_iterations,
    check_hang,
    lowest_floor_s,
    next_deadline_s,
    progress_floor,
    progress_limit_s,
    start,
)
from oellm_autoexp.core.watch.schedule import PauseSchedule

# Small, distinct values so each clock is recognisable in a failure message.
CONFIG = HangConfig(
    no_output_timeout_s=100.0,
    progress_factor=3.0,
    progress_floor_s=20.0,
    checkpoint_grace_s=500.0,
    startup_timeout_s=1000.0,
)


def replay(events: Sequence[tuple[float, ProgressEvent]], started_s: float = 0.0) -> ProgressState:
    state = start(started_s)
    for now, event in events:
        state = advance(state, event, now)
    return state


def iterations(every_s: float, count: int, first_s: float = 10.0) -> list[tuple[float, ProgressEvent]]:
    """`count` counter advances `every_s` apart (iterations 10, 20, ...), starting at `first_s`."""
    return [(first_s + n * every_s, Iteration(10 * (n + 1))) for n in range(count)]


def test_step_interval_is_learned_from_counter_advances() -> None:
    """The step interval is the median time between two advances of the logged counter (one log
    interval, not one iteration), so a single slow pass does not move it."""
    events = [(10.0, Iteration(10)), (15.0, Iteration(20)), (20.0, Iteration(30)), (60.0, Iteration(40))]
    state = replay(events)
    assert state.intervals_s == (5.0, 5.0, 40.0)
    assert state.step_interval_s == 5.0


def test_step_interval_keeps_recent_samples_only() -> None:
    """Only the last STEP_SAMPLES intervals count, so a run that slows down is followed."""
    fast = iterations(1.0, 20)
    slow = iterations(9.0, STEP_SAMPLES + 1, first_s=fast[-1][0] + 9.0)
    slow = [(t, Iteration(1000 + n)) for n, (t, _) in enumerate(slow)]
    state = replay(fast + slow)
    assert state.step_interval_s == pytest.approx(9.0)


@pytest.mark.parametrize(
    ("intervals", "limit"),
    [
        ((), 20.0),  # nothing learned yet: the floor
        ((2.0, 2.0), 20.0),  # 3 x 2 s is below the floor
        ((10.0, 10.0, 10.0), 30.0),  # 3 x 10 s
    ],
)
def test_progress_limit_is_k_times_interval_above_a_floor(intervals: tuple[float, ...], limit: float) -> None:
    """The counter may stand still for max(k x learned interval, floor)."""
    state = ProgressState(started_s=0.0, last_output_s=0.0, intervals_s=intervals)
    assert progress_limit_s(state, CONFIG) == limit


def test_no_progress_while_other_lines_keep_coming() -> None:
    """A job whose counter stopped is hung even though other lines (srun errors, warnings)
    keep arriving: after 3 x 10 s without an advance it is judged `no_progress`."""
    events = iterations(10.0, 4)  # last advance at t=40, interval 10 s -> limit 30 s
    events += [(t, Output()) for t in range(41, 100)]
    state = replay(events)
    assert check_hang(state, 70.0, CONFIG) is None
    verdict = check_hang(state, 71.0, CONFIG)
    assert verdict is not None
    assert verdict.kind is HangKind.NO_PROGRESS
    assert (verdict.waited_s, verdict.limit_s, verdict.iteration) == (31.0, 30.0, 40)
    assert verdict.detail == (
        "no progress past iteration 40 for 31s (limit 30s = max(3 x 10.0s step interval, floor 20s))"
    )


def test_repeated_or_lower_counter_is_not_progress() -> None:
    """A counter line printed again, or a lower one, leaves the progress clock where it was."""
    state = replay([*iterations(10.0, 3), (35.0, Iteration(30)), (36.0, Iteration(5))])
    assert (state.iteration, state.progress_s) == (30, 30.0)
    assert state.last_output_s == 36.0


def test_no_output() -> None:
    """No new bytes for no_output_timeout_s is a `no_output` hang; it is named before
    `no_progress` because it is the more specific fact."""
    state = replay(iterations(60.0, 3))  # last advance at t=130, limit max(3 x 60, 20) = 180 s
    assert check_hang(state, 230.0, CONFIG) is None
    verdict = check_hang(state, 231.0, CONFIG)
    assert verdict is not None
    assert verdict.kind is HangKind.NO_OUTPUT
    assert verdict.detail == "no new output for 101s (limit 100s)"


@pytest.mark.parametrize(
    ("now", "kind"),
    [
        (999.0, None),  # long and silent startup: checkpoint load, index building
        (1001.0, HangKind.STARTUP),
    ],
)
def test_no_verdict_before_first_iteration_unless_startup_times_out(
    now: float, kind: HangKind | None
) -> None:
    """Before the first iteration neither silence nor a missing advance is a hang; only the
    startup timeout is."""
    state = replay([(5.0, Output())])
    verdict = check_hang(state, now, CONFIG)
    assert (verdict.kind if verdict else None) is kind


@pytest.mark.parametrize(
    ("now", "kind"),
    [
        (100.0 + 499.0, None),  # inside the grace: silence and no advance are both fine
        (100.0 + 501.0, HangKind.NO_OUTPUT),  # a save that never ends is still a hang
    ],
)
def test_checkpoint_save_gets_a_longer_grace(now: float, kind: HangKind | None) -> None:
    """While a checkpoint is being saved both limits rise to checkpoint_grace_s."""
    state = replay([*iterations(10.0, 4), (100.0, CheckpointStart())])
    verdict = check_hang(state, now, CONFIG)
    assert (verdict.kind if verdict else None) is kind


def test_progress_clock_restarts_when_save_ends() -> None:
    """A finished save restarts the progress clock, and the partial interval after it is not
    sampled as a step interval."""
    events = [
        *iterations(10.0, 4),
        (45.0, CheckpointStart()),
        (400.0, CheckpointDone()),
        (403.0, Iteration(50)),
    ]
    state = replay(events)
    assert state.step_interval_s == 10.0
    assert state.intervals_s == (10.0, 10.0, 10.0)
    assert check_hang(state, 403.0 + 30.0, CONFIG) is None
    verdict = check_hang(state, 403.0 + 31.0, CONFIG)
    assert verdict is not None and verdict.kind is HangKind.NO_PROGRESS


def test_interval_overlapping_an_async_save_is_not_sampled() -> None:
    """With asynchronous saves training goes on during the save; the interval that contains
    the save's start is not a normal step interval and is left out."""
    events = [*iterations(10.0, 3), (35.0, CheckpointStart()), (40.0, Iteration(40)), (50.0, Iteration(50))]
    state = replay(events)
    assert state.intervals_s == (10.0, 10.0)
    assert state.checkpoint_since_s == 35.0
    resumed = replay([*events, (60.0, CheckpointDone()), (62.0, Iteration(60)), (72.0, Iteration(70))])
    assert resumed.intervals_s == (10.0, 10.0, 10.0)


def test_progress_detail_names_the_save() -> None:
    """A no_progress verdict during a save says the save's grace was the limit."""
    config = CONFIG.model_copy(update={"no_output_timeout_s": 10_000.0})  # the no-output clock out of the way
    state = replay(
        [*iterations(10.0, 4), (100.0, CheckpointStart()), *[(float(t), Output()) for t in range(101, 700)]]
    )
    verdict = check_hang(state, 601.0, config)
    assert verdict is not None
    assert verdict.detail == (
        "no progress past iteration 40 for 501s (limit 500s; checkpoint save in progress, grace 500s)"
    )


def test_advance_is_pure() -> None:
    """advance() returns a new state and leaves the old one as it was."""
    before = start(0.0)
    after = advance(before, Iteration(1), 5.0)
    assert before == start(0.0)
    assert after.iteration == 1


def test_production_defaults() -> None:
    """The defaults are the documented production values."""
    config = HangConfig()
    assert (
        config.no_output_timeout_s,
        config.progress_factor,
        config.progress_floor_s,
        config.checkpoint_grace_s,
        config.startup_timeout_s,
        config.scheduled_floor_s,
    ) == (1800.0, 10.0, 900.0, 3600.0, 3600.0, 300.0)


@pytest.mark.parametrize("seed", range(30))
def test_advance_iterations_is_one_advance_per_line(seed: int) -> None:
    """Folding many counters at once gives the state one `advance` per counter gives: samples, the
    window of STEP_SAMPLES, gaps, repeated and lower counters, a save in progress, output times."""
    rng = random.Random(seed)
    state = replay(iterations(rng.uniform(1, 9), rng.randint(0, 30)))
    if rng.random() < 0.3:
        state = replace(state, checkpoint_since_s=state.last_output_s, clean_interval=False)
    now, counter, batch = state.last_output_s, state.iteration or 0, []
    for _ in range(rng.randint(0, 60)):
        now += rng.choice((0.0, 0.5, 2.0, 30.0))
        counter += rng.choice((1, 1, 1, 5, 0, -3))
        batch.append((counter, now, rng.random() < 0.1))
    one_by_one = state
    for counter, at, gap in batch:
        one_by_one = advance(one_by_one, Iteration(counter, after_gap=gap), at)
    assert advance_iterations(state, batch) == one_by_one


# -- a line that warns of a hang -----------------------------------------------------------------

WARNED = CONFIG.model_copy(update={"progress_floor_s": 400.0, "warned_factor": 2.0, "warned_floor_s": 15.0})


def test_a_hang_warning_shortens_the_progress_limit_from_the_warning() -> None:
    """Counter every 10 s (limit max(3 x 10, 400) = 400 s); a warning at 60 s: judged hung once the
    counter stood still max(2 x 10, 15) = 20 s after it, not 400 s after the last advance."""
    state = advance(replay(iterations(10.0, 6)), HangWarning(), 60.0)
    assert state.warned_s == 60.0
    assert check_hang(state, 80.0, WARNED) is None
    verdict = check_hang(state, 81.0, WARNED)
    assert verdict is not None and verdict.kind is HangKind.NO_PROGRESS and verdict.limit_s == 20.0
    assert verdict.detail == (
        "no progress past iteration 60 for 21s after a line that warns of a hang "
        "(limit 20s = max(2 x 10.0s step interval, floor 15s))"
    )
    assert next_deadline_s(state, WARNED) == 80.0


def test_a_warned_verdict_without_a_step_interval_says_the_floor_alone_as_the_plain_one_does() -> None:
    """One counter advance (no interval learned yet): both limits are their floors, said alike."""
    state = advance(replay(iterations(10.0, 1)), HangWarning(), 10.0)
    warned = check_hang(state, 26.0, WARNED)
    assert warned is not None and warned.limit_s == 15.0
    assert warned.detail.endswith("warns of a hang (limit 15s = max(no interval yet, floor 15s))")
    plain = check_hang(replay(iterations(10.0, 1)), 31.0, CONFIG)
    assert plain is not None and plain.detail.endswith("(limit 20s = max(no interval yet, floor 20s))")


def test_only_the_first_warning_since_an_advance_starts_the_clock_and_an_advance_ends_it() -> None:
    state = advance(advance(replay(iterations(10.0, 6)), HangWarning(), 60.0), HangWarning(), 75.0)
    assert state.warned_s == 60.0
    flapped = advance(state, Iteration(70), 70.0)  # the link came back: training went on
    assert flapped.warned_s is None and check_hang(flapped, 100.0, WARNED) is None
    folded = advance_iterations(state, [(70, 70.0, False)])
    assert folded == flapped
    assert advance_iterations(state, [(60, 70.0, False)]).warned_s == 60.0  # a repeated counter is no advance


def test_a_save_keeps_its_grace_over_a_warning_and_its_end_clears_it() -> None:
    state = advance(advance(replay(iterations(10.0, 6)), CheckpointStart(), 61.0), HangWarning(), 62.0)
    assert check_hang(state, 200.0, WARNED) is None  # the save's grace (500 s) still runs
    done = advance(state, CheckpointDone(), 300.0)
    assert done.warned_s is None and check_hang(done, 330.0, WARNED) is None


SCHEDULED = CONFIG.model_copy(
    update={"progress_floor_s": 200.0, "scheduled_floor_s": 50.0, "no_output_timeout_s": 1000.0}
)
EVERY_100 = PauseSchedule((("evaluation", 100),), "megatron eval_interval=100")


def test_the_scheduled_floor_applies_once_the_interval_is_known_and_nothing_is_due() -> None:
    """Three intervals measured and no evaluation due after iteration 40 (stride 10): 50 s, not 200 s."""
    state = replay(iterations(5.0, 4))  # iterations 10..40, three intervals
    floor = progress_floor(state, SCHEDULED, EVERY_100, stride=10)
    assert floor.s == 50.0 and "no evaluation or save due before iteration 50" in floor.why
    assert check_hang(state, 25.0 + 50.0, SCHEDULED, floor=floor) is None
    verdict = check_hang(state, 25.0 + 51.0, SCHEDULED, floor=floor)
    assert verdict is not None and verdict.kind is HangKind.NO_PROGRESS
    assert "floor 50s: no evaluation or save due" in verdict.detail
    assert next_deadline_s(state, SCHEDULED, floor_s=lowest_floor_s(SCHEDULED, EVERY_100)) == 75.0


@pytest.mark.parametrize(
    ("count", "schedule", "stride", "why"),
    [
        (3, EVERY_100, 10, ""),  # two intervals: the first slow steps are not an interval yet
        (4, None, 10, ""),  # no schedule: any iteration may be an evaluation's
        (4, EVERY_100, None, ""),  # no stride: the range of pauses is unknown
        (10, EVERY_100, 10, "evaluation due after iteration 100"),  # stands at 100: an evaluation runs
    ],
)
def test_the_plain_floor_stays_where_a_pause_may_be_due(
    count: int, schedule: PauseSchedule | None, stride: int | None, why: str
) -> None:
    state = replay(iterations(5.0, count))
    floor = progress_floor(state, SCHEDULED, schedule, stride)
    assert floor.s == 200.0 and why in floor.why
    assert check_hang(state, state.progress_s + 199.0, SCHEDULED, floor=floor) is None


def test_a_scheduled_floor_at_or_above_the_plain_one_or_off_changes_nothing() -> None:
    state = replay(iterations(5.0, 4))
    for config in (
        SCHEDULED.model_copy(update={"scheduled_floor_s": None}),
        SCHEDULED.model_copy(update={"scheduled_floor_s": 300.0}),
    ):
        assert progress_floor(state, config, EVERY_100, 10).s == 200.0
        assert lowest_floor_s(config, EVERY_100) == 200.0


def test_the_deadline_bound_is_never_later_than_a_verdict_that_more_lines_could_bring() -> None:
    """Standing at an evaluation's iteration the floor is the plain one, but the next line may move the
    counter off it: the replay's bound (lowest_floor_s) must allow the scheduled floor's verdict."""
    state = replay(iterations(5.0, 10))  # stands at 100
    bound = next_deadline_s(state, SCHEDULED, floor_s=lowest_floor_s(SCHEDULED, EVERY_100))
    moved = advance(state, Iteration(110), 56.0)
    verdict_at = moved.progress_s + progress_floor(moved, SCHEDULED, EVERY_100, 10).s
    assert bound <= verdict_at

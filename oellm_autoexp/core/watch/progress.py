"""Progress and hang tracking for one running attempt. No I/O.

The monitor feeds what the log tail saw into `advance(state, event, now)` and asks
`check_hang(state, now, config)` on every poll. Both are pure: the state is an
immutable value, `now` is float epoch seconds supplied by the caller.

Three hang verdicts, because "no new bytes" alone is weak (a hung job whose
launcher keeps printing `srun: error ...` lines looks alive until walltime):

- `startup`: no first iteration within the start-up limit of the attempt's start:
  `startup_timeout_s`, or the shorter limit learned from the job's earlier start-ups
  (core/watch/startup.py, passed in as a `StartupLimit`). Before the first iteration nothing
  else is judged: loading a checkpoint, building dataset indices and compiling are long and silent.
- `no_output`: no new bytes for `no_output_timeout_s`.
- `no_progress`: the iteration counter has not advanced for
  max(progress_factor x the learned step interval, floor), whatever other
  lines keep coming. The floor is `progress_floor_s` (15 min), or the shorter
  `scheduled_floor_s` (5 min) once the step interval is known from a few samples and the
  job's launch arguments say no evaluation pass or save is due where the counter stands
  (core/watch/schedule.py): then nothing but a hang keeps the loop from its next line.

The "step interval" is the time between two advances of the logged counter, i.e. one
log interval (Megatron prints every `--log-interval` iterations), not one iteration:
dividing by the iteration delta would make the limit `log_interval` times too short.
It is the median of the last `STEP_SAMPLES` intervals, so one slow evaluation pass
does not move it. Intervals that span a checkpoint save are not sampled.

While a checkpoint save is in progress both limits are raised to at least
`checkpoint_grace_s`, counted from the later of the save's start and the last event.

A line that warns of a hang (`HangWarning`: a pattern with `warns_of_hang: true`, such as
NCCL's InfiniBand port event on a node whose link went down) shortens the progress limit:
once it was read, the counter may stand still only max(`warned_factor` x the step interval,
`warned_floor_s`) from it. Every rank then waits in a collective that cannot finish, and
torch's NCCL watchdog (10 minutes by default) or the plain limit (15 minutes) would be the
first to say so. An advance of the counter clears the warning: a link that flapped and came
back is no hang.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import median

from pydantic import BaseModel, ConfigDict, Field, field_validator

from oellm_autoexp.core.watch.schedule import PauseSchedule

# Signals the hang probe may send (monitoring.hang.stack_dump_signal): free for a handler, no
# other meaning in the script (USR1 is the walltime warning's; TERM, INT, QUIT, KILL end, STOP stops).
PROBE_SIGNALS = frozenset({"USR2", "WINCH", "URG"})
STEP_SAMPLES = 16  # how many recent counter intervals the step-interval median looks at
# The scheduled floor needs this many measured intervals: the first steps after a start are slow
# (warm-up, allocator growth, compilation) and one sample is no interval.
MIN_SCHEDULED_SAMPLES = 3


class HangKind(StrEnum):
    STARTUP = "startup"  # no first iteration within the start-up limit of the attempt's start
    NO_OUTPUT = "no_output"  # no new bytes in the log for no_output_timeout_s
    NO_PROGRESS = "no_progress"  # the iteration counter stood still past its learned limit


class HangConfig(BaseModel):
    """Hang thresholds. Defaults suit multi-node Megatron runs; tests use small values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 30 min: Megatron prints every log interval; a 30-minute silence outside a save is not healthy.
    no_output_timeout_s: float = Field(default=1800.0, gt=0)
    # k: ten normal log intervals without an advance is far outside normal jitter.
    progress_factor: float = Field(default=10.0, gt=0)
    # 15 min: covers evaluation passes and the first slow steps while the interval is still unknown.
    progress_floor_s: float = Field(default=900.0, gt=0)
    # 5 min: the floor once MIN_SCHEDULED_SAMPLES intervals are known and the launch arguments say no
    # evaluation or save is due where the counter stands (core/watch/schedule.py). Thirty 10 s log
    # intervals; a year of the Kokolis fleet mix detects silent hangs 0.4 points of ETTR sooner with it
    # (docs/simulate_defaults.md). None: the plain floor everywhere.
    scheduled_floor_s: float | None = Field(default=300.0, gt=0)
    # 1 h: saving a large model's distributed checkpoint to a parallel filesystem takes tens of minutes.
    checkpoint_grace_s: float = Field(default=3600.0, gt=0)
    # 1 h: checkpoint loading, dataset index building and compilation before iteration 1. The ceiling,
    # and the limit of a job's first attempt (core/watch/startup.py).
    startup_timeout_s: float = Field(default=3600.0, gt=0)
    # A restart may take this many times the slowest of the job's recent start-ups: 2.
    # A job's restarts repeat the same launch, NCCL init and checkpoint load; even eight times the job
    # size stays under 2x (ByteRobust Table 7: a requeue takes 454 s on 2,048 GPUs, 768 s on 16,384).
    startup_factor: float = Field(default=2.0, gt=0)
    # ... and never less than 10 min: a slow filesystem day (a metadata server under load, a checkpoint
    # read at a tenth of its usual speed) adds minutes to a short start-up. A floor at or above
    # startup_timeout_s turns the learned limit off.
    startup_floor_s: float = Field(default=600.0, gt=0)
    # After a line that warns of a hang: five normal log intervals without an advance...
    warned_factor: float = Field(default=5.0, gt=0)
    # ... and at least 3 min: a link that flaps comes back within seconds (NCCL retries), while an
    # evaluation pass that happens to start right after the warning still gets a few minutes.
    warned_floor_s: float = Field(default=180.0, gt=0)
    # Before a hang's cancel, every rank is asked for its Python stacks with this signal (the
    # rendered script registers faulthandler on it in every Python process, docs/hang.md); the
    # ranks that do not answer name the broken node (core/decide/stack_dump_blame.py). Not USR1
    # (the walltime warning's) nor a signal that ends or stops a process. None: no probe.
    stack_dump_signal: str | None = "USR2"
    # How long the probe waits for the dumps to reach the log before the judgement reads it:
    # faulthandler writes from its signal handler at once; the rest is the log's way to the monitor.
    stack_dump_wait_s: float = Field(default=5.0, ge=0, le=120)

    @field_validator("stack_dump_signal")
    @classmethod
    def _probe_signal(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.upper().removeprefix("SIG")
        if name not in PROBE_SIGNALS:
            raise ValueError(f"expected one of {', '.join(sorted(PROBE_SIGNALS))} or null, got {value!r}")
        return name


@dataclass(frozen=True)
class ProgressState:
    """What the tracker knows about one attempt. Build it with `start(now)`."""

    started_s: float  # when the attempt was first seen running; the startup clock starts here
    last_output_s: float  # when new bytes last arrived (started_s until the first)
    iteration: int | None = None  # the highest iteration counter seen
    progress_s: float | None = None  # when the counter last advanced, or a checkpoint save ended
    intervals_s: tuple[float, ...] = ()  # recent times between counter advances, oldest first
    clean_interval: bool = False  # True when the interval running since progress_s may be sampled
    checkpoint_since_s: float | None = None  # a save started then and has not finished yet
    warned_s: float | None = None  # a line warned of a hang then, and the counter has not advanced since

    @property
    def step_interval_s(self) -> float | None:
        """Median time between counter advances; None until one interval was measured."""
        return median(self.intervals_s) if self.intervals_s else None


@dataclass(frozen=True)
class Output:
    """New bytes arrived in the log (any line)."""


@dataclass(frozen=True)
class Iteration:
    """A line reported the training iteration counter (this also counts as output)."""

    iteration: int  # the counter as logged
    # Lines reporting the counter were skipped just before this one (core/classify/classifier.py reads only
    # the last few of a long run): the time since the last one seen is not one step interval.
    after_gap: bool = False


@dataclass(frozen=True)
class CheckpointStart:
    """A line said a checkpoint save began."""


@dataclass(frozen=True)
class CheckpointDone:
    """A line said a checkpoint save finished."""


@dataclass(frozen=True)
class HangWarning:
    """A line warned that the job is about to hang (its pattern's `warns_of_hang`)."""


ProgressEvent = Output | Iteration | CheckpointStart | CheckpointDone | HangWarning


@dataclass(frozen=True)
class StartupLimit:
    """An attempt's start-up limit, and why it is that (core/watch/startup.py `startup_limit`)."""

    limit_s: float
    basis: str  # one phrase for the verdict's detail: "2 x this job's slowest start-up of 900s"
    learned: bool = False  # False: the configured startup_timeout_s applies


@dataclass(frozen=True)
class Floor:
    """The progress limit's floor where the counter stands, and why it is that."""

    s: float
    why: str = ""  # "" for the plain floor; else a phrase for the verdict


@dataclass(frozen=True)
class HangVerdict:
    """The tracker's judgement that the attempt is hung."""

    kind: HangKind  # which clock ran out
    waited_s: float  # how long that clock has been running
    limit_s: float  # the limit it passed
    iteration: int | None  # the last iteration seen (None before the first)
    detail: str  # one line for the log and the decision record


def start(now: float) -> ProgressState:
    """A fresh tracker for an attempt first seen running at `now`."""
    return ProgressState(started_s=now, last_output_s=now)


def advance(state: ProgressState, event: ProgressEvent, now: float) -> ProgressState:
    """Return the state after `event` observed at `now`."""
    # One state update per line at most: this runs for every line the monitor (or a replay) reads.
    if isinstance(event, Iteration):
        return _on_iteration(state, event.iteration, now, sample=not event.after_gap)
    if isinstance(event, Output) and now <= state.last_output_s:
        return state
    seen = replace(state, last_output_s=max(state.last_output_s, now))
    match event:
        case CheckpointStart():
            since = now if state.checkpoint_since_s is None else state.checkpoint_since_s
            # The interval running now contains the save's start: not a normal one.
            return replace(seen, checkpoint_since_s=since, clean_interval=False)
        case CheckpointDone():
            return _on_checkpoint_done(seen, now)
        case HangWarning():
            # The first warning since the last advance starts the shorter clock; later ones do not move it.
            return seen if state.warned_s is not None else replace(seen, warned_s=now)
        case _:
            return seen


def _on_iteration(state: ProgressState, iteration: int, now: float, *, sample: bool = True) -> ProgressState:
    last_output_s = max(state.last_output_s, now)
    # A repeated or lower counter (a line printed twice, an evaluation line) is not progress.
    if state.iteration is not None and iteration <= state.iteration:
        return state if last_output_s == state.last_output_s else replace(state, last_output_s=last_output_s)
    intervals = state.intervals_s  # an advance: the warning of a hang, if any, is over (warned_s unset)
    if state.progress_s is not None and state.clean_interval and sample:
        intervals = (*intervals, now - state.progress_s)[-STEP_SAMPLES:]
    # Built directly, not with dataclasses.replace: this runs for every iteration line read
    # (a replay reads a 50 MB log's 150,000 of them), and replace() costs several times more.
    return ProgressState(
        state.started_s,
        last_output_s,
        iteration,
        now,  # progress_s
        intervals,
        # An interval that overlaps a running save is not a normal step interval.
        state.checkpoint_since_s is None,  # clean_interval
        state.checkpoint_since_s,
    )


def advance_iterations(state: ProgressState, iterations: Iterable[tuple[int, float, bool]]) -> ProgressState:
    """`advance` by `Iteration(iteration, after_gap)` at `now` for each (iteration, now, after_gap), in order.

    The same state as one `advance` per line (tests/unit/core/watch/test_progress.py compares them), built
    once: a replay hands over the ~17 kept lines of every run of iteration lines together.
    """
    last_output_s, iteration, progress_s = state.last_output_s, state.iteration, state.progress_s
    samples, clean, saving = list(state.intervals_s), state.clean_interval, state.checkpoint_since_s
    for counter, now, after_gap in iterations:
        last_output_s = max(last_output_s, now)
        if iteration is not None and counter <= iteration:
            continue  # a repeated or lower counter is not progress (_on_iteration)
        if progress_s is not None and clean and not after_gap:
            samples.append(now - progress_s)
        iteration, progress_s, clean = counter, now, saving is None
    intervals = (
        tuple(samples[-STEP_SAMPLES:]) if len(samples) != len(state.intervals_s) else state.intervals_s
    )
    warned = state.warned_s if iteration == state.iteration else None  # an advance ends the warning
    return ProgressState(
        state.started_s, last_output_s, iteration, progress_s, intervals, clean, saving, warned
    )


def _on_checkpoint_done(state: ProgressState, now: float) -> ProgressState:
    # A finished save is useful work: the progress clock restarts, but the interval from
    # here to the next advance is partial and must not be sampled.
    progress_s = now if state.iteration is not None else state.progress_s
    # A save's collectives finished too: whatever a warning of a hang said, the job is alive.
    return replace(state, checkpoint_since_s=None, progress_s=progress_s, clean_interval=False, warned_s=None)


def progress_floor(
    state: ProgressState, config: HangConfig, schedule: PauseSchedule | None, stride: int | None
) -> Floor:
    """The floor of the progress limit where the counter stands (`stride`: iterations per log line).

    The scheduled floor when the interval is known from enough samples and the schedule says the
    loop does not pause on purpose before its next line; the plain floor otherwise.
    """
    plain = Floor(config.progress_floor_s)
    short = config.scheduled_floor_s
    if schedule is None or short is None or short >= plain.s or state.iteration is None or not stride:
        return plain
    if len(state.intervals_s) < MIN_SCHEDULED_SAMPLES:
        return plain
    first, last = state.iteration, state.iteration + stride - 1
    due = schedule.pauses_between(first, last)
    if due:
        return Floor(plain.s, f"{' and '.join(due)} due after iteration {first} ({schedule.basis})")
    return Floor(short, f"no evaluation or save due before iteration {last + 1} ({schedule.basis})")


def lowest_floor_s(config: HangConfig, schedule: PauseSchedule | None) -> float:
    """The lowest floor that reading more lines could bring (next_deadline_s must not pass a verdict)."""
    short = config.scheduled_floor_s
    return (
        config.progress_floor_s if schedule is None or short is None else min(short, config.progress_floor_s)
    )


def progress_limit_s(state: ProgressState, config: HangConfig, floor: Floor | None = None) -> float:
    """How long the counter may stand still outside a save: max(k x interval, floor)."""
    floor_s = config.progress_floor_s if floor is None else floor.s
    return _stepped_limit_s(state.step_interval_s, config.progress_factor, floor_s)


def _stepped_limit_s(step_s: float | None, factor: float, floor_s: float) -> float:
    """max(factor x the step interval, floor); the floor alone while no interval is known."""
    return max(factor * step_s, floor_s) if step_s else floor_s


def _stepped_limit_text(
    limit: float, step_s: float | None, factor: float, floor_s: float, why: str = ""
) -> str:
    """How `_stepped_limit_s` came to `limit`, in a verdict's words."""
    basis = f"{factor:g} x {step_s:.1f}s step interval" if step_s else "no interval yet"
    return f"limit {limit:.0f}s = max({basis}, floor {floor_s:.0f}s{': ' + why if why else ''})"


def check_hang(
    state: ProgressState,
    now: float,
    config: HangConfig,
    startup: StartupLimit | None = None,
    floor: Floor | None = None,
) -> HangVerdict | None:
    """Return a verdict when the attempt looks hung at `now`, else None.

    Before the first iteration only the startup clock counts: `startup`'s limit, or
    `startup_timeout_s` without one. After it, a missing output is reported before a
    missing advance, since it is the more specific fact. `floor`: the progress limit's floor
    where the counter stands (`progress_floor`); None: `progress_floor_s`.
    """
    if state.iteration is None or state.progress_s is None:
        return _startup_verdict(state, now, config, startup)
    return (
        _output_verdict(state, now, config)
        or _progress_verdict(state, state.progress_s, now, config, floor)
        or _warned_verdict(state, now, config)
    )


def next_deadline_s(
    state: ProgressState,
    config: HangConfig,
    startup: StartupLimit | None = None,
    floor_s: float | None = None,
) -> float:
    """The earliest time at which `check_hang` could give a verdict, if nothing more is read.

    Reading more only moves it later (new output or progress restarts a clock; a save's grace
    only lengthens a limit), so nothing can be judged hung before it: a replay reads every line
    up to it in one pass. `floor_s`: the lowest progress floor that reading more could bring
    (`lowest_floor_s`: a line that moves the counter off an evaluation's iteration lowers it).
    """
    if state.iteration is None or state.progress_s is None:
        return state.started_s + (config.startup_timeout_s if startup is None else startup.limit_s)
    output_limit, progress_since, progress_limit = (
        config.no_output_timeout_s,
        state.progress_s,
        progress_limit_s(state, config, None if floor_s is None else Floor(floor_s)),
    )
    if state.checkpoint_since_s is not None:
        output_limit = max(output_limit, config.checkpoint_grace_s)
        progress_since = max(progress_since, state.checkpoint_since_s)
        progress_limit = max(progress_limit, config.checkpoint_grace_s)
    warned = _warned_deadline_s(state, config)
    deadline = min(state.last_output_s + output_limit, progress_since + progress_limit)
    return deadline if warned is None else min(deadline, warned)


def _startup_verdict(
    state: ProgressState, now: float, config: HangConfig, startup: StartupLimit | None
) -> HangVerdict | None:
    waited = now - state.started_s
    limit = config.startup_timeout_s if startup is None else startup.limit_s
    if waited <= limit:
        return None
    why = "" if startup is None else f": {startup.basis}"
    detail = f"no first iteration {waited:.0f}s after start (startup limit {limit:.0f}s{why})"
    return HangVerdict(HangKind.STARTUP, waited, limit, None, detail)


def _output_verdict(state: ProgressState, now: float, config: HangConfig) -> HangVerdict | None:
    limit = config.no_output_timeout_s
    if state.checkpoint_since_s is not None:
        limit = max(limit, config.checkpoint_grace_s)
    waited = now - state.last_output_s
    if waited <= limit:
        return None
    detail = f"no new output for {waited:.0f}s (limit {limit:.0f}s){_saving_note(state)}"
    return HangVerdict(HangKind.NO_OUTPUT, waited, limit, state.iteration, detail)


def _progress_verdict(
    state: ProgressState, progress_s: float, now: float, config: HangConfig, floor: Floor | None
) -> HangVerdict | None:
    since, limit = progress_s, progress_limit_s(state, config, floor)
    if state.checkpoint_since_s is not None:
        since = max(since, state.checkpoint_since_s)
        limit = max(limit, config.checkpoint_grace_s)
    waited = now - since
    if waited <= limit:
        return None
    detail = f"no progress past iteration {state.iteration} for {waited:.0f}s ({_limit_basis(state, limit, config, floor)})"
    return HangVerdict(HangKind.NO_PROGRESS, waited, limit, state.iteration, detail)


def warned_limit_s(state: ProgressState, config: HangConfig) -> float:
    """How long the counter may stand still after a line that warned of a hang: max(k x interval, floor)."""
    return _stepped_limit_s(state.step_interval_s, config.warned_factor, config.warned_floor_s)


def _warned_deadline_s(state: ProgressState, config: HangConfig) -> float | None:
    """When the shorter clock of a hang warning runs out; None without a warning, or while a save runs."""
    if state.warned_s is None or state.checkpoint_since_s is not None:
        return None
    return state.warned_s + warned_limit_s(state, config)


def _warned_verdict(state: ProgressState, now: float, config: HangConfig) -> HangVerdict | None:
    deadline = _warned_deadline_s(state, config)
    if deadline is None or state.warned_s is None or now <= deadline:
        return None
    waited, limit = now - state.warned_s, warned_limit_s(state, config)
    basis = _stepped_limit_text(limit, state.step_interval_s, config.warned_factor, config.warned_floor_s)
    detail = (
        f"no progress past iteration {state.iteration} for {waited:.0f}s after a line that warns of a hang "
        f"({basis})"
    )
    return HangVerdict(HangKind.NO_PROGRESS, waited, limit, state.iteration, detail)


def _limit_basis(state: ProgressState, limit: float, config: HangConfig, floor: Floor | None = None) -> str:
    if state.checkpoint_since_s is not None:
        return f"limit {limit:.0f}s; checkpoint save in progress, grace {config.checkpoint_grace_s:.0f}s"
    floor = floor or Floor(config.progress_floor_s)
    return _stepped_limit_text(limit, state.step_interval_s, config.progress_factor, floor.s, floor.why)


def _saving_note(state: ProgressState) -> str:
    return "; checkpoint save in progress" if state.checkpoint_since_s is not None else ""

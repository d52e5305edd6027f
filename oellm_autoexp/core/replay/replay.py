"""Replay one recorded attempt on a virtual clock through the monitor's own steps. No I/O.

`replay()` drives an `AttemptView` (core/watch/attempt_view.py) and `judge()`
(core/decide/judge.py) exactly as daemon/monitor.py does, on a virtual clock: no
sleeping, so a 10-minute NCCL timeout replays in microseconds.

- Lines are read in `Batch`es at their times (`AttemptView.read(lines, at)`).
- Ticks, as the monitor's polls: every `poll_s` from the first line, and at
  `AttemptView.fatal_due_s()` (the monitor asks Slurm again right after a fatal
  line's settle window). A tick does what `Monitor._poll` does, in its order:
  Slurm's view (RUNNING until the log's last line, then `SlurmView.end`, seen
  at the last line's time: after a fatal line the monitor polls again within
  seconds, so a quick exit is seen at once), then `fatal_verdict`, then
  `hang_verdict`. A tick at the same time as a batch runs after it.
- Every verdict is judged with the job's history (`history_from`); a judgement
  that records nothing ("still running, wait for the end") is kept as a `wait`
  event, and, as in the monitor, a settled fatal line judged that way is not
  asked again until a new cause line is read. A judgement that restarts or
  stops ends the attempt: the replay stops reading there.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from oellm_autoexp.core.classify.signals import PatternSet, Signal
from oellm_autoexp.core.decide.judge import Judgement, PastDecision, history_from, judge
from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.replay.log_end import LogEnd, assumed_end
from oellm_autoexp.core.replay.recorded_log import RecordedLog
from oellm_autoexp.core.watch.attempt_view import AttemptView, EarlySettings
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.schedule import PauseSchedule
from oellm_autoexp.core.watch.startup import Startup, startup_limit
from oellm_autoexp.core.watch.verdict import FatalMark, Trigger, Verdict

MATTERING_KEPT = 50  # signals kept for the timeline; the rest are counted


class Batch(NamedTuple):
    """Lines read together at one time (a tuple: a 50 MB log makes ~150,000 of them)."""

    at_s: float  # when they were read (epoch seconds of the log's clock)
    lines: tuple[str, ...]  # complete lines, without newlines
    end_offset: int | None = None  # bytes of the log consumed after this batch, when known


@dataclass(frozen=True)
class SlurmView:
    """What the simulated Slurm says: RUNNING from `running_at_s`, then `end`, from `end_at_s`."""

    running_at_s: float
    end_at_s: float
    end: LogEnd | None  # None: the log shows no end; assumed from its root cause (log_end.assumed_end)
    # Times the monitor is known to have polled (its recorded decisions on the attempt, sorted): the
    # replay ticks there too, besides its own grid, so a hang the monitor judged a moment before the
    # replay's grid tick is judged on what had been read by then, not on the cancel lines it caused.
    polls_at_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class ReplaySetup:
    """Everything fixed about one replay: the job's policy, patterns and monitor settings."""

    policy: RestartPolicy
    patterns: PatternSet
    early: EarlySettings = field(default_factory=EarlySettings)
    hang: HangConfig | None = field(default_factory=HangConfig)
    poll_s: float = 10.0  # the monitor's Slurm poll interval
    past: tuple[PastDecision, ...] = ()  # the job's decisions before this attempt
    attempt_no: int = 1
    # The start-ups of the job's attempts before this one, oldest first: the learned start-up limit
    # (core/watch/startup.py), as the monitor gives it from its attempts table. Empty: startup_timeout_s.
    startups: tuple[Startup, ...] = ()
    # When the job's loop pauses on purpose (core/watch/schedule.py), as the monitor reads it from
    # the job's launch arguments. None: unknown (the plain progress floor).
    schedule: PauseSchedule | None = None


@dataclass(frozen=True)
class Event:
    """One line of the timeline."""

    at_s: float
    kind: str  # signal | hang | wait | recovery | decision | end
    text: str
    signal: Signal | None = None


@dataclass(frozen=True)
class ReplayDecision:
    """A judgement that was recorded (the monitor would have written it)."""

    at_s: float
    judgement: Judgement
    lines_read: int  # lines read when it was taken
    offset: int | None  # bytes consumed when it was taken, when the batches know it


@dataclass
class ReplayResult:
    """What happened in one replayed attempt."""

    origin_s: float  # the first line's time: `at_s` values in reports count from here
    slurm: SlurmView
    first_fatal: FatalMark | None = None
    root_cause: Signal | None = None  # the cause judged on (or the log's, with no decision)
    decisions: list[ReplayDecision] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    dropped_signals: int = 0  # mattering signals past MATTERING_KEPT
    lines_read: int = 0
    end: LogEnd | None = None  # the end state Slurm showed (None: the replay stopped at a decision first)
    ended_by: str = "end"  # what ended the replay: end | decision


class _Replay:
    """The monitor's loop for one attempt, on a virtual clock."""

    def __init__(
        self, setup: ReplaySetup, slurm: SlurmView, source: str | None, *, every_poll: bool = False
    ) -> None:
        self.setup, self.slurm = setup, slurm
        self.every_poll = every_poll  # run the polls at which nothing can happen too (the reference)
        startup = startup_limit(setup.startups, setup.hang) if setup.hang is not None else None
        self.view = AttemptView(
            setup.patterns, source=source, early=setup.early, startup=startup, schedule=setup.schedule
        )
        self.result = ReplayResult(slurm.running_at_s, slurm)
        self.next_poll = slurm.running_at_s
        self.last_tick = -math.inf
        self.offset: int | None = None
        self.done = False
        self.decided_early = False  # a decision was taken while the job ran
        self.waiting_on_fatal = False  # a settled fatal line was judged "wait for the end"
        self._waits: set[str] = set()  # "wait" reasons already in the timeline
        # The last group read: what had been read before it, and each of its lines' time and
        # offset, so that a verdict due inside the group reports what had been read by its time.
        self._before: tuple[int, int | None] = (0, None)
        self._times: Sequence[float] = ()
        self._offsets: Sequence[int | None] = ()
        self._kept_signals = 0

    # -- the clock --------------------------------------------------------------------------------

    def run_ticks(self, until_s: float) -> None:
        """Every tick before `until_s` (one at `until_s` comes after what is read then)."""
        while not self.done:
            self._pass_quiet_polls(until_s)
            t = self._next_tick()
            if t >= until_s:
                return
            self._tick(t)

    def _pass_quiet_polls(self, until_s: float) -> None:
        """Polls before `until_s` at which nothing can happen, passed over without running them.

        Such a poll would find the tracker started, no fatal line pending, and no hang verdict
        possible before the view's next_hang_deadline_s (nothing is read in between); the clock moves
        exactly as `_tick` moves it (one `poll_s` per poll). A log with a line every second and a
        10 s poll has a poll per ten lines: running each cost more than reading the lines.
        """
        view = self.view
        if (
            self.every_poll
            or view.tracker is None
            or (view.fatal_due_s() is not None and not self.decided_early)
        ):
            return
        bound = min(until_s, self._next_recorded_poll())
        if self.setup.hang is not None and not self.decided_early:
            deadline = view.next_hang_deadline_s(self.setup.hang)
            bound = bound if deadline is None else min(bound, deadline)
        t, poll_s, last = self.next_poll, self.setup.poll_s, None
        while t < bound:
            last, t = t, t + poll_s
        if last is not None:
            self.last_tick, self.next_poll = last, t

    def _next_tick(self) -> float:
        tick = min(self.next_poll, self._next_recorded_poll())
        due = self.view.fatal_due_s()
        if due is not None and due > self.last_tick and not self.decided_early:
            return min(tick, due)
        return tick

    def _next_recorded_poll(self) -> float:
        """The first of the monitor's recorded polls after the last tick (inf: none left)."""
        polls = self.slurm.polls_at_s
        i = bisect.bisect_right(polls, self.last_tick)
        return polls[i] if i < len(polls) else math.inf

    def _tick(self, t: float) -> None:
        """One poll while Slurm says RUNNING: `Monitor._poll`'s order (observe, fatal lines, hangs)."""
        self.last_tick = t
        if t >= self.next_poll:
            self.next_poll += self.setup.poll_s * (1 + math.floor((t - self.next_poll) / self.setup.poll_s))
        self.view.mark_running(t)
        self._check_fatal(t)
        self._check_hang(t)

    # -- reading ----------------------------------------------------------------------------------

    def next_tick_s(self) -> float:
        """The next tick at which a verdict is possible: lines before it are read in one pass.

        Ticks before it are no-ops (no fatal line is due, and the hang tracker's earliest
        deadline, which more lines only push later, is not reached), so skipping the reads
        between them changes nothing.
        """
        tick = self._next_tick()
        hang = self.setup.hang
        tracker = self.view.tracker
        if self.view.fatal_due_s() is not None or hang is None or tracker is None or self.done:
            return tick
        deadline = self.view.next_hang_deadline_s(hang)
        if deadline is None or deadline <= tick:
            return tick
        grid = self.next_poll + self.setup.poll_s * math.ceil((deadline - self.next_poll) / self.setup.poll_s)
        return min(grid, self._next_recorded_poll())

    def group_ends_s(self, start_s: float) -> float:
        """Where a group of lines starting at `start_s` must end: before the next possible verdict.

        A fatal line read inside the group may fall due inside it: that verdict is still exact
        (it sees only the lines read by its time, AttemptView.cause(now)), and what the replay
        reports at it (lines read, offset, the timeline) is cut at its time too. With in-job
        restarts a heal inside the group could hide a window that closed before it: such
        groups are no longer than the window.
        """
        early = self.setup.early
        cap = start_s + early.recovery_window_s if early.in_job_restarts else math.inf
        return min(self.next_tick_s(), cap)

    def read(self, group: Sequence[Batch]) -> None:
        """Batches that all come before the next tick (see `read_lines`)."""
        lines = [line for batch in group for line in batch.lines]
        times = [batch.at_s for batch in group for _ in batch.lines]
        offsets = [batch.end_offset for batch in group for _ in batch.lines]
        self.read_lines(lines, times, offsets)

    def read_lines(self, lines: Sequence[str], times: Sequence[float], offsets: Sequence[int | None]) -> None:
        """Lines that all come before the next tick: one classifier pass, each line at its time.

        `offsets`: the bytes consumed once each line was read, where known. A fatal line
        inside the group brings its own tick (the settle window's end) forward; that verdict
        then sees only the lines read by its time (AttemptView.cause(now)).
        """
        self._read(lambda: self.view.read_timed(lines, times), times, offsets)

    def read_text(self, text: str, times: Sequence[float], encoded: bytes | None = None) -> None:
        """`read_lines` of lines given as one text, each ended by a newline (no offsets known)."""
        self._read(lambda: self.view.read_text_timed(text, times, encoded), times, _NoOffsets(len(times)))

    def _read(
        self, feed: Callable[[], list[Signal]], times: Sequence[float], offsets: Sequence[int | None]
    ) -> None:
        self.run_ticks(times[0])
        if self.done:
            return
        first = self.view.classifier.lines_seen + 1
        signals = feed()
        self._before = (self.result.lines_read, self.offset)
        self._times, self._offsets = times, offsets
        self.result.lines_read += len(times)
        self.offset = offsets[-1]
        for signal in signals:
            self._note_signal(signal, times[signal.line_no - first])
        if any(s.is_cause_candidate for s in signals):
            self.waiting_on_fatal = False  # a new cause may change a "wait for the end"
        for recovery in self.view.take_recoveries():
            self._event(recovery.healed_at_s, "recovery",
                        f"in-job restart healed: iteration {recovery.iteration} after "
                        f"{recovery.fatal.signal.line}")  # fmt: skip

    def _read_by(self, t: float) -> tuple[int, int | None]:
        """Lines read and the offset reached by time `t`."""
        if not self._times or self._times[-1] <= t:
            return self.result.lines_read, self.offset
        k = bisect.bisect_right(self._times, t)
        return (self._before[0] + k, self._offsets[k - 1]) if k else self._before

    def _note_signal(self, signal: Signal, at_s: float) -> None:
        if not (signal.is_fatal or signal.is_cause_candidate or signal.teardown_start):
            return
        if self._kept_signals >= MATTERING_KEPT:
            self.result.dropped_signals += 1
            return
        self._kept_signals += 1
        what = "teardown" if signal.teardown else signal.role
        rank = "" if signal.rank is None else f" rank {signal.rank}"
        self._event(at_s, "signal", f"{what} {signal.error_type or '-'} ({signal.pattern}{rank}, "
                                    f"line {signal.line_no}): {signal.line}", signal)  # fmt: skip

    # -- verdicts ---------------------------------------------------------------------------------

    def _check_fatal(self, t: float) -> None:
        if self.decided_early or self.waiting_on_fatal:
            return
        verdict = self.view.fatal_verdict(t)
        if verdict is not None:
            self._judge(verdict)

    def _check_hang(self, t: float) -> None:
        if self.setup.hang is None or self.decided_early or self.done:
            return
        verdict = self.view.hang_verdict(t, self.setup.hang)
        if verdict is not None:
            detail = verdict.hang.detail if verdict.hang else ""
            self._event(t, "hang", f"hang detected: {detail}")
            self._judge(verdict)

    def _end(self, t: float) -> None:
        end = self.slurm.end or assumed_end(has_cause=self.view.classifier.root_cause() is not None)
        self.result.end = end
        self._event(t, "end", f"Slurm: {end.label()} ({end.evidence})")
        if not self.decided_early:
            record = JobRecord("replay", end.state, "replay", exit_code=end.exit_code)
            self._judge(self.view.end_verdict(record, t))
        self.done = True

    def _judge(self, verdict: Verdict) -> None:
        view = self.view
        history = history_from(
            self.setup.past, self.setup.attempt_no, view.last_iteration, view.first_iteration
        )
        judgement = judge(self.setup.policy, verdict, history, self.view.classifier.signals)
        if not judgement.record:
            self.waiting_on_fatal = verdict.trigger is Trigger.FATAL_LINE
            reason = judgement.decision.reason
            if reason not in self._waits:
                self._waits.add(reason)
                self._event(verdict.now_s, "wait", reason)
            return
        self.result.root_cause = verdict.cause
        self.result.decisions.append(ReplayDecision(verdict.now_s, judgement, *self._read_by(verdict.now_s)))
        decision = judgement.decision
        self._event(verdict.now_s, "decision", f"{decision.action.value}: {decision.reason}")
        if judgement.outcome.still_running:
            self.decided_early = True
        if judgement.ends_attempt:
            self.done = True
            self.result.ended_by = "decision"

    def _event(self, at_s: float, kind: str, text: str, signal: Signal | None = None) -> None:
        self.result.events.append(Event(at_s, kind, text, signal))

    def finish(self, last_read_s: float) -> ReplayResult:
        """The log is read: the ticks before its end, then Slurm's end at the end (or the last read)."""
        end_s = max(self.slurm.end_at_s, last_read_s)
        self.run_ticks(end_s)
        if not self.done:
            self._end(end_s)  # the poll that sees the end judges it, and nothing else about the attempt
        result = self.result
        result.events.sort(key=lambda e: e.at_s)  # signals of a group are noted before its ticks ran
        if result.ended_by == "decision" and result.decisions:
            at = result.decisions[-1].at_s
            result.events = [e for e in result.events if e.at_s <= at or e.kind not in ("signal", "recovery")]
            result.lines_read = result.decisions[-1].lines_read
        result.first_fatal = self.view.first_fatal  # a healed one is reported as a recovery event
        if result.root_cause is None and not result.decisions:
            result.root_cause = self.view.classifier.root_cause()
        return result


def replay(
    batches: Iterable[Batch], slurm: SlurmView, setup: ReplaySetup, *, source: str | None = None,
    every_poll: bool = False,
) -> ReplayResult:  # fmt: skip
    """Replay one attempt: batches at their times, ticks, verdicts, judgements (see the module doc).

    `every_poll`: run every poll, also those at which nothing can happen (`_pass_quiet_polls`
    skips them): the same result, the slow way; the tests compare the two.
    """
    run = _Replay(setup, slurm, source, every_poll=every_poll)
    last_read_s = slurm.running_at_s
    group: list[Batch] = []
    ends_s = math.inf
    for batch in batches:
        if group and batch.at_s >= ends_s:
            run.read(group)  # the next tick comes before this batch
            group = []
        if run.done:
            break
        if not group:
            ends_s = run.group_ends_s(batch.at_s)
        group.append(batch)
        last_read_s = batch.at_s
    if group and not run.done:
        run.read(group)
    return run.finish(last_read_s)


def replay_lines(
    lines: Sequence[str], times_s: Sequence[float], slurm: SlurmView, setup: ReplaySetup,
    *, source: str | None = None,
) -> ReplayResult:  # fmt: skip
    """`replay` of lines each read at its own time (`times_s`, never decreasing), as from a log file.

    The same groups as `replay(batches_of(lines, times_s), ...)`, found by bisection instead of
    one batch per distinct time: a 50 MB log has ~150,000 of them.
    """
    run = _Replay(setup, slurm, source)
    no_offsets = [None] * len(lines)

    def read(start: int, end: int) -> None:
        run.read_lines(lines[start:end], times_s[start:end], no_offsets[start:end])

    return _replay_groups(run, times_s, read)


def replay_log(
    log: RecordedLog, slurm: SlurmView, setup: ReplaySetup, *, source: str | None = None
) -> ReplayResult:
    """`replay_lines` of a log split by core/replay/recorded_log.py: each group read as one text.

    The same groups and the same classifier input as `replay_lines(log.lines, ...)` (a
    differential test says so), without decoding the log line by line and joining it again.
    """
    run = _Replay(setup, slurm, source)
    times_s = log.times.times_s

    def read(start: int, end: int) -> None:
        text, encoded = log.text_and_bytes(start, end)
        run.read_text(text, times_s[start:end], encoded)

    return _replay_groups(run, times_s, read)


def _replay_groups(run: _Replay, times_s: Sequence[float], read: Callable[[int, int], None]) -> ReplayResult:
    """Lines [0, len(times_s)) in groups that end before the next possible verdict."""
    start, n = 0, len(times_s)
    while start < n and not run.done:
        ends_s = run.group_ends_s(times_s[start])
        # As `replay` groups batches: the lines before the next possible verdict, and at least all
        # those of the first line's time (one batch; a tick at that time runs after it).
        end = max(
            bisect.bisect_left(times_s, ends_s, start), bisect.bisect_right(times_s, times_s[start], start)
        )
        read(start, end)
        start = end
    return run.finish(times_s[start - 1] if start else run.slurm.running_at_s)


class _NoOffsets(Sequence[None]):
    """`n` unknown offsets, without a list of them."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [None] * len(range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        return None


def batches_of(lines: Sequence[str], times_s: Sequence[float]) -> list[Batch]:
    """Consecutive lines with the same time read as one batch (as a tailer would hand them over)."""
    n = len(lines)
    starts = [0, *(i for i in range(1, n) if times_s[i] != times_s[i - 1])]
    ends = [*starts[1:], n]
    return [Batch(times_s[a], tuple(lines[a:b])) for a, b in zip(starts, ends, strict=True)] if n else []

"""What the monitor has read about one running attempt, and when it is over. No I/O.

`AttemptView` joins the classifier (what the lines mean) and the progress
tracker (is it moving) for one attempt, and turns them into `Verdict`s for
core/decide/judge.py. The monitor and `autoexp replay` drive it the same way: `read`
lines at the time they were read, `mark_running` when Slurm first says RUNNING,
and ask `fatal_verdict` / `hang_verdict` on every tick and `end_verdict` when the
job ended. Time is always passed in (`now`): a replay runs it on a virtual clock.

Acting at the first fatal line. With NCCL, when one rank dies the others block
in their next collective until the process-group timeout (10 min by default),
and the launcher's SIGTERM does not end them: Slurm says RUNNING all that time.
So a fatal line (a root or cascade signal that is not a catch-all, or the
launcher's `worker_failed` teardown line) ends the attempt: `fatal_verdict`
returns a verdict once `settle_s` has passed since the first one, long enough
to read the burst of sibling lines (the dead rank's traceback, torchrun's exit
summary) so the root is chosen from all of them. A teardown with no cause line
at all is a worker that died without a word (SIGKILL, the kernel's OOM
killer): the verdict's cause is a synthetic `killed` signal made from that line.

In-job recovery. When the job's launcher restarts workers in place (torchrun
`--max-restarts` > 0, ft_launcher), a fatal line is not the end of the job: it
opens a recovery window (`recovery_window_s`) instead. A new high-water mark of
the iteration counter inside the window means the launcher healed the job: the
fatal state is cleared and the recovery is reported (`take_recoveries`). If the
counter does not pass its old best within the window, the verdict comes as usual.

An uncaught exception that does not end its process. The catch-all exception line is not a
fatal line (a run may catch and log one), but the lines only an uncaught exception prints (a
`[rankN]:` excepthook traceback, torchrun's Root Cause block: core/classify/uncaught.py) open the
settle window like one. A progress line read after it withdraws it (the run went on); none
within the window, and it is judged like any other fatal line. With several ranks, a peer's
iteration line that was in flight when one rank raised (the iteration every rank had finished,
read with the traceback) is no sign of life: only a later iteration, or progress read a while
after the traceback (IN_FLIGHT_S), withdraws it.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from oellm_autoexp.core.classify.classifier import Classifier, ProgressMark
from oellm_autoexp.core.classify.guess import is_guess, judged_cause
from oellm_autoexp.core.classify.root_cause import SILENT_DEATH_PATTERN, log_cause, root_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal, SignalPattern, as_pattern_set
from oellm_autoexp.core.classify.uncaught import Hold, hold_of, is_withdrawn, root_cause_header_after
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch import progress
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.progress import HangConfig, ProgressEvent, ProgressState, StartupLimit
from oellm_autoexp.core.watch.schedule import PauseSchedule
from oellm_autoexp.core.watch.verdict import FatalMark, Trigger, Verdict

DEFAULT_SETTLE_S = 5.0  # torchrun's exit summary follows the dead rank's lines within ~1-2 s
# Peers' output of the iteration they were finishing when one rank raised comes with the
# traceback (the same read, at most a poll later); the 2-GPU run of 2026-11-25 printed rank 0's
# `iteration 229` just after rank 1's traceback at the start of 230.
IN_FLIGHT_S = 2.0
KILLED_PATTERN = SILENT_DEATH_PATTERN  # the synthetic cause of a teardown with no cause line


@dataclass(frozen=True)
class EarlySettings:
    """How a running attempt's fatal lines are acted on."""

    settle_s: float = DEFAULT_SETTLE_S  # wait this long after the first fatal line, then judge
    in_job_restarts: bool = False  # the launcher restarts workers in place (torchrun --max-restarts > 0)
    recovery_window_s: float = 600.0  # with in-job restarts: time for progress to pass its old best
    recovery_window_startup_s: float | None = None  # the same before any iteration (None: the above)


@dataclass(frozen=True)
class Recovery:
    """An in-job restart that healed: the counter passed its old best after a fatal line."""

    fatal: FatalMark  # the fatal line that opened the window
    healed_at_s: float  # when the new best iteration was read
    iteration: int  # the new best
    window_s: float  # the window it healed within
    best_before: int | None  # the high-water mark when the window opened

    def describe(self) -> str:
        """One line for the event record and `autoexp explain`."""
        before = "no iteration yet" if self.best_before is None else f"best {self.best_before}"
        return (
            f"in-job restart healed: iteration {self.iteration} reached "
            f"{self.healed_at_s - self.fatal.at_s:.0f} s after line {self.fatal.signal.line_no} "
            f"({before}; recovery window {self.window_s:.0f} s)"
        )

    def evidence(self) -> Evidence:
        """The event's record: the line that opened the window, and when it opened and healed."""
        line = self.fatal.signal
        opened, healed = _clock(self.fatal.at_s), _clock(self.healed_at_s)
        return Evidence(
            kind=OutcomeKind.ALIVE.value, state=JobState.RUNNING.value, trigger="recovery",
            error_type=line.error_type, signal=line.pattern, iteration=self.iteration, lines=(line.line,),
            observed=f"recovery window of {self.window_s:.0f} s opened {opened} by line {line.line_no}, "
                     f"healed {healed}",
            first_fatal_line_no=line.line_no, first_fatal_line=line.line,
            after_first_fatal_s=round(self.healed_at_s - self.fatal.at_s, 3),
        )  # fmt: skip


def _clock(at_s: float) -> str:
    """HH:MM:SS UTC of an epoch time (a replay's virtual clock too)."""
    return datetime.fromtimestamp(at_s, UTC).strftime("%H:%M:%S")


def progress_event(signal: Signal | ProgressMark) -> ProgressEvent | None:
    """The progress tracker's event for a progress signal (checkpoint save start/end, iteration)."""
    kind = _event_kind(signal.pattern)
    if kind is not None:
        return kind
    value = signal.groups.get("iteration") or signal.groups.get("step")
    if value is not None and value.isdigit() and "loaded" not in signal.pattern:
        return progress.Iteration(int(value))
    return None


@functools.lru_cache(maxsize=1024)
def _event_kind(name: str) -> ProgressEvent | None:
    """The event a pattern's name alone says (a save's start or end); None: read its groups."""
    if name.endswith("save_start") or name.endswith("saving"):
        return progress.CheckpointStart()
    if name.endswith("saved"):
        return progress.CheckpointDone()
    return None


class AttemptView:
    """One attempt's log as read so far, its progress, and its first fatal line."""

    def __init__(
        self,
        patterns: PatternSet | Sequence[SignalPattern],
        *,
        source: str | None = None,
        early: EarlySettings | None = None,
        startup: StartupLimit | None = None,
        schedule: PauseSchedule | None = None,
    ) -> None:
        # The last STEP_SAMPLES + 1 lines of a run of iteration lines keep the tracker's interval
        # samples and the log interval what reading every line would give.
        self.classifier = Classifier(patterns, source=source, progress_tail=progress.STEP_SAMPLES + 1)
        self.patterns = as_pattern_set(patterns)  # its word model guesses a FAILED end no line explains
        self.early = early or EarlySettings()
        # The start-up limit learned from the job's earlier attempts (core/watch/startup.py);
        # None: HangConfig.startup_timeout_s.
        self.startup = startup
        # When the loop pauses on purpose (evaluation, saves), from the job's launch arguments
        # (core/watch/schedule.py); None: unknown, the plain progress floor everywhere.
        self.schedule = schedule
        self.first_iteration_s: float | None = None  # when the first iteration line was read
        self.tracker: ProgressState | None = None  # started when first seen running (or a line is read)
        self.first_fatal: FatalMark | None = None  # the first fatal line not yet healed
        self.best_iteration: int | None = None  # the counter's high-water mark
        self.total_iterations: int | None = None  # what the counter counts towards (`iteration N/ TOTAL`)
        self.log_stride: int | None = None  # iterations between the last two new highs (the log interval)
        self._best_before_fatal: int | None = None  # the high-water mark when the window opened
        self._recoveries: list[Recovery] = []
        # How first_fatal is held (core/classify/uncaught.py): UNCAUGHT, a progress line would withdraw it
        self._hold: Hold | None = None
        self._root_cause_header: int | None = None  # line number of torchrun's last Root Cause header
        self._kept_times: list[float] = []  # when each of classifier.signals was read

    # -- reading ---------------------------------------------------------------------------------

    def mark_running(self, now: float) -> None:
        """Slurm says RUNNING: the startup clock starts (unless lines already started it)."""
        if self.tracker is None:
            self.tracker = progress.start(now)

    def read(self, lines: Iterable[str], now: float) -> list[Signal]:
        """Classify lines read at `now`; returns their signals (progress included)."""
        kept = len(self.classifier.signals)
        signals = self.classifier.feed(lines)
        self._after_read(signals, now)
        self._kept_times.extend(now for _ in self.classifier.signals[kept:])
        return signals

    def read_timed(self, lines: Sequence[str], times: Sequence[float]) -> list[Signal]:
        """Classify a block whose lines were read at different times (`times`, non-decreasing).

        For a replay: one classifier pass over many lines, each signal placed at its own
        line's time, and verdicts asked at a time before the block's end see only what had
        been read by then (`cause(now)`).
        """
        if not lines:
            return []
        return self._read_timed(lambda: self.classifier.feed(lines), times)

    def read_text_timed(
        self, text: str, times: Sequence[float], encoded: bytes | None = None
    ) -> list[Signal]:
        """`read_timed` of lines given as one text, each ended by a newline (one time per line).

        The kept lines of progress runs reach the tracker as marks (Classifier.feed_marked) and
        are not returned: what they do to the tracker and the counters is what their Signals do.
        `encoded`: the text's UTF-8 bytes, when at hand (saves encoding it again).
        """
        if not text:
            return []
        return self._read_timed(lambda: self.classifier.feed_marked(text, len(times), encoded), times)

    def _read_timed(
        self, feed: Callable[[], Sequence[Signal | ProgressMark]], times: Sequence[float]
    ) -> list[Signal]:
        first, kept = self.classifier.lines_seen + 1, len(self.classifier.signals)
        found = feed()
        self._after_read(found, times[-1], lambda s: times[s.line_no - first])
        self._kept_times.extend(times[s.line_no - first] for s in self.classifier.signals[kept:])
        return [s for s in found if isinstance(s, Signal)]

    def read_text(self, chunk: str, now: float) -> list[Signal]:
        """Like `read`, for raw text that may end mid-line."""
        kept = len(self.classifier.signals)
        signals = self.classifier.feed_text(chunk)
        self._after_read(signals, now)
        self._kept_times.extend(now for _ in self.classifier.signals[kept:])
        return signals

    def flush(self, now: float) -> list[Signal]:
        """Classify a pending partial line (at the end of a log)."""
        kept = len(self.classifier.signals)
        signals = self.classifier.flush()
        self._after_read(signals, now)
        self._kept_times.extend(now for _ in self.classifier.signals[kept:])
        return signals

    def backdate_output(self, written_s: float) -> None:
        """The lines read so far were written by `written_s` (a resumed log's mtime), not when read.

        Moves the tracker's clocks that those reads set (start, last output, last advance, a
        save's start) back to it, so silence counts from when the job was last heard from.
        """
        t = self.tracker
        if t is None:
            return
        self.tracker = replace(
            t,
            started_s=min(t.started_s, written_s),
            last_output_s=min(t.last_output_s, written_s),
            progress_s=None if t.progress_s is None else min(t.progress_s, written_s),
            checkpoint_since_s=None if t.checkpoint_since_s is None else min(t.checkpoint_since_s, written_s),
            warned_s=None if t.warned_s is None else min(t.warned_s, written_s),
        )

    def _after_read(
        self,
        signals: Sequence[Signal | ProgressMark],
        now: float,
        time_of: Callable[[Signal | ProgressMark], float] | None = None,
    ) -> None:
        """The tracker and the fatal/stop marks after a read; `time_of` gives each signal its own time."""
        tracker = progress.advance(self.tracker or progress.start(now), progress.Output(), now)
        gaps = self.classifier.progress_gaps
        pending: list[tuple[int, float, bool]] = []  # marks' iterations, folded into `tracker` together
        for signal in signals:
            at = now if time_of is None else time_of(signal)
            mark = isinstance(signal, ProgressMark)
            event = (
                progress_event(signal)
                if isinstance(signal, ProgressMark) or signal.role == "progress"
                else None
            )
            if isinstance(event, progress.Iteration) and signal.line_no in gaps:
                event = progress.Iteration(event.iteration, after_gap=True)
            if mark and isinstance(event, progress.Iteration):
                pending.append((event.iteration, at, event.after_gap))
            else:
                if pending:
                    tracker, pending = progress.advance_iterations(tracker, pending), []
                if event is not None:
                    tracker = progress.advance(tracker, event, at)
            if event is not None and self._is_withdrawn_by(signal.line_no, event, at):
                self.first_fatal, self._hold = None, None  # the run went on
            if isinstance(event, progress.Iteration):
                self._on_iteration(event.iteration, at, after_gap=event.after_gap)
                total = signal.groups.get("train_iters")
                if total is not None and total.isdigit():
                    self.total_iterations = int(total)
            if isinstance(signal, Signal):  # a mark is never fatal
                self._note_fatal(signal, at)
                if signal.warns_of_hang:  # the shorter clock of core/watch/progress.py
                    tracker = progress.advance(tracker, progress.HangWarning(), at)
        if pending:
            tracker = progress.advance_iterations(tracker, pending)
        self.tracker = tracker

    def _is_withdrawn_by(self, progress_line_no: int, event: ProgressEvent, at: float) -> bool:
        """A progress line after a pending uncaught exception's line: whatever printed it went on,
        unless it is a peer's in-flight line (the next logged iteration, read with the traceback)."""
        fatal = self.first_fatal
        if fatal is None or not is_withdrawn(self._hold, fatal.signal.line_no, progress_line_no):
            return False
        if isinstance(event, progress.Iteration) and self._best_before_fatal is not None:
            in_flight = self._best_before_fatal + (self.log_stride or 1)
            if event.iteration <= in_flight and at - fatal.at_s < IN_FLIGHT_S:
                return False
        return True

    def _note_fatal(self, signal: Signal, at: float) -> None:
        """Keep the first fatal line (or uncaught exception's line); a fatal line confirms the latter."""
        self._root_cause_header = root_cause_header_after(signal, self._root_cause_header)
        hold = hold_of(signal, self._root_cause_header)
        if hold is None:
            return
        if self.first_fatal is None:
            self.first_fatal = FatalMark(signal, at)
            self._best_before_fatal = self.best_iteration
            self._hold = hold
        elif hold is Hold.FATAL:
            self._hold = Hold.FATAL  # confirmed: its settle window, if open, keeps its start

    def _on_iteration(self, iteration: int, now: float, *, after_gap: bool = False) -> None:
        if self.first_iteration_s is None:
            self.first_iteration_s = now
        if self.best_iteration is None or iteration > self.best_iteration:
            if self.best_iteration is not None and not after_gap:
                self.log_stride = iteration - self.best_iteration
            self.best_iteration = iteration
        fatal = self.first_fatal
        if fatal is None or not self.early.in_job_restarts:
            return
        old_best = self._best_before_fatal
        if old_best is None or iteration > old_best:
            # Only a NEW high-water mark counts: a launcher that restarts again and again
            # rewinds the counter to the last checkpoint each time.
            self._recoveries.append(Recovery(fatal, now, iteration, self.recovery_window_s(), old_best))
            self.first_fatal = None
            if self.tracker is not None:
                self.tracker = replace(self.tracker, progress_s=now)

    def take_recoveries(self) -> list[Recovery]:
        """In-job recoveries seen since the last call (the monitor records them as events)."""
        found, self._recoveries = self._recoveries, []
        return found

    # -- verdicts ----------------------------------------------------------------------------------

    @property
    def last_iteration(self) -> int | None:
        return self.classifier.last_iteration

    @property
    def first_iteration(self) -> int | None:
        return self.classifier.first_iteration

    def recovery_window_s(self) -> float:
        """The recovery window for the pending fatal line: the startup one while no iteration was seen."""
        startup = self.early.recovery_window_startup_s
        if startup is not None and self._best_before_fatal is None:
            return startup
        return self.early.recovery_window_s

    def fatal_due_s(self) -> float | None:
        """When `fatal_verdict` will answer (None: no fatal line pending)."""
        if self.first_fatal is None:
            return None
        wait = self.recovery_window_s() if self.early.in_job_restarts else self.early.settle_s
        return self.first_fatal.at_s + wait

    def fatal_verdict(self, now: float) -> Verdict | None:
        """The attempt is over by its own lines: the verdict once the settle (or recovery) window passed."""
        due = self.fatal_due_s()
        if due is None or now < due or self.first_fatal is None:
            return None
        read = self.cause(now=now)
        # A fatal line ended the attempt (the launcher tore it down, a rank raised): it failed.
        cause = judged_cause(read, self.classifier, self.patterns, failed=True)
        if cause is None:
            return None  # the launcher was told to stop from outside: Slurm's end state will say why
        notes = (
            []  # a guess on the first fatal line's own words is that line
            if cause.line_no == self.first_fatal.signal.line_no
            else [f"first fatal line: {self.first_fatal.signal.line}"]
        )
        if self._hold is Hold.UNCAUGHT:
            notes.append(
                f"uncaught exception (line {self.first_fatal.signal.line_no}) and no progress line "
                f"in the {due - self.first_fatal.at_s:.0f} s after it"
            )
        if self.early.in_job_restarts:
            notes.append(self._window_closed())
        observed = "; ".join(notes) or None
        return Verdict(Trigger.FATAL_LINE, now, cause=cause, first_fatal=self.first_fatal, observed=observed,
                       unguessed=read if is_guess(cause) else None)  # fmt: skip

    def _window_closed(self) -> str:
        best = self._best_before_fatal
        return (
            f"recovery window of {self.recovery_window_s():.0f} s passed with no new best iteration "
            f"({'none seen' if best is None else f'best {best}'}, latest {self.last_iteration})"
        )

    def next_hang_deadline_s(self, config: HangConfig) -> float | None:
        """The earliest time a hang verdict is possible if nothing more is read (progress.next_deadline_s)."""
        if self.tracker is None:
            return None
        lowest = progress.lowest_floor_s(config, self.schedule)
        return progress.next_deadline_s(self.tracker, config, self.startup, lowest)

    def hang_verdict(self, now: float, config: HangConfig) -> Verdict | None:
        """The tracker's hang verdict, judged on the root cause when the log holds one."""
        if self.tracker is None:
            return None
        if self.first_fatal is not None and self.early.in_job_restarts:
            return None  # the recovery window decides: the launcher may be restarting workers
        floor = progress.progress_floor(self.tracker, config, self.schedule, self.log_stride)
        hang = progress.check_hang(self.tracker, now, config, self.startup, floor)
        if hang is None:
            return None
        root = self.cause(roots_only=True, now=now)
        return Verdict(Trigger.HANG, now, cause=root, hang=hang, first_fatal=self.first_fatal,
                       observed=f"hang: {hang.detail}")  # fmt: skip

    def end_verdict(self, record: JobRecord, now: float) -> Verdict:
        """Slurm says the attempt ended: judged on the log's cause (core/classify/root_cause.py `log_cause`).

        An attempt Slurm calls FAILED whose log no pattern explains (or only a launcher's "exited 1"),
        or whose worker died with last words no pattern knows, gets the cause its words read as
        (core/classify/guess.py `judged_cause`), named as a guess. Slurm's other ends (COMPLETED,
        OUT_OF_MEMORY, NODE_FAIL, TIMEOUT, ...) say why themselves: nothing is guessed there.
        """
        read = self.cause()
        cause = judged_cause(read, self.classifier, self.patterns, failed=record.state is JobState.FAILED)
        worker_exit = self._worker_exit_code()
        observed = f"job ended {record.state.value}" + (
            f" exit {record.exit_code}" if record.exit_code else ""
        )
        if worker_exit is not None and worker_exit != record.exit_code:
            observed += f" (worker exit {worker_exit})"
        return Verdict(
            Trigger.END, now, cause=cause, record=record, first_fatal=self.first_fatal, observed=observed,
            worker_exit_code=worker_exit, iteration=self.classifier.last_iteration,
            total_iterations=self.total_iterations, log_stride=self.log_stride,
            unguessed=read if is_guess(cause) else None,
        )  # fmt: skip

    def _worker_exit_code(self) -> int | None:
        """The failed worker's own exit code as the launcher reported it (torchrun exits 1 itself)."""
        for signal in self.classifier.signals:
            value = signal.groups.get("exitcode")
            if value is not None and value.lstrip("-").isdigit():
                return int(value)
        return None

    def cause(self, *, roots_only: bool = False, now: float | None = None) -> Signal | None:
        """The root cause of what was read by `now` (default: all of it); a teardown with no cause
        line at all is a silent death (`killed`)."""
        signals = self.classifier.signals
        if now is not None and self._kept_times and self._kept_times[-1] > now:
            signals = signals[: bisect.bisect_right(self._kept_times, now)]
        if roots_only:
            cause = root_cause(signals)
            return cause if cause is not None and cause.role == "root" else None
        return log_cause(signals)

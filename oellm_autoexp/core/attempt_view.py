"""What the monitor has read about one running attempt, and when it is over. No I/O.

`AttemptView` joins the classifier (what the lines mean) and the progress
tracker (is it moving) for one attempt, and turns them into `Verdict`s for
core/judge.py. The monitor and `autoexp replay` drive it the same way: `read`
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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from oellm_autoexp.core import progress
from oellm_autoexp.core.classify import Classifier
from oellm_autoexp.core.job_record import JobRecord
from oellm_autoexp.core.judge import FatalMark, Trigger, Verdict
from oellm_autoexp.core.progress import HangConfig, ProgressEvent, ProgressState
from oellm_autoexp.core.signals import PatternSet, Signal, SignalPattern

DEFAULT_SETTLE_S = 5.0  # torchrun's exit summary follows the dead rank's lines within ~1-2 s
KILLED_PATTERN = "worker_died_silently"  # the synthetic cause of a teardown with no cause line


@dataclass(frozen=True)
class EarlySettings:
    """How a running attempt's fatal lines are acted on."""

    settle_s: float = DEFAULT_SETTLE_S  # wait this long after the first fatal line, then judge
    in_job_restarts: bool = False  # the launcher restarts workers in place (torchrun --max-restarts > 0)
    recovery_window_s: float = 600.0  # with in-job restarts: time for progress to pass its old best


@dataclass(frozen=True)
class Recovery:
    """An in-job restart that healed: the counter passed its old best after a fatal line."""

    fatal: FatalMark  # the fatal line that opened the window
    healed_at_s: float  # when the new best iteration was read
    iteration: int  # the new best


def progress_event(signal: Signal) -> ProgressEvent | None:
    """The progress tracker's event for a progress signal (checkpoint save start/end, iteration)."""
    name = signal.pattern
    if name.endswith("save_start") or name.endswith("saving"):
        return progress.CheckpointStart()
    if name.endswith("saved"):
        return progress.CheckpointDone()
    value = signal.groups.get("iteration") or signal.groups.get("step")
    if value is not None and value.isdigit() and "loaded" not in name:
        return progress.Iteration(int(value))
    return None


class AttemptView:
    """One attempt's log as read so far, its progress, and its first fatal line."""

    def __init__(
        self,
        patterns: PatternSet | Sequence[SignalPattern],
        *,
        source: str | None = None,
        early: EarlySettings | None = None,
    ) -> None:
        self.classifier = Classifier(patterns, source=source)
        self.early = early or EarlySettings()
        self.tracker: ProgressState | None = None  # started when first seen running (or a line is read)
        self.first_fatal: FatalMark | None = None  # the first fatal line not yet healed
        self.best_iteration: int | None = None  # the counter's high-water mark
        self._best_before_fatal: int | None = None  # the high-water mark when the window opened
        self._stop_requested = False  # the launcher itself was told to stop (scancel, time limit)
        self._recoveries: list[Recovery] = []

    # -- reading ---------------------------------------------------------------------------------

    def mark_running(self, now: float) -> None:
        """Slurm says RUNNING: the startup clock starts (unless lines already started it)."""
        if self.tracker is None:
            self.tracker = progress.start(now)

    def read(self, lines: Iterable[str], now: float) -> list[Signal]:
        """Classify lines read at `now`; returns their signals (progress included)."""
        signals = self.classifier.feed(lines)
        self._after_read(signals, now)
        return signals

    def read_text(self, chunk: str, now: float) -> list[Signal]:
        """Like `read`, for raw text that may end mid-line."""
        signals = self.classifier.feed_text(chunk)
        self._after_read(signals, now)
        return signals

    def flush(self, now: float) -> list[Signal]:
        """Classify a pending partial line (at the end of a log)."""
        signals = self.classifier.flush()
        self._after_read(signals, now)
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
        )

    def _after_read(self, signals: list[Signal], now: float) -> None:
        tracker = progress.advance(self.tracker or progress.start(now), progress.Output(), now)
        for signal in signals:
            event = progress_event(signal) if signal.role == "progress" else None
            if event is not None:
                tracker = progress.advance(tracker, event, now)
            if isinstance(event, progress.Iteration):
                self._on_iteration(event.iteration, now)
            if signal.teardown_start == "stop_requested" and self.first_fatal is None:
                # Only a stop asked for BEFORE any worker failed explains the teardown; one that
                # comes after (the supervisor's own cancel, Slurm's kill) says nothing about it.
                self._stop_requested = True
            if signal.is_fatal and self.first_fatal is None:
                self.first_fatal = FatalMark(signal, now)
                self._best_before_fatal = self.best_iteration
        self.tracker = tracker

    def _on_iteration(self, iteration: int, now: float) -> None:
        if self.best_iteration is None or iteration > self.best_iteration:
            self.best_iteration = iteration
        fatal = self.first_fatal
        if fatal is None or not self.early.in_job_restarts:
            return
        old_best = self._best_before_fatal
        if old_best is None or iteration > old_best:
            # Only a NEW high-water mark counts: a launcher that restarts again and again
            # rewinds the counter to the last checkpoint each time.
            self._recoveries.append(Recovery(fatal, now, iteration))
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

    def fatal_due_s(self) -> float | None:
        """When `fatal_verdict` will answer (None: no fatal line pending)."""
        if self.first_fatal is None:
            return None
        wait = self.early.recovery_window_s if self.early.in_job_restarts else self.early.settle_s
        return self.first_fatal.at_s + wait

    def fatal_verdict(self, now: float) -> Verdict | None:
        """The attempt is over by its own lines: the verdict once the settle (or recovery) window passed."""
        due = self.fatal_due_s()
        if due is None or now < due or self.first_fatal is None:
            return None
        cause = self.cause()
        if cause is None:
            return None  # the launcher was told to stop from outside: Slurm's end state will say why
        observed = (
            None if cause is self.first_fatal.signal else f"first fatal line: {self.first_fatal.signal.line}"
        )
        return Verdict(Trigger.FATAL_LINE, now, cause=cause, first_fatal=self.first_fatal, observed=observed)

    def hang_verdict(self, now: float, config: HangConfig) -> Verdict | None:
        """The tracker's hang verdict, judged on the root cause when the log holds one."""
        if self.tracker is None:
            return None
        if self.first_fatal is not None and self.early.in_job_restarts:
            return None  # the recovery window decides: the launcher may be restarting workers
        hang = progress.check_hang(self.tracker, now, config)
        if hang is None:
            return None
        root = self.cause(roots_only=True)
        return Verdict(Trigger.HANG, now, cause=root, hang=hang, first_fatal=self.first_fatal,
                       observed=f"hang: {hang.detail}")  # fmt: skip

    def end_verdict(self, record: JobRecord, now: float) -> Verdict:
        """Slurm says the attempt ended: judged on the log's root cause."""
        cause = self.classifier.root_cause()
        observed = f"job ended {record.state.value}" + (
            f" exit {record.exit_code}" if record.exit_code else ""
        )
        return Verdict(Trigger.END, now, cause=cause, record=record, first_fatal=self.first_fatal,
                       observed=observed)  # fmt: skip

    def cause(self, *, roots_only: bool = False) -> Signal | None:
        """The root cause so far; a teardown with no cause line at all is a silent death (`killed`)."""
        cause = self.classifier.root_cause()
        if cause is not None and (cause.role == "root" or not roots_only):
            return cause
        if roots_only or self._stop_requested or self.first_fatal is None:
            return None
        teardown = self.first_fatal.signal
        if teardown.teardown_start != "worker_failed":
            return cause
        return Signal(
            pattern=KILLED_PATTERN, error_type="killed", subsystem="launcher", role="root",
            line=teardown.line, line_no=teardown.line_no, groups=teardown.groups, source=teardown.source,
        )  # fmt: skip

"""What was observed about one attempt, ready to be judged: the `Verdict` the attempt's view hands the judge. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.watch.progress import HangVerdict


class Trigger(StrEnum):
    END = "end"  # Slurm (or the local executor) says the attempt ended
    FATAL_LINE = "fatal_line"  # a fatal line settled while the job still ran
    HANG = "hang"  # the progress tracker judged the running job hung
    LOST = "lost"  # unknown to squeue and sacct past the deadline


@dataclass(frozen=True)
class FatalMark:
    """The first line that said the attempt is over, and when the monitor read it."""

    signal: Signal  # the line's signal (a root/cascade, or the launcher's teardown line)
    at_s: float  # when it was read (epoch seconds; a replay's virtual clock)


@dataclass(frozen=True)
class Verdict:
    """What was observed about one attempt, ready to be judged."""

    trigger: Trigger
    now_s: float  # when it was observed
    cause: Signal | None = None  # the root cause from the log (or a synthetic `killed`), if any
    # When `cause` is a guess from the log's words (core/classify/guess.py): the reading it replaced
    # (None, a silent death, a launcher's "exited 1"). The judge falls back on it rather than stop on a guess.
    unguessed: Signal | None = None
    record: JobRecord | None = None  # Slurm's end record (trigger END)
    hang: HangVerdict | None = None  # the tracker's verdict (trigger HANG)
    first_fatal: FatalMark | None = None  # the first fatal line, when one was read
    observed: str | None = None  # one line: what was seen besides the cause
    worker_exit_code: int | None = None  # the training process's own exit code, from the launcher's lines
    iteration: int | None = None  # the last iteration the log reported
    total_iterations: int | None = None  # the total it was counting towards (Megatron's `N/ TOTAL`)
    log_stride: int | None = None  # iterations between the last two logged ones (Megatron's --log-interval)

"""Which exception lines say a rank died of an uncaught exception. No I/O.

The catch-all exception line (`RuntimeError: ...`, pattern `python_exception`) is also printed
by runs that catch an exception and log it, so alone it never ends an attempt
(`Signal.is_fatal`): it counts once the launcher tears the job down, or at the job's end. A rank
that raised but whose process does not exit (a stuck `destroy_process_group`, an atexit hook, a
non-daemon thread, a failed async checkpoint writer) then leaves the attempt idle until the hang
limit. Two kinds of line are printed for an uncaught exception alone:

- torch.distributed's excepthook (installed by `init_process_group`) prefixes every line of an
  uncaught exception's traceback with `[rankN]: `; a logged, caught one has no such prefix
  (torchrun's `--tee` prefix is `[default0]:`, not `[rank0]:`);
- torchrun's Root Cause block (the elastic error file's traceback) ends in the failed rank's
  exception line.

Such a line is final once the process stops making progress: core/watch/attempt_view.py opens
the settle window at it, as at any fatal line, and withdraws it when a progress line follows
within the window (whatever printed it went on training).

Which lines the monitor acts on, and which a later progress line withdraws, is decided here once
(`hold_of`, `is_withdrawn`, `acts_on`) for both readers: core/watch/attempt_view.py, which adds the
timing (the settle window, a peer's in-flight iteration), and the corpus score's reading of a
healthy excerpt (`acts_while_running`, core/classify/score.py), which reads no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum

from oellm_autoexp.core.classify.classifier import strip_prefix
from oellm_autoexp.core.classify.signals import Signal

# torch.distributed's excepthook prefix, possibly behind a launcher's (srun's `0: `).
_EXCEPTHOOK_PREFIX = re.compile(r"\[rank\d+\]:")
ROOT_CAUSE_HEADER = "torchrun_root_cause_header"  # the pattern of `Root Cause (first observed failure):`
ROOT_CAUSE_SPAN_LINES = (
    60  # the block's lines after its header: time, host, rank, exitcode, error file, traceback
)


def has_excepthook_prefix(line: str) -> bool:
    """The line carries torch.distributed's `[rankN]:` excepthook prefix."""
    body, _rank = strip_prefix(line)
    prefix = line[: len(line) - len(body)]
    return _EXCEPTHOOK_PREFIX.search(prefix) is not None


def is_uncaught_exception(signal: Signal, root_cause_header_line_no: int | None) -> bool:
    """A catch-all exception line that only an uncaught exception prints.

    `root_cause_header_line_no`: the line number of the last Root Cause header read (None: none).
    """
    if not signal.fallback or signal.error_type is None or signal.teardown:
        return False
    if has_excepthook_prefix(signal.line):
        return True
    header = root_cause_header_line_no
    return header is not None and 0 < signal.line_no - header <= ROOT_CAUSE_SPAN_LINES


class Hold(Enum):
    """How the monitor holds a line it acts on while the run goes on (core/watch/attempt_view.py)."""

    FATAL = "fatal"  # a fatal line (`Signal.is_fatal`): the settle window opens and nothing withdraws it
    UNCAUGHT = "uncaught"  # an uncaught exception's line: as FATAL, unless a later progress line withdraws it


def root_cause_header_after(signal: Signal, header_line_no: int | None) -> int | None:
    """The line number of the last Root Cause header once `signal` is read (None: none yet)."""
    return signal.line_no if signal.pattern == ROOT_CAUSE_HEADER else header_line_no


def hold_of(signal: Signal, root_cause_header_line_no: int | None) -> Hold | None:
    """How the monitor holds this line while the run goes on; None: it does not act on it.

    A run that goes on and ends well is never judged, so its other readings (a catch-all or
    fallback line, a DataLoader worker's own last words) never become a cause.
    """
    if signal.is_fatal:
        return Hold.FATAL
    if is_uncaught_exception(signal, root_cause_header_line_no):
        return Hold.UNCAUGHT
    return None


def is_withdrawn(hold: Hold | None, line_no: int, progress_line_no: int | None) -> bool:
    """A progress line after an uncaught exception's line (`line_no`) withdraws it: whatever printed
    it went on. A fatal line is never withdrawn. `progress_line_no` None: no progress line."""
    return hold is Hold.UNCAUGHT and progress_line_no is not None and progress_line_no > line_no


def acts_on(signal: Signal, root_cause_header_line_no: int | None, progress_line_no: int | None) -> bool:
    """Does the monitor act on this line, given the Root Cause header read before it and the log's
    last progress line (None: none)?"""
    hold = hold_of(signal, root_cause_header_line_no)
    return hold is not None and not is_withdrawn(hold, signal.line_no, progress_line_no)


def acts_while_running(signals: Sequence[Signal], last_progress_line_no: int | None = None) -> bool:
    """Would the monitor act on these lines while the job still runs (core/watch/attempt_view.py)?

    It does on a fatal line, or on an uncaught exception's line that no progress line follows
    (`last_progress_line_no`: the log's last progress line, None: none; a later one withdraws it, as
    the monitor's does). Unlike the monitor, this reads no clock: a peer's in-flight iteration read
    with the traceback (IN_FLIGHT_S there) withdraws it here too.
    """
    header: int | None = None
    for signal in signals:
        header = root_cause_header_after(signal, header)
        if acts_on(signal, header, last_progress_line_no):
            return True
    return False

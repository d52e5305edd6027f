"""Backfill segments: when each segment's walltime warning comes, and the time run so far. Pure.

A segment asks for `--time=W` and gets `--signal=B:<sig>@<buffer>`: the job saves and exits
`buffer` seconds before its limit, and the monitor's walltime cycle submits the next segment,
which resumes from that checkpoint. Slurm checks limits (and sends these signals) only every
30 s, so a buffer under MIN_SAVE_BUFFER_S can arrive after the kill: it is raised to that floor,
with a warning. A segment must leave time to run after the warning: one no longer than the
buffer plus MIN_RUN_S is refused (never a zero or negative time before the warning).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

MIN_SAVE_BUFFER_S = 60  # twice Slurm's 30 s limit-check period
MIN_RUN_S = 30  # a segment runs at least this long before its warning


class SegmentSignal(NamedTuple):  # not a dataclass: `autoexp status` imports this module
    """How many seconds before a segment's end the warning is sent, and a warning for the user."""

    seconds_before: int
    warning: str | None = None


def segment_signal(walltime_min: int, save_buffer_s: int) -> SegmentSignal:
    """The warning time of a `walltime_min` segment; ValueError if it leaves no time to run."""
    buffer_s, warning = save_buffer_s, None
    if save_buffer_s < MIN_SAVE_BUFFER_S:
        buffer_s = MIN_SAVE_BUFFER_S
        warning = (
            f"save buffer {save_buffer_s} s raised to {MIN_SAVE_BUFFER_S} s: Slurm sends the walltime"
            " signal only every 30 s, a shorter one can come after the kill"
        )
    if walltime_min * 60 < buffer_s + MIN_RUN_S:
        raise ValueError(
            f"a {walltime_min} min segment with a {buffer_s} s save buffer leaves under {MIN_RUN_S} s"
            f" to train; use segments of at least {-(-(buffer_s + MIN_RUN_S) // 60)} min"
        )
    return SegmentSignal(buffer_s, warning)


def elapsed_s(spans: Iterable[tuple[datetime | None, datetime | None]], now: datetime) -> float:
    """Time run over all segments: (started, ended) pairs; a running one counts up to `now`."""
    total = 0.0
    for started, ended in spans:
        if started is not None:
            total += max(0.0, ((ended or now) - started).total_seconds())
    return total


def format_wait(seconds: float) -> str:
    """A wait a person reads at a glance: 45 s, 12 min, 3.5 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

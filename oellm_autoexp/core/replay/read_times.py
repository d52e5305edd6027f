"""The monitor's timing record: when it read each stretch of an attempt's log. No I/O.

`autoexp replay --session` replays a past attempt exactly as the monitor saw it:
the same bytes at the same times. The monitor keeps one `ReadMark` (a store row)
per batch of lines the log tailer handed it. To keep the table small, a batch
extends the row before it instead of adding one when all of these hold:

- it starts where that row ends (the same file, read on);
- it was read within COALESCE_S of the row's time (a burst the tailer split);
- neither it nor that row carried a signal other than progress (a fatal or
  teardown line, whose time decides when the monitor acts, keeps its row and time).

A coalesced row keeps its first batch's time, so a replay delivers the later
lines of a burst up to COALESCE_S early: far below the settle window (5 s) and
the hang limits (minutes), and never for a line a decision's timing rests on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

COALESCE_S = 1.0  # batches of one burst within this long share a row


@dataclass(frozen=True)
class ReadMark:
    """One stored row: bytes [start_offset, end_offset) were read at `read_at_s`."""

    row_id: int | None  # the store's row id, once saved (the monitor saves a poll's rows together)
    start_offset: int
    end_offset: int
    read_at_s: float  # epoch seconds
    has_signal: bool = False  # some batch of it carried a non-progress signal


def coalesces(last: ReadMark | None, start_offset: int, read_at_s: float, has_signal: bool) -> bool:
    """True when a new batch extends `last` rather than adding a row (see the module docstring)."""
    return (
        last is not None
        and not has_signal
        and not last.has_signal
        and start_offset == last.end_offset
        and 0.0 <= read_at_s - last.read_at_s < COALESCE_S
    )


def extended(last: ReadMark, end_offset: int) -> ReadMark:
    """`last` grown to cover a coalesced batch."""
    return replace(last, end_offset=end_offset)

"""What `autoexp run` shows: a live status table on a terminal, plain lines elsewhere.

On a terminal the screen is redrawn after each poll: the session's status
table, then the latest event lines. Anywhere else (a pipe, a log file, CI)
each event is printed once as a plain line, so logs stay greppable.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import TextIO

RECENT_LINES = 15  # event lines kept under the table
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


class LiveView:
    def __init__(self, table: Callable[[], str], out: TextIO | None = None) -> None:
        self._table = table
        self._out = out or sys.stdout
        self._recent: deque[str] = deque(maxlen=RECENT_LINES)
        self.is_live = self._out.isatty()

    def say(self, line: str) -> None:
        """An event line: printed at once when not live, shown under the table when live."""
        self._recent.append(line)
        if not self.is_live:
            print(line, file=self._out, flush=True)

    def redraw(self) -> None:
        if not self.is_live:
            return
        text = "\n".join([self._table(), "", *self._recent])
        self._out.write(CLEAR + text + "\n")
        self._out.flush()

"""When each line of a recorded log was written, from the stamps the lines carry. No I/O.

`autoexp replay` delivers a log's lines on a virtual clock; this module gives
each line its time. Stamps recognised (after an optional `[rank3]:`,
`[default0]:` or `3: ` prefix):

- Megatron            ` [2026-11-23 01:46:00] iteration ...`
- torch/glog          `W1123 01:47:01.713000 1200 torch/distributed/run.py:851] ...` (no year)
- NCCL (c10d)         `[E1123 01:45:37.633598028 ProcessGroupNCCL.cpp:689] ...` (no year)
- ISO-8601 / logging  `2026-11-23T01:46:00.123Z ...`, `2026-11-23 01:46:00,123 INFO ...`
- Slurm               `slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-11-23T01:50:00 ***`
- Megatron markers    `[after training is done] datetime: 2026-11-23 01:50:00`
- syslog (kernel)     `Nov 23 01:45:37 gpu-node-009 kernel: NVRM: Xid ...` (no year)

A stamp without a year takes it from the first stamp in the log that has one,
else from `fallback_year` (the caller passes the file's mtime year). Zone
designators are ignored: every stamp is read as the same wall clock (one job's
lines come from one zone), and times are epoch seconds of that wall clock as if
it were UTC; only differences matter to a replay.

Lines without a stamp. With `between="previous"` (the default) such a line
gets the time of the last stamp before it (lines before the first stamp get
the first stamp's time): a line is known to be written after the stamp before
it, and nothing says how long after. `between="linear"` spreads the lines
between two stamps evenly by line count instead. A log with no stamp at all
replays in arrival order with zero gaps (every line at time 0), and
`LineTimes.warning` says so.

Stamps never go back: lines arrive in order, so a stamp earlier than one already
seen (another host's skewed clock, torchrun's summary quoting an earlier failure
time) is read as the latest time so far.
"""

from __future__ import annotations

import calendar
import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Between = Literal["previous", "linear"]

_PREFIX = r"^(?:\[(?:rank|default)\d+\]:|\d+: )?"
_FRACTION = r"(?:[.,](?P<frac>\d+))?"
_CLOCK = r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)"
_DATE = r"(?P<Y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)"
# Stamps at the start of a line (after the rank prefix), tried in this order.
_LEADING = re.compile(
    _PREFIX
    + r"(?:"
    + rf"\s*\[{_DATE}[ T]{_CLOCK}{_FRACTION}\]"  # Megatron
    + r"|\[?[IWEF](?P<gm>\d\d)(?P<gd>\d\d) (?P<gH>\d\d):(?P<gM>\d\d):(?P<gS>\d\d)(?:\.(?P<gfrac>\d+))?[ \]]"
    + r"|(?P<iY>\d{4})-(?P<im>\d\d)-(?P<id>\d\d)[T ](?P<iH>\d\d):(?P<iM>\d\d):(?P<iS>\d\d)(?:[.,](?P<ifrac>\d+))?"
    + r"|(?P<sb>[A-Z][a-z]{2}) +(?P<sd>\d{1,2}) (?P<sH>\d\d):(?P<sM>\d\d):(?P<sS>\d\d) "  # syslog
    + r")"
)
# Stamps inside a line; looked for only when the line holds the marker (a cheap `in`).
_INSIDE = {
    " CANCELLED AT ": re.compile(rf" CANCELLED AT {_DATE}T{_CLOCK}"),
    "] datetime: ": re.compile(rf"\] datetime: {_DATE} {_CLOCK}"),
}
_YEAR = re.compile(rf"(?:^|[\[ ]){_DATE}[ T]{_CLOCK}")
_MONTHS = {name: i for i, name in enumerate(calendar.month_abbr) if name}
YEAR_SCAN_LINES = 100_000  # how far to look for a stamp with a year
NO_STAMP_WARNING = "no line carries a time stamp: replayed in arrival order with zero gaps"


@dataclass(frozen=True)
class LineTimes:
    """One time per line (epoch seconds of the log's wall clock), and how they were found."""

    times_s: tuple[float, ...]  # one per line, never decreasing
    stamped: int  # how many lines carried a stamp
    warning: str | None = None  # set when no line carried one (arrival order, zero gaps)


@functools.lru_cache(maxsize=4096)
def _minute(year: int, month: int, day: int, hh: str, mm: str) -> int | None:
    """Epoch seconds of a stamp's minute (cached: a log's lines share a few thousand minutes)."""
    if not 1 <= month <= 12 or not 1 <= day <= 31:
        return None
    try:
        return calendar.timegm((year, month, day, int(hh), int(mm), 0, 0, 0, 0))
    except (ValueError, OverflowError):
        return None


def _epoch(year: int, month: int, day: int, hh: str, mm: str, ss: str, frac: str | None) -> float | None:
    base = _minute(year, month, day, hh, mm)
    if base is None:
        return None
    return base + int(ss) + (float(f"0.{frac}") if frac else 0.0)


def stamp_of(line: str, year: int) -> float | None:
    """The time a line's own stamp says, or None; `year` completes stamps that lack one."""
    m = _LEADING.match(line)
    if m is not None:
        # By position (groups() is several times cheaper than groupdict() on every line):
        # Megatron Y m d H M S frac, glog gm gd gH gM gS gfrac, ISO iY .. ifrac, syslog sb sd sH sM sS.
        g = m.groups()
        if g[0]:
            return _epoch(int(g[0]), int(g[1]), int(g[2]), g[3], g[4], g[5], g[6])
        if g[7]:
            return _epoch(year, int(g[7]), int(g[8]), g[9], g[10], g[11], g[12])
        if g[13]:
            return _epoch(int(g[13]), int(g[14]), int(g[15]), g[16], g[17], g[18], g[19])
        month = _MONTHS.get(g[20] or "")
        if month:
            return _epoch(year, month, int(g[21]), g[22], g[23], g[24], None)
    for marker, regex in _INSIDE.items():
        if marker in line and (found := regex.search(line)) is not None:
            h = found.groupdict()
            return _epoch(int(h["Y"]), int(h["m"]), int(h["d"]), h["H"], h["M"], h["S"], None)
    return None


def year_of(lines: Iterable[str], fallback_year: int) -> int:
    """The year of the first stamp that names one (yearless stamps need it)."""
    for line in itertools.islice(lines, YEAR_SCAN_LINES):
        m = _YEAR.search(line, 0, 60) or (_YEAR.search(line) if " AT " in line else None)
        if m is not None and 1970 <= int(m["Y"]) <= 9999:
            return int(m["Y"])
    return fallback_year


def line_times(lines: Sequence[str], *, fallback_year: int, between: Between = "previous") -> LineTimes:
    """Each line's time (see the module docstring for lines without a stamp)."""
    year = year_of(lines, fallback_year)
    stamps: list[float | None] = []
    latest: float | None = None
    for line in lines:
        t = stamp_of(line, year)
        if t is not None:
            latest = t if latest is None else max(latest, t)
            t = latest
        stamps.append(t)
    stamped = sum(1 for t in stamps if t is not None)
    if stamped == 0:
        return unstamped(len(stamps))
    filled = _linear(stamps) if between == "linear" else _previous(stamps)
    return LineTimes(tuple(filled), stamped)


def unstamped(n_lines: int) -> LineTimes:
    """Times for a log in which no line carries a stamp: arrival order, zero gaps, with a warning."""
    return LineTimes(tuple(0.0 for _ in range(n_lines)), 0, NO_STAMP_WARNING)


def _previous(stamps: list[float | None]) -> list[float]:
    first = next(t for t in stamps if t is not None)
    out, last = [], first
    for t in stamps:
        last = t if t is not None else last
        out.append(last)
    return out


def _linear(stamps: list[float | None]) -> list[float]:
    out = _previous(stamps)
    known = [i for i, t in enumerate(stamps) if t is not None]
    for a, b in itertools.pairwise(known):
        ta, tb = out[a], out[b]
        for i in range(a + 1, b):
            out[i] = ta + (tb - ta) * (i - a) / (b - a)
    return out

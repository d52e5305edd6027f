"""A recorded log's bytes as lines with their times, for a replay. No I/O.

`split_log(data, ...)` gives a `RecordedLog`: the lines as the log tailer hands
them over (split at `\\n`, one trailing `\\r` dropped, bad UTF-8 replaced), each
line's time by exactly the rules of core/replay/line_time.py (`line_times`), and the
text of any run of lines in one piece, so that a replay classifies a stretch of
the log without splitting and joining it again.

Speed. A stamp is parsed from every line (a stamp earlier than one already
seen reads as the latest time so far, so no line can be skipped), which in
Python costs more than classifying the line. With numpy (the `fast` extra) the
lines are found, and the stamps of the common layouts parsed, on the bytes in
bulk:

- newline positions, a few MB at a time;
- at a line's start, Megatron's ` [YYYY-MM-DD HH:MM:SS(.fraction)]` (no space or
  one before the `[`) and torch/glog's or NCCL's `W1123 01:47:01.713000 ` /
  `[E1123 01:45:37.633598028 `, with up to `MAX_FRACTION_DIGITS` fraction digits:
  a fixed window of bytes per line, and the checks and the `calendar.timegm`
  arithmetic of `line_time._epoch` done on whole columns;
- every other line (another layout, a rank prefix, no stamp, a date the bulk
  checks refuse) is decoded and read by `line_time.stamp_of`, one by one.

The running maximum and the fill of unstamped lines are then array operations.
Both ways give the same times (tests/unit/core/replay/test_recorded_log.py compares them on
every fixture log, generated logs and near misses of each layout); without
numpy, for a small log (importing numpy alone takes ~60 ms) or for
`between="linear"`, the line-by-line way runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from oellm_autoexp.core.replay.line_time import (
    Between,
    LineTimes,
    line_times,
    stamp_of,
    unstamped,
    year_of,
)

NUMPY_MIN_BYTES = 1 << 20  # smaller logs are split line by line: no numpy import for them
NEWLINE_SCAN_BYTES = 1 << 22  # newlines are looked for this many bytes at a time
MAX_FRACTION_DIGITS = 9  # NCCL prints nanoseconds; longer fractions go line by line
_EPOCH_ORDINAL = 719_163  # date(1970, 1, 1).toordinal(), as calendar.timegm counts days
_DAYS_BEFORE_MONTH = (0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)  # index 1..12

_ENGINE = "auto"  # auto | python | numpy: tests and the benchmark pick one


def set_engine(name: str) -> None:
    """`auto` (numpy for logs of NUMPY_MIN_BYTES and more, when installed), `python` or `numpy`."""
    global _ENGINE
    if name not in ("auto", "python", "numpy"):
        raise ValueError(f"unknown engine {name!r}")
    if name == "numpy" and _numpy() is None:
        raise ValueError("numpy is not installed (pip install 'oellm-autoexp[fast]')")
    _ENGINE = name


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return numpy


def decoded_lines(data: bytes) -> list[str]:
    """Lines as the log tailer hands them over: split at \\n, a trailing \\r dropped, bad UTF-8 replaced."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.removesuffix(b"\r").decode("utf-8", errors="replace") for p in parts]


@dataclass
class RecordedLog:
    """A log's lines (decoded on demand), their times, and the text of any run of them."""

    data: bytes
    n: int  # how many lines
    times: LineTimes
    # Where line i lies in `data`: data[starts[i]:ends[i]] (ends at its \n); None when `_lines` holds them.
    starts: Any = None
    ends: Any = None
    _lines: list[str] | None = field(default=None, repr=False)

    @property
    def lines(self) -> list[str]:
        """Every line, decoded (kept once asked for)."""
        if self._lines is None:
            self._lines = [self.line(i) for i in range(self.n)]
        return self._lines

    def line(self, i: int) -> str:
        """Line i as `decoded_lines` gives it."""
        if self._lines is not None:
            return self._lines[i]
        raw = self.data[self.starts[i] : self.ends[i]]
        return raw.removesuffix(b"\r").decode("utf-8", errors="replace")

    def tail(self, count: int) -> list[str]:
        """The last `count` lines."""
        return [self.line(i) for i in range(max(0, self.n - count), self.n)]

    def text(self, start: int, end: int) -> str:
        """Lines [start, end), each ended by a newline, in one string."""
        return self.text_and_bytes(start, end)[0]

    def text_and_bytes(self, start: int, end: int) -> tuple[str, bytes | None]:
        """`text(start, end)`, and its UTF-8 bytes when they are the log's own (valid UTF-8).

        From the bytes, a trailing \\r stays on each line: the classifier strips it as it strips
        it from a line (Classifier.feed), so the signals are those of the decoded lines.
        """
        if start >= end:
            return "", None
        if self._lines is not None:
            return "\n".join(self._lines[start:end]) + "\n", None
        stop = self.ends[end - 1]
        raw = (
            self.data[self.starts[start] : stop + 1]
            if stop < len(self.data)
            else self.data[self.starts[start] :] + b"\n"
        )
        try:
            return raw.decode("utf-8"), raw
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace"), None


def split_log(data: bytes, *, fallback_year: int, between: Between = "previous") -> RecordedLog:
    """The log's lines and their times (see the module docstring)."""
    np = None if _ENGINE == "python" else _numpy()
    small = _ENGINE == "auto" and len(data) < NUMPY_MIN_BYTES
    if np is None or small or between != "previous" or not data:
        lines = decoded_lines(data)
        times = line_times(lines, fallback_year=fallback_year, between=between)
        return RecordedLog(data, len(lines), times, _lines=lines)
    return _split_bulk(np, data, fallback_year)


def _split_bulk(np: Any, data: bytes, fallback_year: int) -> RecordedLog:
    buf = np.frombuffer(data, np.uint8)
    # Newlines a few MB at a time: the comparison's array stays in the cache (twice as fast).
    step = NEWLINE_SCAN_BYTES
    newlines = np.concatenate(
        [np.flatnonzero(buf[at : at + step] == 10) + at for at in range(0, len(buf), step)]
    )
    ends = newlines if data.endswith(b"\n") else np.append(newlines, len(data))
    n = len(ends)
    starts = np.empty(n, np.int64)
    if n:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    log = RecordedLog(data, n, LineTimes((), 0), starts, ends)
    stamps = np.full(n, np.nan)
    rest = _megatron_stamps(np, buf, starts, ends, stamps)
    if len(rest):
        year = year_of(_each_line(log), fallback_year)  # as line_times: the first stamp naming one
        rest = _glog_stamps(np, buf, starts, ends, stamps, rest, year)
        slow = [stamp_of(log.line(i), year) for i in rest.tolist()]
        stamps[rest] = [np.nan if t is None else t for t in slow]
    stamped = int(np.count_nonzero(~np.isnan(stamps)))
    if stamped == 0:
        log.times = unstamped(n)
        return log
    # line_time.line_times: a stamp earlier than the latest so far reads as the latest; a line
    # without one takes the last stamp before it, the lines before the first stamp the first.
    latest = np.fmax.accumulate(stamps)
    first = int(np.argmax(~np.isnan(latest)))
    latest[:first] = latest[first]
    log.times = LineTimes(tuple(latest.tolist()), stamped)
    return log


def _each_line(log: RecordedLog) -> Iterator[str]:
    return (log.line(i) for i in range(log.n))


def _megatron_stamps(np: Any, buf: Any, starts: Any, ends: Any, stamps: Any) -> Any:
    """Stamps ` [YYYY-MM-DD HH:MM:SS(.f)]` (0 or 1 space first) into `stamps`; the lines left."""
    size = len(buf)
    first = buf[np.minimum(starts, size - 1)]
    spaced = (first == 32) & (buf[np.minimum(starts + 1, size - 1)] == 91)  # ` [`
    at = starts + spaced  # where the `[` would be
    width = 20 + 2 + MAX_FRACTION_DIGITS
    rows = np.flatnonzero((spaced | (first == 91)) & (at + width <= size))
    window = _windows(np, buf, at[rows], width)
    # `[` Y Y Y Y - M M - D D (space|T) H H : M M : S S ...
    ok = _digits(np, window, (1, 2, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19))
    ok &= (window[:, 5] == 45) & (window[:, 8] == 45) & (window[:, 14] == 58) & (window[:, 17] == 58)
    ok &= (window[:, 11] == 32) | (window[:, 11] == 84)
    digits, ok = _fraction_end(np, window, ends[rows] - at[rows], 20, b"]", ok)
    year, month, day = _number(np, window, 1, 4), _number(np, window, 6, 2), _number(np, window, 9, 2)
    ok &= year >= 1
    clock = (_number(np, window, 12, 2), _number(np, window, 15, 2), _number(np, window, 18, 2))
    _put(np, stamps, rows, ok, year, month, day, clock, window, 21, digits)
    return _left(np, len(starts), rows[ok])


def _glog_stamps(np: Any, buf: Any, starts: Any, ends: Any, stamps: Any, lines: Any, year: int) -> Any:
    """Stamps `W1123 01:47:01.713000 ` or `[E1123 01:45:37.633598028 ` (torch/glog, NCCL) of `lines`."""
    size = len(buf)
    begin = starts[lines]
    bracket = buf[np.minimum(begin, size - 1)] == 91
    at = begin + bracket  # the level letter
    width = 14 + 2 + MAX_FRACTION_DIGITS
    keep = at + width <= size
    near_end, lines, at = lines[~keep], lines[keep], at[keep]
    window = _windows(np, buf, at, width)
    # (I|W|E|F) M M D D space H H : M M : S S ...
    letter = window[:, 0]
    ok = (letter == 73) | (letter == 87) | (letter == 69) | (letter == 70)
    ok &= _digits(np, window, (1, 2, 3, 4, 6, 7, 9, 10, 12, 13)) & (window[:, 5] == 32)
    ok &= (window[:, 8] == 58) & (window[:, 11] == 58)
    digits, ok = _fraction_end(np, window, ends[lines] - at, 14, b" ]", ok, separators=b".")
    month, day = _number(np, window, 1, 2), _number(np, window, 3, 2)
    clock = (_number(np, window, 6, 2), _number(np, window, 9, 2), _number(np, window, 12, 2))
    years = np.full(len(lines), year, np.int64)
    ok &= years >= 1
    _put(np, stamps, lines, ok, years, month, day, clock, window, 15, digits)
    return np.concatenate((lines[~ok], near_end))


def _windows(np: Any, buf: Any, at: Any, width: int) -> Any:
    """The `width` bytes from each offset in `at` (one row each; every offset has room for them)."""
    if len(at) == 0:
        return np.zeros((0, width), np.uint8)
    return np.lib.stride_tricks.sliding_window_view(buf, width)[at]


def _digits(np: Any, window: Any, columns: tuple[int, ...]) -> Any:
    return ((window[:, list(columns)] - 48) < 10).all(axis=1)  # uint8: bytes below `0` wrap round


def _number(np: Any, window: Any, column: int, count: int) -> Any:
    total = np.zeros(len(window), np.int64)
    for c in range(column, column + count):
        total = total * 10 + window[:, c] - 48
    return total


def _fraction_end(
    np: Any, window: Any, room: Any, column: int, closers: bytes, ok: Any, separators: bytes = b".,"
) -> tuple[Any, Any]:
    """(fraction digits, ok): after the seconds at `column`, a closer, or a separator, 1 to
    MAX_FRACTION_DIGITS digits and a closer, all inside the line (`room` bytes from the window's start)."""
    after = window[:, column]
    dotted = np.zeros(len(window), bool)
    for sep in separators:
        dotted |= after == sep
    digit = (window[:, column + 1 : column + 2 + MAX_FRACTION_DIGITS] - 48) < 10
    # The first non-digit; a fraction too long for the window reads as 0 digits and is refused.
    digits = np.where(dotted, np.argmin(digit, axis=1), 0)
    close = np.where(dotted, column + 1 + digits, column)
    closer = np.take_along_axis(window, close[:, None], axis=1)[:, 0]
    closed = np.zeros(len(window), bool)
    for c in closers:
        closed |= closer == c
    ok = ok & closed & (close < room) & (~dotted | (digits >= 1))
    return digits, ok


def _put(
    np: Any, stamps: Any, rows: Any, ok: Any, year: Any, month: Any, day: Any,
    clock: tuple[Any, Any, Any], window: Any, column: int, digits: Any,
) -> None:  # fmt: skip
    """The epoch seconds of line_time._epoch into stamps[rows[ok]]."""
    ok = ok & (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)  # line_time._minute's checks
    if not ok.all():
        rows, year, month, day, window, digits = (
            rows[ok],
            year[ok],
            month[ok],
            day[ok],
            window[ok],
            digits[ok],
        )
        clock = (clock[0][ok], clock[1][ok], clock[2][ok])
    # calendar.timegm: date(year, month, 1).toordinal() - epoch + day - 1, then h, m, s.
    before = year - 1
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    ordinal = (
        before * 365 + before // 4 - before // 100 + before // 400
        + np.array(_DAYS_BEFORE_MONTH)[month] + ((month > 2) & leap) + 1
    )  # fmt: skip
    days = ordinal - _EPOCH_ORDINAL + day - 1
    seconds = ((days * 24 + clock[0]) * 60 + clock[1]) * 60 + clock[2]
    # line_time._epoch adds float("0.<digits>"): the integer <digits> / 10**k, both exact in a
    # float, divided with one rounding, is that same correctly rounded value.
    fraction_s = np.zeros(len(rows))
    part = np.flatnonzero(digits)
    if len(part):
        count, columns = digits[part], window[part]
        fraction = np.zeros(len(part), np.int64)
        for k in range(int(count.max())):
            fraction = np.where(k < count, fraction * 10 + columns[:, column + k] - 48, fraction)
        scale = np.array([float(10**k) for k in range(MAX_FRACTION_DIGITS + 1)])
        fraction_s[part] = fraction / scale[count]
    stamps[rows] = seconds.astype(np.float64) + fraction_s


def _left(np: Any, n: int, done: Any) -> Any:
    """The lines in range(n) not in `done`."""
    left = np.ones(n, bool)
    left[done] = False
    return np.flatnonzero(left)

"""Log lines -> signals: matching a line, a block or a growing log against a PatternSet. No I/O.

Prefixes are stripped first (core/classify/prefixes.py); a line is matched
against a pattern's regex only if it holds one of the pattern's keywords
(core/classify/keyword_index.py). core/classify/matcher.py finds a block's
candidate lines in bulk (one multi-literal pass, and a pattern's own regex over
the block for keywords that are on most lines), so most lines are never looked
at in Python; the Classifier also matches only the last line (or the last
`progress_tail` lines) of a run of progress lines. A replay reads those kept
lines as `ProgressMark`s (`Classifier.feed_marked`): the regex without its
trailing optional part (Megatron's `| lm loss: ...`, matcher.head_regex), no
Signal. Which signal is the cause: core/classify/root_cause.py.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.blocks import decide
from oellm_autoexp.core.classify.catalog import CLASS_PRIORITY
from oellm_autoexp.core.classify.keyword_index import (
    Entry,
    KeywordIndex,
    candidate_indices,
    entries_for,
    finder_for,
    index_of,
    progress_entries,
)
from oellm_autoexp.core.classify.prefixes import nccl_host, rank_of, strip_prefix
from oellm_autoexp.core.classify.root_cause import first_failed_rank, root_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal, SignalPattern, as_pattern_set

MAX_LINE_CHARS = 4000  # a Signal keeps at most this much of its line
MAX_KEPT_SIGNALS = 10_000  # a Classifier keeps the first N non-progress signals
TAIL_CHARS = 32_768  # the end of the log a guess reads (~300 lines; core/classify/guess.py)
# The lines before a launcher's teardown of a failed worker kept as its last words (core/classify/guess.py):
# what it printed as it gave up comes right before the launcher notices (torchrun polls every few seconds).
LAST_WORDS_LINES = 20
MATCHED_KEPT = 4096  # line numbers of the latest matched lines: a guess never reads a line a pattern matched
# torch's NCCL watchdog lines (config/monitoring/base.yaml): every rank of a hung collective prints
# them, so on a job of thousands of ranks they pass MAX_KEPT_SIGNALS; the first of each per rank is
# kept past it (up to MAX_PER_RANK_SIGNALS), so that node blame can see which ranks never printed
# one (core/decide/straggler_blame.py). The same for the stack-dump probe's thread headers: the
# ranks that did not answer are the evidence (core/decide/stack_dump_blame.py).
PER_RANK_PATTERNS = frozenset(
    {"nccl_watchdog_timeout", "nccl_timeout_work", "nccl_watchdog_failure", "stack_dump"}
)
MAX_PER_RANK_SIGNALS = 2 * 131_072


class ProgressMark(NamedTuple):
    """A kept line of a run of progress lines, handed over without a Signal (`Classifier.feed_marked`).

    What the progress tracker reads from the Signal `_match_line` would make: the same line
    number and pattern name, and its groups among MARK_GROUPS (others may be missing: a
    trailing optional part of the regex is not searched). One per (line, matching pattern),
    in pattern order.
    """

    line_no: int
    pattern: str  # the pattern's name
    groups: dict[str, str]
    line: str  # the whole line (Classifier.last_progress is made from it)


def _match_line(
    line: str,
    index: KeywordIndex,
    line_no: int,
    last_hit: dict[str, int] | None,
    source: str | None,
    entries: Sequence[int] | None = None,
) -> list[Signal]:
    """The signals of one line; `entries`: the only entries that can match (default: by keyword)."""
    hits: list[tuple[Entry, re.Match[str]]] = []
    body, prefix_rank = strip_prefix(line)
    for i in entries_for(line, index) if entries is None else entries:
        entry = index.entries[i]
        if entry.after is not None:
            seen = None if last_hit is None else last_hit.get(entry.after)
            if seen is None or line_no - seen > entry.within_lines:
                continue
        match = entry.compiled.search(body)
        if match is not None:
            hits.append((entry, match))
    if not hits:
        return []
    if any(e.fallback for e, _ in hits) and any(e.explains for e, _ in hits):
        hits = [(e, m) for e, m in hits if not e.fallback]
    text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS]
    host = nccl_host(body)
    signals = []
    for entry, match in hits:
        pattern = entry.pattern
        groups = pattern.extract(match)
        if last_hit is not None:
            last_hit[pattern.name] = line_no
        error_type, role, priority = pattern.error_type, pattern.role, pattern.priority
        if pattern.decide is not None:  # the line's fields give the class (core/classify/blocks.py)
            error_type, role = decide(pattern, body)
            # the decided class's priority, but not for a fallback (a fatal shape: a signal or an exit
            # status in any tool's words): it keeps its own rank, level with the cascades, so the line
            # that came first wins (a rank's death before the peers' timeout; the teardown's after it)
            if not pattern.fallback:
                priority = max(priority, CLASS_PRIORITY.get(error_type or "", 0))
        signals.append(
            Signal(
                pattern=pattern.name,
                error_type=error_type,
                subsystem=pattern.subsystem,
                role=role,
                line=text,
                line_no=line_no,
                groups=groups,
                priority=priority,
                teardown=pattern.teardown,
                rank=rank_of(prefix_rank, groups),
                source=source,
                fallback=pattern.fallback,
                teardown_start=pattern.teardown_start,
                blames_node=pattern.blames_node,
                warns_of_hang=pattern.warns_of_hang,
                nccl_host=host,
            )
        )
    return signals


def _mark_line(line: str, index: KeywordIndex, line_no: int, entries: Sequence[int]) -> list[ProgressMark]:
    """`_match_line` of a line between two candidates as marks (only when `index.markable`).

    The same hits (a regex matches where its head does, matcher.head_regex): no entry here
    has `after:` or is a fallback. The `last_hit` record is not
    kept for them: only patterns an `after:` names are looked up there, and these are not.
    """
    body = strip_prefix(line)[0]
    marks = []
    for i in entries:
        regex, name, groups = index.marking[i]
        match = regex.search(body)
        if match is not None:
            found = {g: value for g in groups if (value := match.group(g)) is not None}
            marks.append(ProgressMark(line_no, name, found, line))
    return marks


def _classify_block(
    block: Sequence[str],
    index: KeywordIndex,
    finder: matcher.CandidateFinder | None,
    start_line_no: int,
    last_hit: dict[str, int],
    source: str | None,
    collapse: _Collapse | None = None,
) -> list[Signal]:
    """Every signal of a block (newlines stripped); with a finder, progress may be collapsed."""
    text = "\n".join(block) + "\n"
    if finder is not None and not index.always and text.count("\n") == len(block):
        return _classify_text(text, index, finder, start_line_no, last_hit, source, collapse)
    signals: list[Signal] = []  # the line-by-line path (also for "lines" holding a newline)
    for i in candidate_indices(block, index):
        signals.extend(_match_line(block[i], index, start_line_no + i, last_hit, source))
    return signals


def _classify_text(
    text: str,
    index: KeywordIndex,
    finder: matcher.CandidateFinder,
    start_line_no: int,
    last_hit: dict[str, int],
    source: str | None,
    collapse: _Collapse | None = None,
    n_lines: int | None = None,
    encoded: bytes | None = None,
) -> list[Signal]:
    """Every signal of `text` (lines, each ended by a newline), candidate lines found in bulk.

    `n_lines` and `encoded` (text.encode()), when the caller knows them: see matcher.scan.
    """
    found = finder.scan(text, n_lines, encoded)
    collapse = collapse or _Collapse()
    signals: list[Signal] = []
    lo = (0, 0)  # the first line (index, start offset) after the last candidate
    for i, start in [*found.candidates, (found.n_lines, len(text))]:
        if found.collapse and i > lo[0]:
            run = (lo, (i, start))
            signals.extend(_last_progress(index, found, run, start_line_no, last_hit, source, collapse))
        if start < len(text):
            signals.extend(_match_line(found.line(start), index, start_line_no + i, last_hit, source))
            lo = (i + 1, text.index("\n", start) + 1)
    return signals


@dataclass
class _Collapse:
    """How a run of progress lines between two candidates is read (core/classify/matcher.py)."""

    tail: int = 1  # the last `tail` lines giving signals are matched, the ones before skipped
    gaps: set[int] = field(default_factory=set)  # kept lines that had skipped progress lines before them
    marks: bool = False  # kept lines are given as ProgressMarks (Classifier.feed_marked)


def _last_progress(
    index: KeywordIndex,
    found: matcher.Block,
    run: tuple[tuple[int, int], tuple[int, int]],
    start_line_no: int,
    last_hit: dict[str, int],
    source: str | None,
    collapse: _Collapse,
) -> list[Signal]:
    """The signals of the last `collapse.tail` lines in the run [lo, hi) that give any, in line order.

    Only progress can be there. When more such lines precede them, the first kept line goes
    into `collapse.gaps`: its progress does not follow the one before it.
    """
    lo, hi = run
    kept: list[list[Any]] = []
    while (line := matcher.last_line_with(found, lo, hi)) is not None:
        i, start = line
        hi = line
        text = found.line(start)
        entries = progress_entries(text, index)
        signals: list[Any] = (
            _mark_line(text, index, start_line_no + i, entries)
            if collapse.marks
            else _match_line(text, index, start_line_no + i, last_hit, source, entries)
        )
        if not signals:
            continue
        if len(kept) == collapse.tail:
            collapse.gaps.add(kept[-1][0].line_no)
            break
        kept.append(signals)
    return [signal for signals in reversed(kept) for signal in signals]


def classify_line(
    line: str,
    patterns: PatternSet | Sequence[SignalPattern],
    *,
    line_no: int = 0,
    source: str | None = None,
) -> list[Signal]:
    """Every signal one line gives, in pattern order.

    Patterns with `after:` need the lines before; on a lone line they never match.
    A `fallback` pattern (the generic exception) is dropped when a more specific
    root or cascade pattern matched the same line.
    """
    line = line.rstrip("\r\n")
    return _match_line(line, index_of(as_pattern_set(patterns)), line_no, None, source)


def classify_lines(
    lines: Sequence[str],
    patterns: PatternSet | Sequence[SignalPattern],
    start_line_no: int = 1,
    *,
    source: str | None = None,
) -> list[Signal]:
    """Every signal of a block of lines (newlines stripped), in line order.

    Line numbers count from `start_line_no`. Unlike `classify_line`, patterns
    with `after:` see the lines before them within this block.
    """
    stripped = [line.rstrip("\r\n") for line in lines]
    pattern_set = as_pattern_set(patterns)
    finder = finder_for(pattern_set, collapse_progress=False)
    return _classify_block(stripped, index_of(pattern_set), finder, start_line_no, {}, source)


def _last_lines_text(block: Sequence[str]) -> str:
    """The block's last lines that fill TAIL_CHARS, as text: a 20,000-line block is not joined whole."""
    size, start = 0, len(block)
    while start > 0 and size < TAIL_CHARS:
        start -= 1
        size += len(block[start]) + 1
    return "\n".join(block[start:]) + "\n"


class Classifier:
    """Incremental classification of one growing log, for the monitor.

    Feed it lines (or raw text chunks, which may end mid-line); it keeps the
    first `max_signals` non-progress signals, the last progress signal and the
    highest iteration seen. Nothing here reads files or clocks.

    Between two lines that can give any other signal, only the last
    `progress_tail` progress lines are matched (`fast`, core/classify/matcher.py): `feed`
    returns those, `progress_gaps` names the first of them when earlier ones were
    skipped, and `progress_count` counts the progress signals returned, not every
    such line. A tail of STEP_SAMPLES + 1 keeps what the hang tracker samples
    (core/watch/progress.py) and the log interval exact (core/watch/attempt_view.py).
    """

    def __init__(
        self,
        patterns: PatternSet | Sequence[SignalPattern],
        *,
        source: str | None = None,
        max_signals: int = MAX_KEPT_SIGNALS,
        fast: bool = True,
        progress_tail: int = 1,
    ) -> None:
        pattern_set = as_pattern_set(patterns)
        self._index = index_of(pattern_set)
        # fast: candidate lines in bulk (core/classify/matcher.py), and in a run of progress lines only
        # the last one is classified; False: every keyword line, one by one (the reference path).
        self._finder = finder_for(pattern_set, collapse_progress=True) if fast else None
        self._collapse = _Collapse(max(1, progress_tail))
        self._source = source
        self._max_signals = max_signals
        self._last_hit: dict[str, int] = {}
        self._partial = ""
        self.lines_seen = 0
        self.signals: list[Signal] = []  # root/cascade/info, first max_signals of them (+ per rank)
        self._per_rank: set[tuple[str, int]] = set()  # (pattern, rank) of PER_RANK_PATTERNS kept
        self.dropped_signals = 0  # non-progress signals past max_signals
        self.progress_count = 0
        self.last_progress: Signal | None = None
        self.last_iteration: int | None = None  # `iteration` of the latest progress signal having one
        # `iteration` of the first one: a checkpoint the attempt loaded, or its first log interval
        self.first_iteration: int | None = None
        # The log's last TAIL_CHARS: what a guess reads when no pattern explains a failed attempt
        # (core/classify/guess.py). One copy of each chunk, no per-line work.
        self._tail = ""
        self._tail_cut = False  # the tail starts in the middle of a line
        self._matched: deque[int] = deque(maxlen=MATCHED_KEPT)  # every matched line's number, kept or not
        # (first line number, lines): the LAST_WORDS_LINES lines before the first teardown of a failed
        # worker, taken when it is read, so that later output cannot push them out of the tail
        self.last_words: tuple[int, list[str]] | None = None

    @property
    def progress_gaps(self) -> set[int]:
        """Line numbers, in what the last feed returned, of progress signals that skipped earlier ones."""
        return self._collapse.gaps

    def feed(self, lines: Iterable[str]) -> list[Signal]:
        """Classify complete lines; returns the new signals (progress included)."""
        block = [line.rstrip("\r\n") for line in lines]
        start = self.lines_seen + 1
        self._collapse.gaps = set()
        new = _classify_block(
            block, self._index, self._finder, start, self._last_hit, self._source, self._collapse
        )
        if block:
            self._took(block, start, new)
        self.lines_seen += len(block)
        for signal in new:
            self._keep(signal)
        return new

    def feed_text(self, chunk: str) -> list[Signal]:
        """Classify a chunk of text; a trailing partial line waits for the next chunk."""
        text = self._partial + chunk
        cut = text.rfind("\n") + 1
        complete, self._partial = text[:cut], text[cut:]
        if self._finder is None or self._index.always or "\r" in complete:
            return self.feed(complete.split("\n")[:-1])
        # The text as it is: no split into lines and join again (a third of the time on 4 MB).
        self._collapse.gaps = set()
        new = _classify_text(
            complete, self._index, self._finder, self.lines_seen + 1, self._last_hit, self._source,
            self._collapse,
        )  # fmt: skip
        self._took(complete, self.lines_seen + 1, new)
        self.lines_seen += complete.count("\n")
        for signal in new:
            self._keep(signal)
        return new

    def feed_marked(
        self, text: str, n_lines: int | None = None, encoded: bytes | None = None
    ) -> list[Signal | ProgressMark]:
        """`feed_text` of complete lines, the kept lines of progress runs as `ProgressMark`s.

        `n_lines` (how many lines) and `encoded` (text.encode()), when the caller knows them,
        save passes over the text.

        For a replay, which keeps ~17 lines of every run and reads only their numbers: a mark
        costs a regex search, a Signal several times that. Everything else is as `feed_text`
        (the marks stand where their Signals would, in line order); `last_progress` is a Signal.
        """
        index, finder = self._index, self._finder
        plain = index.always or not index.markable or self._partial or not text.endswith("\n")
        if finder is None or plain or "\r" in text:
            return list(self.feed_text(text))
        self._collapse.gaps = set()
        self._collapse.marks = True
        try:
            new: list[Any] = _classify_text(
                text, index, finder, self.lines_seen + 1, self._last_hit, self._source, self._collapse,
                n_lines, encoded,
            )  # fmt: skip
        finally:
            self._collapse.marks = False
        self._took(text, self.lines_seen + 1, new)
        self.lines_seen += text.count("\n") if n_lines is None else n_lines
        for signal in new:
            self._keep(signal)
        last = next((item for item in reversed(new) if isinstance(item, ProgressMark)), None)
        if last is not None and (self.last_progress is None or self.last_progress.line_no < last.line_no):
            signals = _match_line(last.line, index, last.line_no, None, self._source,
                                  progress_entries(last.line, index))  # fmt: skip
            self.last_progress = next(s for s in reversed(signals) if s.pattern == last.pattern)
        return new

    def flush(self) -> list[Signal]:
        """Classify a pending partial line (at the end of a log)."""
        if not self._partial:
            return []
        line, self._partial = self._partial, ""
        return self.feed([line])

    def root_cause(self) -> Signal | None:
        return root_cause(self.signals)

    def tail_lines(self) -> tuple[int, list[str]]:
        """The last complete lines read (at most TAIL_CHARS of them) and the line number of the first."""
        lines = self._tail.split("\n")[:-1]
        if self._tail_cut and lines:
            lines = lines[1:]  # cut mid-line at the front
        return self.lines_seen - len(lines) + 1, lines

    def matched_line_numbers(self) -> set[int]:
        """The numbers of the latest MATCHED_KEPT lines a pattern matched (signals past the cap included)."""
        return set(self._matched)

    def _took(self, chunk: str | Sequence[str], first_no: int, new: Sequence[Signal | ProgressMark]) -> None:
        """After a read of complete lines numbered from `first_no`: the failed worker's last words if
        its teardown is among `new`, then the tail. Before `lines_seen` counts the chunk."""
        if self.last_words is None:
            teardown = next(
                (s.line_no for s in new if isinstance(s, Signal) and s.teardown_start == "worker_failed"),
                None,
            )
            if teardown is not None:
                self.last_words = self._lines_before(teardown, chunk, first_no)
        self._keep_tail(chunk if isinstance(chunk, str) else _last_lines_text(chunk))

    def _lines_before(self, line_no: int, chunk: str | Sequence[str], first_no: int) -> tuple[int, list[str]]:
        tail_first, tail = self.tail_lines()
        lines = chunk.split("\n")[:-1] if isinstance(chunk, str) else list(chunk)
        numbered = [*zip(range(tail_first, first_no), tail, strict=False), *enumerate(lines, first_no)]
        kept = [(n, line) for n, line in numbered if line_no - LAST_WORDS_LINES <= n < line_no]
        return (kept[0][0], [line for _, line in kept]) if kept else (line_no, [])

    def _keep_tail(self, text: str) -> None:
        """Keep the last TAIL_CHARS of the log; `text` is complete lines."""
        whole, cut = (text, False) if len(text) >= TAIL_CHARS else (self._tail + text, self._tail_cut)
        if len(whole) > TAIL_CHARS:
            whole, cut = whole[-TAIL_CHARS:], whole[-TAIL_CHARS - 1] != "\n"
        self._tail, self._tail_cut = whole, cut

    def first_failed_rank(self) -> int | None:
        return first_failed_rank(self.signals)

    def _note_iteration(self, value: str | None) -> None:
        if value is not None and value.isdigit():
            self.last_iteration = int(value)
            if self.first_iteration is None:
                self.first_iteration = self.last_iteration

    def _keep(self, signal: Signal | ProgressMark) -> None:
        self._matched.append(signal.line_no)
        if isinstance(signal, ProgressMark):
            self.progress_count += 1
            self._note_iteration(signal.groups.get("iteration"))
            return
        if signal.role == "progress":
            self.progress_count += 1
            self.last_progress = signal
            self._note_iteration(signal.groups.get("iteration"))
            return
        key = (signal.pattern, signal.rank) if signal.pattern in PER_RANK_PATTERNS else None
        if len(self.signals) < self._max_signals or self._first_of_rank(key):
            self.signals.append(signal)  # past the cap only the first watchdog line of each rank
        else:
            self.dropped_signals += 1
            return
        if key is not None and key[1] is not None:
            self._per_rank.add((key[0], key[1]))

    def _first_of_rank(self, key: tuple[str, int | None] | None) -> bool:
        if key is None or key[1] is None or len(self._per_rank) >= MAX_PER_RANK_SIGNALS:
            return False
        return (key[0], key[1]) not in self._per_rank

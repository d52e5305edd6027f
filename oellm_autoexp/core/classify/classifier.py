"""Log lines -> signals -> the root cause. No I/O.

The cause of a failed multi-rank job is usually one rank's own error (an OOM, a
segfault, a SIGKILL); the other ranks then time out or lose their peer
(cascades) and the launcher tears everything down (teardown). `root_cause`
picks the cause so that cascades and teardown never win over a root:

1. only `root` and `cascade` signals with an error type, never teardown;
2. roots beat cascades; a cascade is the cause only when no root was seen;
3. higher `priority` first;
4. then the rank torchrun names as its first observed failure (`failed_rank`);
5. then the earliest line.

A cause candidate is dropped when a teardown line names its process as one the
launcher killed itself (a `killed_pid` group, e.g. torchrun's `Unable to shutdown
process 123 via 15, forcefully exiting via 9`): that SIGKILL ends a rank that was
already stuck, so the stuck rank's own signal (a watchdog timeout) stays the cause.

Launcher and rank prefixes (`[rank3]:`, `[default3]:`, srun's `3: `, mpirun's
`[1,3]<stderr>:`, DeepSpeed's `[2023-07-10 04:26:05,876] [INFO] [launch.py:318:fn] `,
Ray's `(RayTrainWorker pid=123) `) are stripped once, before the patterns run, so
a pattern is written for the bare line; the rank a prefix names is kept on the
signal for blame.

Speed: every pattern carries literal keywords (derived from its regex, or
given); a line is matched against a pattern's regex only if it contains one of
its keywords. core/classify/matcher.py finds a block's candidate lines in bulk (one
multi-literal pass, and a pattern's own regex over the block for keywords that
are on most lines), so most lines are never looked at in Python; the
Classifier also matches only the last line (or the last `progress_tail` lines)
of a run of progress lines. A replay reads those kept lines as `ProgressMark`s
(`Classifier.feed_marked`): the regex without its trailing optional part
(Megatron's `| lm loss: ...`, matcher.head_regex), no Signal.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.signals import PatternSet, Signal, SignalPattern, as_pattern_set

MAX_LINE_CHARS = 4000  # a Signal keeps at most this much of its line
MAX_KEPT_SIGNALS = 10_000  # a Classifier keeps the first N non-progress signals
EVIDENCE_LINES = 8
MARK_GROUPS = ("iteration", "step", "train_iters")  # the groups the progress tracker reads (ProgressMark)

# One or more prefixes at the start of a line, each optional, in any order:
#   `[rank3]:` (torchrun >= 2.2), `[default3]:` (torchrun --tee, default role),
#   `3: ` (srun --label), `[1,3]<stderr>:` (mpirun --tag-output: job, rank),
#   `[2023-07-10 04:26:05,876] [INFO] [launch.py:318:sigkill_handler] ` (DeepSpeed),
#   `(RayTrainWorker pid=123) ` / `(pid=123, ip=10.0.0.1) ` (Ray actors and tasks),
#   `gpu004: ` (pdsh, DeepSpeed's multi-node runner: a lower-case host name with a digit).
# The rank groups are r_torch, r_srun and r_mpi; the process's own `[rankN]:` wins over the
# launcher's task number (srun, mpirun).
_PREFIX = re.compile(
    r"(?:\s*(?:"
    r"\[(?:rank|default)(?P<r_torch>\d+)\]:"
    r"|(?P<r_srun>\d{1,6}): "
    r"|\[\d+,(?P<r_mpi>\d+)\]<std(?:out|err)>:"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\] \[[A-Z]+\] \[[\w.]+:\d+:[\w<>]+\] ?"
    r"|\((?:[\w.:<>-]+ )?pid=\d+(?:, ip=[\d.]+)?\) "
    r"|[a-z][a-z0-9-]*\d[a-z0-9.-]*: "
    r"))+"
)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One pattern, flattened: pydantic attribute access is too slow for the hot loop."""

    pattern: SignalPattern
    compiled: re.Pattern[str]
    keywords: tuple[str, ...]
    ignore_case: bool
    after: str | None
    within_lines: int
    fallback: bool
    explains: bool  # a non-fallback root/cascade: its hit drops fallback hits on the line


@dataclass(frozen=True, slots=True)
class _Index:
    """A PatternSet prepared for matching; built once per PatternSet."""

    entries: tuple[_Entry, ...]
    always: bool  # some pattern has no keyword: every line is a candidate
    prefilter: re.Pattern[str] | None  # any keyword of any pattern
    # The same keywords per case mode. Searching again one character after each hit
    # reports the longest keyword at every start position that has one, so every
    # keyword in a line is a substring of some report (overlaps included).
    sensitive_words: re.Pattern[str] | None
    insensitive_words: re.Pattern[str] | None
    by_keyword: dict[str, tuple[int, ...]]  # reported keyword -> entries it admits (filled lazily)
    unfiltered: tuple[int, ...]  # entries without keywords: always tried
    # Progress entries no `after:` names: in a run of their lines only the last few are matched.
    collapsible: tuple[int, ...] = ()
    # Every collapsible entry gives a plain progress signal (no `after:`, not a fallback, no
    # teardown start): its kept lines may be handed over as `ProgressMark`s, found by `marking`:
    # entry -> (its regex without a trailing optional part (matcher.head_regex), its name, the
    # MARK_GROUPS its Signal would hold).
    markable: bool = False
    marking: dict[int, tuple[re.Pattern[str], str, tuple[str, ...]]] = field(default_factory=dict)


def _trie_regex(words: set[str], ignore_case: bool) -> str:
    """One regex for many literals, common prefixes factored out.

    sre tries alternatives one after the other; factored, most fail on their
    first character, which makes the whole-text scan several times faster.
    """
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word.lower() if ignore_case else word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        alternatives = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
        if "" in node:  # a word ends here: the rest is optional
            return ("(?:" + body + ")?") if len(alternatives) == 1 else body + "?"
        return body

    regex = build(trie)
    return f"(?i:{regex})" if ignore_case else regex


def _index(patterns: PatternSet) -> _Index:
    cached = patterns.cache.get("classify_index")
    if isinstance(cached, _Index):
        return cached
    entries = tuple(
        _Entry(
            pattern=p,
            compiled=p.compiled,
            keywords=p.prefilter_keywords,
            ignore_case=p.ignore_case,
            after=p.after,
            within_lines=p.within_lines,
            fallback=p.fallback,
            explains=not p.fallback and p.role in ("root", "cascade"),
        )
        for p in patterns.patterns
    )
    anchors = {e.after for e in entries if e.after is not None}
    sensitive = {k for e in entries if not e.ignore_case for k in e.keywords}
    insensitive = {k for e in entries if e.ignore_case for k in e.keywords}
    parts = [_trie_regex(words, case) for words, case in ((sensitive, False), (insensitive, True)) if words]
    index = _Index(
        entries=entries,
        always=any(not e.keywords for e in entries),
        prefilter=re.compile("|".join(parts)) if parts else None,
        sensitive_words=re.compile(_trie_regex(sensitive, False)) if sensitive else None,
        insensitive_words=re.compile(_trie_regex(insensitive, True)) if insensitive else None,
        by_keyword={},
        unfiltered=tuple(i for i, e in enumerate(entries) if not e.keywords),
        collapsible=tuple(
            i for i, e in enumerate(entries) if e.pattern.role == "progress" and e.pattern.name not in anchors
        ),
    )
    index = replace(
        index,
        markable=all(_markable(index.entries[i]) for i in index.collapsible),
        marking={i: _marking(index.entries[i]) for i in index.collapsible},
    )
    patterns.cache["classify_index"] = index
    return index


def _markable(entry: _Entry) -> bool:
    return entry.after is None and not entry.fallback and entry.pattern.teardown_start is None


def _marking(entry: _Entry) -> tuple[re.Pattern[str], str, tuple[str, ...]]:
    pattern = entry.pattern
    head = matcher.head_regex(pattern.regex, entry.ignore_case, MARK_GROUPS) or entry.compiled
    wanted = pattern.groups if pattern.groups is not None else list(entry.compiled.groupindex)
    return head, pattern.name, tuple(g for g in MARK_GROUPS if g in wanted)  # as SignalPattern.extract


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


def strip_prefix(line: str) -> tuple[str, int | None]:
    """The line without its launcher/rank prefixes, and the rank they name (if any)."""
    m = _PREFIX.match(line)
    if m is None:
        return line, None
    rank = m.group("r_torch") or m.group("r_srun") or m.group("r_mpi")
    return line[m.end() :].lstrip(), int(rank) if rank is not None else None


def _rank_of(prefix_rank: int | None, groups: dict[str, str]) -> int | None:
    if prefix_rank is not None:
        return prefix_rank
    value = groups.get("rank")
    return int(value) if value is not None and value.isdigit() else None


def _entries_for(line: str, index: _Index) -> list[int]:
    """Indices of the entries whose keywords occur in `line`, in pattern order."""
    found: set[int] = set(index.unfiltered)
    for regex, ignore_case in ((index.sensitive_words, False), (index.insensitive_words, True)):
        if regex is None:
            continue
        reports: set[str] = set()
        match = regex.search(line)
        while match is not None:
            reports.add(match.group())
            match = regex.search(line, match.start() + 1)
        for reported in reports:
            key = reported.lower() if ignore_case else reported
            admitted = index.by_keyword.get(key)
            if admitted is None:
                admitted = tuple(
                    i
                    for i, e in enumerate(index.entries)
                    if e.ignore_case == ignore_case and any(k in key for k in e.keywords)
                )
                index.by_keyword[key] = admitted
            found.update(admitted)
    return sorted(found)


def _progress_entries(line: str, index: _Index) -> list[int]:
    """`_entries_for` a line between two candidates: only collapsible entries can match there."""
    found = []
    lower = None
    for i in index.collapsible:  # one of the ~17 kept lines of every run of progress lines: kept lean
        entry = index.entries[i]
        haystack = line
        if entry.ignore_case:  # its keywords are lower case then
            haystack = lower = line.lower() if lower is None else lower
        for keyword in entry.keywords:
            if keyword in haystack:
                found.append(i)
                break
    return found


def _match_line(
    line: str,
    index: _Index,
    line_no: int,
    last_hit: dict[str, int] | None,
    source: str | None,
    entries: Sequence[int] | None = None,
) -> list[Signal]:
    """The signals of one line; `entries`: the only entries that can match (default: by keyword)."""
    hits: list[tuple[_Entry, re.Match[str]]] = []
    body, prefix_rank = strip_prefix(line)
    for i in _entries_for(line, index) if entries is None else entries:
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
    signals = []
    for entry, match in hits:
        pattern = entry.pattern
        groups = pattern.extract(match)
        if last_hit is not None:
            last_hit[pattern.name] = line_no
        signals.append(
            Signal(
                pattern=pattern.name,
                error_type=pattern.error_type,
                subsystem=pattern.subsystem,
                role=pattern.role,
                line=text,
                line_no=line_no,
                groups=groups,
                priority=pattern.priority,
                teardown=pattern.teardown,
                rank=_rank_of(prefix_rank, groups),
                source=source,
                fallback=pattern.fallback,
                teardown_start=pattern.teardown_start,
            )
        )
    return signals


def _mark_line(line: str, index: _Index, line_no: int, entries: Sequence[int]) -> list[ProgressMark]:
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


def _candidate_indices(lines: Sequence[str], index: _Index) -> Iterable[int]:
    """Indices of lines that contain at least one keyword (all, if a pattern has none)."""
    if index.always:
        return range(len(lines))
    if index.prefilter is None:
        return ()
    text = "\n".join(lines)
    starts = []
    pos = 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    # One hit is enough to make a line a candidate: resume the scan at the next line's start
    # instead of finding every further keyword in this one (a Megatron iteration line holds
    # several, early on).
    found: list[int] = []
    search = index.prefilter.search
    last = len(starts) - 1
    match = search(text)
    while match is not None:
        i = bisect.bisect_right(starts, match.start()) - 1
        found.append(i)
        if i >= last:
            break
        match = search(text, starts[i + 1])
    return found


def _finder(patterns: PatternSet, *, collapse_progress: bool) -> matcher.CandidateFinder:
    """A candidate finder for one log (core/classify/matcher.py); the prepared patterns are shared."""
    prepared = patterns.cache.get("matcher")
    if not isinstance(prepared, matcher.Prepared):
        collapsible = set(_index(patterns).collapsible)
        specs = tuple(
            matcher.EntrySpec(p.prefilter_keywords, p.ignore_case, p.regex, collapsible=i in collapsible)
            for i, p in enumerate(patterns.patterns)
        )
        prepared = patterns.cache["matcher"] = matcher.Prepared(specs)
    return matcher.CandidateFinder(prepared, collapse_progress=collapse_progress)


def _classify_block(
    block: Sequence[str],
    index: _Index,
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
    for i in _candidate_indices(block, index):
        signals.extend(_match_line(block[i], index, start_line_no + i, last_hit, source))
    return signals


def _classify_text(
    text: str,
    index: _Index,
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
    index: _Index,
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
        entries = _progress_entries(text, index)
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
    return _match_line(line, _index(as_pattern_set(patterns)), line_no, None, source)


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
    finder = _finder(pattern_set, collapse_progress=False)
    return _classify_block(stripped, _index(pattern_set), finder, start_line_no, {}, source)


def first_failed_rank(signals: Iterable[Signal]) -> int | None:
    """The rank the launcher saw fail first (a `failed_rank` group), if any."""
    for signal in signals:
        value = signal.groups.get("failed_rank")
        if value is not None and value.isdigit():
            return int(value)
    return None


def launcher_killed_pids(signals: Iterable[Signal]) -> set[str]:
    """Processes a teardown line says the launcher killed itself (`killed_pid` groups)."""
    return {s.groups["killed_pid"] for s in signals if s.teardown and "killed_pid" in s.groups}


def root_cause(signals: Sequence[Signal]) -> Signal | None:
    """The signal that explains the failure, or None (see the module docstring)."""
    killed_by_launcher = launcher_killed_pids(signals)
    candidates = [
        s for s in signals if s.is_cause_candidate and s.groups.get("pid") not in killed_by_launcher
    ]
    pool = [s for s in candidates if s.role == "root"] or [s for s in candidates if s.role == "cascade"]
    if not pool:
        return None
    failed = first_failed_rank(signals)

    def rank_key(s: Signal) -> int:
        return 0 if failed is not None and s.rank == failed else 1

    return min(pool, key=lambda s: (-s.priority, rank_key(s), s.line_no))


SILENT_DEATH_PATTERN = "worker_died_silently"  # the cause of a teardown that no line explains


def silent_death(signals: Sequence[Signal]) -> Signal | None:
    """A worker that died without a word (SIGKILL, the kernel's OOM killer), if the log shows one.

    The launcher started tearing the job down because a worker failed (a `worker_failed`
    teardown line), and the launcher was not told to stop before that. Returned as a
    synthetic `killed` root made from the teardown line.
    """
    teardown = next((s for s in signals if s.teardown_start == "worker_failed"), None)
    if teardown is None:
        return None
    code = teardown.groups.get("exit_code") or teardown.groups.get("exitcode")
    if code is not None and code.isdigit():
        return None  # the worker exited with a status of its own (srun's `Exited with exit code 3`)
    if any(s.teardown_start == "stop_requested" and s.line_no < teardown.line_no for s in signals):
        return None  # scancel or the time limit: Slurm's end state says why
    return Signal(
        pattern=SILENT_DEATH_PATTERN, error_type="killed", subsystem="launcher", role="root",
        line=teardown.line, line_no=teardown.line_no, groups=teardown.groups, rank=teardown.rank,
        source=teardown.source,
    )  # fmt: skip


def log_cause(signals: Sequence[Signal]) -> Signal | None:
    """The cause of a log's failure: its root cause, or a silent death the launcher's teardown shows.

    A cascade (a survivor's collective timeout) read AFTER the launcher began tearing the job
    down for a failed worker is that death's consequence: with NCCL on one host, a dead peer is
    not reported, the survivors just time out later. The silent death wins over it.
    """
    cause = root_cause(signals)
    if cause is not None and cause.role == "root":
        return cause
    death = silent_death(signals)
    if death is not None and (cause is None or death.line_no < cause.line_no):
        return death
    return cause


def evidence(signals: Sequence[Signal], cause: Signal | None, limit: int = EVIDENCE_LINES) -> list[str]:
    """Lines that support `cause`: its own, then others of the same error type,
    then what the launcher said about the failed rank."""
    if cause is None:
        return []
    ordered = [cause]
    ordered += [s for s in signals if s is not cause and s.error_type == cause.error_type and not s.teardown]
    ordered += [s for s in signals if s.role == "info" and s.groups]
    lines: list[str] = []
    for s in ordered:
        if s.line not in lines:
            lines.append(s.line)
        if len(lines) >= limit:
            break
    return lines


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
        self._index = _index(pattern_set)
        # fast: candidate lines in bulk (core/classify/matcher.py), and in a run of progress lines only
        # the last one is classified; False: every keyword line, one by one (the reference path).
        self._finder = _finder(pattern_set, collapse_progress=True) if fast else None
        self._collapse = _Collapse(max(1, progress_tail))
        self._source = source
        self._max_signals = max_signals
        self._last_hit: dict[str, int] = {}
        self._partial = ""
        self.lines_seen = 0
        self.signals: list[Signal] = []  # root/cascade/info, first max_signals of them
        self.dropped_signals = 0  # non-progress signals past max_signals
        self.progress_count = 0
        self.last_progress: Signal | None = None
        self.last_iteration: int | None = None  # `iteration` of the latest progress signal having one

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
        self.lines_seen += text.count("\n") if n_lines is None else n_lines
        for signal in new:
            self._keep(signal)
        last = next((item for item in reversed(new) if isinstance(item, ProgressMark)), None)
        if last is not None and (self.last_progress is None or self.last_progress.line_no < last.line_no):
            signals = _match_line(last.line, index, last.line_no, None, self._source,
                                  _progress_entries(last.line, index))  # fmt: skip
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

    def first_failed_rank(self) -> int | None:
        return first_failed_rank(self.signals)

    def _keep(self, signal: Signal | ProgressMark) -> None:
        if isinstance(signal, ProgressMark):
            self.progress_count += 1
            value = signal.groups.get("iteration")
            if value is not None and value.isdigit():
                self.last_iteration = int(value)
            return
        if signal.role == "progress":
            self.progress_count += 1
            self.last_progress = signal
            value = signal.groups.get("iteration")
            if value is not None and value.isdigit():
                self.last_iteration = int(value)
            return
        if len(self.signals) < self._max_signals:
            self.signals.append(signal)
        else:
            self.dropped_signals += 1

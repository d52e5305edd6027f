"""A PatternSet prepared for matching: each pattern's literal keywords, indexed. No I/O.

Speed: every pattern carries literal keywords (derived from its regex, or
given); a line is matched against a pattern's regex only if it contains one of
its keywords. This module builds, once per PatternSet (kept in its cache), the
flattened entries, one multi-literal regex over all keywords (`prefilter`), the
per-keyword lookup of the entries a keyword admits, and the candidate finder
for whole blocks (core/classify/matcher.py). Matching a line lives in
core/classify/classifier.py.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.signals import PatternSet, SignalPattern

MARK_GROUPS = ("iteration", "step", "train_iters")  # the groups the progress tracker reads (ProgressMark)


class LazyRegex:
    """A pattern's regex, compiled at its first search: most entries of a set never get a line.

    After the first call `search` is the compiled pattern's own bound method, so the hot loop
    pays nothing for the laziness. The keyword tries are lazy too: each is one large regex (tens of
    milliseconds to compile with the shipped catalogs), and the bulk matcher's path needs none of
    them until a candidate line's keywords are looked up.
    """

    __slots__ = ("flags", "regex", "search")

    def __init__(self, regex: str, flags: int = 0) -> None:
        self.regex = regex
        self.flags = flags
        self.search: Callable[..., re.Match[str] | None] = self._compile_and_search

    def _compile_and_search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        compiled = re.compile(self.regex, self.flags)
        self.search = compiled.search
        return compiled.search(text, pos)


@dataclass(frozen=True, slots=True)
class Entry:
    """One pattern, flattened: pydantic attribute access is too slow for the hot loop."""

    pattern: SignalPattern
    compiled: LazyRegex
    keywords: tuple[str, ...]
    ignore_case: bool
    after: str | None
    within_lines: int
    fallback: bool
    explains: bool  # a non-fallback root/cascade: its hit drops fallback hits on the line


@dataclass(frozen=True, slots=True)
class KeywordIndex:
    """A PatternSet prepared for matching; built once per PatternSet."""

    entries: tuple[Entry, ...]
    always: bool  # some pattern has no keyword: every line is a candidate
    prefilter: LazyRegex | None  # any keyword of any pattern
    # The same keywords per case mode. Searching again one character after each hit
    # reports the longest keyword at every start position that has one, so every
    # keyword in a line is a substring of some report (overlaps included).
    sensitive_words: LazyRegex | None
    insensitive_words: LazyRegex | None
    # (case mode, reported keyword) -> entries it admits (filled lazily). The case mode is part of the
    # key: a word both a case-sensitive and a case-insensitive pattern use is reported by both scans,
    # and each must admit its own entries, not the ones the other scan cached first.
    by_keyword: dict[tuple[bool, str], tuple[int, ...]]
    unfiltered: tuple[int, ...]  # entries without keywords: always tried
    # Progress entries no `after:` names: in a run of their lines only the last few are matched.
    collapsible: tuple[int, ...] = ()
    # Every collapsible entry gives a plain progress signal (no `after:`, not a fallback, no
    # teardown start): its kept lines may be handed over as `ProgressMark`s, found by `marking`:
    # entry -> (its regex without a trailing optional part (matcher.head_regex), its name, the
    # MARK_GROUPS its Signal would hold).
    markable: bool = False
    marking: dict[int, tuple[re.Pattern[str], str, tuple[str, ...]]] = field(default_factory=dict)
    # The keywords per case mode (lower case for the insensitive ones), and their automaton finders per
    # (case mode, engine), built at a candidate line's first lookup (matcher.word_finder).
    words: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    finders: dict[tuple[bool, str], Callable[[str], set[str]] | None] = field(default_factory=dict)
    # (case mode, keyword) -> the entries that list exactly that keyword: a reported word's entries
    # are those of the keywords inside it, which its finder names (entries_for).
    by_word: dict[tuple[bool, str], tuple[int, ...]] = field(default_factory=dict)


def trie_regex(words: set[str], ignore_case: bool) -> str:
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


def index_of(patterns: PatternSet) -> KeywordIndex:
    """The index of `patterns`, built on first use and kept in the set's cache."""
    cached = patterns.cache.get("classify_index")
    if isinstance(cached, KeywordIndex):
        return cached
    entries = tuple(
        Entry(
            pattern=p,
            compiled=LazyRegex(p.regex, p.flags),
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
    # Each trie once: the prefilter is the two tries side by side.
    sensitive_trie = trie_regex(sensitive, False) if sensitive else None
    insensitive_trie = trie_regex(insensitive, True) if insensitive else None
    parts = [t for t in (sensitive_trie, insensitive_trie) if t is not None]
    index = KeywordIndex(
        entries=entries,
        always=any(not e.keywords for e in entries),
        prefilter=LazyRegex("|".join(parts)) if parts else None,
        sensitive_words=LazyRegex(sensitive_trie) if sensitive_trie is not None else None,
        insensitive_words=LazyRegex(insensitive_trie) if insensitive_trie is not None else None,
        by_keyword={},
        by_word=_entries_by_word(entries),
        unfiltered=tuple(i for i, e in enumerate(entries) if not e.keywords),
        words=(tuple(sorted(sensitive)), tuple(sorted({k.lower() for k in insensitive}))),
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


def _entries_by_word(entries: Sequence[Entry]) -> dict[tuple[bool, str], tuple[int, ...]]:
    listed: dict[tuple[bool, str], list[int]] = {}
    for i, entry in enumerate(entries):
        for keyword in dict.fromkeys(entry.keywords):
            listed.setdefault((entry.ignore_case, keyword), []).append(i)
    return {key: tuple(ids) for key, ids in listed.items()}


def _markable(entry: Entry) -> bool:
    return entry.after is None and not entry.fallback and entry.pattern.teardown_start is None


def _marking(entry: Entry) -> tuple[re.Pattern[str], str, tuple[str, ...]]:
    pattern = entry.pattern
    head = matcher.head_regex(pattern.regex, entry.ignore_case, MARK_GROUPS) or pattern.compiled
    wanted = pattern.groups if pattern.groups is not None else list(pattern.compiled.groupindex)
    return head, pattern.name, tuple(g for g in MARK_GROUPS if g in wanted)  # as SignalPattern.extract


def _reported_words(line: str, index: KeywordIndex, ignore_case: bool) -> set[str]:
    """Keywords of one case mode found in `line`: each one that occurs (the automaton, where
    ahocorasick_rs is installed) or the longest at each start position (the trie regex); either way
    every keyword in the line is a substring of a report, so both admit the same entries."""
    key = (ignore_case, matcher.engine_name())
    if key not in index.finders:
        index.finders[key] = matcher.word_finder(index.words[ignore_case], ignore_case)
    finder = index.finders[key]
    if finder is not None:
        return finder(line)
    regex = index.insensitive_words if ignore_case else index.sensitive_words
    reports: set[str] = set()
    if regex is None:
        return reports
    match = regex.search(line)
    while match is not None:
        reports.add(match.group())
        match = regex.search(line, match.start() + 1)
    return reports


def entries_for(line: str, index: KeywordIndex) -> list[int]:
    """Indices of the entries whose keywords occur in `line`, in pattern order."""
    found: set[int] = set(index.unfiltered)
    for ignore_case in (False, True):
        for reported in _reported_words(line, index, ignore_case):
            key = reported.lower() if ignore_case else reported
            admitted = index.by_keyword.get((ignore_case, key))
            if admitted is None:
                admitted = _admitted(key, index, ignore_case)
                index.by_keyword[(ignore_case, key)] = admitted
            found.update(admitted)
    return sorted(found)


def _admitted(key: str, index: KeywordIndex, ignore_case: bool) -> tuple[int, ...]:
    """The entries of `ignore_case` with a keyword inside the reported word `key`, in pattern order.

    With an automaton finder the keywords inside `key` are found by running it over `key` (what
    one cache miss costs no longer grows with the number of entries: a thousand `any(...)` loops
    were a third of reading a short log); else every entry is tried.
    """
    finder = index.finders.get((ignore_case, matcher.engine_name()))
    if finder is None:
        return tuple(
            i
            for i, e in enumerate(index.entries)
            if e.ignore_case == ignore_case and any(k in key for k in e.keywords)
        )
    inside = finder(key) | {key}
    return tuple(sorted({i for word in inside for i in index.by_word.get((ignore_case, word), ())}))


def progress_entries(line: str, index: KeywordIndex) -> list[int]:
    """`entries_for` a line between two candidates: only collapsible entries can match there."""
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


def candidate_indices(lines: Sequence[str], index: KeywordIndex) -> Iterable[int]:
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


def finder_for(patterns: PatternSet, *, collapse_progress: bool) -> matcher.CandidateFinder:
    """A candidate finder for one log (core/classify/matcher.py); the prepared patterns are shared."""
    prepared = patterns.cache.get("matcher")
    if not isinstance(prepared, matcher.Prepared):
        collapsible = set(index_of(patterns).collapsible)
        specs = tuple(
            matcher.EntrySpec(p.prefilter_keywords, p.ignore_case, p.regex, collapsible=i in collapsible)
            for i, p in enumerate(patterns.patterns)
        )
        prepared = patterns.cache["matcher"] = matcher.Prepared(specs)
    return matcher.CandidateFinder(prepared, collapse_progress=collapse_progress)

"""Which lines of a block can give a signal, found in bulk, in C. No I/O.

core/classify/classifier.py matches a line against a pattern only when the line holds one
of the pattern's literal keywords. Doing that line by line in Python costs more
than the upstream tool's whole scan, because a healthy training log is almost
all iteration lines that hold some keyword (`iteration`, `nan` in `number of nan
iterations:`). This module finds the candidate lines of a whole block instead:

- Rare keywords (most of them: `CUDA out of memory`, `NCCL WARN`): one
  multi-literal pass over the block, an Aho-Corasick automaton
  (`ahocorasick_rs`, a dependency) or, where its wheel is missing, `str.find`
  per keyword; every line holding one is a candidate. Case-insensitive
  keywords join that pass through the case spellings of a short window of each
  (`_FoldedScanner`), not through a lower-cased copy of the block.
- Frequent keywords (more than 1 line in `FREQUENT_EVERY`, and at least
  `FREQUENT_MIN` lines, in some block of this log): the scan leaves them out.
  Each pattern they admit is searched over the whole block text with its own
  regex instead (`MULTILINE`, a leading `\\b` dropped so that `re` can jump
  to its first literal); a line where it matches is a candidate. That search
  finds every line the pattern matches line by line (a superset: the text has
  more context than a line), except for patterns with a negative lookaround or
  `\\A`/`\\Z`, whose keyword lines are all candidates instead.
- Progress patterns admitted by a frequent keyword, when the caller collapses
  progress (the monitor's Classifier): between two candidate lines only the
  last line that matches is classified (`last_line_with`). A pattern named by
  another's `after:` is never collapsed.

The caller classifies each candidate line exactly as before (every keyword of
the line, every pattern it admits), so every non-progress signal, its line
number, `after:` and fallback rules are unchanged.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Protocol

# The regex parser's modules (deprecated names since 3.11, still the parser `re` uses): imported quietly,
# as core/classify/signals.py does, whichever of the two a program imports first.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _sc
    import sre_parse as _sp

from oellm_autoexp.core.classify.signals import required_literals

ahocorasick_rs: Any
try:  # a dependency; where it cannot be installed, the same candidates come from str.find
    import ahocorasick_rs
except ImportError:  # pragma: no cover - depends on the environment
    ahocorasick_rs = None

FREQUENT_EVERY = 32  # a keyword on more than 1 line in 32 of a block is frequent ...
FREQUENT_MIN = 64  # ... and on at least this many (small blocks never collapse)
SAMPLE_CHARS = 1 << 16  # a log's first block: frequent words are learnt from its start first


@dataclass(frozen=True)
class EntrySpec:
    """What the finder needs to know about one pattern."""

    keywords: tuple[str, ...]  # lower-case when ignore_case
    ignore_case: bool
    regex: str
    collapsible: bool  # a progress pattern no `after:` names


class _Scanner(Protocol):
    def find(self, text: str, encoded: bytes | None = None) -> tuple[str | bytes, list[tuple[int, int]]]:
        """(the haystack searched, [(word index, offset in it)]); `encoded`: text.encode(), if at hand"""


# Non-ASCII characters whose lower case is an ASCII letter (KELVIN SIGN, and the `i` that
# LATIN CAPITAL I WITH DOT ABOVE lowers to): lower-casing only the ASCII bytes would miss them.
_CASE_ODDITIES = re.compile("[\u0130\u212a]")


# The DFA scans faster than the contiguous NFA but takes about eight times as long to build: with
# ~930 catalog words 10-14 ms against 1.4 ms, and a monitor builds six automata. Measured on the
# benchmark's healthy log in 4 MB chunks, it saves ~0.25 ms per MB (the rest of a chunk's reading
# costs the same), so it pays for itself after ~56 MB. A scanner starts as the NFA and builds its
# DFA before the scan that takes the bytes it has scanned past DFA_AFTER_BYTES: short logs, the
# first plan (which reads a log's first 64 KB) and the per-line word finders never pay for a DFA; a
# replay of a long log pays for it once.
DFA_AFTER_BYTES = 8 << 20


class _AhoCorasickScanner:
    """ahocorasick_rs over the UTF-8 bytes (its str mode converts offsets): first its contiguous
    NFA, its DFA from the scan that reaches DFA_AFTER_BYTES.

    Case-insensitive words (lower-case) are searched in the lower-cased text, as the
    line-by-line path tests them (`keyword in line.lower()`).
    """

    def __init__(self, words: Sequence[str], ignore_case: bool) -> None:
        assert ahocorasick_rs is not None
        self._encoded = [w.encode() for w in words]
        self._automaton = self._build(ahocorasick_rs.Implementation.ContiguousNFA)
        self.scanned = 0  # bytes scanned until the DFA is built; -1 after
        self._ignore_case = ignore_case
        self._ascii_words = all(w.isascii() for w in words)

    def _build(self, implementation: Any) -> Any:
        return ahocorasick_rs.BytesAhoCorasick(self._encoded, implementation=implementation)

    @property
    def is_dfa(self) -> bool:
        return self.scanned < 0

    def _count(self, size: int) -> None:
        """Count a scan of `size` bytes before it runs; build the DFA when they take it past the limit."""
        if self.scanned < 0:
            return
        self.scanned += size
        if self.scanned >= DFA_AFTER_BYTES:
            self._automaton = self._build(ahocorasick_rs.Implementation.DFA)
            self.scanned = -1

    def find(self, text: str, encoded: bytes | None = None) -> tuple[str | bytes, list[tuple[int, int]]]:
        if not self._ignore_case:
            data = text.encode() if encoded is None else encoded
        elif self._ascii_words and (text.isascii() or not _CASE_ODDITIES.search(text)):
            # ASCII only, and much faster than str.lower()
            data = (text.encode() if encoded is None else encoded).lower()
        else:
            data = text.lower().encode()
        self._count(len(data))
        hits = self._automaton.find_matches_as_indexes(data, overlapping=True)
        return data, [(word, start) for word, start, _end in hits]


SHARED_PREFIX = 8  # _FindScanner: words that start alike are found by one pass for their common start


class _FindScanner:
    """Pure Python fallback: `str.find` per word (C, one pass each; far faster than one regex).

    A pass costs the same for any word, and catalogs give many words one start (`CUDA_ERROR_`,
    `NCCL WARN `, `malloc(): `): words that share their first SHARED_PREFIX characters are found
    by one pass for that start, each checked where it occurs. Same hits, fewer passes.
    """

    def __init__(self, words: Sequence[str], ignore_case: bool) -> None:
        self._words = list(words)
        self._ignore_case = ignore_case
        starts: dict[str, list[int]] = {}
        alone: list[int] = []
        for index, word in enumerate(self._words):
            (starts.setdefault(word[:SHARED_PREFIX], []) if len(word) >= SHARED_PREFIX else alone).append(
                index
            )
        alone += [ids[0] for ids in starts.values() if len(ids) == 1]
        self._alone = sorted(alone)
        self._shared = [(start, ids) for start, ids in starts.items() if len(ids) > 1]

    def find(self, text: str, encoded: bytes | None = None) -> tuple[str | bytes, list[tuple[int, int]]]:
        haystack = text.lower() if self._ignore_case else text
        hits = []
        for index in self._alone:
            word = self._words[index]
            pos = haystack.find(word)
            while pos >= 0:
                hits.append((index, pos))
                pos = haystack.find(word, pos + 1)
        for start, ids in self._shared:
            pos = haystack.find(start)
            while pos >= 0:
                hits += [(index, pos) for index in ids if haystack.startswith(self._words[index], pos)]
                pos = haystack.find(start, pos + 1)
        return haystack, hits


def engine_name() -> str:
    """The multi-literal engine in use: `ahocorasick_rs` or `python` (str.find)."""
    return "python" if ahocorasick_rs is None or _FORCE_PYTHON else "ahocorasick_rs"


_FORCE_PYTHON = False  # tests and the benchmark compare both engines


def set_engine(name: str) -> None:
    """Pick the engine (`ahocorasick_rs` or `python`); for tests and benchmarks."""
    global _FORCE_PYTHON
    if name == "ahocorasick_rs" and ahocorasick_rs is None:
        raise ValueError("ahocorasick_rs is not installed (pip install ahocorasick-rs)")
    _FORCE_PYTHON = name == "python"


def word_finder(words: Sequence[str], ignore_case: bool) -> Callable[[str], set[str]] | None:
    """With ahocorasick_rs: a function giving the `words` that occur in a line (lower-case words for
    `ignore_case`, found in the lower-cased line). None with the pure-Python engine: one `str.find` per
    word is slower on a single line than the keyword trie regex (core/classify/keyword_index.py)."""
    if not words or engine_name() != "ahocorasick_rs":
        return None
    scanner = _AhoCorasickScanner(words, ignore_case)
    listed = list(words)

    def found(line: str) -> set[str]:
        return {listed[index] for index, _ in scanner.find(line)[1]}

    return found


def _scanner(words: Sequence[str], ignore_case: bool) -> _Scanner | None:
    if not words:
        return None
    if engine_name() == "ahocorasick_rs":
        return _AhoCorasickScanner(words, ignore_case)
    return _FindScanner(words, ignore_case)


# Found hits of one case mode: (that mode, the haystack its offsets point into, [(word index, offset)]).
CaseHits = tuple[bool, str | bytes, list[tuple[int, int]]]


class _PerCase:
    """One scanner per case mode: the case-insensitive words are searched in a lower-cased copy."""

    def __init__(self, sensitive: Sequence[str], insensitive: Sequence[str]) -> None:
        self._scanners = ((False, _scanner(sensitive, False)), (True, _scanner(insensitive, True)))

    def find(self, text: str, encoded: bytes | None = None) -> list[CaseHits]:
        return [
            (case, *scanner.find(text, encoded)) for case, scanner in self._scanners if scanner is not None
        ]


FOLD_WINDOW = 4  # a folded word is found by the spellings of a window this long: at most 16
FOLD_SPELLINGS = 256  # more spellings in all, and the insensitive words get their own lower-cased pass


class _FoldedScanner:
    """Both case modes in one automaton pass, without a lower-cased copy of the text.

    A lower-cased copy and a second pass over it cost a healthy log's 4 MB chunk more than a
    millisecond, for the one or two case-insensitive words a pattern set has. Instead, each such
    word (ASCII) adds every case spelling of one of its windows (the FOLD_WINDOW characters with the
    fewest letters) to the case-sensitive automaton; where a spelling is found, the word is checked
    whole, case-insensitively, where that window would sit in it. A text holding a character that
    lower-cases to an ASCII letter (the Kelvin sign) gets a lower-cased copy and its own pass, as before.
    """

    def __init__(
        self, sensitive: Sequence[str], insensitive: Sequence[str], spelled: dict[str, list[tuple[int, int]]]
    ) -> None:
        """`spelled`: `_spelled_windows(insensitive)`."""
        self._n_sensitive = len(sensitive)
        self._words = [w.encode() for w in insensitive]
        self._spelled = list(spelled.values())
        self._scanner = _AhoCorasickScanner([*sensitive, *spelled], ignore_case=False)
        self._insensitive = insensitive
        self._lowered: _AhoCorasickScanner | None = None  # for texts with case oddities, built then

    def find(self, text: str, encoded: bytes | None = None) -> list[CaseHits]:
        data, hits = self._scanner.find(text, encoded)
        n = self._n_sensitive
        plain = [(word, off) for word, off in hits if word < n]
        if not text.isascii() and _CASE_ODDITIES.search(text):
            if self._lowered is None:
                self._lowered = _AhoCorasickScanner(self._insensitive, ignore_case=True)
            return [(False, data, plain), (True, *self._lowered.find(text, encoded))]
        folded = []
        for spelling, off in hits:
            if spelling >= n:
                for index, at in self._spelled[spelling - n]:
                    word, start = self._words[index], off - at
                    if start >= 0 and data[start : start + len(word)].lower() == word:
                        folded.append((index, start))
        return [(False, data, plain), (True, data, folded)]


def _spelled_windows(insensitive: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """Every case spelling of each word's window -> the (word index, window offset) it stands for."""
    spelled: dict[str, list[tuple[int, int]]] = {}
    for index, word in enumerate(insensitive):
        at = _window_at(word)
        for spelling in _spellings(word[at : at + FOLD_WINDOW]):
            spelled.setdefault(spelling, []).append((index, at))
    return spelled


def _window_at(word: str) -> int:
    """Where `word`'s window of FOLD_WINDOW characters with the fewest letters starts (the first such)."""
    starts = range(max(1, len(word) - FOLD_WINDOW + 1))
    return min(starts, key=lambda i: sum(ch.isalpha() for ch in word[i : i + FOLD_WINDOW]))


def _spellings(window: str) -> list[str]:
    spelled = [""]
    for ch in window:
        cases = dict.fromkeys((ch.lower(), ch.upper())) if ch.isalpha() else (ch,)
        spelled = [head + c for head in spelled for c in cases]
    return spelled


def _rare_scanner(sensitive: Sequence[str], insensitive: Sequence[str]) -> _PerCase | _FoldedScanner:
    """The scanner of a plan's rare words: both case modes in one pass where the insensitive words
    allow it (the automaton engine, ASCII words, few spellings), else one scanner per mode."""
    if engine_name() != "ahocorasick_rs" or not insensitive or not all(w.isascii() for w in insensitive):
        return _PerCase(sensitive, insensitive)
    spelled = _spelled_windows(insensitive)
    if sum(map(len, spelled.values())) > FOLD_SPELLINGS:
        return _PerCase(sensitive, insensitive)
    return _FoldedScanner(sensitive, insensitive, spelled)


# --------------------------------------------------------------------------- bulk regexes


def _bulk_safe(items: Any) -> bool:
    """False when a regex can match a line but not the same characters inside a text."""
    for op, av in items:
        if op is _sc.ASSERT_NOT:
            return False
        # `^` too: a pattern may run on the line without its launcher prefix (`[rank3]: `), so
        # its `^` can match where the text has no line start. A leading one is dropped first.
        if op is _sc.AT and av in (_sc.AT_BEGINNING_STRING, _sc.AT_END_STRING, _sc.AT_BEGINNING):
            return False
        for sub in _children(op, av):
            if not _bulk_safe(sub):
                return False
    return True


def _children(op: Any, av: Any) -> list[Any]:
    if op is _sc.SUBPATTERN:
        return [av[3]]
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT, _sc.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is _sc.BRANCH:
        return list(av[1])
    if op is _sc.ASSERT:
        return [av[1]]
    if op is _sc.GROUPREF_EXISTS:
        return [b for b in av[1:] if b is not None]
    if op is _sc.ATOMIC_GROUP:
        return [av]
    return []


def bulk_regex(regex: str, ignore_case: bool) -> re.Pattern[str] | None:
    """`regex` for a whole text (MULTILINE, a leading `\\b` dropped), or None if unsafe."""
    found = bulk_regexes(regex, ignore_case)
    return None if found is None else re.compile("|".join(r.pattern for r in found), found[0].flags)


def bulk_regexes(regex: str, ignore_case: bool) -> tuple[re.Pattern[str], ...] | None:
    """`regex` for a whole text, one regex per top-level branch; None if unsafe.

    Each is searched on its own: a branch that starts with a literal is found by `re`'s
    literal search, an alternation of them is tried at every position.
    """
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    branches = [regex] if re.match(r"\(\?[aiLmsux]+\)", regex) else _top_level_branches(regex)
    compiled = []
    for branch in branches:
        while branch.startswith(("\\b", "^")):
            # Dropping a leading `\b` or `^` only widens the matches; without `\b` `re` can jump
            # to the first literal.
            branch = branch[1:] if branch[0] == "^" else branch[2:]
        try:
            if not _bulk_safe(_sp.parse(branch, flags)):
                return None
            compiled.append(re.compile(branch, flags))
        except re.error:  # a split this scanner got wrong
            return None
    return tuple(compiled)


def head_regex(regex: str, ignore_case: bool, keep: Sequence[str]) -> re.Pattern[str] | None:
    """`regex` without a trailing optional group (`A(...)?` -> `A`), or None if it has none to drop.

    `A` matches where `A(...)?` matches, with the same groups of its own: the optional part
    always succeeds (empty if need be), so the engine never backtracks into `A` for it. Only
    groups in that part are lost; None as well when one of them is named in `keep`. For
    the kept lines of progress runs (core/classify/classifier.py `ProgressMark`), where the part after the
    counter (Megatron's `| lm loss: ...`) costs most of the search.
    """
    depth, opened, closed = 0, -1, -1
    for i, ch in _structure(regex):
        if ch == "(":
            opened = i if depth == 0 else opened
            depth += 1
        elif ch == ")":
            depth -= 1
            closed = i if depth == 0 else closed
        elif depth == 0:
            return None  # `a|(b)?`: the group is not a trailing part of every match
    if depth != 0 or closed != len(regex) - 2 or not regex.endswith("?") or opened <= 0:
        return None
    flags = re.IGNORECASE if ignore_case else 0
    head = regex[:opened]
    try:
        whole: Any = _sp.parse(regex, flags)
        part: Any = _sp.parse(head, flags)
        compiled = re.compile(head, flags)
    except re.error:
        return None
    op, av = whole[-1]
    if len(whole) != len(part) + 1 or op is not _sc.MAX_REPEAT or (av[0], av[1]) != (0, 1):
        return None
    lost = set(re.compile(regex, flags).groupindex) - set(compiled.groupindex)
    return None if lost & set(keep) else compiled


def _top_level_branches(regex: str) -> list[str]:
    """`a|b(c|d)|e` -> [`a`, `b(c|d)`, `e`]: splits at `|` outside groups and classes."""
    branches, depth, start = [], 0, 0
    for i, ch in _structure(regex):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            branches.append(regex[start:i])
            start = i + 1
    branches.append(regex[start:])
    return branches


def _structure(regex: str) -> Iterator[tuple[int, str]]:
    """(index, char) of each `(`, `)` and `|` of a regex that is not escaped or in a class."""
    i, in_class = 0, False
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if regex[i + 1 : i + 2] == "^":
                i += 1
            if regex[i + 1 : i + 2] == "]":
                i += 1  # a `]` first in a class is a literal
        elif ch in "()|":
            yield i, ch
        i += 1


def _literal_led(regex: re.Pattern[str]) -> bool:
    """True when `re` can search for the regex's first literal (case-sensitive) instead of trying it everywhere."""
    if regex.flags & re.IGNORECASE:
        return False
    items: Any = _sp.parse(regex.pattern, regex.flags)
    while len(items):
        op, av = items[0]
        if op is _sc.LITERAL:
            return True
        if op is not _sc.SUBPATTERN:
            return False
        items = av[3]
    return False


def _found_by_scan(branch: str, ignore_case: bool, rare: list[list[str]]) -> bool:
    """True when every match of `branch` holds a rare keyword: the scan finds its lines already."""
    literals = required_literals(branch, ignore_case)
    words = rare[1] if ignore_case else rare[0]
    if ignore_case:
        literals = [w.lower() for w in literals]
    return bool(literals) and all(any(w in literal for w in words) for literal in literals)


# --------------------------------------------------------------------------- plan and state


@dataclass
class _Plan:
    """The pattern set prepared for one set of frequent keywords."""

    scanner: _PerCase | _FoldedScanner  # the rare words of both case modes
    words: tuple[tuple[str, ...], tuple[str, ...]]
    bulk: tuple[re.Pattern[str], ...]  # heavy patterns that can be searched in bulk
    per_word: tuple[tuple[str, bool], ...]  # frequent words whose lines are all candidates
    collapse: tuple[tuple[str, bool], ...]  # frequent words of collapsible progress patterns


@dataclass
class Prepared:
    """A pattern set's specs; plans are cached per set of frequent words (shared by all logs)."""

    specs: tuple[EntrySpec, ...]
    plans: dict[tuple[frozenset[tuple[str, bool]], bool, str], _Plan] = field(default_factory=dict)
    bulk: dict[int, tuple[re.Pattern[str], ...] | None] = field(default_factory=dict)

    def plan(self, frequent: frozenset[tuple[str, bool]], collapse: bool) -> _Plan:
        key = (frequent, collapse, engine_name())
        if key not in self.plans:
            self.plans[key] = self._build(frequent, collapse)
        return self.plans[key]

    def _build(self, frequent: frozenset[tuple[str, bool]], collapse: bool) -> _Plan:
        rare = [sorted({k for s in self.specs if s.ignore_case == case for k in s.keywords
                        if (k, case) not in frequent}) for case in (False, True)]  # fmt: skip
        bulk: list[re.Pattern[str]] = []
        per_word: set[tuple[str, bool]] = set()
        collapsed: set[tuple[str, bool]] = set()
        for i, spec in enumerate(self.specs):
            hot = [(k, spec.ignore_case) for k in spec.keywords if (k, spec.ignore_case) in frequent]
            if not hot:
                continue
            if collapse and spec.collapsible:
                collapsed.update(hot)
                continue
            if i not in self.bulk:
                self.bulk[i] = bulk_regexes(spec.regex, spec.ignore_case)
            regexes = self.bulk[i]
            if regexes is None or not all(map(_literal_led, regexes)):
                # A branch that does not start with a literal is tried at every position of the
                # text (~2 MB/s): the keyword's lines, one by one, cost less.
                per_word.update(hot)
            else:
                bulk.extend(r for r in regexes if not _found_by_scan(r.pattern, spec.ignore_case, rare))
        return _Plan(
            scanner=_rare_scanner(rare[0], rare[1]),
            words=(tuple(rare[0]), tuple(rare[1])),
            bulk=tuple(bulk),
            per_word=tuple(sorted(per_word)),
            collapse=tuple(sorted(collapsed)),
        )


@dataclass
class Block:
    """One block's text and what the finder found in it."""

    text: str  # the lines, each ended by a newline
    n_lines: int
    candidates: list[tuple[int, int]]  # (line index, its start offset), ascending
    collapse: tuple[tuple[str, bool], ...]  # words to look for between candidates

    def line(self, start: int) -> str:
        """The line that starts at `start` (without its newline)."""
        return self.text[start : self.text.index("\n", start)]


class CandidateFinder:
    """Candidate lines of the blocks of one log; learns which keywords are frequent in it."""

    def __init__(self, prepared: Prepared, *, collapse_progress: bool) -> None:
        self._prepared = prepared
        self._collapse = collapse_progress
        self.frequent: frozenset[tuple[str, bool]] = frozenset()
        self._sampled = False

    def _learn(self, sample: str) -> None:
        plan = self._prepared.plan(self.frequent, self._collapse)
        self.frequent |= _frequent_words(plan, _rare_hits(plan, sample), sample.count("\n"))

    def scan(self, text: str, n_lines: int | None = None, encoded: bytes | None = None) -> Block:
        """The candidate lines of `text`: lines, each ended by a newline.

        What the caller knows saves a pass over the text: `n_lines`, how many lines it holds,
        and `encoded`, its UTF-8 bytes (a replay has both from the log's bytes).
        """
        n_lines = text.count("\n") if n_lines is None else n_lines
        if encoded is None and engine_name() == "ahocorasick_rs":
            encoded = text.encode()  # once for both case modes' automata and a rescan, not once each
        if not self._sampled:
            # Learn the frequent words from the log's start first: a full scan that reports
            # every `iteration` costs several times a scan without them.
            self._sampled = True
            self._learn(text[:SAMPLE_CHARS])
        plan = self._prepared.plan(self.frequent, self._collapse)
        hits = _rare_hits(plan, text, encoded)
        newly = _frequent_words(plan, hits, n_lines)
        if newly:
            self.frequent = self.frequent | newly
            plan = self._prepared.plan(self.frequent, self._collapse)
            hits = _rare_hits(plan, text, encoded)
        found = {line: off for _case, _word, line, off in hits}
        for offsets in (_bulk_offsets(plan, text), _word_offsets(plan, text)):
            found.update(zip(_lines_of(text, offsets), offsets, strict=True))
        found.pop(n_lines, None)  # an empty match at the very end
        return Block(text, n_lines, _with_starts(text, found), plan.collapse)


def _with_starts(text: str, found: dict[int, int]) -> list[tuple[int, int]]:
    """(line, its start offset), ascending, from {line: an offset in some haystack of the text}."""
    if text.isascii():  # every haystack (bytes, lower-cased) has the text's offsets
        return [(line, text.rfind("\n", 0, found[line]) + 1) for line in sorted(found)]
    starts, line, pos = [], 0, 0
    index = text.index
    for target in sorted(found):  # walk the newlines once
        while line < target:
            pos = index("\n", pos) + 1
            line += 1
        starts.append((target, pos))
    return starts


def _rare_hits(plan: _Plan, text: str, encoded: bytes | None = None) -> list[tuple[bool, int, int, int]]:
    """(ignore_case, word index, line index, offset in its haystack) of every rare keyword."""
    hits = []
    for case, haystack, found in plan.scanner.find(text, encoded):
        found.sort(key=itemgetter(1))
        offsets = [off for _word, off in found]
        lines = _lines_of(haystack, offsets)
        hits += [(case, word, line, off) for (word, off), line in zip(found, lines, strict=True)]
    return hits


def _lines_of(haystack: str | bytes, offsets: list[int]) -> list[int]:
    """The line index of each offset (ascending offsets)."""
    newline: Any = "\n" if isinstance(haystack, str) else b"\n"
    lines, line, prev = [], 0, 0
    for off in offsets:
        line += haystack.count(newline, prev, off)
        prev = off
        lines.append(line)
    return lines


def _frequent_words(
    plan: _Plan, hits: list[tuple[bool, int, int, int]], n_lines: int
) -> frozenset[tuple[str, bool]]:
    threshold = max(FREQUENT_MIN, n_lines // FREQUENT_EVERY)
    if len(hits) <= threshold:
        return frozenset()
    counts = Counter((case, word) for case, word, _line, _off in hits)
    return frozenset((plan.words[case][word], case) for (case, word), n in counts.items() if n > threshold)


def _bulk_offsets(plan: _Plan, text: str) -> list[int]:
    found: list[int] = []
    for regex in plan.bulk:
        match = regex.search(text)
        while match is not None:
            found.append(match.start())
            # One hit makes its line a candidate: go on at the next line.
            end = text.find("\n", match.start())
            if end < 0:
                break
            match = regex.search(text, end + 1)
    return sorted(found)


def _word_offsets(plan: _Plan, text: str) -> list[int]:
    found: list[int] = []
    for word, case in plan.per_word:
        if case:  # lower() may change lengths outside ASCII: offsets must be the text's
            found += [m.start() for m in re.finditer(re.escape(word), text, re.IGNORECASE)]
            continue
        pos = text.find(word)
        while pos >= 0:
            found.append(pos)
            pos = text.find(word, pos + 1)
    return sorted(found)


def last_line_with(block: Block, lo: tuple[int, int], hi: tuple[int, int]) -> tuple[int, int] | None:
    """The last line in [lo, hi) holding a collapse word, as (line, its start offset).

    `lo` and `hi` are (line index, start offset) pairs; None when no line holds one.
    """
    best = -1
    for word, case in block.collapse:
        if case:  # offsets must be the text's (see _word_offsets)
            found = [m.start() for m in re.finditer(re.escape(word), block.text[lo[1] : hi[1]], re.I)]
            pos = lo[1] + found[-1] if found else -1
        else:
            pos = block.text.rfind(word, lo[1], hi[1])
        best = max(best, pos)
    if best < 0:
        return None
    start = max(block.text.rfind("\n", lo[1], best) + 1, lo[1])
    return hi[0] - block.text.count("\n", start, hi[1]), start

"""A line that a narrow terminal or a wrapping log handler cut in two, read whole. No I/O.

A terminal soft-wraps a long line at its width and keeps every character, so the halves join with
nothing between them (`... Resource exhausted: Out ` / `of memory while trying to allocate ...`). A
word-wrapping handler (rich's console, 80 columns when its output is not a terminal) breaks at a space
and drops it, so the halves join with one. Either way no pattern sees the message whole.

Read only for a failed attempt whose log no pattern explains (core/classify/guess.py judged_cause),
before its words are weighed: pairs of lines are classified one by one, which the live path could not
afford on every line. A joined pair counts only for a match that runs across the join, so a line that
matched already, or two lines that merely sit together, add nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.root_cause import root_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal

# A first half shorter than this was not cut by a terminal's width or a handler's (80 and more in
# practice; the log prefix alone takes 30 characters).
WRAP_MIN_CHARS = 40
WRAPPED_GROUP = "wrapped"  # the joined reading's mark in its groups: `explain` quotes the joined line


def joins(head: str, tail: str) -> Iterator[tuple[str, int]]:
    """The whole lines `head` and `tail` can be halves of, each with where the second half starts.

    With nothing between (a terminal's soft wrap) and with one space (a word wrap that dropped it).
    Where a launcher prefixed both halves for the same rank (torchrun's `--tee`, `srun -l`, after a
    handler wrapped the message), the second half's prefix is not part of the line."""
    head_rank, tail_body = strip_prefix(head)[1], tail
    body, tail_rank = strip_prefix(tail)
    if tail_rank is not None and tail_rank == head_rank:
        tail_body = body
    yield head + tail_body, len(head)
    cut = head.rstrip()
    yield cut + " " + tail_body.lstrip(), len(cut) + 1


def _crosses(signal: Signal, text: str, cut: int, patterns: PatternSet) -> bool:
    """Does a match of the signal's pattern on `text` run across `cut` (the second half's start)?"""
    pattern = patterns.get(signal.pattern)
    return pattern is not None and any(m.start() < cut < m.end() for m in pattern.compiled.finditer(text))


def unwrapped_signals(first_no: int, lines: Sequence[str], patterns: PatternSet) -> list[Signal]:
    """The cause candidates only a pair of lines joined gives (numbered at its first line), in order.

    A candidate counts only for a pattern neither half matched alone, where its match runs across the
    join, and never a fallback (a
    catch-all such as a raised exception's last line, whose match runs to the end of any line: a
    specific pattern kept it off the first half alone, and the halves' words running together would
    bring it back)."""
    found: dict[tuple[str, int], Signal] = {}
    matched: dict[int, set[str]] = {}  # each line's patterns alone, read once for both pairs it is in
    for s in classify_lines(lines, patterns, first_no):
        matched.setdefault(s.line_no, set()).add(s.pattern)
    for i in range(len(lines) - 1):
        head, tail = lines[i].rstrip("\r\n"), lines[i + 1].rstrip("\r\n")
        if len(head) < WRAP_MIN_CHARS or not tail.strip():
            continue
        line_no = first_no + i
        alone = matched.get(line_no, set()) | matched.get(line_no + 1, set())
        for joined, cut in joins(head, tail):
            for signal in classify_lines([joined], patterns, line_no):
                if signal.fallback or not signal.is_cause_candidate or signal.pattern in alone:
                    continue
                if not _crosses(signal, joined, cut, patterns):
                    continue
                groups = {**signal.groups, WRAPPED_GROUP: "joined with the next line"}
                found.setdefault((signal.pattern, line_no), replace(signal, groups=groups))
    return list(found.values())


def unwrapped_cause(
    cause: Signal | None, first_no: int, lines: Sequence[str], patterns: PatternSet
) -> Signal | None:
    """A cause the wrapped lines give that beats `cause` (the log's own reading), or None."""
    joined = unwrapped_signals(first_no, lines, patterns)
    if not joined:
        return None
    best = root_cause([*joined, *([cause] if cause is not None else [])])
    return best if best is not None and best is not cause else None


def is_unwrapped(cause: Signal | None) -> bool:
    """Was `cause` read from two lines joined?"""
    return cause is not None and WRAPPED_GROUP in cause.groups

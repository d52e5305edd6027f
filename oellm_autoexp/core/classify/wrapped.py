"""A line that a narrow terminal or a wrapping log handler cut in two, read whole. No I/O.

A terminal soft-wraps a long line at its width and keeps every character, so the halves join with
nothing between them (`... Resource exhausted: Out ` / `of memory while trying to allocate ...`). A
word-wrapping handler (rich's console, 80 columns when its output is not a terminal) breaks at a space
and drops it, so the halves join with one. Either way no pattern sees the message whole.

Read only for a failed attempt whose log no pattern explains (core/classify/guess.py judged_cause),
before its words are weighed: pairs of lines are classified one by one, which the live path could not
afford on every line. A joined pair counts only for what neither half says alone, so a line that
matched already, or two lines that merely sit together, add nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import root_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal

# A first half shorter than this was not cut by a terminal's width or a handler's (80 and more in
# practice; the log prefix alone takes 30 characters).
WRAP_MIN_CHARS = 40
WRAPPED_GROUP = "wrapped"  # the joined reading's mark in its groups: `explain` quotes the joined line


def unwrapped_signals(first_no: int, lines: Sequence[str], patterns: PatternSet) -> list[Signal]:
    """The cause candidates only a pair of lines joined gives (numbered at its first line), in order."""
    found: dict[tuple[str, int], Signal] = {}
    for i in range(len(lines) - 1):
        head, tail = lines[i].rstrip("\r\n"), lines[i + 1].rstrip("\r\n")
        if len(head) < WRAP_MIN_CHARS or not tail.strip():
            continue
        line_no = first_no + i
        alone = {s.pattern for s in classify_lines([head], patterns)}
        alone |= {s.pattern for s in classify_lines([tail], patterns)}
        for joined in (head + tail, head.rstrip() + " " + tail.lstrip()):
            for signal in classify_lines([joined], patterns, line_no):
                if signal.is_cause_candidate and signal.pattern not in alone:
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

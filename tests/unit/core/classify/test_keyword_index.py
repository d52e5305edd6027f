"""The keyword prefilter admits every pattern whose keyword a line holds, in either case mode."""

from __future__ import annotations

from oellm_autoexp.core.classify.classifier import classify_line, classify_lines
from oellm_autoexp.core.classify.keyword_index import entries_for, index_of
from oellm_autoexp.core.classify.signals import PatternSet, SignalPattern


def _shared_word_set() -> PatternSet:
    return PatternSet(
        patterns=[
            SignalPattern(
                name="sensitive", regex=r"checkpoint from \S+", keywords=["checkpoint"], role="info"
            ),
            SignalPattern(
                name="insensitive",
                regex=r"checkpoint \S+ not found",
                keywords=["checkpoint"],
                ignore_case=True,
                error_type="config_error",
            ),
        ]
    )


def test_a_word_of_both_case_modes_admits_the_patterns_of_each() -> None:
    """A keyword a case-sensitive and a case-insensitive pattern share admits both, whichever scan saw it first.

    The lookup of a reported word is cached; the cache is per case mode, so the sensitive scan's
    entry for `checkpoint` never hides the insensitive pattern (and the other way round).
    """
    patterns = _shared_word_set()
    index = index_of(patterns)
    names = [index.entries[i].pattern.name for i in entries_for("loading checkpoint from /ckpt", index)]
    assert names == ["sensitive", "insensitive"]
    again = [index.entries[i].pattern.name for i in entries_for("Checkpoint /ckpt/x.pt not found", index)]
    # `Checkpoint` is not the sensitive keyword: only the insensitive scan reports it
    assert again == ["insensitive"]
    line = "ValueError: checkpoint /ckpt/x.pt not found"
    assert [s.pattern for s in classify_line(line, patterns)] == ["insensitive"]
    assert [s.pattern for s in classify_lines([line], patterns)] == ["insensitive"]  # the bulk path agrees

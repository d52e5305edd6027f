"""The keyword prefilter admits every pattern whose keyword a line holds, in either case mode; regexes compile lazily."""

from __future__ import annotations

import re

import pytest

from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.classifier import classify_line, classify_lines
from oellm_autoexp.core.classify.keyword_index import LazyRegex, entries_for, index_of
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


def test_a_regex_is_compiled_at_its_first_search_only() -> None:
    """An entry's regex is compiled when a line first reaches it; then `search` is the compiled one's own."""
    lazy = LazyRegex(r"Killed process (?P<pid>\d+)", 0)
    assert lazy.search.__name__ == "_compile_and_search"
    match = lazy.search("Out of memory: Killed process 42 (python)")
    assert match is not None and match.group("pid") == "42"
    assert (
        lazy.search == re.compile(r"Killed process (?P<pid>\d+)").search
    )  # bound to the compiled pattern now
    assert lazy.search("no hit here") is None


def test_a_user_regex_is_still_checked_at_load() -> None:
    """Laziness is for regexes valid by construction (catalogs): a pattern file's broken regex fails when loaded."""
    with pytest.raises(ValueError, match="invalid regular expression"):
        SignalPattern(name="broken", regex="unbalanced (", error_type="oom")


def _corpus_lines() -> list[str]:
    """Every line of the fitted corpus and of the fixture logs: lines of every family and shape."""
    import yaml

    from tests.paths import REPO

    lines: list[str] = []
    for path in sorted((REPO / "tests" / "corpus").glob("*.yaml")):
        records = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        lines += [
            line for r in records if isinstance(r, dict) for line in str(r.get("text", "")).splitlines()
        ]
    for path in sorted((REPO / "tests" / "fixtures").rglob("*.log")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()[:400]
    return lines


@pytest.mark.skipif(matcher.ahocorasick_rs is None, reason="ahocorasick-rs (a dependency) is not installed")
def test_the_automaton_and_the_trie_regex_admit_the_same_entries() -> None:
    """A line's keywords are found by ahocorasick_rs where it is installed (every occurrence) and by the
    keyword trie regex otherwise (the longest at each start): the entries they admit are the same."""
    from oellm_autoexp.adapters.logs.pattern_files import load_patterns

    patterns = load_patterns(["megatron_production"])
    lines = [line for line in _corpus_lines() if line.strip()]
    assert len(lines) > 5000
    try:
        by_automaton = [entries_for(line, index_of(patterns)) for line in lines]
        matcher.set_engine("python")
        by_regex = [entries_for(line, index_of(patterns)) for line in lines]
    finally:
        matcher.set_engine("ahocorasick_rs")
    differing = [(line, a, r) for line, a, r in zip(lines, by_automaton, by_regex, strict=True) if a != r]
    assert differing == []
    assert sum(map(bool, by_automaton)) > 1000  # the lines admit entries: the comparison is not empty


@pytest.mark.skipif(matcher.ahocorasick_rs is None, reason="ahocorasick-rs (a dependency) is not installed")
def test_a_reported_word_admits_every_entry_with_a_keyword_inside_it() -> None:
    """The entries a reported word admits are found through the keywords inside it (its finder run over
    the word): for every keyword of the shipped set, in both case modes, they are exactly the entries
    that have some keyword within the word, in pattern order."""
    from oellm_autoexp.adapters.logs.pattern_files import load_patterns

    index = index_of(load_patterns(["megatron_production"]))
    checked = 0
    for ignore_case in (False, True):
        for word in index.words[ignore_case]:
            entries_for(word.upper() if ignore_case else word, index)  # builds the finder, fills the cache
            admitted = index.by_keyword[(ignore_case, word)]
            brute = tuple(
                i
                for i, e in enumerate(index.entries)
                if e.ignore_case == ignore_case and any(k in word for k in e.keywords)
            )
            assert admitted == brute, word
            checked += 1
    assert checked > 500  # the shipped catalogs' words, not an empty loop

"""The bulk candidate finder (core/classify/matcher.py) against the line-by-line reference path. No I/O but fixtures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns, pattern_set_from_mapping
from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.classifier import Classifier, classify_lines
from oellm_autoexp.core.classify.signals import PatternSet
from oellm_autoexp.core.watch.attempt_view import AttemptView
from tests.conftest import unavailable
from tests.paths import TESTS

FIXTURES = TESTS / "fixtures" / "logs"
SETS = {name: load_patterns([name]) for name in ("megatron_production", "torch_ddp")}  # base is in both
BLOCK = 500  # lines per feed: the big GPU logs take many blocks
ENGINES = ["python", "ahocorasick_rs"]
ITERATION = (
    " [2026-11-23 04:00:{s:02d}] iteration {it:>8}/  500000 | consumed samples: {samples:>10} | "
    "elapsed time per iteration (ms): 1480.2 | learning rate: 2.9E-04 | global batch size:  1024 | "
    "lm loss: 2.104E+00 | loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | "
    "number of nan iterations:   {nan} |"
)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "ahocorasick_rs" and matcher.ahocorasick_rs is None:
        unavailable("ahocorasick-rs (a dependency) is not installed")
    matcher.set_engine(request.param)
    yield request.param
    matcher.set_engine("ahocorasick_rs" if matcher.ahocorasick_rs is not None else "python")


def _outcome(lines: list[str], patterns: PatternSet, *, fast: bool, block: int) -> tuple:
    """What the monitor keeps from a log: every non-progress signal, the last progress, the progress seen."""
    classifier = Classifier(patterns, max_signals=10**9, fast=fast)
    progress = []
    for start in range(0, len(lines), block):
        new = classifier.feed(lines[start : start + block])
        progress += [(s.line_no, s.pattern, tuple(s.groups.items())) for s in new if s.role == "progress"]
    kept = [(s.line_no, s.pattern, tuple(s.groups.items()), s.rank, s.role) for s in classifier.signals]
    last = classifier.last_progress
    return kept, last and (last.line_no, last.pattern), classifier.last_iteration, progress


@cache
def _reference(path: Path, set_name: str) -> tuple:
    """The line-by-line path's outcome on a fixture (computed once: it is the slow one)."""
    return _outcome(_lines(path), SETS[set_name], fast=False, block=BLOCK)


@cache
def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _assert_same(lines: list[str], patterns: PatternSet, block: int, old: tuple | None = None) -> None:
    old = old or _outcome(lines, patterns, fast=False, block=block)
    new = _outcome(lines, patterns, fast=True, block=block)
    assert new[:3] == old[:3]
    assert set(new[3]) <= set(old[3])  # collapsed progress: a subset, each exactly as before


def _synthetic() -> list[str]:
    """~2,600 lines: runs of iteration lines, saves, NaN counters, a torchrun summary, an OOM."""
    lines: list[str] = []
    for it in range(1, 2501):
        lines.append(ITERATION.format(s=it % 60, it=it, samples=it * 1024, nan=1 if it == 1700 else 0))
        if it % 500 == 0:
            lines.append(f"saving checkpoint at iteration {it:>7} to /ckpt in torch_dist format")
            lines.append(f"  successfully saved checkpoint from iteration {it:>7} to /ckpt [ t 1/1, p 1/1 ]")
        if it == 2100:
            lines.append(" [2026-11-23 04:00:00] iteration 2100/ 500000 | lm loss: nan | loss scale: 1.0 |")
    lines += [
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has a total capacity",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-23_04:10:00",
        "  host      : node1",
        "  rank      : 3 (local_rank: 3)",
        "  exitcode  : 1 (pid: 4242)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    return lines


def _fixture_logs() -> list[Path]:
    """Every fixture log but four 1 MB GPU runs shaped like hang_pg600.log (kept: 2 MB, its traces make
    `Error` frequent); the benchmark (bench_classify_throughput.py) compares all of them, 50 MB over."""
    return sorted(p for p in FIXTURES.rglob("*.log") if p.stat().st_size < 1_000_000 or "hang" in p.name)


def test_fixtures_give_the_same_signals_as_the_line_by_line_path(engine: str) -> None:
    """Every fixture log, every shipped pattern set, small and large blocks: nothing but progress changes."""
    assert _fixture_logs(), "no fixture logs found"
    for path in _fixture_logs():
        for name, patterns in SETS.items():
            _assert_same(_lines(path), patterns, BLOCK, _reference(path, name))


def test_fixtures_with_every_keyword_frequent_still_agree(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every keyword counted as frequent (bulk regexes, collapsed progress everywhere) results still agree."""
    monkeypatch.setattr(matcher, "FREQUENT_MIN", 0)
    monkeypatch.setattr(matcher, "FREQUENT_EVERY", 10**9)
    for path in (p for p in _fixture_logs() if p.stat().st_size < 200_000):  # 64 bulk regexes: slow
        for name, patterns in SETS.items():
            _assert_same(_lines(path), patterns, BLOCK, _reference(path, name))


def test_synthetic_training_log_agrees_and_collapses_progress(engine: str) -> None:
    """A long healthy run with a NaN counter, a NaN loss, saves and a torchrun summary: same signals, far fewer progress."""
    lines = _synthetic()
    patterns = SETS["megatron_production"]
    _assert_same(lines, patterns, 1000)
    classifier = Classifier(patterns)
    progress = [s for start in range(0, len(lines), 1000) for s in classifier.feed(lines[start : start + 1000])
                if s.role == "progress"]  # fmt: skip
    assert classifier.last_iteration == 2500
    assert {"nan_check_failed", "nan_loss", "cuda_oom", "torchrun_root_cause_rank"} <= {
        s.pattern for s in classifier.signals
    }
    assert 10 <= len(progress) < 60  # saves and the runs' last lines, not 2,500 iteration lines


def test_classify_lines_keeps_every_progress_signal(engine: str) -> None:
    """`classify_lines` (no collapsing) gives every iteration line, as the line-by-line path does."""
    lines = _synthetic()
    patterns = SETS["megatron_production"]
    found = [(s.line_no, s.pattern) for s in classify_lines(lines, patterns)]
    classifier = Classifier(patterns, max_signals=10**9, fast=False)
    reference = [(s.line_no, s.pattern) for s in classifier.feed(lines)]
    assert found == reference
    assert sum(1 for _n, name in found if name == "megatron_iteration") == 2501


def test_case_oddities_give_what_the_line_by_line_path_gives(engine: str) -> None:
    """A line where re's IGNORECASE sees a keyword through a long s (U+017F) changes nothing in the results."""
    lost = {
        "name": "lost",
        "regex": "connection lost",
        "ignore_case": True,
        "error_type": "nccl",
        "subsystem": "net",
    }
    patterns = pattern_set_from_mapping({"patterns": [lost]}, "test")
    lines = ["ok"] * 200 + ["CONNECTION LO\u017fT to peer"] + ["fine", "connection lost"]
    _assert_same(lines, patterns, 1000)
    assert [s.line_no for s in Classifier(patterns).feed(lines)] == [203]  # the keyword test is lower()


@pytest.mark.parametrize(
    ("regex", "safe"),
    [(r"\bloss\b[ =:]+nan", True), (r"^\s*rank\s*: (\d+)", True), (r"(?<=_)step (\d+)", True),
     (r"a|^b", True), (r"step (\d+)(?!\.\d)", False), (r"(?<!x)error", False), (r"\Aerror", False),
     (r"error\Z", False), (r"x(?:^y|z)", False)],
)  # fmt: skip
def test_bulk_regex_refuses_what_a_text_search_could_miss(regex: str, safe: bool) -> None:
    """Negative lookarounds, string anchors and an inner `^` could match a line (or its body after a launcher
    prefix) but not the same text: no bulk regex then; a leading `^` or `\\b` is dropped."""
    assert (matcher.bulk_regex(regex, False) is not None) is safe


def test_bulk_regex_drops_a_leading_boundary_and_finds_every_matching_line() -> None:
    """The bulk regex starts at the first literal and, searched over the text, hits every line the regex matches."""
    regex = r"\bloss\b'?[ =:]+(?P<value>nan|inf)\b"
    bulk = matcher.bulk_regex(regex, False)
    assert bulk is not None and bulk.pattern.startswith("loss")
    lines = ["lm loss: 2.1", "loss = nan", "xloss: nan", "a loss:inf b", "loss:\nnan"]
    text = "\n".join(lines)
    hits = {text.count("\n", 0, m.start()) for m in bulk.finditer(text)}
    assert {i for i, line in enumerate(lines) if re.search(regex, line)} <= hits


def test_text_chunks_give_what_lines_give(engine: str) -> None:
    """Raw text cut anywhere (mid-line, mid-character, with CRLF) gives the signals its lines give."""
    crlf = [line + "\r" for line in _synthetic()[:300]]
    logs = [_synthetic(), crlf, *(_lines(p) for p in _fixture_logs() if "gpu" in p.parts[-2])]
    for lines in logs:
        for patterns in SETS.values():
            by_lines = Classifier(patterns, max_signals=10**9)
            for start in range(0, len(lines), BLOCK):
                by_lines.feed(lines[start : start + BLOCK])
            text = "\n".join(lines) + "\n"
            by_text = Classifier(patterns, max_signals=10**9)
            got = [
                s
                for start in range(0, len(text), 40_001)
                for s in by_text.feed_text(text[start : start + 40_001])
            ]
            reference = _outcome(lines, patterns, fast=False, block=len(lines) or 1)
            assert [(s.line_no, s.pattern) for s in by_text.signals] == [(x[0], x[1]) for x in reference[0]]
            assert by_text.last_iteration == by_lines.last_iteration == reference[2]
            assert {(s.line_no, s.pattern) for s in got if s.role == "progress"} <= {
                (x[0], x[1]) for x in reference[3]
            }
            assert by_text.lines_seen == len(lines)


def _view_state(lines: list[str], patterns: PatternSet, *, fast: bool, block: int) -> list[tuple]:
    """What the hang tracker and the exit rule keep after each block, each line read 1.5 s apart."""
    view = AttemptView(patterns)
    if not fast:
        view.classifier = Classifier(patterns, fast=False)
    states = []
    for start in range(0, len(lines), block):
        chunk = lines[start : start + block]
        view.read_timed(chunk, [1000.0 + 1.5 * (start + k) for k in range(len(chunk))])
        t = view.tracker
        assert t is not None
        states.append((t.iteration, t.progress_s, t.intervals_s, t.clean_interval, t.checkpoint_since_s,
                       view.log_stride, view.best_iteration, view.last_iteration))  # fmt: skip
    return states


@pytest.mark.parametrize("block", [7, 40, 500, 100_000])
def test_collapsed_progress_keeps_the_tracker_and_log_interval_exact(engine: str, block: int) -> None:
    """Reading only the tail of each run of iteration lines leaves the tracker's samples and stride as reading all."""
    lines = _synthetic()
    patterns = SETS["megatron_production"]
    assert _view_state(lines, patterns, fast=True, block=block) == _view_state(
        lines, patterns, fast=False, block=block
    )


def test_collapsed_progress_reports_a_gap_only_when_lines_were_skipped() -> None:
    """A run longer than the tail names its first kept line as following skipped ones; a short run none."""
    patterns = SETS["megatron_production"]
    lines = [ITERATION.format(s=0, it=it, samples=it, nan=0) for it in range(1, 201)]
    classifier = Classifier(patterns, progress_tail=17)
    kept = [s.line_no for s in classifier.feed(lines) if s.role == "progress"]
    assert kept == list(range(184, 201))
    assert classifier.progress_gaps == {184}
    classifier.feed(lines[:10])
    assert classifier.progress_gaps == set()


def _marked_state(lines: list[str], patterns: PatternSet, *, marks: bool, block: int) -> list[tuple]:
    """`_view_state` read as one text per block: with marks (a replay's way) or with Signals."""
    view = AttemptView(patterns)
    states = []
    for start in range(0, len(lines), block):
        chunk = lines[start : start + block]
        times = [1000.0 + 1.5 * (start + k) for k in range(len(chunk))]
        if marks:
            view.read_text_timed("".join(line + "\n" for line in chunk), times)
        else:
            view.read_timed(chunk, times)
        t = view.tracker
        assert t is not None
        last = view.classifier.last_progress
        states.append((t, view.log_stride, view.best_iteration, view.last_iteration, view.total_iterations,
                       view.classifier.signals[:], last, view.classifier.lines_seen))  # fmt: skip
    return states


@pytest.mark.parametrize("block", [7, 40, 500, 100_000])
def test_progress_marks_leave_the_view_as_signals_do(engine: str, block: int) -> None:
    """Kept progress lines handed over as marks (Classifier.feed_marked) leave the tracker, the counters,
    the kept signals and the last progress signal exactly as their Signals do."""
    patterns = SETS["megatron_production"]
    for lines in (_synthetic(), *(_lines(p) for p in _fixture_logs() if "megatron" in p.parts[-2])):
        assert _marked_state(lines, patterns, marks=True, block=block) == _marked_state(
            lines, patterns, marks=False, block=block
        )


@pytest.mark.parametrize(
    ("regex", "head"),
    [
        (
            r"\biteration\s+(?P<iteration>\d+)/\s*(?P<train_iters>\d+) \|(?:.*?\| lm loss: (?P<lm_loss>\S+) \|)?",
            r"\biteration\s+(?P<iteration>\d+)/\s*(?P<train_iters>\d+) \|",
        ),
        (r"step (?P<step>\d+)(?: of (?P<total>\d+))?", r"step (?P<step>\d+)"),
        (r"step (?P<n>\d+)(?: iteration (?P<iteration>\d+))?", None),  # the optional part holds a kept group
        (r"a|(b)?", None),  # the group is a branch, not the end of every match
        (r"ab(c)??", None),  # lazy: not handled
        (r"ab\(c\)?", None),  # escaped parentheses
        (r"x[(]a(b)?", r"x[(]a"),  # a parenthesis in a class
        (r"(b)?", None),  # nothing before it
        (r"a(b)+", None),
    ],
)
def test_head_regex_drops_only_a_trailing_optional_group(regex: str, head: str | None) -> None:
    """The head of a regex is searched for the kept progress lines: it must match where the whole
    regex matches, with the same groups the tracker reads."""
    found = matcher.head_regex(regex, False, ("iteration", "step", "train_iters"))
    assert (found.pattern if found else None) == head
    if found is not None:
        whole = re.compile(regex)
        for text in (
            "iteration 5/ 9 | x | lm loss: 1.0 |",
            "iteration 5/ 9 |",
            "step 3 of 4",
            "step 3",
            "x(ab",
        ):
            a, b = whole.search(text), found.search(text)
            assert (a is None) == (b is None)
            assert (
                a is None
                or b is None
                or (a.start(), {k: a[k] for k in b.groupdict()}) == (b.start(), b.groupdict())
            )


@pytest.mark.parametrize("ignore_case", [False, True])
def test_the_find_fallback_reports_every_word_where_words_share_their_start(ignore_case: bool) -> None:
    """Words with a common start are found by one pass for it: the hits are each word's own, overlaps included."""
    words = [
        "CUDA_ERROR_",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_ASSERT",
        "NCCL WARN ",
        "abc",
        "NCCL WARN Cuda",
    ]
    words = [w.lower() for w in words] if ignore_case else words
    text = "x CUDA_ERROR_LAUNCH_FAILED: y\nNCCL WARN Cuda failure 'z'\nabcabc CUDA_ERROR_ASSERT\nCUDA_ERROR_\nnothing\n"
    haystack, hits = matcher._FindScanner(words, ignore_case).find(text)
    expected = {
        (i, m.start()) for i, w in enumerate(words) for m in re.finditer(f"(?={re.escape(w)})", haystack)
    }
    assert sorted(hits) == sorted(expected) and len(hits) == len(expected)


def test_the_automaton_becomes_a_dfa_at_the_scan_that_passes_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scanner starts as the cheap-to-build NFA and builds the DFA before the scan that takes it past
    DFA_AFTER_BYTES; the hits are the same before and after."""
    if matcher.ahocorasick_rs is None:
        unavailable("ahocorasick-rs (a dependency) is not installed")
    words = ["CUDA error", "NCCL WARN", "error"]
    text = "x CUDA error: y\nNCCL WARN net\nfine\n" * 10
    monkeypatch.setattr(matcher, "DFA_AFTER_BYTES", 2 * len(text) + 1)
    scanner = matcher._AhoCorasickScanner(words, ignore_case=False)
    scans = []
    for _ in range(3):
        _haystack, hits = scanner.find(text)
        scans.append((scanner.is_dfa, sorted(hits)))
    assert [dfa for dfa, _ in scans] == [False, False, True]
    assert scans[0][1] == scans[2][1] and len(scans[0][1]) == 30


@pytest.mark.parametrize(
    "text",
    [
        "x NCCL Error: timed out\nnccl errornccl ERROR\nCCL E\nNcCl ErRoR X CUDA error\nfine\n",
        "caf\u00e9 NCCL error \u00fcber\nNCCL ERROR\n",  # non-ASCII without case oddities: the folded pass
        "\u212aelvin NCCL eRRor\n\u0130 nccl error\n",  # letters that lower-case to ASCII: the lowered pass
    ],
)
def test_folded_words_are_found_where_a_lower_cased_copy_finds_them(text: str) -> None:
    """Case-insensitive words found through the case spellings of a window, in the same pass as the
    case-sensitive words, give the hits (and lines) one scanner per case mode gives."""
    if matcher.ahocorasick_rs is None:
        unavailable("ahocorasick-rs (a dependency) is not installed")
    # "X" is both a case-sensitive word and a spelling of the insensitive "x": each keeps its hits
    sensitive, insensitive = ["CUDA error", "NCCL", "X"], ["nccl error", "ccl e", "x"]
    folded = matcher._rare_scanner(sensitive, insensitive)
    assert isinstance(folded, matcher._FoldedScanner)

    def hits_of(scanner: matcher._PerCase | matcher._FoldedScanner) -> dict[bool, tuple[list, list[int]]]:
        """Per case mode: the sorted (word, offset) hits and the line of each."""
        found = {}
        for case, haystack, hits in scanner.find(text, text.encode()):
            hits = sorted(hits, key=lambda hit: (hit[1], hit[0]))
            found[case] = (hits, matcher._lines_of(haystack, [off for _, off in hits]))
        return found

    hits = hits_of(folded)
    assert hits == hits_of(matcher._PerCase(sensitive, insensitive))
    hits = {case: found for case, (found, _lines) in hits.items()}
    assert len(hits[True]) >= 3  # the words occur: the comparison is not empty


def test_too_many_spellings_keep_a_lower_cased_pass() -> None:
    if matcher.ahocorasick_rs is None:
        unavailable("ahocorasick-rs (a dependency) is not installed")
    many = [f"{a}{b}word" for a in "abcdefgh" for b in "abcde"]  # letters only: 16 spellings each
    assert len(many) * 16 > matcher.FOLD_SPELLINGS
    assert isinstance(matcher._rare_scanner(["X"], many), matcher._PerCase)
    assert isinstance(matcher._rare_scanner(["X"], many[:8]), matcher._FoldedScanner)

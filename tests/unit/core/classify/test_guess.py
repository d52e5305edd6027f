"""A failed attempt's cause guessed from its words when no pattern explains it (core/classify/guess.py),
the pattern set's word model (core/classify/signals.py) and the corpus score's guesses (core/classify/score.py)."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import TAIL_CHARS, Classifier
from oellm_autoexp.core.classify.guess import (
    GUESS_SUBSYSTEM,
    REFINES,
    guessed_cause,
    is_catch_all_exception,
    is_guess,
    judged_cause,
)
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.core.classify.score import HEALTHY, Excerpt, read_excerpt, score_excerpts
from oellm_autoexp.core.classify.signals import PatternSet, Signal, merge_pattern_sets
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN, MIN_PROBABILITY, guess_cause, train
from oellm_autoexp.core.classify.vocabulary import words as line_words

PATTERNS = load_patterns(["megatron_production"])  # names the shipped model (base.yaml `vocabulary:`)

# Lines no shipped pattern matches, and the class the shipped model reads them as (checked at 0b8df58; DIVERGED
# rewritten in session 14: with add-0.03 smoothing the earlier `loss diverged ... (lm loss 3.1e+38 > abort
# threshold 1e+30)` reads numerical_instability at p=0.957, under the 0.97 threshold).
DIVERGED = "ERROR:root:training diverged at iteration 120: the loss exploded to 3.1e+38, stopping the run"
QP_FAILED = "ERROR: InfiniBand queue pair transition failed on mlx5_0, peer unreachable"
VAGUE = "some random error happened here"

ONE = train([("oom", "cannot allocate memory")])
OTHER = train([("nccl", "ibv queue pair failed")])


def _read(lines: list[str], patterns: PatternSet = PATTERNS) -> Classifier:
    c = Classifier(patterns)
    c.feed(lines)
    return c


@pytest.mark.parametrize(("line", "expected"), [(DIVERGED, "numerical_instability"), (QP_FAILED, "nccl"),
                                                (VAGUE, None)])  # fmt: skip
def test_the_shipped_model_guesses_unexplained_lines(line: str, expected: str | None) -> None:
    """No pattern matches these lines; the shipped model names the first two, and not the vague one."""
    c = _read(["starting", line, "done"])
    assert c.signals == []  # nothing explains them: the guess is the only reading
    guess = guessed_cause(c, PATTERNS)
    assert (guess.error_type if guess else None) == expected
    if guess is not None:
        assert (guess.pattern, guess.subsystem, guess.role, guess.line, guess.line_no) == (
            GUESS_PATTERN, GUESS_SUBSYSTEM, "root", line, 2)  # fmt: skip
        assert 0.9 <= float(guess.groups["probability"]) <= 1.0


def test_the_guess_line_number_is_the_logs() -> None:
    """After more than TAIL_CHARS of filler (the tail starts mid-log), the guess names the line's number in
    the whole log, not in the tail."""
    filler = [f"step {i} went fine, nothing to report here at all" for i in range(1, 2 * TAIL_CHARS // 40)]
    c = Classifier(PATTERNS)
    c.feed_text("\n".join(filler) + "\n")
    c.feed_text(QP_FAILED + "\nshutting down\n")
    assert c.tail_lines()[0] > 1
    guess = guessed_cause(c, PATTERNS)
    assert guess is not None and guess.line_no == len(filler) + 1 and guess.line == QP_FAILED


def test_a_line_a_pattern_matched_is_not_guessed_from() -> None:
    """A line a pattern explained is its pattern's, never a guess's: NCCL's missing-libibverbs WARN (an
    `info` entry of the nccl_gloo catalog: NCCL goes on over sockets) reads as nccl to the model, yet
    guesses nothing."""
    line = "h0913n-ubuntu:12877:12877 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]"
    c = _read([line])
    assert [(s.line, s.role) for s in c.signals] == [(line, "info")]
    words = PATTERNS.words
    assert words is not None and guess_cause([line], words) is not None  # what it would read as, unexplained
    assert guessed_cause(c, PATTERNS) is None


def test_no_model_no_guess() -> None:
    """A set without a word model (a plain list of patterns, `vocabulary: false`) guesses nothing."""
    bare = PatternSet(patterns=list(PATTERNS.patterns))
    assert bare.words is None and guessed_cause(_read([QP_FAILED], bare), bare) is None
    off = merge_pattern_sets([PATTERNS, PatternSet(vocabulary=False)])
    assert off.words is None and guessed_cause(_read([QP_FAILED], off), off) is None


def test_merge_the_last_set_naming_a_vocabulary_wins() -> None:
    """Merging: the last set that names a vocabulary (or turns it off) decides; a set that names none
    (None) inherits the one before; a set that turns it off hides the model, and a later name brings one."""
    one = PatternSet(vocabulary="one").with_words(ONE)
    other = PatternSet(vocabulary="other").with_words(OTHER)
    silent = PatternSet()
    off = PatternSet(vocabulary=False)
    assert silent.vocabulary is None

    assert merge_pattern_sets([one, other]).words is OTHER
    assert merge_pattern_sets([other, one]).words is ONE
    inherited = merge_pattern_sets([one, silent])
    assert (inherited.vocabulary, inherited.words) == ("one", ONE)
    turned_off = merge_pattern_sets([one, off, silent])
    assert (turned_off.vocabulary, turned_off.words) == (False, None)
    assert merge_pattern_sets([one, off, other]).words is OTHER
    assert merge_pattern_sets([silent, silent]).words is None


def test_with_words_leaves_the_original_alone() -> None:
    """with_words is a copy: the set it was made from keeps its own model."""
    base = PatternSet(patterns=list(PATTERNS.patterns)[:3], vocabulary="one")
    attached = base.with_words(ONE)
    assert (base.words, attached.words) == (None, ONE)
    assert [p.name for p in attached.patterns] == [p.name for p in base.patterns]


def test_the_score_marks_guessed_readings() -> None:
    """read_excerpt guesses where no pattern explains a failure's excerpt, as the monitor would for a FAILED
    attempt; a healthy excerpt is read as a run that did not fail (never guessed on), and what a guess would
    call it had it failed is kept apart."""
    excerpts = [
        Excerpt(QP_FAILED, "nccl", "t#1"),
        Excerpt(DIVERGED, "oom", "t#2"),  # a wrong guess
        Excerpt(QP_FAILED, HEALTHY, "t#3"),  # a healthy excerpt the model calls a failure
        Excerpt("all fine", HEALTHY, "t#4"),
    ]
    readings = [read_excerpt(e, PATTERNS) for e in excerpts]
    assert [(r.got, r.guessed, r.guess_if_failed) for r in readings] == [
        ("nccl", True, None), ("numerical_instability", True, None), (HEALTHY, False, "nccl"),
        (HEALTHY, False, None)]  # fmt: skip
    score = score_excerpts(excerpts, PATTERNS)
    assert score.guesses == (1, 2)
    assert [r.excerpt.source for r in score.healthy_guessed_failures] == ["t#3"]
    assert score.healthy_called_failures == []  # no pattern called it one


# Catch-all exception lines (python_exception reads them `exception`: no rule knows the class or the message)
# and what the shipped model's words make of them (checked when the refinement landed).
ILLEGAL_INSTRUCTION = "RuntimeError: the device kernel returned an illegal instruction on the GPU"
SOCKET_RESET = "[rank3]: RuntimeError: socket connection to peer reset during allreduce over ib interface"
CODE_BUG = "AttributeError: 'NoneType' object has no attribute 'shape'"
# A catalog entry that says `exception` on purpose (gloo: the ranks called different collectives)
COLLECTIVE_MISMATCH = (
    "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length"
    " <= op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a distributed collective"
    " mismatch in your code?"
)


def _judged_cause(lines: list[str], *, failed: bool = True) -> tuple[Signal | None, Signal | None]:
    """(the log's reading, the cause a verdict carries) of a failed (or not) attempt's lines."""
    c = _read(["starting", *lines])
    read = log_cause(c.signals)
    return read, judged_cause(read, c, PATTERNS, failed=failed)


@pytest.mark.parametrize(("line", "refined"), [(ILLEGAL_INSTRUCTION, "cuda_error"), (SOCKET_RESET, "nccl")])
def test_a_catch_all_exception_is_refined_by_its_words(line: str, refined: str) -> None:
    """A raised exception no rule knows reads `exception`; in a failed attempt its own words name the
    class, as a guess on the same line that says which catch-all it refines."""
    read, cause = _judged_cause([line])
    assert read is not None and (read.pattern, read.error_type) == ("python_exception", "exception")
    assert is_catch_all_exception(read, PATTERNS)
    assert cause is not None and is_guess(cause)
    assert (cause.error_type, cause.line, cause.line_no, cause.groups[REFINES]) == (
        refined,
        line,
        2,
        "exception",
    )
    assert float(cause.groups["probability"]) >= MIN_PROBABILITY


def test_words_that_read_as_a_code_bug_keep_the_catch_all() -> None:
    """Where the words say `exception` again (or nothing at the threshold), the reading stays as it was."""
    read, cause = _judged_cause([CODE_BUG])
    assert read is not None and read.error_type == "exception" and cause is read


def test_an_exception_a_rule_names_is_not_refined() -> None:
    """A catalog entry that says `exception` knows the message (the ranks called different collectives):
    not a catch-all, never refined; nor is a catch-all in an attempt that did not fail."""
    read, cause = _judged_cause([COLLECTIVE_MISMATCH])
    assert read is not None and read.error_type == "exception" and read.pattern != "python_exception"
    assert not is_catch_all_exception(read, PATTERNS) and cause is read
    read, cause = _judged_cause([ILLEGAL_INSTRUCTION], failed=False)
    assert cause is read and read is not None and read.error_type == "exception"


def test_the_score_records_what_a_guess_replaced() -> None:
    """read_excerpt keeps the class of the reading a guess replaced (None: no cause), which the decision
    score falls back on as the judge does."""
    refined = read_excerpt(Excerpt(ILLEGAL_INSTRUCTION, "cuda_error", "t#5"), PATTERNS)
    assert (refined.got, refined.guessed, refined.unguessed) == ("cuda_error", True, "exception")
    unexplained = read_excerpt(Excerpt(QP_FAILED, "nccl", "t#1"), PATTERNS)
    assert (unexplained.got, unexplained.guessed, unexplained.unguessed) == ("nccl", True, None)


def test_a_catch_all_is_never_refined_to_a_class_only_the_scheduler_reports() -> None:
    """ray's NodeDiedError reads as node_failure by its words; a raised exception is not the scheduler's end
    of the job (the policy would wait for one that never comes): the catch-all stays."""
    line = (
        "[rank0]: RuntimeError: The node with node id: abc123 has been marked dead because the detector has"
        " missed too many heartbeats from it."
    )
    words = PATTERNS.words
    assert words is not None
    assert words.posterior(line_words(line))[0][0] == "node_failure"
    read, cause = _judged_cause([line])
    assert read is not None and read.error_type == "exception" and cause is read

"""A failed attempt's cause when no pattern explains its log: the guess from its words, as a Signal. No I/O.

Only for an attempt that failed (Slurm says FAILED, or the launcher tears the job down for a
failed worker), two readings leave room for a guess (`judged_cause`); before the first is guessed,
its tail is read again with the lines a terminal or a log handler wrapped in two joined
(core/classify/wrapped.py): a pattern that matches the whole line is a reading, not a guess.
- no cause, or only a report that a process exited 1 (torch elastic's `exitcode : 1`: "look
  above"): the telling lines of the log's tail are weighed;
- a worker that died saying nothing a pattern knows (a "silent death", read `killed`): its last
  words, the LAST_WORDS_LINES lines before the launcher's teardown (kept when the teardown is read,
  core/classify/classifier.py), are weighed; a SIGKILLed worker has none and stays `killed`;
- a raised exception whose class and message matched no rule (a catch-all `exception`: `ValueError:
  <words no rule knows>`, core/classify/exception_types.py): its own line's words are weighed, and a
  guess of another class refines it (`groups["refines"]`). The message is the emitter's account of
  the failure; the rules know the messages they were written from, the words generalize past them.
  Never to a class only the scheduler reports (node_failure, preempted, ...). Checked on data no rule
  or model was fitted to (docs/classification.md, "When it is asked": a catch-all exception): of 46
  emitter messages the rules of session 12 read as a catch-all, 24 refined right, 2 wrong, 20 kept.
A guess names the class; the judge never lets it make a decision more drastic than the reading
it replaced (core/decide/judge.py).

The monitor (core/watch/attempt_view.py), the replay, `autoexp classify` and the corpus score
(core/classify/score.py) all ask here, so they guess alike. The word model is the pattern set's
(`vocabulary:` in a pattern file, core/classify/vocabulary.py); a set without one guesses nothing.
"""

from __future__ import annotations

from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.exception_types import GENERIC
from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.root_cause import SILENT_DEATH_PATTERN
from oellm_autoexp.core.classify.signals import ENDED_BY_SCHEDULER, PatternSet, Signal
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN, guess_cause
from oellm_autoexp.core.classify.wrapped import unwrapped_cause

GUESS_SUBSYSTEM = "vocabulary"
REFINES = "refines"  # a refining guess's group: the catch-all class it replaced
# The deciders that read a raised exception's own `Name: message` line (core/classify/blocks.py DECIDERS).
# Where they say `exception`, neither the class nor the message matched a rule (exception_types.py).
_RAISED_DECIDERS = frozenset({"exception_message", "error_file_message"})


def open_to_guess(cause: Signal | None) -> bool:
    """May a guess stand in for this reading of a failed log? Yes for no cause at all, and for a
    cascade `exception`: a launcher's or a worker pool's report that a process exited with an error
    (torch elastic's `exitcode : 1`, a DataLoader worker that exited), which says "look above"; with
    no exception above, the words above say more than the exit status."""
    return cause is None or (cause.role == "cascade" and cause.error_type == GENERIC)


def is_catch_all_exception(cause: Signal | None, patterns: PatternSet) -> bool:
    """Is this reading a raised exception's line whose class and message matched no rule? (A catalog
    entry or a C++ type table that says `exception` on purpose is not: it knows the message.)"""
    if cause is None or cause.role != "root" or cause.error_type != GENERIC:
        return False
    pattern = patterns.get(cause.pattern)
    return pattern is not None and pattern.decide in _RAISED_DECIDERS


def judged_cause(
    cause: Signal | None, classifier: Classifier, patterns: PatternSet, *, failed: bool
) -> Signal | None:
    """The cause a verdict carries: `cause` (the log's reading), or a guess where it leaves room.

    `failed`: the attempt failed (Slurm says FAILED, or a launcher tore it down for a failed worker,
    or the log is read as a failed attempt's). Otherwise nothing is guessed.
    """
    if not failed:
        return cause
    if cause is not None and cause.pattern == SILENT_DEATH_PATTERN:
        words = classifier.last_words
        if words is None or words[0] + len(words[1]) != cause.line_no:
            return cause  # not the teardown whose last words were kept
        return _guess(words[0], words[1], classifier, patterns) or cause
    if open_to_guess(cause):
        first_no, lines = classifier.tail_lines()  # split once: read whole first, then weighed
        return (
            unwrapped_cause(cause, first_no, lines, patterns)
            or _guess(first_no, lines, classifier, patterns)
            or cause
        )
    if cause is not None and is_catch_all_exception(cause, patterns):
        return _refined(cause, patterns) or cause
    return cause


def guessed_cause(classifier: Classifier, patterns: PatternSet) -> Signal | None:
    """The guess from the telling lines of the log's tail, or None (no model, no telling line)."""
    first_no, lines = classifier.tail_lines()
    return _guess(first_no, lines, classifier, patterns)


def is_guess(cause: Signal | None) -> bool:
    return cause is not None and cause.pattern == GUESS_PATTERN


def _refined(cause: Signal, patterns: PatternSet) -> Signal | None:
    """The class a catch-all exception's own words read as, if not `exception` again (None: keep it)."""
    words = patterns.words
    if words is None:
        return None
    guess = guess_cause([cause.line], words)
    if guess is None or guess.error_type == GENERIC or guess.error_type in ENDED_BY_SCHEDULER:
        return None
    return Signal(
        pattern=GUESS_PATTERN, error_type=guess.error_type, subsystem=GUESS_SUBSYSTEM, role="root",
        line=cause.line, line_no=cause.line_no, rank=cause.rank,
        groups={"probability": f"{guess.probability:.2f}", REFINES: cause.error_type or GENERIC},
    )  # fmt: skip


def _guess(first_no: int, lines: list[str], classifier: Classifier, patterns: PatternSet) -> Signal | None:
    """The guess from `lines` (numbered from `first_no`), the lines a pattern matched left out."""
    words = patterns.words
    if words is None or not lines:
        return None
    explained = {
        n - first_no + 1 for n in classifier.matched_line_numbers() if first_no <= n < first_no + len(lines)
    }
    guess = guess_cause(lines, words, explained=explained)
    if guess is None:
        return None
    return Signal(
        pattern=GUESS_PATTERN, error_type=guess.error_type, subsystem=GUESS_SUBSYSTEM, role="root",
        line=guess.line, line_no=first_no + guess.line_no - 1, rank=strip_prefix(guess.line)[1],
        groups={"probability": f"{guess.probability:.2f}"},
    )  # fmt: skip

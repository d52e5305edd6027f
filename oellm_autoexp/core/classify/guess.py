"""A failed attempt's cause when no pattern explains its log: the guess from its words, as a Signal. No I/O.

The monitor (core/watch/attempt_view.py, at the end of an attempt Slurm calls FAILED), the
replay, `autoexp classify` and the corpus score (core/classify/score.py) all ask here, so they
guess alike. The word model is the pattern set's (`vocabulary:` in a pattern file,
core/classify/vocabulary.py); a set without one guesses nothing.
"""

from __future__ import annotations

from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.signals import PatternSet, Signal
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN, guess_cause

GUESS_SUBSYSTEM = "vocabulary"


def open_to_guess(cause: Signal | None) -> bool:
    """May a guess stand in for this reading of a failed log? Yes for no cause at all, and for a
    launcher's bare report that a process exited 1 (torch elastic's `exitcode : 1`, read as a
    cascade `exception`: "look above for the exception"): with no exception above, the user's
    own last words say more than the exit status."""
    return cause is None or (cause.role == "cascade" and cause.error_type == "exception")


def guessed_cause(classifier: Classifier, patterns: PatternSet) -> Signal | None:
    """The guessed root cause of what `classifier` read, or None (no model, no telling line).

    Lines a pattern matched are not guessed from: their pattern said what they are.
    """
    words = patterns.words
    if words is None:
        return None
    first_no, lines = classifier.tail_lines()
    explained = {s.line for s in classifier.signals}
    if classifier.last_progress is not None:
        explained.add(classifier.last_progress.line)
    guess = guess_cause(lines, words, explained=explained)
    if guess is None:
        return None
    return Signal(
        pattern=GUESS_PATTERN, error_type=guess.error_type, subsystem=GUESS_SUBSYSTEM, role="root",
        line=guess.line, line_no=first_no + guess.line_no - 1, rank=strip_prefix(guess.line)[1],
        groups={"probability": f"{guess.probability:.2f}"},
    )  # fmt: skip

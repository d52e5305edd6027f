"""A failed attempt's cause when no pattern explains its log: the guess from its words, as a Signal. No I/O.

Two readings leave room for a guess (`judged_cause`):
- a FAILED attempt whose log gives no cause, or only a launcher's "exited 1": the telling lines
  of the log's tail are weighed;
- a launcher that tears the job down for a worker that said nothing a pattern knows (a "silent
  death", read `killed`): the worker's last words, the lines just before the teardown, are
  weighed; a SIGKILLed worker has none and stays `killed`.

The monitor (core/watch/attempt_view.py), the replay, `autoexp classify` and the corpus score
(core/classify/score.py) all ask here, so they guess alike. The word model is the pattern set's
(`vocabulary:` in a pattern file, core/classify/vocabulary.py); a set without one guesses nothing.
"""

from __future__ import annotations

from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.root_cause import SILENT_DEATH_PATTERN
from oellm_autoexp.core.classify.signals import PatternSet, Signal
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN, guess_cause

GUESS_SUBSYSTEM = "vocabulary"
# The lines before a launcher's teardown that may hold the failed worker's last words: what it
# printed as it gave up comes right before the launcher notices (torchrun polls every few seconds).
LAST_WORDS_LINES = 20


def open_to_guess(cause: Signal | None) -> bool:
    """May a guess stand in for this reading of a failed log? Yes for no cause at all, and for a
    launcher's bare report that a process exited 1 (torch elastic's `exitcode : 1`, read as a
    cascade `exception`: "look above for the exception"): with no exception above, the user's
    own last words say more than the exit status."""
    return cause is None or (cause.role == "cascade" and cause.error_type == "exception")


def judged_cause(
    cause: Signal | None, classifier: Classifier, patterns: PatternSet, *, failed: bool
) -> Signal | None:
    """The cause a verdict carries: `cause` (the log's reading), or a guess where it leaves room.

    `failed`: Slurm says the attempt FAILED (or the log is read as a failed attempt's).
    """
    if cause is not None and cause.pattern == SILENT_DEATH_PATTERN:
        return guessed_cause(classifier, patterns, before_line=cause.line_no) or cause
    if failed and open_to_guess(cause):
        return guessed_cause(classifier, patterns) or cause
    return cause


def guessed_cause(
    classifier: Classifier, patterns: PatternSet, before_line: int | None = None
) -> Signal | None:
    """The guessed root cause of what `classifier` read, or None (no model, no telling line).

    Lines a pattern matched are not guessed from: their pattern said what they are. With
    `before_line`, only the LAST_WORDS_LINES lines before that line are weighed.
    """
    words = patterns.words
    if words is None:
        return None
    first_no, lines = classifier.tail_lines()
    if before_line is not None:
        start = max(first_no, before_line - LAST_WORDS_LINES)
        lines = lines[start - first_no : max(0, before_line - first_no)]
        first_no = start
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

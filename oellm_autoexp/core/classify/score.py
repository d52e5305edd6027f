"""How well the classifier reads labelled log excerpts: accuracy, per-class precision/recall. No I/O.

Each excerpt is classified as `autoexp classify` classifies a file: its lines
fed to a `Classifier`, the root cause's `error_type` is the reading, and no
root cause reads as `healthy`. The labelled corpus lives in tests/corpus/
(real lines quoted from public sources), its held-out part in tests/corpus/holdout/ (never
used to write or tune a pattern); tests/unit/core/classify/test_classify_corpus.py and
scripts/corpus_report.py both score them with `score_excerpts`, per family (corpus file).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.guess import is_guess, judged_cause
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.core.classify.signals import PatternSet
from oellm_autoexp.core.classify.uncaught import acts_while_running

HEALTHY = "healthy"  # the label of an excerpt that shows no failure


@dataclass(frozen=True)
class Excerpt:
    """One labelled excerpt: the lines, the class a careful engineer gives them, where they come from."""

    text: str
    expected: str  # a root error_type, or HEALTHY
    source: str  # owner/repo#N or a page URL
    note: str = ""
    family: str = ""  # the failure family: the corpus file it comes from (`slurm_steps`, ...)


@dataclass(frozen=True)
class Reading:
    """The classifier's reading of one excerpt."""

    excerpt: Excerpt
    got: str  # the root cause's error_type, or HEALTHY
    mixed: bool = False  # besides the root, a cascade/teardown line or a line of another class
    guessed: bool = False  # no pattern explained it: the word model's guess (core/classify/guess.py)
    # A guess's: the class of the reading it replaced (None: no cause), which the judge falls back on
    unguessed: str | None = None
    # A healthy excerpt read as if its attempt had FAILED: the class the word model would guess (None: none)
    guess_if_failed: str | None = None

    @property
    def right(self) -> bool:
        return self.got == self.excerpt.expected


@dataclass(frozen=True)
class ClassScore:
    """Precision and recall of one class over the corpus."""

    name: str
    support: int  # excerpts labelled with this class
    predicted: int  # excerpts the classifier put in this class
    correct: int  # both

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.correct / self.support if self.support else 1.0


@dataclass(frozen=True)
class Score:
    readings: tuple[Reading, ...]

    @property
    def accuracy(self) -> float:
        return sum(r.right for r in self.readings) / len(self.readings) if self.readings else 1.0

    @property
    def mixed(self) -> int:
        """Excerpts where the root shares the excerpt with its cascade (teardown, other classes)."""
        return sum(r.mixed for r in self.readings)

    @property
    def healthy_called_failures(self) -> list[Reading]:
        """Healthy excerpts read as a failure (a healthy run is never guessed on: a pattern did it)."""
        return [
            r for r in self.readings if r.excerpt.expected == HEALTHY and r.got != HEALTHY and not r.guessed
        ]

    @property
    def healthy_guessed_failures(self) -> list[Reading]:
        """Healthy excerpts the word model would call a failure had the attempt FAILED with only these lines."""
        return [r for r in self.readings if r.excerpt.expected == HEALTHY and r.guess_if_failed is not None]

    @property
    def guesses(self) -> tuple[int, int]:
        """(right, all) of the readings the word model gave."""
        guessed = [r for r in self.readings if r.guessed]
        return sum(r.right for r in guessed), len(guessed)

    def classes(self) -> list[ClassScore]:
        support = Counter(r.excerpt.expected for r in self.readings)
        predicted = Counter(r.got for r in self.readings)
        correct = Counter(r.got for r in self.readings if r.right)
        names = sorted(set(support) | set(predicted))
        return [ClassScore(n, support[n], predicted[n], correct[n]) for n in names]

    def families(self) -> list[tuple[str, int, int]]:
        """(family, excerpts, right) for every family, by name."""
        support = Counter(r.excerpt.family for r in self.readings)
        right = Counter(r.excerpt.family for r in self.readings if r.right)
        return [(f, support[f], right[f]) for f in sorted(support)]

    def confusions(self) -> list[tuple[str, str, int]]:
        """(expected, got, count) for every wrong pair, most frequent first."""
        pairs = Counter((r.excerpt.expected, r.got) for r in self.readings if not r.right)
        return sorted(((e, g, n) for (e, g), n in pairs.items()), key=lambda t: (-t[2], t[0], t[1]))


def cause_of(label: str) -> str | None:
    """A corpus label as a root cause: None for `healthy`."""
    return None if label == HEALTHY else label


def read_excerpt(excerpt: Excerpt, patterns: PatternSet) -> Reading:
    """Classify one excerpt the way the monitor reads an ended attempt's log.

    A failure's excerpt is read as a FAILED attempt's log (the word model may guess); a healthy
    one as a run that did not fail, which the monitor never guesses on and judges only when a line
    would make it act while the run goes on (a fatal line, an uncaught exception's line): a
    catch-all or fallback reading alone is no failure of a run that ends well. What the guess would
    call a healthy excerpt had its attempt failed is kept apart (`Reading.guess_if_failed`).
    """
    classifier = Classifier(patterns, source=excerpt.source)
    classifier.feed(excerpt.text.splitlines())
    read = log_cause(classifier.signals)
    cause = judged_cause(read, classifier, patterns, failed=excerpt.expected != HEALTHY)
    last_progress = classifier.last_progress.line_no if classifier.last_progress is not None else None
    if excerpt.expected == HEALTHY and not acts_while_running(classifier.signals, last_progress):
        cause = None
    if_failed = None
    if excerpt.expected == HEALTHY:
        stressed = judged_cause(read, classifier, patterns, failed=True)
        if_failed = stressed.error_type if stressed is not None and is_guess(stressed) else None
    got = cause.error_type if cause is not None and cause.error_type else HEALTHY
    mixed = cause is not None and any(
        s is not cause
        and (s.teardown or s.role == "cascade" or (s.error_type or cause.error_type) != cause.error_type)
        for s in classifier.signals
    )
    guessed = is_guess(cause)
    unguessed = read.error_type if guessed and read is not None else None
    return Reading(excerpt, got, mixed, guessed=guessed, unguessed=unguessed, guess_if_failed=if_failed)


def score_excerpts(excerpts: Iterable[Excerpt], patterns: PatternSet) -> Score:
    return Score(tuple(read_excerpt(e, patterns) for e in excerpts))


def format_score(score: Score, wrong_limit: int = 0, confusions: bool = True) -> str:
    """The per-class table, the confusion pairs (unless not asked) and (up to `wrong_limit`) the wrong readings."""
    lines = [f"{'class':<24}{'n':>5}{'called':>8}{'precision':>11}{'recall':>8}"]
    lines += [
        f"{c.name:<24}{c.support:>5}{c.predicted:>8}{c.precision:>11.1%}{c.recall:>8.1%}"
        for c in score.classes()
    ]
    right = sum(r.right for r in score.readings)
    lines.append(f"overall accuracy: {score.accuracy:.1%} ({right}/{len(score.readings)})")
    lines.append(f"excerpts mixing a root with its cascade: {score.mixed}")
    pairs = score.confusions() if confusions else []
    if pairs:
        lines.append("confusions (expected -> got: count):")
        lines += [f"  {e} -> {g}: {n}" for e, g, n in pairs]
    wrong = [r for r in score.readings if not r.right][:wrong_limit]
    for r in wrong:
        first = r.excerpt.text.splitlines()[0][:140] if r.excerpt.text else ""
        lines.append(f"  [{r.excerpt.source}] expected {r.excerpt.expected}, got {r.got}: {first}")
    return "\n".join(lines)


def format_families(fitted: Score, held_out: Score) -> str:
    """One row per failure family: its excerpts and accuracy in the fitted and the held-out set."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for column, score in enumerate((fitted, held_out)):
        for family, n, right in score.families():
            rows.setdefault(family, [(0, 0), (0, 0)])[column] = (n, right)
    lines = [f"{'family':<22}{'fitted':>14}{'held out':>16}"]
    for family, cells in sorted(rows.items()):
        text = [f"{r}/{n} {r / n:>6.1%}" if n else "-" for n, r in cells]
        lines.append(f"{family:<22}{text[0]:>14}{text[1]:>16}")
    return "\n".join(lines)


def excerpts_from_records(records: Sequence[dict[str, object]], origin: str) -> list[Excerpt]:
    """Excerpts from parsed corpus records (mappings with text/expected/source/note).

    Their family is the name of `origin` (a corpus file) without its extension.
    """
    family = PurePath(origin).stem
    out = []
    for i, record in enumerate(records):
        missing = [k for k in ("text", "expected", "source") if not record.get(k)]
        if missing:
            raise ValueError(f"{origin}: record {i + 1} lacks {', '.join(missing)}")
        note = record.get("note") or ""
        out.append(
            Excerpt(str(record["text"]), str(record["expected"]), str(record["source"]), str(note), family)
        )
    return out

"""The last resort for a failed attempt no pattern explains: the family its words are closest to. No I/O.

Patterns and catalogs recognise the messages they were written for; the next program phrases
the same failure in other words (`unable to allocate shared memory` where a pattern knows
`No space left on device`). When an attempt has FAILED and no line matched, the words of the
lines that read like an error still say a lot: `memory`, `allocate`, `shm` point to `oom`;
`ibv`, `qp`, `socket` to `nccl`; `argument`, `invalid`, `expected` to `config_error`.

`WordModel` is a multinomial naive Bayes over those words, one distribution per class and one
for `healthy` (warnings and notices that mention an error and are none). It is trained by
`scripts/build_vocabulary.py` from the emitters' own messages (the catalogs' formats and
examples, core/classify/catalog.py) and the fitted corpus (tests/corpus/*.yaml, never the
held-out part), and shipped as counts (config/monitoring/vocabulary.json). Its settings were
chosen by cross-validation on the fitted corpus alone (docs/classification.md).

A guess is never a pattern: it is asked only for an attempt that failed (core/classify/guess.py),
the reason says the class was guessed from the words of which line, and the judge never lets a
guess make a decision more drastic than the reading it replaced (core/decide/judge.py).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.unknown import errorish

HEALTHY = "healthy"
GUESS_PATTERN = "vocabulary_guess"  # the pattern name a guessed cause carries
MAX_CANDIDATES = 40  # error-like lines weighed, the last ones of the tail
# A guess below this posterior is none. With add-0.3 smoothing (the shipped model's), chosen by
# cross-validation on the fitted corpus (`scripts/build_vocabulary.py --cv`): the highest share
# of right guesses whose wrong guesses stay under a tenth of all guesses (docs/classification.md).
# 0.9 until session 12: with batches 15 and 16 and the widened catalogs its wrong guesses rose to 11.4 %.
# 0.95 until session 13: with batch 17 and the Ray, NCCL-socket and transformers entries, 10.02 %.
MIN_PROBABILITY = 0.97
# A line is read up to here: a message says what it is at its start, and the regexes below must not
# meet a 32 KB line of dots (`_NOISE`'s file-name part backtracks: 9.6 s on one).
MAX_LINE_CHARS = 2_000

# Variable parts are not words: numbers, hex, paths, addresses would only memorise the quoted line.
_NOISE = re.compile(r"0x[0-9a-fA-F]+|(?:/[\w.+-]+)+/?|\b[\w.-]+\.(?:py|cc|cpp|cu|c|h|so)\b|\d+")
# CamelCase and snake_case split: `OutOfMemoryError` reads as out, of, memory, error.
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_STOP = frozenset("a an and are as at be by for from in is it of on or the to was with this that".split())  # noqa: SIM905


# Lines that can say why a process ended besides unknown.py's error words: an exception's or a
# fault's name run into its prefix (`RuntimeError:`, `CudaFault`), memory running out, a bad number,
# a limit, a signal or an exit code, a scheduler's or driver's report.
_TELLING = re.compile(
    r"(?:Error|Exception|Fault)\b|out of memory|\boom\b|\bnan\b|\binf\b|overflow|exceed|"
    r"\bsignal\b|exit(?:ed)? (?:code|status|with)|\bexitcode\b|cancelled|\bxid\b|assert|"
    r"\bmismatch|\binvalid\b|\bunexpected\b|\bmissing\b|\bcould not\b|\bcan't\b|\bnot (?:supported|available)",
    re.IGNORECASE,
)


# Lines that say they are no cause: a notice or warning by its level (NCCL's `WARN` is its error
# level and stays), and the training loop's own progress (Megatron's iteration line, a tqdm bar),
# whose `nan iterations: 0` and `loss scale` are figures, not failures.
# A stack's lines are where, not why: Python's `File "x.py", line N` and the source line under it,
# C++'s `frame #3:`, gdb's `#3 0x... in`, faulthandler's `Extension modules:`, and the dump logging
# prints when a record cannot be formatted (`Message: '...'`, `Arguments: (...)`).
_NOT_A_CAUSE = re.compile(
    r"\b(?:INFO|DEBUG|NOTICE)\b|(?:^|[\s\[])[WI] ?[\w./-]+\.(?:cc|cpp|cu|h|py):\d+\]|\w*warning\b|^\W*[WI]\d{4} |"
    r"\biteration\s+\d+\s*/\s*\d+\s*\||\d+%\||"
    r"^\s*File \"[^\"]*\", line \d+|^\s*frame #\d+:|^\s*#\d+\s+0x[0-9a-f]+ in |^\s*Extension modules:|"
    r"^\s*(?:Message: '|Arguments: \()|^\s{2,}(?:def|class|return|if|elif|else|for|while|with|try|except|finally)\b",
    re.IGNORECASE,
)


def telling(line: str) -> bool:
    """Can the line say why the process ended (an error word, an exception's name, a limit, a
    signal), and is it not a notice, a warning, a stack's line or a progress line? Judged
    without the launcher's prefix (`[rank0]:`, `3: `), on its first MAX_LINE_CHARS."""
    body = strip_prefix(line[:MAX_LINE_CHARS])[0]
    return (errorish(body) or _TELLING.search(body) is not None) and _NOT_A_CAUSE.search(body) is None


def words(line: str) -> list[str]:
    """The words of a line that can tell a class: lower case, no numbers or paths, no stop words
    (of its first MAX_LINE_CHARS)."""
    body = _NOISE.sub(" ", strip_prefix(line[:MAX_LINE_CHARS])[0])
    found = (w.lower() for w in _WORD.findall(body))
    return [w for w in found if len(w) > 1 and w not in _STOP]


@dataclass(frozen=True)
class WordModel:
    """Word counts per class; log-likelihoods with add-`alpha` smoothing, uniform class prior.

    The prior is uniform because the training data's class sizes say how many messages we
    collected, not how often a class ends a job.
    """

    counts: Mapping[str, Mapping[str, int]]  # class -> word -> count
    alpha: float = 0.1

    def __post_init__(self) -> None:
        vocabulary = {w for per_class in self.counts.values() for w in per_class}
        logs: dict[str, dict[str, float]] = {}
        unseen: dict[str, float] = {}
        for name, per_class in self.counts.items():
            total = sum(per_class.values()) + self.alpha * len(vocabulary)
            logs[name] = {w: math.log((n + self.alpha) / total) for w, n in per_class.items()}
            unseen[name] = math.log(self.alpha / total)
        object.__setattr__(self, "_vocabulary", frozenset(vocabulary))
        object.__setattr__(self, "_logs", logs)
        object.__setattr__(self, "_unseen", unseen)

    @property
    def classes(self) -> list[str]:
        return sorted(self.counts)

    def posterior(self, tokens: Sequence[str]) -> list[tuple[str, float]]:
        """(class, probability) for the words, most likely first; words no class has seen count for none."""
        known = [t for t in tokens if t in self._vocabulary]  # type: ignore[attr-defined]
        if not known:
            return []
        scores = {
            name: sum(self._logs[name].get(t, self._unseen[name]) for t in known)  # type: ignore[attr-defined]
            for name in self.counts
        }
        top = max(scores.values())
        weights = {name: math.exp(s - top) for name, s in scores.items()}
        total = sum(weights.values())
        return sorted(((n, w / total) for n, w in weights.items()), key=lambda p: (-p[1], p[0]))

    def to_json(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "counts": {c: dict(sorted(w.items())) for c, w in sorted(self.counts.items())},
        }

    @classmethod
    def from_json(cls, data: object) -> WordModel:
        """The model a `to_json` mapping describes; ValueError naming the key that is wrong."""
        if not isinstance(data, Mapping) or not isinstance(data.get("counts"), Mapping):
            raise ValueError("counts: expected a mapping of class -> word -> count")
        alpha = data.get("alpha", 0.1)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
            raise ValueError(f"alpha: expected a positive finite number, got {alpha!r}")
        counts: dict[str, dict[str, int]] = {}
        for name, per_class in data["counts"].items():
            if not isinstance(per_class, Mapping) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in per_class.values()
            ):
                raise ValueError(f"counts.{name}: expected a mapping of word -> count (a whole number >= 0)")
            counts[str(name)] = {str(w): n for w, n in per_class.items()}
        return cls(counts, float(alpha))


def train(documents: Iterable[tuple[str, str]], alpha: float = 0.1) -> WordModel:
    """A model from (class, text) documents; each line of a text adds its words to its class."""
    counts: dict[str, Counter[str]] = {}
    for name, text in documents:
        bucket = counts.setdefault(name, Counter())
        for line in text.splitlines():
            bucket.update(words(line))
    return WordModel({name: dict(c) for name, c in counts.items() if c}, alpha)


@dataclass(frozen=True)
class Guess:
    """The class a failed attempt's error-like lines read closest to."""

    error_type: str
    line: str  # the line whose words decided
    line_no: int  # its number among the lines given (from 1)
    probability: float  # the model's posterior for the class on that line

    @property
    def detail(self) -> str:
        return f"no pattern matched; its words read as {self.error_type} (p={self.probability:.2f})"


def guess_cause(
    lines: Sequence[str],
    model: WordModel,
    min_probability: float = MIN_PROBABILITY,
    explained: Collection[int] = (),
) -> Guess | None:
    """The class of the most telling error-like line among `lines`, or None.

    Every error-like line (the last MAX_CANDIDATES) is weighed on its own; the guess is the one
    whose best non-healthy class is most probable, if that is at least `min_probability` and the
    line is not more likely healthy. A line only `healthy` explains guesses nothing, and so does a
    line whose number (from 1, in `lines`) is in `explained`: a pattern matched it and said what it
    is (a notice, a teardown). The likeliest line, not the latest: cross-validation on the fitted
    corpus read 440 right and 43 wrong so, 435 and 48 taking the latest (docs/classification.md).
    """
    candidates = [(i, line) for i, line in enumerate(lines, 1) if i not in explained and telling(line)][
        -MAX_CANDIDATES:
    ]
    best: Guess | None = None
    for line_no, line in candidates:
        ranked = model.posterior(words(line))
        if not ranked or ranked[0][0] == HEALTHY:
            continue
        name, probability = ranked[0]
        if probability >= min_probability and (best is None or probability > best.probability):
            best = Guess(name, line.rstrip("\r\n"), line_no, probability)
    return best

#!/usr/bin/env python3
"""Build the word model a failed attempt with no recognised line is guessed from (core/classify/vocabulary.py).

    scripts/build_vocabulary.py            write config/monitoring/vocabulary.json
    scripts/build_vocabulary.py --check    exit 1 if the shipped file differs from a fresh build
    scripts/build_vocabulary.py --cv       cross-validate the settings on the fitted corpus

Training data: every catalog entry's format (its conversions dropped) and example, under its
class (config/monitoring/catalogs/), and every record of the fitted corpus (tests/corpus/*.yaml),
under its label. Never the held-out part (tests/corpus/holdout/): the held-out score is the
model's honest figure only because it never saw those lines.

`--cv` splits the fitted records into folds by source thread (a thread's lines never sit on
both sides), trains on the catalogs and the other folds, and guesses each left-out record as the
monitor would for a failed attempt no pattern explains. It prints, for each setting, how many
failure records it guesses right, wrong or not at all, and how many healthy records it would
wrongly call a failure.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oellm_autoexp.adapters.logs.pattern_files import load_patterns  # noqa: E402
from oellm_autoexp.core.classify.catalog import Catalog, literal_runs  # noqa: E402
from oellm_autoexp.core.classify.classifier import Classifier  # noqa: E402
from oellm_autoexp.core.classify.score import HEALTHY, Excerpt  # noqa: E402
from oellm_autoexp.core.classify.signals import PatternSet  # noqa: E402
from oellm_autoexp.core.classify.vocabulary import WordModel, guess_cause, train  # noqa: E402
from scripts.corpus_report import CORPUS_DIR, load_corpus  # noqa: E402

CATALOG_DIR = REPO / "config" / "monitoring" / "catalogs"
MODEL_FILE = REPO / "config" / "monitoring" / "vocabulary.json"
ALPHA = 0.03  # add-alpha smoothing: chosen with --cv (docs/classification.md)
FOLDS = 5


def catalog_documents() -> list[tuple[str, str]]:
    """(class, text) for every catalog entry that has a class: its format and its example."""
    documents: list[tuple[str, str]] = []
    for path in sorted(CATALOG_DIR.glob("*.yaml")):
        catalog = Catalog.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        for entry in catalog.entries:
            if entry.error_type is None or entry.teardown:
                continue
            fmt = " ".join(literal_runs(entry.format)) if entry.format else ""
            documents.append((entry.error_type, f"{fmt}\n{entry.example}"))
    return documents


def corpus_documents(excerpts: list[Excerpt]) -> list[tuple[str, str]]:
    return [(e.expected, e.text) for e in excerpts]


def build(alpha: float = ALPHA) -> WordModel:
    return train([*catalog_documents(), *corpus_documents(load_corpus(CORPUS_DIR))], alpha)


def model_text(model: WordModel) -> str:
    return json.dumps(model.to_json(), indent=0, sort_keys=True) + "\n"


def fold_of(source: str) -> int:
    """A thread's fold, the same on every run and machine."""
    return int(hashlib.sha256(source.encode()).hexdigest(), 16) % FOLDS


@functools.cache
def shipped_patterns() -> PatternSet:
    """The shipped set, as `autoexp classify` and the monitor use (it names the model: load after a build)."""
    return load_patterns()


def explained(excerpt: Excerpt) -> set[int]:
    """The numbers (from 1) of the excerpt's lines a shipped pattern matches (any role): never a guess's line."""
    classifier = Classifier(shipped_patterns(), source=excerpt.source, fast=False)
    classifier.feed(excerpt.text.splitlines())
    return classifier.matched_line_numbers()


def cross_validate(alpha: float, min_probability: float) -> Counter[str]:
    """Outcome counts over the fitted corpus, each record guessed by a model that never saw its thread."""
    excerpts = load_corpus(CORPUS_DIR)
    catalogs = catalog_documents()
    tally: Counter[str] = Counter()
    for fold in range(FOLDS):
        kept = [e for e in excerpts if fold_of(e.source) != fold]
        model = train([*catalogs, *corpus_documents(kept)], alpha)
        for excerpt in (e for e in excerpts if fold_of(e.source) == fold):
            # A failure record's own lines are what its patterns were written for: left in, they
            # measure the words on a thread the model never saw. A healthy record is read as the
            # monitor reads a failed log, the lines a pattern matched left out.
            healthy = excerpt.expected == HEALTHY
            guess = guess_cause(excerpt.text.splitlines(), model, min_probability,
                                explained(excerpt) if healthy else ())  # fmt: skip
            got = guess.error_type if guess else None
            if excerpt.expected == HEALTHY:
                tally["healthy: called a failure" if got else "healthy: no guess"] += 1
            elif got is None:
                tally["failure: no guess"] += 1
            else:
                tally["failure: right" if got == excerpt.expected else "failure: wrong"] += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped model is stale")
    parser.add_argument("--cv", action="store_true", help="cross-validate settings on the fitted corpus")
    args = parser.parse_args(argv)
    if args.cv:
        print("alpha  min_p  right  wrong  none  healthy_called_failure  (failure records; healthy records)")
        for alpha in (0.03, 0.1, 0.3):
            for min_p in (0.5, 0.7, 0.9, 0.95, 0.97):
                t = cross_validate(alpha, min_p)
                print(f"{alpha:5} {min_p:5}  {t['failure: right']:5}  {t['failure: wrong']:5}  "
                      f"{t['failure: no guess']:4}  {t['healthy: called a failure']:5}/"
                      f"{t['healthy: called a failure'] + t['healthy: no guess']}")  # fmt: skip
        return 0
    text = model_text(build())
    if args.check:
        current = MODEL_FILE.read_text(encoding="utf-8") if MODEL_FILE.is_file() else ""
        if current != text:
            print(
                f"{MODEL_FILE.relative_to(REPO)} is stale: run scripts/build_vocabulary.py", file=sys.stderr
            )
            return 1
        return 0
    MODEL_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {MODEL_FILE.relative_to(REPO)} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

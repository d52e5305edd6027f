#!/usr/bin/env python3
"""Score the classifier on the labelled corpus (tests/corpus/*.yaml) and print the per-class table.

    scripts/corpus_report.py [--patterns NAME] [--wrong N] [--corpus DIR]

Uses the shipped `megatron_production` pattern set, as `autoexp classify` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns  # noqa: E402
from oellm_autoexp.core.classify.score import (  # noqa: E402
    Excerpt,
    excerpts_from_records,
    format_score,
    score_excerpts,
)

CORPUS_DIR = REPO / "tests" / "corpus"


def load_corpus(directory: Path = CORPUS_DIR) -> list[Excerpt]:
    """Every record of every tests/corpus/*.yaml file, in file order."""
    excerpts: list[Excerpt] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            records = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            raise ValueError(f"{path.name}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if not isinstance(records, list):
            raise ValueError(f"{path.name}: expected a list of records")
        excerpts += excerpts_from_records(records, path.name)
    return excerpts


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--patterns", default=DEFAULT_PATTERNS, help="pattern set name or file")
    parser.add_argument("--wrong", type=int, default=50, metavar="N", help="list up to N wrong readings")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, help="folder of corpus *.yaml files")
    args = parser.parse_args()
    try:
        excerpts = load_corpus(args.corpus)
    except ValueError as exc:
        print(f"corpus_report: {exc}", file=sys.stderr)
        return 2
    score = score_excerpts(excerpts, load_patterns([args.patterns]))
    print(format_score(score, wrong_limit=args.wrong))
    return 0


if __name__ == "__main__":
    sys.exit(main())

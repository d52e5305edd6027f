#!/usr/bin/env python3
"""Score the classifier on the labelled corpus: fitted (tests/corpus/*.yaml) and held out (tests/corpus/holdout/).

    scripts/corpus_report.py [--patterns NAME] [--restart NAME] [--wrong N] [--corpus DIR]

Prints both accuracies, the decision accuracy (does the reading lead to the restart policy's
action for the true class: restart / restart elsewhere / stop / nothing), a per-family table
and the per-class table of the fitted set. Uses the shipped `megatron_production` pattern set,
as `autoexp classify` does, and the `default` restart policy. The held-out set is never used to
write or tune a pattern: a rising fitted score with a flat held-out one means generalize.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns  # noqa: E402
from oellm_autoexp.core.classify.score import (  # noqa: E402
    Excerpt,
    Score,
    excerpts_from_records,
    format_families,
    format_score,
    score_excerpts,
)
from oellm_autoexp.core.decide.class_action import decision_accuracy  # noqa: E402
from oellm_autoexp.core.decide.policy import RestartPolicy, load_policy  # noqa: E402

CORPUS_DIR = REPO / "tests" / "corpus"
HOLDOUT = "holdout"  # the held-out part: a subfolder of the corpus folder
FLOORS_FILE = "accuracy_floors.yaml"  # the test's floors, beside the records: not a record file


def load_corpus(directory: Path = CORPUS_DIR) -> list[Excerpt]:
    """Every record of every *.yaml file directly in `directory`, in file order."""
    excerpts: list[Excerpt] = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == FLOORS_FILE:
            continue
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


def load_restart_policy(name: str) -> RestartPolicy:
    path = REPO / "config" / "restart" / f"{name}.yaml"
    return load_policy(yaml.safe_load(path.read_text(encoding="utf-8")), str(path.name))


def summary(name: str, score: Score, policy: RestartPolicy) -> str:
    right = sum(r.right for r in score.readings)
    decided = decision_accuracy(score, policy)
    guessed_right, guessed = score.guesses
    return (
        f"{name:<9} class accuracy {score.accuracy:6.1%} ({right}/{len(score.readings)})"
        f"   decision accuracy {decided:6.1%} ({round(decided * len(score.readings))}/{len(score.readings)})"
        f"   word-model guesses {guessed_right}/{guessed} right"
        f"   healthy guessed a failure had it failed {len(score.healthy_guessed_failures)}/"
        f"{sum(r.excerpt.expected == 'healthy' for r in score.readings)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--patterns", default=DEFAULT_PATTERNS, help="pattern set name or file")
    parser.add_argument("--restart", default="default", help="restart policy under config/restart/")
    parser.add_argument(
        "--wrong", type=int, default=50, metavar="N", help="list up to N wrong fitted readings"
    )
    # The held-out texts stay unread by whoever writes patterns: their misses are counted, not listed,
    # unless asked for by name (a reviewer checking a label, never while writing a pattern).
    parser.add_argument("--list-held-out-misses", action="store_true",
                        help="also list the held-out wrong readings (never while writing patterns)")  # fmt: skip
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, help="folder of corpus *.yaml files")
    parser.add_argument("--save", action="store_true",
                        help="also write benchmarks/results/corpus_accuracy-<date>.json (benchmarks/README.md's table)")  # fmt: skip
    args = parser.parse_args()
    try:
        fitted = load_corpus(args.corpus)
        held_out = load_corpus(args.corpus / HOLDOUT)
    except ValueError as exc:
        print(f"corpus_report: {exc}", file=sys.stderr)
        return 2
    patterns = load_patterns([args.patterns])
    policy = load_restart_policy(args.restart)
    fitted_score, held_score = score_excerpts(fitted, patterns), score_excerpts(held_out, patterns)
    head = "\n".join([summary("fitted", fitted_score, policy), summary("held out", held_score, policy)])
    families = format_families(fitted_score, held_score)
    print(head)
    print()
    print(families)
    if args.save:
        save(args, fitted_score, held_score, policy, f"{head}\n\n{families}")
    print()
    print("fitted, per class:")
    print(format_score(fitted_score, wrong_limit=args.wrong))
    print("held out, per class:")
    listed = args.list_held_out_misses
    print(format_score(held_score, wrong_limit=args.wrong if listed else 0, confusions=listed))
    return 0


def save(args: argparse.Namespace, fitted: Score, held: Score, policy: RestartPolicy, text: str) -> None:
    """The figures and the printed table, as one results file (benchmarks/tables.py renders it)."""
    from benchmarks._common import environment  # only when saving: the report itself needs no benchmark code

    def figures(score: Score) -> dict[str, object]:
        return {
            "n": len(score.readings),
            "right": sum(r.right for r in score.readings),
            "accuracy": score.accuracy,
            "guesses": list(score.guesses),
            "decision_accuracy": decision_accuracy(score, policy),
        }

    data = {"benchmark": "corpus_accuracy", "patterns": args.patterns, "restart": args.restart,
            **environment(), "fitted": figures(fitted), "held_out": figures(held), "table": text}  # fmt: skip
    out = REPO / "benchmarks" / "results" / f"corpus_accuracy-{date.today().isoformat()}.json"
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"saved {out.relative_to(REPO)}")


if __name__ == "__main__":
    sys.exit(main())

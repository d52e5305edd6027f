#!/usr/bin/env python3
"""How much of a corpus label the excerpt's own text carries: an independent reader beside the classifier.

    scripts/text_only_reader.py [--save]

The corpus labels come from what each source thread shows happened (docs/classification.md "The
labelled corpus"), and a thread often knows more than its quoted lines: an NCCL error the thread
traced to a wrong NCCL_IB_* setting is labelled config_error. No classifier of log lines can
read such a record right except by chance. This script measures how many there are.

An independent reader (benchmarks/data/text_only_reader_labels.json says who, with the
instructions and the class list it was given) labelled every fitted and held-out excerpt from
its text alone, in random order,
never seeing the source, the note, the label or any classifier output. This script joins those
labels with the corpus (by source and the text's SHA-256) and prints, per set: the reader's and
the classifier's class and decision accuracy, how many records both read wrong, and how many at
least one reads right (an upper bound for any reading of the text that combines the two).
Counts only: no held-out text, source or label is printed. `--save` writes
benchmarks/results/text_only_reader-<date>.json (benchmarks/tables.py renders it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns  # noqa: E402
from oellm_autoexp.core.classify.score import Excerpt, read_excerpt  # noqa: E402
from oellm_autoexp.core.decide.class_action import label_action, reading_action  # noqa: E402
from oellm_autoexp.core.decide.policy import RestartPolicy  # noqa: E402
from scripts.corpus_report import CORPUS_DIR, HOLDOUT, load_corpus, load_restart_policy  # noqa: E402

LABELS = REPO / "benchmarks" / "data" / "text_only_reader_labels.json"
# The classes the reader could choose from (the file's `classes_given` describes each).
CLASS_NAMES = ("healthy", "oom", "gpu_hardware", "cuda_error", "hang", "nccl", "nccl_timeout", "rendezvous",
               "node_failure", "time_limit", "preempted", "requeue", "cancelled", "filesystem", "segfault",
               "killed", "numerical_instability", "config_error", "exception")  # fmt: skip


@dataclass(frozen=True)
class Row:
    family: str  # the corpus file the excerpt comes from
    reader_right: bool
    ours_right: bool
    reader_decides_right: bool
    ours_decides_right: bool
    confident: bool


def text_key(excerpt: Excerpt) -> tuple[str, str]:
    return excerpt.source, hashlib.sha256(excerpt.text.encode()).hexdigest()[:16]


def load_labels(path: Path = LABELS) -> dict[tuple[str, str, str], dict[str, object]]:
    """(set, source, text hash) -> the reader's record."""
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    return {(r["set"], r["source"], r["text_sha256"]): r for r in records}


def rows_of(set_name: str, excerpts: list[Excerpt], labels: dict, policy: RestartPolicy) -> list[Row]:
    patterns = load_patterns([DEFAULT_PATTERNS] if isinstance(DEFAULT_PATTERNS, str) else DEFAULT_PATTERNS)
    rows = []
    for excerpt in excerpts:
        reader = labels.get((set_name, *text_key(excerpt)))
        if reader is None:  # joined the corpus after the study
            continue
        reading = read_excerpt(excerpt, patterns)
        truth = label_action(excerpt.expected, policy)
        rows.append(
            Row(
                family=excerpt.family,
                reader_right=reader["label"] == excerpt.expected,
                ours_right=reading.right,
                reader_decides_right=label_action(str(reader["label"]), policy) == truth,
                ours_decides_right=reading_action(reading, policy) == truth,
                confident=bool(reader["confident"]),
            )
        )
    return rows


def figures(rows: list[Row]) -> dict[str, int]:
    confident = [r for r in rows if r.confident]
    return {
        "n": len(rows),
        "reader_right": sum(r.reader_right for r in rows),
        "ours_right": sum(r.ours_right for r in rows),
        "reader_decides_right": sum(r.reader_decides_right for r in rows),
        "ours_decides_right": sum(r.ours_decides_right for r in rows),
        "both_wrong": sum(not r.reader_right and not r.ours_right for r in rows),
        "either_right": sum(r.reader_right or r.ours_right for r in rows),
        "reader_confident": len(confident),
        "reader_right_when_confident": sum(r.reader_right for r in confident),
    }


def families(rows: list[Row]) -> dict[str, dict[str, int]]:
    """Per failure family: excerpts, and how many the reader and the classifier read right."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        f = out.setdefault(row.family, {"n": 0, "reader_right": 0, "ours_right": 0})
        f["n"] += 1
        f["reader_right"] += row.reader_right
        f["ours_right"] += row.ours_right
    return dict(sorted(out.items()))


def family_report(name: str, by_family: dict[str, dict[str, int]]) -> str:
    cells = [f"{family} {f['reader_right']}/{f['ours_right']}/{f['n']}" for family, f in by_family.items()]
    return f"{name} per family (reader/classifier/excerpts): " + ", ".join(cells)


def report(name: str, f: dict[str, int]) -> str:
    def share(k: str, of: str = "n") -> str:
        return f"{f[k]}/{f[of]} ({f[k] / f[of]:.1%})" if f[of] else "-"

    return "\n".join(
        [
            f"{name}: {f['n']} excerpts the reader labelled ({f['not_labelled']} joined the corpus after it)",
            f"  class right:    reader {share('reader_right')}, classifier {share('ours_right')}",
            f"  decision right: reader {share('reader_decides_right')}, classifier {share('ours_decides_right')}",
            f"  both wrong {f['both_wrong']}; at least one right {share('either_right')}",
            f"  reader confident on {f['reader_confident']}: right on {share('reader_right_when_confident', 'reader_confident')}",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--save", action="store_true", help="write benchmarks/results/text_only_reader-<date>.json"
    )
    args = parser.parse_args()
    labels = load_labels()
    policy = load_restart_policy("default")
    sets = {"fitted": load_corpus(CORPUS_DIR), "held_out": load_corpus(CORPUS_DIR / HOLDOUT)}
    results = {}
    by_family = {}
    for name, excerpts in sets.items():
        rows = rows_of(name, excerpts, labels, policy)
        results[name] = figures(rows)
        results[name]["not_labelled"] = len(excerpts) - results[name]["n"]
        by_family[name] = families(rows)
    text = "\n".join(
        [
            *(report(name, f) for name, f in results.items()),
            *(family_report(n, f) for n, f in by_family.items()),
        ]
    )
    print(text)
    if args.save:
        from benchmarks._common import environment

        data = {
            "benchmark": "text_only_reader",
            **environment(),
            **results,
            "families": by_family,
            "table": text,
        }
        out = REPO / "benchmarks" / "results" / f"text_only_reader-{date.today().isoformat()}.json"
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"saved {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What issue #26's widened catalogs cost in classification throughput: this tree beside a base commit.

    python benchmarks/bench_catalog_cost.py [--base REV] [--quick]   # default base: the merge-base with main

OURS (`Classifier()` with ahocorasick-rs, `megatron_production`, as the monitor runs it) is timed on
the same two corpora as bench_classify_throughput.py (healthy Megatron run, and dense with every
fixture log; ~50 MB each, quick ~8 MB, 4 MB chunks) with the package of this tree and with the
package of the base commit (`git archive` into a temporary folder), each round in a fresh
interpreter, the two trees interleaved round by round. MB/s is per CPU second of the classifying
process (time.process_time): on a shared machine wall time swings by a quarter from round to round
with the neighbours' load, CPU time far less. The catalogs add patterns; the keyword
prefilter is what keeps them off lines that do not hold their words, so the figure to watch is
MB/s here against MB/s at the base, not the pattern count.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from _common import Report, parse_args, save_result
from bench_classify_throughput import dense_corpus, healthy_corpus

REPO = Path(__file__).resolve().parent.parent
CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify import matcher
from oellm_autoexp.core.classify.classifier import Classifier
patterns = load_patterns(["megatron_production"])
matcher.set_engine("ahocorasick")
data = open(sys.argv[2], "rb").read()
chunks = [data[i:i + (4 << 20)].decode("utf-8", errors="replace") for i in range(0, len(data), 4 << 20)]
classifier = Classifier(patterns, max_signals=10**9)
t0 = time.process_time()
for chunk in chunks:
    classifier.feed_text(chunk)
classifier.flush()
s = time.process_time() - t0
print(len(data) / 1e6 / s, len(patterns.patterns), len(classifier.signals))
"""


def _base_rev(given: str | None) -> str:
    if given:
        return given
    done = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], check=False, cwd=REPO, capture_output=True, text=True
    )
    return done.stdout.strip() or "HEAD~1"


def _export(rev: str, into: Path) -> Path:
    archive = into / "base.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "base", filter="data")
    return into / "base"


def _run(tree: Path, corpus: Path) -> tuple[float, int, int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(corpus)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1]), int(out[2])


def main() -> None:
    args = parse_args(
        __doc__, lambda p: p.add_argument("--base", help="the base revision (default: merge-base with main)")
    )
    rev = _base_rev(args.base)
    target_mb, rounds = (8.0, 3) if args.quick else (50.0, 7)
    out = Report()
    results: dict[str, Any] = {"base": rev, "base_given": args.base is not None}
    with tempfile.TemporaryDirectory(prefix="catalog_cost_") as tmp:
        base = _export(rev, Path(tmp))
        corpora = {"healthy": healthy_corpus(target_mb), "dense": dense_corpus(target_mb)[0]}
        out(f"OURS at this tree vs at base {rev[:10]}: {target_mb:.0f} MB corpora, {rounds} rounds, "
            f"fresh interpreter per round, MB per CPU second; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        for name, text in corpora.items():
            path = Path(tmp) / f"{name}.log"
            path.write_text(text, encoding="utf-8")
            rows: dict[str, list[float]] = {"this tree": [], "base": []}
            counts: dict[str, tuple[int, int]] = {}
            for _ in range(rounds):
                for label, tree in (("this tree", REPO), ("base", base)):
                    mb_s, n_patterns, n_signals = _run(tree, path)
                    rows[label].append(mb_s)
                    counts[label] = (n_patterns, n_signals)
            med = {k: statistics.median(v) for k, v in rows.items()}
            for label, values in rows.items():
                out(f"  {name:<8} {label:<10} {counts[label][0]:4d} patterns  MB/s min {min(values):7.1f}  "
                    f"median {med[label]:7.1f}  max {max(values):7.1f}   ({counts[label][1]} signals)")  # fmt: skip
            out(f"  {name:<8} this tree / base, median: x{med['this tree'] / med['base']:.2f}")
            results[name] = {"rows": rows, "median": med, "patterns": {k: v[0] for k, v in counts.items()},
                             "ratio": med["this tree"] / med["base"]}  # fmt: skip
    save_result("catalog_cost", args, results, out.text)
    print(json.dumps({k: round(v["ratio"], 3) for k, v in results.items() if isinstance(v, dict)}))


if __name__ == "__main__":
    main()

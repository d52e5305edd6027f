"""Log classification throughput (MB/s) on real logs, ours vs every-regex-on-every-line.

Corpus: every log under tests/fixtures/logs/ (cpu, synthetic, gpu when present),
concatenated, interleaved with realistic healthy Megatron iteration lines (the bulk
of a real training log: one line per log interval), repeated to ~60 MB (quick: ~8 MB).

OURS: the monitor's Classifier (core/classify.py) with the shipped pattern set
(`load_patterns(["megatron_production"])`), fed blocks of ~1 MB of lines, as the log
tailer hands them over. It runs one combined keyword regex over a block, then only
the patterns whose keywords a candidate line contains.

BASELINE: the naive way, same patterns: every pattern's compiled regex `.search` on
every line (after the same launcher/rank prefix strip), then the same two rules the classifier applies (an `after:` pattern
counts only within `within_lines` of its anchor; a `fallback` pattern is dropped
when a specific root/cascade pattern hit the same line), so both must find exactly
the same (line, pattern) pairs; the sanity check compares them. The baseline runs
on the first BASELINE_MB of the corpus (it is slow); ours is timed on that same
prefix and on the whole corpus.
"""

from __future__ import annotations

import time
from pathlib import Path

from _common import Report, parse_args, save_result

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "logs"
HEALTHY_PER_BLOCK = 5000  # healthy iteration lines after each copy of the fixtures
BLOCK_BYTES = 1 << 20  # what the tailer hands over per read
ITERATION = (
    " [2026-11-22 04:{m:02d}:{s:02d}] iteration {it:>8}/  500000 | consumed samples: {samples:>12} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 412.7 | learning rate: "
    "2.999812E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.412 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def build_corpus(target_mb: float) -> tuple[list[str], list[str]]:
    """(lines, fixture file names used)."""
    files = sorted(p for d in ("cpu", "synthetic", "gpu") if (FIXTURES / d).is_dir() for p in (FIXTURES / d).rglob("*.log"))  # fmt: skip
    fixture_lines = [
        line for p in files for line in p.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    lines: list[str] = []
    size, it = 0, 1
    while size < target_mb * 1e6:
        lines.extend(fixture_lines)
        size += sum(len(x) + 1 for x in fixture_lines)
        for _ in range(HEALTHY_PER_BLOCK):
            line = ITERATION.format(m=(it // 60) % 60, s=it % 60, it=it, samples=it * 1024,
                                    ms=1480 + it % 7, loss=2.0 - it * 1e-6)  # fmt: skip
            lines.append(line)
            size += len(line) + 1
            it += 1
    return lines, [str(p.relative_to(REPO)) for p in files]


def blocks(lines: list[str]) -> list[list[str]]:
    out, block, size = [], [], 0
    for line in lines:
        block.append(line)
        size += len(line) + 1
        if size >= BLOCK_BYTES:
            out.append(block)
            block, size = [], 0
    if block:
        out.append(block)
    return out


def ours(lines: list[str], patterns) -> tuple[float, list[tuple[int, str]]]:
    from oellm_autoexp.core.classify import Classifier

    chunks = blocks(lines)
    classifier = Classifier(patterns, max_signals=len(lines))
    found: list[tuple[int, str]] = []
    t0 = time.perf_counter()
    for chunk in chunks:
        found.extend((s.line_no, s.pattern) for s in classifier.feed(chunk))
    return time.perf_counter() - t0, found


def naive(lines: list[str], patterns) -> tuple[float, list[tuple[int, str]]]:
    from oellm_autoexp.core.classify import strip_prefix  # patterns see the bare line in both

    plist = list(patterns.patterns)
    found: list[tuple[int, str]] = []
    last_hit: dict[str, int] = {}
    t0 = time.perf_counter()
    for line_no, line in enumerate(lines, start=1):
        body = strip_prefix(line)[0]
        hits = []
        for p in plist:
            if p.compiled.search(body) is None:
                continue
            if p.after is not None:
                seen = last_hit.get(p.after)
                if seen is None or line_no - seen > p.within_lines:
                    continue
            hits.append(p)
        if not hits:
            continue
        if any(p.fallback for p in hits) and any(
            not p.fallback and p.role in ("root", "cascade") for p in hits
        ):
            hits = [p for p in hits if not p.fallback]
        for p in hits:
            last_hit[p.name] = line_no
            found.append((line_no, p.name))
    return time.perf_counter() - t0, found


def main() -> None:
    args = parse_args(__doc__)
    from oellm_autoexp.adapters.pattern_files import load_patterns

    patterns = load_patterns(["megatron_production"])
    total_mb, baseline_mb = (8.0, 2.0) if args.quick else (60.0, 6.0)
    lines, files = build_corpus(total_mb)
    size_mb = sum(len(x) + 1 for x in lines) / 1e6
    prefix, psize = [], 0.0
    for line in lines:
        if psize >= baseline_mb * 1e6:
            break
        prefix.append(line)
        psize += len(line) + 1
    psize /= 1e6

    t_all, found_all = ours(lines, patterns)
    t_pre, found_pre = ours(prefix, patterns)
    t_naive, found_naive = naive(prefix, patterns)
    same = found_pre == found_naive

    out = Report()
    out(f"classification throughput: {len(patterns.patterns)} patterns (megatron_production), "
        f"{len(files)} fixture logs + healthy Megatron iteration lines")  # fmt: skip
    out(f"corpus {size_mb:.1f} MB, {len(lines)} lines; baseline prefix {psize:.1f} MB, {len(prefix)} lines")
    out(
        f"OURS  Classifier.feed, whole corpus      {size_mb / t_all:8.1f} MB/s  ({t_all:.2f} s, {len(found_all)} signals)"
    )
    out(
        f"OURS  Classifier.feed, baseline prefix   {psize / t_pre:8.1f} MB/s  ({t_pre:.2f} s, {len(found_pre)} signals)"
    )
    out(
        f"BASE  every regex on every line, prefix  {psize / t_naive:8.1f} MB/s  ({t_naive:.2f} s, {len(found_naive)} signals)"
    )
    out(f"speed-up on the same bytes: x{t_naive / t_pre:.1f}")
    out(f"sanity: same (line, pattern) pairs as the baseline: {same}")
    if not same:
        only_ours = sorted(set(found_pre) - set(found_naive))[:5]
        only_base = sorted(set(found_naive) - set(found_pre))[:5]
        out(f"  only ours (first 5): {only_ours}")
        out(f"  only baseline (first 5): {only_base}")
    save_result(
        "classify_throughput", args,
        {"patterns": len(patterns.patterns), "fixtures": files, "corpus_mb": round(size_mb, 2),
         "corpus_lines": len(lines), "baseline_prefix_mb": round(psize, 2),
         "ours_mb_s": round(size_mb / t_all, 2), "ours_prefix_mb_s": round(psize / t_pre, 2),
         "baseline_prefix_mb_s": round(psize / t_naive, 2), "signals_whole": len(found_all),
         "signals_prefix_ours": len(found_pre), "signals_prefix_baseline": len(found_naive),
         "same_signals": same},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

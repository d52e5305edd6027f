"""Log classification throughput (MB/s): ours beside the upstream project's scanner, same bytes, same run.

Two corpora of ~50 MB (quick: ~8 MB), built in memory, handed over in 4 MB text chunks
(what `Monitor._prime` reads, and the upstream monitor's unit of work):

  healthy  a healthy Megatron run: the fixture oom_pg30.log's start-up lines, stamped
           iteration lines (Megatron's own format, ~310 bytes, as in the issue's 161,000-line
           log), a checkpoint save every 2,000 iterations, then the fixture's failing tail.
  dense    every fixture log under tests/fixtures/logs/ (cpu, synthetic, gpu, gpu_monitor)
           repeated, each copy followed by 5,000 healthy iteration lines: ~10x more error
           lines than any real log, the worst case for a line-by-line matcher.

Rows, each timed on the same chunks in every round (rounds interleave the rows):

  UPSTREAM   the upstream project's scanner, written out below (UPSTREAM_REGEXES, upstream_scan).
  LINE LOOP  our previous path: Classifier(fast=False), every keyword line matched in Python.
  OURS       Classifier() with the `fast` extra's engine (ahocorasick_rs), as the monitor runs it.
  OURS re    the same without the extra (core/classify/matcher.py's pure-Python engine).

Sanity (the differential test on 2 x 50 MB): OURS and OURS re must give every non-progress
signal the line loop gives (line number, pattern, groups, rank), the same last progress line
and last iteration; their progress signals must be a subset of the line loop's.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import Report, parse_args, save_result, verdict

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "logs"
CHUNK_BYTES = 4 << 20
GOAL_RATIO = 5.0
ITERATION = (
    " [2026-11-22 04:{m:02d}:{s:02d}] iteration {it:>8}/  500000 | consumed samples: {samples:>12} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 412.7 | learning rate: "
    "2.999812E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.412 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |"
)

# --------------------------------------------------------------------------- the upstream scanner
# Facts about github:OpenEuroLLM/oellm-autoexp (written out here; no code copied):
# - the 15 `log_events` regexes of its config/monitoring/megatron_production.yaml (file last present
#   at commit 8a4df35014bf59d1be5194df37816b7bbf771484, removed by the next one, 0410903);
# - its monitor (oellm_autoexp/monitor/loop.py `_process_log_events`) reads the log's new text since
#   a cursor and, for every event, searches it with the regex compiled with re.MULTILINE
#   (monitor/actions.py `LogEvent._iter_matches`); `match_once` (the default) keeps the first match.
# As the issue measured it: new text taken in 4 MB chunks, each regex searched once per chunk.
# `search` (first match) is less work than upstream's `list(finditer(...))[:1]`, so the baseline
# here is, if anything, faster than the real one.
UPSTREAM_REGEXES = (
    r"validation loss at iteration \d+ on test set \| lm loss value: (?P<loss>[\d.E+\-]+)",
    r"successfully saved checkpoint from iteration\s+(?P<iteration>\d+) to (?P<path>\S+)",
    r"\[[\d\-\s:]+\] iteration\s+(?P<current>\d+)/\s*(?P<total>\d+) \|.*lm loss: (?P<loss>[\d.E+\-]+)",
    r"(?:CUDA out of memory|OutOfMemoryError).*Tried to allocate (?P<size>[\d.]+\s*[KMGT]iB)",
    r"(?:Cannot allocate memory|(?<!OutOf)MemoryError).*?(?P<message>.{0,200})",
    r"NCCL ERROR.*?(?P<message>.+)",
    r"NCCL.*timeout.*(?P<details>.+)",
    r"\[c10d\].*timeout.*(?P<details>.+)",
    r"(?:socket|connection|comm).*(?:error|failed|abort).*?(?P<message>.{0,200})",
    r"loss.*(?:NaN|nan)",
    r"(?:NaN|nan).*(?:gradient|grad)",
    r"(?:CUDA.*(?:hang|stuck|frozen)|device-side assert).*?(?P<message>.{0,200})",
    r"(?:deadlock|Deadlock|DEADLOCK).*?(?P<message>.{0,200})",
    r"torch\.(?P<error_class>\w+Error): (?P<message>.{0,200})",
    r"(?P<exception>(?:Runtime|Value|Type|Attribute|Key|Index)Error): (?P<message>.{0,200})",
)


def upstream_scan(chunks: list[str]) -> int:
    """Every upstream regex over every chunk, first match each; returns how many matched."""
    compiled = [re.compile(r, re.MULTILINE) for r in UPSTREAM_REGEXES]
    return sum(1 for chunk in chunks for regex in compiled if regex.search(chunk) is not None)


# --------------------------------------------------------------------------- corpora


def _iteration(it: int) -> str:
    return ITERATION.format(m=(it // 60) % 60, s=it % 60, it=it, samples=it * 1024, ms=1480 + it % 7,
                            loss=2.0 - it * 1e-6)  # fmt: skip


def healthy_corpus(target_mb: float) -> str:
    fixture = (FIXTURES / "gpu_monitor" / "oom_pg30.log").read_text(encoding="utf-8", errors="replace")
    lines = fixture.splitlines()
    first = next(i for i, line in enumerate(lines) if " iteration " in line)
    last = max(i for i, line in enumerate(lines) if " iteration " in line)
    out, size, it = list(lines[:first]), 0, 1
    while size < target_mb * 1e6:
        line = _iteration(it)
        out.append(line)
        size += len(line) + 1
        if it % 2000 == 0:
            out.append(f"saving checkpoint at iteration {it:>7} to /ckpt/run in torch_dist format")
            out.append(
                f"  successfully saved checkpoint from iteration {it:>7} to /ckpt/run [ t 1/1, p 1/1 ]"
            )
        it += 1
    out += lines[last + 1 :]
    return "\n".join(out) + "\n"


def dense_corpus(target_mb: float) -> tuple[str, list[str]]:
    files = sorted(FIXTURES.rglob("*.log"))
    fixture = "\n".join(p.read_text(encoding="utf-8", errors="replace").rstrip("\n") for p in files)
    parts, size, it = [], 0, 1
    while size < target_mb * 1e6:
        healthy = "\n".join(_iteration(i) for i in range(it, it + 5000))
        it += 5000
        parts += [fixture, healthy]
        size += len(fixture) + len(healthy) + 2
    return "\n".join(parts) + "\n", [str(p.relative_to(REPO)) for p in files]


def chunks_of(text: str) -> list[str]:
    data = text.encode("utf-8")
    return [
        data[i : i + CHUNK_BYTES].decode("utf-8", errors="replace") for i in range(0, len(data), CHUNK_BYTES)
    ]


# --------------------------------------------------------------------------- our rows


def classify(chunks: list[str], patterns: Any, *, fast: bool, engine: str) -> dict[str, Any]:
    from oellm_autoexp.core.classify import matcher
    from oellm_autoexp.core.classify.classifier import Classifier

    matcher.set_engine(engine)
    classifier = Classifier(patterns, max_signals=10**9, fast=fast)
    progress: list[tuple[int, str]] = []
    t0 = time.perf_counter()
    for chunk in chunks:
        progress += [(s.line_no, s.pattern) for s in classifier.feed_text(chunk) if s.role == "progress"]
    classifier.flush()
    elapsed = time.perf_counter() - t0
    last = classifier.last_progress
    return {
        "s": elapsed,
        "signals": [(s.line_no, s.pattern, tuple(s.groups.items()), s.rank) for s in classifier.signals],
        "last": None if last is None else (last.line_no, last.pattern),
        "last_iteration": classifier.last_iteration,
        "progress": progress,
    }


def same_as_reference(ours: dict[str, Any], ref: dict[str, Any]) -> bool:
    return (ours["signals"] == ref["signals"] and ours["last"] == ref["last"]
            and ours["last_iteration"] == ref["last_iteration"]
            and set(ours["progress"]) <= set(ref["progress"]))  # fmt: skip


# --------------------------------------------------------------------------- engines


def engines(chunk: str, patterns: Any) -> dict[str, dict[str, float]]:
    """Finding the rare keywords of one 4 MB chunk of the healthy log, per candidate engine (best of 3).

    The words are those the matcher scans for once `iteration`/`nan` are known frequent.
    """
    from oellm_autoexp.core.classify import matcher
    from oellm_autoexp.core.classify.classifier import Classifier

    classifier = Classifier(patterns)
    classifier.feed_text(chunk)
    finder = classifier._finder  # the plan it settled on: which words it scans for
    assert finder is not None
    words = list(finder._prepared.plan(finder.frequent, True).words[0])
    data = chunk.encode()
    candidates: dict[str, Any] = {}
    import ahocorasick_rs as rs

    dfa = rs.BytesAhoCorasick([w.encode() for w in words], implementation=rs.Implementation.DFA)
    nfa = rs.BytesAhoCorasick([w.encode() for w in words])
    candidates["ahocorasick_rs DFA, bytes (chosen)"] = lambda: dfa.find_matches_as_indexes(
        data, overlapping=True
    )
    candidates["ahocorasick_rs default, bytes"] = lambda: nfa.find_matches_as_indexes(data, overlapping=True)
    try:
        import ahocorasick

        automaton = ahocorasick.Automaton()
        for i, w in enumerate(words):
            automaton.add_word(w, i)
        automaton.make_automaton()
        candidates["pyahocorasick, str"] = lambda: list(automaton.iter(chunk))
    except ImportError:
        pass
    alternation = re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))))
    candidates["re alternation, str"] = lambda: alternation.findall(chunk)
    candidates["str.find per word (the fallback)"] = lambda: matcher._FindScanner(words, False).find(chunk)
    found: dict[str, dict[str, float]] = {}
    for name, scan in candidates.items():
        best = min(_timed(scan) for _ in range(3))
        found[name] = {"mb_s": round(len(data) / 1e6 / best, 1)}
    return found


def _timed(scan: Any) -> float:
    t0 = time.perf_counter()
    scan()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- the run


def spread(values: list[float]) -> dict[str, Any]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
            "max": round(max(values), 2), "runs": [round(v, 2) for v in values]}  # fmt: skip


def measure(name: str, text: str, patterns: Any, rounds: int, out: Report) -> dict[str, Any]:
    chunks = chunks_of(text)
    mb = len(text.encode("utf-8")) / 1e6
    timings: dict[str, list[float]] = {"upstream": [], "line_loop": [], "ours": [], "ours_re": []}
    results: dict[str, Any] = {}
    upstream_hits = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        upstream_hits = upstream_scan(chunks)
        timings["upstream"].append(time.perf_counter() - t0)
        for row, fast, engine in (("line_loop", False, "python"), ("ours", True, "ahocorasick_rs"),
                                  ("ours_re", True, "python")):  # fmt: skip
            results[row] = classify(chunks, patterns, fast=fast, engine=engine)
            timings[row].append(results[row]["s"])
    ref = results["line_loop"]
    same = {row: same_as_reference(results[row], ref) for row in ("ours", "ours_re")}
    ratios = [u / o for u, o in zip(timings["upstream"], timings["ours"], strict=True)]
    rows = {row: spread([mb / t for t in ts]) for row, ts in timings.items()}
    out(f"{name}: {mb:.1f} MB, {text.count(chr(10))} lines, {len(chunks)} chunks of 4 MB, {rounds} rounds")
    for row, label in (("upstream", "UPSTREAM  15 regexes x 4 MB chunks"), ("line_loop", "LINE LOOP Classifier(fast=False)"),
                       ("ours", "OURS      Classifier(), ahocorasick_rs"), ("ours_re", "OURS re   Classifier(), no extra")):  # fmt: skip
        r = rows[row]
        out(f"  {label:<42} MB/s min {r['min']:7.1f}  median {r['median']:7.1f}  max {r['max']:7.1f}")
    out(f"  OURS / UPSTREAM per round: min x{min(ratios):.1f}, median x{statistics.median(ratios):.1f}, "
        f"max x{max(ratios):.1f}")  # fmt: skip
    out(f"  sanity vs the line loop: ours {same['ours']}, ours re {same['ours_re']}; "
        f"{len(ref['signals'])} non-progress signals, last iteration {ref['last_iteration']}; progress signals "
        f"line loop {len(ref['progress'])}, ours {len(results['ours']['progress'])}")  # fmt: skip
    return {"mb": round(mb, 2), "lines": text.count("\n"), "chunks": len(chunks), "rounds": rounds,
            "mb_s": rows, "ratio_ours_upstream": spread(ratios), "same_as_line_loop": same,
            "signals": len(ref["signals"]), "last_iteration": ref["last_iteration"],
            "progress_signals": {"line_loop": len(ref["progress"]), "ours": len(results["ours"]["progress"])},
            "upstream_chunk_matches": upstream_hits}  # fmt: skip


def main() -> None:
    args = parse_args(__doc__)
    from oellm_autoexp.adapters.logs.pattern_files import load_patterns
    from oellm_autoexp.core.classify import matcher

    if matcher.ahocorasick_rs is None:
        sys.exit("the OURS row needs the `fast` extra: pip install 'oellm-autoexp[fast]'")
    patterns = load_patterns(["megatron_production"])
    target_mb, rounds = (8.0, 2) if args.quick else (50.0, 5)
    out = Report()
    load_before = os.getloadavg()
    out(f"classification throughput: {len(patterns.patterns)} patterns (megatron_production) vs upstream's 15; "
        f"load average before {load_before[0]:.2f} (1 min)")  # fmt: skip
    healthy_text = healthy_corpus(target_mb)
    healthy = measure("healthy", healthy_text, patterns, rounds, out)
    engine_rows = engines(chunks_of(healthy_text)[1], patterns)
    for name, row in engine_rows.items():
        out(f"  engine, rare keywords of one 4 MB chunk: {name:<38} {row['mb_s']:8.1f} MB/s")
    dense_text, files = dense_corpus(target_mb)
    dense = measure("dense", dense_text, patterns, max(2, rounds - 2), out)
    load_after = os.getloadavg()
    out(f"load average after {load_after[0]:.2f} (1 min)")
    met = healthy["ratio_ours_upstream"]["median"] >= GOAL_RATIO and all(
        all(c["same_as_line_loop"].values()) for c in (healthy, dense)
    )
    out(verdict(f">= {GOAL_RATIO:g}x upstream on the healthy log (median of rounds), same signals", met))

    save_result(
        "classify_throughput", args,
        {"goal": f">= {GOAL_RATIO:g}x upstream, healthy corpus, median of paired rounds", "goal_met": met,
         "patterns": len(patterns.patterns), "upstream_regexes": len(UPSTREAM_REGEXES),
         "engine": f"ahocorasick_rs {importlib.metadata.version('ahocorasick-rs')}",
         "load_avg_1min": [round(load_before[0], 2), round(load_after[0], 2)],
         "healthy": healthy, "dense": dense, "engines": engine_rows, "dense_fixtures": files},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

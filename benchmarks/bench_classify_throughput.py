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

  UPSTREAM HEAD        the upstream project's scan as its HEAD does it (written out below: every
                       event with an action, finditer over each poll's new text), its 3 events.
  UPSTREAM production  the same scan with its production branch's 21 events (incl. the slow
                       `.*validation loss.*on test set.*`).
  LINE LOOP  our previous path: Classifier(fast=False), every keyword line matched in Python.
  OURS       Classifier() with ahocorasick_rs (a dependency), as the monitor runs it.
  OURS re    the same with the str.find fallback (core/classify/matcher.py's pure-Python engine).

Whole process: `autoexp classify LOG` (a fresh interpreter, as the console script runs it) beside
a fresh interpreter that reads the same file as one poll's new text and scans it upstream's way;
this is what a user feels, start-up included. Every ratio is printed for both corpora.

Sanity (the differential test on 2 x 50 MB): OURS and OURS re must give every non-progress
signal the line loop gives (line number, pattern, groups, rank), the same last progress line
and last iteration; their progress signals must be a subset of the line loop's.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Report, parse_args, save_result, verdict

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "logs"
CHUNK_BYTES = 4 << 20
GOAL_RATIO = 3.0  # issue 28: the README's install, whole process, >= 3x upstream on the 50 MB log
ENTRY = "import sys; from oellm_autoexp.cli.main import main; sys.exit(main())"  # the console script
ITERATION = (
    " [2026-11-22 04:{m:02d}:{s:02d}] iteration {it:>8}/  500000 | consumed samples: {samples:>12} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 412.7 | learning rate: "
    "2.999812E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.412 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |"
)

# --------------------------------------------------------------------------- the upstream scanner
# Facts about github:OpenEuroLLM/oellm-autoexp (written out here; no code copied), read on its HEAD
# (branch main, c6d0cc0, 2026-08-13) and its production branch (prod/oellm_32b_dense, 0bf06da,
# 2026-08-21, whose production experiments use config/job/auto_restart_ckptreset.yaml):
# - the monitor (oellm_autoexp/monitor/loop.py `_process_log_events`) reads ALL new text of the log
#   since its cursor at every poll, then for every `log_events` entry that carries an action (and is
#   not an inactivity event) calls `LogEvent.check_triggers(new_text)`;
# - `check_triggers` (monitor/actions.py) compiles the pattern with re.MULTILINE (a substring
#   pattern through re.escape), takes `list(pattern.finditer(text))`, builds a metadata dict for
#   EVERY match (`match`, `line`, `extract_groups`) and then keeps the first (`match_once`, default).
# The events below are those of upstream HEAD's config/job/auto_restart.yaml (3 with an action on
# text) and of the production branch's auto_restart_ckptreset.yaml (21), in their order:
# (pattern_type, pattern, extract_groups).
UPSTREAM_HEAD_EVENTS: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("substring", "[after training is done]", {}),
    ("regex", ".*validation loss.*on test set.*", {}),
    ("substring", "Exited with exit code 1", {}),
)
UPSTREAM_PROD_EVENTS: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("regex", r"No such file or directory: '[^']*/iter_(\d+)/__\d+_\d+\.distcp'", {"iteration": 1}),
    ("regex", r"No such file or directory: '[^']*/iter_(\d+)/__\d+_\d+\.distcp'", {}),
    (
        "regex",
        r"Missing key in checkpoint state_dict: rerun_state_machine_state/shard_\d+_(\d+)",
        {"ckpt_world": 1},
    ),
    ("substring", "[after training is done]", {}),
    ("regex", ".*validation loss.*on test set.*", {}),
    ("substring", "unrecognized arguments", {}),
    ("regex", "RankMonitorClientError|FT_RANK_MONITOR_IPC_SOCKET env variable should be set", {}),
    ("regex", "Disk quota exceeded|Errno 122", {}),
    ("substring", "Saved FP8 metadata does not match", {}),
    ("regex", "mmap length is greater than file size|ValueError: cannot reshape array", {}),
    ("substring", "Invalid infrastructure rank", {}),
    ("regex", r"torch\.cuda\.OutOfMemoryError|CUDA out of memory\. Tried to allocate", {}),
    (
        "regex",
        "Failed to CUDA calloc|AcceleratorError: CUDA error: out of memory|cudaErrorMemoryAllocation",
        {},
    ),
    ("regex", "RendezvousConnectionError|DistNetworkError", {}),
    ("regex", r"userbuffers\.cu.*expecting [0-9]+ got [0-9]+", {}),
    ("regex", "Watchdog caught collective operation timeout|unhandled cuda error|NCCL error", {}),
    ("regex", "illegal memory access|cudaErrorIllegalAddress", {}),
    ("substring", "terminate called after throwing an instance of", {}),
    ("regex", "DUE TO NODE FAILURE|Node failure on", {}),
    ("substring", "ChildFailedError", {}),
    ("substring", "Exited with exit code 1", {}),
)
UPSTREAM = {"head": UPSTREAM_HEAD_EVENTS, "prod": UPSTREAM_PROD_EVENTS}
UPSTREAM_LABELS = {
    "head": "upstream HEAD: all new text per poll, finditer, its 3 events with an action",
    "prod": "upstream production branch: the same scan, its 21 events with an action",
}


def upstream_poll(new_text: str, events: tuple[tuple[str, str, dict[str, int]], ...]) -> int:
    """One upstream poll over `new_text`: every event's triggers (first kept); returns how many fired."""
    fired = 0
    for pattern_type, pattern, groups in events:
        compiled = re.compile(pattern if pattern_type == "regex" else re.escape(pattern), flags=re.MULTILINE)
        triggers = []
        for match in list(compiled.finditer(new_text)):
            metadata: dict[str, Any] = {
                "match": match.group(0),
                "line": match.string[match.start() : match.end()],
            }
            for key, group in groups.items():
                metadata[key] = match.group(group)
            triggers.append(metadata)
        fired += len(triggers[:1])
    return fired


def upstream_scan(chunks: list[str], which: str) -> int:
    """Each chunk as one poll's new text; returns how many events fired over all polls."""
    return sum(upstream_poll(chunk, UPSTREAM[which]) for chunk in chunks)


def upstream_process(which: str, path: str) -> None:
    """A whole upstream-style process: read the log's new text (all of it: a first poll), scan it."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        new_text = handle.read()
    print(upstream_poll(new_text, UPSTREAM[which]))


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

    encoded = [w.encode() for w in words]
    built: dict[str, float] = {}
    automata = {}
    for name, implementation in (
        ("ahocorasick_rs contiguous NFA, bytes (chosen until 8 MB scanned)", rs.Implementation.ContiguousNFA),
        ("ahocorasick_rs DFA, bytes (chosen after)", rs.Implementation.DFA),
        ("ahocorasick_rs default, bytes", None),
    ):
        built[name] = min(_timed(lambda i=implementation: rs.BytesAhoCorasick(encoded, implementation=i))
                          for _ in range(3))  # fmt: skip
        automata[name] = rs.BytesAhoCorasick(encoded, implementation=implementation)
        candidates[name] = lambda a=automata[name]: a.find_matches_as_indexes(data, overlapping=True)
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
        if name in built:
            found[name]["build_ms"] = round(built[name] * 1000, 1)
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
    timings: dict[str, list[float]] = {row: [] for row in ("head", "prod", "line_loop", "ours", "ours_re")}
    results: dict[str, Any] = {}
    fired: dict[str, int] = {}
    for _ in range(rounds):
        for which in UPSTREAM:
            t0 = time.perf_counter()
            fired[which] = upstream_scan(chunks, which)
            timings[which].append(time.perf_counter() - t0)
        for row, fast, engine in (("line_loop", False, "python"), ("ours", True, "ahocorasick_rs"),
                                  ("ours_re", True, "python")):  # fmt: skip
            results[row] = classify(chunks, patterns, fast=fast, engine=engine)
            timings[row].append(results[row]["s"])
    ref = results["line_loop"]
    same = {row: same_as_reference(results[row], ref) for row in ("ours", "ours_re")}
    ratios = {
        f"{ours}_over_{which}": spread([u / o for u, o in zip(timings[which], timings[ours], strict=True)])
        for ours in ("ours", "ours_re") for which in UPSTREAM
    }  # fmt: skip
    rows = {row: spread([mb / t for t in ts]) for row, ts in timings.items()}
    out(f"{name}: {mb:.1f} MB, {text.count(chr(10))} lines, {len(chunks)} chunks of 4 MB (one poll's new "
        f"text each), {rounds} rounds")  # fmt: skip
    labels = {**UPSTREAM_LABELS, "line_loop": "LINE LOOP Classifier(fast=False)",
              "ours": "OURS Classifier(), ahocorasick_rs", "ours_re": "OURS Classifier(), str.find fallback"}  # fmt: skip
    for row, label in labels.items():
        r = rows[row]
        out(f"  {label:<80} MB/s min {r['min']:7.1f}  median {r['median']:7.1f}  max {r['max']:7.1f}")
    for key, r in ratios.items():
        out(f"  in-process {key.replace('_over_', ' / upstream ')}: per round min x{r['min']:.1f}, "
            f"median x{r['median']:.1f}, max x{r['max']:.1f}")  # fmt: skip
    out(f"  sanity vs the line loop: ours {same['ours']}, ours re {same['ours_re']}; "
        f"{len(ref['signals'])} non-progress signals, last iteration {ref['last_iteration']}; progress signals "
        f"line loop {len(ref['progress'])}, ours {len(results['ours']['progress'])}; upstream events fired "
        f"HEAD {fired['head']}, production {fired['prod']}")  # fmt: skip
    return {"mb": round(mb, 2), "lines": text.count("\n"), "chunks": len(chunks), "rounds": rounds,
            "mb_s": rows, "ratios": ratios, "same_as_line_loop": same,
            "signals": len(ref["signals"]), "last_iteration": ref["last_iteration"],
            "progress_signals": {"line_loop": len(ref["progress"]), "ours": len(results["ours"]["progress"])},
            "upstream_fired": fired}  # fmt: skip


def whole_process(name: str, text: str, rounds: int, out: Report) -> dict[str, Any]:
    """`autoexp classify LOG` as a user runs it beside an upstream-style process on the same file.

    Each is a fresh interpreter: start-up, imports, reading the file and the scan, as the
    issue's user measured it. Rounds alternate the three; medians and per-round ratios.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="autoexp-bench-classify-") as tmp:
        log = Path(tmp) / f"{name}.log"
        log.write_text(text, encoding="utf-8")
        argvs = {
            "ours": [sys.executable, "-c", ENTRY, "classify", str(log)],
            **{which: [sys.executable, str(Path(__file__).resolve()), "--upstream-process", which, str(log)]
               for which in UPSTREAM},
        }  # fmt: skip
        times: dict[str, list[float]] = {row: [] for row in argvs}
        for _ in range(rounds):
            for row, argv in argvs.items():
                t0 = time.perf_counter()
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                times[row].append(time.perf_counter() - t0)
                if done.returncode != 0:
                    sys.exit(f"{argv} exited {done.returncode}: {done.stderr[-500:]}")
    ratios = {f"ours_over_{which}": spread([u / o for u, o in zip(times[which], times["ours"], strict=True)])
              for which in UPSTREAM}  # fmt: skip
    seconds = {row: spread(ts) for row, ts in times.items()}
    for row, label in (("ours", "OURS `autoexp classify LOG`"), *UPSTREAM_LABELS.items()):
        r = seconds[row]
        out(
            f"  whole process, {label:<80} s min {r['min']:6.2f}  median {r['median']:6.2f}  max {r['max']:6.2f}"
        )
    for key, r in ratios.items():
        out(f"  whole process {key.replace('_over_', ' / upstream ')}: per round min x{r['min']:.1f}, "
            f"median x{r['median']:.1f}, max x{r['max']:.1f}")  # fmt: skip
    return {"rounds": rounds, "seconds": seconds, "ratios": ratios}


def _whole_process_flag(parser: Any) -> None:
    parser.add_argument(
        "--whole-process-only", action="store_true",
        help="only `autoexp classify LOG` beside the upstream processes on the healthy 50 MB log (run it "
             "with a venv's python to check an install: `VENV/bin/python benchmarks/bench_classify_throughput.py "
             "--whole-process-only`); saves results/classify_install-<date>.*",
    )  # fmt: skip


def _whole_process_only(args: Any) -> None:
    import ahocorasick_rs  # noqa: F401 - what the install under test must bring

    out = Report()
    out(f"whole process only, interpreter {sys.executable}; ahocorasick-rs "
        f"{importlib.metadata.version('ahocorasick-rs')}; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    result = whole_process(
        "healthy", healthy_corpus(8.0 if args.quick else 50.0), 2 if args.quick else 3, out
    )
    ratios = result["ratios"]
    met = all(r["median"] >= GOAL_RATIO for r in ratios.values())
    out(verdict(f">= {GOAL_RATIO:g}x both upstream rows as a whole process", met))
    save_result("classify_install", args, {"interpreter": sys.executable, "goal_met": met,
                                           "ahocorasick_rs": importlib.metadata.version("ahocorasick-rs"),
                                           "healthy": result}, out.text)  # fmt: skip


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--upstream-process":
        upstream_process(sys.argv[2], sys.argv[3])
        return
    args = parse_args(__doc__, _whole_process_flag)
    if args.whole_process_only:
        _whole_process_only(args)
        return
    from oellm_autoexp.adapters.logs.pattern_files import load_patterns
    from oellm_autoexp.core.classify import matcher

    if matcher.ahocorasick_rs is None:
        sys.exit("the OURS row needs ahocorasick-rs, a dependency: pip install -e .")
    patterns = load_patterns(["megatron_production"])
    # Upstream's production scan runs at ~1-3 MB/s here: 3 rounds of 50 MB already take minutes.
    target_mb, rounds = (8.0, 2) if args.quick else (50.0, 3)
    out = Report()
    load_before = os.getloadavg()
    out(f"classification throughput: {len(patterns.patterns)} patterns (megatron_production) vs upstream's "
        f"{len(UPSTREAM_HEAD_EVENTS)} (HEAD) and {len(UPSTREAM_PROD_EVENTS)} (production branch) events; "
        f"load average before {load_before[0]:.2f} (1 min)")  # fmt: skip
    healthy_text = healthy_corpus(target_mb)
    healthy = measure("healthy", healthy_text, patterns, rounds, out)
    healthy["whole_process"] = whole_process("healthy", healthy_text, rounds, out)
    engine_rows = engines(chunks_of(healthy_text)[1], patterns)
    for name, row in engine_rows.items():
        out(f"  engine, rare keywords of one 4 MB chunk: {name:<38} {row['mb_s']:8.1f} MB/s")
    del healthy_text
    dense_text, files = dense_corpus(target_mb)
    dense = measure("dense", dense_text, patterns, max(2, rounds - 2), out)
    dense["whole_process"] = whole_process("dense", dense_text, 2, out)
    load_after = os.getloadavg()
    out(f"load average after {load_after[0]:.2f} (1 min)")
    out()
    out("ratios side by side (medians of per-round ratios; > 1: ours faster)")
    out(f"  {'':<42} {'healthy':>9} {'dense':>9}")
    for key, label in (("ours_over_head", "in-process, ours / upstream HEAD"),
                       ("ours_over_prod", "in-process, ours / upstream production"),
                       ("ours_re_over_head", "in-process, str.find / upstream HEAD"),
                       ("ours_re_over_prod", "in-process, str.find / upstream production")):  # fmt: skip
        out(f"  {label:<42} x{healthy['ratios'][key]['median']:8.1f} x{dense['ratios'][key]['median']:8.1f}")
    for key, label in (("ours_over_head", "whole process, ours / upstream HEAD"),
                       ("ours_over_prod", "whole process, ours / upstream production")):  # fmt: skip
        h, d = healthy["whole_process"]["ratios"][key], dense["whole_process"]["ratios"][key]
        out(f"  {label:<42} x{h['median']:8.1f} x{d['median']:8.1f}")
    whole = healthy["whole_process"]["ratios"]
    met = all(whole[k]["median"] >= GOAL_RATIO for k in whole) and all(
        all(c["same_as_line_loop"].values()) for c in (healthy, dense)
    )
    out(
        verdict(
            f">= {GOAL_RATIO:g}x both upstream rows as a whole process on the healthy log, same signals", met
        )
    )

    save_result(
        "classify_throughput", args,
        {"goal": f">= {GOAL_RATIO:g}x upstream HEAD and production, whole process, healthy 50 MB log",
         "goal_met": met, "patterns": len(patterns.patterns),
         "upstream_events": {"head": len(UPSTREAM_HEAD_EVENTS), "prod": len(UPSTREAM_PROD_EVENTS)},
         "engine": f"ahocorasick_rs {importlib.metadata.version('ahocorasick-rs')}",
         "load_avg_1min": [round(load_before[0], 2), round(load_after[0], 2)],
         "healthy": healthy, "dense": dense, "engines": engine_rows, "dense_fixtures": files},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

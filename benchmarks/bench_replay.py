"""Replay of a 50 MB log (`autoexp replay`) vs classifying it (`autoexp classify`), same file, same run.

The log: a healthy Megatron run as a real long job writes it (one iteration line per
second with its ` [YYYY-MM-DD HH:MM:SS]` stamp, checkpoint saves every 500 iterations,
torch/glog warnings with microsecond stamps now and then), then a rank's CUDA OOM and
torchrun's summary at the very end, so the replay reads the whole file before its one
decision. Every line carries a distinct time: the worst case for a replay, which reads
lines of one time together.

OURS: `read_log` + `replay_file` (daemon/replay_runs.py): read the file, find its lines and
give every line its time (core/replay/recorded_log.py: with numpy, the `fast` extra, in bulk on the
bytes), then the virtual-clock simulation through AttemptView + judge() with the shipped
megatron_production patterns, megatron_transient and the default monitor settings (10 s
poll: 1 tick per 10 lines here).

BASELINE: `classify_file` (cli/classify.py), exactly what `autoexp classify LOG` runs:
the same Classifier over 20,000-line blocks, no clock, no tracker, no policy.

Rounds: both run ROUNDS times (QUICK_ROUNDS with --quick), alternating, on the same file;
min / median / max are printed and the goal is judged on the medians. Imports (numpy for
the line index, ahocorasick_rs for the classifier) happen before the first round.

Goal (issue 9): replay takes no longer than classifying.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _common import Report, parse_args, save_result, verdict

REPO = Path(__file__).resolve().parent.parent
OOM_LOG = REPO / "tests" / "fixtures" / "logs" / "gpu" / "oom.log"
T0 = 1_795_000_000  # 2026-11-18: any fixed start
ITERATION = (
    " [{stamp}] iteration {it:>8}/ 5000000 | consumed samples: {samples:>12} | elapsed time per iteration (ms): "
    "{ms:.1f} | throughput per GPU (TFLOP/s/GPU): 412.7 | learning rate: 2.999812E-04 | global batch size:  1024 "
    "| lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | number of "
    "nan iterations:   0 |"
)
WARNING = (
    "W{md} {hms}.{us:06d} 4242 torch/distributed/run.py:851] Setting OMP_NUM_THREADS environment variable"
)
ROUNDS, QUICK_ROUNDS = 5, 2
SAVE = ("saving checkpoint at iteration {it:>8} to /ckpt in torch_dist format",
        "  successfully saved checkpoint from iteration {it:>8} to /ckpt [ t 1/8, p 1/4 ]")  # fmt: skip


def write_log(path: Path, target_mb: float) -> int:
    """A healthy Megatron log of `target_mb`, ending in a rank's OOM; returns its line count."""
    lines, size, it = [], 0, 1
    while size < target_mb * 1e6:
        t = time.gmtime(T0 + it)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", t)
        row = [
            ITERATION.format(stamp=stamp, it=it, samples=it * 1024, ms=1480 + it % 7, loss=2.0 - it * 1e-7)
        ]
        if it % 500 == 0:
            row += [s.format(it=it) for s in SAVE]
        if it % 97 == 0:
            row.append(
                WARNING.format(md=time.strftime("%m%d", t), hms=time.strftime("%H:%M:%S", t), us=it % 10**6)
            )
        lines += row
        size += sum(len(x) + 1 for x in row)
        it += 1
    tail = OOM_LOG.read_text(encoding="utf-8").splitlines()[37:]  # the OOM, the cascade, torchrun's summary
    lines += tail
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    args = parse_args(__doc__)
    from oellm_autoexp.adapters.logs.pattern_files import load_patterns
    from oellm_autoexp.cli.classify import classify_file
    from oellm_autoexp.core.classify import matcher
    from oellm_autoexp.core.replay import recorded_log as log_lines
    from oellm_autoexp.daemon.replay_runs import read_log, replay_file, setup_from_config

    target_mb = 8.0 if args.quick else 50.0
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    bulk = log_lines._numpy()  # imported now, not inside the first timed read
    engine = f"numpy {bulk.__version__}" if bulk is not None else "line by line (no numpy)"
    out = Report()
    times: dict[str, list[float]] = {"classify": [], "read": [], "simulation": [], "replay": []}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "megatron.log"
        n_lines = write_log(log, target_mb)
        size_mb = log.stat().st_size / 1e6
        setup = setup_from_config(None, [], [])
        patterns = load_patterns(["megatron_production"])
        for _ in range(rounds):
            t0 = time.perf_counter()
            report = classify_file(log, patterns)
            times["classify"].append(time.perf_counter() - t0)

            t0 = time.perf_counter()
            read = read_log(log)
            t_read = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = replay_file(read, setup)
            t_sim = time.perf_counter() - t0
            times["read"].append(t_read)
            times["simulation"].append(t_sim)
            times["replay"].append(t_read + t_sim)
    spread = {name: _spread(values) for name, values in times.items()}
    t_replay, t_classify = spread["replay"]["median"], spread["classify"]["median"]
    ratios = [r / c for r, c in zip(times["replay"], times["classify"], strict=True)]
    [decision] = result.decisions
    reason = decision.judgement.decision.reason
    met = t_replay <= t_classify
    out(f"replay vs classify: {size_mb:.1f} MB Megatron log, {n_lines} lines, {read.times.stamped} stamped, "
        f"{len({*read.times.times_s})} distinct times; {rounds} rounds, alternating (min / median / max s)")  # fmt: skip
    out(f"line index: {engine}; classifier engine: {matcher.engine_name()}")
    for label, name in (("OURS  autoexp replay (read + line times + simulation)", "replay"),
                        ("        read + line times", "read"), ("        simulation", "simulation"),
                        ("BASE  autoexp classify (classify_file)", "classify")):  # fmt: skip
        row = spread[name]
        out(f"{label:<55} {row['min']:6.2f} / {row['median']:6.2f} / {row['max']:6.2f}"
            f"   {size_mb / row['median']:6.1f} MB/s (median)")  # fmt: skip
    out(f"ratio replay / classify: {t_replay / t_classify:.2f} (medians); per round "
        f"{' '.join(f'{r:.2f}' for r in ratios)}")  # fmt: skip
    out(f"sanity: replay decided `{decision.judgement.decision.action.value}: {reason}` after reading "
        f"{result.lines_read}/{n_lines} lines; classify's root cause: {report['error_type']} (line {report['line']})")  # fmt: skip
    out(verdict("replay of a 50 MB log takes no longer than classifying it", met))
    save_result(
        "replay", args,
        {"log_mb": round(size_mb, 2), "lines": n_lines, "stamped": read.times.stamped, "rounds": rounds,
         "line_index": engine, "classifier_engine": matcher.engine_name(),
         "replay_s": t_replay, "replay_read_and_times_s": spread["read"]["median"],
         "replay_simulation_s": spread["simulation"]["median"], "classify_s": t_classify,
         "ratio": round(t_replay / t_classify, 3), "spread_s": spread,
         "ratio_per_round": [round(r, 3) for r in ratios], "decision": reason, "lines_read": result.lines_read,
         "classify_root_cause": report["error_type"], "goal_met": met},
        out.text,
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""`autoexp classify LOG...`: the root cause of a job log, and every signal in it.

`autoexp classify --unknown`: the failed attempts of every session in --state-dir whose log
gave no cause, with the lines that might say why and a pattern to add for the best of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns, monitoring_dirs
from oellm_autoexp.cli._sessions import open_store
from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.guess import REFINES, is_guess, judged_cause
from oellm_autoexp.core.classify.root_cause import evidence, log_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal
from oellm_autoexp.core.classify.unknown import pattern_entry, suggest_pattern, telling_lines
from oellm_autoexp.core.classify.wrapped import is_unwrapped
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.errors import UserError

BLOCK_LINES = 20_000  # lines classified per call: bounded memory on huge logs
TAIL_BYTES = 64 << 10  # the end of a log that --unknown reads for the telling lines


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "classify",
        help="print the root cause of job logs and every signal found",
        description=(
            "Classify job logs with the signal patterns (config/monitoring/*.yaml) and print the root "
            "cause: cascades (a peer's timeout) and teardown lines never win over a rank's own error."
        ),
    )
    parser.add_argument("logs", nargs="*", metavar="LOG", help="log file(s) to classify")
    parser.add_argument(
        "--unknown",
        action="store_true",
        help="list the failed attempts of every session (--state-dir) whose log gave no cause, "
        "with their telling lines and a pattern to add",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per file, one per line")
    parser.add_argument(
        "--patterns",
        action="append",
        metavar="NAME_OR_FILE",
        help=f"pattern set name (monitoring/<name>.yaml) or file; repeatable (default: {DEFAULT_PATTERNS})",
    )
    parser.add_argument(
        "--config-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look for monitoring/<name>.yaml here (before $AUTOEXP_CONFIG_DIR and the shipped config)",
    )
    parser.set_defaults(func=run, trailing="logs")


def run(args: argparse.Namespace) -> int:
    patterns = load_patterns(args.patterns or [DEFAULT_PATTERNS], monitoring_dirs(args.config_dir))
    if args.unknown:
        return run_unknown(args, patterns)
    if not args.logs:
        raise UserError("classify: give one or more LOG files, or --unknown")
    paths = [Path(p) for p in args.logs]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UserError(f"log file not found: {', '.join(missing)}")
    for path in paths:
        report = classify_file(path, patterns)
        print(json.dumps(report) if args.json else format_report(report))
    return 0


def _blocks(path: Path) -> Iterator[list[str]]:
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        while block := list(itertools.islice(fh, BLOCK_LINES)):
            yield block


def classify_file(path: Path, patterns: PatternSet) -> dict[str, Any]:
    """The report for one file (the `--json` object)."""
    classifier = Classifier(patterns, source=str(path))
    for block in _blocks(path):
        classifier.feed(block)
    signals = classifier.signals
    cause = log_cause(signals)
    judged = judged_cause(cause, classifier, patterns, failed=True)
    guess = judged if is_guess(judged) else None
    unwrapped = judged if is_unwrapped(judged) else None
    last = classifier.last_progress
    return {
        "file": str(path),
        "error_type": cause.error_type if cause else None,
        "subsystem": cause.subsystem if cause else None,
        "signal": cause.pattern if cause else None,
        "line": cause.line_no if cause else None,
        "rank": cause.rank if cause else None,
        "failed_rank": classifier.first_failed_rank(),
        "evidence": evidence(signals, cause),
        "signals": [_brief(s) for s in signals],
        "dropped_signals": classifier.dropped_signals,
        "progress": {
            "count": classifier.progress_count,
            "last_iteration": classifier.last_iteration,
            "last": _brief(last) if last else None,
        },
        "lines": classifier.lines_seen,
        # No pattern explains the log line by line, but two lines a terminal cut in two do, joined
        # (core/classify/wrapped.py): what the monitor reads if the attempt FAILED.
        "wrapped": None if unwrapped is None else {**_reading(unwrapped), "signal": unwrapped.pattern},
        # No pattern explains the log: what the monitor would call it if the attempt FAILED.
        "guess": None
        if guess is None
        else {
            **_reading(guess),
            "probability": float(guess.groups["probability"]),
            # the catch-all class a guess on a raised exception's own line replaces (None: no cause)
            "refines": guess.groups.get(REFINES),
        },
    }


def _reading(cause: Signal) -> dict[str, Any]:
    """What a reading beyond the line-by-line one (read whole, or guessed) names: class, line, text."""
    return {"error_type": cause.error_type, "line": cause.line_no, "text": cause.line}


def _brief(signal: Signal) -> dict[str, Any]:
    data = signal.to_dict()
    data.pop("source", None)  # the report names the file once
    return data


def format_report(report: dict[str, Any]) -> str:
    out = [f"{report['file']}:"]
    if report["error_type"] is None:
        out.append("  root cause: none found")
    else:
        rank = "" if report["rank"] is None else f", rank {report['rank']}"
        out.append(
            f"  root cause: {report['error_type']} ({report['subsystem']}, pattern {report['signal']}, "
            f"line {report['line']}{rank})"
        )
        out += [f"    | {line}" for line in report["evidence"]]
    wrapped = report.get("wrapped")
    if wrapped is not None:
        out.append(
            f"  if the attempt failed: {wrapped['error_type']} read whole from lines {wrapped['line']}-"
            f"{wrapped['line'] + 1}, one line cut in two (pattern {wrapped['signal']}):"
        )
        out.append(f"    | {wrapped['text']}")
    guess = report.get("guess")
    if guess is not None:  # no pattern explains the log, or only a launcher's "exited 1" or a catch-all
        why = (
            f"a catch-all {guess['refines']}: its class and message matched no rule"
            if guess.get("refines")
            else "no pattern matched it"
        )
        out.append(
            f"  if the attempt failed, its words read as {guess['error_type']} "
            f"(line {guess['line']}, p={guess['probability']:.2f}; {why}):"
        )
        out.append(f"    | {guess['text']}")
    if report["failed_rank"] is not None:
        out.append(f"  launcher's first failed rank: {report['failed_rank']}")
    progress = report["progress"]
    if progress["count"]:
        out.append(f"  progress: {progress['count']} lines, last iteration {progress['last_iteration']}")
    out.append(f"  signals ({len(report['signals'])}):")
    for s in report["signals"]:
        kind = "teardown" if s["teardown"] else s["role"]
        out.append(f"    {s['line_no']:>7}  {kind:<8}  {s['error_type'] or '-':<22}  {s['pattern']}")
    if report["dropped_signals"]:
        out.append(f"    ... and {report['dropped_signals']} more")
    return "\n".join(out)


def run_unknown(args: argparse.Namespace, patterns: PatternSet) -> int:
    """Print each FAILED attempt whose log names no cause: its telling lines and a suggested pattern."""
    store, _directory = open_store(args, read_only=True)
    found = 0
    try:
        for session in store.list_sessions():
            jobs = {j.id: j.name for j in store.jobs_for_session(session.id, with_plan=False)}
            for attempt in store.attempts_for_session(session.id):
                path = Path(attempt.log_path) if attempt.log_path else None
                if attempt.state is not JobState.FAILED or path is None or not path.is_file():
                    continue
                report = classify_file(path, patterns)
                if report["error_type"] is not None or report["wrapped"] is not None:
                    continue  # a cause, line by line or read whole from a wrapped line
                found += 1
                where = (
                    f"session {session.id} ({session.name}), job {jobs.get(attempt.job_id, attempt.job_id)}"
                )
                exit_code = "" if attempt.exit_code is None else f", exit code {attempt.exit_code}"
                print(f"{where}, attempt {attempt.attempt_no}: FAILED{exit_code}, no cause in {path}")
                lines = telling_lines(tail_lines(path))
                print("\n".join(f"  | {line}" for line in lines))
                suggestion = next((s for s in map(suggest_pattern, reversed(lines)) if s), None)
                if suggestion is not None:
                    print("  a pattern for its last telling line (config/monitoring/<name>.yaml, patterns:):")
                    print("  " + pattern_entry(suggestion, f"unknown_{session.id}_{attempt.id}"))
    finally:
        store.close()
    if not found:
        print("no failed attempt without a recognised cause")
    return 0


def tail_lines(path: Path) -> list[str]:
    """The last TAIL_BYTES of a log, as lines (the first, cut one dropped)."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(max(0, size - TAIL_BYTES))
        lines = fh.read().decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > TAIL_BYTES else lines

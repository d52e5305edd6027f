"""`autoexp classify LOG...`: the root cause of a job log, and every signal in it."""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns, monitoring_dirs
from oellm_autoexp.core.classify.classifier import Classifier, evidence, log_cause
from oellm_autoexp.core.classify.signals import PatternSet, Signal
from oellm_autoexp.errors import UserError

BLOCK_LINES = 20_000  # lines classified per call: bounded memory on huge logs


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "classify",
        help="print the root cause of job logs and every signal found",
        description=(
            "Classify job logs with the signal patterns (config/monitoring/*.yaml) and print the root "
            "cause: cascades (a peer's timeout) and teardown lines never win over a rank's own error."
        ),
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="log file(s) to classify")
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
    }


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

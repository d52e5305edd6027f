"""`autoexp checkpoint check|rollback DIR`: is the checkpoint a run would resume from complete?

DIR is a run's checkpoint directory (Megatron's `--save`, holding the tracker and the
`iter_*` checkpoints) or one `iter_*` checkpoint. Only metadata is read (see
adapters/checkpoints/checkpoint_files.py). Exit codes: 0 complete (or no checkpoint yet), 1 incomplete,
2 unverifiable (and 2 for bad arguments, as every command).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.checkpoints.checkpoint_files import (
    apply_rollback,
    check_checkpoint,
    check_run,
    is_single_checkpoint,
)
from oellm_autoexp.core.checkpoint.rollback import DEFAULT_MAX_ROLLBACKS, RunVerdict, rollback_line
from oellm_autoexp.core.checkpoint.verdict import CheckpointVerdict
from oellm_autoexp.errors import UserError

EXIT_CODES = {"complete": 0, "empty": 0, "incomplete": 1, "unverifiable": 2}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "checkpoint",
        help="check a run's newest checkpoint; roll back an incomplete one",
        description="Check checkpoints by their metadata only (nothing is loaded).",
    )
    commands = parser.add_subparsers(dest="checkpoint_command", metavar="ACTION")
    commands.required = True
    check = commands.add_parser(
        "check",
        help="exit 0 complete, 1 incomplete, 2 unverifiable",
        description="Check the checkpoint a resume would load (or one iter_* checkpoint).",
    )
    check.add_argument("dir", metavar="DIR", help="a run's checkpoint directory, or one iter_* checkpoint")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run_check)
    rollback = commands.add_parser(
        "rollback",
        help="move an incomplete newest checkpoint aside and point the tracker at the last complete one",
        description="Incomplete checkpoints are renamed failed_iter_*, never deleted.",
    )
    rollback.add_argument("dir", metavar="DIR", help="a run's checkpoint directory")
    rollback.add_argument(
        "--max-rollbacks",
        type=int,
        default=DEFAULT_MAX_ROLLBACKS,
        help=f"refuse once this many failed_iter_* exist (default {DEFAULT_MAX_ROLLBACKS})",
    )
    rollback.add_argument("--json", action="store_true", help="print one JSON object")
    rollback.set_defaults(func=run_rollback)


def run_check(args: argparse.Namespace) -> int:
    path = _existing(args.dir)
    if is_single_checkpoint(path):
        verdict = check_checkpoint(path)
        print(
            json.dumps({"dir": str(path), **verdict.to_dict()}) if args.json else _format_one(path, verdict)
        )
        return EXIT_CODES[verdict.status]
    run = check_run(path)
    print(json.dumps({"dir": str(path), **run.to_dict()}) if args.json else _format_run(path, run))
    return EXIT_CODES[run.status]


def run_rollback(args: argparse.Namespace) -> int:
    path = _existing(args.dir)
    if is_single_checkpoint(path):
        raise UserError(f"{path}: give the run's checkpoint directory (the one holding the tracker)")
    run = check_run(path, max_rollbacks=args.max_rollbacks)
    if run.status == "incomplete" and run.plan is not None:
        apply_rollback(path, run.plan)
    line = rollback_line(run) if run.status == "incomplete" else run.summary()
    print(json.dumps({"dir": str(path), "done": line, **run.to_dict()}) if args.json else line)
    return 0 if run.may_resume or run.plan is not None else EXIT_CODES[run.status]


def _existing(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise UserError(f"{path}: no such checkpoint directory")
    if not path.is_dir() and not is_single_checkpoint(path):
        raise UserError(
            f"{path}: not a directory (give a run's checkpoint directory or one iter_* checkpoint)"
        )
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: not readable")
    return path


def _format_one(path: Path, verdict: CheckpointVerdict) -> str:
    out = [f"{path}: {verdict.status} ({verdict.format}; {verdict.checked})"]
    return "\n".join(out + [f"  - {p}" for p in verdict.problems])


def _format_run(path: Path, run: RunVerdict) -> str:
    out = [f"{path}: {run.summary()}"]
    for name, verdict in run.judged:
        out.append(f"  {name}: {verdict.status} ({verdict.format}; {verdict.checked})")
        out += [f"    - {p}" for p in verdict.problems]
    out += [f"  note: {n}" for n in run.notes]
    if run.plan is not None:
        out.append(f"  `autoexp checkpoint rollback {path}` would: {rollback_line(run)}")
    elif run.refused:
        out.append(f"  no rollback possible: {run.refused}")
    return "\n".join(out)

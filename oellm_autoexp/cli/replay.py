"""`autoexp replay LOG...`: what the monitor would decide about recorded logs, on their own clock.

Each log is one simulated attempt (core/replay/replay.py); docs/replay.md explains the
clock, the simulated Slurm and the output. `--session S JOB` replays a past
attempt from the timing record the monitor kept.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.fs.state_dir import state_dir
from oellm_autoexp.cli import _replay_views as views
from oellm_autoexp.cli._sessions import find_job, find_session
from oellm_autoexp.core.replay.line_time import Between
from oellm_autoexp.core.replay.log_end import LogEnd, parse_end_state
from oellm_autoexp.core.replay.replay import ReplayResult, ReplaySetup, replay
from oellm_autoexp.daemon.replay_runs import (
    attempt_inputs,
    expand_logs,
    job_setup,
    open_state,
    read_log,
    replay_file,
    setup_from_config,
)
from oellm_autoexp.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay recorded logs through the monitor's classifier, hang tracker and policy",
        description=(
            "Replay job logs line by line at their recorded times (virtual clock, no sleeping) through "
            "the monitor's own steps, and show every decision and when it would have been taken. "
            "Default: the megatron_production patterns and the megatron_transient restart policy."
        ),
    )
    parser.add_argument("items", nargs="*", metavar="LOG|KEY=VALUE",
                        help="log files, directories or globs; then overrides (restart=default, "
                             "monitoring.fatal_settle_s=10); with --session: the JOB first")  # fmt: skip
    parser.add_argument("--experiment", metavar="EXP.yaml", help="take patterns, policy and settings from it")
    parser.add_argument("--json", action="store_true", help="one JSON array, one object per log")
    parser.add_argument("--end-state", metavar="STATE[:EXIT]", help="Slurm's end state (FAILED:1, TIMEOUT)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"),
                        help="two override sets side by side, e.g. restart=megatron_transient restart=default")  # fmt: skip
    parser.add_argument("--between", choices=("previous", "linear"), default="previous",
                        help="time of a line without a stamp: the last stamp's (default) or spread evenly")  # fmt: skip
    parser.add_argument("--session", metavar="S", help="replay a past job of session S (id or name)")
    parser.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                        help="a directory of config groups searched first (repeatable)")  # fmt: skip
    parser.set_defaults(func=run, trailing="items")


def _split(items: list[str]) -> tuple[list[str], list[str]]:
    """(logs, overrides): a KEY=VALUE that is not an existing path is an override."""
    logs = [i for i in items if "=" not in i or Path(i).exists()]
    return logs, [i for i in items if i not in logs]


def run(args: argparse.Namespace) -> int:
    logs, overrides = _split(args.items)
    if args.session is not None:
        return _run_session(args, logs, overrides)
    if not logs:
        raise UserError("replay: name at least one LOG (a file, a directory or a glob)")
    end = _end_state(args.end_state)
    paths = expand_logs(logs)
    if args.compare:
        return _run_compare(args, paths, overrides, end)
    setup = setup_from_config(args.experiment, overrides, args.config_dir)
    rows = [_replay_one(p, setup, end, args.between) for p in paths]
    if args.json:
        print(json.dumps([views.to_json(str(p), r, w) for p, r, w in rows], indent=1))
        return 0
    for path, result, warnings in rows:
        print(views.timeline(str(path), result, warnings))
        print()
    print(views.summary([(str(p), r) for p, r, _ in rows]))
    return 0


def _end_state(text: str | None) -> LogEnd | None:
    if text is None:
        return None
    try:
        return parse_end_state(text)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _replay_one(
    path: Path, setup: ReplaySetup, end: LogEnd | None, between: Between
) -> tuple[Path, ReplayResult, list[str]]:
    log = read_log(path, between)
    warnings = [log.times.warning] if log.times.warning else []
    return path, replay_file(log, setup, end), warnings


def _run_compare(
    args: argparse.Namespace, paths: list[Path], overrides: list[str], end: LogEnd | None
) -> int:
    label_a, label_b = args.compare
    setup_a = setup_from_config(args.experiment, [*overrides, *label_a.split()], args.config_dir)
    setup_b = setup_from_config(args.experiment, [*overrides, *label_b.split()], args.config_dir)
    rows = []
    for path in paths:
        _, a, warnings = _replay_one(path, setup_a, end, args.between)
        _, b, _ = _replay_one(path, setup_b, end, args.between)
        rows.append((path, a, b, warnings))
    if args.json:
        print(json.dumps([{"file": str(p), label_a: views.to_json(str(p), a, w), label_b: views.to_json(str(p), b, w)}
                          for p, a, b, w in rows], indent=1))  # fmt: skip
        return 0
    print(views.compare((label_a, label_b), [(str(p), a, b) for p, a, b, _ in rows]))
    return 0


def _run_session(args: argparse.Namespace, items: list[str], overrides: list[str]) -> int:
    if len(items) != 1:
        raise UserError("replay --session S JOB: name exactly one JOB (its key, name or id)")
    with open_state(state_dir(args.state_dir)) as store:
        session = find_session(store, args.session)
        job = find_job(store, session, items[0])
        setup = job_setup(job, overrides, args.config_dir)
        inputs = attempt_inputs(store, job, setup)
    if not inputs:
        raise UserError(f"job {job.name} of session {session.id} has no timing record (recorded by autoexp "
                        "versions with `autoexp replay`; older sessions have none)")  # fmt: skip
    reports = []
    for item in inputs:
        result = replay(item.batches, item.slurm, item.setup, source=item.attempt.log_path)
        reports.append(views.session_attempt(job.name, item, result))
    if args.json:
        print(json.dumps([r[1] for r in reports], indent=1))
    else:
        print("\n\n".join(r[0] for r in reports))
    return 0

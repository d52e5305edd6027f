"""`autoexp explain JOB [--session S]`: every decision about a job, with the log lines it rested on.

It only reads, through sqlite3 (adapters/store/reader.py), as `status` does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from oellm_autoexp.cli._sessions import find_job, find_session, latest_session, open_reader
from oellm_autoexp.cli._views import explain_lines

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.records import AttemptInfo, DecisionInfo


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = subparsers.add_parser("explain", help="every decision about a job, with its evidence")
    explain.add_argument("job", help="job name, key or id")
    explain.add_argument("--session", help="session id or name (default: the latest)")
    explain.set_defaults(func=explain_command)


def explain_command(args: argparse.Namespace) -> int:
    store, _ = open_reader(args)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        job = find_job(store, session, args.job)
        attempts = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
        unknown = unexplained_failures(attempts, decisions)
        print("\n".join(explain_lines(job, attempts, decisions, unknown)))
    return 0


def unexplained_failures(
    attempts: Sequence[AttemptInfo], decisions: Sequence[DecisionInfo]
) -> dict[int, list[tuple[int | None, list[str]]] | None]:
    """The FAILED attempts with no recognised failure line, with the last lines of each rank's output.

    An attempt a decision names a cause for was explained by the monitor; the others' logs are
    classified as `autoexp classify --unknown` does (the patterns are loaded only then, so an
    explained job's `explain` stays light). None: the log cannot be read.
    """
    from oellm_autoexp.core.jobs.job_state import JobState
    from oellm_autoexp.core.watch.evidence import Evidence

    explained = {d.attempt_id for d in decisions if Evidence.from_json(d.evidence).error_type}
    failed = [a for a in attempts if a.state is JobState.FAILED and a.id not in explained]
    out: dict[int, list[tuple[int | None, list[str]]] | None] = {}
    readable = []
    for attempt in failed:
        path = Path(attempt.log_path) if attempt.log_path else None
        if path is None or not path.is_file():
            out[attempt.id] = None
        else:
            readable.append((attempt.id, path))
    if readable:
        from oellm_autoexp.adapters.logs.pattern_files import DEFAULT_PATTERNS, load_patterns
        from oellm_autoexp.cli.classify import classify_file, tail_lines
        from oellm_autoexp.core.classify.unknown import rank_tails

        patterns = load_patterns([DEFAULT_PATTERNS])
        for attempt_id, path in readable:
            if classify_file(path, patterns)["error_type"] is None:
                out[attempt_id] = [(rank, list(lines)) for rank, lines in rank_tails(tail_lines(path))]
    return out

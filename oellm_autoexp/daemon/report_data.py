"""Gathering a session's records for `autoexp report`: the store, plus each attempt's log.

The store keeps attempts, decisions and non-progress signals, but not every
iteration line (only `attempts.last_iteration`), so the iteration curve is read
from the attempts' logs here, classified with the job's own patterns. Each
progress line is timed by its own stamp, moved onto the monitor's clock with the
help of when the monitor read it (the `log_reads` table, the clock of attempts and
decisions); a line without a stamp takes its read time (core/report/report.py `timed_points`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path

from oellm_autoexp.adapters.logs.pattern_files import monitoring_dirs, pattern_set_from_mapping
from oellm_autoexp.adapters.store.sqlite_store import (
    AttemptInfo,
    DecisionInfo,
    JobInfo,
    LogReadInfo,
    SessionInfo,
    SQLiteStore,
)
from oellm_autoexp.config.monitoring import split_monitoring
from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.signals import PatternSet
from oellm_autoexp.core.replay.line_time import stamp_of, year_of
from oellm_autoexp.core.report.preflight_table import AttemptPreflight, parse_preflight
from oellm_autoexp.core.report.report import (
    AttemptData,
    DecisionData,
    JobData,
    SessionData,
    timed_points,
)
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.daemon.session import plan_from_dict

MAX_LOG_BYTES = 256 * 1024 * 1024  # a log past this is read up to here only (the report stays quick)
PREFLIGHT_LOG_BYTES = 1024 * 1024  # the pre-flight's lines come first in a log: its head is enough


def session_data(store: SQLiteStore, session: SessionInfo, now_s: float) -> SessionData:
    """Everything the report shows about `session`, as plain records."""
    cache: dict[str, PatternSet] = {}  # sweep points share their monitoring section
    jobs = tuple(_job_data(store, job, cache) for job in store.jobs_for_session(session.id))
    return SessionData(session.id, session.name, now_s, jobs)


def _job_data(store: SQLiteStore, job: JobInfo, cache: dict[str, PatternSet]) -> JobData:
    patterns = _patterns(job, cache)
    attempts = store.attempts_for_job(job.id)
    numbers = {a.id: a.attempt_no for a in attempts}
    return JobData(
        name=job.name,
        status=job.status,
        status_reason=job.status_reason,
        attempts=tuple(_attempt_data(store, a, patterns) for a in attempts),
        decisions=tuple(_decision_data(d, numbers) for d in store.decisions_for_job(job.id)),
    )


def _patterns(job: JobInfo, cache: dict[str, PatternSet]) -> PatternSet:
    plan = plan_from_dict(job.plan)
    _settings, pattern_part = split_monitoring(plan.config.monitoring, f"job {job.name}")
    key = json.dumps(pattern_part, sort_keys=True, default=str)
    if key not in cache:
        cache[key] = pattern_set_from_mapping(pattern_part, f"job {job.name}: monitoring", monitoring_dirs())
    return cache[key]


def _attempt_data(store: SQLiteStore, attempt: AttemptInfo, patterns: PatternSet) -> AttemptData:
    start = attempt.started_at or attempt.submitted_at
    progress: tuple[tuple[float, int], ...] = ()
    if attempt.log_path and start is not None:
        reads = store.log_reads_for_attempt(attempt.id)
        progress = progress_points(Path(attempt.log_path), patterns, reads, fallback_year=start.year)
    return AttemptData(
        attempt_no=attempt.attempt_no,
        executor_id=attempt.executor_job_id,
        state=attempt.state.value,
        exit_code=attempt.exit_code,
        start_s=start.timestamp() if start else None,
        end_s=attempt.ended_at.timestamp() if attempt.ended_at else None,
        progress=progress,
        preflight=preflight_of(Path(attempt.log_path)) if attempt.log_path else None,
    )


def preflight_of(log: Path) -> AttemptPreflight | None:
    """The pre-flight lines at the head of an attempt's log; None without any (or no log)."""
    try:
        with log.open("rb") as handle:
            head = handle.read(PREFLIGHT_LOG_BYTES)
    except OSError:
        return None
    return parse_preflight(head.decode("utf-8", errors="replace").splitlines())


def _decision_data(d: DecisionInfo, numbers: dict[int, int]) -> DecisionData:
    return DecisionData(
        decision_id=d.id,
        attempt_no=numbers.get(d.attempt_id) if d.attempt_id is not None else None,
        action=d.action,
        reason=d.reason,
        time_s=d.decided_at.timestamp(),
        evidence=Evidence.from_json(d.evidence),
        budget_before=d.budget_before,
        budget_after=d.budget_after,
    )


def progress_points(
    log: Path, patterns: PatternSet, reads: Sequence[LogReadInfo], *, fallback_year: int
) -> tuple[tuple[float, int], ...]:
    """(time, iteration) of every progress line with an iteration in `log`; () if it cannot be read."""
    try:
        with log.open("rb") as handle:
            data = handle.read(MAX_LOG_BYTES)
    except OSError:
        return ()
    raw_lines = data.split(b"\n")
    lines = [raw.decode("utf-8", errors="replace") for raw in raw_lines]
    offsets = _line_offsets(raw_lines)
    year = year_of(lines, fallback_year)
    starts = [r.start_offset for r in reads]
    found: list[tuple[float | None, float | None, int]] = []  # (stamp, read time, iteration)
    for signal in Classifier(patterns).feed(lines):
        value = signal.groups.get("iteration")
        if signal.role != "progress" or value is None or not value.isdigit():
            continue
        index = signal.line_no - 1
        found.append((stamp_of(lines[index], year), _read_time(offsets[index], starts, reads), int(value)))
    return timed_points(found)


def _line_offsets(raw_lines: Sequence[bytes]) -> list[int]:
    offsets, at = [], 0
    for raw in raw_lines:
        offsets.append(at)
        at += len(raw) + 1
    return offsets


def _read_time(offset: int, starts: Sequence[int], reads: Sequence[LogReadInfo]) -> float | None:
    # Rows are in read order and cover the file front to back, so their starts ascend.
    i = bisect.bisect_right(starts, offset) - 1
    if i < 0 or offset >= reads[i].end_offset:
        return None
    return reads[i].read_at.timestamp()

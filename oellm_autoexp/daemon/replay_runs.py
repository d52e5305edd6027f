"""What `autoexp replay` feeds core/replay/replay.py: logs from files or from a session's timing record.

The I/O half of replay: reading log files, composing the policy, patterns and
monitor settings exactly as the monitor composes them for a job
(daemon/session.py `restart_policy`, config/monitoring.py `split_monitoring`,
daemon/watch.py `early_settings`), and reading a past attempt's timing record
and decisions from the store. The simulation itself is pure (core/replay/replay.py).
"""

from __future__ import annotations

import datetime as dt
import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.logs.pattern_files import monitoring_dirs, pattern_set_from_mapping
from oellm_autoexp.adapters.store.sqlite_store import (
    DB_FILENAME,
    AttemptInfo,
    DecisionInfo,
    JobInfo,
    LogReadInfo,
    SQLiteStore,
)
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.config.loader import compose_mapping, search_path
from oellm_autoexp.config.monitoring import poll_interval_s, split_monitoring
from oellm_autoexp.core.classify.signals import PatternSet
from oellm_autoexp.core.replay.line_time import Between, LineTimes
from oellm_autoexp.core.replay.log_end import TAIL_LINES, LogEnd, end_of
from oellm_autoexp.core.replay.recorded_log import RecordedLog, decoded_lines, split_log
from oellm_autoexp.core.replay.replay import Batch, ReplayResult, ReplaySetup, SlurmView, replay_log
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.verdict import Trigger
from oellm_autoexp.daemon.session import plan_from_dict, restart_policy
from oellm_autoexp.daemon.startup import startups
from oellm_autoexp.daemon.watch import early_settings, past_decisions, pause_schedule
from oellm_autoexp.errors import UserError

DEFAULT_GROUPS = {"monitoring": "megatron_production", "restart": "megatron_transient"}
SOURCE = "autoexp replay"
LOG_SUFFIXES = frozenset({".log", ".out", ".err"})  # what a directory argument takes
SNIFF_BYTES = 8192  # a NUL byte in the first bytes marks a binary file


# -- the policy, patterns and settings ------------------------------------------------------------


def setup_from_config(
    experiment: str | None, overrides: Sequence[str], config_dirs: Sequence[str]
) -> ReplaySetup:
    """The setup an experiment's job would run with; without one, the shipped defaults + overrides."""
    if experiment is not None:
        config = load_jobs(experiment, overrides, config_dirs)[0].config
        setup = setup_from_sections(
            config.monitoring, config.restart, config.executor, experiment, config_dirs
        )
        return replace(setup, schedule=pause_schedule(config.backend))
    defaults = [{group: option} for group, option in DEFAULT_GROUPS.items()]
    composed = compose_mapping({"defaults": defaults}, SOURCE, overrides, search_path(config_dirs))
    # `experiment` is filled in by composition itself (a bare defaults list gets a name).
    unknown = sorted(set(composed.data) - set(DEFAULT_GROUPS) - {"experiment"})
    if unknown:
        raise UserError(
            f"{SOURCE}: override of {', '.join(unknown)}: without --experiment only monitoring=... "
            "and restart=... (and their keys, monitoring.fatal_settle_s=10) can be given"
        )
    data = composed.data
    return setup_from_sections(
        data.get("monitoring", {}), data.get("restart", {}), "slurm", SOURCE, config_dirs
    )


def setup_from_sections(
    monitoring: Mapping[str, Any],
    restart: Mapping[str, Any],
    executor: str,
    source: str,
    config_dirs: Sequence[str] = (),
) -> ReplaySetup:
    """The setup from composed `monitoring:` and `restart:` sections, as `job_runtime` reads them."""
    settings, pattern_part = split_monitoring(monitoring, source)
    patterns: PatternSet = pattern_set_from_mapping(
        pattern_part, f"{source}: monitoring", monitoring_dirs(config_dirs)
    )
    return ReplaySetup(
        policy=restart_policy(dict(restart), source),
        patterns=patterns,
        early=early_settings(settings),
        hang=settings.hang,
        poll_s=poll_interval_s(settings, executor),
    )


# -- log files ------------------------------------------------------------------------------------


def expand_logs(args: Sequence[str]) -> list[Path]:
    """Files named, a directory's logs (LOG_SUFFIXES, sorted, not recursive), or a glob's matches."""
    paths: list[Path] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in LOG_SUFFIXES)
            if not found:
                raise UserError(f"{arg}: directory holds no log files (*.log, *.out, *.err)")
            paths.extend(found)
        elif any(ch in arg for ch in "*?[") and not path.exists():
            matches = sorted(Path(p) for p in glob.glob(arg) if Path(p).is_file())
            if not matches:
                raise UserError(f"{arg}: no file matches this pattern")
            paths.extend(matches)
        else:
            paths.append(path)
    return paths


@dataclass(frozen=True)
class LogFile:
    """A log read for replay: its lines and their times (core/replay/recorded_log.py)."""

    path: Path
    log: RecordedLog

    @property
    def lines(self) -> list[str]:
        return self.log.lines

    @property
    def times(self) -> LineTimes:
        return self.log.times


def read_log(path: Path, between: Between = "previous") -> LogFile:
    """A log's lines and their times; UserError for a missing, unreadable or binary file."""
    try:
        data = path.read_bytes()
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        raise UserError(f"{path}: log file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a log file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read log file: {exc.strerror}") from None
    if b"\0" in data[:SNIFF_BYTES]:
        raise UserError(f"{path}: looks like a binary file (NUL bytes), expected a text log")
    year = dt.datetime.fromtimestamp(mtime, dt.UTC).year
    return LogFile(path, split_log(data, fallback_year=year, between=between))


def replay_file(log: LogFile, setup: ReplaySetup, end: LogEnd | None = None) -> ReplayResult:
    """Replay one log file as one attempt; `end` overrides the end state the log shows."""
    if not log.log.n:
        raise UserError(f"{log.path}: log file is empty")
    times = log.times.times_s
    slurm = SlurmView(times[0], times[-1], end or end_of(log.log.tail(TAIL_LINES)))
    return replay_log(log.log, slurm, setup, source=str(log.path))


# -- a session's attempts -------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedDecision:
    """A decision the monitor really took about an attempt."""

    at_s: float  # epoch seconds
    action: str
    reason: str
    evidence: Evidence
    offset: int | None  # log bytes the monitor had read when it decided


@dataclass(frozen=True)
class AttemptInput:
    """One past attempt, as the monitor saw it."""

    attempt: AttemptInfo
    batches: list[Batch]
    slurm: SlurmView
    recorded: list[RecordedDecision]
    setup: ReplaySetup  # with the job's history before this attempt


def open_state(state_dir: Path) -> SQLiteStore:
    """The session database; UserError when there is none (a replay never creates one)."""
    if not (state_dir / DB_FILENAME).is_file():
        raise UserError(f"no session database in {state_dir} (set --state-dir or $AUTOEXP_STATE_DIR)")
    return SQLiteStore(state_dir)


def job_setup(job: JobInfo, overrides: Sequence[str], config_dirs: Sequence[str]) -> ReplaySetup:
    """The job's own monitoring and restart sections, with `restart=...`/`monitoring=...` applied."""
    config = plan_from_dict(job.plan).config
    sections = {"monitoring": dict(config.monitoring), "restart": dict(config.restart)}
    swapped = {o.partition("=")[0] for o in overrides if "." not in o.partition("=")[0]}
    own: dict[str, Any] = {k: v for k, v in sections.items() if k not in swapped}
    own["defaults"] = []
    composed = compose_mapping(own, f"job {job.name}", overrides, search_path(config_dirs))
    data = composed.data
    setup = setup_from_sections(data.get("monitoring", {}), data.get("restart", {}), config.executor,
                                f"job {job.name}", config_dirs)  # fmt: skip
    return replace(setup, schedule=pause_schedule(config.backend))  # as the monitor read it


def attempt_inputs(store: SQLiteStore, job: JobInfo, setup: ReplaySetup) -> list[AttemptInput]:
    """Every attempt of the job that has a timing record, oldest first."""
    decisions = store.decisions_for_job(job.id)
    attempts = store.attempts_for_job(job.id)
    out = []
    for attempt in attempts:
        reads = store.log_reads_for_attempt(attempt.id)
        batches = batches_from_record(Path(attempt.log_path), reads) if reads and attempt.log_path else []
        if not batches:
            continue
        earlier = {a.id for a in attempts if a.attempt_no < attempt.attempt_no}
        past = tuple(past_decisions([d for d in decisions if d.attempt_id in earlier]))
        own = [d for d in decisions if d.attempt_id == attempt.id]
        learned = tuple(startups(attempts, attempt.attempt_no))  # the start-up limit, as the monitor had it
        out.append(
            AttemptInput(
                attempt=attempt,
                batches=batches,
                slurm=_recorded_slurm(attempt, batches, [d.decided_at.timestamp() for d in own]),
                recorded=[_recorded(d, reads) for d in own],
                setup=replace(setup, past=past, attempt_no=attempt.attempt_no, startups=learned),
            )
        )
    return out


def batches_from_record(log_path: Path, reads: Sequence[LogReadInfo]) -> list[Batch]:
    """The attempt's log cut into the batches its timing record says the monitor read, at their times."""
    try:
        data = log_path.read_bytes()
    except OSError as exc:
        raise UserError(f"{log_path}: cannot read the attempt's log: {exc.strerror}") from None
    batches, consumed = [], 0
    for r in reads:
        # A monitor that died after reading a batch but before saving its offset left a row the next
        # one read again: each byte is delivered once, at the first time it was read.
        start = max(r.start_offset, consumed)
        if start >= r.end_offset:
            continue
        batches.append(
            Batch(r.read_at.timestamp(), tuple(decoded_lines(data[start : r.end_offset])), r.end_offset)
        )
        consumed = r.end_offset
    return batches


UNSEEN_END_AFTER_S = 0.001  # see _recorded_slurm


def _recorded_slurm(attempt: AttemptInfo, batches: Sequence[Batch], decided_at: Sequence[float]) -> SlurmView:
    first, last = batches[0].at_s, batches[-1].at_s
    running = attempt.started_at.timestamp() if attempt.started_at else first
    # An end the monitor never saw (it stopped first): the job was still running at the monitor's last
    # decision on it (a moment past it here, so that poll comes first). A hang judged after the log's
    # last read happened in that silence, and the replay must reach it.
    ended = (
        attempt.ended_at.timestamp() if attempt.ended_at else max([last, *decided_at]) + UNSEEN_END_AFTER_S
    )
    end = LogEnd(attempt.state, attempt.exit_code, "recorded by the monitor")
    return SlurmView(min(running, first), ended, end, polls_at_s=tuple(sorted(decided_at)))


def _recorded(decision: DecisionInfo, reads: Sequence[LogReadInfo]) -> RecordedDecision:
    at = decision.decided_at
    evidence = Evidence.from_json(decision.evidence)
    # An end is judged after the tailer read the log's last lines (read a moment after the poll
    # that saw the end, and the last reads of the attempt): the decision rests on all of them.
    ended = evidence.trigger == Trigger.END.value
    offsets = [r.end_offset for r in reads if ended or r.read_at <= at]
    return RecordedDecision(at.timestamp(), decision.action, decision.reason, evidence,
                            max(offsets) if offsets else None)  # fmt: skip

"""The session report's model: a session's attempts, decisions and progress -> what the page shows. No I/O.

`build_report()` turns plain records (read by daemon/report_data.py) into a `Report`:
per job, the attempts as bars, the decisions as markers with their evidence, the
iteration-versus-time curve, and the time lost to each restart; plus a summary.

Definitions (times are epoch seconds of the monitor's clock):

- Allocation time of an attempt: from its start (else its submission) to its end
  (else `now`): what the cluster charged for it, pending time excluded.
- Useful time: the time between consecutive progress points of one attempt whose
  later iteration was kept, i.e. not redone by a later attempt (a restart resumes
  from a checkpoint, so the iterations after it are trained again). The stretch
  before an attempt's first iteration (start-up, checkpoint load) is not useful.
- Goodput: useful time over allocation time, over every job of the session.
- Lost time of a restart: from the first fatal line of the attempt that ended (its
  read time; else the attempt's end; else the decision) to the first iteration of
  the next attempt (else its end, else `now`). It covers the settle window, the
  cancel, the queue, the start-up and the checkpoint load, less the next attempt's
  pre-flight check, which is lost time of its own (cause `preflight`).
- Pre-flight time: each attempt's check step as the batch script timed it
  (docs/preflight.md); its sum is the `preflight` row of the lost time by cause.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from oellm_autoexp.core.report.preflight_table import AttemptPreflight, PreflightRow, preflight_rows
from oellm_autoexp.core.watch.evidence import Evidence

ZONE_STEP_S = 900.0  # time zones differ by multiples of a quarter hour

# How an attempt ended, from its last observed state: the bar's colour class.
_ENDED_AS = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "NODE_FAIL": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "PREEMPTED": "timeout",
}


@dataclass(frozen=True)
class AttemptData:
    """One stored attempt, with the progress points read from its log."""

    attempt_no: int
    executor_id: str | None  # the Slurm (or local-N) job id
    state: str  # the last observed JobState value
    exit_code: int | None
    start_s: float | None  # started (else submitted) time
    end_s: float | None  # ended time; None while it runs
    progress: tuple[tuple[float, int], ...] = ()  # (time, iteration), in log order
    preflight: AttemptPreflight | None = None  # the pre-flight check's lines in its log, if it ran one


@dataclass(frozen=True)
class DecisionData:
    """One stored decision."""

    decision_id: int
    attempt_no: int | None
    action: str  # DecisionAction value
    reason: str
    time_s: float
    evidence: Evidence
    budget_before: int | None = None
    budget_after: int | None = None


@dataclass(frozen=True)
class JobData:
    name: str
    status: str  # JobStatus value
    status_reason: str
    attempts: tuple[AttemptData, ...]
    decisions: tuple[DecisionData, ...]


@dataclass(frozen=True)
class SessionData:
    session_id: int
    name: str
    now_s: float  # when the report was made: the end of attempts still running
    jobs: tuple[JobData, ...]


@dataclass(frozen=True)
class AttemptBar:
    attempt_no: int
    executor_id: str
    start_s: float
    end_s: float
    ended_as: str  # completed | failed | cancelled | timeout | running | other
    state: str
    exit_code: int | None


@dataclass(frozen=True)
class DecisionMarker:
    decision_id: int
    attempt_no: int | None
    time_s: float
    action: str
    reason: str
    cause: str | None  # error type, else outcome kind
    details: tuple[tuple[str, str], ...]  # (label, value) rows shown on click
    lines: tuple[str, ...]  # the evidence log lines, root first


@dataclass(frozen=True)
class CurvePoint:
    time_s: float
    iteration: int
    attempt_no: int


@dataclass(frozen=True)
class RestartLoss:
    attempt_no: int  # the attempt that ended; the next one resumed
    cause: str
    fatal_s: float
    resumed_s: float
    lost_s: float
    preflight_s: float = 0.0  # the next attempt's check inside this window, counted as `preflight`


PREFLIGHT_CAUSE = "preflight"  # the lost-time row of the pre-flight checks


@dataclass(frozen=True)
class JobReport:
    name: str
    status: str
    status_reason: str
    t0_s: float  # the first attempt's start: the axis begins here
    t1_s: float  # the last end (or now)
    bars: tuple[AttemptBar, ...]
    markers: tuple[DecisionMarker, ...]
    curve: tuple[CurvePoint, ...]
    losses: tuple[RestartLoss, ...]
    allocation_s: float
    useful_s: float
    preflight: tuple[PreflightRow, ...] = ()  # every node checked, per attempt
    preflight_s: float = 0.0  # the checks' time over all attempts


@dataclass(frozen=True)
class Summary:
    allocation_s: float
    useful_s: float
    goodput: float | None  # useful / allocation; None without allocation time
    restarts_by_cause: tuple[tuple[str, int], ...]  # most frequent first
    lost_by_cause: tuple[tuple[str, float], ...]  # most time first


@dataclass(frozen=True)
class Report:
    session_id: int
    session_name: str
    generated_s: float
    jobs: tuple[JobReport, ...]
    summary: Summary


def build_report(session: SessionData) -> Report:
    """The report model of one session (see the module docstring for every figure)."""
    jobs = tuple(_job_report(job, session.now_s) for job in session.jobs)
    return Report(session.session_id, session.name, session.now_s, jobs, _summary(jobs))


def _job_report(job: JobData, now_s: float) -> JobReport:
    attempts = sorted(job.attempts, key=lambda a: a.attempt_no)
    bars = tuple(b for a in attempts if (b := _bar(a, now_s)) is not None)
    markers = tuple(_marker(d) for d in sorted(job.decisions, key=lambda d: d.time_s))
    curve = tuple(
        CurvePoint(_within(t, a, now_s), it, a.attempt_no) for a in attempts for t, it in a.progress
    )
    times = [*(b.start_s for b in bars), *(m.time_s for m in markers), *(p.time_s for p in curve)]
    ends = [*(b.end_s for b in bars), *(m.time_s for m in markers), *(p.time_s for p in curve)]
    t0 = min(times, default=now_s)
    return JobReport(
        name=job.name,
        status=job.status,
        status_reason=job.status_reason,
        t0_s=t0,
        t1_s=max([*ends, t0 + 1.0]),
        bars=bars,
        markers=markers,
        curve=curve,
        losses=_losses(attempts, job.decisions, now_s),
        allocation_s=sum(b.end_s - b.start_s for b in bars),
        useful_s=useful_seconds(attempts),
        preflight=preflight_rows([(a.attempt_no, a.preflight) for a in attempts], _exclusions(job.decisions)),
        preflight_s=sum(_check_s(a) for a in attempts),
    )


def _check_s(attempt: AttemptData | None) -> float:
    check = attempt.preflight if attempt is not None else None
    if check is None or check.step_s is None:
        return 0.0
    return check.step_s


def _exclusions(decisions: Sequence[DecisionData]) -> dict[int, dict[str, str]]:
    """attempt number -> {node: why the attempt after it excluded the node} (restarts only)."""
    out: dict[int, dict[str, str]] = {}
    for d in decisions:
        if d.action != "restart" or d.attempt_no is None:
            continue
        blamed = dict(b.split(": ", 1) for b in d.evidence.blamed if ": " in b)
        out[d.attempt_no] = {
            node: f"excluded from attempt {d.attempt_no + 1}: {blamed.get(node, 'excluded before')}"
            for node in d.evidence.exclude_nodes
        }
    return out


def _within(t_s: float, attempt: AttemptData, now_s: float) -> float:
    # Log stamps are whole seconds and Slurm's start a poll late: keep each point on its bar.
    start = attempt.start_s if attempt.start_s is not None else t_s
    end = attempt.end_s if attempt.end_s is not None else now_s
    return min(max(t_s, start), max(end, start))


def _bar(attempt: AttemptData, now_s: float) -> AttemptBar | None:
    if attempt.start_s is None:
        return None  # never reached the executor: no allocation to show
    end = attempt.end_s if attempt.end_s is not None else now_s
    ended_as = "running" if attempt.end_s is None else _ENDED_AS.get(attempt.state, "other")
    return AttemptBar(attempt.attempt_no, attempt.executor_id or "-", attempt.start_s, max(end, attempt.start_s),
                      ended_as, attempt.state, attempt.exit_code)  # fmt: skip


def _marker(d: DecisionData) -> DecisionMarker:
    ev = d.evidence
    rows = [
        ("rule", ev.rule),
        ("cause", _cause(ev)),
        ("signal", f"{ev.signal} (line {ev.root_line_no})" if ev.root_line_no else ev.signal),
        ("state", ev.state),
        ("judged on", ev.trigger),
        ("observed", ev.observed),
        ("first fatal line", ev.first_fatal_line),
        (
            "decided after first fatal line",
            None if ev.after_first_fatal_s is None else f"{ev.after_first_fatal_s:.1f} s",
        ),
        ("budget", None if d.budget_before is None else f"{d.budget_before} -> {d.budget_after}"),
        ("iteration reached", None if ev.iteration is None else str(ev.iteration)),
        ("excluded nodes", ", ".join(ev.exclude_nodes) or None),
        (
            "next attempt's overrides",
            f"set {ev.override_set}: {' '.join(ev.overrides)}" if ev.override_set is not None else None,
        ),
    ]
    details = tuple((k, str(v)) for k, v in rows if v not in (None, ""))
    return DecisionMarker(
        d.decision_id, d.attempt_no, d.time_s, d.action, d.reason, _cause(ev), details, ev.lines
    )


def _cause(ev: Evidence) -> str:
    return ev.error_type or ev.kind


def useful_seconds(attempts: Sequence[AttemptData]) -> float:
    """Time spent on iterations that no later attempt trained again (module docstring)."""
    ordered = sorted(attempts, key=lambda a: a.attempt_no)
    total = 0.0
    for i, attempt in enumerate(ordered):
        kept_up_to = _resumed_below(ordered[i + 1 :])
        points = attempt.progress
        for (t_a, _), (t_b, it_b) in itertools.pairwise(points):
            if kept_up_to is None or it_b < kept_up_to:
                total += max(t_b - t_a, 0.0)
    return total


def _resumed_below(later: Sequence[AttemptData]) -> int | None:
    """The lowest first iteration of the later attempts: iterations from there on were redone."""
    firsts = [a.progress[0][1] for a in later if a.progress]
    return min(firsts, default=None)


def _losses(
    attempts: Sequence[AttemptData], decisions: Sequence[DecisionData], now_s: float
) -> tuple[RestartLoss, ...]:
    by_no = {a.attempt_no: a for a in attempts}
    out = []
    for d in decisions:
        if d.action != "restart" or d.attempt_no is None:
            continue
        ended, following = by_no.get(d.attempt_no), by_no.get(d.attempt_no + 1)
        fatal = _fatal_time(d, ended)
        resumed = _resume_time(following, now_s)
        window = max(resumed - fatal, 0.0)
        check = min(_check_s(following), window)
        out.append(RestartLoss(d.attempt_no, _cause(d.evidence), fatal, resumed, window - check, check))
    return tuple(out)


def _fatal_time(d: DecisionData, ended: AttemptData | None) -> float:
    if d.evidence.after_first_fatal_s is not None:
        return d.time_s - d.evidence.after_first_fatal_s
    if ended is not None and ended.end_s is not None:
        return min(ended.end_s, d.time_s)
    return d.time_s


def _resume_time(following: AttemptData | None, now_s: float) -> float:
    if following is None:
        return now_s
    if following.progress:
        return _within(following.progress[0][0], following, now_s)
    return following.end_s if following.end_s is not None else now_s


def _summary(jobs: Sequence[JobReport]) -> Summary:
    allocation = sum(j.allocation_s for j in jobs)
    useful = sum(j.useful_s for j in jobs)
    restarts: dict[str, int] = {}
    lost: dict[str, float] = {}
    for job in jobs:
        for loss in job.losses:
            restarts[loss.cause] = restarts.get(loss.cause, 0) + 1
            lost[loss.cause] = lost.get(loss.cause, 0.0) + loss.lost_s
        if job.preflight_s > 0:
            lost[PREFLIGHT_CAUSE] = lost.get(PREFLIGHT_CAUSE, 0.0) + job.preflight_s
    return Summary(
        allocation_s=allocation,
        useful_s=useful,
        goodput=useful / allocation if allocation > 0 else None,
        restarts_by_cause=tuple(sorted(restarts.items(), key=lambda kv: (-kv[1], kv[0]))),
        lost_by_cause=tuple(sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def timed_points(found: Sequence[tuple[float | None, float | None, int]]) -> tuple[tuple[float, int], ...]:
    """One time per progress line: its stamp moved onto the monitor's clock, else when it was read.

    Stamps are when the line was written, but on the job's wall clock, read as if it
    were UTC (core/replay/line_time.py); the monitor's read times are on the clock of attempts
    and decisions but late by up to a poll, and lines read within a second share one
    time. So stamps win, shifted by the job's zone offset: the median (read - stamp),
    snapped to a quarter hour (zones differ by multiples of it). Times never go back.
    """
    gaps = sorted(read - stamp for stamp, read, _ in found if stamp is not None and read is not None)
    shift = round(gaps[len(gaps) // 2] / ZONE_STEP_S) * ZONE_STEP_S if gaps else 0.0
    points: list[tuple[float, int]] = []
    for stamp, read, iteration in found:
        when = stamp + shift if stamp is not None else read
        if when is not None:
            points.append((max(when, points[-1][0]) if points else when, iteration))
    return tuple(points)

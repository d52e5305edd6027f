"""Pure rendering for the session commands: records in, rows and text out.

`explain` and the exclusion lines import what they need when called: `status` and `sessions`
start faster without them (cli/main.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.records import AttemptInfo, DecisionInfo, JobInfo, SignalInfo
    from oellm_autoexp.core.decide.exclusions import Exclusion


def job_row(
    job: JobInfo,
    latest: AttemptInfo | None,
    last_signal: SignalInfo | None,
    decisions: Sequence[DecisionInfo],
) -> dict[str, Any]:
    """One job's line of `autoexp status` (also its --json object).

    LAST_SIGNAL is the cause the latest attempt was judged on (its decision's evidence), else
    `last_signal` (see `pick_signal`): the cause, never the teardown that followed it.
    """
    budget = next((d.budget_after for d in reversed(decisions) if d.budget_after is not None), None)
    last = decisions[-1] if decisions else None
    judged = _judged_cause(latest, decisions)
    return {
        "job": job.name,
        "key": job.job_key,
        "status": job.status,
        "attempt": latest.attempt_no if latest else None,
        "slurm_id": latest.executor_job_id if latest else None,
        "state": latest.state.value if latest else None,
        "last_signal": judged or ((last_signal.error_type or last_signal.pattern) if last_signal else None),
        "budget_left": budget,
        "restarts": job.restart_count,
        "last_decision": f"{last.action}: {last.reason}" if last else None,
    }


def _judged_cause(latest: AttemptInfo | None, decisions: Sequence[DecisionInfo]) -> str | None:
    # The two keys read straight from the stored evidence (Evidence.from_json gives the same: a
    # missing key or a record that is no object reads None): `status` starts without Evidence's
    # dataclass (cli/main.py).
    for d in reversed(decisions):
        if latest is not None and d.attempt_id == latest.id:
            ev = d.evidence if isinstance(d.evidence, Mapping) else {}
            if cause := ev.get("error_type") or ev.get("signal"):
                return str(cause)
    return None


def pick_signal(signals: Sequence[SignalInfo]) -> SignalInfo | None:
    """The signal that tells what happened to an attempt: its first root cause, else its first
    cascade, else its latest other line (progress never). A teardown line (`srun_teardown`, a
    cascade that comes after the cause) is never preferred to the cause."""
    roots = [s for s in signals if s.role == "root"]
    cascades = [s for s in signals if s.role == "cascade"]
    others = [s for s in signals if s.role not in ("root", "cascade", "progress")]
    if roots or cascades:
        return (roots or cascades)[0]
    return others[-1] if others else None


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table, one line per row; None shows as '-'."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    # A value with line breaks (a tool's multi-line message) stays on its row.
    return "-" if value is None else " ".join(str(value).split()) if "\n" in str(value) else str(value)


def explain_lines(
    job: JobInfo,
    attempts: Sequence[AttemptInfo],
    decisions: Sequence[DecisionInfo],
    unknown: Mapping[int, Sequence[tuple[int | None, Sequence[str]]] | None] | None = None,
) -> list[str]:
    """Each attempt and each decision about it, with the evidence lines it was based on.

    `unknown`: the failed attempts (by id) whose log has no recognised failure line, with the
    last lines of each rank's output (core/classify/unknown.py rank_tails), None where the log
    could not be read; such an attempt says so instead of leaving the cause blank.
    """
    out = [
        f"job {job.name} (key {job.job_key}): {job.status}"
        + (f" — {job.status_reason}" if job.status_reason else "")
    ]
    by_attempt: dict[int | None, list[DecisionInfo]] = {}
    for d in decisions:
        by_attempt.setdefault(d.attempt_id, []).append(d)
    for a in attempts:
        nodes = ",".join(a.nodes) or "-"
        exit_code = "-" if a.exit_code is None else a.exit_code
        out.append(f"  attempt {a.attempt_no}: job {a.executor_job_id or '-'} {a.state.value} "
                   f"exit={exit_code} nodes={nodes} log={a.log_path or '-'}")  # fmt: skip
        if unknown is not None and a.id in unknown:
            out.extend(_unknown_lines(unknown[a.id]))
        for d in by_attempt.pop(a.id, []):
            out.extend(_decision_lines(d))
    if rest := [d for ds in by_attempt.values() for d in ds]:
        out.append("  no attempt:")  # recorded without an attempt, or for one not listed
        for d in sorted(rest, key=lambda d: d.id):
            out.extend(_decision_lines(d))
    return out


def _unknown_lines(tails: Sequence[tuple[int | None, Sequence[str]]] | None) -> list[str]:
    from oellm_autoexp.core.classify.unknown import UNKNOWN_HINT

    if tails is None:
        return ["    no recognised failure line: its log could not be read",
                f"    (`{UNKNOWN_HINT}` lists unexplained failures across sessions)"]  # fmt: skip
    out = ["    no recognised failure line in its log; the last lines of each rank's output:"]
    for rank, lines in tails:
        out.append(
            "      " + ("no rank prefix (launcher, batch script):" if rank is None else f"rank {rank}:")
        )
        out += [f"        | {line}" for line in lines]
    if not tails:
        out.append("      (the log is empty)")
    out.append(f"    to make a pattern of one of them: {UNKNOWN_HINT}")
    return out


def _decision_lines(d: DecisionInfo) -> list[str]:
    from oellm_autoexp.core.watch.evidence import Evidence

    budget = "" if d.budget_before is None else f" (budget {d.budget_before} -> {d.budget_after})"
    lines = [f"    {d.decided_at:%Y-%m-%d %H:%M:%S} {d.action.upper()}: {d.reason}{budget}"]
    ev = Evidence.from_json(d.evidence)
    if ev.signal:
        at = f" line {ev.root_line_no}" if ev.root_line_no else ""
        lines.append(f"      cause: {ev.error_type} (signal {ev.signal}{at}, state {ev.state})")
    if ev.observed:
        lines.append(f"      observed: {ev.observed}")
    if ev.after_first_fatal_s is not None:
        lines.append(f"      {_delay_words(ev.after_first_fatal_s)} "
                     f"(line {ev.first_fatal_line_no}; judged on: {ev.trigger})")  # fmt: skip
    lines += [f"      blamed {item}" for item in ev.blamed]
    if ev.blame_withheld:
        lines.append(f"      no node blamed: {ev.blame_withheld}")
    if ev.override_set is not None:
        lines.append(f"      next attempt runs with override set {ev.override_set} of rule {ev.rule}: "
                     + " ".join(ev.overrides))  # fmt: skip
    lines += [f"      | {line}" for line in ev.lines]
    return lines


def cause_lines(name: str, attempt: AttemptInfo, decisions: Sequence[DecisionInfo]) -> list[str]:
    """The line the last decision about `attempt` rests on, quoted with where it is: the root
    cause's line (the first of the evidence's lines), else what was observed (a hang). Empty
    when no decision about it names either."""
    from oellm_autoexp.core.watch.evidence import Evidence

    for d in reversed(decisions):
        if d.attempt_id != attempt.id:
            continue
        ev = Evidence.from_json(d.evidence)
        cause = ev.error_type or ev.signal or ev.kind
        if ev.lines:
            at = f"line {ev.root_line_no} of " if ev.root_line_no else ""
            return [
                f"--- {name}: {d.action} on {at}{attempt.log_path or 'its log'} ({cause}):",
                f"    {ev.lines[0]}",
            ]
        if ev.observed:
            return [f"--- {name}: {d.action} ({cause}): {ev.observed}"]
    return []


def _delay_words(after_s: float) -> str:
    # Negative: the line was read after the clock the judgement used had started, i.e. by a
    # monitor that started later and found it in the log; there is no delay to report then.
    if after_s < 0:
        return "decided as the first fatal line was read (already in the log when this monitor started)"
    return f"decided {after_s:.1f} s after the first fatal line"


def exclusion_lines(exclusions: Sequence[Exclusion], now: datetime) -> list[str]:
    """The active node exclusions of a session's jobs, one line each (`autoexp status`)."""
    from oellm_autoexp.core.decide.exclusions import describe

    return [f"  {e.job}: {describe(e, now)}" for e in exclusions if e.is_active(now)]

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
    """One job's line of `autoexp status` (also its --json object)."""
    budget = next((d.budget_after for d in reversed(decisions) if d.budget_after is not None), None)
    last = decisions[-1] if decisions else None
    return {
        "job": job.name,
        "key": job.job_key,
        "status": job.status,
        "attempt": latest.attempt_no if latest else None,
        "slurm_id": latest.executor_job_id if latest else None,
        "state": latest.state.value if latest else None,
        "last_signal": (last_signal.error_type or last_signal.pattern) if last_signal else None,
        "budget_left": budget,
        "restarts": job.restart_count,
        "last_decision": f"{last.action}: {last.reason}" if last else None,
    }


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
    job: JobInfo, attempts: Sequence[AttemptInfo], decisions: Sequence[DecisionInfo]
) -> list[str]:
    """Each attempt and each decision about it, with the evidence lines it was based on."""
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
        for d in by_attempt.pop(a.id, []):
            out.extend(_decision_lines(d))
    if rest := [d for ds in by_attempt.values() for d in ds]:
        out.append("  no attempt:")  # recorded without an attempt, or for one not listed
        for d in sorted(rest, key=lambda d: d.id):
            out.extend(_decision_lines(d))
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
        lines.append(f"      decided {ev.after_first_fatal_s:.1f} s after the first fatal line "
                     f"(line {ev.first_fatal_line_no}; judged on: {ev.trigger})")  # fmt: skip
    lines += [f"      blamed {item}" for item in ev.blamed]
    if ev.blame_withheld:
        lines.append(f"      no node blamed: {ev.blame_withheld}")
    if ev.override_set is not None:
        lines.append(f"      next attempt runs with override set {ev.override_set} of rule {ev.rule}: "
                     + " ".join(ev.overrides))  # fmt: skip
    lines += [f"      | {line}" for line in ev.lines]
    return lines


def exclusion_lines(exclusions: Sequence[Exclusion], now: datetime) -> list[str]:
    """The active node exclusions of a session's jobs, one line each (`autoexp status`)."""
    from oellm_autoexp.core.decide.exclusions import describe

    return [f"  {e.job}: {describe(e, now)}" for e in exclusions if e.is_active(now)]

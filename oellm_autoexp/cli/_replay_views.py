"""How `autoexp replay` shows a replay: the JSON object, the timeline, the tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.replay.log_end import assumed_end
from oellm_autoexp.core.replay.replay import ReplayDecision, ReplayResult
from oellm_autoexp.daemon.replay_runs import AttemptInput

LINE_CHARS = 160  # long log lines are cut in the human output (never in --json)


def end_label(result: ReplayResult) -> str:
    """The end state the log shows (`FAILED:1`), assumed from its root cause when it shows none."""
    end = result.end or result.slurm.end or assumed_end(has_cause=result.root_cause is not None)
    return end.label()


def decision_json(result: ReplayResult, decision: ReplayDecision) -> dict[str, Any]:
    judgement = decision.judgement
    evidence = judgement.evidence
    return {
        "at_s": round(decision.at_s - result.origin_s, 3),
        "action": judgement.decision.action.value,
        "reason": judgement.decision.reason,
        "error_type": evidence.error_type,
        "rule": evidence.rule,
        "after_first_fatal_s": evidence.after_first_fatal_s,
        "trigger": evidence.trigger,
        "kind": evidence.kind,
        "lines_read": decision.lines_read,
        "offset": decision.offset,
    }


def to_json(file: str, result: ReplayResult, warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The `--json` object of one replayed log."""
    cause, first = result.root_cause, result.first_fatal
    return {
        "file": file,
        "root_cause": None if cause is None else _signal_json(cause),
        "first_fatal": None if first is None else {
            "line_no": first.signal.line_no, "line": first.signal.line,
            "at_s": round(first.at_s - result.origin_s, 3),
        },
        "decisions": [decision_json(result, d) for d in result.decisions],
        "end_state": end_label(result),
        "warnings": list(warnings),
    }  # fmt: skip


def _signal_json(signal: Signal) -> dict[str, Any]:
    return {"error_type": signal.error_type, "signal": signal.pattern, "line_no": signal.line_no,
            "line": signal.line, "rank": signal.rank}  # fmt: skip


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3] + "..."


def _at(seconds: float) -> str:
    return f"{seconds:+9.1f} s"


def timeline(file: str, result: ReplayResult, warnings: Sequence[str] = ()) -> str:
    """The human timeline of one replayed log."""
    out = [f"{file}:"]
    out += [f"  warning: {w}" for w in warnings]
    first = result.first_fatal
    if first is not None and not any(e.signal is first.signal for e in result.events):
        out.append(f"  {_at(first.at_s - result.origin_s)}  FIRST FATAL line {first.signal.line_no}: "
                   f"{_cut(first.signal.line)}")  # fmt: skip
    for event in result.events:
        kind = "FIRST FATAL" if first is not None and event.signal is first.signal else event.kind
        out.append(f"  {_at(event.at_s - result.origin_s)}  {kind:<11}  {_cut(event.text)}")
    if result.dropped_signals:
        out.append(f"  ... and {result.dropped_signals} more signals")
    for decision in result.decisions:
        ev = decision.judgement.evidence
        delay = (
            ""
            if ev.after_first_fatal_s is None
            else f", {ev.after_first_fatal_s:.1f} s after the first fatal line"
        )
        out.append(f"  decided by {ev.trigger}: {decision.judgement.decision.action.value} "
                   f"(rule {ev.rule or '-'}, error_type {ev.error_type or '-'}{delay})")  # fmt: skip
    if not result.decisions:
        out.append("  no decision")
    out.append(f"  end state the log shows: {end_label(result)}")
    return "\n".join(out)


def _brief(result: ReplayResult) -> tuple[str, str, str]:
    cause = result.root_cause
    root = f"{cause.error_type} (line {cause.line_no})" if cause else "-"
    if not result.decisions:
        return root, "none", "-"
    last = result.decisions[-1]
    delay = last.judgement.evidence.after_first_fatal_s
    return (
        root,
        f"{last.judgement.decision.action.value}: {last.judgement.decision.reason}",
        ("-" if delay is None else f"{delay:.1f} s"),
    )


def summary(rows: Sequence[tuple[str, ReplayResult]]) -> str:
    """The table over all logs: file, root cause, decision, delay after the first fatal line."""
    table = [("file", "root cause", "decision", "delay")] + [(f, *_brief(r)) for f, r in rows]
    return _table(table)


def compare(labels: tuple[str, str], rows: Sequence[tuple[str, ReplayResult, ReplayResult]]) -> str:
    """Two policies side by side: per log, each one's decision and delay; `*` marks a difference."""
    table = [("", "file", f"decision ({labels[0]})", "delay", f"decision ({labels[1]})", "delay")]
    for file, a, b in rows:
        _, da, ta = _brief(a)
        _, db, tb = _brief(b)
        table.append(("*" if da != db else "", file, da, ta, db, tb))
    return _table(table)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [min(max(len(r[i]) for r in rows), 70) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            (c if len(c) <= w else c[: w - 3] + "...").ljust(w) for c, w in zip(row, widths, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def session_attempt(job: str, item: AttemptInput, result: ReplayResult) -> tuple[str, dict[str, Any]]:
    """A past attempt: what the monitor decided beside what the replay decides, at which offsets."""
    attempt = item.attempt
    recorded: list[dict[str, Any]] = [
        {"at_s": round(d.at_s - result.origin_s, 3), "action": d.action, "reason": d.reason,
         "error_type": d.evidence.error_type, "rule": d.evidence.rule, "trigger": d.evidence.trigger,
         "after_first_fatal_s": d.evidence.after_first_fatal_s, "offset": d.offset}
        for d in item.recorded
    ]  # fmt: skip
    replayed = [decision_json(result, d) for d in result.decisions]
    same = [(r["action"], r["reason"], r["offset"]) for r in recorded] == [
        (r["action"], r["reason"], r["offset"]) for r in replayed
    ]
    data = {"job": job, "attempt": attempt.attempt_no, "executor_job_id": attempt.executor_job_id,
            "log": attempt.log_path, "reads": len(item.batches), "recorded": recorded,
            "replayed": replayed, "same": same}  # fmt: skip
    out = [f"{job} attempt {attempt.attempt_no} (job {attempt.executor_job_id}): {len(item.batches)} reads "
           f"of {attempt.log_path}"]  # fmt: skip
    for who, rows in (("recorded", recorded), ("replayed", replayed)):
        if not rows:
            out.append(f"  {who}:  no decision")
        for r in rows:
            out.append(f"  {who}: {_at(r['at_s'])}  offset {r['offset']}  {r['action']}: {r['reason']}")
    out.append(
        "  the same decisions at the same offsets" if same else "  DIFFERENT from what the monitor decided"
    )
    replayed_lines = (
        timeline("", result).replace("end state the log shows", "end state recorded").splitlines()
    )
    out += ["  replayed timeline:"] + [f"  {line}" for line in replayed_lines[1:]]
    return "\n".join(out), data

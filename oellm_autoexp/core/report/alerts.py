"""What an operator is told, and in which words: judgements and session events -> `Alert`. No I/O.

The monitor hands every recorded judgement to the notifier (daemon/notify.py); `alert_for`
picks the ones a human wants to hear about and says them in one message: the job and
attempt, the cause, the log line it rests on, the restart budget left, and the
`autoexp explain` command that shows the whole record. Session-level events (every job
finished; another monitor's heartbeat found stale) have their own builders.

Each alert renders two ways (`payload`): `json`, the whole record for a generic webhook
receiver, and `text`, the `{"text": ...}` body that Slack and Mattermost incoming webhooks
accept.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from oellm_autoexp.core.decide.judge import Judgement
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.watch.outcome import OutcomeKind

MAX_LINE_CHARS = 400  # an evidence line is cut here: chat messages stay readable
RETRY_BASE_S = 1.0  # the first retry of a failed delivery waits this long...
RETRY_FACTOR = 4.0  # ...each later one this many times longer (1 s, 4 s, 16 s)
RETRY_MAX_S = 60.0  # ...but never longer than this


class AlertKind(StrEnum):
    RESTART = "restart"  # a restart was decided (the next attempt follows after its delay)
    STOPPED = "stopped"  # stopped for good: a permanent failure, a stop/notify rule, a user cancel
    BUDGET_EXHAUSTED = "budget_exhausted"  # a restart was due but a retry budget or rate limit ran out
    COMPLETED = "completed"  # the job finished its work
    SESSION_FINISHED = "session_finished"  # every job of a session reached a final status
    MONITOR_STALE = "monitor_stale"  # a monitor found another monitor's heartbeat stale and took over


@dataclass(frozen=True)
class JobRef:
    """Which attempt of which job a judgement was about."""

    session_id: int
    job: str  # the job's name
    attempt: int  # its attempt number (1 = first submission)
    executor_job_id: str  # the Slurm (or local) job id


@dataclass(frozen=True)
class Alert:
    """One message for the operator; `text` is what a chat shows."""

    kind: AlertKind
    session_id: int
    title: str  # one line: what happened to what
    job: str | None = None
    attempt: int | None = None
    executor_job_id: str | None = None
    action: str | None = None  # the decision: restart, stop, notify
    reason: str | None = None  # the decision's own one-line reason
    cause: str | None = None  # error type (else outcome kind) of the root cause
    evidence_line: str | None = None  # the log line the decision rests on
    budget_left: int | None = None  # restarts the deciding rule has left; None: no budget applies
    explain: str = ""  # the command that shows the whole record
    at: str = ""  # when it was decided (ISO-8601 UTC)

    @property
    def text(self) -> str:
        """The human message: the title, then one `key: value` line per known fact."""
        facts = [
            ("cause", self.cause),
            ("decision", f"{self.action}: {self.reason}" if self.action else self.reason),
            ("evidence", self.evidence_line),
            ("budget left", _budget_text(self.budget_left) if self.action else None),
            ("look closer", self.explain),
        ]
        return "\n".join([self.title, *(f"{key}: {value}" for key, value in facts if value)])


def _budget_text(left: int | None) -> str:
    return "n/a (no retry budget applies)" if left is None else f"{left} restart(s)"


def explain_command(state_dir: str, job: str, session_id: int) -> str:
    """`autoexp explain` for one job, runnable from any directory."""
    return shlex.join(["autoexp", "--state-dir", state_dir, "explain", job, "--session", str(session_id)])


def alert_kind(judgement: Judgement) -> AlertKind | None:
    """The alert a recorded judgement raises; None for `none` (wait, alive, unknown)."""
    decision = judgement.decision
    if decision.action is DecisionAction.RESTART:
        return AlertKind.RESTART
    if decision.action is DecisionAction.NONE:
        return None
    if judgement.outcome.kind is OutcomeKind.SUCCESS:
        return AlertKind.COMPLETED
    # Only a stop for want of budget carries budget numbers (core/decide/policy.py `_restart_within_budgets`).
    if decision.action is DecisionAction.STOP and decision.budget_before is not None:
        return AlertKind.BUDGET_EXHAUSTED
    return AlertKind.STOPPED


def alert_for(judgement: Judgement, ref: JobRef, *, explain: str, at: str) -> Alert | None:
    """The alert for a recorded judgement about `ref`, or None when it says nothing new."""
    kind = alert_kind(judgement)
    if kind is None:
        return None
    decision, evidence = judgement.decision, judgement.evidence
    line = next(iter(evidence.lines), None) or evidence.first_fatal_line or evidence.observed
    budget = decision.budget_after if kind is AlertKind.RESTART else decision.budget_before
    return Alert(
        kind=kind,
        session_id=ref.session_id,
        title=f"autoexp {kind.value}: job {ref.job} attempt {ref.attempt} (job id {ref.executor_job_id})",
        job=ref.job,
        attempt=ref.attempt,
        executor_job_id=ref.executor_job_id,
        action=decision.action.value,
        reason=decision.reason,
        cause=_cause(judgement),
        evidence_line=_cut(line),
        budget_left=budget,
        explain=explain,
        at=at,
    )


def _cause(judgement: Judgement) -> str:
    evidence = judgement.evidence
    cause = evidence.error_type or evidence.kind
    extra = [f"rule {evidence.rule}"] if evidence.rule else []
    if evidence.observed:
        extra.append(evidence.observed)
    return f"{cause} ({'; '.join(extra)})" if extra else cause


def _cut(line: str | None) -> str | None:
    if line is None or len(line) <= MAX_LINE_CHARS:
        return line
    return line[:MAX_LINE_CHARS] + " [...]"


def session_finished_alert(
    session_id: int, session_name: str, job_lines: list[str], *, status_command: str, at: str
) -> Alert:
    """Every job of the session reached a final status; `job_lines` says how each ended."""
    return Alert(
        kind=AlertKind.SESSION_FINISHED,
        session_id=session_id,
        title=f"autoexp session_finished: session {session_id} ({session_name})",
        reason="; ".join(job_lines),
        explain=status_command,
        at=at,
    )


def monitor_stale_alert(
    session_id: int, previous: str, heartbeat_age_s: float | None, stale_after_s: float, *, by: str, at: str,
    status_command: str,
) -> Alert:  # fmt: skip
    """This monitor (`by`) took over a session whose previous monitor stopped its heartbeat."""
    age = "never beat" if heartbeat_age_s is None else f"last heartbeat {heartbeat_age_s:.0f} s ago"
    return Alert(
        kind=AlertKind.MONITOR_STALE,
        session_id=session_id,
        title=f"autoexp monitor_stale: session {session_id}: monitor {previous} stopped ({age})",
        reason=f"stale after {stale_after_s:g} s; taken over by monitor {by}",
        explain=status_command,
        at=at,
    )


def payload(alert: Alert, form: str) -> dict[str, Any]:
    """The HTTP body: `text` is Slack/Mattermost's `{"text": ...}`; `json` is the whole record."""
    if form == "text":
        return {"text": alert.text}
    record = asdict(alert)
    record["kind"] = alert.kind.value
    record["text"] = alert.text
    return record


def retry_delay_s(failed_tries: int, base_s: float = RETRY_BASE_S) -> float:
    """The wait before the next try after `failed_tries` failures: 1 s, 4 s, 16 s, ... at most 60 s."""
    return min(base_s * RETRY_FACTOR ** max(failed_tries - 1, 0), RETRY_MAX_S)

"""Alerts (core/report/alerts.py): which judgements raise which alert, and what the message says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oellm_autoexp.config.notifications import NotificationSettings, WebhookSettings
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.judge import Judgement, judge
from oellm_autoexp.core.decide.policy import RestartHistory, RestartRecord, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.report.alerts import (
    AlertKind,
    JobRef,
    alert_for,
    alert_kind,
    explain_command,
    monitor_stale_alert,
    payload,
    retry_delay_s,
)
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.verdict import Trigger, Verdict

RULE = {
    "name": "transient",
    "match": {"kinds": ["crash", "oom"]},
    "max_retries": 2,
    "exclude_error_types": ["oom"],
}
POLICY = load_policy({"rules": [RULE]})
NCCL_LINE = "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
OOM_LINE = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB."
REF = JobRef(session_id=3, job="llama 8b", attempt=2, executor_job_id="4711")


def _signal(error_type: str, line: str) -> Signal:
    return Signal(
        pattern=error_type, error_type=error_type, subsystem="test", role="root", line=line, line_no=9
    )  # type: ignore[arg-type]


def _judgement(state: JobState, cause: Signal | None = None, restarts: int = 0) -> Judgement:
    record = JobRecord("4711", state, "sacct", exit_code=0 if state is JobState.COMPLETED else 1)
    verdict = Verdict(Trigger.END, 1000.0, cause=cause, record=record)
    history = RestartHistory(
        attempt=restarts + 1,
        restarts=tuple(
            RestartRecord(float(i), "transient", OutcomeKind.CRASH, "nccl") for i in range(restarts)
        ),
    )
    return judge(POLICY, verdict, history, [cause] if cause else [])


@pytest.mark.parametrize(
    ("state", "cause", "restarts", "expected"),
    [
        (JobState.FAILED, _signal("nccl", NCCL_LINE), 0, AlertKind.RESTART),
        (JobState.FAILED, _signal("nccl", NCCL_LINE), 2, AlertKind.BUDGET_EXHAUSTED),
        (JobState.FAILED, _signal("oom", OOM_LINE), 0, AlertKind.STOPPED),
        (JobState.COMPLETED, None, 1, AlertKind.COMPLETED),
        (JobState.CANCELLED, _signal("segfault", "Segmentation fault"), 0, AlertKind.STOPPED),  # no rule fits
    ],
)
def test_each_decision_raises_its_alert(
    state: JobState, cause: Signal | None, restarts: int, expected: AlertKind
) -> None:
    """A restart, a stop for want of budget, a permanent stop and a completion are told apart."""
    assert alert_kind(_judgement(state, cause, restarts)) is expected


def test_a_running_job_with_nothing_to_do_raises_no_alert() -> None:
    """A `none` judgement (still alive) says nothing new to the operator."""
    verdict = Verdict(Trigger.END, 1000.0, record=JobRecord("4711", JobState.RUNNING, "squeue"))
    judgement = judge(POLICY, verdict, RestartHistory())
    assert alert_for(judgement, REF, explain="x", at="t") is None


def test_a_restart_message_names_job_attempt_cause_line_budget_and_explain() -> None:
    """The message carries what an operator needs without opening a terminal."""
    explain = explain_command("/state dir", REF.job, REF.session_id)
    alert = alert_for(_judgement(JobState.FAILED, _signal("nccl", NCCL_LINE)), REF, explain=explain, at="t")
    assert alert is not None
    text = alert.text
    assert "restart: job llama 8b attempt 2 (job id 4711)" in text
    assert "cause: nccl (rule transient)" in text
    assert f"evidence: {NCCL_LINE}" in text
    assert "budget left: 1 restart(s)" in text
    assert "look closer: autoexp --state-dir '/state dir' explain 'llama 8b' --session 3" in text


def test_an_exhausted_budget_says_none_is_left_and_why() -> None:
    """The stop for want of budget shows 0 left and the policy's own reason with its numbers."""
    alert = alert_for(
        _judgement(JobState.FAILED, _signal("nccl", NCCL_LINE), restarts=2), REF, explain="e", at="t"
    )
    assert alert is not None and alert.budget_left == 0
    assert "retry budget exhausted (attempt 3/2)" in alert.text


def test_a_very_long_evidence_line_is_cut() -> None:
    """A 10 kB log line does not become a 10 kB chat message."""
    alert = alert_for(_judgement(JobState.FAILED, _signal("nccl", "x" * 10_000)), REF, explain="e", at="t")
    assert alert is not None and alert.evidence_line is not None
    assert len(alert.evidence_line) < 500 and alert.evidence_line.endswith("[...]")


def test_payload_forms() -> None:
    """`text` is Slack/Mattermost's {"text": ...}; `json` carries every field plus the text."""
    alert = monitor_stale_alert(
        3, "pid 12 on login1", 300.0, 120.0, by="pid 40 on login2", at="t", status_command="s"
    )
    assert payload(alert, "text") == {"text": alert.text}
    record = payload(alert, "json")
    assert record["kind"] == "monitor_stale" and record["session_id"] == 3 and record["text"] == alert.text
    assert "last heartbeat 300 s ago" in alert.text and "taken over by monitor pid 40 on login2" in alert.text


def test_retry_delays_grow_and_are_capped() -> None:
    """1 s, 4 s, 16 s, then at most 60 s between tries."""
    assert [retry_delay_s(n) for n in (1, 2, 3, 4, 5)] == [1.0, 4.0, 16.0, 60.0, 60.0]
    assert retry_delay_s(2, base_s=0.05) == pytest.approx(0.2)


def test_a_url_in_the_config_is_refused_with_the_way_to_do_it() -> None:
    """The URL is a secret: the config names an environment variable instead, and says so."""
    with pytest.raises(ValidationError, match="name that variable in url_env"):
        WebhookSettings.model_validate({"name": "slack", "url": "https://example.invalid/hook"})
    with pytest.raises(ValidationError, match="url_env"):
        WebhookSettings.model_validate({"name": "slack", "url_env": "not a name"})
    with pytest.raises(ValidationError, match="repeated: a"):
        NotificationSettings.model_validate(
            {"webhooks": [{"name": "a", "url_env": "A"}, {"name": "a", "url_env": "B"}]}
        )

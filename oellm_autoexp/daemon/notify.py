"""The notifier: monitor events -> alerts (core/report/alerts.py) -> webhook delivery (adapters/alerts/webhook.py).

An observer of the monitor (daemon/events.py). On the monitor's thread it only builds
the message and queues it; the delivery thread does the HTTP, and is started on the first
message, so a monitor without webhooks starts no thread at all. Which webhooks hear of
which events is the job's `monitoring.notifications` (config/notifications.py); session
events use the settings of the session's jobs.

Delivery failures are printed on the monitor's own output at its next poll (and are in
`<state dir>/notifications.jsonl` with every other outcome).
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.alerts.webhook import RECORD_FILENAME, Message, WebhookDelivery
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.monitoring import split_monitoring
from oellm_autoexp.config.notifications import NotificationSettings
from oellm_autoexp.core.report.alerts import (
    Alert,
    JobRef,
    alert_for,
    explain_command,
    monitor_stale_alert,
    payload,
    session_finished_alert,
)
from oellm_autoexp.daemon.events import Judged, MonitorEvent, Polled, SessionsEnded, StaleMonitorFound
from oellm_autoexp.errors import UserError


class Notifier:
    """Sends the alerts of the jobs' `monitoring.notifications` to their webhooks."""

    def __init__(self, store: SQLiteStore, state_dir: Path, say: Callable[[str], None]) -> None:
        self._store = store
        self._state_dir = str(Path(state_dir).resolve())
        self._say = say
        self._deliveries: dict[str, WebhookDelivery] = {}  # webhook name -> its queue and thread
        self._by_session: dict[int, NotificationSettings] = {}

    def notice(self, event: MonitorEvent) -> None:
        if isinstance(event, Judged):
            self._on_judged(event)
        elif isinstance(event, SessionsEnded):
            for sid in event.session_ids:
                self._on_session_ended(sid, event.now_s)
        elif isinstance(event, StaleMonitorFound):
            self._on_stale(event)
        elif isinstance(event, Polled):
            self._report_failures()

    def close(self) -> None:
        # One deadline for all: the webhooks drain side by side, not one after the other.
        drain_s = max((d.drain_s for d in self._deliveries.values()), default=0.0)
        deadline = time.monotonic() + drain_s
        for delivery in self._deliveries.values():
            delivery.close(deadline)
        self._report_failures()

    # -- events -----------------------------------------------------------------------------------

    def _on_judged(self, event: Judged) -> None:
        live = event.live
        job = live.runtime.job
        ref = JobRef(job.session_id, job.name, live.attempt.attempt_no, live.executor_id)
        explain = explain_command(self._state_dir, job.name, job.session_id)
        alert = alert_for(event.judgement, ref, explain=explain, at=_iso(event.now_s))
        if alert is not None:
            self._send(alert, live.runtime.settings.notifications)

    def _on_session_ended(self, session_id: int, now_s: float) -> None:
        settings = self._settings(session_id)
        if not settings.webhooks:
            return
        session = self._store.get_session(session_id)
        attempts = Counter(
            a.job_id for a in self._store.attempts_for_session(session_id) if a.executor_job_id
        )
        lines = [
            f"{j.name}: {j.status} after {attempts[j.id]} attempt(s), {j.restart_count} restart(s)"
            + (f" ({j.status_reason})" if j.status_reason else "")
            for j in self._store.jobs_for_session(session_id)
        ]
        alert = session_finished_alert(
            session_id, session.name if session else "?", lines, status_command=self._status(session_id),
            at=_iso(now_s),
        )  # fmt: skip
        self._send(alert, settings)

    def _on_stale(self, event: StaleMonitorFound) -> None:
        settings = self._settings(event.session_id)
        if not settings.webhooks:
            return
        age = event.now_s - event.heartbeat.timestamp() if event.heartbeat else None
        previous = f"pid {event.pid} on {event.host or '?'}"
        alert = monitor_stale_alert(
            event.session_id, previous, age, event.stale_after_s, by=_this_monitor(), at=_iso(event.now_s),
            status_command=self._status(event.session_id),
        )  # fmt: skip
        self._send(alert, settings)

    # -- sending ----------------------------------------------------------------------------------

    def _send(self, alert: Alert, settings: NotificationSettings) -> None:
        about = {
            "event": alert.kind.value,
            "session": alert.session_id,
            "job": alert.job,
            "attempt": alert.attempt,
        }
        for hook in settings.webhooks:
            if alert.kind not in hook.events:
                continue
            message = Message(
                hook.name, hook.url_env, payload(alert, hook.format), about, timeout_s=hook.timeout_s,
                max_tries=settings.max_tries, retry_base_s=settings.retry_base_s,
            )  # fmt: skip
            self._delivery_for(hook.name, settings).send(message)

    def _delivery_for(self, webhook: str, settings: NotificationSettings) -> WebhookDelivery:
        # A queue and a thread per webhook (started with its first message), so that a receiver
        # that is down delays only its own messages; sized by the first job's settings that use it.
        if webhook not in self._deliveries:
            self._deliveries[webhook] = WebhookDelivery(
                Path(self._state_dir) / RECORD_FILENAME, name=webhook, queue_size=settings.queue_size,
                drain_s=settings.drain_s,
            )  # fmt: skip
        return self._deliveries[webhook]

    def _report_failures(self) -> None:
        for delivery in self._deliveries.values():
            for line in delivery.take_failures():
                self._say(f"warning: {line} (see {RECORD_FILENAME} in the state dir)")

    def _settings(self, session_id: int) -> NotificationSettings:
        """The notifications of a session's jobs (the first job that has webhooks)."""
        if session_id not in self._by_session:
            found = NotificationSettings()
            for job in self._store.jobs_for_session(session_id):
                section = job.plan.get("config", {}).get("monitoring", {})
                try:
                    settings = split_monitoring(section, f"job {job.name}")[0].notifications
                except UserError as exc:
                    self._say(f"warning: {exc}; no alerts for session {session_id}")
                    break
                if settings.webhooks:
                    found = settings
                    break
            self._by_session[session_id] = found
        return self._by_session[session_id]

    def _status(self, session_id: int) -> str:
        return shlex.join(["autoexp", "--state-dir", self._state_dir, "status", str(session_id)])


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


def _this_monitor() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"

"""Webhook delivery: a bounded queue and one worker thread that POSTs alerts, with retries.

One `WebhookDelivery` per webhook, so that a receiver that is down delays only its own
messages. It never blocks or breaks the monitor loop. `send` puts a message on a bounded queue and
returns at once (a full queue drops the message, and says so in the record). The worker
thread POSTs each message with a timeout and, on failure, retries after 1 s, 4 s, 16 s...
(core/report/alerts.py `retry_delay_s`) up to the message's `max_tries`. Every outcome (sent,
failed, dropped) is appended to the delivery record, one JSON object a line
(`notifications.jsonl` in the state dir), and failures are kept for the monitor to print on
its own thread (`take_failures`). Nothing here raises into the caller.

The URL is read from its environment variable only when a message is sent, and it is never
written anywhere: the record and the messages name the webhook and its variable instead.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oellm_autoexp.core.report.alerts import retry_delay_s

RECORD_FILENAME = "notifications.jsonl"
_RECORD_LOCK = threading.Lock()  # one webhook's worker appends a line at a time
_STOP = object()  # the worker's last item
_JOIN_SLACK_S = 1.0  # beyond one request's timeout, how long close() waits for the worker


class DeliveryError(Exception):
    """One try failed; `final` when trying again cannot help (no URL configured)."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


@dataclass(frozen=True)
class Message:
    """One alert for one webhook, ready to POST."""

    webhook: str  # the webhook's name (never its URL)
    url_env: str  # the environment variable holding the URL
    body: dict[str, Any]  # the JSON body
    about: dict[str, Any]  # what the record says it was about: event, session, job, attempt
    timeout_s: float = 5.0
    max_tries: int = 4
    retry_base_s: float = 1.0


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> int:
    """POST `body` as JSON; the HTTP status, or DeliveryError (no URL in its message)."""
    if not url.startswith(("http://", "https://")):
        raise DeliveryError("the URL is not http:// or https://", final=True)
    data = json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": "oellm-autoexp"}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"cannot connect: {exc.reason}") from None
    except (TimeoutError, OSError, ValueError) as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}".replace(url, "<url>")) from None


class WebhookDelivery:
    """The queue and its worker; start is lazy (on the first message), `close` stops it."""

    def __init__(
        self,
        record_path: Path | None,
        *,
        name: str = "webhook",
        queue_size: int = 100,
        drain_s: float = 10.0,
        environ: Mapping[str, str] = os.environ,
        post: Callable[[str, dict[str, Any], float], int] = post_json,
    ) -> None:
        self._record_path = record_path
        self._name = name
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self.drain_s = drain_s
        self._environ = environ
        self._post = post
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards the failures and the counts
        self._failures: list[str] = []
        self.counts = {"sent": 0, "failed": 0, "dropped": 0}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._longest_timeout_s = 0.0

    def send(self, message: Message) -> bool:
        """Queue a message; False (and a `dropped` record) when the queue is full or closed."""
        if self._closed:
            self._record(message, "dropped", 0, "the monitor is stopping")
            return False
        self._longest_timeout_s = max(self._longest_timeout_s, message.timeout_s)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"autoexp-webhook-{self._name}")
            self._thread.start()
        try:
            self._queue.put_nowait(message)
        except queue.Full:
            self._record(message, "dropped", 0, f"queue full ({self._queue.maxsize} waiting)")
            return False
        return True

    def take_failures(self) -> list[str]:
        """The failures since the last call, one line each (for the monitor's own output)."""
        with self._lock:
            taken, self._failures = self._failures, []
        return taken

    def close(self, deadline: float | None = None) -> None:
        """Give what is queued until `deadline` (time.monotonic; default: `drain_s` from now) to go out,
        then stop the worker; what is left is recorded as dropped."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        deadline = time.monotonic() + self.drain_s if deadline is None else deadline
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()  # a retry waiting for its turn gives up now
        self._drop_queued()
        self._queue.put(_STOP)
        self._thread.join(self._longest_timeout_s + _JOIN_SLACK_S)

    # -- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if isinstance(item, Message) and self._stop.is_set():
                    self._record(item, "dropped", 0, "the monitor stopped before it was sent")
                elif isinstance(item, Message):
                    self._deliver(item)
            finally:
                self._queue.task_done()

    def _deliver(self, message: Message) -> None:
        tries = 0
        while True:
            tries += 1
            try:
                self._post(self._url(message), message.body, message.timeout_s)
            except DeliveryError as exc:
                if exc.final or tries >= message.max_tries:
                    self._record(message, "failed", tries, str(exc))
                    return
                if self._stop.wait(retry_delay_s(tries, message.retry_base_s)):
                    self._record(message, "failed", tries, f"{exc}; the monitor stopped before the next try")
                    return
            except Exception as exc:  # a bug here must not kill the worker: record it, go on
                self._record(message, "failed", tries, f"{type(exc).__name__}: {exc}")
                return
            else:
                self._record(message, "sent", tries, None)
                return

    def _url(self, message: Message) -> str:
        url = self._environ.get(message.url_env, "").strip()
        if not url:
            raise DeliveryError(f"environment variable {message.url_env} is not set", final=True)
        return url

    def _drop_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Message):
                self._record(item, "dropped", 0, "the monitor stopped before it was sent")
            self._queue.task_done()

    # -- the record -----------------------------------------------------------------------------

    def _record(self, message: Message, result: str, tries: int, error: str | None) -> None:
        entry = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            **message.about,
            "webhook": message.webhook,
            "result": result,
            "tries": tries,
            "error": error,
        }
        with self._lock:
            self.counts[result] += 1
            if result != "sent":
                what = message.about.get("event", "alert")
                self._failures.append(f"alert {what} to webhook {message.webhook} {result}: {error}")
        with _RECORD_LOCK:
            self._append(entry)

    def _append(self, entry: dict[str, Any]) -> None:
        if self._record_path is None:
            return
        try:
            self._record_path.parent.mkdir(parents=True, exist_ok=True)
            with self._record_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
        except OSError as exc:  # a full disk must not break delivery either
            with self._lock:
                self._failures.append(f"cannot write {self._record_path.name}: {exc}")

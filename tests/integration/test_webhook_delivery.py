"""Webhook delivery (adapters/alerts/webhook.py) against a real HTTP server on 127.0.0.1: up, down, slow, 500.

Delivery never blocks the caller and never raises: failures are retried with backoff, then
recorded (notifications.jsonl) and handed back for the monitor to print; the worker thread
ends when the delivery is closed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.alerts.webhook import Message, WebhookDelivery
from tests.integration.webhook_server import Receiver, serving

BODY = {"text": "autoexp restart: job j attempt 1"}
ABOUT = {"event": "restart", "session": 1, "job": "j", "attempt": 1}


def _message(**overrides: Any) -> Message:
    fields: dict[str, Any] = {"webhook": "team", "url_env": "HOOK", "body": BODY, "about": ABOUT,
                              "timeout_s": 2.0, "max_tries": 3, "retry_base_s": 0.05}  # fmt: skip
    fields.update(overrides)
    return Message(**fields)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _worker_alive() -> bool:
    return any(t.name.startswith("autoexp-webhook") and t.is_alive() for t in threading.enumerate())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_message_is_posted_and_recorded_without_its_url(tmp_path: Path) -> None:
    """The receiver gets the JSON body; the record says sent after one try and never holds the URL."""
    record = tmp_path / "notifications.jsonl"
    with serving(Receiver()) as receiver:
        delivery = WebhookDelivery(record, environ={"HOOK": receiver.url})
        assert delivery.send(_message())
        delivery.close()
    assert receiver.bodies == [BODY]
    (entry,) = _records(record)
    assert entry["result"] == "sent" and entry["tries"] == 1 and entry["webhook"] == "team"
    assert entry["event"] == "restart" and entry["job"] == "j"
    assert receiver.url not in record.read_text() and "127.0.0.1" not in record.read_text()
    assert not _worker_alive() and delivery.take_failures() == []


def test_a_500_is_retried_with_growing_waits_until_it_goes_through(tmp_path: Path) -> None:
    """Two 500s, then 200: three tries, waiting 0.05 s then 0.2 s in between; recorded as sent."""
    record = tmp_path / "n.jsonl"
    with serving(Receiver(fail_first=2)) as receiver:
        delivery = WebhookDelivery(record, environ={"HOOK": receiver.url})
        started = time.monotonic()
        delivery.send(_message())
        receiver.wait_for(3)
        took = time.monotonic() - started
        delivery.close()
    assert receiver.answered == [500, 500, 200]
    assert 0.25 <= took < 5.0
    assert [(e["result"], e["tries"]) for e in _records(record)] == [("sent", 3)]


def test_a_receiver_that_always_answers_500_is_given_up_and_reported(tmp_path: Path) -> None:
    """After max_tries the message is recorded as failed with the HTTP status, and the failure is handed back."""
    record = tmp_path / "n.jsonl"
    with serving(Receiver(status=500)) as receiver:
        delivery = WebhookDelivery(record, environ={"HOOK": receiver.url})
        delivery.send(_message())
        receiver.wait_for(3)
        delivery.close()
    (entry,) = _records(record)
    assert (entry["result"], entry["tries"]) == ("failed", 3) and "HTTP 500" in entry["error"]
    assert delivery.take_failures() == [
        "alert restart to webhook team failed: HTTP 500 Internal Server Error"
    ]
    assert delivery.counts == {"sent": 0, "failed": 1, "dropped": 0}


def test_a_receiver_that_is_down_never_blocks_or_raises(tmp_path: Path) -> None:
    """Nothing listens on the port: send returns at once, the tries fail to connect, and that is recorded."""
    record = tmp_path / "n.jsonl"
    delivery = WebhookDelivery(record, environ={"HOOK": f"http://127.0.0.1:{_free_port()}/hook"})
    started = time.monotonic()
    assert delivery.send(_message())
    assert time.monotonic() - started < 0.1
    delivery.close()
    (entry,) = _records(record)
    assert entry["result"] == "failed" and entry["tries"] == 3 and "cannot connect" in entry["error"]
    assert not _worker_alive()


def test_a_slow_receiver_times_out_while_the_caller_goes_on(tmp_path: Path) -> None:
    """A receiver that takes 3 s against a 0.3 s timeout: the caller's sends return at once; the try times
    out, the next waits and tries again; closing stops the retries and the thread within its bounds."""
    record = tmp_path / "n.jsonl"
    with serving(Receiver(delay_s=3.0)) as receiver:
        delivery = WebhookDelivery(record, environ={"HOOK": receiver.url}, drain_s=0.0)
        started = time.monotonic()
        for _ in range(5):
            delivery.send(_message(timeout_s=0.3, retry_base_s=5.0))
        assert time.monotonic() - started < 0.1
        receiver.wait_for(1)
        time.sleep(0.5)  # the first try has timed out; its retry waits 5 s
        closing = time.monotonic()
        delivery.close()
        assert time.monotonic() - closing < 2.0
    entries = _records(record)
    (failed,) = [e for e in entries if e["result"] == "failed"]
    assert "timed out" in failed["error"] and "the monitor stopped before the next try" in failed["error"]
    assert sorted(e["result"] for e in entries) == ["dropped"] * 4 + ["failed"]
    assert not _worker_alive()


def test_a_full_queue_drops_new_messages_and_says_so(tmp_path: Path) -> None:
    """With room for one message while the worker is busy, the third is dropped and recorded; send never waits."""
    record = tmp_path / "n.jsonl"
    with serving(Receiver(delay_s=0.5)) as receiver:
        delivery = WebhookDelivery(record, queue_size=1, environ={"HOOK": receiver.url})
        delivery.send(_message())
        receiver.wait_for(1)  # the worker is busy with the first
        assert delivery.send(_message())
        assert not delivery.send(_message())
        delivery.close()
    results = sorted(e["result"] for e in _records(record))
    assert results == ["dropped", "sent", "sent"]
    assert any("queue full" in line for line in delivery.take_failures())


def test_an_unset_url_variable_fails_once_without_retrying(tmp_path: Path) -> None:
    """No URL in the environment: one failed try naming the variable (retrying cannot help)."""
    record = tmp_path / "n.jsonl"
    delivery = WebhookDelivery(record, environ={})
    delivery.send(_message())
    delivery.close()
    (entry,) = _records(record)
    assert (entry["result"], entry["tries"]) == ("failed", 1)
    assert entry["error"] == "environment variable HOOK is not set"

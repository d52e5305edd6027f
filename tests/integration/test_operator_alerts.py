"""Alerts and metrics of a real `autoexp run` / `autoexp monitor-session` (local executor, real processes).

A job whose first attempt prints a fatal line is cancelled and restarted; the second
completes. A real HTTP receiver on 127.0.0.1 gets the alerts; the metrics endpoint is scraped
while the run goes on, and the textfile is parsed after it, both with prometheus-client's parser.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from tests.integration.webhook_server import Receiver, serving

RUN_DEADLINE_S = 60.0
# Attempt 1: an iteration, a fatal line, and 1.5 s more before it exits (time to act on the line).
# Attempt 2 (the marker exists): iterations for ~2 s, then done.
NCCL_LINE = "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
JOB = (
    'if [ -e {marker} ]; then for i in 1 2 3 4 5 6; do echo " iteration        $i/       6 |"; sleep 0.3; done;'
    f" else touch {{marker}}; echo ' iteration        1/       6 |'; echo '{NCCL_LINE}'; sleep 1.5; exit 3; fi"
)


def _experiment(tmp_path: Path, *, command: list[str]) -> Path:
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "alerts", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": command},
        "restart": {"rules": [{"name": "transient", "match": {"kinds": ["crash"]}, "max_retries": 1}]},
        "monitoring": {
            "poll_interval_s": 0.2,
            "log_poll_interval_s": 0.2,
            "fatal_settle_s": 0.5,
            "notifications": {
                "webhooks": [
                    {"name": "chat", "url_env": "AUTOEXP_TEST_CHAT", "format": "text"},
                    {
                        "name": "pager",
                        "url_env": "AUTOEXP_TEST_PAGER",
                        "events": ["monitor_stale", "session_finished"],
                    },
                    {"name": "dead", "url_env": "AUTOEXP_TEST_DEAD"},  # nothing listens there
                ],
                "retry_base_s": 0.05,
            },
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def _autoexp(state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), *args]


def _env(chat: Receiver, pager: Receiver) -> dict[str, str]:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/hook"
    return {
        **os.environ,
        "AUTOEXP_TEST_CHAT": chat.url,
        "AUTOEXP_TEST_PAGER": pager.url,
        "AUTOEXP_TEST_DEAD": dead,
    }


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition text, parsed by prometheus-client, keyed by (name, labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # the test's own endpoint on 127.0.0.1
        return response.read().decode()


def _scrape_until(url: str, key: Any, proc: subprocess.Popen[str]) -> dict[Any, float]:
    deadline = time.monotonic() + RUN_DEADLINE_S
    while time.monotonic() < deadline and proc.poll() is None:
        samples = _samples(_scrape(url))
        if samples.get(key):
            return samples
        time.sleep(0.1)
    raise AssertionError(f"{key} never appeared at {url}")


def test_a_run_tells_the_operator_and_exports_its_numbers(tmp_path: Path) -> None:
    """The restart, the completion and the session's end reach the chat webhook as {"text": ...} messages
    that name job, attempt, cause, evidence line, budget and the explain command; the pager only hears
    what it asked for; a webhook that is down costs warnings and records, and delays nobody else's; the
    endpoint serves live numbers during the run and the textfile keeps the last."""
    config = _experiment(tmp_path, command=["sh", "-c", JOB.format(marker=tmp_path / "marker")])
    state, textfile = tmp_path / "state", tmp_path / "autoexp.prom"
    with serving(Receiver()) as chat, serving(Receiver()) as pager:
        argv = _autoexp(
            state, "run", str(config), "--metrics-port", "127.0.0.1:0", "--metrics-textfile", str(textfile)
        )
        proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(chat, pager), stdout=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            assert first.startswith("metrics: http://127.0.0.1:"), first
            url = first.split()[1]
            live = _scrape_until(url, ("autoexp_decisions_total", (("action", "restart"),)), proc)
            output, _ = proc.communicate(timeout=RUN_DEADLINE_S)
        finally:
            proc.kill()
            proc.wait()
        chat.wait_for(3)
    assert proc.returncode == 0, output
    assert live[("autoexp_jobs", (("status", "active"),))] == 1
    assert live[("autoexp_decision_latency_seconds_count", ())] == 1  # decided on the fatal line, at once
    assert 0.5 <= live[("autoexp_decision_latency_seconds_sum", ())] < 5.0

    restart, completed, finished = (body["text"] for body in chat.bodies)
    assert restart.startswith("autoexp restart: job alerts attempt 1 (job id local-1)")
    assert "cause: nccl (rule transient)" in restart and f"evidence: {NCCL_LINE}" in restart
    assert "budget left: 0 restart(s)" in restart
    assert f"look closer: autoexp --state-dir {state} explain alerts --session 1" in restart
    assert completed.startswith("autoexp completed: job alerts attempt 2")
    assert (
        finished.startswith("autoexp session_finished: session 1")
        and "alerts: completed after 2 attempt(s)" in finished
    )
    assert [body["kind"] for body in pager.bodies] == ["session_finished"]  # the pager's own events only
    assert all(set(body) == {"text"} for body in chat.bodies)
    assert "warning: alert restart to webhook dead failed: cannot connect" in output
    records = [json.loads(line) for line in (state / "notifications.jsonl").read_text().splitlines()]
    assert sorted((r["webhook"], r["event"], r["result"], r["tries"]) for r in records) == [
        ("chat", "completed", "sent", 1), ("chat", "restart", "sent", 1), ("chat", "session_finished", "sent", 1),
        ("dead", "completed", "failed", 4), ("dead", "restart", "failed", 4), ("dead", "session_finished", "failed", 4),
        ("pager", "session_finished", "sent", 1),
    ]  # fmt: skip

    final = _samples(textfile.read_text())
    assert final[("autoexp_jobs", (("status", "completed"),))] == 1
    assert final[("autoexp_restarts_total", (("cause", "nccl"),))] == 1
    assert final[("autoexp_last_iteration", (("job", "alerts"), ("session", "1")))] == 6
    logs = sorted((tmp_path / "out" / "logs").glob("*.out"))
    assert len(logs) == 2  # every byte of both attempts' logs was read and classified, once
    assert final[("autoexp_log_bytes_classified_total", ())] == sum(log.stat().st_size for log in logs)
    with pytest.raises(urllib.error.URLError):
        _scrape(url)  # the endpoint stopped with the monitor


def test_a_monitor_that_takes_over_a_stale_session_says_so(tmp_path: Path) -> None:
    """A session whose monitor stopped beating 10 minutes ago: the next monitor takes it and tells the pager
    which monitor it replaced and how stale it was; with no port or textfile asked, no metrics run."""
    config = _experiment(tmp_path, command=["true"])
    state = tmp_path / "state"
    with serving(Receiver()) as chat, serving(Receiver()) as pager:
        env = _env(chat, pager)
        submitted = subprocess.run(_autoexp(state, "submit", str(config), "--no-monitor"), cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        with SQLiteStore(state) as store:
            old = datetime.now(UTC) - timedelta(minutes=10)
            assert store.acquire_monitor_lock(1, pid=4242, host="login-gone", now=old, stale_after_s=120)
        monitored = subprocess.run(_autoexp(state, "monitor-session", "--session-id", "1"), cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        pager.wait_for(2)
    assert monitored.returncode == 0, monitored.stdout + monitored.stderr
    stale, finished = pager.bodies
    assert stale["kind"] == "monitor_stale" and stale["session_id"] == 1
    assert "monitor pid 4242 on login-gone stopped (last heartbeat 6" in stale["title"]
    assert "stale after 120 s; taken over by monitor pid" in stale["reason"]
    assert finished["kind"] == "session_finished"
    assert "metrics:" not in monitored.stdout

"""`autoexp report` of a real session on the localhost Slurm, opened in a real headless Chromium.

The session: a job whose first attempt prints Megatron-style iteration lines, then a real
NCCL error line and exits 1 (restarted by the shipped policy); the second attempt resumes at
iteration 6 and completes. The monitor runs it as users do (`autoexp run`); the page is then
loaded from disk by the distribution's Chromium through playwright, with no network.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from tests.conftest import unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.browser]

RUN_DEADLINE_S = 120.0
NCCL_LINE = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"
)
# Attempt 1: iterations 1..8, then the NCCL error. Attempt 2: resumes after iteration 5.
JOB_SCRIPT = """\
#!/bin/bash
here="$(dirname "$0")"
n=$(( $(cat "$here/attempts" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$here/attempts"
first=1; last=12
[ "$n" -gt 1 ] && first=6
for i in $(seq $first $last); do
  printf ' [%s] iteration %8d/%8d | consumed samples: %d | lm loss: 2.5E+00 |\\n' "$(date '+%F %T')" "$i" 12 "$i"
  sleep 0.3
  if [ "$n" -eq 1 ] && [ "$i" -eq 8 ]; then echo "{nccl}"; exit 1; fi
done
"""


def playwright_sync_api() -> Any:
    """playwright's sync API; missing fails under CI (scripts/test.sh installs it), else skips."""
    try:
        return importlib.import_module("playwright.sync_api")
    except ImportError as exc:
        unavailable(f"playwright not importable ({exc}); scripts/test.sh installs it")


def chromium_path() -> str:
    """The distribution's Chromium; missing fails under CI (scripts/test.sh installs it), else skips."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium not installed (scripts/test.sh installs it with apt)")
    return found


@pytest.fixture
def session_state(tmp_path: Path) -> Iterator[Path]:
    """A finished two-attempt session on the localhost Slurm; its state dir. Cancels what it left."""
    script = tmp_path / "job.sh"
    script.write_text(JOB_SCRIPT.replace("{nccl}", NCCL_LINE), encoding="utf-8")
    script.chmod(0o755)
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "report", "output_dir": str(tmp_path / "out")},
        "executor": "slurm",
        "backend": {"command": [str(script)]},
        "monitoring": {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5},
    }
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(experiment, sort_keys=False), encoding="utf-8")
    state = tmp_path / "state"
    try:
        done = _autoexp(state, tmp_path, "run", str(config))
        assert done.returncode == 0, done.stdout + done.stderr
        yield state
    finally:
        with SQLiteStore(state) as store:
            ids = [a.executor_job_id for a in store.attempts_for_session(1) if a.executor_job_id]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


def _autoexp(state: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=RUN_DEADLINE_S, check=False)


def test_report_of_a_real_session_renders_in_chromium(session_state: Path, tmp_path: Path) -> None:
    """Every attempt and decision of the session is on the page, a marker opens its evidence, no console error."""
    sync_api = playwright_sync_api()
    page_file = tmp_path / "report.html"
    done = _autoexp(session_state, tmp_path, "report", "1", "--html", str(page_file))
    assert done.returncode == 0, done.stderr
    assert "1 restart(s)" in done.stdout
    with SQLiteStore(session_state) as store:
        job = store.jobs_for_session(1)[0]
        attempts = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    assert [d.action for d in decisions] == ["restart", "stop"]
    assert "http://" not in page_file.read_text() and "https://" not in page_file.read_text()

    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "request",
                lambda r: errors.append(f"fetch {r.url}") if not r.url.startswith("file:") else None,
            )
            page.goto(page_file.as_uri())
            bars = page.eval_on_selector_all("rect.bar", "els => els.map(e => e.dataset.attempt)")
            markers = page.eval_on_selector_all(".marker", "els => els.map(e => e.dataset.decision)")
            assert bars == [str(a.attempt_no) for a in attempts]
            assert markers == [f"0-{d.id}" for d in decisions]
            assert page.locator("rect.bar.failed").count() == 1
            assert page.locator("rect.bar.completed").count() == 1
            assert page.locator("polyline.curve").count() == 2  # one line per attempt's iterations
            restart = page.locator(f"#decision-0-{decisions[0].id}")
            assert not restart.is_visible()
            page.click(".marker.restart")
            assert restart.is_visible()
            assert "NCCL error" in restart.inner_text() and "nccl" in page.inner_text("#restarts-by-cause")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert (tmp_path / "report.png").stat().st_size > 10_000

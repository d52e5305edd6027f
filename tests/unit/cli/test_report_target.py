"""`autoexp report` without --html writes into the state dir, never into the working directory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli.main import main
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.plan.plan import build_plans
from tests.paths import REPO


def _planned_session(state: Path, work: Path) -> None:
    plans = build_plans(load_jobs(str(REPO / "config" / "experiments" / "demo.yaml"), [], []), str(work))
    with SQLiteStore(state) as store:
        create_session(store, plans, name="s", config_path="demo.yaml", now=datetime.now(UTC))


def test_report_without_html_goes_to_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _planned_session(tmp_path / "state", tmp_path / "out")
    assert main(["--state-dir", str(tmp_path / "state"), "report"]) == 0
    page = tmp_path / "state" / "reports" / "report-1.html"
    assert page.is_file() and "<html" in page.read_text(encoding="utf-8").lower()
    out = capsys.readouterr().out
    assert f"wrote {page}" in out
    # Who watches the session: nobody here, said with the command that resumes it (issue 25).
    assert "monitor: NOT RUNNING (none); its jobs are not watched. Resume with:" in out
    assert list(work.iterdir()) == []

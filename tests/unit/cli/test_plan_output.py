"""`autoexp plan` writes nothing, and prints no path of a file it did not write."""

from __future__ import annotations

from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main
from tests.paths import REPO


def test_plan_prints_no_script_path_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(REPO / "config" / "experiments" / "demo.yaml")]) == 0
    out = capsys.readouterr().out
    assert "job.sbatch" not in out and ".sbatch" not in out
    assert "not written" in out
    assert list(tmp_path.iterdir()) == []  # nothing created in the working directory
    assert main(["plan", str(REPO / "config" / "experiments" / "demo.yaml"), "--json"]) == 0
    assert '"script_path"' in capsys.readouterr().out  # the machine-readable form still names it

"""Issue 13 D4/D5: a non-UTF-8 config file and a huge experiment name are one clear line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from oellm_autoexp.cli.main import main

GOOD = {
    "defaults": [{"backend": "command"}, {"slurm": "local"}],
    "experiment": {"name": "exp", "output_dir": "out"},
    "executor": "local",
    "backend": {"command": ["true"]},
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative output dirs land under tmp_path, should a regression submit anything."""
    monkeypatch.chdir(tmp_path)


def submit(tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["--state-dir", str(tmp_path / "state"), "submit", str(config), "--no-monitor"])
    return code, capsys.readouterr().err


def test_non_utf8_config_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """D4: a Latin-1 config file: exit 2, one line naming the file and line, no traceback, nothing submitted."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(GOOD).encode() + "# café\n".encode("latin-1"))
    code, err = submit(tmp_path, path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:" in err and "not UTF-8" in err and "0xe9" in err
    assert not (tmp_path / "state").exists()


def test_huge_experiment_name_is_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """D5: a 100,000-character name: exit 2 before anything is written, one short line naming the key."""
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "experiment": {"name": "x" * 100_000, "output_dir": "out"}}))
    code, err = submit(tmp_path, path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and len(err) < 300 and "Traceback" not in err
    assert "experiment.name" in err and "at most 128 characters" in err and "100,002 characters" in err
    assert not (tmp_path / "state").exists()

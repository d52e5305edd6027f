"""`autoexp ... | head -1`: the command stops quietly when its reader goes away, as `git log | head` does
(no BrokenPipeError traceback, no "Exception ignored" line), for every command that prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli.test_startup_imports import _one_session

ROOT = Path(__file__).resolve().parents[3]
LOG = "\n".join(
    f" [2026-01-01 00:00:{i % 60:02d}] iteration {i}/ 100 | lm loss: 2.0 |" for i in range(1, 4000)
)


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["status", "--help"], ["classify", "{log}"], ["classify", "{log}", "--json"],
     ["config", "schema"], ["sessions"], ["status"], ["status", "--json"], ["explain", "train"]],
)  # fmt: skip
def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path, argv: list[str]) -> None:
    """Its output goes into a pipe whose reader has closed it; stderr stays empty."""
    log = tmp_path / "train.log"
    log.write_text(LOG + "\ntorch.OutOfMemoryError: CUDA out of memory.\n" * 50, encoding="utf-8")
    _one_session(tmp_path / "state")
    args = [a.format(log=log) for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte, as `head -0` would be
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOEXP_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "oellm_autoexp.cli.main", *args], stdout=write_end,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, timeout=120, check=False)  # fmt: skip
    os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    # 141 (128 + SIGPIPE, as a shell reports `git log | head`); argparse's help of a command
    # swallows the closed pipe itself (0). Never 1: a traceback.
    assert done.returncode == (0 if argv[-1] == "--help" and len(argv) > 1 else 141), done.stderr

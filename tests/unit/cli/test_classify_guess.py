"""`autoexp classify FILE` says what a log's words read as when no pattern explains it (issue #26).

The monitor judges a FAILED attempt whose log no pattern explains on that guess
(core/classify/guess.py); `classify` shows the same guess, in text and as the `guess` object of
`--json`, so a user can see beforehand what a failure would be taken for. A log with no telling
line has no guess.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main

DIVERGED = "ERROR:root:training diverged at iteration 120: the loss exploded to 3.1e+38, stopping the run"


def _classify(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *flags: str) -> str:
    log = tmp_path / "attempt.log"
    log.write_text(text, encoding="utf-8")
    assert main(["--state-dir", str(tmp_path / "state"), "classify", *flags, str(log)]) == 0
    return capsys.readouterr().out


def test_classify_prints_what_an_unexplained_line_reads_as(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No pattern names the diverged loss: the report says so and names the guess, its line and p."""
    out = _classify(tmp_path, capsys, f"starting the run\n{DIVERGED}\n")
    assert "  root cause: none found\n" in out
    shown = re.compile(
        r"  if the attempt failed, its words read as numerical_instability \(line 2, p=(0\.9\d|1\.00); "
        r"no pattern matched it\):\n" + re.escape(f"    | {DIVERGED}\n")
    )
    assert shown.search(out), out  # p: the shipped model's posterior, >= MIN_PROBABILITY (0.95)


def test_classify_json_has_the_guess_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json`: no error_type (no pattern), and a `guess` with the class, line, text and probability."""
    report = json.loads(_classify(tmp_path, capsys, f"starting the run\n{DIVERGED}\n", "--json"))
    assert report["error_type"] is None
    guess = report["guess"]
    assert (guess["error_type"], guess["line"], guess["text"]) == ("numerical_instability", 2, DIVERGED)
    assert 0.9 < guess["probability"] <= 1.0, guess


def test_a_log_with_no_telling_line_has_no_guess(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Plain text without error words: `"guess": null`, and the text report names none."""
    text = "starting the run\nsome text\n"
    assert json.loads(_classify(tmp_path, capsys, text, "--json"))["guess"] is None
    assert "its words read as" not in _classify(tmp_path, capsys, text)


def test_a_log_a_pattern_explains_is_not_guessed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line a pattern names (a CUDA OOM) is the root cause: no guess beside it."""
    oom = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    report = json.loads(_classify(tmp_path, capsys, f"{oom}\n{DIVERGED}\n", "--json"))
    assert report["error_type"] == "oom" and report["guess"] is None, report


CATCH_ALL_CUDA = "RuntimeError: the device kernel returned an illegal instruction on the GPU"


def test_classify_names_the_catch_all_a_guess_refines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A raised exception no rule knows is the root cause `exception`; its words read as cuda_error, which
    the report shows as what a failed attempt is taken for, saying it refines the catch-all (`--json`:
    `"refines": "exception"`; an unexplained line's guess refines nothing)."""
    text = f"starting the run\n{CATCH_ALL_CUDA}\n"
    out = _classify(tmp_path, capsys, text)
    assert "  root cause: exception (python, pattern python_exception, line 2)\n" in out, out
    assert (
        "  if the attempt failed, its words read as cuda_error (line 2, p=1.00; a catch-all exception: its "
        f"class and message matched no rule):\n    | {CATCH_ALL_CUDA}\n"
    ) in out, out
    guess = json.loads(_classify(tmp_path, capsys, text, "--json"))["guess"]
    assert (guess["error_type"], guess["line"], guess["refines"]) == ("cuda_error", 2, "exception")
    plain = json.loads(_classify(tmp_path, capsys, f"starting the run\n{DIVERGED}\n", "--json"))["guess"]
    assert plain["refines"] is None

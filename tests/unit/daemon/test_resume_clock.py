"""A resumed attempt's view: rebuilt from its log in blocks, its silence counted from the log's mtime."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.watch.attempt_view import AttemptView
from oellm_autoexp.core.watch.progress import HangConfig, HangKind
from oellm_autoexp.daemon import resume

PATTERNS = load_patterns(["megatron_production"])
HANG = HangConfig(no_output_timeout_s=300)
LINES = [
    f" [2026-11-23 04:00:0{i}] iteration {i:>8}/     100 | lm loss: 2.0E+00 | \u00e9t\u00e9 |"
    for i in range(1, 6)
]


def test_backdated_output_counts_silence_from_when_the_lines_were_written() -> None:
    """Lines read at 10,000 s but written at 8,000 s: the no-output limit (300 s) is passed at once."""
    view = AttemptView(PATTERNS)
    view.read(LINES, 10_000.0)
    assert view.hang_verdict(10_001.0, HANG) is None
    view.backdate_output(8_000.0)
    verdict = view.hang_verdict(10_001.0, HANG)
    assert verdict is not None and verdict.hang is not None and verdict.hang.kind is HangKind.NO_OUTPUT
    assert verdict.hang.waited_s == pytest.approx(2_001.0)


def test_backdating_never_moves_a_clock_forward() -> None:
    """A later time than the reads (a clock that is not the wall clock) changes nothing."""
    view = AttemptView(PATTERNS)
    view.read(LINES, 100.0)
    before = view.tracker
    view.backdate_output(1e12)
    assert view.tracker == before


def _prime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, mtime: float, now: float) -> AttemptView:
    log = tmp_path / "job.log"
    log.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    os.utime(log, (mtime, mtime))
    monkeypatch.setattr(resume, "PRIME_BLOCK_BYTES", 7)  # splits the two-byte `é` across blocks
    live = SimpleNamespace(log_path=str(log), view=AttemptView(PATTERNS), signals_recorded=-1)
    store = SimpleNamespace(load_offset=lambda path: (1, log.stat().st_size))
    resume.prime(store, live, now, read_all=False)
    return live.view


def test_prime_reads_the_log_in_blocks_and_backdates_to_its_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read 7 bytes at a time, the lines come out whole (the `é` intact) and the clock is the file's mtime."""
    view = _prime(tmp_path, monkeypatch, mtime=1_000_000.0, now=1_001_200.0)
    assert view.last_iteration == 5
    last = view.classifier.last_progress
    assert last is not None and last.line == LINES[-1]
    assert view.tracker is not None and view.tracker.last_output_s == 1_000_000.0
    verdict = view.hang_verdict(1_001_200.0, HANG)
    assert verdict is not None and verdict.hang is not None and verdict.hang.kind is HangKind.NO_OUTPUT

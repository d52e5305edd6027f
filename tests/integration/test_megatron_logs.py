"""The `megatron_production` patterns over real megatron-core 0.19.2 logs (2x H200).

The logs in tests/fixtures/logs/megatron/ were recorded by scripts/device/megatron_suite.sh
(the README beside them says how). Lines are found here with plain string tests, independent
of the patterns, and the patterns must agree with them line by line. Root causes are checked
in test_classify_real_logs.py, with every other fixture.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause, root_cause
from oellm_autoexp.core.classify.signals import Signal

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "megatron"
PATTERNS = load_patterns(["megatron_production"])
FAULT_FREE = ["healthy.log", "sigterm_resume.log", "torch_format.log", "walltime_resume.log"]
NUMBER = re.compile(r"\d+")


def _signals(name: str) -> tuple[list[str], list[Signal]]:
    lines = (LOGS / name).read_text().splitlines()
    return lines, classify_lines(lines, PATTERNS)


def _numbers_after(lines: list[str], marker: str) -> list[tuple[int, int]]:
    """(line number, first integer after `marker`) for each line holding it."""
    found = []
    for no, line in enumerate(lines, 1):
        if marker in line:
            found.append((no, int(NUMBER.search(line.split(marker, 1)[1]).group())))
    return found


def _hits(signals: list[Signal], pattern: str) -> list[tuple[int, int]]:
    return [(s.line_no, int(s.groups["iteration"])) for s in signals if s.pattern == pattern]


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_iteration_line_is_progress_with_its_iteration(name: str) -> None:
    """Each Megatron training-log line (`iteration N/ T | consumed samples`) is progress at iteration N."""
    lines, signals = _signals(name)
    expected = [
        (no, it) for no, it in _numbers_after(lines, "] iteration ") if "consumed samples" in lines[no - 1]
    ]
    assert _hits(signals, "megatron_iteration") == expected


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_checkpoint_save_and_load_is_seen(name: str) -> None:
    """Every save start, completed save and load in the log is a progress signal with its iteration."""
    lines, signals = _signals(name)
    assert _hits(signals, "megatron_checkpoint_save_start") == _numbers_after(
        lines, "saving checkpoint at iteration"
    )
    assert _hits(signals, "megatron_checkpoint_saved") == _numbers_after(
        lines, "successfully saved checkpoint from iteration"
    )
    loads = [
        (no, int(line.rsplit(" ", 1)[1])) for no, line in enumerate(lines, 1) if "successfully loaded" in line
    ]
    assert _hits(signals, "megatron_checkpoint_loaded") == loads


@pytest.mark.parametrize("name", FAULT_FREE)
def test_fault_free_logs_hold_no_failure_signal(name: str) -> None:
    """A run that trained to its last iteration shows no line that could be a cause."""
    _, signals = _signals(name)
    causes = [s for s in signals if s.is_cause_candidate]
    assert causes == [], [s.line for s in causes]
    last = [s for s in signals if s.pattern == "megatron_iteration"][-1]
    assert last.groups["iteration"] == last.groups["train_iters"]


def test_healthy_run_saves_every_50_and_finishes() -> None:
    """The 300-iteration run logs every 10 iterations and saves at 50, 100, ... 300."""
    _, signals = _signals("healthy.log")
    assert [it for _, it in _hits(signals, "megatron_iteration")] == [1, *range(10, 301, 10)]
    assert [it for _, it in _hits(signals, "megatron_checkpoint_saved")] == list(range(50, 301, 50))


def test_sigterm_run_saves_then_the_resume_continues_from_that_iteration() -> None:
    """SIGTERM mid-run: a checkpoint at the stop iteration, then the next run loads it and goes on."""
    _, stopped = _signals("sigterm.log")
    _, resumed = _signals("sigterm_resume.log")
    stop_at = _hits(stopped, "megatron_checkpoint_saved")[-1][1]
    assert [s.error_type for s in stopped if s.is_cause_candidate] == ["time_limit"]
    assert _hits(resumed, "megatron_checkpoint_loaded")[0][1] == stop_at
    assert _hits(resumed, "megatron_iteration")[0][1] == stop_at + 1


def test_nan_names_the_iteration_and_the_check_that_failed() -> None:
    """The rerun state machine's line carries the iteration and Megatron's own message."""
    _, signals = _signals("nan.log")
    hits = [s for s in signals if s.pattern == "megatron_rerun_unexpected_result"]
    assert {s.groups["iteration"] for s in hits} == {"3"}
    assert {s.groups["message"] for s in hits} == {"found NaN in local forward loss calculation"}


def test_changed_train_iters_is_a_config_error() -> None:
    """Resuming with another --train-iters stops at load: a config error (no restart fixes it), named by
    the scheduler-mismatch pattern whose description says which flag to set."""
    _, signals = _signals("resume_changed_train_iters.log")
    hit = next(s for s in signals if s.pattern == "scheduler_checkpoint_mismatch")
    assert hit.error_type == "config_error" and "class input value 2640 and checkpointvalue 2400" in hit.line
    cause = log_cause(signals)
    assert cause is not None and cause.error_type == "config_error"


def test_walltime_warning_through_the_rendered_script_stops_and_resumes() -> None:
    """USR1 to the batch shell: forwarded, Megatron saves and exits 0; the same script resumes there."""
    lines, stopped = _signals("walltime_usr1.log")
    _, resumed = _signals("walltime_resume.log")
    forwarded = lines.index("autoexp: forwarding SIGUSR1 to the training processes")
    stop_at = _hits(stopped, "megatron_checkpoint_saved")[-1]
    assert stop_at[0] > forwarded + 1
    assert [s.pattern for s in stopped if s.is_cause_candidate] == ["megatron_exit_on_signal"]
    assert lines[-1] == "autoexp: job step exited with status 0"
    assert _hits(resumed, "megatron_checkpoint_loaded")[0][1] == stop_at[1]


def test_a_survivors_exit_line_does_not_hide_the_peers_failure() -> None:
    """torchrun's SIGTERM can make a surviving rank save and print Megatron's exit line; the kill still wins."""
    killed, _ = _signals("kill9.log")
    exit_line = next(line for line in _signals("sigterm.log")[0] if "exiting program after receiving" in line)
    teardown = next(i for i, line in enumerate(killed) if "closing signal SIGTERM" in line)
    lines = [*killed[: teardown + 1], exit_line, *killed[teardown + 1 :]]
    assert root_cause(classify_lines(lines, PATTERNS)).error_type == "killed"

"""Pure helpers of the workloads: checkpoint names, log lines, bandwidth and balance arithmetic."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from oellm_autoexp.workloads import checkpoint_names as names
from oellm_autoexp.workloads import log_lines, metrics


@pytest.mark.parametrize(
    ("iteration", "expected"),
    [(0, "iter_0000000.pt"), (20, "iter_0000020.pt"), (1234567, "iter_1234567.pt")],
)
def test_checkpoint_name_is_megatron_style(iteration: int, expected: str) -> None:
    """Checkpoint files are named iter_%07d.pt and parse back to their iteration."""
    assert names.checkpoint_name(iteration) == expected
    assert names.parse_iteration(expected) == iteration
    assert names.temporary_name(iteration) == expected + ".tmp"


@pytest.mark.parametrize(
    "name",
    [
        "iter_0000020.pt.tmp",
        "iter_.pt",
        "latest_checkpointed_iteration.txt",
        "iter_0000020.pth",
        "xiter_0000020.pt",
    ],
)
def test_only_complete_checkpoint_names_parse(name: str) -> None:
    """Half-written (.tmp) files and unrelated names are never taken for a checkpoint."""
    assert names.parse_iteration(name) is None


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        ([], None),
        (["iter_0000010.pt", "iter_0000020.pt"], (20, "iter_0000020.pt")),
        (["iter_0000020.pt", "iter_0000030.pt.tmp"], (20, "iter_0000020.pt")),
        (["iter_0000100.pt", "iter_0000020.pt", "iter_0000090.pt"], (100, "iter_0000100.pt")),
        (["iter_0000030.pt.tmp", "latest_checkpointed_iteration.txt"], None),
    ],
)
def test_latest_is_newest_complete(listing: list[str], expected: tuple[int, str] | None) -> None:
    """Resume picks the highest iteration among complete files (numeric, not listing order)."""
    assert names.latest_checkpoint(listing) == expected


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (0, []),
        (3, ["iter_0000010.pt"]),
        (1, ["iter_0000010.pt", "iter_0000020.pt", "iter_0000030.pt"]),
        (9, []),
    ],
)
def test_pruning_keeps_the_newest(keep: int, expected: list[str]) -> None:
    """Pruning deletes only complete checkpoints older than the newest `keep` (0 keeps all)."""
    listing = [
        "iter_0000040.pt",
        "iter_0000010.pt",
        "iter_0000030.pt",
        "iter_0000020.pt",
        "iter_0000050.pt.tmp",
    ]
    assert names.checkpoints_to_delete(listing, keep) == expected


def test_stale_temporaries_are_only_checkpoint_tmp_files() -> None:
    """Leftover .tmp files of checkpoint saves are found; other files are left alone."""
    listing = ["iter_0000050.pt.tmp", "iter_0000040.pt", "notes.tmp", "latest_checkpointed_iteration.txt.tmp"]
    assert names.stale_temporaries(listing) == ["iter_0000050.pt.tmp"]


def test_iteration_line_has_megatron_shape() -> None:
    """The iteration line matches the Megatron-style shape the classifier parses, field by field."""
    stats = log_lines.IterationStats(
        iteration=10,
        total_iterations=100,
        consumed_samples=640,
        elapsed_ms_per_iteration=12.34,
        learning_rate=1e-3,
        global_batch_size=64,
        lm_loss=2.345678,
        grad_norm=0.123,
    )
    line = log_lines.format_iteration_line(stats, datetime(2026, 11, 22, 10, 30, 0))
    assert line.startswith(
        " [2026-11-22 10:30:00] iteration       10/     100 | consumed samples: 640 | "
        "elapsed time per iteration (ms): 12.3 | learning rate: 1.0E-03 | global batch size: 64 | "
        "lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.123 |"
    )
    assert line.endswith("| number of skipped iterations: 0 | number of nan iterations: 0 |")


def test_nan_loss_prints_as_megatron_does() -> None:
    """A NaN loss prints as `lm loss: NAN` (Python's %E of NaN), like Megatron's log."""
    stats = log_lines.IterationStats(5, 10, 80, 1.0, 1e-3, 16, math.nan, math.nan, nan_iterations=1)
    line = log_lines.format_iteration_line(stats, datetime(2026, 11, 22))
    assert "| lm loss: NAN |" in line
    assert "| number of nan iterations: 1 |" in line


def test_checkpoint_lines() -> None:
    """Save/load lines carry the iteration and directory in Megatron's words."""
    assert log_lines.saving_line(20, "ck") == "saving checkpoint at iteration 20 to ck"
    assert log_lines.saved_line(20, "ck").strip() == "successfully saved checkpoint from iteration 20 to ck"
    assert "SIGUSR1 at iteration 7" in log_lines.signal_exit_line(["SIGUSR1"], 7)


@pytest.mark.parametrize(
    ("nbytes", "seconds", "world", "busbw"),
    [
        (1_000_000_000, 1.0, 1, 0.0),
        (1_000_000_000, 1.0, 2, 1.0),
        (1_000_000_000, 1.0, 4, 1.5),
        (1_000_000_000, 0.5, 8, 3.5),
    ],
)
def test_bus_bandwidth_is_nccl_tests_formula(nbytes: int, seconds: float, world: int, busbw: float) -> None:
    """busbw = (bytes / time) * 2(n-1)/n in GB/s, as nccl-tests reports it; 0 for one rank."""
    assert metrics.allreduce_busbw_gbps(nbytes, seconds, world) == pytest.approx(busbw)


def test_gemm_tflops_counts_two_flops_per_multiply_add() -> None:
    """An n^3 product is 2n^3 FLOPs: 1000 products of 1000^3 in 2 s are 1 TFLOP/s."""
    assert metrics.gemm_tflops(1000, 1000, 1000, 1000, 2.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("losses", "ok"),
    [
        ([1.0, 0.4], True),
        ([1.0, 0.6], False),
        ([1.0], False),
        ([math.nan, 0.1], False),
        ([1.0, math.nan], False),
    ],
)
def test_loss_decreased(losses: list[float], ok: bool) -> None:
    """The smoke check passes only when the last loss is finite and below half the first."""
    assert metrics.loss_decreased(losses, 0.5) is ok


def test_round_robin_and_balance() -> None:
    """Workers are dealt round-robin over devices; balance is min/max of the per-device counts."""
    assert metrics.round_robin(5, ["cuda:0", "cuda:1"]) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert metrics.device_balance({"cuda:0": 3, "cuda:1": 2}) == pytest.approx(2 / 3)
    assert metrics.device_balance({"cuda:0": 0, "cuda:1": 0}) == 0.0
    with pytest.raises(ValueError):
        metrics.round_robin(2, [])


def test_slow_steps_and_fault_once_arguments() -> None:
    """`--slow-steps 100-140:5` reads as a span and a delay; a malformed one is refused by the parser."""
    from oellm_autoexp.workloads.train import build_parser

    args = build_parser().parse_args(
        ["--ckpt-dir", "c", "--slow-steps", "100-140:5", "--fault-once-file", "f"]
    )
    assert args.slow_steps == (100, 140, 5.0) and str(args.fault_once_file) == "f"
    assert build_parser().parse_args(["--ckpt-dir", "c", "--slow-steps", "7:0.5"]).slow_steps == (7, 7, 0.5)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--ckpt-dir", "c", "--slow-steps", "soon"])


def test_a_counted_fault_fires_as_many_times_as_asked_then_never(tmp_path: Path) -> None:
    from oellm_autoexp.workloads import faults

    marker = tmp_path / "fired"
    assert [faults.armed(marker, times=2) for _ in range(4)] == [True, True, False, False]
    assert marker.read_text() == "2"
    assert faults.armed(None) is True  # no marker: every time


def test_a_fault_asked_through_the_environment_is_parsed_or_refused(tmp_path: Path) -> None:
    from oellm_autoexp.workloads import faults

    asked = faults.from_env({"AUTOEXP_FAULT": "raise_and_linger@120:1", "AUTOEXP_FAULT_ONCE_FILE": "f"})
    assert asked == faults.EnvFault(faults.Fault.RAISE_AND_LINGER, (120,), 1, Path("f"))
    assert faults.from_env({}) is None
    with pytest.raises(ValueError, match=r"FAULT@ITERATION\[,ITERATION\.\.\.\]:RANK"):
        faults.from_env({"AUTOEXP_FAULT": "melt@1:0"})


def test_a_listed_fault_fires_once_at_each_iteration_in_turn(tmp_path: Path) -> None:
    """`kill@91,75:1` with a once file: the first firing at 91, the next (a later attempt) at 75, then never."""
    from oellm_autoexp.workloads import faults

    marker = tmp_path / "fired"
    asked = faults.from_env({"AUTOEXP_FAULT": "kill@91,75:1", "AUTOEXP_FAULT_ONCE_FILE": str(marker)})
    assert asked is not None and asked.at_steps == (91, 75) and asked.at_step == 91
    assert asked.armed() and asked.at_step == 75
    assert asked.armed() and asked.at_step == 75  # the last one stays named, but is spent:
    assert not asked.armed() and marker.read_text() == "2"


def test_the_guard_fault_exits_1_with_a_line_no_pattern_knows_and_no_sure_guess(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The `guard` fault is the user's own code giving up: one ERROR log line in its words, exit 1,
    no traceback. No shipped pattern matches it. Until session 14 the word model guessed it `nccl`
    (p=0.972); since the store's and the old sockets' `connection reset by peer` joined the catalogs as
    rendezvous lines, and the smoothing moved to 0.03 by cross-validation, its words are split (healthy
    0.60, nccl 0.37): no guess, and a FAILED attempt's log of it is the silent death the monitor restarts."""
    import torch

    from oellm_autoexp.adapters.logs.pattern_files import load_patterns
    from oellm_autoexp.core.classify.classifier import Classifier
    from oellm_autoexp.core.classify.guess import guessed_cause
    from oellm_autoexp.workloads import faults

    with pytest.raises(SystemExit) as ended:
        faults.inject(faults.Fault.GUARD, 120, 1, torch.device("cpu"), torch.nn.Linear(1, 1))
    assert ended.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [
        "ERROR:train.guard:lost the connection to the data server at iteration 120 "
        "(connection reset by peer); stopping the run"
    ]
    patterns = load_patterns()
    classifier = Classifier(patterns)
    classifier.feed(lines)
    assert classifier.signals == []
    assert guessed_cause(classifier, patterns) is None


def test_the_file_gone_fault_raises_pythons_own_file_not_found_error_read_as_a_configuration_error() -> None:
    """`file_gone` opens a dataset index that is not there: Python's FileNotFoundError, which the
    shipped patterns read as a configuration error (docs/restart_policy.md: config_error_after_training)."""
    import torch

    from oellm_autoexp.adapters.logs.pattern_files import load_patterns
    from oellm_autoexp.core.classify.classifier import Classifier
    from oellm_autoexp.workloads import faults

    with pytest.raises(FileNotFoundError) as raised:
        faults.inject(faults.Fault.FILE_GONE, 120, 1, torch.device("cpu"), torch.nn.Linear(1, 1))
    line = f"FileNotFoundError: {raised.value}"
    assert "No such file or directory" in line and "shard_00120.idx" in line
    classifier = Classifier(load_patterns())
    classifier.feed([line])
    assert [s.error_type for s in classifier.signals] == ["config_error"]

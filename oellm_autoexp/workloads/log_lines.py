"""The lines the training workload prints, in Megatron-LM's shape. Pure formatting.

The supervisor's classifier reads these lines from real job logs, so their shape is a
contract: the iteration line is

 [2026-11-22 10:30:00] iteration       10/     100 | consumed samples: 640 | elapsed time per
 iteration (ms): 12.3 | learning rate: 1.0E-03 | global batch size: 64 | lm loss: 2.345678E+00 |
 loss scale: 1.0 | grad norm: 0.123 | number of skipped iterations: 0 | number of nan iterations: 0 |

(one line), and a NaN loss prints as `lm loss: NAN` like Megatron's `{:.6E}` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class IterationStats:
    """What one logged iteration reports; times in milliseconds, loss averaged over ranks."""

    iteration: int
    total_iterations: int
    consumed_samples: int
    elapsed_ms_per_iteration: float
    learning_rate: float
    global_batch_size: int
    lm_loss: float
    grad_norm: float
    loss_scale: float = 1.0
    skipped_iterations: int = 0
    nan_iterations: int = 0


def timestamp(now: datetime) -> str:
    """Megatron's `[YYYY-mm-dd HH:MM:SS]` prefix."""
    return now.strftime("[%Y-%m-%d %H:%M:%S]")


def format_iteration_line(stats: IterationStats, now: datetime) -> str:
    """One Megatron-style iteration line (leading space, fields separated by ` | `)."""
    fields = [
        f"iteration {stats.iteration:8d}/{stats.total_iterations:8d}",
        f"consumed samples: {stats.consumed_samples}",
        f"elapsed time per iteration (ms): {stats.elapsed_ms_per_iteration:.1f}",
        f"learning rate: {stats.learning_rate:.1E}",
        f"global batch size: {stats.global_batch_size}",
        f"lm loss: {stats.lm_loss:.6E}",
        f"loss scale: {stats.loss_scale:.1f}",
        f"grad norm: {_grad_norm(stats.grad_norm)}",
        f"number of skipped iterations: {stats.skipped_iterations}",
        f"number of nan iterations: {stats.nan_iterations}",
    ]
    return f" {timestamp(now)} " + " | ".join(fields) + " |"


def _grad_norm(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else f"{value:.3E}"


def saving_line(iteration: int, ckpt_dir: str) -> str:
    return f"saving checkpoint at iteration {iteration} to {ckpt_dir}"


def saved_line(iteration: int, ckpt_dir: str) -> str:
    return f"  successfully saved checkpoint from iteration {iteration} to {ckpt_dir}"


def loading_line(iteration: int, ckpt_dir: str) -> str:
    return f" loading checkpoint from {ckpt_dir} at iteration {iteration}"


def loaded_line(iteration: int, ckpt_dir: str) -> str:
    return f"  successfully loaded checkpoint from {ckpt_dir} at iteration {iteration}"


def no_checkpoint_lines(ckpt_dir: str, tracker: str) -> list[str]:
    """Megatron's two lines for a first start with an empty checkpoint directory."""
    return [
        f"WARNING: could not find the metadata file {ckpt_dir}/{tracker}",
        "    will not load any checkpoints and will start from random",
    ]


def signal_exit_line(signal_names: list[str], iteration: int) -> str:
    joined = "+".join(signal_names)
    return f"exiting program after receiving {joined} at iteration {iteration} (checkpoint saved)"


def nan_abort_message(rank: int, iteration: int, local_loss: float, device: str, node: str) -> str:
    """The abort message for a NaN loss, in the words of Megatron's NaN check."""
    return (
        f"Rank {rank}: found NaN in lm loss at iteration {iteration} "
        f"(local loss {local_loss}). Device: {device}, node: {node}"
    )

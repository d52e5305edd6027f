"""Train a tiny language model with DDP on synthetic data; checkpoint, resume, inject faults.

    python -m oellm_autoexp.workloads.train --steps 100 --save-interval 10 --ckpt-dir DIR
    torchrun --nproc_per_node=2 -m oellm_autoexp.workloads.train --steps 100 --ckpt-dir DIR

Exit codes: 0 finished all steps; 75 stopped by SIGUSR1/SIGTERM after a checkpoint at the
stop iteration (resubmit to continue); 1 an exception (crash, OOM, NaN loss, collective
timeout); 2 bad arguments; killed by SIGKILL/SIGSEGV: -9/-11 (137/139 from a shell).

Every iteration all ranks all-reduce [loss, SIGUSR1 seen, SIGTERM seen], so they agree on
the loss they log and on the iteration at which they stop.
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel

from oellm_autoexp.workloads import checkpoint, distributed, faults, log_lines
from oellm_autoexp.workloads.checkpoint_names import checkpoint_name
from oellm_autoexp.workloads.defaults import (
    DEFAULT_KEEP_LAST,
    DEFAULT_PG_TIMEOUT_S,
    EXIT_COMPLETED,
    EXIT_STOPPED_BY_SIGNAL,
    TRACKER_FILENAME,
)
from oellm_autoexp.workloads.models import TinyLM, synthetic_tokens

_STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oellm_autoexp.workloads.train", description=__doc__)
    p.add_argument("--steps", type=int, default=100, help="total iterations of the run")
    p.add_argument("--save-interval", type=int, default=10, help="checkpoint every N iterations")
    p.add_argument("--ckpt-dir", type=Path, required=True, help="checkpoint directory (shared by ranks)")
    p.add_argument("--keep-last", type=int, default=DEFAULT_KEEP_LAST, help="checkpoints kept; 0 = all")
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--micro-batch-size", type=int, default=8, help="samples per rank per iteration")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--step-time-s", type=float, default=0.0, help="sleep this long in every iteration")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--pg-timeout-s", type=float, default=DEFAULT_PG_TIMEOUT_S, help="collective timeout")
    p.add_argument("--fault", type=faults.Fault, choices=list(faults.Fault), default=faults.Fault.NONE)
    p.add_argument("--fault-at-step", type=int, default=0, help="iteration at whose start it fires")
    p.add_argument(
        "--fault-once-file",
        type=Path,
        help="fire only if this file does not exist, and create it first (a resumed attempt runs clean)",
    )
    p.add_argument(
        "--fault-times",
        type=int,
        default=1,
        help="with --fault-once-file: fire this many times in all (the file counts them)",
    )
    p.add_argument(
        "--load-on-main",
        action="store_true",
        help="rank 0 alone reads the checkpoint and broadcasts it (as FSDP's sync_module_states does)",
    )
    p.add_argument(
        "--slow-steps",
        type=_slow_steps,
        help="FIRST-LAST:SECONDS: these iterations sleep SECONDS more (a slow stretch of a healthy run)",
    )
    p.add_argument("--fault-rank", type=int, default=0, help="rank that fails; -1 = every rank")
    return p


def _slow_steps(text: str) -> tuple[int, int, float]:
    try:
        span, _, seconds = text.partition(":")
        first, _, last = span.partition("-")
        return int(first), int(last or first), float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST:SECONDS, got {text!r}") from None


class StopRequest:
    """Signals asked to stop, recorded by the handler; acted on at the next iteration's end."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def install(self) -> None:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.seen.add(signum)

    def flags(self) -> list[float]:
        return [float(s in self.seen) for s in _STOP_SIGNALS]


class Trainer:
    """The training loop of one rank."""

    def __init__(self, args: argparse.Namespace, ctx: distributed.DistContext, stop: StopRequest):
        self.args, self.ctx, self.stop = args, ctx, stop
        torch.manual_seed(args.seed)
        self.model = TinyLM(args.vocab, args.hidden).to(ctx.device)
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        self.global_batch = args.micro_batch_size * ctx.world_size
        self.iteration = 0
        self.consumed = 0
        self.last_saved = -1

    def log(self, line: str) -> None:
        if self.ctx.is_main:
            print(line, flush=True)

    def resume(self) -> None:
        ckpt_dir = self.args.ckpt_dir
        if self.ctx.is_main:
            for name in checkpoint.remove_stale_temporaries(ckpt_dir):
                print(f"removed incomplete checkpoint {ckpt_dir / name}", flush=True)
            found = checkpoint.find_latest(ckpt_dir)
            chosen = found[0] if found else -1
        else:
            chosen = 0
        # Rank 0 decides, so every rank loads the same file even if a listing races.
        picked = torch.tensor([chosen], dtype=torch.long, device=self.ctx.device)
        dist.broadcast(picked, src=0)
        iteration = int(picked.item())
        if iteration < 0:
            for line in log_lines.no_checkpoint_lines(str(ckpt_dir), TRACKER_FILENAME):
                self.log(line)
            return
        self.log(log_lines.loading_line(iteration, str(ckpt_dir)))
        path = ckpt_dir / checkpoint_name(iteration)
        state = self._load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.iteration = self.last_saved = int(state["iteration"])
        self.consumed = int(state["consumed_samples"])
        self.log(log_lines.loaded_line(iteration, str(ckpt_dir)))

    def _load(self, path: Path) -> dict[str, Any]:
        if not self.args.load_on_main:
            return checkpoint.load(path, self.ctx.device)
        # One reader: a load that fails on rank 0 leaves the others blocked in the broadcast.
        box: list[Any] = [checkpoint.load(path, torch.device("cpu")) if self.ctx.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return cast(dict[str, Any], box[0])

    def save(self) -> None:
        ckpt_dir, it = self.args.ckpt_dir, self.iteration
        self.log(log_lines.saving_line(it, str(ckpt_dir)))
        if self.ctx.is_main:
            state = {
                "iteration": it,
                "consumed_samples": self.consumed,
                "world_size": self.ctx.world_size,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }
            checkpoint.save(ckpt_dir, it, state, self.args.keep_last)
        dist.barrier()  # the file is complete on disk before any rank goes on
        self.last_saved = it
        self.log(log_lines.saved_line(it, str(ckpt_dir)))

    def step(self, iteration: int) -> tuple[float, float, list[str]]:
        """One iteration; returns (mean loss, grad norm, stop signals every rank agrees on)."""
        a, ctx = self.args, self.ctx
        if faults.is_due(a.fault, a.fault_at_step, a.fault_rank, iteration, ctx.rank) and self._fault_armed():
            faults.inject(a.fault, iteration, ctx.rank, ctx.device, self.model)
        x, y = synthetic_tokens(a.seed, iteration, ctx.rank, a.micro_batch_size, a.seq_len, a.vocab)
        logits = self.ddp(x.to(ctx.device))
        loss = functional.cross_entropy(logits.flatten(0, 1), y.to(ctx.device).flatten())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.clip_grad)
        if a.step_time_s > 0:
            time.sleep(a.step_time_s)
        if a.slow_steps and a.slow_steps[0] <= iteration <= a.slow_steps[1]:
            time.sleep(a.slow_steps[2])
        stats = torch.tensor([loss.item(), *self.stop.flags()], device=ctx.device)
        dist.all_reduce(stats)
        values = stats.tolist()
        mean_loss = values[0] / ctx.world_size
        if not math.isfinite(mean_loss):
            self._abort_on_nan(iteration, loss.item(), float(grad_norm))
        self.optimizer.step()
        names = [s.name for s, n in zip(_STOP_SIGNALS, values[1:], strict=True) if n > 0]
        return mean_loss, float(grad_norm), names

    def _fault_armed(self) -> bool:
        """With --fault-once-file, only the first --fault-times attempts that get here inject it."""
        return faults.armed(self.args.fault_once_file, self.args.fault_times)

    def _abort_on_nan(self, iteration: int, local_loss: float, grad_norm: float) -> None:
        self.log(self._line(iteration, float("nan"), grad_norm, 0.0, nan_iterations=1))
        raise RuntimeError(
            log_lines.nan_abort_message(
                self.ctx.rank, iteration, local_loss, str(self.ctx.device), distributed.node_name()
            )
        )

    def _line(self, iteration: int, loss: float, grad_norm: float, ms: float, nan_iterations: int = 0) -> str:
        stats = log_lines.IterationStats(
            iteration=iteration,
            total_iterations=self.args.steps,
            consumed_samples=self.consumed,
            elapsed_ms_per_iteration=ms,
            learning_rate=self.args.lr,
            global_batch_size=self.global_batch,
            lm_loss=loss,
            grad_norm=grad_norm,
            nan_iterations=nan_iterations,
        )
        return log_lines.format_iteration_line(stats, datetime.now())

    def run(self) -> int:
        a = self.args
        self.resume()
        if self.iteration >= a.steps:
            self.log(f"nothing to do: checkpoint at iteration {self.iteration} >= --steps {a.steps}")
            return EXIT_COMPLETED
        self.log(
            f"> training iterations {self.iteration + 1}..{a.steps}, global batch size {self.global_batch}"
        )
        window_start, window_iters = time.perf_counter(), 0
        while self.iteration < a.steps:
            iteration = self.iteration + 1
            loss, grad_norm, stop_names = self.step(iteration)
            self.iteration, self.consumed = iteration, self.consumed + self.global_batch
            window_iters += 1
            if iteration % a.log_interval == 0 or stop_names:
                ms = (time.perf_counter() - window_start) * 1000 / window_iters
                self.log(self._line(iteration, loss, grad_norm, ms))
                window_start, window_iters = time.perf_counter(), 0
            if iteration % a.save_interval == 0 or iteration == a.steps:
                self.save()
            if stop_names and iteration < a.steps:  # at the last step, finishing is the better stop
                if self.last_saved != iteration:
                    self.save()
                self.log(log_lines.signal_exit_line(stop_names, iteration))
                return EXIT_STOPPED_BY_SIGNAL
        self.log(f"[after training is done] {log_lines.timestamp(datetime.now())}")
        return EXIT_COMPLETED


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    faulthandler.enable()  # a SIGSEGV/SIGABRT prints every thread's Python stack
    stop = StopRequest()
    stop.install()
    ctx = distributed.init(args.device, args.pg_timeout_s)
    if not -1 <= args.fault_rank < ctx.world_size:
        build_parser().error(f"--fault-rank {args.fault_rank} outside world size {ctx.world_size}")
    if ctx.is_main:
        print(f"> initialized torch distributed: {distributed.describe(ctx)}", flush=True)
    code = Trainer(args, ctx, stop).run()
    # The decision is made: a launcher's SIGTERM, or a walltime warning sent again, during
    # teardown must not turn 75/0 into -15/-10 (Python restores SIG_DFL for handled signals
    # while it finalizes; SIG_IGN stays).
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    distributed.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())

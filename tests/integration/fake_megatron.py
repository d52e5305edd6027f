"""A stand-in for one rank of oellm_autoexp.workloads.megatron_gpt, for CPU dry runs of the wiring.

    torchrun --nproc_per_node=2 tests/integration/fake_megatron.py --train-iters 300 --save D --load D

It takes Megatron's flags (ignoring those it does not model), sleeps --fake-step-s per
iteration, prints an iteration line every --log-interval, "saves" a tracker file every
--save-interval, resumes from it, and with --exit-signal-handler saves and exits 0 on
SIGTERM. A --micro-batch-size above --fake-max-micro-batch "runs out of memory" (a
one-line stand-in for torch's OOM error, exit 1). With --fake-eval-s it "evaluates" as
Megatron's loop does: silent for that long after the log line of every --eval-interval-th
iteration (when --eval-iters > 0), then the validation line. --fake-stall-at N stops after
iteration N and prints nothing more, as a rank blocked in a collective. Nothing it prints is
a fixture: real logs come from the real entry point.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--save", type=Path)
    p.add_argument("--load", type=Path)
    p.add_argument("--save-interval", type=int, default=50)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--exit-signal-handler", action="store_true")
    p.add_argument("--fake-step-s", type=float, default=0.05)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--fake-max-micro-batch", type=int, default=64)
    p.add_argument("--eval-interval", type=int, default=1000)
    p.add_argument("--eval-iters", type=int, default=100)
    p.add_argument("--fake-eval-s", type=float, default=0.0)
    p.add_argument("--fake-stall-at", type=int)
    args, _ = p.parse_known_args()
    rank = int(os.environ.get("RANK", "0"))
    if args.micro_batch_size > args.fake_max_micro_batch:
        print(
            f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 GiB. "
            f"GPU {rank} has a total capacity of 139.80 GiB of which 120.00 GiB is free. (fake_megatron)",
            flush=True,
        )
        return 1
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, _on_term)
    tracker = args.load / "latest_checkpointed_iteration.txt" if args.load else None
    start = int(tracker.read_text()) if tracker and tracker.exists() else 0
    if start and rank == 0:
        print(f"  successfully loaded checkpoint from {args.load} at iteration {start}", flush=True)
    for it in range(start + 1, args.train_iters + 1):
        time.sleep(args.fake_step_s)
        if rank == 0 and it % args.log_interval == 0:
            print(f" iteration {it:8d}/{args.train_iters:8d} | lm loss: 1.0E+00 |", flush=True)
        if args.fake_eval_s and args.eval_iters > 0 and it % args.eval_interval == 0:
            _evaluate(it, args.fake_eval_s, rank)
        if it == args.fake_stall_at:
            while True:  # hung: no line, no exit, whatever signal the handler noted
                time.sleep(60)
        if _stop or it % args.save_interval == 0 or it == args.train_iters:
            _save(args.save, it, rank)
        if _stop:
            if rank == 0:
                print("exiting program after receiving SIGTERM.", flush=True)
            return 0
    return 0


def _evaluate(iteration: int, seconds: float, rank: int) -> None:
    """Megatron's evaluation pass: nothing printed while it runs, its box of lines after it."""
    time.sleep(seconds)
    if rank == 0:
        rule = "-" * 90
        print(
            f"{rule}\n validation loss at iteration {iteration} | lm loss value: 1.0E+00 |\n{rule}",
            flush=True,
        )


def _save(folder: Path | None, iteration: int, rank: int) -> None:
    if folder is None or rank != 0:
        return
    (folder / f"iter_{iteration:07d}").mkdir(parents=True, exist_ok=True)
    (folder / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    print(f"  successfully saved checkpoint from iteration {iteration:7d} to {folder}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

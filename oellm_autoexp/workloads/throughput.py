"""Training throughput on synthetic data: ResNet-50/ResNet-18 or a GPT-shaped transformer.

    python -m oellm_autoexp.workloads.throughput --model resnet50 --results results.json
    torchrun --nproc_per_node=8 -m oellm_autoexp.workloads.throughput --model transformer

Runs --warmup iterations (not timed), then --iters timed ones (DDP, SGD/AdamW, bf16
autocast on GPU by default), and rank 0 writes results.json with: model, world_size,
batch_size_per_gpu, global_batch_size, total_time_seconds, average_step_time_seconds,
throughput_samples_per_second, device, backend (and a few descriptive extras).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel

from oellm_autoexp.workloads import distributed, metrics
from oellm_autoexp.workloads.defaults import DEFAULT_PG_TIMEOUT_S
from oellm_autoexp.workloads.models import Transformer, parameter_count, resnet18, resnet50

MODELS = ("resnet50", "resnet18", "transformer")
RESULT_KEYS = (
    "model",
    "world_size",
    "batch_size_per_gpu",
    "global_batch_size",
    "total_time_seconds",
    "average_step_time_seconds",
    "throughput_samples_per_second",
    "device",
    "backend",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oellm_autoexp.workloads.throughput", description=__doc__)
    p.add_argument("--model", choices=MODELS, default="resnet50")
    p.add_argument("--batch-size-per-gpu", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto", help="auto: bf16 on GPU")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--results", type=Path, default=Path("results.json"))
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--pg-timeout-s", type=float, default=DEFAULT_PG_TIMEOUT_S)
    return p


def build(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, Callable[[], tuple]]:
    """(model, batch maker) for --model; batches are random and built once on the device."""
    b = args.batch_size_per_gpu
    if args.model == "transformer":
        model = Transformer(args.vocab, args.hidden, args.layers, args.heads, args.seq_len)
        tokens = torch.randint(0, args.vocab, (b, args.seq_len + 1), device=device)
        batch = (tokens[:, :-1], tokens[:, 1:])
    else:
        model = resnet50() if args.model == "resnet50" else resnet18()
        images = torch.randn(b, 3, args.image_size, args.image_size, device=device)
        batch = (images, torch.randint(0, 1000, (b,), device=device))
    model = model.to(device)
    if device.type == "cuda" and args.model != "transformer":
        model = model.to(memory_format=torch.channels_last)
        batch = (batch[0].contiguous(memory_format=torch.channels_last), batch[1])
    return model, lambda: batch


def loss_of(model: nn.Module, batch: tuple, is_lm: bool) -> torch.Tensor:
    inputs, targets = batch
    out = model(inputs)
    if is_lm:
        return functional.cross_entropy(out.flatten(0, 1).float(), targets.flatten())
    return functional.cross_entropy(out.float(), targets)


def benchmark(args: argparse.Namespace, ctx: distributed.DistContext) -> dict[str, Any]:
    model, next_batch = build(args, ctx.device)
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)
    is_lm = args.model == "transformer"
    opt = (
        torch.optim.AdamW(model.parameters(), lr=1e-4)
        if is_lm
        else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    precision = (
        args.precision if args.precision != "auto" else ("bf16" if ctx.device.type == "cuda" else "fp32")
    )
    autocast = (
        torch.autocast(ctx.device.type, dtype=torch.bfloat16)
        if precision == "bf16"
        else contextlib.nullcontext()
    )

    def step() -> None:
        with autocast:
            loss = loss_of(ddp, next_batch(), is_lm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    distributed.synchronize(ctx.device)
    torch.distributed.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        step()
    distributed.synchronize(ctx.device)
    local = time.perf_counter() - t0
    slowest = torch.tensor([local], dtype=torch.float64, device=ctx.device)
    torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)
    total = float(slowest.item())
    global_batch = args.batch_size_per_gpu * ctx.world_size
    gpu_name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else None
    return {
        "model": args.model,
        "world_size": ctx.world_size,
        "batch_size_per_gpu": args.batch_size_per_gpu,
        "global_batch_size": global_batch,
        "total_time_seconds": total,
        "average_step_time_seconds": total / args.iters,
        "throughput_samples_per_second": metrics.samples_per_second(global_batch, args.iters, total),
        "device": ctx.device.type,
        "backend": ctx.backend,
        "gpu_name": gpu_name,
        "precision": precision,
        "warmup_iterations": args.warmup,
        "measured_iterations": args.iters,
        "parameters": parameter_count(model),
        "input": f"seq_len {args.seq_len}" if is_lm else f"{args.image_size}x{args.image_size} images",
        "torch": torch.__version__,
        "date": datetime.now().isoformat(timespec="seconds"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx = distributed.init(args.device, args.pg_timeout_s)
    result = benchmark(args, ctx)
    if ctx.is_main:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"[THROUGHPUT] {result['model']} x {ctx.world_size} {result['device']} ({result['precision']}): "
            f"{result['throughput_samples_per_second']:.1f} samples/s, "
            f"{result['average_step_time_seconds'] * 1e3:.1f} ms/step, global batch {result['global_batch_size']}",
            flush=True,
        )
        print(f"results written to {args.results}", flush=True)
    distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU cluster acceptance suite: is this allocation fit to train on?

    python -m oellm_autoexp.workloads.acceptance --report report.json
    torchrun --nproc_per_node=8 -m oellm_autoexp.workloads.acceptance --report report.json

Sections, printed by rank 0:
  [ENV]     torch/CUDA/NCCL versions, GPUs, world size, launcher variables
  [COMPUTE] per-GPU GEMM throughput in bf16 and fp16 (TFLOP/s, random data, CUDA events)
  [TRAIN]   a small regression trained on each rank's device: the loss must fall
  [DDP]     all-reduce correctness and bus bandwidth; DDP training across ranks (loss falls,
            parameters identical on every rank). Needs a launcher with world size > 1.
  [RESULT]  SUCCESS (exit 0) or FAILURE: <reasons> (exit 1)

With no GPU it says so, skips the GPU parts, still runs the CPU-capable ones and exits 0
when they pass. The JSON report (--report) holds every number printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from oellm_autoexp.workloads import distributed, metrics
from oellm_autoexp.workloads.defaults import (
    DEFAULT_ALLREDUCE_MB_CPU,
    DEFAULT_ALLREDUCE_MB_GPU,
    DEFAULT_GEMM_SIZE,
    DEFAULT_MIN_GEMM_TFLOPS,
    DEFAULT_PG_TIMEOUT_S,
    TRAIN_SMOKE_MIN_DROP,
)

_GPU_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_ENV_PREFIXES = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NTASKS", "NCCL_")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oellm_autoexp.workloads.acceptance", description=__doc__)
    p.add_argument("--report", type=Path, help="write the JSON report here (rank 0)")
    p.add_argument("--gemm-size", type=int, default=DEFAULT_GEMM_SIZE)
    p.add_argument("--gemm-iters", type=int, default=50)
    p.add_argument("--min-gemm-tflops", type=float, default=DEFAULT_MIN_GEMM_TFLOPS)
    p.add_argument("--allreduce-mb", type=float, help="buffer per rank (default 256 GPU, 8 CPU)")
    p.add_argument("--allreduce-iters", type=int, default=20)
    p.add_argument("--min-busbw-gbps", type=float, default=0.0, help="0: report only")
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--pg-timeout-s", type=float, default=DEFAULT_PG_TIMEOUT_S)
    return p


class Suite:
    """Runs the sections on one rank; every rank ends with the same result and report."""

    def __init__(self, args: argparse.Namespace, ctx: distributed.DistContext) -> None:
        self.args, self.ctx = args, ctx
        self.gpu = ctx.device.type == "cuda"
        self.failures: list[str] = []
        self.report: dict[str, Any] = {"date": datetime.now().isoformat(timespec="seconds")}

    def say(self, section: str, text: str) -> None:
        if self.ctx.is_main:
            print(f"[{section}] {text}", flush=True)

    def check(self, ok: bool, section: str, text: str) -> None:
        self.say(section, f"{text} {'✓' if ok else '✗'}")
        if not ok:
            self.failures.append(f"{section}: {text}")

    def run(self) -> int:
        for name, section in (
            ("env", self.env),
            ("compute", self.compute),
            ("train", self.train),
            ("ddp", self.ddp),
        ):
            self.report[name] = section()
        self.report["result"] = "SUCCESS" if not self.failures else "FAILURE"
        self.report["failures"] = self.failures
        if self.ctx.is_main and self.args.report:
            self.args.report.parent.mkdir(parents=True, exist_ok=True)
            self.args.report.write_text(json.dumps(self.report, indent=2) + "\n")
            print(f"report written to {self.args.report}", flush=True)
        self.say("RESULT", "SUCCESS" if not self.failures else "FAILURE: " + "; ".join(self.failures))
        return 0 if not self.failures else 1

    def env(self) -> dict[str, Any]:
        info = environment(self.ctx)
        self.say("ENV", f"host {info['host']}, python {info['python']}, torch {info['torch']}")
        self.say(
            "ENV",
            f"cuda {info['cuda']}, nccl {info['nccl']}, world size {self.ctx.world_size}, backend {self.ctx.backend}",
        )
        for gpu in info["gpus"]:
            self.say("ENV", f"GPU {gpu['index']}: {gpu['name']}, {gpu['memory_gib']:.1f} GiB")
        if not info["gpus"]:
            self.say("ENV", "no GPU visible (torch.cuda.is_available() is False): GPU checks skipped")
        for key, value in info["launcher_env"].items():
            self.say("ENV", f"{key}={value}")
        return info

    def compute(self) -> dict[str, Any]:
        if not self.gpu:
            seconds = time_cpu_gemm(512, 10)
            gflops = metrics.gemm_tflops(512, 512, 512, 10, seconds) * 1e3
            self.say(
                "COMPUTE",
                f"GPU GEMM skipped: no GPU; CPU fp32 GEMM 512: {gflops:.1f} GFLOP/s (informational)",
            )
            return {"skipped": "no GPU", "cpu_fp32_gflops": gflops}
        devices = self._my_gpus()
        mine = [
            gemm_result(d, dt, self.args.gemm_size, self.args.gemm_iters)
            for d in devices
            for dt in _GPU_DTYPES
        ]
        results = [r for part in gather(mine, self.ctx.world_size) for r in part]
        for r in sorted(results, key=lambda r: (r["host"], r["gpu"], r["dtype"])):
            ok = r["tflops"] >= self.args.min_gemm_tflops
            label = f"{r['host']} GPU {r['gpu']} {r['name']} {r['dtype']} GEMM {r['size']}^3"
            self.check(
                ok, "COMPUTE", f"{label}: {r['tflops']:.1f} TFLOP/s (min {self.args.min_gemm_tflops:g})"
            )
        return {"gemm": results, "min_tflops": self.args.min_gemm_tflops}

    def _my_gpus(self) -> list[torch.device]:
        if self.ctx.world_size == 1:  # one process: every visible GPU in turn
            return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
        return [self.ctx.device]

    def train(self) -> dict[str, Any]:
        losses = train_smoke(self.ctx.device, self.args.train_steps)
        results = gather(
            {"rank": self.ctx.rank, "device": str(self.ctx.device), "losses": losses}, self.ctx.world_size
        )
        for r in results:
            ok = metrics.loss_decreased(r["losses"], TRAIN_SMOKE_MIN_DROP)
            first, last = r["losses"][0], r["losses"][-1]
            self.check(
                ok,
                "TRAIN",
                f"rank {r['rank']} on {r['device']}: loss {first:.4f} -> {last:.4f} in {len(r['losses'])} steps",
            )
        return {"runs": [{**r, "losses": [r["losses"][0], r["losses"][-1]]} for r in results]}

    def ddp(self) -> dict[str, Any]:
        ws = self.ctx.world_size
        if ws == 1:
            self.say("DDP", "skipped: world size 1 (launch under torchrun --nproc_per_node=N or srun)")
            return {"skipped": "world size 1"}
        correct = allreduce_is_correct(self.ctx)
        self.check(correct, "DDP", f"all-reduce sum over {ws} ranks is {'correct' if correct else 'WRONG'}")
        mb = self.args.allreduce_mb or (DEFAULT_ALLREDUCE_MB_GPU if self.gpu else DEFAULT_ALLREDUCE_MB_CPU)
        nbytes, seconds = time_allreduce(self.ctx, int(mb * 2**20), self.args.allreduce_iters)
        algbw = metrics.allreduce_algbw_gbps(nbytes, seconds)
        busbw = metrics.allreduce_busbw_gbps(nbytes, seconds, ws)
        self.check(
            busbw >= self.args.min_busbw_gbps,
            "DDP",
            f"all-reduce {nbytes / 2**20:.0f} MiB x {ws} ranks ({self.ctx.backend}): "
            f"{seconds * 1e3:.2f} ms, algbw {algbw:.1f} GB/s, busbw {busbw:.1f} GB/s",
        )
        losses, in_sync = ddp_train_smoke(self.ctx, self.args.train_steps)
        ok = metrics.loss_decreased(losses, TRAIN_SMOKE_MIN_DROP) and in_sync
        self.check(
            ok,
            "DDP",
            f"DDP training over {ws} ranks: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
            f"parameters {'identical' if in_sync else 'DIVERGED'} across ranks",
        )
        return {
            "allreduce_correct": correct,
            "allreduce_bytes": nbytes,
            "allreduce_seconds": seconds,
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
            "train_losses": [losses[0], losses[-1]],
            "params_in_sync": in_sync,
        }


def environment(ctx: distributed.DistContext) -> dict[str, Any]:
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name, "memory_gib": props.total_memory / 2**30})
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    launcher = {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}
    return {
        "host": distributed.node_name(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "gpus": gpus,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "launcher_env": launcher,
    }


def gather(obj: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def gemm_result(device: torch.device, dtype_name: str, n: int, iters: int) -> dict[str, Any]:
    seconds = time_gpu_gemm(device, _GPU_DTYPES[dtype_name], n, iters)
    return {
        "host": distributed.node_name(),
        "gpu": device.index,
        "name": torch.cuda.get_device_name(device),
        "dtype": dtype_name,
        "size": n,
        "iterations": iters,
        "seconds": seconds,
        "tflops": metrics.gemm_tflops(n, n, n, iters, seconds),
    }


def time_gpu_gemm(device: torch.device, dtype: torch.dtype, n: int, iters: int) -> float:
    """Seconds for `iters` n^3 products on random data, timed with CUDA events after warm-up."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    with torch.cuda.device(device):
        for _ in range(5):
            torch.mm(a, b, out=c)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            torch.mm(a, b, out=c)
        end.record()
        end.synchronize()
    if not torch.isfinite(c).all():
        raise RuntimeError(f"GEMM on {device} produced non-finite values")
    return start.elapsed_time(end) / 1e3


def time_cpu_gemm(n: int, iters: int) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b)
    return time.perf_counter() - t0


def _regression(device: torch.device, seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A model and (x, y) drawn by `seed` from one fixed linear target shared by all ranks."""
    target = torch.randn(32, 1, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1024, 32, generator=gen)
    y = x @ target + 0.01 * torch.randn(1024, 1, generator=gen)
    torch.manual_seed(0)  # same initial weights everywhere
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    return model, x.to(device), y.to(device)


def _fit(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, reduce: Callable[[torch.Tensor], None]
) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.detach().clone()
        reduce(value)
        losses.append(float(value))
    return losses


def train_smoke(device: torch.device, steps: int) -> list[float]:
    """Losses of a small regression fitted on `device` (no collectives)."""
    model, x, y = _regression(device, seed=1)
    return _fit(model, x, y, steps, reduce=lambda t: None)


def ddp_train_smoke(ctx: distributed.DistContext, steps: int) -> tuple[list[float], bool]:
    """(rank-averaged losses, parameters identical on every rank) for DDP on per-rank shards."""
    model, x, y = _regression(ctx.device, seed=100 + ctx.rank)
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)

    def mean(t: torch.Tensor) -> None:
        dist.all_reduce(t)
        t.div_(ctx.world_size)

    losses = _fit(ddp, x, y, steps, reduce=mean)
    checksum = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum()
    high, low = checksum.clone(), checksum.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    in_sync = float(high - low) <= 1e-9 * max(1.0, abs(float(high)))
    return losses, in_sync


def allreduce_is_correct(ctx: distributed.DistContext) -> bool:
    t = torch.full((1 << 16,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    ok = torch.tensor([float(bool((t == expected).all()))], device=ctx.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item() == 1.0)


def time_allreduce(ctx: distributed.DistContext, nbytes: int, iters: int) -> tuple[int, float]:
    """(bytes per rank, seconds per all-reduce) of a float32 buffer, after warm-up."""
    buf = torch.randn(max(1, nbytes // 4), device=ctx.device)
    for _ in range(5):
        dist.all_reduce(buf)
    distributed.synchronize(ctx.device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    distributed.synchronize(ctx.device)
    seconds = (time.perf_counter() - t0) / iters
    # The slowest rank's time is the collective's time.
    slowest = torch.tensor([seconds], device=ctx.device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return buf.numel() * 4, float(slowest.item())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx = distributed.init(args.device, args.pg_timeout_s)
    code = Suite(args, ctx).run()
    distributed.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())

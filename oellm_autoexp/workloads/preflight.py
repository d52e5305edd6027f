"""Pre-flight: measure this node's GPUs, compare with the allocation, fail fast if it is the bad one.

    srun --ntasks-per-node=1 python3 -m oellm_autoexp.workloads.preflight --results-root DIR ...

One task per node, with all of the node's GPUs (docs/preflight.md). Each node:
1. measures: bf16 GEMM TFLOP/s per GPU (the acceptance suite's own timing,
   workloads/acceptance.py), an HBM allocate-write-verify, the intra-node all-reduce bus
   bandwidth (NCCL across the node's GPUs from this one process). Without a GPU: a float32
   matmul on the CPU in GFLOP/s, so the whole path runs on any machine;
2. prints its one result line and writes the same figures as JSON to the shared results dir;
3. waits (within the time budget) for every node's file, takes the allocation's median and
   judges itself (workloads/preflight_judge.py); a failing node prints
   `preflight FAIL <node>: ...` and exits 1, which ends the step (srun --kill-on-bad-exit)
   and the attempt before training starts. Node 0 also names nodes that sent no result.

Test hook: AUTOEXP_PREFLIGHT_SLOW_NODE=<node>[:<factor>][,...] scales that node's measured
figures by the factor (default 0.5), as a throttled GPU would.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from oellm_autoexp.workloads import acceptance, metrics, preflight_pairs
from oellm_autoexp.workloads.preflight_judge import (
    CPU,
    NodeResult,
    Thresholds,
    fail_line,
    judge,
    result_line,
)

SLOW_NODE_ENV = "AUTOEXP_PREFLIGHT_SLOW_NODE"
DEFAULT_SLOW_FACTOR = 0.5
CPU_GEMM_SIZE = 512  # a few GFLOP in ~0.1 s on one core
CPU_GEMM_ITERS = 10
HBM_CHUNK = 1 << 26  # int32 elements compared at once (256 MiB)
ALLREDUCE_ITERS = 10
WAIT_POLL_S = 0.2
# Every node lists the shared dir while it waits: on a large allocation each polls less often
# (1,000 nodes: every 2 s), so the file system sees a few hundred listings a second, not thousands.
WAIT_POLL_NODES = 100
SLACK_S = 2.0  # the budget's end, kept for judging and printing


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results-root", required=True, help="shared dir; one sub-dir per job run")
    p.add_argument("--checks", default="gemm,hbm,allreduce")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--relative-min", type=float, default=0.9)
    p.add_argument("--min-gemm-tflops", action="append", default=[], metavar="TYPE=FLOOR")
    p.add_argument("--min-allreduce-gbps", action="append", default=[], metavar="TYPE=FLOOR")
    p.add_argument("--min-cpu-gemm-gflops", type=float, default=0.0)
    p.add_argument("--budget-s", type=float, default=60.0)
    p.add_argument("--gemm-size", type=int, default=8192)
    p.add_argument("--gemm-iters", type=int, default=50)
    p.add_argument("--hbm-gib", type=float, default=2.0)
    p.add_argument("--allreduce-mb", type=int, default=256)
    p.add_argument("--pairwise-mb", type=int, default=64)
    return p


def node_name(environ: Mapping[str, str]) -> str:
    """Slurm's name for this node (emulated nodes share one host name), else the host name."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname()


def slow_factor(node: str, environ: Mapping[str, str]) -> float:
    """The test hook's factor for `node` (1.0 when the hook does not name it)."""
    for entry in environ.get(SLOW_NODE_ENV, "").split(","):
        name, _, factor = entry.strip().partition(":")
        if name and name == node:
            return float(factor) if factor else DEFAULT_SLOW_FACTOR
    return 1.0


def floors(entries: Sequence[str]) -> dict[str, float]:
    out = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        out[name] = float(value)
    return out


def measure(args: argparse.Namespace, node: str, scale: float) -> NodeResult:
    checks = set(args.checks.split(","))
    t0 = time.perf_counter()
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    try:
        if not use_cuda:
            return _cpu(node, checks, scale, t0)
        return _gpus(args, node, checks, scale, t0)
    except Exception as exc:  # a check that raises is this node's failure, said in one line
        return NodeResult(node, CPU if not use_cuda else "cuda", 0, None, error=f"check raised {exc!r}"[:300],
                          seconds=time.perf_counter() - t0)  # fmt: skip


def _cpu(node: str, checks: set[str], scale: float, t0: float) -> NodeResult:
    gemm = None
    if "gemm" in checks:
        seconds = acceptance.time_cpu_gemm(CPU_GEMM_SIZE, CPU_GEMM_ITERS)
        n = CPU_GEMM_SIZE
        gemm = scale * 1e3 * metrics.gemm_tflops(n, n, n, CPU_GEMM_ITERS, seconds)
    return NodeResult(node, CPU, 0, gemm, seconds=time.perf_counter() - t0)


def _gpus(args: argparse.Namespace, node: str, checks: set[str], scale: float, t0: float) -> NodeResult:
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    per_gpu: list[float] = []
    if "gemm" in checks:
        for device in devices:
            seconds = acceptance.time_gpu_gemm(device, torch.bfloat16, args.gemm_size, args.gemm_iters)
            n = args.gemm_size
            per_gpu.append(scale * metrics.gemm_tflops(n, n, n, args.gemm_iters, seconds))
    problem = ""
    if "hbm" in checks:
        problem = next((p for d in devices if (p := hbm_problem(d, args.hbm_gib))), "")
    bw = None
    if "allreduce" in checks and len(devices) > 1:
        bw = scale * allreduce_busbw(devices, args.allreduce_mb * 2**20)
    return NodeResult(
        node=node,
        gpu_name=torch.cuda.get_device_name(devices[0]),
        gpus=len(devices),
        gemm=min(per_gpu) if per_gpu else None,
        gemm_per_gpu=tuple(per_gpu),
        hbm_ok=None if "hbm" not in checks else not problem,
        hbm_problem=problem,
        allreduce_gbps=bw,
        seconds=time.perf_counter() - t0,
    )


def hbm_problem(device: torch.device, gib: float) -> str:
    """'' when `gib` GiB written as a counting pattern on `device` read back intact; else what broke."""
    n = int(gib * 2**30) // 4
    try:
        buf = torch.arange(n, dtype=torch.int32, device=device)
    except torch.cuda.OutOfMemoryError:
        return f"{device}: could not allocate {gib:g} GiB"
    for start in range(0, n, HBM_CHUNK):
        stop = min(n, start + HBM_CHUNK)
        want = torch.arange(start, stop, dtype=torch.int32, device=device)
        if not torch.equal(buf[start:stop], want):
            return f"{device}: pattern mismatch in elements {start}..{stop}"
    del buf
    torch.cuda.empty_cache()
    return ""


def allreduce_busbw(devices: Sequence[torch.device], nbytes: int) -> float:
    """Bus bandwidth (GB/s, nccl-tests' definition) of an all-reduce across `devices` from one process."""
    import torch.cuda.nccl as nccl

    tensors = [torch.ones(nbytes // 4, device=d) for d in devices]
    for _ in range(3):
        nccl.all_reduce(tensors)
    for d in devices:
        torch.cuda.synchronize(d)
    t0 = time.perf_counter()
    for _ in range(ALLREDUCE_ITERS):
        nccl.all_reduce(tensors)
    for d in devices:
        torch.cuda.synchronize(d)
    seconds = (time.perf_counter() - t0) / ALLREDUCE_ITERS
    return metrics.allreduce_busbw_gbps(nbytes, seconds, len(devices))


def with_pairs(
    result: NodeResult, args: argparse.Namespace, environ: Mapping[str, str], scale: float, deadline: float
) -> NodeResult:
    """`result` with its cross-node pair figure; unchanged (and said) when the exchange failed."""
    try:
        gbps = preflight_pairs.pair_gbps(
            environ, preflight_pairs.default_device(), args.pairwise_mb * 2**20,
            timeout_s=max(deadline - time.monotonic(), 1.0),
        )  # fmt: skip
    except Exception as exc:  # a peer that never joined: the gather below names missing nodes
        print(f"preflight: pairwise check not measured on {result.node}: {exc!r}"[:300], flush=True)
        return result
    return replace(result, pair_gbps=None if gbps is None else scale * gbps)


def write_result(directory: Path, result: NodeResult) -> None:
    """The node's JSON file, whole or not at all: the others read it while it is written."""
    tmp = directory / f".{result.node}.json.tmp"
    tmp.write_text(json.dumps(result.to_json()), encoding="utf-8")
    os.replace(tmp, directory / f"{result.node}.json")


def run_dir(root: Path, environ: Mapping[str, str]) -> Path:
    """This run's dir: one per Slurm job and requeue (a requeued job must not read old files)."""
    job = environ.get("SLURM_JOB_ID") or f"local-{environ.get('AUTOEXP_LOCAL_JOB_NUM', os.getppid())}"
    return root / f"{job}.{environ.get('SLURM_RESTART_COUNT', '0')}"


def expected_nodes(environ: Mapping[str, str]) -> list[str]:
    """The allocation's node names (scontrol expands the list); [] when unknown."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        return []
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return out.split()


def gather(directory: Path, count: int, deadline: float) -> list[NodeResult]:
    """Every node's result in `directory`, once `count` are there or at `deadline`."""
    interval = WAIT_POLL_S * max(1.0, count / WAIT_POLL_NODES)
    while True:
        found = sorted(directory.glob("*.json"))
        if len(found) >= count or time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
    results = []
    for path in found:
        try:
            results.append(NodeResult.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue  # a half-written file cannot happen (atomic write); anything else is not a result
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    environ = os.environ
    started = time.monotonic()
    deadline = started + max(args.budget_s - SLACK_S, 1.0)
    node = node_name(environ)
    scale = slow_factor(node, environ)
    result = measure(args, node, scale)
    if "pairwise" in args.checks.split(","):
        result = with_pairs(result, args, environ, scale, deadline)
    directory = run_dir(Path(args.results_root), environ)
    directory.mkdir(parents=True, exist_ok=True)
    write_result(directory, result)
    print(result_line(result), flush=True)
    # Only node 0 asks scontrol for the names (to blame a node that never reports): a thousand
    # nodes asking the controller at once would be a load of its own.
    is_first = environ.get("SLURM_NODEID", "0") == "0"
    nodes = expected_nodes(environ) if is_first else []
    count = len(nodes) or int(environ.get("SLURM_NNODES", "1"))
    everyone = gather(directory, count, deadline)
    limits = Thresholds(
        args.relative_min,
        floors(args.min_gemm_tflops),
        floors(args.min_allreduce_gbps),
        args.min_cpu_gemm_gflops,
    )
    failed = False
    problem = judge(result, everyone, limits)
    if problem:
        print(fail_line(node, problem), flush=True)
        failed = True
    if is_first:
        failed = _report_missing(nodes, everyone, count, args.budget_s) or failed
    return 1 if failed else 0


def _report_missing(
    nodes: Sequence[str], everyone: Sequence[NodeResult], count: int, budget_s: float
) -> bool:
    seen = {r.node for r in everyone}
    missing = [n for n in nodes if n not in seen]
    for name in missing:
        print(fail_line(name, f"no result within {budget_s:g} s"), flush=True)
    if not nodes and len(everyone) < count:
        print(
            f"preflight: only {len(everyone)} of {count} nodes sent a result within {budget_s:g} s",
            flush=True,
        )
        return True
    return bool(missing)


if __name__ == "__main__":
    sys.exit(main())

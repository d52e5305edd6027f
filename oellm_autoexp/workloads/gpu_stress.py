"""GPU allocation stress: N parallel workers dealt round-robin over the visible GPUs (or CPU).

    python -m oellm_autoexp.workloads.gpu_stress --workers 8 --mb 1024 --duration-s 10 --report stress.json

Each worker is a separate process (multiprocessing "spawn": CUDA cannot be forked), allocates
--mb MB on its device and rewrites the buffer in place for --duration-s seconds; one op is one
pass over the buffer. The parent collects one result per worker, then joins every worker,
terminating (and finally killing) any that does not end, so none outlives the run.
One op is one in-place elementwise pass (read + write of the whole buffer).
Reports success rate, ops/s and per-device balance; exit 0 when every worker succeeded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oellm_autoexp.workloads import metrics
from oellm_autoexp.workloads.defaults import STRESS_JOIN_TIMEOUT_S, STRESS_START_GRACE_S


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oellm_autoexp.workloads.gpu_stress", description=__doc__)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--mb", type=float, default=256.0, help="MB (2^20 bytes) each worker allocates")
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    return p


def visible_devices(requested: str) -> list[str]:
    import torch

    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return ["cpu"]
    if not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def worker(index: int, device: str, mb: float, duration_s: float, results: Any) -> None:
    """Allocate `mb` MB on `device`, rewrite it until `duration_s` passes, report via `results`."""
    import os

    import torch

    out: dict[str, Any] = {"worker": index, "pid": os.getpid(), "device": device, "ok": False, "ops": 0}
    try:
        dev = torch.device(device)
        buf = torch.rand(max(1, int(mb * 2**20) // 4), device=dev)
        ops, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration_s:
            for _ in range(10):
                buf.mul_(0.5).add_(0.25)  # two passes; stays in [0.25, 0.75]: never overflows
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            ops += 20
        seconds = time.perf_counter() - t0
        value = float(buf[0])
        out.update(ok=0.25 <= value <= 0.75, ops=ops, seconds=seconds, ops_per_s=ops / seconds)
    except Exception as exc:  # reported, not raised: the parent counts failures
        out["error"] = f"{type(exc).__name__}: {exc}"
    results.put(out)


def run_stress(workers: int, mb: float, duration_s: float, device: str = "auto") -> dict[str, Any]:
    """Run the workers and return the report; every worker process has ended on return."""
    devices = visible_devices(device)
    assignment = metrics.round_robin(workers, devices)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(i, d, mb, duration_s, results)) for i, d in enumerate(assignment)
    ]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    pids = [p.pid for p in procs]
    collected = _collect(results, len(procs), deadline=time.monotonic() + duration_s + STRESS_START_GRACE_S)
    leftover = _reap(procs)
    wall = time.perf_counter() - t0
    return summarise(collected, assignment, devices, mb, duration_s, wall, leftover, pids)


def _collect(results: Any, n: int, deadline: float) -> list[dict[str, Any]]:
    collected: list[dict[str, Any]] = []
    while len(collected) < n and time.monotonic() < deadline:
        try:
            collected.append(results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
        except queue.Empty:
            continue
    return collected


def _reap(procs: list[Any]) -> int:
    """Join every worker; terminate, then kill, the ones that will not end. Returns how many had to be."""
    forced = 0
    for p in procs:
        p.join(STRESS_JOIN_TIMEOUT_S)
        if p.is_alive():
            forced += 1
            p.terminate()
            p.join(STRESS_JOIN_TIMEOUT_S)
        if p.is_alive():
            p.kill()
            p.join()
        p.close()
    return forced


def summarise(
    collected: list[dict[str, Any]],
    assignment: list[str],
    devices: list[str],
    mb: float,
    duration_s: float,
    wall_s: float,
    forced: int,
    pids: list[int | None],
) -> dict[str, Any]:
    by_worker = {r["worker"]: r for r in collected}
    rows = [
        by_worker.get(i, {"worker": i, "device": d, "ok": False, "error": "no result"})
        for i, d in enumerate(assignment)
    ]
    per_device: dict[str, dict[str, float]] = {}
    for d in devices:
        mine = [r for r in rows if r["device"] == d]
        per_device[d] = {
            "workers": len(mine),
            "succeeded": sum(1 for r in mine if r["ok"]),
            "ops_per_s": sum(r.get("ops_per_s", 0.0) for r in mine),
        }
    ok = sum(1 for r in rows if r["ok"])
    return {
        "workers": len(rows),
        "succeeded": ok,
        "success_rate": ok / len(rows) if rows else 0.0,
        "mb_per_worker": mb,
        "duration_s": duration_s,
        "wall_s": wall_s,
        "total_ops_per_s": sum(r.get("ops_per_s", 0.0) for r in rows),
        "gb_per_s": sum(r.get("ops_per_s", 0.0) for r in rows) * mb * 2**20 * 2 / 1e9,
        "per_device": per_device,
        "worker_balance": metrics.device_balance({d: v["workers"] for d, v in per_device.items()}),
        "ops_balance": metrics.device_balance({d: v["ops_per_s"] for d, v in per_device.items()}),
        "forced_terminations": forced,
        "worker_pids": pids,
        "results": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = run_stress(args.workers, args.mb, args.duration_s, args.device)
    for d, v in report["per_device"].items():
        print(
            f"[STRESS] {d}: {v['succeeded']}/{v['workers']} workers ok, {v['ops_per_s']:.1f} ops/s",
            flush=True,
        )
    for r in report["results"]:
        if not r["ok"]:
            print(
                f"[STRESS] worker {r['worker']} on {r['device']} failed: {r.get('error', 'bad result')}",
                flush=True,
            )
    print(
        f"[STRESS] success rate {report['success_rate']:.0%} ({report['succeeded']}/{report['workers']}), "
        f"{report['total_ops_per_s']:.1f} ops/s ({report['gb_per_s']:.1f} GB/s), "
        f"balance workers {report['worker_balance']:.2f} ops {report['ops_balance']:.2f}, "
        f"forced terminations {report['forced_terminations']}",
        flush=True,
    )
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["succeeded"] == report["workers"] else 1


if __name__ == "__main__":
    sys.exit(main())

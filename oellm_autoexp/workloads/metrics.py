"""Throughput and bandwidth arithmetic. Pure: numbers in, numbers out.

Units: bytes, seconds, GB = 1e9 bytes, TFLOP = 1e12 floating-point operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def gemm_tflops(m: int, n: int, k: int, iterations: int, seconds: float) -> float:
    """TFLOP/s of `iterations` (mxk)*(kxn) products taking `seconds` (2*m*n*k each)."""
    return 2.0 * m * n * k * iterations / seconds / 1e12


def allreduce_algbw_gbps(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth of one all-reduce of `nbytes` per rank: bytes / time, in GB/s."""
    return nbytes / seconds / 1e9


def allreduce_busbw_gbps(nbytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth as nccl-tests reports it: algbw x 2(n-1)/n.

    A ring all-reduce moves 2(n-1)/n of the buffer over each link, so busbw is comparable
    with the link's peak whatever the number of ranks. With one rank nothing moves: 0.
    """
    if world_size <= 1:
        return 0.0
    return allreduce_algbw_gbps(nbytes, seconds) * 2.0 * (world_size - 1) / world_size


def samples_per_second(global_batch_size: int, iterations: int, seconds: float) -> float:
    return global_batch_size * iterations / seconds


def loss_decreased(losses: Sequence[float], min_drop: float) -> bool:
    """True when the last loss is below `min_drop` times the first (and both are finite)."""
    if len(losses) < 2:
        return False
    first, last = losses[0], losses[-1]
    return first == first and last == last and last < first * min_drop


def device_balance(counts: Mapping[str, float]) -> float:
    """min/max over devices (1.0 = perfectly balanced, 0.0 = some device got nothing)."""
    if not counts:
        return 0.0
    high = max(counts.values())
    return min(counts.values()) / high if high > 0 else 0.0


def round_robin(n_workers: int, devices: Sequence[str]) -> list[str]:
    """The device each of `n_workers` workers gets, dealt round-robin over `devices`."""
    if not devices:
        raise ValueError("no devices to assign workers to")
    return [devices[i % len(devices)] for i in range(n_workers)]

"""The pre-flight's optional cross-node check: point-to-point bandwidth between pairs of nodes.

One process per node (node rank = SLURM_NODEID) joins a process group on MASTER_ADDR at
MASTER_PORT + 1 (training rendezvouses on MASTER_PORT later). Two rounds of pairs, so that each
node meets two different partners: round 0 pairs (0,1) (2,3) ..., round 1 pairs (1,2) (3,4) ...
and, with an even count above 2, (N-1, 0). In each round both ends of a pair send and receive a
buffer at once (`batch_isend_irecv`); the figure is GB/s in each direction.

A slow link or NIC slows both ends of its pair, so a node's figure is the BEST of its rounds:
a bad node is slow with both partners, a good node next to it is fast with its other partner.
With 2 nodes there is one pair only and the two cannot be told apart (the median then fails both,
which node blame reads as job-wide).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta

import torch
import torch.distributed as dist

PAIR_ITERS = 5
PORT_OFFSET = 1  # MASTER_PORT + this: training's own rendezvous comes later on MASTER_PORT


def partner_in_round(rank: int, world: int, round_no: int) -> int | None:
    """This node's partner in round 0 or 1; None when it sits out that round."""
    if round_no == 0:
        partner = rank + 1 if rank % 2 == 0 else rank - 1
        return partner if partner < world else None
    if world <= 2:
        return None  # round 1 would repeat round 0's pair
    if rank % 2 == 1:
        if rank + 1 < world:
            return rank + 1
        return 0  # rank N-1 of an even N closes the ring
    if rank > 0:
        return rank - 1
    return world - 1 if world % 2 == 0 else None


def pair_gbps(
    environ: Mapping[str, str], device: torch.device, nbytes: int, timeout_s: float
) -> float | None:
    """This node's best pair bandwidth (GB/s each way); None on a single node."""
    world = int(environ.get("SLURM_NNODES", "1"))
    if world < 2:
        return None
    rank = int(environ.get("SLURM_NODEID", "0"))
    port = int(environ.get("MASTER_PORT", "29500")) + PORT_OFFSET
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{environ.get('MASTER_ADDR', '127.0.0.1')}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        send = torch.ones(max(1, nbytes // 4), device=device)
        recv = torch.empty_like(send)
        figures = []
        for round_no in (0, 1):
            partner = partner_in_round(rank, world, round_no)
            dist.barrier()
            if partner is not None:
                figures.append(_exchange(send, recv, partner, device))
        return max(figures) if figures else None
    finally:
        dist.destroy_process_group()


def _exchange(send: torch.Tensor, recv: torch.Tensor, partner: int, device: torch.device) -> float:
    ops = [dist.P2POp(dist.isend, send, partner), dist.P2POp(dist.irecv, recv, partner)]
    for work in dist.batch_isend_irecv(ops):  # warm-up: connections are made on first use
        work.wait()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(PAIR_ITERS):
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    _sync(device)
    seconds = (time.perf_counter() - t0) / PAIR_ITERS
    return send.numel() * 4 / seconds / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def default_device() -> torch.device:
    """GPU 0 of the node when there is one (NCCL), else the CPU (gloo)."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")

"""Process-group set-up shared by the workloads: torchrun, srun or a single process.

Device auto: CUDA when available (one GPU per local rank, backend NCCL), otherwise CPU
with gloo. A single process without a launcher still gets a process group (world size 1,
in-memory store), so the training loop's collectives need no special case.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """Where this process sits: global rank, world size, rank on its node."""

    rank: int
    world_size: int
    local_rank: int


@dataclass(frozen=True)
class DistContext:
    """An initialised process group and the device this rank computes on."""

    ranks: Ranks
    device: torch.device
    backend: str

    @property
    def rank(self) -> int:
        return self.ranks.rank

    @property
    def world_size(self) -> int:
        return self.ranks.world_size

    @property
    def is_main(self) -> bool:
        return self.ranks.rank == 0


def ranks_from_env(environ: Mapping[str, str]) -> Ranks:
    """Ranks from torchrun's variables, else srun's (with MASTER_ADDR set), else a single process."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return Ranks(int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ.get("LOCAL_RANK", "0")))
    if "SLURM_PROCID" in environ and "MASTER_ADDR" in environ:
        return Ranks(
            int(environ["SLURM_PROCID"]),
            int(environ.get("SLURM_NTASKS", "1")),
            int(environ.get("SLURM_LOCALID", "0")),
        )
    return Ranks(0, 1, 0)


def pick_device(requested: str, local_rank: int) -> tuple[torch.device, str]:
    """(device, backend) for `requested` in auto|cuda|cpu."""
    use_cuda = requested == "cuda" or (requested == "auto" and torch.cuda.is_available())
    if use_cuda:
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
        return torch.device("cuda", local_rank % torch.cuda.device_count()), "nccl"
    return torch.device("cpu"), "gloo"


def init(requested_device: str = "auto", pg_timeout_s: float = 600.0) -> DistContext:
    """Initialise the default process group for this process and return where it runs."""
    ranks = ranks_from_env(os.environ)
    device, backend = pick_device(requested_device, ranks.local_rank)
    timeout = timedelta(seconds=pg_timeout_s)
    kwargs: dict = {"backend": backend, "timeout": timeout}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device  # eager NCCL init: communicator errors surface here
    if ranks.world_size == 1 and "MASTER_ADDR" not in os.environ:
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
    else:
        if "RANK" not in os.environ:  # launched by srun: env:// needs these names
            os.environ.setdefault("RANK", str(ranks.rank))
            os.environ.setdefault("WORLD_SIZE", str(ranks.world_size))
        kwargs["init_method"] = "env://"
    dist.init_process_group(**kwargs)
    return DistContext(ranks, device, backend)


EXIT_WAIT_S = 30.0  # how long a rank waits at exit for its peers to finish tearing down


def shutdown() -> None:
    """Destroy the process group if one exists (only on a clean exit).

    gloo aborts a rank ("terminate called without an active exception", seen
    in ~1 of 12 two-rank runs) whose peer exits while it is still tearing down
    its connections. So: barrier, destroy, then wait on the rendezvous store
    until every rank has destroyed its group, and only then exit.
    """
    if not dist.is_initialized():
        return
    world = dist.get_world_size()
    if world == 1:
        dist.destroy_process_group()
        return
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    key = f"autoexp_exit_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store.add(key, 1)
    deadline = time.monotonic() + EXIT_WAIT_S
    while store.add(key, 0) < world and time.monotonic() < deadline:
        time.sleep(0.01)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def node_name() -> str:
    return socket.gethostname()


def describe(ctx: DistContext) -> str:
    return (
        f"world size {ctx.world_size}, rank {ctx.rank}, device {ctx.device}, "
        f"backend {ctx.backend}, node {node_name()}"
    )

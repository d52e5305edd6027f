"""A tiny real DDP job (gloo on CPU) for the submission tests: train a linear model, all-reduce, save.

Launched by torchrun. Rank 0 writes `<AUTOEXP_CHECKPOINT_DIR>/ddp_done.json` with the world size,
the node ranks seen and the final weights, so a test can check that every process took part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        x = torch.randn(8, 4) + rank  # different data per rank: the gradients must be all-reduced
        loss = model(x).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    node_rank = torch.tensor([int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "-1")))])
    gathered = [torch.zeros_like(node_rank) for _ in range(world)]
    dist.all_gather(gathered, node_rank)
    print(f"rank {rank}/{world} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        out = Path(os.environ["AUTOEXP_CHECKPOINT_DIR"]) / "ddp_done.json"
        weights = model.module.weight.detach().flatten().tolist()
        out.write_text(
            json.dumps({"world_size": world, "node_ranks": [int(t) for t in gathered], "weights": weights})
        )
    # gloo aborts a rank ("terminate called without an active exception", ~1 run in 12) whose
    # peer exits while it still tears down, and a std::thread destructor at interpreter exit can do
    # the same after a clean destroy (seen once in ~60 CI runs). So: barrier, destroy, wait until
    # every rank destroyed its group, let the other ranks leave before rank 0 (whose process hosts
    # the store), and leave with os._exit so no C++ destructor runs after the work is done.
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    store.add("ddp_script_destroyed", 1)
    _wait_until(store, "ddp_script_destroyed", world)
    sys.stdout.flush()
    sys.stderr.flush()
    if rank != 0:
        store.add("ddp_script_leaving", 1)
        os._exit(0)
    _wait_until(store, "ddp_script_leaving", world - 1)
    os._exit(0)


def _wait_until(store, key: str, count: int) -> None:
    """Wait up to 30 s until the store's counter `key` reaches `count`."""
    deadline = time.monotonic() + 30
    while store.add(key, 0) < count and time.monotonic() < deadline:
        time.sleep(0.01)


if __name__ == "__main__":
    main()

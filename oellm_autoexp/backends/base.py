"""What every backend needs to build its argv, and the per-node placeholders.

A backend returns an argv list; the rendered script quotes it word by word.
Values only known on each node at run time are written as placeholders that
the script's fixed node wrapper substitutes (a plain text replacement, never
an evaluation): NODE_RANK differs per node, MASTER_ADDR/MASTER_PORT are
computed once by the batch shell.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_RANK = "@NODE_RANK@"
MASTER_ADDR = "@MASTER_ADDR@"
MASTER_PORT = "@MASTER_PORT@"


@dataclass(frozen=True)
class LaunchContext:
    nodes: int
    nproc_per_node: int
    checkpoint_dir: str
    output_dir: str
    # torchrun tees every worker's output with its global rank's `[rankN]:` prefix (the script sets
    # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): the hang probe's stack dumps, written by the worker's
    # faulthandler straight to its stderr, then say which rank answered (docs/hang.md).
    rank_prefix: bool = False


def torchrun_launch_args(ctx: LaunchContext) -> list[str]:
    """Static rendezvous: every node knows the world up front, node rank from Slurm."""
    return [
        f"--nnodes={ctx.nodes}",
        f"--nproc_per_node={ctx.nproc_per_node}",
        f"--node_rank={NODE_RANK}",
        f"--master_addr={MASTER_ADDR}",
        f"--master_port={MASTER_PORT}",
        *(["--tee=3"] if ctx.rank_prefix else []),
    ]

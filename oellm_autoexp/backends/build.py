"""Dispatch a backend config to its argv builder."""

from __future__ import annotations

from oellm_autoexp.backends import command, megatron_torchrun, torchrun
from oellm_autoexp.backends.base import LaunchContext
from oellm_autoexp.config.models import (
    CommandBackend,
    MegatronTorchrunBackend,
    TorchrunBackend,
)


def build_argv(
    backend: CommandBackend | TorchrunBackend | MegatronTorchrunBackend, ctx: LaunchContext
) -> list[str]:
    """The training command for one node, as an argv list (placeholders for per-node values)."""
    if isinstance(backend, CommandBackend):
        return command.build_argv(backend, ctx)
    if isinstance(backend, TorchrunBackend):
        return torchrun.build_argv(backend, ctx)
    return megatron_torchrun.build_argv(backend, ctx)


def procs_per_node(
    backend: CommandBackend | TorchrunBackend | MegatronTorchrunBackend, gpus_per_node: int
) -> int:
    """Processes each node starts: the backend's nproc_per_node, else one per GPU, else 1."""
    if isinstance(backend, CommandBackend):
        return 1
    return backend.nproc_per_node or gpus_per_node or 1

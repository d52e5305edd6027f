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


# Launchers that restart their workers in place after a failure (torchrun's elastic agent with
# --max-restarts > 0, NVIDIA's fault-tolerant ft_launcher): a fatal line is then not the end.
IN_PLACE_LAUNCHERS = frozenset({"ft_launcher"})


def restarts_in_place(backend: CommandBackend | TorchrunBackend | MegatronTorchrunBackend) -> bool:
    """Does the backend's launcher restart workers in place (torchrun --max-restarts > 0, ft_launcher)?"""
    if isinstance(backend, CommandBackend):
        argv = backend.command
        return bool(argv) and _program(argv[0]) in IN_PLACE_LAUNCHERS
    if any(_program(word) in IN_PLACE_LAUNCHERS for word in backend.torchrun):
        return True
    return (max_restarts(backend.torchrun_args) or 0) > 0


def max_restarts(args: list[str]) -> int | None:
    """torchrun's `--max-restarts N` / `--max-restarts=N` (also `--max_restarts`), or None."""
    found = None
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag not in ("--max-restarts", "--max_restarts"):
            continue
        text = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        found = int(text) if text.isdigit() else found
    return found


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


# Flags that name a run's checkpoint directory on a training command line: Megatron's
# `--save`/`--load` and the project's workload's `--ckpt-dir`.
CHECKPOINT_FLAGS = ("--ckpt-dir", "--save", "--load")


def checkpoint_dir(backend: CommandBackend | TorchrunBackend | MegatronTorchrunBackend, default: str) -> str:
    """The directory a resubmitted job resumes from: the one its command line names, else `default`.

    `default` is the plan's checkpoint dir: Megatron's `--save`/`--load` and the job's
    AUTOEXP_CHECKPOINT_DIR.
    """
    if isinstance(backend, MegatronTorchrunBackend):
        return default
    argv = backend.command if isinstance(backend, CommandBackend) else backend.args
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in CHECKPOINT_FLAGS:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if found:
                return found
    return default

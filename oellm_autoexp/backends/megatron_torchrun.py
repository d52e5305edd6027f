"""`megatron_torchrun` backend: torchrun ... <megatron_path>/pretrain_gpt.py --key value ...

or, with `module`, `torchrun ... -m <module> --key value ...` (e.g. this project's
oellm_autoexp.workloads.megatron_gpt, which takes Megatron's own flags).

`--save` and `--load` always point at the job's checkpoint dir, so every
resubmission of the same job resumes from its newest checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from oellm_autoexp.backends.base import LaunchContext, torchrun_launch_args
from oellm_autoexp.config.models import MegatronTorchrunBackend

# Megatron's --exit-signal default: what --exit-signal-handler listens for.
DEFAULT_EXIT_SIGNAL = "SIGTERM"


def build_argv(backend: MegatronTorchrunBackend, ctx: LaunchContext) -> list[str]:
    return [
        *backend.torchrun,
        *torchrun_launch_args(ctx),
        *backend.torchrun_args,
        *entry_point(backend),
        *megatron_args(backend.megatron),
        "--save",
        ctx.checkpoint_dir,
        "--load",
        ctx.checkpoint_dir,
        *backend.extra_args,
    ]


def entry_point(backend: MegatronTorchrunBackend) -> list[str]:
    """`-m <module>`, or the training script (under megatron_path when that is set)."""
    if backend.module:
        return ["-m", backend.module]
    script = backend.script or ""
    return [str(PurePosixPath(backend.megatron_path) / script) if backend.megatron_path else script]


def exit_signal(options: Mapping[str, Any]) -> str | None:
    """The signal Megatron stops on (`TERM`, `USR1`...), or None without --exit-signal-handler."""
    if not options.get("exit_signal_handler"):
        return None
    name = str(options.get("exit_signal") or DEFAULT_EXIT_SIGNAL)
    return name.removeprefix("SIG")


def megatron_args(options: Mapping[str, Any]) -> list[str]:
    """`micro_batch_size: 4` -> `--micro-batch-size 4`; true -> flag; false/null -> left out."""
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            argv += [flag, *(_text(v) for v in value)]
        else:
            argv += [flag, _text(value)]
    return argv


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

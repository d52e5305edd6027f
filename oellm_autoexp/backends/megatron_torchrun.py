"""`megatron_torchrun` backend: torchrun ... <megatron_path>/pretrain_gpt.py --key value ...

`--save` and `--load` always point at the job's checkpoint dir, so every
resubmission of the same job resumes from its newest checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from oellm_autoexp.backends.base import LaunchContext, torchrun_launch_args
from oellm_autoexp.config.models import MegatronTorchrunBackend


def build_argv(backend: MegatronTorchrunBackend, ctx: LaunchContext) -> list[str]:
    script = str(PurePosixPath(backend.megatron_path) / backend.script)
    return [
        *backend.torchrun,
        *torchrun_launch_args(ctx),
        *backend.torchrun_args,
        script,
        *megatron_args(backend.megatron),
        "--save",
        ctx.checkpoint_dir,
        "--load",
        ctx.checkpoint_dir,
        *backend.extra_args,
    ]


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

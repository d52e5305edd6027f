"""`torchrun` backend: torchrun <launch args> <script> <args> for any DDP script."""

from __future__ import annotations

from oellm_autoexp.backends.base import LaunchContext, torchrun_launch_args
from oellm_autoexp.config.models import TorchrunBackend


def build_argv(backend: TorchrunBackend, ctx: LaunchContext) -> list[str]:
    return [
        *backend.torchrun,
        *torchrun_launch_args(ctx),
        *backend.torchrun_args,
        backend.script,
        *backend.args,
    ]

"""`command` backend: any command, run once per node (NODE_RANK etc. in its environment)."""

from __future__ import annotations

from oellm_autoexp.backends.base import LaunchContext
from oellm_autoexp.config.models import CommandBackend


def build_argv(backend: CommandBackend, ctx: LaunchContext) -> list[str]:
    del ctx  # the environment carries NODE_RANK, MASTER_ADDR, AUTOEXP_CHECKPOINT_DIR...
    return list(backend.command)

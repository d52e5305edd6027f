"""What a backend's command line says about its launcher and its checkpoints (backends/build.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from oellm_autoexp.backends.build import checkpoint_dir, max_restarts, restarts_in_place
from oellm_autoexp.config.models import BackendConfig

BACKEND: TypeAdapter[Any] = TypeAdapter(BackendConfig)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ({"kind": "torchrun", "script": "t.py"}, False),
        ({"kind": "torchrun", "script": "t.py", "torchrun_args": "--max-restarts 3"}, True),
        ({"kind": "torchrun", "script": "t.py", "torchrun_args": "--max-restarts=0"}, False),
        ({"kind": "torchrun", "script": "t.py", "torchrun_args": "--max_restarts=2"}, True),
        ({"kind": "megatron_torchrun", "megatron_path": "/m", "torchrun": "/opt/bin/ft_launcher"}, True),
        ({"kind": "command", "command": "ft_launcher --nproc-per-node 8 train.py"}, True),
        ({"kind": "command", "command": "python train.py --max-restarts 3"}, False),
    ],
)
def test_restarts_in_place(backend: dict[str, Any], expected: bool) -> None:
    """torchrun with --max-restarts > 0 or NVIDIA's ft_launcher restart workers in place; nothing else does."""
    assert restarts_in_place(BACKEND.validate_python(backend)) is expected


def test_max_restarts_takes_the_last_value() -> None:
    """Both spellings count, and a later flag wins as it does for argparse."""
    assert max_restarts(["--max-restarts", "2", "--max_restarts=5"]) == 5
    assert max_restarts(["--nnodes=2"]) is None


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ({"kind": "megatron_torchrun", "megatron_path": "/m"}, "/plan/ckpt"),
        ({"kind": "torchrun", "script": "t.py", "args": "--ckpt-dir /runs/a --steps 5"}, "/runs/a"),
        ({"kind": "command", "command": "python t.py --save=/runs/b"}, "/runs/b"),
        ({"kind": "command", "command": "bash job.sh"}, "/plan/ckpt"),
    ],
)
def test_checkpoint_dir(backend: dict[str, Any], expected: str) -> None:
    """The checkpoint dir a resubmission resumes from: the one the command line names, else the plan's."""
    assert checkpoint_dir(BACKEND.validate_python(backend), "/plan/ckpt") == expected

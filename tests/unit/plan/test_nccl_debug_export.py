"""A multi-node script turns on NCCL's own error lines (NCCL_DEBUG=WARN) unless the user chose a level."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans

EXPORT = 'export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"'
COMMAND = {
    "defaults": [{"slurm": "local"}, {"backend": "command"}],
    "experiment": {"name": "hello", "output_dir": "runs/${experiment.name}"},
    "backend": {"command": ["python", "-c", "print('hi')"]},
}


def _script(config_dir: Path, write_yaml, overrides: list[str]) -> str:
    exp = write_yaml(config_dir / "experiments" / "nccl.yaml", COMMAND)
    (plan,) = build_plans(load_jobs(exp, overrides, environ={}), "/base")
    return plan.script


def test_only_a_multi_node_script_sets_it(config_dir: Path, write_yaml) -> None:
    assert EXPORT in _script(config_dir, write_yaml, ["slurm.nodes=2"])
    # One node: no node to blame, and the GPU proofs' logs stay as they were recorded.
    assert "NCCL_DEBUG" not in _script(config_dir, write_yaml, [])


def test_the_user_s_own_level_comes_first_and_is_kept(config_dir: Path, write_yaml) -> None:
    script = _script(config_dir, write_yaml, ["slurm.nodes=2", "+slurm.env.NCCL_DEBUG=INFO"])
    assert script.index("export NCCL_DEBUG=INFO") < script.index(EXPORT)


@pytest.mark.parametrize(("before", "after"), [(None, "WARN"), ("INFO", "INFO"), ("VERSION", "VERSION")])
def test_the_line_keeps_a_level_already_set(before: str | None, after: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NCCL_DEBUG"}
    if before is not None:
        env["NCCL_DEBUG"] = before
    out = subprocess.run(["bash", "-uc", f'{EXPORT}; echo "$NCCL_DEBUG"'], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == after

"""Golden files: the rendered sbatch script of each backend, single- and multi-node.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/plan/test_render_golden.py`
and review the diff of tests/unit/plan/golden/ like code.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans
from oellm_autoexp.workloads.stack_dump import SITE_DIR as STACK_DUMP_SITE
from tests.paths import REPO

GOLDEN = Path(__file__).parent / "golden"
SHIPPED_EXPERIMENTS = REPO / "config" / "experiments"
ENV = {"SLURM_ACCOUNT": "myproject", "MEGATRON_PATH": "/opt/Megatron-LM", "SCRATCH": "/scratch/me"}

COMMAND = {
    "defaults": [{"slurm": "local"}, {"backend": "command"}],
    "experiment": {"name": "hello", "output_dir": "runs/${experiment.name}"},
    "backend": {"command": ["python", "-c", "print('hi')", "--flag=a b"]},
}
TORCHRUN = {
    "defaults": [{"slurm": "local"}, {"backend": "torchrun"}],
    "experiment": {"name": "ddp", "output_dir": "runs/ddp"},
    "backend": {"script": "train.py", "args": ["--steps", "20"], "nproc_per_node": 2},
}

CASES = {
    "command_1node": (COMMAND, []),
    "command_2node": (COMMAND, ["slurm.nodes=2"]),
    "torchrun_1node": (TORCHRUN, []),
    "torchrun_2node_gpus": (
        TORCHRUN,
        ["slurm.nodes=2", "slurm.gpus_per_node=4", "slurm.signal.enabled=true"],
    ),
    # The shipped pre-flight group on a 2-node GPU job: its srun step before the launch.
    "torchrun_2node_preflight": (
        {**TORCHRUN, "defaults": [*TORCHRUN["defaults"], {"preflight": "default"}]},
        ["slurm.nodes=2", "slurm.gpus_per_node=4"],
    ),
    "megatron_1node": ("megatron_llama8b_juwels.yaml", ["slurm.nodes=1"]),
    "megatron_8node": ("megatron_llama8b_juwels.yaml", ["backend.megatron.micro_batch_size=4"]),
    "megatron_tiny_local": ("megatron_tiny_local.yaml", []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_script_matches_golden(case: str, config_dir: Path, write_yaml) -> None:
    """The script for each case is byte-for-byte the reviewed golden file."""
    source, overrides = CASES[case]
    if isinstance(source, dict):
        exp = write_yaml(config_dir / "experiments" / f"{case}.yaml", source)
    else:
        exp = SHIPPED_EXPERIMENTS / source
    plans = build_plans(load_jobs(exp, overrides, environ=ENV), "/base")
    assert len(plans) == 1
    golden = GOLDEN / f"{case}.sbatch"
    # The probe's sitecustomize folder is where this checkout's package lies: a placeholder in the file.
    script = plans[0].script.replace(shlex.quote(STACK_DUMP_SITE), "@STACK_DUMP_SITE@")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(script)
    assert script == golden.read_text(), f"{case}: rendered script differs from {golden}"

"""The README names a Slurm DDP example with checkpoints, and it is one (issue 28)."""

from __future__ import annotations

import re

from oellm_autoexp.config.experiment import load_jobs
from tests.paths import REPO


def test_the_readme_names_a_slurm_ddp_example_with_checkpoints() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"config/experiments/(\w+)\.yaml", readme))
    examples = []
    for name in sorted(named):
        (job,) = load_jobs(str(REPO / "config" / "experiments" / f"{name}.yaml"), [], [])
        backend = job.config.backend
        args = " ".join(getattr(backend, "args", []))
        if job.config.executor == "slurm" and backend.kind == "torchrun" and "--ckpt-dir" in args:
            examples.append(name)
    assert examples, f"none of {sorted(named)} is a Slurm torchrun (DDP) run that checkpoints"

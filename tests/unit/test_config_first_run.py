"""Config fixes of issue 11: the seed's bare composition plans, scalars given as strings."""

from __future__ import annotations

from pathlib import Path

import yaml

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.config.loader import shipped_config_dir

SEED_DEFAULTS = [
    {"backend": "megatron_torchrun"},
    {"backend/megatron": "llama1_8b_qkln"},
    {"slurm": "juwels"},
    {"monitoring": "megatron_production"},
    {"restart": "megatron_transient"},
]
TRAIN_LOCAL = shipped_config_dir() / "experiments" / "train_local_slurm.yaml"


def test_seed_composition_without_experiment_section_plans(tmp_path: Path) -> None:
    """Only the seed's defaults list: the job plans, named after the YAML file's stem, its
    output dir outputs/<stem>, its scratch dir (juwels: ${experiment.output_dir}) resolved."""
    path = tmp_path / "llama_seed.yaml"
    path.write_text(yaml.safe_dump({"defaults": SEED_DEFAULTS}), encoding="utf-8")
    [job] = load_jobs(str(path), environ={"SLURM_ACCOUNT": "proj"})
    assert job.config.experiment.name == "llama_seed"
    assert job.config.experiment.output_dir == "outputs/llama_seed"
    assert job.config.slurm.scratch_dir == "outputs/llama_seed"


def test_experiment_name_can_still_be_overridden(tmp_path: Path) -> None:
    """The defaulted name is an ordinary key: `experiment.name=x` on the command line wins."""
    path = tmp_path / "llama_seed.yaml"
    path.write_text(yaml.safe_dump({"defaults": SEED_DEFAULTS}), encoding="utf-8")
    [job] = load_jobs(str(path), ["experiment.name=other"], environ={"SLURM_ACCOUNT": "proj"})
    assert job.config.experiment.name == "other"
    assert job.config.experiment.output_dir == "outputs/other"


def test_number_in_a_string_list_is_that_string() -> None:
    """The documented `'backend.args=[--steps,40,--fault,crash]'` gives the args as strings."""
    [job] = load_jobs(str(TRAIN_LOCAL), ["backend.args=[--steps,40,--fault,crash]"])
    assert job.config.backend.args == ["--steps", "40", "--fault", "crash"]  # type: ignore[union-attr]

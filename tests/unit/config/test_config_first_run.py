"""Config fixes of issue 11 (the seed's bare composition, scalars as strings) and issue 13 D1
(a list-looking override parses as meant, or is an error naming the key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from oellm_autoexp.cli.main import main
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.config.loader import shipped_config_dir
from oellm_autoexp.errors import UserError

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


def test_list_with_an_interpolation_parses_as_a_list() -> None:
    """D1: `[--steps,"20",--ckpt-dir,${experiment.output_dir}/checkpoints]` is no YAML, yet it is
    a list of four items (the quoted 20 a string, the interpolation resolved), never one string."""
    override = 'backend.args=[--steps,"20",--ckpt-dir,${experiment.output_dir}/checkpoints]'
    [job] = load_jobs(str(TRAIN_LOCAL), [override])
    out = job.config.experiment.output_dir
    assert job.config.backend.args == ["--steps", "20", "--ckpt-dir", f"{out}/checkpoints"]  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ['[--steps,"20,--x]', "[a,[b,c]", "[a,,b]", "{a: [1}"])
def test_list_looking_value_that_does_not_parse_is_an_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """D1: a bracketed value that parses neither as YAML nor as a plain list is an error naming the
    key (exit 2, no traceback), not a silent string."""
    override = f"backend.args={value}"
    with pytest.raises(UserError, match=r"backend\.args looks like a"):
        load_jobs(str(TRAIN_LOCAL), [override])
    assert main(["plan", str(TRAIN_LOCAL), override]) == 2
    err = capsys.readouterr().err
    assert "backend.args" in err and "does not parse" in err and "Traceback" not in err

"""Composition: defaults lists, group search order, overrides, interpolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from oellm_autoexp.config.experiment import load_jobs, load_root
from oellm_autoexp.config.loader import shipped_config_dir

BASE = {"experiment": {"name": "exp", "output_dir": "out/${experiment.name}"}}


@pytest.fixture
def groups(config_dir: Path, write_yaml) -> Path:
    write_yaml(
        config_dir / "slurm" / "small.yaml", {"nodes": 1, "sbatch": {"partition": "a", "time": "1:00"}}
    )
    write_yaml(config_dir / "slurm" / "big.yaml", {"nodes": 4, "sbatch": {"partition": "b"}})
    write_yaml(config_dir / "backend" / "cmd.yaml", {"kind": "command", "command": ["echo", "hi"]})
    write_yaml(config_dir / "backend" / "megatron" / "tiny.yaml", {"num_layers": 2, "micro_batch_size": 1})
    return config_dir


def _exp(config_dir: Path, write_yaml, defaults: list, **extra) -> Path:
    return write_yaml(config_dir / "experiments" / "e.yaml", {"defaults": defaults, **BASE, **extra})


def test_later_defaults_and_the_experiment_file_override_earlier_entries(groups: Path, write_yaml) -> None:
    """Entries merge in order (mappings key by key), then the experiment file wins over all of them."""
    exp = _exp(
        groups, write_yaml, [{"slurm": "small"}, {"slurm": "big"}, {"backend": "cmd"}], slurm={"nodes": 2}
    )
    root = load_root(exp, config_dirs=[groups])
    assert root.slurm.nodes == 2
    assert root.slurm.sbatch == {"partition": "b", "time": "1:00"}


def test_command_line_overrides_win_over_everything(groups: Path, write_yaml) -> None:
    """A dotted override beats the experiment file; its value is parsed as YAML (16 is an int)."""
    exp = _exp(groups, write_yaml, [{"slurm": "small"}, {"backend": "cmd"}], slurm={"nodes": 2})
    root = load_root(exp, ["slurm.nodes=16", "experiment.name=my run"], [groups])
    assert root.slurm.nodes == 16
    assert root.experiment.name == "my run"
    assert root.experiment.output_dir == "out/my run"


def test_group_override_on_the_command_line_swaps_the_defaults_entry(groups: Path, write_yaml) -> None:
    """`slurm=big` replaces the experiment's `- slurm: small` entry instead of setting a value."""
    exp = _exp(groups, write_yaml, [{"slurm": "small"}, {"backend": "cmd"}])
    assert load_root(exp, ["slurm=big"], [groups]).slurm.nodes == 4


def test_group_override_adds_a_group_the_experiment_does_not_name(groups: Path, write_yaml) -> None:
    """`slurm=big` on an experiment without a slurm entry adds one, instead of failing on a string."""
    exp = _exp(groups, write_yaml, [{"backend": "cmd"}])
    assert load_root(exp, ["slurm=big"], [groups]).slurm.nodes == 4


def test_nested_group_lands_under_its_key_path(groups: Path, write_yaml) -> None:
    """`backend/megatron: tiny` fills backend.megatron, and overrides reach into it."""
    write_yaml(groups / "backend" / "meg.yaml", {"kind": "megatron_torchrun", "megatron_path": "/m"})
    exp = _exp(groups, write_yaml, [{"backend": "meg"}, {"backend/megatron": "tiny"}])
    root = load_root(exp, ["backend.megatron.micro_batch_size=16"], [groups])
    assert root.backend.kind == "megatron_torchrun"
    assert root.backend.megatron == {"num_layers": 2, "micro_batch_size": 16}


def test_user_config_dir_wins_over_the_shipped_one(groups: Path, write_yaml) -> None:
    """A user's slurm/local.yaml shadows the shipped preset of the same name."""
    write_yaml(groups / "slurm" / "local.yaml", {"nodes": 1, "sbatch": {"partition": "mine"}})
    exp = _exp(groups, write_yaml, [{"slurm": "local"}, {"backend": "cmd"}])
    assert load_root(exp, config_dirs=[groups]).slurm.sbatch == {"partition": "mine"}


def test_shipped_groups_are_found_without_a_user_dir(groups: Path, write_yaml) -> None:
    """Only the shipped config/: slurm local and backend command resolve."""
    assert (shipped_config_dir() / "slurm" / "local.yaml").is_file()
    exp = _exp(groups, write_yaml, [{"slurm": "local"}, {"backend": "command"}])
    root = load_root(exp, environ={})
    assert root.slurm.sbatch["partition"] == "debug"


def test_config_dir_from_the_environment_is_searched(groups: Path, write_yaml, monkeypatch) -> None:
    """$AUTOEXP_CONFIG_DIR works like --config-dir."""
    monkeypatch.setenv("AUTOEXP_CONFIG_DIR", str(groups))
    exp = _exp(groups, write_yaml, [{"slurm": "big"}, {"backend": "cmd"}])
    assert load_root(exp).slurm.nodes == 4


@pytest.mark.parametrize(
    ("value", "environ", "expected"),
    [
        ("${experiment.name}-x", {}, "exp-x"),
        ("${oc.env:WHERE}/data", {"WHERE": "/scratch"}, "/scratch/data"),
        ("${oc.env:WHERE,/tmp}/data", {}, "/tmp/data"),
        ("${env:WHERE}", {"WHERE": "a"}, "a"),
        ("${oc.env:WHERE,${experiment.name}}", {}, "exp"),
        ("\\${experiment.name}", {}, "${experiment.name}"),
        ("${oc.env:WHERE}", {"WHERE": "$(touch x) ${experiment.name}"}, "$(touch x) ${experiment.name}"),
    ],
)
def test_interpolation(groups: Path, write_yaml, value: str, environ: dict, expected: str) -> None:
    """References, env lookups with defaults, nesting, escapes; an env value is data, never re-read."""
    exp = _exp(groups, write_yaml, [{"backend": "cmd"}], slurm={"env": {"X": value}})
    assert load_root(exp, config_dirs=[groups], environ=environ).slurm.env["X"] == expected


def test_a_whole_string_reference_keeps_its_type(groups: Path, write_yaml) -> None:
    """`${slurm.nodes}` alone is the int, not the string '2'."""
    exp = _exp(groups, write_yaml, [{"backend": "cmd"}], slurm={"nodes": 2},
               restart={"max_checkpoint_rollbacks": "${slurm.nodes}"})  # fmt: skip
    assert load_root(exp, config_dirs=[groups]).restart == {"max_checkpoint_rollbacks": 2}


def test_sweep_points_see_their_own_values_in_interpolations(groups: Path, write_yaml) -> None:
    """${backend.megatron.lr} in a point's env resolves to that point's value."""
    write_yaml(groups / "backend" / "meg.yaml", {"kind": "megatron_torchrun", "megatron_path": "/m"})
    exp = _exp(
        groups,
        write_yaml,
        [{"backend": "meg"}, {"backend/megatron": "tiny"}],
        slurm={"env": {"TAG": "mbs${backend.megatron.micro_batch_size}"}},
        sweep={"grid": {"backend.megatron.micro_batch_size": [1, 2]}},
    )
    jobs = load_jobs(exp, config_dirs=[groups])
    assert [j.config.slurm.env["TAG"] for j in jobs] == ["mbs1", "mbs2"]
    # `_` separates a key's parts, so it is spelled `-` inside names.
    assert [j.point.key for j in jobs] == ["micro-batch-size-1", "micro-batch-size-2"]

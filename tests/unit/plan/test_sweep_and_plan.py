"""Sweep expansion, job naming, and the planning defaults (CPUs, OMP, gres, signal, caches)."""

from __future__ import annotations

import pytest

from oellm_autoexp.config.experiment import JobConfig
from oellm_autoexp.config.models import RootConfig, SlurmConfig
from oellm_autoexp.config.sweep import NO_SWEEP, expand_sweep
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.plan import (
    build_plans,
    default_cpus_per_task,
    log_path_for,
    sbatch_directives,
)


def test_grid_is_the_cartesian_product_with_stable_unique_keys() -> None:
    """2 x 2 values give 4 points, named from their values, in grid order, the same every time."""
    sweep = {"grid": {"backend.megatron.lr": [1e-4, 3e-4], "slurm.nodes": [1, 2]}}
    points = expand_sweep(sweep, "e.yaml")
    assert [p.key for p in points] == [
        "lr-0.0001_nodes-1",
        "lr-0.0001_nodes-2",
        "lr-0.0003_nodes-1",
        "lr-0.0003_nodes-2",
    ]
    assert points == expand_sweep(sweep, "e.yaml")
    assert dict(points[3].values) == {"backend.megatron.lr": 3e-4, "slurm.nodes": 2}


def test_list_points_and_their_product_with_a_grid() -> None:
    """A list gives one job per entry; grid and list together give their product."""
    assert len(expand_sweep({"list": [{"a.b": 1}, {"a.b": 2, "c": "x y"}]}, "e")) == 2
    both = expand_sweep({"grid": {"a": [1, 2]}, "list": [{"b": 1}, {"b": 2}, {"b": 3}]}, "e")
    assert len(both) == 6


def test_colliding_short_names_fall_back_to_full_keys() -> None:
    """Two keys ending in the same segment would name two points alike: the full path is used."""
    points = expand_sweep({"list": [{"x.lr": 1, "y.lr": 2}, {"x.lr": 2, "y.lr": 1}]}, "e")
    assert [p.key for p in points] == ["x-lr-1_y-lr-2", "x-lr-2_y-lr-1"]


def test_no_sweep_is_one_point() -> None:
    """Without a sweep section there is exactly one job, keyed "main" by the planner."""
    assert expand_sweep(None, "e") == [NO_SWEEP]


@pytest.mark.parametrize("sweep", [{}, {"grid": {}}, {"grid": {"a": []}}, {"list": []}])
def test_zero_point_sweeps_are_refused(sweep) -> None:
    """A sweep that would submit nothing is an error, not a silent no-op."""
    with pytest.raises(UserError, match="zero points"):
        expand_sweep(sweep, "e.yaml")


@pytest.mark.parametrize(
    ("slurm", "cpus"),
    [
        ({}, 4),
        ({"gpus_per_node": 1}, 4),
        ({"gpus_per_node": 4}, 16),
        ({"gpus_per_node": 8}, 32),
        ({"gpus_per_node": 16}, 32),
        ({"gpus_per_node": 7, "mig": True}, 1),
        ({"gpus_per_node": 4, "cpus_per_task": 48}, 48),
    ],
)
def test_default_cpus_per_task(slurm, cpus) -> None:
    """1 for MIG slices; otherwise 4 per GPU, at most 32; an explicit value wins."""
    assert default_cpus_per_task(SlurmConfig(**slurm)) == cpus


def test_directives_defaults_gres_signal_and_user_overrides() -> None:
    """gres follows gpus_per_node unless given; the signal needs B:; null removes a default; true is a flag."""
    slurm = SlurmConfig(
        gpus_per_node=2,
        signal={"enabled": True, "seconds_before": 120},
        sbatch={"ntasks-per-node": None, "exclusive": True, "cpus-per-task": 6},
    )
    found = sbatch_directives(slurm, "job", "/o/logs/slurm-%j.out")
    assert found["gres"] == "gpu:2" and found["signal"] == "B:USR1@120"
    assert "ntasks-per-node" not in found and found["exclusive"] is None and found["cpus-per-task"] == "6"
    assert "gres" not in sbatch_directives(
        SlurmConfig(gpus_per_node=2, sbatch={"gpus-per-node": 2}), "j", "l"
    )


def _plans(sweep=None, **slurm):
    cfg = RootConfig.model_validate(
        {
            "experiment": {"name": "exp", "output_dir": "runs"},
            "backend": {"kind": "torchrun", "script": "t.py", "nproc_per_node": 2},
            "slurm": {"cpus_per_task": 8, **slurm},
        }
    )
    points = expand_sweep(sweep, "e") if sweep else [NO_SWEEP]
    return build_plans([JobConfig(p, cfg, "e.yaml") for p in points], "/base")


def test_plan_paths_names_and_environment() -> None:
    """One job: output dir as given, checkpoints below it, %j in the log, OMP = CPUs / processes."""
    (plan,) = _plans()
    assert (plan.job_key, plan.name, plan.output_dir) == ("main", "exp", "/base/runs")
    assert plan.checkpoint_dir == "/base/runs/checkpoints"
    assert log_path_for(plan, "123") == "/base/runs/logs/slurm-123.out"
    assert "export OMP_NUM_THREADS=4\n" in plan.script
    assert "export TOKENIZERS_PARALLELISM=false\n" in plan.script
    assert "export HF_HOME=/base/runs/.cache/huggingface\n" in plan.script


def test_sweep_points_get_their_own_names_and_dirs_with_shared_caches() -> None:
    """Each point: <name>_<key>, <output_dir>/<key>; caches stay in the experiment's dir.

    (Applying a point's values is load_jobs' work, tested in test_config_compose.)
    """
    plans = _plans({"grid": {"slurm.env.X": [1, 2]}}, env={"X": 0})
    assert [p.name for p in plans] == ["exp_X-1", "exp_X-2"]
    assert [p.output_dir for p in plans] == ["/base/runs/X-1", "/base/runs/X-2"]
    assert all("export HF_HOME=/base/runs/.cache/huggingface\n" in p.script for p in plans)

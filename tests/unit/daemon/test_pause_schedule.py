"""The monitor reads when a job's loop pauses on purpose from the backend it launched (daemon/watch.py)."""

from __future__ import annotations

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.daemon.watch import pause_schedule
from tests.conftest import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "config" / "experiments"


def test_a_megatron_job_s_schedule_comes_from_its_megatron_arguments() -> None:
    """megatron_tiny_local.yaml: tiny_gpt's save_interval 50 and eval_iters 0 (no evaluation)."""
    (job,) = load_jobs(EXPERIMENTS / "megatron_tiny_local.yaml", [], environ={})
    schedule = pause_schedule(job.config.backend)
    assert schedule is not None
    assert schedule.every == (("checkpoint save", 50),)
    (job,) = load_jobs(
        EXPERIMENTS / "megatron_tiny_local.yaml",
        ["backend.megatron.eval_iters=10", "backend.megatron.eval_interval=200"],
        environ={},
    )
    schedule = pause_schedule(job.config.backend)
    assert schedule is not None and ("evaluation", 200) in schedule.every


def test_a_backend_without_a_readable_schedule_has_none() -> None:
    (job,) = load_jobs(EXPERIMENTS / "demo.yaml", [], environ={})
    assert job.config.backend.kind != "megatron_torchrun"
    assert pause_schedule(job.config.backend) is None

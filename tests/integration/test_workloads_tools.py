"""The acceptance suite, the throughput benchmark and the GPU stress tool, run for real on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", f"oellm_autoexp.workloads.{module}", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def test_acceptance_without_gpu_says_so_and_succeeds(tmp_path: Path) -> None:
    """On a CPU-only machine the suite reports no GPU, runs the CPU parts, exits 0 and writes its JSON report."""
    report = tmp_path / "out" / "acceptance.json"
    done = run_module("acceptance", "--report", str(report), "--train-steps", "100", "--device", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    for section in ("[ENV]", "[COMPUTE]", "[TRAIN]", "[DDP]"):
        assert section in done.stdout
    assert "no GPU visible" in done.stdout
    assert done.stdout.rstrip().endswith("[RESULT] SUCCESS")
    data = json.loads(report.read_text())
    assert data["result"] == "SUCCESS" and data["failures"] == []
    assert data["env"]["gpus"] == [] and data["compute"]["skipped"] == "no GPU"
    assert data["ddp"] == {"skipped": "world size 1"}


def test_acceptance_failure_exits_nonzero(tmp_path: Path) -> None:
    """A check that cannot pass (the training smoke given a single step) gives [RESULT] FAILURE and exit 1."""
    done = run_module(
        "acceptance", "--train-steps", "1", "--device", "cpu", "--report", str(tmp_path / "r.json")
    )
    assert done.returncode == 1
    assert "[RESULT] FAILURE: TRAIN: rank 0 on cpu" in done.stdout
    assert json.loads((tmp_path / "r.json").read_text())["result"] == "FAILURE"


@pytest.mark.parametrize(
    ("model", "sizes"),
    [
        ("resnet18", ["--image-size", "32", "--batch-size-per-gpu", "2"]),
        (
            "transformer",
            ["--seq-len", "16", "--hidden", "32", "--layers", "1", "--heads", "2", "--vocab", "64"],
        ),
    ],
)
def test_throughput_writes_results_json(tmp_path: Path, model: str, sizes: list[str]) -> None:
    """The benchmark runs warmup and measured iterations and writes results.json with every documented key."""
    results = tmp_path / "results.json"
    done = run_module(
        "throughput", "--model", model, *sizes, "--warmup", "1", "--iters", "2", "--results", str(results)
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(results.read_text())
    for key in (
        "model",
        "world_size",
        "batch_size_per_gpu",
        "global_batch_size",
        "total_time_seconds",
        "average_step_time_seconds",
        "throughput_samples_per_second",
        "device",
        "backend",
    ):
        assert key in data, key
    assert data["model"] == model and data["world_size"] == 1
    assert (data["device"], data["backend"]) == ("cpu", "gloo")
    assert data["throughput_samples_per_second"] > 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_stress_spawns_workers_and_leaves_none(tmp_path: Path) -> None:
    """Two spawned workers on the CPU both succeed, are counted per device, and none outlives the tool."""
    report = tmp_path / "stress.json"
    done = run_module(
        "gpu_stress",
        "--workers",
        "2",
        "--mb",
        "2",
        "--duration-s",
        "0.5",
        "--device",
        "cpu",
        "--report",
        str(report),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(report.read_text())
    assert data["success_rate"] == 1.0 and data["succeeded"] == 2
    assert data["per_device"]["cpu"]["workers"] == 2 and data["worker_balance"] == 1.0
    assert data["total_ops_per_s"] > 0 and data["forced_terminations"] == 0
    pids = data["worker_pids"]
    assert len(pids) == 2 and os.getpid() not in pids
    assert not [p for p in pids if _alive(p)]
    assert "[STRESS] success rate 100% (2/2)" in done.stdout

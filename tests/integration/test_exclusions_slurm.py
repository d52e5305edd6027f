"""The exclusion command and the spend figures against the real localhost Slurm."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from oellm_autoexp.core.decide.exclusions import scontrol_exclude_command
from oellm_autoexp.core.decide.spend import SPEND_SACCT_FORMAT, parse_usage, total_spend

pytestmark = pytest.mark.slurm

CMD_TIMEOUT_S = 30
SACCT_DEADLINE_S = 30.0


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def _sbatch(tmp_path: Path, *options: str) -> str:
    out = _run(
        [
            "sbatch",
            "--parsable",
            f"--chdir={tmp_path}",
            "--output=/dev/null",
            "--job-name=autoexp-test",
            *options,
            "--wrap",
            "sleep 2",
        ]
    )
    return out.strip().split(";")[0]


def test_scontrol_exclude_command_sets_a_pending_jobs_excluded_nodes(tmp_path: Path) -> None:
    """The built command is accepted by Slurm and the held job then excludes exactly those nodes."""
    job_id = _sbatch(tmp_path, "--hold")
    try:
        _run(scontrol_exclude_command(job_id, "node1"))
        assert "ExcNodeList=node1" in _run(["scontrol", "show", "job", job_id])
    finally:
        _run(["scancel", job_id])


def test_spend_from_real_sacct(tmp_path: Path) -> None:
    """A 2-node job's sacct line gives nodes x elapsed; GPUs come from the job's GPUs per node here."""
    job_id = _sbatch(tmp_path, "-N2", "--gres=gpu:2")
    deadline = time.monotonic() + SACCT_DEADLINE_S
    usage = []
    while time.monotonic() < deadline:
        text = _run(
            [
                "sacct",
                "--allocations",
                "--duplicates",
                "--noheader",
                "--parsable2",
                "--format",
                SPEND_SACCT_FORMAT,
                "-j",
                job_id,
            ]
        )
        usage = parse_usage(text)
        if usage and usage[0].state == "COMPLETED":
            break
        time.sleep(0.5)
    assert usage and usage[0].state == "COMPLETED", usage
    attempt = usage[0]
    assert attempt.nodes == 2 and attempt.elapsed_s >= 2
    spend = total_spend(usage, gpus_per_node=2)
    assert spend.gpu_hours == pytest.approx(4 * attempt.elapsed_s / 3600)

"""The pre-flight check on the localhost Slurm (2 emulated nodes), under `autoexp run`.

The check runs for real (torch on the CPU: a matmul in GFLOP/s); the test hook
AUTOEXP_PREFLIGHT_SLOW_NODE cuts one node's figure, as a throttled GPU would. Each test reads
what the monitor decided from the store, `scontrol` and the attempts' logs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oellm_autoexp.workloads.preflight_judge import FAIL_RE, RESULT_RE, STEP_RE
from tests.integration.test_monitor_slurm import (
    AutoexpEnv,
    sacct_state,
    squeue_state,
    wait_until,
)
from tests.integration.test_resilience_slurm import evidence
from tests.paths import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

PREFLIGHT_RESTART = (
    "Transient failure detected (error_type=preflight_failed); not charged to a retry budget (rule preflight)"
)
# The check's own time on this 2-core VM is mostly torch's import (10-20 s under load).
CHECK_DEADLINE_S = 90.0
TRAINING = 'echo "training on $SLURMD_NODENAME"; echo "attempt done"'


def experiment(ax: AutoexpEnv, slow: str, **preflight: Any) -> Path:
    return ax.experiment(
        ["bash", "-c", TRAINING],
        slurm={
            "env": {"AUTOEXP_PREFLIGHT_SLOW_NODE": slow, "PYTHONPATH": str(REPO)},
            **preflight.pop("slurm", {}),
        },
        preflight={"enabled": True, "python": [sys.executable], "budget_s": 60, **preflight},
    )


def decided(ax: AutoexpEnv) -> bool:
    """The monitor recorded a decision (its store and job may not exist yet)."""
    if not ax.state.joinpath("autoexp.db").exists() or not ax.read(lambda s: s.jobs_for_session(1)):
        return False
    return bool(ax.decisions())


def log_lines(ax: AutoexpEnv, attempt_no: int) -> list[str]:
    attempt = ax.attempts()[attempt_no - 1]
    return Path(attempt.log_path or "").read_text(errors="replace").splitlines()


def step_line(lines: list[str]) -> tuple[float, int]:
    [match] = [m for line in lines if (m := STEP_RE.match(line))]
    return float(match["seconds"]), int(match["rc"])


def test_two_nodes_one_slow_is_blamed_against_the_median_and_excluded(autoexp: AutoexpEnv) -> None:
    """A 2-node job, node2 made 10x slow: both nodes print their figures, node2 prints `preflight
    FAIL node2: gemm ... < 0.9 x median ...`, the attempt ends before training (exit 1, seconds),
    and the monitor restarts it at once with node2 excluded and the budget untouched. (The next
    2-node attempt cannot run on this 2-node cluster without node2; the test stops there.)"""
    monitor = autoexp.start("run", str(experiment(autoexp, "node2:0.1", slurm={"nodes": 2})))
    wait_until(lambda: decided(autoexp), "the first decision", CHECK_DEADLINE_S + 60)
    monitor.terminate()
    monitor.wait(timeout=30)
    first = autoexp.decisions()[0]
    assert (first.action, first.reason) == ("restart", PREFLIGHT_RESTART)
    assert first.budget_before == first.budget_after
    [restart] = evidence(autoexp, "restart")[:1]
    assert restart.exclude_nodes == ("node2",)
    assert restart.blamed[0].startswith("node2: ") and "preflight FAIL node2: gemm " in restart.blamed[0]

    lines = log_lines(autoexp, 1)
    results = {m["node"]: m for line in lines if (m := RESULT_RE.match(line))}
    assert sorted(results) == ["node1", "node2"]
    fails = [m for line in lines if (m := FAIL_RE.match(line))]
    assert [m["node"] for m in fails] == ["node2"] and "< 0.9 x median" in fails[0]["problem"]
    assert not any("training on" in line for line in lines)
    seconds, rc = step_line(lines)
    assert rc != 0 and seconds < CHECK_DEADLINE_S  # 1, or 143 when the monitor's cancel came first
    attempt = autoexp.attempts()[0]
    assert sorted(attempt.nodes) == ["node1", "node2"]
    # Ended by its own exit 1 (or by the monitor's cancel, when it acted on the settled line first).
    ended = wait_until(lambda: sacct_state(attempt.executor_job_id or ""), "the attempt's end in sacct")
    assert ended in ("FAILED", "CANCELLED")


def occupy(ax: AutoexpEnv, node: str) -> str:
    """A job holding all of `node` (so the next 1-node job lands on the other); its Slurm id once it runs."""
    out = subprocess.run(
        ["sbatch", "--parsable", "-w", node, "--exclusive", "--job-name=autoexp-test-occupy",
         f"--chdir={ax.tmp}", "--output=/dev/null", "--time=5", "--wrap", "sleep 240"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    job_id = out.strip().split(";")[0]
    ax.extra_jobs.append(job_id)
    wait_until(lambda: squeue_state(job_id) == "RUNNING", f"job {job_id} holding {node}", 120)
    return job_id

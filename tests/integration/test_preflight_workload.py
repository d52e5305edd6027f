"""The pre-flight workload itself on the CPU (torch's matmul): two "nodes" started at once on one
results dir, the test hook making one of them slow. No Slurm: the nodes are told who they are
through the variables srun sets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oellm_autoexp.workloads.preflight import SLOW_NODE_ENV
from oellm_autoexp.workloads.preflight_judge import FAIL_RE, RESULT_RE
from tests.paths import REPO

pytestmark = pytest.mark.torch

RUN_TIMEOUT_S = 120


def start(node: str, node_id: int, root: Path, slow: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": "2",
        "SLURMD_NODENAME": node,
        "SLURM_NODEID": str(node_id),
        SLOW_NODE_ENV: slow,
    }
    env.pop("SLURM_JOB_NODELIST", None)
    argv = [sys.executable, "-m", "oellm_autoexp.workloads.preflight", "--results-root", str(root),
            "--budget-s", "60"]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, list[str]]:
    out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    return proc.returncode, out.splitlines()


def test_the_slow_node_fails_against_the_median_and_the_other_passes(tmp_path: Path) -> None:
    """nodeB's figure is cut to a tenth by the hook: it prints `preflight FAIL nodeB: gemm ... <
    0.9 x median ...` and exits 1; nodeA prints its result line only and exits 0. Each wrote one
    JSON file in the run's dir."""
    procs = [start("nodeA", 0, tmp_path, "nodeB:0.1"), start("nodeB", 1, tmp_path, "nodeB:0.1")]
    (rc_a, out_a), (rc_b, out_b) = (finish(p) for p in procs)
    assert rc_a == 0, out_a
    assert rc_b == 1, out_b
    [line_a] = [m for line in out_a if (m := RESULT_RE.match(line))]
    assert line_a["node"] == "nodeA" and line_a["unit"] == "GFLOP/s"
    fails = [m for line in out_b if (m := FAIL_RE.match(line))]
    assert [m["node"] for m in fails] == ["nodeB"]
    assert " GFLOP/s < 0.9 x median " in fails[0]["problem"], out_b
    assert not any(FAIL_RE.match(line) for line in out_a)
    assert sorted(p.name for p in (tmp_path / "4242.0").iterdir()) == ["nodeA.json", "nodeB.json"]


def test_a_node_whose_peer_never_reports_waits_for_its_budget_only(tmp_path: Path) -> None:
    """Node 0 of a 2-node run alone: it waits out its budget (here 6 s), not longer, and says that
    only 1 of 2 nodes sent a result (it cannot name the missing one without a node list)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "7", "SLURM_NNODES": "2",
           "SLURMD_NODENAME": "nodeA", "SLURM_NODEID": "0"}  # fmt: skip
    env.pop("SLURM_JOB_NODELIST", None)
    argv = [sys.executable, "-m", "oellm_autoexp.workloads.preflight", "--results-root", str(tmp_path),
            "--budget-s", "6"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "preflight: only 1 of 2 nodes sent a result within 6 s" in done.stdout

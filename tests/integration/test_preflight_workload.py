"""The pre-flight workload itself on the CPU (torch's matmul): two "nodes" started at once on one
results dir, the test hook making one of them slow. No Slurm: the nodes are told who they are
through the variables srun sets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from oellm_autoexp.workloads.preflight import SLOW_NODE_ENV
from oellm_autoexp.workloads.preflight_judge import FAIL_RE, RESULT_RE
from oellm_autoexp.workloads.preflight_pairs import partner_in_round
from tests.paths import REPO

pytestmark = pytest.mark.torch

RUN_TIMEOUT_S = 120


def start(
    node: str, node_id: int, root: Path, slow: str, *extra: str, nodes: int = 2, port: int = 0
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": str(nodes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "SLURMD_NODENAME": node,
        "SLURM_NODEID": str(node_id),
        SLOW_NODE_ENV: slow,
    }
    env.pop("SLURM_JOB_NODELIST", None)
    argv = [sys.executable, "-m", "oellm_autoexp.workloads.preflight", "--results-root", str(root),
            "--budget-s", "60", *extra]  # fmt: skip
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


@pytest.mark.parametrize("world", [2, 3, 4, 5, 8])
def test_pairs_are_mutual_and_meet_two_partners(world: int) -> None:
    """Each round pairs nodes both ways; above 2 nodes every node but the odd one out of an odd count
    meets two different partners, so a bad node is slow with both and its neighbours are not."""
    met: dict[int, set[int]] = {r: set() for r in range(world)}
    for round_no in (0, 1):
        for rank in range(world):
            partner = partner_in_round(rank, world, round_no)
            if partner is not None:
                assert partner_in_round(partner, world, round_no) == rank
                met[rank].add(partner)
    counts = sorted(len(m) for m in met.values())
    expected = [1] * world if world == 2 else ([1, 1] + [2] * (world - 2) if world % 2 else [2] * world)
    assert counts == expected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pairwise_blames_the_node_slow_with_both_partners(tmp_path: Path) -> None:
    """Four nodes (gloo on the CPU) exchange buffers in two rounds of pairs; nodeC's figure is cut
    to a twentieth by the hook: only nodeC fails, on `pairwise ... < 0.5 x median ...`."""
    port = free_port() - 1  # the check listens on MASTER_PORT + 1
    names = ["nodeA", "nodeB", "nodeC", "nodeD"]
    extra = ("--checks", "pairwise", "--pairwise-mb", "8", "--relative-min", "0.5")
    procs = [start(n, i, tmp_path, "nodeC:0.05", *extra, nodes=4, port=port) for i, n in enumerate(names)]
    done = dict(zip(names, (finish(p) for p in procs), strict=True))
    assert {n: rc for n, (rc, _) in done.items()} == {"nodeA": 0, "nodeB": 0, "nodeC": 1, "nodeD": 0}, done
    fails = [m for _, out in done.values() for line in out if (m := FAIL_RE.match(line))]
    assert [m["node"] for m in fails] == ["nodeC"]
    assert fails[0]["problem"].startswith("pairwise ") and "< 0.5 x median" in fails[0]["problem"]

"""The localhost Slurm cluster itself: what the supervisor relies on, checked against the real daemons."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

# sacct is current within ~0.3 s for jobs that start at once, but lags up to ~5 s for pending ones.
SACCT_DEADLINE_S = 30.0
RUNNING_DEADLINE_S = 30.0
POLL_S = 0.2
CMD_TIMEOUT_S = 30
# `up` on a running cluster measured 0.25-0.4 s; the bound leaves room for a loaded machine.
NOOP_UP_MAX_S = 3.0
SLURM_LOCAL_SH = Path(__file__).resolve().parents[2] / "scripts" / "slurm_local.sh"
# Ports of the second cluster: far from the default 6817.. so both can run side by side.
SECOND_CLUSTER_PORT_BASE = "7817"


def _run(args: list[str], timeout: float = CMD_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _sbatch(tmp_path: Path, body: str, *options: str) -> str:
    """Writes ``body`` as a batch script under tmp_path, submits it, and returns the job id."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    out = _run(
        [
            "sbatch",
            "--parsable",
            f"--chdir={tmp_path}",
            f"--output={tmp_path}/slurm-%j.out",
            "--job-name=autoexp-test",
            *options,
            str(script),
        ]
    )
    return out.stdout.strip().split(";")[0]


def _sacct(job_id: str) -> tuple[str, str] | None:
    """(State, ExitCode) of the job's allocation line, or None while sacct has no record yet."""
    out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"]).stdout
    for line in out.splitlines():
        state, exit_code = line.split("|")
        return state.split()[0], exit_code  # "CANCELLED by 0" -> "CANCELLED"
    return None


def _wait_sacct(job_id: str, terminal: set[str]) -> tuple[str, str]:
    deadline = time.monotonic() + SACCT_DEADLINE_S
    seen = None
    while time.monotonic() < deadline:
        seen = _sacct(job_id)
        if seen and seen[0] in terminal:
            return seen
        time.sleep(POLL_S)
    raise AssertionError(f"job {job_id} not in {terminal} within {SACCT_DEADLINE_S}s; last sacct: {seen}")


def _wait_running(job_id: str) -> None:
    deadline = time.monotonic() + RUNNING_DEADLINE_S
    while time.monotonic() < deadline:
        if _run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip() == "RUNNING":
            return
        time.sleep(POLL_S)
    raise AssertionError(f"job {job_id} not RUNNING within {RUNNING_DEADLINE_S}s")


def _daemon_pids(state_dir: Path) -> dict[str, int]:
    return {f.stem: int(f.read_text().split()[0]) for f in sorted((state_dir / "run").glob("*.pid"))}


def _is_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_completed_job_is_seen_in_sacct(tmp_path: Path) -> None:
    """A batch job that exits 0 is recorded by accounting as COMPLETED with exit code 0:0."""
    job_id = _sbatch(tmp_path, "echo hello from $SLURM_JOB_ID")

    assert _wait_sacct(job_id, {"COMPLETED", "FAILED", "CANCELLED"}) == ("COMPLETED", "0:0")
    assert (tmp_path / f"slurm-{job_id}.out").read_text().strip() == f"hello from {job_id}"


def test_failing_job_is_failed_with_its_exit_code(tmp_path: Path) -> None:
    """A batch script that ends with `exit 3` is FAILED in sacct, and ExitCode carries the 3."""
    job_id = _sbatch(tmp_path, "exit 3")

    assert _wait_sacct(job_id, {"COMPLETED", "FAILED", "CANCELLED"}) == ("FAILED", "3:0")


def test_cancelled_running_job_is_cancelled_in_sacct(tmp_path: Path) -> None:
    """scancel on a RUNNING job ends it, and sacct reports CANCELLED (not FAILED, not COMPLETED)."""
    job_id = _sbatch(tmp_path, "sleep 300")
    _wait_running(job_id)

    _run(["scancel", job_id])

    state, _ = _wait_sacct(job_id, {"COMPLETED", "FAILED", "CANCELLED"})
    assert state == "CANCELLED"


def test_second_up_is_a_noop(slurm_cluster) -> None:
    """`up` on a cluster that is already up with the same settings returns fast and restarts nothing."""
    before = _daemon_pids(slurm_cluster.state_dir)
    assert {"munged", "slurmctld", "slurmd-node1"} <= before.keys()
    # Same settings as the running cluster, so that a changed environment cannot turn this into a restart.
    args = ["bash", "-c", 'set -a && . "$1" && set +a && exec "$2" up', "bash"]
    args += [str(slurm_cluster.settings), str(SLURM_LOCAL_SH)]

    started = time.monotonic()
    out = _run(args, timeout=60)
    elapsed = time.monotonic() - started

    assert out.stdout.strip() == f"export SLURM_CONF={slurm_cluster.conf}"
    assert "starting" not in out.stderr and "stopping" not in out.stderr, out.stderr
    assert _daemon_pids(slurm_cluster.state_dir) == before
    assert elapsed < NOOP_UP_MAX_S, f"no-op up took {elapsed:.2f}s"


def test_gpu_job_gets_cuda_visible_devices(tmp_path: Path) -> None:
    """A job asking for --gres=gpu:1 sees exactly one (fake) GPU in CUDA_VISIBLE_DEVICES."""
    job_id = _sbatch(tmp_path, 'echo "CVD=$CUDA_VISIBLE_DEVICES"', "--gres=gpu:1")

    assert _wait_sacct(job_id, {"COMPLETED", "FAILED", "CANCELLED"})[0] == "COMPLETED"
    line = (tmp_path / f"slurm-{job_id}.out").read_text().strip()
    assert line.startswith("CVD=")
    assert line.removeprefix("CVD=").isdigit(), line


def test_two_node_job_runs_on_two_distinct_nodes(tmp_path: Path, slurm_cluster) -> None:
    """sbatch -N2 gets two nodes, and srun inside it starts one task on each of them."""
    nodes = _run(["sinfo", "-h", "-N", "-p", slurm_cluster.partition, "-o", "%N"]).stdout.split()
    assert len(set(nodes)) >= 2, f"the test cluster needs SLURM_LOCAL_NODES>=2, has {nodes}"

    job_id = _sbatch(tmp_path, 'srun bash -c "echo node=\\$SLURMD_NODENAME"', "-N2", "--ntasks-per-node=1")

    assert _wait_sacct(job_id, {"COMPLETED", "FAILED", "CANCELLED"})[0] == "COMPLETED"
    lines = (tmp_path / f"slurm-{job_id}.out").read_text().split()
    ran_on = [line.removeprefix("node=") for line in lines if line.startswith("node=")]
    assert len(ran_on) == 2 and len(set(ran_on)) == 2, lines


def test_second_cluster_runs_beside_the_first_and_down_stops_it() -> None:
    """A second cluster (own state dir, ports from 7817, no accounting) runs a job; `down` stops its daemons.

    Every pid from its pid files must be gone afterwards, and the first cluster is untouched.
    """
    # Short path: the munge socket under it must fit a unix socket path (108 bytes).
    state_dir = Path(tempfile.mkdtemp(prefix="slurm-local-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env |= {
        "SLURM_LOCAL_DIR": str(state_dir),
        "SLURM_LOCAL_PORT_BASE": SECOND_CLUSTER_PORT_BASE,
        "SLURM_LOCAL_ACCOUNTING": "0",
        "SLURM_LOCAL_LINK_ETC": "0",
        "SLURM_LOCAL_NODES": "1",
        "SLURM_LOCAL_CLUSTER": "second",
    }
    first_ctld = _daemon_pids(Path(os.environ["SLURM_CONF"]).parent.parent).get("slurmctld")
    try:
        up = _run([str(SLURM_LOCAL_SH), "up"], env=env, timeout=120)
        assert up.stdout.strip() == f"export SLURM_CONF={state_dir}/etc/slurm.conf"
        env["SLURM_CONF"] = f"{state_dir}/etc/slurm.conf"
        pids = _daemon_pids(state_dir)
        assert {"munged", "slurmctld", "slurmd-node1"} <= pids.keys()
        assert all(_is_alive(pid) for pid in pids.values())
        _run(["srun", f"--chdir={state_dir}", "true"], env=env)

        _run([str(SLURM_LOCAL_SH), "down"], env=env, timeout=120)

        assert [name for name, pid in pids.items() if _is_alive(pid)] == []
        assert first_ctld is None or _is_alive(first_ctld)
    finally:
        cleanup = [str(SLURM_LOCAL_SH), "down", "--purge"]
        subprocess.run(cleanup, env=env, capture_output=True, timeout=120, check=False)
        shutil.rmtree(state_dir, ignore_errors=True)

"""Test plumbing shared by every test: the real localhost Slurm cluster, the torch gate, a thread-leak guard.

Tests marked ``@pytest.mark.slurm`` get a running cluster (``scripts/slurm_local.sh up``, once per run) and
``SLURM_CONF`` pointing at it; tests marked ``@pytest.mark.torch`` need torch importable. When either is
missing the test is skipped with the reason, except where it must run (``CI=true`` or
``AUTOEXP_REQUIRE_SLURM=1``): there it fails with the reason, so a broken set-up never passes as skips.
Fixtures for one area belong in that area's conftest (e.g. ``tests/integration/conftest.py``).
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SLURM_LOCAL_SH = REPO_ROOT / "scripts" / "slurm_local.sh"
# Two emulated nodes, so that multi-node jobs (sbatch -N2) are tested for real.
TEST_CLUSTER_NODES = "2"
# A fresh machine installs the packages first (~15 s measured); a loaded one can be much slower.
BRINGUP_TIMEOUT_S = 600
# How long a test's threads may take to finish after the test before they count as leaked.
THREAD_JOIN_GRACE_S = 2.0


@dataclass(frozen=True)
class SlurmCluster:
    """The running localhost cluster: its slurm.conf, default partition and state directory."""

    conf: Path
    partition: str

    @property
    def state_dir(self) -> Path:
        """SLURM_LOCAL_DIR: the conf lives in ``<state_dir>/etc/slurm.conf``."""
        return self.conf.parent.parent

    @property
    def settings(self) -> Path:
        """The SLURM_LOCAL_* settings the cluster was brought up with (sourceable by bash)."""
        return self.state_dir / "settings.env"


def must_not_skip() -> bool:
    """True where a missing cluster or torch is a failure, not a skip (CI, scripts/test.sh)."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("AUTOEXP_REQUIRE_SLURM") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip the current test for ``reason``, or fail it where it must run."""
    if must_not_skip():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _bring_up_cluster(settings: dict[str, str] | None = None) -> Path:
    env = dict(os.environ)
    env.setdefault("SLURM_LOCAL_NODES", TEST_CLUSTER_NODES)
    env.update(settings or {})
    try:
        proc = subprocess.run(
            [str(SLURM_LOCAL_SH), "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=BRINGUP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"local Slurm cluster could not come up: {exc}")
    if proc.returncode != 0:
        unavailable(f"local Slurm cluster could not come up (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("export SLURM_CONF="):
            return Path(line.removeprefix("export SLURM_CONF="))
    unavailable(f"slurm_local.sh up printed no SLURM_CONF line:\n{proc.stdout}\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The localhost cluster, brought up once per run; ``AUTOEXP_SLURM_CONF`` names one already up.

    Sets ``os.environ["SLURM_CONF"]`` so that sbatch/squeue/sacct in tests and code under test find it.
    The cluster is left running after the tests (bring-up is idempotent; the next run reuses it).
    """
    given = os.environ.get("AUTOEXP_SLURM_CONF")
    conf = Path(given) if given else _bring_up_cluster()
    if not conf.is_file():
        unavailable(f"Slurm config {conf} does not exist")
    os.environ["SLURM_CONF"] = str(conf)
    return SlurmCluster(conf=conf, partition=os.environ.get("SLURM_LOCAL_PARTITION", "debug"))


# A second cluster of our own for the allocation-strategy tests (docs/strategies.md): three nodes of
# 2 GPUs, node1 a100, node2-3 h100; partition a100 (node1), h100 (node2) and a100_spill (node3:
# its name says a100, it hands out h100). Its own dir, ports and name: the shared cluster is untouched.
STRATEGY_CLUSTER = {
    "SLURM_LOCAL_DIR": "/var/lib/slurm-strategies",
    "SLURM_LOCAL_PORT_BASE": "7917",
    "SLURM_LOCAL_CLUSTER": "strategies",
    "SLURM_LOCAL_PARTITION": "any",
    "SLURM_LOCAL_LINK_ETC": "0",
    "SLURM_LOCAL_NODES": "3",
    "SLURM_LOCAL_GPUS": "2",
    "SLURM_LOCAL_GPU_TYPES": "a100 h100 h100",
    "SLURM_LOCAL_EXTRA_CONF": "\n".join(
        f"PartitionName={name} Nodes={nodes} MaxTime=INFINITE State=UP"
        for name, nodes in (("a100", "node1"), ("h100", "node2"), ("a100_spill", "node3"))
    ),
}


@pytest.fixture(scope="session")
def strategy_cluster() -> Path:
    """The strategies cluster (STRATEGY_CLUSTER), brought up once per run; its slurm.conf.

    Tests pass ``SLURM_CONF=<this>`` to the commands they run; the shared cluster stays the default.
    """
    return _bring_up_cluster(STRATEGY_CLUSTER)


@functools.cache
def _torch_import_error() -> str | None:
    try:
        importlib.import_module("torch")
    except Exception as exc:  # a broken install raises more than ImportError
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(autouse=True)
def _marker_requirements(request: pytest.FixtureRequest) -> None:
    """Gives ``slurm`` tests the cluster and ``torch`` tests torch, or skips/fails them (module docstring)."""
    if request.node.get_closest_marker("torch") and (error := _torch_import_error()):
        unavailable(f"torch is not importable: {error}")
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_cluster")


def _new_live_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]


@pytest.fixture(autouse=True)
def _no_thread_leaks() -> Iterator[None]:
    """Fails a test that leaves non-daemon threads running (a tailer or monitor loop it never stopped).

    Threads that are already finishing get THREAD_JOIN_GRACE_S in total to end before they count.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_JOIN_GRACE_S
    for thread in _new_live_threads(before):
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    if leaked := _new_live_threads(before):
        names = ", ".join(sorted(t.name for t in leaked))
        pytest.fail(f"test leaked {len(leaked)} non-daemon thread(s): {names}", pytrace=False)

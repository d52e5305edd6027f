"""On the localhost Slurm: a node whose NCCL network errors end two attempts is excluded
(core/decide/recurring_blame.py), while one attempt's errors blame no one (both ends of a broken
connection print them)."""

from __future__ import annotations

import json
import subprocess

import pytest

from oellm_autoexp.core.watch.evidence import Evidence
from tests.integration.test_monitor_slurm import AutoexpEnv, wait_until
from tests.integration.test_preflight_slurm import occupy
from tests.integration.test_resilience_slurm import evidence, excluded_nodes

pytestmark = pytest.mark.slurm

# NVIDIA/nccl#1405's completion error, with NCCL's `host:pid:tid [dev]` prefix for the node it runs on.
COMPLETION = (
    "$SLURMD_NODENAME:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
    "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)


def test_the_node_nccl_names_in_two_failed_attempts_is_excluded(autoexp: AutoexpEnv) -> None:
    """node2 held by another job: attempts 1 and 2 land on node1, whose "HCA" fails every connection
    (the script prints NCCL's completion error there and exits 1). Attempt 1's restart excludes nothing
    and records node1 as named; attempt 2's restart excludes node1 (scontrol shows it) with the
    recurrence as its evidence; once node2 is free, attempt 3 runs there and completes."""
    holder = occupy(autoexp, "node2")
    script = autoexp.script(
        f"""\
if [ "$SLURMD_NODENAME" = node1 ]; then echo {json.dumps(COMPLETION)} >&2; exit 1; fi
echo "attempt $n done on $SLURMD_NODENAME"
"""
    )
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    restarts = wait_until(lambda: _restarts(autoexp)[1:] and _restarts(autoexp), "two restart decisions", 120)
    first, second = restarts
    assert first.error_type == "nccl" and first.exclude_nodes == () and first.blamed == ()
    assert first.named_nodes == ("node1",)
    assert second.exclude_nodes == ("node1",) and second.blamed[0].startswith("node1: NCCL's network errors")
    third = wait_until(lambda: next((a for a in autoexp.attempts() if a.attempt_no == 3), None), "attempt 3")
    assert excluded_nodes(third.executor_job_id or "") == "node1"
    subprocess.run(["scancel", holder], check=True, timeout=30)
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    assert [a.nodes for a in autoexp.attempts()] == [("node1",), ("node1",), ("node2",)]


def _restarts(autoexp: AutoexpEnv) -> list[Evidence]:
    """The restart decisions' evidence so far; none before the monitor created its job."""
    if not autoexp.state.joinpath("autoexp.db").exists() or not autoexp.read(lambda s: s.jobs_for_session(1)):
        return []
    return evidence(autoexp, "restart")

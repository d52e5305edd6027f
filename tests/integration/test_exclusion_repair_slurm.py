"""An exclusion is lifted when the real localhost Slurm shows its node drained and resumed after it was made.

The test drains a node of the shared cluster for a few seconds: it resumes it in a `finally`, and it
drains one that runs nothing of its own (a running job keeps running; a new one waits that long).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.core.decide.exclusions import InForce, exclusions_from_blame, in_force
from oellm_autoexp.core.decide.node_blame import Blame
from oellm_autoexp.core.jobs.slurm_nodes import NodeEvent

pytestmark = pytest.mark.slurm

CMD_TIMEOUT_S = 30
EVENT_DEADLINE_S = 30.0  # slurmctld hands node events to slurmdbd at once; a loaded machine lags
REASON = "autoexp-test-exclusion-repair"


def _scontrol_node(node: str, *settings: str) -> None:
    subprocess.run(["scontrol", "update", f"NodeName={node}", *settings], check=True, timeout=CMD_TIMEOUT_S,
                   capture_output=True, text=True)  # fmt: skip


def _events_until(
    read: Callable[[], list[NodeEvent]], done: Callable[[list[NodeEvent]], bool]
) -> list[NodeEvent]:
    """Read slurmdbd's events until `done` says they show what is wanted (its rows lag a little)."""
    deadline = time.monotonic() + EVENT_DEADLINE_S
    events = read()
    while not done(events) and time.monotonic() < deadline:
        time.sleep(0.5)
        events = read()
    assert done(events), events
    return events


def test_a_drained_then_resumed_node_lifts_its_exclusion(slurm_cluster) -> None:
    """Excluded, then drained (still in force: the node is out), then resumed: the event that ended
    after the exclusion lifts it, and the reason names the drain."""
    executor = SlurmExecutor()
    partition = executor.partition_nodes(slurm_cluster.partition)
    assert partition == 2  # the test cluster's two nodes (1-node job: one may be excluded)
    node = "node2"
    made = datetime.now(UTC) - timedelta(seconds=2)  # blamed a little before the site drains it
    exclusion = exclusions_from_blame("job-a", [Blame(node, "test: Xid 79 on node2", "log")], made)[0]

    def judge(events: list[NodeEvent]) -> InForce:
        return in_force([exclusion], events, datetime.now(UTC), job="job-a", partition_nodes=partition,
                        job_nodes=1)  # fmt: skip

    def read() -> list[NodeEvent]:
        return [e for e in executor.node_events([node], made) if e.reason == REASON]

    assert judge(read()).nodes == (node,)
    try:
        _scontrol_node(node, "State=DRAIN", f"Reason={REASON}")
        open_now = _events_until(read, lambda events: any(e.end is None for e in events))
        assert judge(open_now).nodes == (node,)  # still drained: not repaired yet
    finally:
        _scontrol_node(node, "State=RESUME")
    ended = _events_until(read, lambda events: bool(events) and all(e.end is not None for e in events))
    verdict = judge(ended)
    assert verdict.nodes == ()
    assert [lifted.exclusion.node for lifted in verdict.lifted] == [node]
    assert f"{node} repaired: Slurm shows it" in verdict.lifted[0].why and REASON in verdict.lifted[0].why

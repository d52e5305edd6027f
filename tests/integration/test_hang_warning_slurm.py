"""On the localhost Slurm: a line that warns of a hang (NCCL's InfiniBand port event) makes a still
counter a hang within the short warned limit, not the plain one (core/watch/progress.py)."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.test_monitor_slurm import AutoexpEnv
from tests.integration.test_resilience_slurm import evidence, iteration

pytestmark = pytest.mark.slurm

# NCCL >= 2.23's async-event line (src/transport/net_ib/common.cc), its prefix naming this node.
PORT_EVENT = (
    "$SLURMD_NODENAME:3468:3912 [0] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN "
    "NET/IB : mlx5_0:1 Got non-fatal async event: port error(10)"
)
HANG = {"progress_floor_s": 300, "no_output_timeout_s": 300, "warned_floor_s": 4, "warned_factor": 1}


def test_a_port_event_and_a_still_counter_restart_at_the_warned_limit_without_the_node(
    autoexp: AutoexpEnv,
) -> None:
    """Attempt 1 trains (a counter line every 0.3 s), prints NCCL's port event and goes quiet as a
    job whose link went down does. With the plain limits at 300 s and the warned floor at 4 s, the
    monitor judges it hung seconds after the event, cancels it, blames the node the event's prefix
    names and restarts without it; attempt 2 completes elsewhere."""
    lines = "\n".join(iteration(n) + "; sleep 0.3" for n in range(1, 9))
    script = autoexp.script(
        f"""\
if [ "$n" -eq 1 ]; then
{lines}
  echo {json.dumps(PORT_EVENT)} >&2
  sleep 200
fi
{iteration(10)}
"""
    )
    started = time.monotonic()
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)], {"hang": HANG})))
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    assert time.monotonic() - started < 120  # not the 300 s limits, nor the 200 s sleep
    [restart] = evidence(autoexp, "restart")
    first, second = autoexp.attempts()
    assert restart.error_type == "nccl" and restart.signal == "nccl_ib_port_event"
    assert "warns of a hang" in (restart.observed or "")
    assert restart.exclude_nodes == first.nodes and set(second.nodes).isdisjoint(first.nodes)

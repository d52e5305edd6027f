"""On the localhost Slurm: a silent hang's broken node is found by asking every rank for its stacks
(daemon/stack_probe.py, core/decide/stack_dump_blame.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from oellm_autoexp.core.watch.evidence import Evidence
from tests.integration.test_monitor_slurm import AutoexpEnv, wait_until
from tests.integration.test_resilience_slurm import evidence, iteration

pytestmark = pytest.mark.slurm

HANG = {"progress_floor_s": 4, "progress_factor": 1, "no_output_timeout_s": 300, "startup_timeout_s": 300,
        "stack_dump_wait_s": 3}  # fmt: skip
# One "rank" per node: waits as a rank in a collective does; node2's is stopped (SIGSTOP: it cannot
# answer, as a process of a frozen node). Its lines carry the `[rankN]:` prefix torchrun gives them.
RANK = """\
import os, signal, sys, time
print("rank", os.environ["NODE_RANK"], "waiting in the collective", file=sys.stderr, flush=True)
if os.environ["NODE_RANK"] == "1":
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(120)
"""


def test_the_rank_that_does_not_answer_the_probe_names_its_node(autoexp: AutoexpEnv) -> None:
    """Attempt 1 on node1 and node2: node1's script prints the rank layout (as a torchrun script does)
    and a few counter lines, then both ranks stop without a word; node2's process is stopped. The
    monitor's hang verdict sends SIGUSR2 first: node1's rank prints its stacks, node2's cannot, and the
    restart blames and excludes node2. (On this 2-node partition the exclusion cap, half the spare
    nodes, then lifts it for the submission: daemon/exclusions_in_force.py; the decision is the test.)"""
    rank = autoexp.tmp / "rank.py"
    rank.write_text(RANK, encoding="utf-8")
    counter = "\n".join(f"  {iteration(n)}; sleep 0.3" for n in range(1, 6))
    script = autoexp.script(
        f"""\
if [ "$NODE_RANK" = 0 ]; then
  echo "autoexp: rank layout: 1 ranks per node (node rank = SLURM_NODEID)" >&2
{counter}
fi
{sys.executable} {rank} 2>&1 | sed -u "s/^/[rank$NODE_RANK]:/"
"""
    )
    started = time.monotonic()
    experiment = autoexp.experiment(["bash", str(script)], {"hang": HANG}, slurm={"nodes": 2})
    monitor = autoexp.start("run", str(experiment))
    # The next 2-node attempt cannot run on this 2-node cluster without node2: the test stops there.
    restarts = wait_until(lambda: _restarts(autoexp), "the restart decision", 60)
    assert time.monotonic() - started < 60
    monitor.terminate()
    monitor.wait(timeout=30)
    output = autoexp.output(monitor)
    assert "asked every rank for its stacks (SIGUSR2)" in output
    [restart] = restarts
    assert restart.exclude_nodes == ("node2",), output
    assert any("printed no stack dump after the probe (1 of 2 ranks did)" in b for b in restart.blamed)
    log = autoexp.attempts()[0].log_path
    assert log is not None
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    # node1's rank answered. node2's could not before the judgement (the blame above says 1 of 2 did);
    # where its pending dump lands once Slurm's cancel sends SIGCONT, before or after srun's abort line,
    # is a race, so the log's order after the judgement is not asserted.
    assert "[rank0]:Current thread 0x" in text


def _restarts(autoexp: AutoexpEnv) -> list[Evidence]:
    if not autoexp.state.joinpath("autoexp.db").exists() or not autoexp.read(lambda s: s.jobs_for_session(1)):
        return []
    return evidence(autoexp, "restart")

"""On the localhost Slurm: a restart that never logs its first iteration is judged hung at the start-up
limit learned from the job's earlier attempt (core/watch/startup.py), long before startup_timeout_s."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.test_monitor_slurm import NCCL_LINE, AutoexpEnv
from tests.integration.test_resilience_slurm import evidence, iteration

pytestmark = pytest.mark.slurm

# The ceiling (the configured limit) far above what the learned one comes to: 2 x ~3 s (the floor, 2 s,
# below it: the factor is what applies).
CEILING_S = 120
FLOOR_S = 2.0
HANG = {"startup_timeout_s": CEILING_S, "startup_factor": 2, "startup_floor_s": FLOOR_S}


def test_a_restart_silent_at_start_up_is_hung_at_the_learned_limit(autoexp: AutoexpEnv) -> None:
    """Attempt 1 starts up in ~3 s (its first iteration line), then fails on NCCL and is restarted.
    Attempt 2 never logs an iteration: with the learned limit (2 x attempt 1's start-up, at least 2 s)
    it is judged a start-up hang seconds after it started, not after the 120 s startup_timeout_s, and the
    decision says which limit applied and why. Attempt 3 (a learned limit is not trusted twice in a row)
    gets the configured limit and completes."""
    script = autoexp.script(
        f"""\
if [ "$n" -eq 1 ]; then
  sleep 3
  {iteration(1)}
  echo {json.dumps(NCCL_LINE)} >&2
  exit 1
fi
if [ "$n" -eq 2 ]; then
  sleep 300
fi
{iteration(10)}
"""
    )
    started = time.monotonic()
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)], {"hang": HANG})))
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    assert time.monotonic() - started < 60  # three short attempts, no 120 s limit waited out
    first, second, third = autoexp.attempts()
    assert first.started_at is not None and first.first_iteration_at is not None
    startup_s = (first.first_iteration_at - first.started_at).total_seconds()
    assert FLOOR_S / 2 < startup_s < CEILING_S / 4
    assert second.first_iteration_at is None and third.first_iteration_at is not None
    _, hang = evidence(autoexp, "restart")
    limit_s = 2 * startup_s
    assert hang.kind == "hang", hang
    observed = hang.observed or ""
    assert f"(startup limit {limit_s:.0f}s: 2 x this job's slowest start-up of {startup_s:.0f}s)" in observed
    assert second.started_at is not None and second.ended_at is not None
    # Cancelled at the learned limit (plus a poll or two), not at the ceiling.
    assert (second.ended_at - second.started_at).total_seconds() < limit_s + 15
    # `autoexp replay --session` reads the same start-ups from the store: the same limit, the same decision.
    replayed = autoexp.cli("replay", "--session", "1", "mon")
    assert replayed.returncode == 0, replayed.stderr
    assert (
        f"(startup limit {limit_s:.0f}s: 2 x this job's slowest start-up of {startup_s:.0f}s)"
        in replayed.stdout
    )
    # Every attempt replays to the same decisions: attempt 2's hang too, at the monitor's recorded poll (the
    # replay ticks there as well as on its own grid), before the cancel lines its decision caused.
    assert replayed.stdout.count("the same decisions at the same offsets") == len(autoexp.attempts()), (
        replayed.stdout
    )

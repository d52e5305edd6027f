"""On the localhost Slurm: a megatron_torchrun job's launch arguments say when its loop pauses on
purpose, and the hang tracker's floor follows them (core/watch/schedule.py, core/watch/progress.py
`progress_floor`).

The job is the script `autoexp run` renders for a megatron_torchrun backend: real torchrun (CPU)
starts one stand-in rank (fake_megatron.py) that prints Megatron's iteration line every
--log-interval, "evaluates" after every --eval-interval-th iteration (silent for --fake-eval-s, as
Megatron's evaluation pass is) and, with --fake-stall-at, stops printing for good. The plain floor
is 60 s and the scheduled one 4 s (progress_factor 1: the floor decides).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.core.watch.evidence import Evidence
from tests.integration.test_monitor_slurm import SETTINGS, AutoexpEnv, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.torch]  # torchrun starts the rank

FAKE = Path(__file__).with_name("fake_megatron.py")
PLAIN_FLOOR_S = 60
SCHEDULED_FLOOR_S = 4
HANG = {
    "progress_floor_s": PLAIN_FLOOR_S,
    "scheduled_floor_s": SCHEDULED_FLOOR_S,
    "progress_factor": 1,
    "no_output_timeout_s": 300,
    "startup_timeout_s": 120,
}
# A logged line every 2 iterations of 0.15 s (0.3 s apart); an evaluation pass every 20 iterations.
MEGATRON = {"log_interval": 2, "eval_interval": 20, "save_interval": 1000, "fake_step_s": 0.15}
# The pause after iteration 20: well past the scheduled floor, well inside the plain one.
EVAL_PAUSE_S = 10


def _experiment(autoexp: AutoexpEnv, megatron: dict[str, Any]) -> Path:
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "megatron_torchrun"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "sched", "output_dir": str(autoexp.tmp / "out")},
        "executor": "slurm",
        "backend": {
            "module": None,
            "megatron_path": str(FAKE.parent),
            "script": FAKE.name,
            "torchrun": [sys.executable, "-m", "torch.distributed.run"],
            "nproc_per_node": 1,
            "megatron": {**MEGATRON, **megatron},
        },
        "monitoring": {**SETTINGS, "hang": HANG},
    }
    path = autoexp.tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _hangs(autoexp: AutoexpEnv) -> list[Evidence]:
    """The evidence of every decision taken on a hang verdict so far."""
    if not autoexp.state.joinpath("autoexp.db").exists() or not autoexp.read(lambda s: s.jobs_for_session(1)):
        return []
    found = [Evidence.from_json(d.evidence) for d in autoexp.decisions()]
    return [e for e in found if e.trigger == "hang" or "hang" in (e.observed or "")]


def test_a_stall_where_nothing_is_due_is_a_hang_after_the_scheduled_floor(autoexp: AutoexpEnv) -> None:
    """The rank stalls after iteration 12: no evaluation (every 20) or save (every 1000) is due after
    iterations 12-13, and the step interval is known from 5 samples. The monitor judges it hung
    at the 4 s scheduled floor, not the 60 s plain one, and its verdict says why."""
    started = time.monotonic()
    monitor = autoexp.start("run", str(_experiment(autoexp, {"train_iters": 40, "fake_stall_at": 12})))
    [hang] = wait_until(lambda: _hangs(autoexp), "the hang decision", PLAIN_FLOOR_S)
    elapsed = time.monotonic() - started
    monitor.terminate()
    monitor.wait(timeout=30)
    observed = hang.observed or ""
    assert hang.iteration == 12, observed
    waited = re.search(r"no progress past iteration 12 for (\d+)s", observed)
    assert waited is not None, observed
    assert SCHEDULED_FLOOR_S <= int(waited.group(1)) < PLAIN_FLOOR_S / 2, observed
    assert (
        f"floor {SCHEDULED_FLOOR_S}s: no evaluation or save due before iteration 14 "
        "(megatron eval_interval=20, save_interval=1000)"
    ) in observed
    assert elapsed < PLAIN_FLOOR_S, observed  # start-up, 12 iterations and the short floor
    # `autoexp replay --session` reads the schedule from the job's plan, as the monitor did, and ticks at the
    # monitor's recorded poll too: the same hang, the same floor.
    replayed = autoexp.cli("replay", "--session", "1", "sched")
    assert replayed.returncode == 0, replayed.stderr
    assert f"floor {SCHEDULED_FLOOR_S}s: no evaluation or save due before iteration 14" in replayed.stdout, (
        replayed.stdout
    )


def test_a_pause_after_an_evaluation_iteration_is_not_a_hang(autoexp: AutoexpEnv) -> None:
    """The rank pauses 10 s after logging iteration 20 (an evaluation pass: eval_interval 20), more
    than twice the scheduled floor, then trains on to 30. The counter stands where an evaluation
    is due, so the plain floor holds: nothing is cancelled and the job completes in one attempt."""
    experiment = _experiment(autoexp, {"train_iters": 30, "fake_eval_s": EVAL_PAUSE_S})
    monitor = autoexp.start("run", str(experiment))
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    output = autoexp.output(monitor)
    assert _hangs(autoexp) == [], output
    [attempt] = autoexp.attempts()
    assert attempt.state.value == "COMPLETED", output
    assert attempt.log_path is not None
    log = Path(attempt.log_path).read_text(encoding="utf-8", errors="replace")
    # The pause happened where the schedule says: the validation line follows iteration 20's.
    assert re.search(r"iteration +20/ +30 .*\n-+\n validation loss at iteration 20 ", log), log
    assert re.search(r"iteration +30/ +30 ", log), log

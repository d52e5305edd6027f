"""On the localhost Slurm: lines a run survives are no reason to cancel it (docs/classification.md, "Lines a run
survives are fallbacks"). A job prints a DataLoader worker's last words, a module the site's set-up could not
load, a helper tool the loader could not start, the kernel's report of another process's trap and a node state
from `sinfo -R`, then trains on for longer than the settle window and ends well: one Slurm job, completed,
no restart. The same job with a CUDA OOM line in their place is stopped while it still runs (the monitor does
act on a fatal line), so the first test would see a wrong cancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_monitor_slurm import COMPLETED, AutoexpEnv

pytestmark = pytest.mark.slurm

SURVIVED = [
    "ERROR: Unexpected segmentation fault encountered in worker.",
    'Lmod has detected the following error:  The following module(s) are unknown: "cuda/12.4"',
    "nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object file: "
    "No such file or directory",
    "[12345.6] traps: chrome[40213] trap int3 ip:7f3a1c2b4e11 sp:7ffd2b1a7c80 error:0 in libc.so.6",
    "gpu017 1 gpu* drained  Kill task failed",
]
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def trains_through(ax: AutoexpEnv, lines: list[str]) -> str:
    """A job script: three iterations, `lines` on stderr, 4 s more of iterations (the settle window is 1 s),
    then it ends well."""
    printed = "".join(f"echo {json.dumps(line)} >&2\n" for line in lines)
    body = f"""\
for i in 1 2 3; do echo " iteration        $i/      12 | lm loss: 1.0 |"; sleep 0.2; done
{printed}for i in $(seq 4 12); do echo " iteration        $i/      12 | lm loss: 1.0 |"; sleep 0.5; done
echo "attempt $n done"
"""
    return str(ax.script(body))


def test_lines_a_run_survives_do_not_cancel_it(autoexp: AutoexpEnv) -> None:
    done = autoexp.cli("run", str(autoexp.experiment(["bash", trains_through(autoexp, SURVIVED)],
                                                      {"fatal_settle_s": 1})))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert autoexp.reasons() == [("stop", COMPLETED)]
    assert [a.state.value for a in autoexp.attempts()] == ["COMPLETED"]


def test_a_fatal_line_in_their_place_stops_the_job_while_it_runs(autoexp: AutoexpEnv) -> None:
    done = autoexp.cli("run", str(autoexp.experiment(["bash", trains_through(autoexp, [OOM])],
                                                      {"fatal_settle_s": 1})))  # fmt: skip
    [(action, reason)] = autoexp.reasons()
    assert (action, reason) == ("stop", "Permanent failure detected (excluded error_type: oom)"), done.stdout
    [attempt] = autoexp.attempts()
    assert attempt.state.value != "COMPLETED"
    assert "attempt 1 done" not in Path(attempt.log_path or "").read_text(encoding="utf-8")

"""Values from configs are data: a name or argument with $(...), backticks or quotes is never executed.

Every hostile value would create the file `pwned` in the working directory if any shell evaluated
it. The job prints what it received, which must be exactly what the config said.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oellm_autoexp.core.jobs.job_state import JobState

HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "a b  c",
    "$HOME",
    "\\$(touch pwned)",
    "x;touch pwned",
    "--flag=$(touch pwned)",
    "* ?",
]
NAME = "job $(touch pwned) `touch pwned` 'q' \"dq\" #not-a-comment"
PRINT = "import json, os, sys; print('ARGS=' + json.dumps(sys.argv[1:])); print('ENV=' + json.dumps([os.environ['HOSTILE'], os.environ.get('SLURM_JOB_NAME', os.environ['AUTOEXP_JOB_NAME'])]))"


def _experiment(executor: str) -> dict:
    return {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": NAME, "output_dir": "out $(touch pwned) `touch pwned`"},
        "executor": executor,
        "slurm": {
            "env": {"HOSTILE": "$(touch pwned) `touch pwned`"},
            "sbatch": {"comment": "$(touch pwned) \"q\" 'x'"},
        },
        "backend": {"command": ["python", "-c", PRINT, *HOSTILE]},
    }


def _check(finished, tmp_path: Path) -> None:
    (job,) = finished
    assert job.record.state is JobState.COMPLETED, job.log
    lines = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in job.log.splitlines() if "=" in line}
    assert json.loads(lines["ARGS"]) == HOSTILE
    assert json.loads(lines["ENV"]) == ["$(touch pwned) `touch pwned`", NAME]
    assert not list(tmp_path.rglob("pwned")), "a hostile value was executed"
    assert Path(job.plan.output_dir).is_dir() and "$(touch pwned)" in job.plan.output_dir


def test_hostile_values_are_inert_with_the_local_executor(runner, tmp_path: Path) -> None:
    """The local executor runs the same script: arguments, env, job name and paths arrive literally."""
    _check(runner.run(_experiment("local")), tmp_path)


@pytest.mark.slurm
def test_hostile_values_are_inert_under_sbatch(runner, tmp_path: Path) -> None:
    """sbatch parses the #SBATCH lines itself: the quoted job name reaches Slurm intact."""
    _check(runner.run(_experiment("slurm")), tmp_path)

"""The monitor job's pure parts: its name, its batch script (golden files), the scrubbed
environment it is submitted with, and the scrontab entry and its idempotent merge."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.monitor_job import (
    MonitorJobSpec,
    merge_scrontab,
    monitor_job_name,
    render_monitor_script,
    scrontab_block,
    scrubbed_environment,
)

GOLDEN = Path(__file__).parent / "golden"

SPEC = MonitorJobSpec(
    name=monitor_job_name("/runs/state", 3),
    session_id=3,
    state_dir="/runs/state",
    workdir="/runs",
    python="/opt/venv/bin/python",
    output="/runs/state/monitor-3.slurm.out",
    time_min=1440,
    handover_margin_s=120,
    mem="1G",
)
CASES = {
    "monitor_job_minimal": SPEC,
    "monitor_job_site": replace(SPEC, partition="cpu", qos="workflow", account="proj42", time_min=2880),
    "monitor_job_odd_paths": replace(
        SPEC, state_dir="/runs/my state/$(touch pwned)", workdir="/runs/it's", python="/opt/py 3/python"
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_monitor_script_matches_golden(case: str) -> None:
    """The script is byte-for-byte the reviewed golden file (UPDATE_GOLDEN=1 rewrites them)."""
    script = render_monitor_script(CASES[case])
    golden = GOLDEN / f"{case}.sbatch"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(script)
    assert script == golden.read_text(), f"{case}: rendered script differs from {golden}"


def test_monitor_script_is_a_singleton_requeued_and_warned_before_its_limit() -> None:
    script = render_monitor_script(SPEC)
    for line in ("--dependency=singleton", "--requeue", "--signal=B:USR1@120", "--time=1440",
                 "--ntasks=1", "--cpus-per-task=1", f"--job-name={SPEC.name}"):  # fmt: skip
        assert f"#SBATCH {line}\n" in script


def test_odd_paths_reach_the_monitor_as_one_literal_word_each(tmp_path: Path) -> None:
    """bash runs the exec line with `echo` in place of Python: each path is one word, nothing evaluated."""
    spec = CASES["monitor_job_odd_paths"]
    script = render_monitor_script(replace(spec, python="printf"))
    exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
    done = subprocess.run(["bash", "-c", exec_line.replace("exec printf", "exec printf '%s\\n'", 1)],
                          cwd=tmp_path, capture_output=True, text=True, check=True)  # fmt: skip
    words = done.stdout.splitlines()
    assert spec.state_dir in words and not (tmp_path / "pwned").exists()


def test_a_newline_in_a_path_is_refused() -> None:
    """It would end the #SBATCH line and start one bash runs."""
    with pytest.raises(UserError, match="newline"):
        render_monitor_script(replace(SPEC, state_dir="/runs/a\ntouch pwned"))


def test_job_name_is_per_session_and_per_state_dir() -> None:
    """Session numbers restart in every state dir: two experiments' monitors must not share a singleton."""
    assert monitor_job_name("/a/state", 1) == monitor_job_name("/a/state", 1)
    assert monitor_job_name("/a/state", 1).startswith("autoexp-monitor-1-")
    assert monitor_job_name("/a/state", 1) != monitor_job_name("/b/state", 1)
    assert monitor_job_name("/a/state", 1) != monitor_job_name("/a/state", 2)


def test_environment_is_scrubbed_of_the_allocation_but_keeps_the_client_config() -> None:
    env = {
        "SLURM_CPU_BIND": "quiet,mask_cpu:0x1",
        "SLURM_JOB_ID": "12",
        "SBATCH_PARTITION": "gpu",
        "PMIX_RANK": "0",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "PYTHONPATH": "/src",
        "HOME": "/home/me",
        "MY_SLURM_NOTE": "kept: not a prefix",
    }
    assert scrubbed_environment(env) == {
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "PYTHONPATH": "/src",
        "HOME": "/home/me",
        "MY_SLURM_NOTE": "kept: not a prefix",
    }


ENSURE = ["/opt/venv/bin/python", "-m", "oellm_autoexp", "--state-dir", "/runs/state", "monitor-session",
          "--session-id", "3", "--supervisor", "slurm"]  # fmt: skip


def test_scrontab_block_runs_the_ensure_command_every_n_minutes() -> None:
    block = scrontab_block(ENSURE, replace(SPEC, qos="workflow"), 10, {"PYTHONPATH": "/src dir"})
    lines = block.splitlines()
    assert lines[0].startswith(f"# autoexp-scrontab begin {SPEC.name}:")
    assert (
        lines[1]
        == f"#SCRON --job-name={SPEC.name}-scron --time=5 --ntasks=1 --cpus-per-task=1 --qos=workflow"
    )
    assert lines[2] == (
        "*/10 * * * * cd /runs && env PYTHONPATH='/src dir' /opt/venv/bin/python -m oellm_autoexp "
        "--state-dir /runs/state monitor-session --session-id 3 --supervisor slurm"
    )
    assert lines[3] == f"# autoexp-scrontab end {SPEC.name}"


def test_scrontab_merge_is_idempotent_and_keeps_the_users_entries() -> None:
    """Installing twice gives the same table; an edited entry replaces ours; other lines stay."""
    mine = "#SCRON --time=1\n0 * * * * ~/backup.sh\n"
    block = scrontab_block(ENSURE, SPEC, 10, {})
    once = merge_scrontab(mine, block, SPEC.name)
    assert merge_scrontab(once, block, SPEC.name) == once
    assert once.startswith(mine) and once.count("autoexp-scrontab begin") == 1
    other = scrontab_block(ENSURE, replace(SPEC, name="autoexp-monitor-4-x"), 5, {})
    both = merge_scrontab(once, other, "autoexp-monitor-4-x")
    changed = merge_scrontab(both, scrontab_block(ENSURE, SPEC, 5, {}), SPEC.name)
    assert changed.count("autoexp-scrontab begin") == 2 and "*/10" not in changed
    assert merge_scrontab("", block, SPEC.name) == block + "\n"

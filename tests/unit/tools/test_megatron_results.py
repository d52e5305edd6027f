"""The results table of scripts/device/megatron_autoexp.sh, from what each scenario left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_loader import load_script

results = load_script("scripts/device/megatron_results.py")

EXPLAIN = """job megatron_tiny (key main): completed — Job completed successfully
  attempt 1: job local-1 FAILED exit=1 nodes=localhost log=a.out
    2026-11-23 09:00:10 RESTART: Transient failure detected (error_type=nccl_timeout)
      cause: nccl_timeout (signal nccl_watchdog_timeout, state RUNNING)
      | [rank0]:[E1123 09:00:09] Watchdog caught collective operation timeout
  attempt 2: job local-2 COMPLETED exit=0 nodes=localhost log=b.out
    2026-11-23 09:01:00 STOP: Job completed successfully
"""
FATAL_AT = 1795424407.5  # 2026-11-23 09:00:07.5 UTC
STATUS = {"jobs": [{"job": "megatron_tiny", "status": "completed", "attempt": 2}]}
LOGS = [" iteration       60/     300 | lm loss: 6.0 |", " iteration      300/     300 | lm loss: 3.0 |"]


def test_decisions_are_read_from_explain_in_order() -> None:
    """Each dated action line of `autoexp explain` is a decision; cause and evidence lines are not."""
    decisions = results.parse_decisions(EXPLAIN)
    assert [(d.action, d.reason) for d in decisions] == [
        ("RESTART", "Transient failure detected (error_type=nccl_timeout)"),
        ("STOP", "Job completed successfully"),
    ]


def test_row_counts_delay_from_the_fatal_line_to_the_first_decision() -> None:
    """Fatal line seen at 09:00:07.5, restart decided at 09:00:10: 2.5 s; 2 attempts; completed at 300/300."""
    row = results.scenario_row("stop", STATUS, EXPLAIN, {"fatal_line_seen": FATAL_AT}, LOGS)
    assert (row.delay_s, row.attempts, row.completed, row.last_iteration) == (2.5, 2, True, "300/300")
    assert row.decisions.startswith("RESTART: Transient failure detected")


@pytest.mark.parametrize(
    ("status", "logs"),
    [
        ({"jobs": [{"status": "stopped", "attempt": 1}]}, LOGS),  # the monitor gave up
        (STATUS, LOGS[:1]),  # "completed", but the log stops at 60/300 (an early exit 0)
    ],
)
def test_completed_needs_both_the_status_and_the_last_iteration(status: dict, logs: list[str]) -> None:
    """A run is completed only if the monitor says so and the newest log reached --train-iters."""
    row = results.scenario_row("x", status, EXPLAIN, {}, logs)
    assert row.completed is False and row.delay_s is None


def test_collect_writes_one_row_per_scenario_folder(tmp_path: Path) -> None:
    """Folders with a status.json become rows of the markdown and JSON tables, sorted by name."""
    for name in ("walltime", "kill9"):
        folder = tmp_path / name
        (folder / "logs").mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps(STATUS))
        (folder / "explain.txt").write_text(EXPLAIN)
        (folder / "events.txt").write_text(f"{FATAL_AT} fatal_line_seen\n")
        (folder / "logs" / "slurm-local-2.out").write_text(LOGS[1])
        (folder / "logs" / "slurm-local-10.out").write_text("no iteration line here")
    out = tmp_path / "results"
    assert results.main(["x", str(tmp_path), str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())
    assert [r["scenario"] for r in rows] == ["kill9", "walltime"]
    assert all(r["completed"] and r["last_iteration"] == "300/300" for r in rows)
    assert out.with_suffix(".md").read_text().count("\n| kill9 | RESTART") == 1

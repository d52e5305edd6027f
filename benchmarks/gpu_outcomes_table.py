"""Render the outcome table of the multi-GPU fault scenarios from ONE results file.

    python benchmarks/gpu_outcomes_table.py results/2026-11-23_nvidia-h200-x2_autoexp_faults.json

The results file is written on the GPU machine by scripts/device/gpu_scenarios.py `table`
(scripts/device/gpu_autoexp.sh); this prints the Markdown table kept beside it (.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HEADER = (
    "| scenario | fault | collective timeout | attempts | decisions (action: reason) | judged on | "
    "decided after the first fatal line | last decision (s after start) | completed |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def row(r: dict[str, Any]) -> str:
    fault, _, timeout = r["scenario"].partition("_pg")
    decisions = "; ".join(f"{d['action']}: {d['reason']}" for d in r["decisions"])
    first = r["decisions"][0] if r["decisions"] else {}
    delay = first.get("after_first_fatal_s")
    judged = first.get("trigger") or "-"
    return (
        f"| {r['scenario']} | {fault} | {timeout + ' s' if timeout else '-'} | {len(r['attempts'])} | "
        f"{decisions} | {judged} | {'-' if delay is None else f'{delay:.1f} s'} | "
        f"{r['decisions'][-1]['at_s'] if r['decisions'] else '-'} | {'yes' if r['completed'] else 'no'} |"
    )


def render(data: dict[str, Any]) -> str:
    return "\n".join([HEADER, *(row(r) for r in data["rows"])])


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))

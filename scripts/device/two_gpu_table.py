#!/usr/bin/env python3
"""Issue 30's outcome table from the two device calls (two_gpu_proof.sh, two_gpu_followup.sh).

    python3 scripts/device/two_gpu_table.py CALL1_OUTCOMES CALL2_OUTCOMES MEGATRON_JSON BEFORE_JSON OUT_BASENAME

One row per scenario of the torch workload (a scenario run in both calls: the second call's row,
it ran after a change), each beside the 2026-11-23 two-GPU run's row of the same name (BEFORE_JSON,
`-` for a new scenario); then the Megatron rows. Paths of the device machine are cut to names.
Writes OUT_BASENAME.md and OUT_BASENAME.json.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

# The device's work dirs: the torch scenarios' (/tmp/two_gpu_*), the Megatron scenarios' (.megatron_autoexp
# under the repository, wherever the device put it) and the carried wheels'.
MACHINE_PATHS = re.compile(r"(/tmp/two_gpu_\w+/|(?:/[\w.-]+)*/\.megatron_autoexp/|/tmp/site/)")


def plain(text: str | None) -> str:
    return MACHINE_PATHS.sub("", text or "").replace("|", "/")


def summary(row: dict[str, Any]) -> dict[str, Any]:
    decisions = row["decisions"]
    first = decisions[0] if decisions else {}
    delay = first.get("after_first_fatal_s")
    return {
        "scenario": row["scenario"],
        "attempts": len(row["attempts"]),
        "decisions": "; ".join(f"{d['action']}: {plain(d['reason'])}" for d in decisions),
        "judged_on": first.get("trigger"),
        "after_first_fatal_s": None if delay is None else round(delay, 1),
        "completed": row["completed"],
        "events": [plain(e.split(" ", 1)[1]) for e in row.get("events", [])],
    }


def main(argv: list[str]) -> int:
    call1, call2, megatron, before = (json.loads(Path(p).read_text()) for p in argv[1:5])
    out = Path(argv[5])
    rows = {r["scenario"]: (summary(r), "1") for r in call1["rows"]}
    rows.update({r["scenario"]: (summary(r), "2") for r in call2["rows"]})
    old = {r["scenario"]: summary(r) for r in before["rows"]}
    lines = [
        "| scenario | call | attempts | decisions | judged on | after first fatal line | completed | 2026-11-23 (2×H200): after first fatal / judged on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(rows):
        row, call = rows[name]
        was = old.get(name)
        then = "-" if was is None else f"{fmt(was['after_first_fatal_s'])} / {was['judged_on']}"
        lines.append(
            f"| {name} | {call} | {row['attempts']} | {row['decisions']} | {row['judged_on']} | "
            f"{fmt(row['after_first_fatal_s'])} | {'yes' if row['completed'] else 'no'} | {then} |"
        )
    lines += ["", "Megatron-core (tiny GPT, 2 ranks, `autoexp run`, call 2):", ""]
    lines += [
        "| scenario | decisions | fatal line -> decision (s) | attempts | completed | last iteration |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in megatron:
        delay = "-" if r["delay_s"] is None else f"{r['delay_s']:.1f}"
        lines.append(
            f"| {r['scenario']} | {plain(r['decisions'])} | {delay} | {r['attempts']} | {r['completed']} | {r['last_iteration']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    megatron = [r | {"decisions": plain(r["decisions"])} for r in megatron]
    data = {"torch": [rows[n][0] | {"call": rows[n][1]} for n in sorted(rows)], "megatron": megatron}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    print("\n".join(lines))
    return 0


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


if __name__ == "__main__":
    sys.exit(main(sys.argv))

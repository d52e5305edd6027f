#!/usr/bin/env python3
"""The results table of scripts/device/megatron_autoexp.sh: one row per scenario.

    python3 scripts/device/megatron_results.py WORK_DIR OUT_BASENAME

WORK_DIR holds one folder per scenario with what the scenario script saved there:
`status.json` (`autoexp status --json`), `explain.txt` (`autoexp explain <job>`),
`events.txt` (`<unix time> <event>` lines: when the fault was injected and when its first
fatal line was seen) and `logs/` (every attempt's job log). Writes OUT_BASENAME.md (the
table) and OUT_BASENAME.json (the same rows). Row: scenario -> the monitor's decisions,
the delay from the first fatal line to the first decision after it, attempts, and whether
the run reached its last iteration.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

# `autoexp explain` prints one decision a line: "    2026-11-23 08:39:44 STOP: reason"
DECISION = re.compile(r"^\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s+([A-Z][A-Z_]+):\s*(.*)$")
ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+) \|")


@dataclass(frozen=True)
class Decision:
    at: float  # unix time (explain prints UTC wall-clock seconds)
    action: str
    reason: str


@dataclass(frozen=True)
class Row:
    scenario: str
    decisions: str  # "RESTART: reason; STOP: reason"
    delay_s: float | None  # first fatal line seen -> first decision after it
    attempts: int | None
    completed: bool
    last_iteration: str  # "300/300" from the newest log, "-" if none


def parse_decisions(explain: str) -> list[Decision]:
    """The decision lines of `autoexp explain`, oldest first."""
    found = []
    for line in explain.splitlines():
        match = DECISION.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            found.append(Decision(stamp.timestamp(), match.group(2), match.group(3)))
    return found


def parse_events(text: str) -> dict[str, float]:
    """`<unix time> <event>` lines -> the first time of each event."""
    events: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) == 2:
            events.setdefault(parts[1].strip(), float(parts[0]))
    return events


def last_iteration(log_texts: list[str]) -> tuple[int, int] | None:
    """(iteration, train_iters) of the last iteration line in the newest log that has one."""
    for text in reversed(log_texts):
        hits = ITERATION.findall(text)
        if hits:
            return int(hits[-1][0]), int(hits[-1][1])
    return None


def scenario_row(name: str, status: dict, explain: str, events: dict[str, float], logs: list[str]) -> Row:
    """One row from what one scenario left behind."""
    decisions = parse_decisions(explain)
    fatal = events.get("fatal_line_seen")
    after = [d for d in decisions if fatal is not None and d.at >= int(fatal)]
    job = (status.get("jobs") or [{}])[0]
    reached = last_iteration(logs)
    return Row(
        scenario=name,
        decisions="; ".join(f"{d.action}: {d.reason}" for d in decisions) or "-",
        delay_s=round(after[0].at - fatal, 1) if after and fatal is not None else None,
        attempts=job.get("attempt"),
        completed=job.get("status") == "completed" and reached is not None and reached[0] == reached[1],
        last_iteration=f"{reached[0]}/{reached[1]}" if reached else "-",
    )


def markdown(rows: list[Row]) -> str:
    lines = [
        "| scenario | decisions | fatal line -> decision (s) | attempts | completed | last iteration |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        delay = "-" if r.delay_s is None else f"{r.delay_s:.1f}"
        cells = [
            r.scenario,
            r.decisions.replace("|", "/"),
            delay,
            str(r.attempts),
            str(r.completed),
            r.last_iteration,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def collect(work: Path) -> list[Row]:
    rows = []
    for folder in sorted(p for p in work.iterdir() if (p / "status.json").exists()):
        try:
            status = json.loads(_read(folder / "status.json") or "{}")
        except json.JSONDecodeError:
            status = {}
        logs = [_read(p) for p in sorted((folder / "logs").glob("*.out"), key=_job_number)]
        events = parse_events(_read(folder / "events.txt"))
        rows.append(scenario_row(folder.name, status, _read(folder / "explain.txt"), events, logs))
    return rows


def _job_number(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    return int(digits[-1]) if digits else 0


def main(argv: list[str]) -> int:
    work, out = Path(argv[1]), Path(argv[2])
    rows = collect(work)
    out.with_suffix(".md").write_text(markdown(rows))
    out.with_suffix(".json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The pre-flight's lines in an attempt's log, read back for the report. Pure.

The check (oellm_autoexp.workloads.preflight, docs/preflight.md) prints one result line per node,
a FAIL line per node that failed, and the batch script one line with the step's time:

    preflight node1: gemm 790.1 TFLOP/s, hbm ok, allreduce 310.0 GB/s, 4 gpu, 6.2 s
    preflight FAIL node2: gemm 412.0 TFLOP/s < 0.9 x median 790.1
    autoexp: preflight step took 9.4 s (status 1)

`parse_preflight` turns them into an `AttemptPreflight`; `preflight_rows` into the report's table:
per attempt and node, the figures, the verdict, and whether the next attempt excluded the node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

RESULT_RE = re.compile(
    r"^preflight (?P<node>(?!FAIL )\S+): (?:gemm (?P<gemm>[\d.]+) (?P<unit>[TG]FLOP/s))?"
    r"(?:, )?(?:hbm (?P<hbm>ok|BAD))?(?:, )?(?:allreduce (?P<bw>[\d.]+) GB/s)?"
    r"(?:, )?(?:pairwise (?P<pair>[\d.]+) GB/s)?.*?(?P<seconds>[\d.]+) s$"
)
FAIL_RE = re.compile(r"^preflight FAIL (?P<node>[^\s:]+): (?P<problem>.+)$")
STEP_RE = re.compile(r"^autoexp: preflight step took (?P<seconds>\d+(?:\.\d+)?) s \(status (?P<rc>\d+)\)")


@dataclass(frozen=True)
class PreflightNode:
    """One node's figures in one attempt (None: not measured, or no result line)."""

    node: str
    gemm: float | None = None
    unit: str = ""  # TFLOP/s on a GPU, GFLOP/s on the CPU fallback
    hbm: str | None = None  # ok | BAD
    allreduce_gbps: float | None = None
    seconds: float | None = None
    failure: str | None = None  # the FAIL line's reason


@dataclass(frozen=True)
class AttemptPreflight:
    nodes: tuple[PreflightNode, ...]
    step_s: float | None  # the whole step, as the batch script timed it (interpreter start included)
    status: int | None  # its exit status: 0 passed


@dataclass(frozen=True)
class PreflightRow:
    """One row of the report's pre-flight table."""

    attempt_no: int
    node: str
    gemm: str
    hbm: str
    allreduce: str
    seconds: str
    verdict: str  # pass, or FAIL: <reason>
    excluded: str  # "", or what kept the node off the next attempt


def parse_preflight(lines: Iterable[str]) -> AttemptPreflight | None:
    """The pre-flight of one attempt's log; None when it ran none."""
    nodes: dict[str, PreflightNode] = {}
    failures: dict[str, str] = {}
    step_s: float | None = None
    status: int | None = None
    seen = False
    for raw in lines:
        line = raw.strip()
        if (m := FAIL_RE.match(line)) is not None:
            failures.setdefault(m["node"], m["problem"])
        elif (m := RESULT_RE.match(line)) is not None:
            nodes.setdefault(m["node"], _node(m))
        elif (m := STEP_RE.match(line)) is not None:
            step_s, status = float(m["seconds"]), int(m["rc"])
        else:
            continue
        seen = True
    if not seen:
        return None
    for node, problem in failures.items():
        current = nodes.get(node, PreflightNode(node))
        nodes[node] = PreflightNode(**{**current.__dict__, "failure": problem})
    return AttemptPreflight(tuple(sorted(nodes.values(), key=lambda n: n.node)), step_s, status)


def _node(m: re.Match[str]) -> PreflightNode:
    return PreflightNode(
        node=m["node"],
        gemm=float(m["gemm"]) if m["gemm"] else None,
        unit=m["unit"] or "",
        hbm=m["hbm"],
        allreduce_gbps=float(m["bw"]) if m["bw"] else None,
        seconds=float(m["seconds"]),
    )


def preflight_rows(
    checks: Sequence[tuple[int, AttemptPreflight | None]], excluded_after: Mapping[int, Mapping[str, str]]
) -> tuple[PreflightRow, ...]:
    """The table: `checks` is (attempt number, its pre-flight); `excluded_after[n][node]` says why
    the attempt after n excluded that node (the decision's evidence)."""
    rows = []
    for attempt_no, check in sorted(checks, key=lambda c: c[0]):
        if check is None:
            continue
        exclusions = excluded_after.get(attempt_no, {})
        for n in check.nodes:
            rows.append(
                PreflightRow(
                    attempt_no=attempt_no,
                    node=n.node,
                    gemm="-" if n.gemm is None else f"{n.gemm:.1f} {n.unit}",
                    hbm=n.hbm or "-",
                    allreduce="-" if n.allreduce_gbps is None else f"{n.allreduce_gbps:.1f} GB/s",
                    seconds="-" if n.seconds is None else f"{n.seconds:.1f} s",
                    verdict="pass" if n.failure is None else f"FAIL: {n.failure}",
                    excluded=exclusions.get(n.node, ""),
                )
            )
    return tuple(rows)

"""Node evidence from Slurm's own text: unhealthy nodes (sinfo / scontrol) and the node lists
of a requeued job's earlier runs (sacct --duplicates). Pure: text in, values out.

The commands (run by an adapter, never here):
- `sinfo -N --noheader -o SINFO_NODE_FORMAT` (one line per node: name|state|reason);
- `scontrol show node [-o] [NODES]` (blocks of `Key=Value`, one per node);
- `sacct --duplicates --noheader --parsable2 --format REQUEUE_SACCT_FORMAT -j JOBID`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from oellm_autoexp.core.jobs.job_state import JobState, parse_state
from oellm_autoexp.core.jobs.slurm_parse import SEP, expand_nodelist

SINFO_NODE_FORMAT = SEP.join(["%N", "%T", "%E"])  # node name (not %n: that is the host name)
REQUEUE_SACCT_FIELDS = ("JobID", "State", "NodeList", "Start", "End")
REQUEUE_SACCT_FORMAT = ",".join(REQUEUE_SACCT_FIELDS)
# Node states (base or flag) in which Slurm itself says a node is unfit.
UNHEALTHY_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING"})
_NO_REASON = {"", "none", "(null)"}
_KEY_VALUE = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


@dataclass(frozen=True)
class NodeHealth:
    """One unfit node as Slurm reports it."""

    node: str
    state: str  # as printed: draining, down*, MIXED+DRAIN, DOWN+NOT_RESPONDING
    reason: str

    @property
    def evidence(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"Slurm reports {self.node} {self.state}{why}"


@dataclass(frozen=True)
class RunNodes:
    """One run of a job as `sacct --duplicates` lists it: its state and the nodes it had."""

    job_id: str
    state: JobState
    nodes: tuple[str, ...]
    start: str


def state_words(state: str) -> set[str]:
    """`MIXED+DRAIN` -> {MIXED, DRAIN}; sinfo's `down*` (not responding) -> {DOWN, NOT_RESPONDING}."""
    text = state.strip().upper()
    words = {w for w in re.split(r"[+\s]", text.rstrip("*~#!%$@^-")) if w}
    if text.endswith("*"):
        words.add("NOT_RESPONDING")
    return words


def is_unhealthy(state: str) -> bool:
    return bool(state_words(state) & UNHEALTHY_STATES)


def parse_sinfo_nodes(text: str) -> list[NodeHealth]:
    """Unfit nodes from `sinfo -N --noheader -o SINFO_NODE_FORMAT` lines."""
    found = []
    for line in _lines(text):
        node, _, rest = line.partition(SEP)
        state, _, reason = rest.partition(SEP)
        if node and is_unhealthy(state):
            found.append(NodeHealth(node, state, _reason(reason)))
    return found


def parse_scontrol_nodes(text: str) -> list[NodeHealth]:
    """Unfit nodes from `scontrol show node` output (multi-line or `-o` one-liners)."""
    found = []
    for block in re.split(r"\n\s*\n|\n(?=NodeName=)", text.strip()):
        fields = _key_values(block)
        node, state = fields.get("NodeName", ""), fields.get("State", "")
        if node and is_unhealthy(state):
            found.append(NodeHealth(node, state, _scontrol_reason(fields.get("Reason", ""))))
    return found


def parse_requeue_runs(text: str) -> list[RunNodes]:
    """A job's runs (not its steps) from `sacct --duplicates ... --format REQUEUE_SACCT_FORMAT`, oldest first."""
    runs = []
    for line in _lines(text):
        parts = line.split(SEP)
        if len(parts) < len(REQUEUE_SACCT_FIELDS) or "." in parts[0]:
            continue
        job_id, state, nodes, start = parts[0], parts[1], parts[2], parts[3]
        runs.append(RunNodes(job_id, parse_state(state), expand_nodelist(nodes), start))
    return runs


def _key_values(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.splitlines():
        for key, value in _KEY_VALUE.findall(line.strip()):
            fields.setdefault(key, value.strip())
    return fields


def _scontrol_reason(text: str) -> str:
    """`Xid 79 GPU fallen off the bus [root@2026-11-23T08:23:59]` -> without the `[who@when]` tail."""
    return _reason(re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", text))


def _reason(text: str) -> str:
    text = text.strip()
    return "" if text.lower() in _NO_REASON else text


def _lines(text: str) -> Iterable[str]:
    return (line.strip() for line in text.splitlines() if line.strip())

"""Node evidence from Slurm's own text: unhealthy nodes (sinfo / scontrol) and the node lists
of a requeued job's earlier runs (sacct --duplicates). Pure: text in, values out.

The commands (run by an adapter, never here):
- `sinfo -N --noheader -o SINFO_NODE_FORMAT` (one line per node: name|state|reason);
- `scontrol show node [-o] [NODES]` (blocks of `Key=Value`, one per node);
- `sacct --duplicates --noheader --parsable2 --format REQUEUE_SACCT_FORMAT -j JOBID`;
- `sacctmgr -n -P show event nodes=NODES start=TIME format=NODE_EVENT_FORMAT` (slurmdbd's record of
  each node's down/drain periods: how a repair is seen, core/decide/exclusions.py);
- `scontrol show partition -o` (a partition's node count: how many nodes a job can be spared).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

from oellm_autoexp.core.jobs.job_state import JobState, parse_state
from oellm_autoexp.core.jobs.slurm_parse import SEP, expand_nodelist, parse_time

SINFO_NODE_FORMAT = SEP.join(["%N", "%T", "%E"])  # node name (not %n: that is the host name)
REQUEUE_SACCT_FIELDS = ("JobID", "State", "NodeList", "Start", "End")
REQUEUE_SACCT_FORMAT = ",".join(REQUEUE_SACCT_FIELDS)
NODE_EVENT_FIELDS = ("NodeName", "TimeStart", "TimeEnd", "State", "Reason")
NODE_EVENT_FORMAT = ",".join(NODE_EVENT_FIELDS)
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


@dataclass(frozen=True)
class NodeEvent:
    """One period slurmdbd recorded a node as down or drained (`sacctmgr show event`)."""

    node: str
    start: datetime
    end: datetime | None  # None: still open (sacctmgr prints no end, or "Unknown")
    state: str  # as printed: DOWN, DRAIN, IDLE+DRAIN, DOWN*
    reason: str

    def describe(self) -> str:
        end = f"{self.end:%Y-%m-%d %H:%M}" if self.end else "now"
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.state} {self.start:%Y-%m-%d %H:%M} to {end}{why}"


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


def node_events_command(nodes: Sequence[str], since: datetime) -> list[str]:
    """argv for the down/drain periods of `nodes` that were open at or after `since` (local time).

    slurmdbd lists every period that overlaps: one that began before `since` and ended after it is
    in (seen on Slurm 22.05), so a node already drained when it was excluded shows its repair.
    """
    if not nodes:
        raise ValueError("node_events_command needs at least one node")
    start = since.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    return ["sacctmgr", "-n", "-P", "show", "event", f"nodes={','.join(nodes)}", f"start={start}",
            f"format={NODE_EVENT_FORMAT}"]  # fmt: skip


def parse_node_events(text: str, tz: tzinfo) -> list[NodeEvent]:
    """Node events from `sacctmgr -n -P show event ... format=NODE_EVENT_FORMAT` lines.

    sacctmgr prints local times without a zone (`tz` gives it); an open event's end is empty or
    "Unknown". Cluster events (no node name) and unparsable lines are left out.
    """
    found = []
    for line in _lines(text):
        parts = line.split(SEP, len(NODE_EVENT_FIELDS) - 1)
        if len(parts) < len(NODE_EVENT_FIELDS) or not parts[0]:
            continue
        start, end = _local(parse_time(parts[1]), tz), _local(parse_time(parts[2]), tz)
        if start is not None:
            found.append(NodeEvent(parts[0], start, end, parts[3], _scontrol_reason(parts[4])))
    return found


def parse_partition_nodes(text: str, partition: str | None) -> int | None:
    """TotalNodes of `partition` (None: the default one) from `scontrol show partition -o` lines."""
    for line in _lines(text):
        fields = dict(_KEY_VALUE.findall(line))
        wanted = fields.get("PartitionName") == partition if partition else fields.get("Default") == "YES"
        if wanted and fields.get("TotalNodes", "").strip().isdigit():
            return int(fields["TotalNodes"].strip())
    return None


def _local(value: datetime | None, tz: tzinfo) -> datetime | None:
    return value.replace(tzinfo=tz) if value is not None and value.tzinfo is None else value


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

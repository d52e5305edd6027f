"""Exclusions that last until the node is seen repaired, with an upper bound, capped by the spare nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oellm_autoexp.core.decide.exclusions import (
    DEFAULT_EXCLUSION_TTL,
    Exclusion,
    exclusions_from_blame,
    in_force,
    lift,
    repair_of,
    spare_cap,
)
from oellm_autoexp.core.decide.node_blame import Blame
from oellm_autoexp.core.jobs.slurm_nodes import (
    NodeEvent,
    node_events_command,
    parse_node_events,
    parse_partition_nodes,
)

NOW = datetime(2026, 11, 26, 2, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
# What `sacctmgr -n -P show event nodes=node1,node2 start=... format=NodeName,TimeStart,TimeEnd,State,Reason`
# printed on the localhost Slurm 22.05 (node1's lines), plus a drain still open and a cluster event.
SACCTMGR = """node1|2026-11-26T02:00:10|2026-11-26T02:00:14|DOWN|autoexp-test-node-fail
node2|2026-11-26T02:30:00|Unknown|DRAIN|Xid 79 GPU fallen off the bus [root@2026-11-26T02:30:00]
|2026-11-25T13:31:00|Unknown|UP|Cluster Registered TRES
"""
# `scontrol show partition -o` on the localhost cluster (abridged).
PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED Nodes=node[1-2] TotalCPUs=16 "
    "TotalNodes=2 SelectTypeParameters=NONE\n"
    "PartitionName=debug-urgent AllowGroups=ALL Default=NO Nodes=node[1-2] TotalNodes=2\n"
    "PartitionName=big Default=NO Nodes=gpu[001-064] TotalNodes=64\n"
)


def _excl(node: str, at: datetime, source: str = "log", job: str = "job-a") -> Exclusion:
    return exclusions_from_blame(job, [Blame(node, f"line about {node}", source)], at)[0]


def _down(node: str, start: datetime, end: datetime | None) -> NodeEvent:
    return NodeEvent(node, start, end, "DRAIN", "bad GPU")


def _force(exclusions: list[Exclusion], events: list[NodeEvent], now: datetime, **size: int | None):  # type: ignore[no-untyped-def]
    return in_force(exclusions, events, now, job="job-a", partition_nodes=size.get("partition"),
                    job_nodes=size.get("job") or 1)  # fmt: skip


def test_a_repair_after_the_exclusion_lifts_it_and_says_so() -> None:
    """A drain that ended after the node was excluded is a repair: lifted, with the period in the reason."""
    item = _excl("gpu03", NOW)
    repaired = _down("gpu03", NOW + HOUR, NOW + 5 * HOUR)
    verdict = _force([item], [repaired], NOW + 6 * HOUR)
    assert verdict.nodes == ()
    assert [lifted.exclusion for lifted in verdict.lifted] == [item]
    assert "gpu03 repaired" in verdict.lifted[0].why and "DRAIN 2026-11-26 03:00 to 2026-11-26 07:00" in (
        verdict.lifted[0].why
    )


@pytest.mark.parametrize(
    ("start", "end", "now_h", "why"),
    [
        (-5, -1, 6, "ended before the exclusion: it repaired an older fault"),
        (1, None, 6, "still open: the node is still out"),
        (1, 8, 6, "ends after now: Slurm cannot have shown it yet"),
    ],
)
def test_no_repair_keeps_the_exclusion(start: int, end: int | None, now_h: int, why: str) -> None:
    """Only a down/drain period that ended after the exclusion was made, and by now, is a repair."""
    item = _excl("gpu03", NOW)
    event = _down("gpu03", NOW + start * HOUR, None if end is None else NOW + end * HOUR)
    assert repair_of(item, [event], NOW + now_h * HOUR) is None, why
    assert _force([item], [event], NOW + now_h * HOUR).nodes == ("gpu03",), why


def test_another_nodes_repair_lifts_nothing() -> None:
    """The event must be the excluded node's own."""
    item = _excl("gpu03", NOW)
    assert _force([item], [_down("gpu04", NOW + HOUR, NOW + 2 * HOUR)], NOW + 3 * HOUR).nodes == ("gpu03",)


def test_without_a_repair_the_exclusion_ends_at_its_upper_bound() -> None:
    """A node never seen repaired (a lemon nobody drained, a node blamed wrongly) comes back after 7 days."""
    item = _excl("gpu03", NOW)
    assert timedelta(days=7) == DEFAULT_EXCLUSION_TTL
    assert _force([item], [], NOW + DEFAULT_EXCLUSION_TTL - HOUR).nodes == ("gpu03",)
    expired = _force([item], [], NOW + DEFAULT_EXCLUSION_TTL)
    assert expired.nodes == () and expired.lifted == ()  # over, not lifted: nothing to explain


def test_the_cap_lifts_the_oldest_first_and_says_why() -> None:
    """64 nodes, a 48-node job: 16 spare, half of them (8) may be excluded; the 2 oldest of 10 go."""
    items = [_excl(f"gpu{i:02d}", NOW + i * HOUR) for i in range(10)]
    verdict = _force(items, [], NOW + 12 * HOUR, partition=64, job=48)
    assert verdict.nodes == tuple(f"gpu{i:02d}" for i in range(2, 10))
    assert [lifted.exclusion.node for lifted in verdict.lifted] == ["gpu00", "gpu01"]
    why = verdict.lifted[0].why
    assert "may take 8 of the 16 nodes its partition can spare it ((64 - 48) x 0.5)" in why
    assert "blamed 2026-11-26 02:00" in why


def test_at_equal_age_the_weaker_evidence_goes_first() -> None:
    """Blamed together: a node list of a failed run (sacct --duplicates) goes before a log line, that
    before Slurm's own down state."""
    items = [_excl("a", NOW, "slurm_state"), _excl("b", NOW, "log"), _excl("c", NOW, "sacct_duplicates")]
    verdict = _force(items, [], NOW + HOUR, partition=6, job=4)  # 2 spare: 1 may be excluded
    assert [lifted.exclusion.node for lifted in verdict.lifted] == ["c", "b"]
    assert verdict.nodes == ("a",)


def test_repairs_are_lifted_before_the_cap_counts() -> None:
    """A repaired node does not take a place under the cap: the cap only lifts what is still unrepaired."""
    items = [_excl("old", NOW), _excl("new", NOW + HOUR)]
    verdict = _force(
        items, [_down("new", NOW + 2 * HOUR, NOW + 3 * HOUR)], NOW + 4 * HOUR, partition=4, job=2
    )
    assert verdict.nodes == ("old",)
    assert [lifted.exclusion.node for lifted in verdict.lifted] == ["new"]


@pytest.mark.parametrize(
    ("partition", "job", "cap"),
    [(64, 48, 8), (3072, 2048, 512), (2, 1, 1), (3, 1, 1), (2, 2, 0), (1, 4, 0), (80, 64, 8)],
)
def test_the_cap_never_leaves_a_job_unschedulable(partition: int, job: int, cap: int) -> None:
    """Half the spare nodes, at least one while any is spare, never more than are spare: the job's own
    exclusions never keep it pending (a job as large as its partition gets none)."""
    assert spare_cap(partition, job) == cap
    items = [_excl(f"n{i}", NOW) for i in range(partition)]
    kept = _force(items, [], NOW + HOUR, partition=partition, job=job).nodes
    assert len(kept) == cap and partition - len(kept) >= min(job, partition)


def test_an_unknown_partition_size_applies_no_cap() -> None:
    """Slurm did not say: nothing is lifted for the cap (the upper bound still holds)."""
    items = [_excl(f"n{i}", NOW) for i in range(5)]
    assert len(_force(items, [], NOW + HOUR, partition=None, job=48).nodes) == 5


def test_other_jobs_exclusions_are_not_counted() -> None:
    """Only the job's own exclusions are judged."""
    items = [_excl("a", NOW), _excl("b", NOW, job="job-b")]
    assert _force(items, [], NOW + HOUR).nodes == ("a",)


def test_lift_ends_the_lifted_ones_at_now() -> None:
    """What the store does to its rows: the lifted exclusion is over from now on, the others untouched."""
    items = [_excl("a", NOW), _excl("b", NOW)]
    verdict = _force(items, [_down("a", NOW + HOUR, NOW + 2 * HOUR)], NOW + 3 * HOUR)
    after = lift(items, verdict.lifted, NOW + 3 * HOUR)
    assert [e.is_active(NOW + 3 * HOUR) for e in after] == [False, True]
    assert _force(after, [], NOW + 4 * HOUR).nodes == ("b",)


def test_parse_node_events_from_real_sacctmgr_text() -> None:
    """Local times take the given zone; an open period has no end; the cluster's own event is left out."""
    events = parse_node_events(SACCTMGR, UTC)
    assert events[0] == NodeEvent(
        "node1", datetime(2026, 11, 26, 2, 0, 10, tzinfo=UTC), datetime(2026, 11, 26, 2, 0, 14, tzinfo=UTC),
        "DOWN", "autoexp-test-node-fail",
    )  # fmt: skip
    assert events[1].node == "node2" and events[1].end is None
    assert events[1].reason == "Xid 79 GPU fallen off the bus"
    assert len(events) == 2


def test_node_events_command_is_an_argv() -> None:
    """Nodes and time go in as arguments, never through a shell."""
    argv = node_events_command(["gpu01", "gpu02"], NOW)
    assert argv[:5] == ["sacctmgr", "-n", "-P", "show", "event"]
    assert argv[5] == "nodes=gpu01,gpu02"
    assert argv[6].startswith("start=") and argv[7] == "format=NodeName,TimeStart,TimeEnd,State,Reason"
    with pytest.raises(ValueError, match="at least one node"):
        node_events_command([], NOW)


@pytest.mark.parametrize(
    ("partition", "nodes"), [(None, 2), ("debug-urgent", 2), ("big", 64), ("gone", None)]
)
def test_parse_partition_nodes(partition: str | None, nodes: int | None) -> None:
    """TotalNodes of the named partition, or of the default one."""
    assert parse_partition_nodes(PARTITIONS, partition) == nodes

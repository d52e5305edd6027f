"""Before a submission the monitor asks Slurm which excluded nodes were repaired and how large the
partition is (daemon/exclusions_in_force.py): the lifted exclusions end in the store with a decision
that `autoexp explain` shows; a read that fails lifts nothing. On a real SQLite store; the executor's
two reads are faked (their Slurm side: tests/integration/test_exclusion_repair_slurm.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.store.schema import ExclusionRow
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli._views import explain_lines
from oellm_autoexp.core.jobs.slurm_nodes import NodeEvent
from oellm_autoexp.daemon.exclusions_in_force import exclusions_in_force

T0 = datetime(2026, 11, 25, 18, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@dataclass
class FakeReads:
    """SlurmExecutor's two reads: the node events and the partition's size (or a failure)."""

    events: list[NodeEvent] = field(default_factory=list)
    size: int | None = 64
    fail: bool = False
    asked: list[tuple[list[str], datetime]] = field(default_factory=list)

    def node_events(self, nodes: list[str], since: datetime) -> list[NodeEvent]:
        self.asked.append((list(nodes), since))
        if self.fail:
            raise ExecutorError("sacctmgr failed (1): slurmdbd not reachable")
        return self.events

    def partition_nodes(self, partition: str | None) -> int | None:
        if self.fail:
            raise ExecutorError("scontrol failed (1)")
        return self.size


def _setup(tmp_path: Path, executor: Any, nodes: list[str], job_nodes: int = 48) -> tuple[SQLiteStore, Any]:
    """A job of `job_nodes` nodes with one attempt and an exclusion per node, blamed an hour apart."""
    store = SQLiteStore(tmp_path / "state")
    session = store.create_session("s", config_path="x.yaml", config={}, now=T0)
    job = store.add_job(session.id, job_key="main", name="train", plan={}, now=T0)
    attempt_id = store.record_intent(job.id, 1, "autoexp-1-1-1-00000001", now=T0)
    store.confirm_submitted(attempt_id, "4242", now=T0)
    with store.writing() as db:
        for i, node in enumerate(nodes):
            db.add(ExclusionRow(job_id=job.id, node=node, evidence=f"Xid 79 on {node}", source="log",
                                created_at=T0 + i * HOUR, expires_at=T0 + i * HOUR + timedelta(days=7)))  # fmt: skip
    slurm = SimpleNamespace(nodes=job_nodes, sbatch={"partition": "gpu"})
    plan = SimpleNamespace(config=SimpleNamespace(slurm=slurm))
    rt = SimpleNamespace(
        job=job, executor=executor, plan=plan, settings=SimpleNamespace(exclusion_spare_share=0.5)
    )
    return store, rt


def test_a_repaired_node_is_lifted_in_the_store_and_explained(tmp_path: Path) -> None:
    """gpu01 was drained and resumed after its exclusion: it is used again, its row ends now, and
    `explain` says which exclusion was lifted and why; gpu02 stays out."""
    repaired = NodeEvent("gpu01", T0 + HOUR, T0 + 3 * HOUR, "DRAIN", "Xid 79")
    reads = FakeReads(events=[repaired])
    store, rt = _setup(tmp_path, reads, ["gpu01", "gpu02"])
    now = T0 + 4 * HOUR
    with store:
        assert exclusions_in_force(store, rt, now) == ("gpu02",)  # type: ignore[arg-type]
        assert reads.asked == [(["gpu01", "gpu02"], T0)]  # the excluded nodes, since the oldest blame
        rows = {e.node: e for e in store.exclusions_for_job(rt.job.id)}
        assert rows["gpu01"].expires_at == now and rows["gpu02"].is_active(now)
        text = "\n".join(
            explain_lines(rt.job, store.attempts_for_job(rt.job.id), store.decisions_for_job(rt.job.id))
        )
        assert "NONE: exclusion lifted: gpu01 repaired: Slurm shows it DRAIN 2026-11-25 19:00 to" in text
        # Lifted once: the next submission reads no more about it and writes nothing new.
        assert exclusions_in_force(store, rt, now + HOUR) == ("gpu02",)  # type: ignore[arg-type]
        assert len(store.decisions_for_job(rt.job.id)) == 1


def test_past_the_cap_the_oldest_are_lifted_and_the_job_stays_schedulable(tmp_path: Path) -> None:
    """A 48-node job on 64 nodes: 16 spare, 8 may be excluded; of 10, the 2 blamed first are lifted."""
    nodes = [f"gpu{i:02d}" for i in range(10)]
    store, rt = _setup(tmp_path, FakeReads(size=64), nodes)
    with store:
        kept = exclusions_in_force(store, rt, T0 + 12 * HOUR)  # type: ignore[arg-type]
        assert kept == tuple(nodes[2:])
        reasons = [d.reason for d in store.decisions_for_job(rt.job.id)]
        assert [r.split(" ")[2] for r in reasons] == ["gpu00", "gpu01"]  # "exclusion lifted: <node> ..."
        assert all("may take 8 of the 16 nodes its partition can spare it" in r for r in reasons)


def test_a_failed_read_lifts_nothing(tmp_path: Path) -> None:
    """No answer from slurmdbd or the controller is no information: every exclusion stays, uncapped."""
    nodes = [f"gpu{i:02d}" for i in range(10)]
    store, rt = _setup(tmp_path, FakeReads(fail=True), nodes)
    with store:
        assert exclusions_in_force(store, rt, T0 + 12 * HOUR) == tuple(nodes)  # type: ignore[arg-type]
        assert store.decisions_for_job(rt.job.id) == []


def test_the_local_executor_has_no_reads_and_keeps_the_upper_bound(tmp_path: Path) -> None:
    """Without the reads (the local executor) an exclusion holds until its bound."""
    store, rt = _setup(tmp_path, object(), ["gpu01"])
    with store:
        assert exclusions_in_force(store, rt, T0 + 6 * 24 * HOUR) == ("gpu01",)  # type: ignore[arg-type]
        assert exclusions_in_force(store, rt, T0 + 7 * 24 * HOUR) == ()  # type: ignore[arg-type]

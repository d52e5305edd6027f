"""The end of `autoexp run`: for a job that did not complete it quotes the line its last decision
rests on, not the log's tail (after an OOM that tail is torchrun's teardown traceback); a job that
completed shows its tail (issue 28)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.store.reader import StoreReader
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli.run import TAIL_LINES, end_lines, end_summary
from oellm_autoexp.core.jobs.attempt_pick import DROPPED_PREFIX
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.evidence import Evidence
from tests.unit.cli.test_views import attempt, decision, job

OOM_LINE = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
TEARDOWN = [
    "Traceback (most recent call last):",
    '  File "/usr/bin/torchrun", line 8, in <module>',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "train.py FAILED",
    "srun: error: node1: task 0: Exited with exit code 1",
]


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "slurm-7.out"
    lines = [f"iteration {i}/ 100 | lm loss: 2.0" for i in range(1, 57)] + [OOM_LINE, *TEARDOWN]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


def test_a_stopped_job_is_quoted_on_the_line_it_stopped_on(tmp_path: Path) -> None:
    log = _log(tmp_path)
    last = attempt(1, "7", JobState.FAILED, 1)._replace(log_path=str(log))
    evidence = Evidence(kind="oom", error_type="oom", signal="cuda_oom", lines=(OOM_LINE, TEARDOWN[2]),
                        root_line_no=57).to_json()  # fmt: skip
    stop = decision(1, "stop", "Permanent failure detected (excluded error_type: oom)", evidence=evidence)
    shown = end_lines(job("stopped"), last, [stop])
    assert shown == [f"--- train: stop on line 57 of {log} (oom):", f"    {OOM_LINE}"]
    assert not any("Traceback" in line or "ChildFailedError" in line for line in shown)


def test_a_hang_is_quoted_by_what_was_observed(tmp_path: Path) -> None:
    last = attempt(1, "7", JobState.CANCELLED)._replace(log_path=str(_log(tmp_path)))
    ev = Evidence(kind="hang", observed="hang: no new output for 600s").to_json()
    assert end_lines(job("stopped"), last, [decision(1, "stop", "hang", evidence=ev)]) == [
        "--- train: stop (hang): hang: no new output for 600s"
    ]


def test_a_completed_job_or_one_without_a_cause_shows_its_tail(tmp_path: Path) -> None:
    log = _log(tmp_path)
    last = attempt(2, "8", JobState.COMPLETED, 0)._replace(log_path=str(log))
    tail = [f"--- train: last lines of {log}", *TEARDOWN[-TAIL_LINES:]]
    head = [f"--- train attempt 2: first lines of {log}", "iteration 1/ 100 | lm loss: 2.0"]
    assert end_lines(job("completed"), last, [])[-len(tail) :] == tail
    assert end_lines(job("completed"), last, [])[: len(head)] == head
    assert (
        end_lines(job("stopped"), last, [decision(1, "stop", "other attempt", evidence={})])[-len(tail) :]
        == tail
    )
    assert end_lines(job("stopped"), last._replace(log_path=None), []) == []


def test_the_summary_quotes_the_attempt_status_shows_not_a_dropped_successor(tmp_path: Path) -> None:
    """`end_summary` picks each job's attempt by the reader's rule (StoreReader.shown_attempts),
    the one `status` shows: when attempt 1's OOM stopped the job, the successor queued behind it
    (attempt 2, the latest) was cancelled: the end quotes attempt 1's OOM line, not attempt 2."""
    log = _log(tmp_path)
    t0 = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)
    with SQLiteStore(tmp_path / "state") as store:
        session = store.create_session("s", config_path="x.yaml", config={}, now=t0)
        job_info = store.add_job(session.id, job_key="main", name="train", plan={}, now=t0)
        ids = []
        for no, slurm_id in ((1, "7"), (2, "8")):
            ids.append(store.record_intent(job_info.id, no, f"tag-{no}", now=t0))
            store.confirm_submitted(
                ids[-1], slurm_id, now=t0, log_path=str(log) if no == 1 else "/nowhere/8.out"
            )
        store.update_attempt_state(ids[0], JobState.FAILED, exit_code=1, ended_at=t0)
        evidence = Evidence(
            kind="oom", error_type="oom", signal="cuda_oom", lines=(OOM_LINE,), root_line_no=57
        )
        stop = "Permanent failure detected (excluded error_type: oom)"
        store.record_decision(job_info.id, attempt_id=ids[0], action="stop", reason=stop,
                              evidence=evidence.to_json(), now=t0)  # fmt: skip
        store.set_job_status(job_info.id, "stopped", stop)
        store.update_attempt_state(ids[1], JobState.CANCELLED, ended_at=t0)
        store.record_decision(job_info.id, attempt_id=ids[1], action="none",
                              reason=f"{DROPPED_PREFIX}2 (job 8) cancelled: {stop}", now=t0)  # fmt: skip
        with StoreReader.beside(store) as reader:
            assert end_summary(reader, session.id) == [
                f"--- train: stop on line 57 of {log} (oom):\n    {OOM_LINE}"
            ]

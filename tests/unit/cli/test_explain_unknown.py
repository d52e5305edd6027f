"""`autoexp explain` says when a failed attempt's log has no recognised failure line (issue #26).

It shows the last lines of each rank's output instead of a blank cause, and points at
`autoexp classify --unknown`, which turns such lines into a pattern to add. A failed attempt
whose log names a cause, and one that did not fail, say nothing of the kind.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli.main import main
from oellm_autoexp.core.classify.unknown import rank_tails
from oellm_autoexp.core.jobs.job_state import JobState

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

UNKNOWN_LOG = "\n".join(
    ["[rank0]: iteration 7 loss 2.1", "[rank1]: iteration 7 loss 2.1"]
    + [f"[rank0]: step {i} waiting for the filesystem" for i in range(8)]
    + ["[rank1]: Lustre: scratch-OST0004-osc: Connection to scratch-OST0004 was lost", "srun: job 101 done"]
)


def _attempt(store: SQLiteStore, job_id: int, no: int, log: Path | None, text: str, state: JobState) -> None:
    if log is not None:
        log.write_text(text, encoding="utf-8")
    aid = store.record_intent(job_id, no, f"tag-{job_id}-{no}", now=T0, log_path=str(log) if log else None)
    store.confirm_submitted(aid, str(100 + no), now=T0)
    store.update_attempt_state(aid, state, exit_code=1 if state is JobState.FAILED else 0, ended_at=T0)


def _explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["--state-dir", str(tmp_path / "state"), "explain", "train"]) == 0
    return capsys.readouterr().out


def test_a_failed_attempt_without_a_recognised_line_says_so_with_each_ranks_last_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unknown attempt lists every rank's last lines and the --unknown hint; the OOM one does not."""
    with SQLiteStore(tmp_path / "state") as store:
        sid = store.create_session("s", config_path="exp.yaml", config={}, now=T0).id
        jid = store.add_job(sid, job_key="k", name="train", plan={}, now=T0).id
        _attempt(store, jid, 1, tmp_path / "a1.log",
                 "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", JobState.FAILED)  # fmt: skip
        _attempt(store, jid, 2, tmp_path / "a2.log", UNKNOWN_LOG, JobState.FAILED)
    out = _explain(tmp_path, capsys)
    first, second = out.split("  attempt 2:")
    assert "no recognised failure line" not in first
    assert "no recognised failure line in its log; the last lines of each rank's output:" in second
    assert "      rank 0:\n" in second and "      rank 1:\n" in second
    assert "no rank prefix (launcher, batch script):\n        | srun: job 101 done" in second
    assert "        | [rank1]: Lustre: scratch-OST0004-osc: Connection to scratch-OST0004 was lost" in second
    assert "step 7 waiting" in second and "step 2 waiting" not in second  # only the last 5 of rank 0
    assert "autoexp classify --unknown" in second


def test_a_failed_attempt_whose_log_is_gone_says_the_log_could_not_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No log to read: explain says so rather than showing nothing."""
    with SQLiteStore(tmp_path / "state") as store:
        sid = store.create_session("s", config_path="exp.yaml", config={}, now=T0).id
        jid = store.add_job(sid, job_key="k", name="train", plan={}, now=T0).id
        _attempt(store, jid, 1, None, "", JobState.FAILED)
        _attempt(store, jid, 2, tmp_path / "ok.log", "all done\n", JobState.COMPLETED)
    out = _explain(tmp_path, capsys)
    assert out.count("no recognised failure line") == 1
    assert "no recognised failure line: its log could not be read" in out


def test_rank_tails_groups_the_last_lines_by_the_rank_prefix() -> None:
    """srun's `N: ` and torchrun's `[rankN]:` name the rank; unprefixed lines come first as None."""
    lines = ["0: a", "1: b", "launcher x", "0: c", "[rank1]: d", "", "0: e"]
    assert rank_tails(lines, per_rank=2) == [
        (None, ["launcher x"]),
        (0, ["0: c", "0: e"]),
        (1, ["1: b", "[rank1]: d"]),
    ]

"""The end of `autoexp run`: for a job that did not complete it quotes the line its last decision
rests on, not the log's tail (after an OOM that tail is torchrun's teardown traceback); a job that
completed shows its tail (issue 28)."""

from __future__ import annotations

from pathlib import Path

from oellm_autoexp.cli.run import TAIL_LINES, end_lines
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

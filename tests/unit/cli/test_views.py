"""Pure rendering for the session commands (cli/_views.py): records in, rows and text out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, DecisionInfo, JobInfo, SignalInfo
from oellm_autoexp.cli._views import explain_lines, job_row, render_table
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.evidence import Evidence

T0 = datetime(2025, 3, 1, 12, 0, 5, tzinfo=UTC)


def job(status: str = "active", reason: str = "", restarts: int = 0) -> JobInfo:
    return JobInfo(id=1, session_id=1, job_key="k1", name="train", plan={}, status=status,
                   status_reason=reason, restart_count=restarts, restart_counts={}, created_at=T0)  # fmt: skip


def attempt(no: int, slurm_id: str | None, state: JobState, exit_code: int | None = None,
            nodes: tuple[str, ...] = ()) -> AttemptInfo:  # fmt: skip
    return AttemptInfo(id=no, job_id=1, attempt_no=no, submit_tag=f"tag{no}", intent="confirmed",
                       executor_job_id=slurm_id, nodes=nodes, intended_at=T0, submitted_at=T0, started_at=None,
                       ended_at=None, state=state, exit_code=exit_code,
                       log_path=f"/logs/slurm-{slurm_id}.out" if slurm_id else None, last_iteration=None)  # fmt: skip


def decision(attempt_id: int | None, action: str, reason: str, before: int | None = None,
             after: int | None = None, evidence: object = None) -> DecisionInfo:  # fmt: skip
    return DecisionInfo(id=attempt_id or 0, job_id=1, attempt_id=attempt_id, action=action, reason=reason,
                        budget_before=before, budget_after=after, evidence=evidence, decided_at=T0)  # fmt: skip


def signal(error_type: str | None, pattern: str = "nccl_error") -> SignalInfo:
    return SignalInfo(id=1, attempt_id=1, pattern=pattern, error_type=error_type, subsystem="nccl", role="root",
                      line_no=3, line="NCCL error", evidence=(), observed_at=T0)  # fmt: skip


NCCL = "Transient failure detected (error_type=nccl)"


def test_job_row_of_a_restarted_job() -> None:
    """The row shows the latest attempt, the last signal's error type, the newest known budget
    and the last decision as `action: reason`."""
    decisions = [decision(1, "restart", NCCL, 3, 2), decision(2, "stop", "Job completed successfully")]
    row = job_row(
        job("completed", restarts=1), attempt(2, "66", JobState.COMPLETED), signal("nccl"), decisions
    )
    assert row == {"job": "train", "key": "k1", "status": "completed", "attempt": 2, "slurm_id": "66",
                   "state": "COMPLETED", "last_signal": "nccl", "budget_left": 2, "restarts": 1,
                   "last_decision": "stop: Job completed successfully"}  # fmt: skip


def test_job_row_before_anything_happened() -> None:
    """A job with no attempt, signal or decision yet has None in those columns."""
    row = job_row(job(), None, None, [])
    assert row["attempt"] is None and row["slurm_id"] is None and row["state"] is None
    assert row["last_signal"] is None and row["budget_left"] is None and row["last_decision"] is None


def test_job_row_names_a_signal_without_error_type_by_its_pattern() -> None:
    """An informational signal (no error type) is shown by its pattern name."""
    row = job_row(job(), attempt(1, "5", JobState.RUNNING), signal(None, "megatron_iteration"), [])
    assert row["last_signal"] == "megatron_iteration"


@pytest.mark.parametrize(
    ("rows", "columns", "expected"),
    [
        ([], ("job", "state"), "JOB  STATE"),
        (
            [{"job": "a", "state": "RUNNING"}, {"job": "longer", "state": None}],
            ("job", "state"),
            "JOB     STATE\na       RUNNING\nlonger  -",
        ),
        ([{"n": 0, "x": ""}], ("n", "x"), "N  X\n0"),  # 0 is shown; trailing blanks are stripped
    ],
)
def test_render_table(rows: list[dict[str, object]], columns: tuple[str, ...], expected: str) -> None:
    """Columns are as wide as their widest cell or header; None shows as '-'; no trailing spaces."""
    assert render_table(rows, columns) == expected


def test_explain_lines_group_decisions_under_their_attempt() -> None:
    """`explain` prints the job, each attempt (id, state, exit, nodes, log), and under it each
    decision with its budget, cause and evidence lines."""
    attempts = [attempt(1, "65", JobState.FAILED, 1, ("node1",)), attempt(2, "66", JobState.COMPLETED, 0)]
    evidence = {
        "signal": "nccl_error",
        "error_type": "nccl",
        "state": "FAILED",
        "lines": ["NCCL error in: x"],
    }
    decisions = [
        decision(1, "restart", NCCL, 3, 2, evidence),
        decision(2, "stop", "Job completed successfully"),
    ]
    lines = explain_lines(job("completed", "Job completed successfully"), attempts, decisions)
    assert lines == [
        "job train (key k1): completed — Job completed successfully",
        "  attempt 1: job 65 FAILED exit=1 nodes=node1 log=/logs/slurm-65.out",
        f"    2025-03-01 12:00:05 RESTART: {NCCL} (budget 3 -> 2)",
        "      cause: nccl (signal nccl_error, state FAILED)",
        "      | NCCL error in: x",
        "  attempt 2: job 66 COMPLETED exit=0 nodes=- log=/logs/slurm-66.out",
        "    2025-03-01 12:00:05 STOP: Job completed successfully",
    ]


def test_explain_lines_of_an_unsubmitted_attempt() -> None:
    """An intent never confirmed shows '-' for its Slurm id, exit code and log."""
    lines = explain_lines(job(), [attempt(1, None, JobState.UNKNOWN)], [])
    assert lines == ["job train (key k1): active", "  attempt 1: job - UNKNOWN exit=- nodes=- log=-"]


def test_explain_lines_keep_decisions_not_tied_to_a_listed_attempt() -> None:
    """A decision recorded without an attempt (or for one not listed) is still printed, last."""
    decisions = [decision(None, "stop", "stopped by hand"), decision(9, "notify", "someone look")]
    lines = explain_lines(job(), [attempt(1, "65", JobState.FAILED, 1)], decisions)
    assert lines[-3:] == [
        "  no attempt:",
        "    2025-03-01 12:00:05 STOP: stopped by hand",
        "    2025-03-01 12:00:05 NOTIFY: someone look",
    ]


def test_explain_shows_the_root_line_as_cause_and_the_hang_as_observed() -> None:
    """A stop judged on a hang verdict after an OOM names the OOM line as the cause, the hang as what was
    observed, and how long after the first fatal line it was decided."""
    evidence = Evidence(
        rule="transient", kind="oom", state="RUNNING", error_type="oom", signal="cuda_oom",
        lines=("[rank1]: torch.OutOfMemoryError: CUDA out of memory.",), trigger="hang",
        observed="hang: no progress past iteration 229 for 31s", root_line_no=57,
        first_fatal_line_no=57, after_first_fatal_s=31.2,
    ).to_json()  # fmt: skip
    stop = decision(1, "stop", "Permanent failure detected (excluded error_type: oom)", evidence=evidence)
    lines = explain_lines(job("stopped"), [attempt(1, "65", JobState.CANCELLED, None)], [stop])
    assert lines[3:] == [
        "      cause: oom (signal cuda_oom line 57, state RUNNING)",
        "      observed: hang: no progress past iteration 229 for 31s",
        "      decided 31.2 s after the first fatal line (line 57; judged on: hang)",
        "      | [rank1]: torch.OutOfMemoryError: CUDA out of memory.",
    ]


def test_last_signal_is_the_cause_not_the_teardown() -> None:
    """An OOM'd attempt whose log ends in srun's teardown: LAST_SIGNAL names the OOM (the judged cause,
    else the first root line), never `srun_teardown`."""
    oom = SignalInfo(id=1, attempt_id=1, pattern="cuda_oom", error_type="oom", subsystem="cuda", role="root",
                     line_no=3, line="CUDA out of memory", evidence=(), observed_at=T0)  # fmt: skip
    teardown = SignalInfo(id=2, attempt_id=1, pattern="srun_teardown", error_type=None, subsystem="slurm",
                          role="cascade", line_no=9, line="srun: Job step aborted", evidence=(), observed_at=T0)  # fmt: skip
    from oellm_autoexp.cli._views import pick_signal

    assert pick_signal([oom, teardown]) is oom
    assert pick_signal([teardown]) is teardown
    assert pick_signal([]) is None
    stop = decision(1, "stop", "Permanent failure detected (error_type=oom)", evidence={"error_type": "oom"})
    row = job_row(job("stopped"), attempt(1, "7", JobState.OUT_OF_MEMORY), teardown, [stop])
    assert row["last_signal"] == "oom"


def test_explain_never_reports_a_negative_delay() -> None:
    """A failure judged by a monitor started after the line was written: no "-0.1 s after"."""
    ev = {"after_first_fatal_s": -0.1, "first_fatal_line_no": 12, "trigger": "end", "error_type": "oom"}
    lines = explain_lines(
        job("stopped"), [attempt(1, "7", JobState.FAILED, 1)], [decision(1, "stop", "x", evidence=ev)]
    )
    text = "\n".join(lines)
    assert "-0.1 s" not in text
    assert "decided as the first fatal line was read" in text

"""The report's pre-flight: its lines read back from a log, the per-node table with exclusions,
and its seconds in the lost time (taken out of the restart window they fall in, never counted twice)."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.report.preflight_table import AttemptPreflight, PreflightNode, parse_preflight
from oellm_autoexp.core.report.report import AttemptData, DecisionData, JobData, SessionData, build_report
from oellm_autoexp.core.report.report_html import render_report_html
from oellm_autoexp.core.watch.evidence import Evidence

T0 = 1_700_000_000.0
FAILED_LOG = [
    "preflight node1: gemm 790.1 TFLOP/s, hbm ok, allreduce 310.0 GB/s, 4 gpu, 6.2 s",
    "preflight node2: gemm 412.0 TFLOP/s, hbm ok, allreduce 305.5 GB/s, 4 gpu, 6.3 s",
    "preflight FAIL node2: gemm 412.0 TFLOP/s < 0.9 x median 790.1",
    "srun: error: node2: task 1: Exited with exit code 1",
    "autoexp: preflight step took 9.4 s (status 1)",
]
PASSED_LOG = [
    "preflight node1: gemm 791.0 TFLOP/s, hbm ok, allreduce 311.0 GB/s, 4 gpu, 6.1 s",
    "preflight node3: gemm 788.5 TFLOP/s, hbm ok, allreduce 309.0 GB/s, 4 gpu, 6.0 s",
    "autoexp: preflight step took 8.0 s (status 0)",
    " iteration        1/      10 |",
]


def test_parse_reads_every_node_its_verdict_and_the_step() -> None:
    """Both nodes with their figures; node2 carries its FAIL reason; the step's time and status."""
    check = parse_preflight(FAILED_LOG)
    assert check == AttemptPreflight(
        (
            PreflightNode("node1", 790.1, "TFLOP/s", "ok", 310.0, 6.2),
            PreflightNode(
                "node2", 412.0, "TFLOP/s", "ok", 305.5, 6.3, "gemm 412.0 TFLOP/s < 0.9 x median 790.1"
            ),
        ),
        9.4,
        1,
    )
    assert parse_preflight(["iteration 1", "done"]) is None


def test_a_node_that_sent_no_result_is_listed_with_its_failure() -> None:
    """Node 0 names a node whose result never came: a row without figures, with the reason."""
    check = parse_preflight(["preflight FAIL node7: no result within 60 s"])
    assert check is not None and check.nodes == (PreflightNode("node7", failure="no result within 60 s"),)


def job() -> JobData:
    """Attempt 1 fails its pre-flight (node2); attempt 2 on other nodes passes it and trains."""
    first = AttemptData(1, "101", "FAILED", 1, T0, T0 + 12, (), parse_preflight(FAILED_LOG))
    second = AttemptData(2, "102", "COMPLETED", 0, T0 + 20, T0 + 60, ((T0 + 30, 1), (T0 + 50, 10)),
                         parse_preflight(PASSED_LOG))  # fmt: skip
    evidence = Evidence(
        rule="preflight", error_type="preflight_failed", after_first_fatal_s=1.0, exclude_nodes=("node2",),
        blamed=("node2: slurm-101.out line 3: preflight FAIL node2: gemm 412.0 TFLOP/s < 0.9 x median 790.1",),
    )  # fmt: skip
    restart = DecisionData(1, 1, "restart", "Transient failure detected (error_type=preflight_failed)",
                           T0 + 12, evidence, 3, 3)  # fmt: skip
    stop = DecisionData(2, 2, "stop", "Job completed successfully", T0 + 61, Evidence(kind="success"))
    return JobData("job", "completed", "", (first, second), (restart, stop))


def test_table_names_every_node_checked_and_why_one_was_excluded() -> None:
    """Rows per attempt and node; node2's row says it failed and was kept off attempt 2, with the line."""
    report = build_report(SessionData(1, "s", T0 + 100, (job(),)))
    rows = {(r.attempt_no, r.node): r for r in report.jobs[0].preflight}
    assert sorted(rows) == [(1, "node1"), (1, "node2"), (2, "node1"), (2, "node3")]
    bad = rows[(1, "node2")]
    assert bad.gemm == "412.0 TFLOP/s" and bad.verdict == "FAIL: gemm 412.0 TFLOP/s < 0.9 x median 790.1"
    assert bad.excluded.startswith("excluded from attempt 2: slurm-101.out line 3: preflight FAIL node2")
    assert all(r.verdict == "pass" and not r.excluded for k, r in rows.items() if k != (1, "node2"))


def test_check_seconds_are_lost_time_of_their_own_and_not_counted_twice() -> None:
    """Lost time: `preflight` is 9.4 + 8.0 s; the restart's window (fatal line at 11 s to the next
    first iteration at 30 s, 19 s) keeps 19 - 8.0 s: the total is the same as without the split."""
    report = build_report(SessionData(1, "s", T0 + 100, (job(),)))
    lost = dict(report.summary.lost_by_cause)
    assert lost["preflight"] == pytest.approx(17.4)
    assert lost["preflight_failed"] == pytest.approx(19.0 - 8.0)
    (loss,) = report.jobs[0].losses
    assert loss.preflight_s == pytest.approx(8.0) and loss.lost_s + loss.preflight_s == pytest.approx(19.0)
    assert report.summary.restarts_by_cause == (("preflight_failed", 1),)


def test_page_shows_the_table() -> None:
    """The page carries the table with node2's verdict, escaped."""
    page = render_report_html(build_report(SessionData(1, "s", T0 + 100, (job(),))))
    assert 'id="preflight-0"' in page and 'data-node="node2"' in page
    assert "FAIL: gemm 412.0 TFLOP/s &lt; 0.9 x median 790.1" in page

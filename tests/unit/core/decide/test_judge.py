"""The judge step (core/decide/judge.py) and the attempt view (core/watch/attempt_view.py): verdicts in, judgements out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.adapters.store.sqlite_store import DecisionInfo
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.judge import (
    Judgement,
    history_from,
    judge,
    node_of,
    outcome_of,
    stopped_status,
)
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.job_status import JobStatus
from oellm_autoexp.core.watch import progress
from oellm_autoexp.core.watch.attempt_view import KILLED_PATTERN, AttemptView, EarlySettings, progress_event
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.progress import HangConfig, HangKind, HangVerdict
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from oellm_autoexp.daemon.watch import job_history
from tests.paths import REPO

ROOT = REPO
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PATTERNS = load_patterns(["megatron_production"])
TRANSIENT = load_policy(yaml.safe_load((ROOT / "config" / "restart" / "megatron_transient.yaml").read_text()))


def sig(pattern: str = "p", error_type: str | None = None, role: str = "root", **groups: str) -> Signal:
    return Signal(pattern=pattern, error_type=error_type, subsystem="test", role=role, line="l", line_no=1,  # type: ignore[arg-type]
                  groups=groups)  # fmt: skip


# -- pure helpers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        (sig("megatron_iteration", iteration="42"), progress.Iteration(42)),
        (sig("train_step", step="3"), progress.Iteration(3)),
        (sig("megatron_checkpoint_save_start", iteration="40"), progress.CheckpointStart()),
        (sig("megatron_checkpoint_saved", iteration="40"), progress.CheckpointDone()),
        (sig("megatron_checkpoint_loaded", iteration="40"), None),  # a resume is not progress
        (sig("megatron_iteration", iteration="x"), None),
    ],
)
def test_progress_event(signal: Signal, expected: progress.ProgressEvent | None) -> None:
    """Iteration lines advance the counter, save lines open/close a checkpoint; a load does neither."""
    assert progress_event(signal) == expected


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        (None, None),
        (sig("xid", "gpu_hardware", node="gpu07"), "gpu07"),
        (sig("nccl_remote", "nccl", host="node4"), "node4"),
        (sig("xid", "gpu_hardware"), None),
        (sig("slurm_time_limit", "time_limit", node="node1"), None),  # names a node, blames none
        (sig("srun_task_killed", "killed", node="node1"), None),
    ],
)
def test_node_of_blames_only_hardware_and_nccl_causes(signal: Signal | None, expected: str | None) -> None:
    """Only a hardware/NCCL/node-failure cause puts its node on the exclude list."""
    assert node_of(signal) == expected


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (OutcomeKind.SUCCESS, JobStatus.COMPLETED),
        (OutcomeKind.USER_CANCELLED, JobStatus.CANCELLED_BY_USER),
        (OutcomeKind.OOM, JobStatus.STOPPED),
        (None, JobStatus.STOPPED),
    ],
)
def test_stopped_status(kind: OutcomeKind | None, status: JobStatus) -> None:
    """A stop after success completes the job, after `autoexp cancel` it is cancelled, else stopped."""
    assert stopped_status(kind) is status


def test_outcome_of_each_trigger() -> None:
    """End: Slurm's state refined by the cause; fatal line: a running root; hang without a root: a hang;
    lost: a FAILED `lost` job."""
    end = outcome_of(Verdict(Trigger.END, 0.0, cause=sig("nccl_error", "nccl", node="n2"),
                             record=JobRecord("1", JobState.FAILED, "sacct", exit_code=1)))  # fmt: skip
    assert (end.state, end.exit_code, end.error_type, end.node, end.kind) == (
        JobState.FAILED, 1, "nccl", "n2", OutcomeKind.CRASH)  # fmt: skip
    fatal = outcome_of(Verdict(Trigger.FATAL_LINE, 0.0, cause=sig("cuda_oom", "oom")))
    assert fatal.still_running and fatal.kind is OutcomeKind.OOM
    hang = HangVerdict(HangKind.NO_PROGRESS, 31.0, 30.0, 229, "no progress")
    bare = outcome_of(Verdict(Trigger.HANG, 0.0, hang=hang))
    assert (bare.kind, bare.cause, bare.hang) == (OutcomeKind.HANG, "hang", HangKind.NO_PROGRESS)
    lost = outcome_of(Verdict(Trigger.LOST, 0.0))
    assert (lost.state, lost.error_type) == (JobState.FAILED, "lost")


# -- the root cause decides ----------------------------------------------------------------------


@pytest.mark.parametrize(("error_type", "signal"), [("oom", "cuda_oom"), ("exception", "python_exception"),
                                                     ("segfault", "segfault")])  # fmt: skip
def test_a_hang_after_a_root_is_judged_on_the_root(error_type: str, signal: str) -> None:
    """A hang verdict on an attempt whose log holds an OOM/exception/segfault stops at once with the
    seed's permanent-failure reason; the hang is kept as what was observed."""
    hang = HangVerdict(HangKind.NO_PROGRESS, 31.0, 30.0, 229, "no progress past iteration 229 for 31s")
    verdict = Verdict(
        Trigger.HANG, 100.0, cause=sig(signal, error_type), hang=hang, observed="hang: no progress"
    )
    j = judge(TRANSIENT, verdict, RestartHistory(attempt=1, iteration=229))
    assert j.decision.action is DecisionAction.STOP
    assert j.decision.reason == f"Permanent failure detected (excluded error_type: {error_type})"
    assert j.effects.cancel and j.effects.job_status is JobStatus.STOPPED and j.record
    assert (j.evidence.trigger, j.evidence.observed, j.evidence.error_type) == (
        "hang",
        "hang: no progress",
        error_type,
    )


def test_a_lone_collective_timeout_is_a_hang() -> None:
    """A collective timeout with no root on any rank is a hang seen from the waiting ranks: restarted
    under the hang budget."""
    j = judge(TRANSIENT, Verdict(Trigger.FATAL_LINE, 5.0, cause=sig("nccl_watchdog", "nccl_timeout", "cascade")),
              RestartHistory())  # fmt: skip
    assert (j.outcome.kind, j.decision.action) == (OutcomeKind.HANG, DecisionAction.RESTART)
    assert j.decision.reason == "Transient failure detected (error_type=nccl_timeout)"


def test_scheduler_ends_are_waited_for() -> None:
    """A time-limit line in a running job is not acted on: Slurm ends it and its end state decides."""
    j = judge(TRANSIENT, Verdict(Trigger.FATAL_LINE, 5.0, cause=sig("slurm_time_limit", "time_limit")),
              RestartHistory())  # fmt: skip
    assert j.decision.action is DecisionAction.NONE and not j.record
    assert "the scheduler ends it by itself" in j.decision.reason


def test_evidence_round_trips_and_tolerates_old_rows() -> None:
    """Evidence is plain JSON and reads back equal; an old row's keys still read, unknown keys are ignored."""
    ev = Evidence(rule="transient", kind="oom", error_type="oom", exclude_nodes=("n1",), lines=("a",),
                  trigger="fatal_line", after_first_fatal_s=5.1)  # fmt: skip
    assert Evidence.from_json(ev.to_json()) == ev
    old = {"rule": "r", "kind": "crash", "state": "FAILED", "error_type": "nccl", "signal": None, "node": None,
           "iteration": 3, "exclude_nodes": ["n2"], "delay_s": 0.0, "lines": ["x"], "someday": 1}  # fmt: skip
    assert Evidence.from_json(old).exclude_nodes == ("n2",) and Evidence.from_json(old).trigger == "end"


def _recorded(judgements: list[Judgement]) -> list[DecisionInfo]:
    return [
        DecisionInfo(
            i,
            1,
            i,
            j.decision.action.value,
            j.decision.reason,
            None,
            None,
            j.evidence.to_json(),
            T0 + timedelta(minutes=i),
        )
        for i, j in enumerate(judgements, start=1)
    ]


def test_history_round_trip_gives_the_shipped_budget() -> None:
    """Three recorded scancel restarts, read back from the decision records alone, leave the 4th scancel
    with `retry budget exhausted (attempt 4/3)` under megatron_transient."""
    made: list[Judgement] = []
    record = JobRecord("1", JobState.CANCELLED, "sacct")
    for attempt in range(1, 5):
        history = job_history(_recorded(made), attempt, None)
        made.append(judge(TRANSIENT, Verdict(Trigger.END, T0.timestamp() + attempt, record=record), history))
    assert [j.decision.action for j in made] == [DecisionAction.RESTART] * 3 + [DecisionAction.STOP]
    assert made[-1].decision.reason == "retry budget exhausted (attempt 4/3)"


def test_history_skips_rows_without_mapping_evidence() -> None:
    """A restart row whose evidence is not a mapping (a foreign row) counts against no budget."""
    info = DecisionInfo(1, 1, 1, "restart", "r", None, None, ["not", "a", "dict"], T0)
    assert job_history([info], 2, None).restarts == ()
    assert history_from([], 1, None).restarts == ()


# -- the attempt view: acting at the first fatal line -------------------------------------------

HEALTHY = [
    f" [2026-11-22 04:21:0{i}] iteration        {i}/      12 | lm loss: 5.0E+00 |" for i in range(1, 4)
]


def _view(**early: object) -> AttemptView:
    view = AttemptView(PATTERNS, early=EarlySettings(**early))  # type: ignore[arg-type]
    view.mark_running(0.0)
    view.read(HEALTHY, 1.0)
    return view


def test_oom_line_settles_then_stops() -> None:
    """A rank's CUDA OOM ends the attempt: no verdict inside the settle window, then an early verdict on
    the OOM (not the launcher's SIGTERM line that followed), judged stop at once."""
    view = _view(settle_s=5.0)
    view.read(["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB. GPU 1 has a "
               "total capacity of 139.80 GiB of which 127.41 GiB is free."], 10.0)  # fmt: skip
    view.read(["W1122 04:21:04.274000 1200 torch/distributed/elastic/multiprocessing/api.py:1012] Sending "
               "process 1662 closing signal SIGTERM"], 11.0)  # fmt: skip
    assert view.fatal_verdict(14.9) is None
    verdict = view.fatal_verdict(15.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "oom"
    j = judge(TRANSIENT, verdict, RestartHistory(iteration=view.last_iteration))
    assert j.decision.reason == "Permanent failure detected (excluded error_type: oom)"
    assert j.evidence.after_first_fatal_s == 5.0 and j.evidence.first_fatal_line_no == 4


def test_teardown_without_a_cause_is_killed() -> None:
    """A worker that died without a word (SIGKILL): torchrun's teardown line alone gives `killed`, restarted."""
    view = _view(settle_s=2.0)
    line = ("W1122 04:21:03.468000 1208 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process "
            "1655 closing signal SIGTERM")  # fmt: skip
    view.read([line], 10.0)
    verdict = view.fatal_verdict(12.0)
    assert verdict is not None and verdict.cause is not None
    assert (verdict.cause.pattern, verdict.cause.error_type, verdict.cause.line) == (
        KILLED_PATTERN,
        "killed",
        line,
    )
    j = judge(TRANSIENT, verdict, RestartHistory())
    assert j.decision.action is DecisionAction.RESTART and j.evidence.lines[0] == line


def test_a_stop_requested_from_outside_waits_for_slurm() -> None:
    """torchrun told to stop (scancel, time limit) tears its workers down: no `killed` verdict; Slurm's end decides."""
    view = _view(settle_s=1.0)
    view.read(["W1122 04:21:03.400000 1 torch/distributed/elastic/agent/server/api.py:1] Received "
               "Signals.SIGTERM death signal, shutting down workers",
               "W1122 04:21:03.468000 1 torch/distributed/elastic/multiprocessing/api.py:1] Sending process "
               "1655 closing signal SIGTERM"], 10.0)  # fmt: skip
    assert view.fatal_verdict(20.0) is None


def test_a_logged_exception_alone_does_not_end_a_run() -> None:
    """A generic `XxxError:` line (runs catch and log them) opens no window; the launcher's teardown does."""
    view = _view(settle_s=1.0)
    view.read(["ValueError: bad sample 17, skipped"], 10.0)
    assert view.fatal_due_s() is None and view.fatal_verdict(100.0) is None
    view.read(["W1 api.py:1] Sending process 1 closing signal SIGTERM"], 101.0)
    verdict = view.fatal_verdict(102.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "exception"


def test_manual_nccl_error_timeout_line_restarts() -> None:
    """The seed's manual test: `[default0]:NCCL ERROR timeout` appended to a running log is classified and
    restarts the job."""
    view = _view(settle_s=1.0)
    view.read(["[default0]:NCCL ERROR timeout"], 10.0)
    verdict = view.fatal_verdict(11.0)
    assert verdict is not None
    assert judge(TRANSIENT, verdict, RestartHistory()).decision.action is DecisionAction.RESTART


def test_in_job_recovery_window() -> None:
    """With in-job restarts a fatal line opens a window: a new best iteration inside it heals the job (no
    verdict, a recovery reported); a counter rewound to the checkpoint is no progress."""
    view = _view(settle_s=1.0, in_job_restarts=True, recovery_window_s=60.0)
    view.read(["[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"], 10.0)
    view.read([" iteration        2/      12 | lm loss: 5.0E+00 |"], 20.0)  # rewound to the checkpoint
    assert view.fatal_verdict(30.0) is None and view.take_recoveries() == []
    view.read([" iteration        4/      12 | lm loss: 5.0E+00 |"], 40.0)
    healed = view.take_recoveries()
    assert [r.iteration for r in healed] == [4] and view.first_fatal is None
    assert view.fatal_verdict(200.0) is None
    view.read(["[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"], 210.0)
    assert (
        view.fatal_verdict(269.0) is None and view.hang_verdict(269.0, HangConfig(progress_floor_s=1)) is None
    )
    assert view.fatal_verdict(270.0) is not None  # no new best within the window


def test_hang_verdict_names_the_root() -> None:
    """The hang tracker's verdict carries the root the log already holds; a cascade alone is not a root."""
    view = _view(settle_s=1000.0)
    view.read(["[rank0]:[E1122 04:21:32.820484898 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught "
               "collective operation timeout: WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
               "Timeout(ms)=30000) ran for 30012 milliseconds before timing out."], 5.0)  # fmt: skip
    config = HangConfig(progress_floor_s=30.0, no_output_timeout_s=1000.0)
    verdict = view.hang_verdict(40.0, config)
    assert verdict is not None and verdict.cause is None and verdict.hang is not None
    view.read(["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."], 41.0)
    verdict = view.hang_verdict(80.0, config)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "oom"


# -- Megatron's exit protocol --------------------------------------------------------------------

MEGATRON_NAN = [
    "[rank1]: Unexpected result nan on rank 1 at iteration #118 invocation #1 (message='found NaN in local grad norm')",
    "E1123 01:47:01.713000 4100 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 16) "
    "local_rank: 0 (pid: 4101) of binary: /usr/bin/python3",
]


def _ended(lines: list[str], state: JobState, exit_code: int, nodes: tuple[str, ...] = ("node1",)) -> Verdict:
    view = _view()
    view.read(lines, 5.0)
    return view.end_verdict(JobRecord("7", state, "sacct", exit_code=exit_code, nodes=nodes), 9.0)


def test_exit_16_restarts_once_off_its_node_then_stops() -> None:
    """Megatron's exit 16 ("resume to disambiguate" after a NaN; torchrun itself exits 1) restarts once,
    recorded as numerical_instability and kept off the one node it ran on; a second 16 with no progress
    in between stops."""
    verdict = _ended(MEGATRON_NAN, JobState.FAILED, 1)
    first = judge(TRANSIENT, verdict, RestartHistory(iteration=118))
    assert (first.decision.action, first.decision.rule) == (DecisionAction.RESTART, "megatron_rerun")
    assert first.decision.reason == "Transient failure detected (error_type=numerical_instability)"
    assert first.outcome.exit_code == 16 and first.effects.exclude_nodes == ("node1",)
    history = job_history(_recorded([first]), 2, 118)
    second = judge(TRANSIENT, _ended(MEGATRON_NAN, JobState.FAILED, 1, ("node2",)), history)
    assert second.decision.action is DecisionAction.STOP
    assert second.decision.reason.startswith("retry budget exhausted (attempt 2/1")


def test_exit_17_stops() -> None:
    """Exit 17 (Megatron's rerun machinery: the result did not reproduce) is never restarted."""
    lines = [MEGATRON_NAN[1].replace("exitcode: 16", "exitcode: 17")]
    j = judge(TRANSIENT, _ended(lines, JobState.FAILED, 1), RestartHistory())
    assert j.decision.action is DecisionAction.STOP and "exit 17" in j.decision.reason


@pytest.mark.parametrize(("iteration", "is_end", "action", "kind"), [
    (120, False, DecisionAction.RESTART, OutcomeKind.EARLY_EXIT),  # saved mid-run: resume it
    (120, True, DecisionAction.STOP, OutcomeKind.SUCCESS),  # the experiment stops early on purpose
    (400, False, DecisionAction.STOP, OutcomeKind.SUCCESS),  # the counter reached its total
])  # fmt: skip
def test_exit_0_is_completion_only_at_the_last_iteration(
    iteration: int, is_end: bool, action: DecisionAction, kind: OutcomeKind
) -> None:
    """Exit 0 after Megatron's SIGTERM save at iteration 120 of 400 is resubmitted (the `scheduler` rule,
    refilled by progress); at 400/400, or when the experiment says an early exit is its end, it is done."""
    lines = [f" [2026-11-23 01:46:00] iteration      {iteration}/     400 | lm loss: 4.1E+00 |",
             f"saving checkpoint at iteration {iteration:7d} to /ckpt in torch_dist format",
             f"  successfully saved checkpoint from iteration {iteration:7d} to /ckpt",
             "exiting program after receiving SIGTERM."]  # fmt: skip
    j = judge(TRANSIENT, _ended(lines, JobState.COMPLETED, 0), RestartHistory(), early_exit_is_end=is_end)
    assert (j.decision.action, j.outcome.kind) == (action, kind)
    if action is DecisionAction.RESTART:
        assert j.decision.rule == "scheduler" and j.evidence.error_type == "exit_before_end"


def test_exit_0_within_one_log_interval_of_the_total_is_completion() -> None:
    """Megatron logs every --log-interval iterations: a run of 305 logging every 10 ends with `300/ 305`;
    its exit 0 is completion, not an early exit (a save mid-run stops a whole interval or more short)."""
    lines = [
        f" [2026-11-23 01:46:00] iteration      {i}/     305 | lm loss: 4.1E+00 |" for i in (280, 290, 300)
    ]
    j = judge(TRANSIENT, _ended(lines, JobState.COMPLETED, 0), RestartHistory())
    assert (j.decision.action, j.outcome.kind) == (DecisionAction.STOP, OutcomeKind.SUCCESS)
    lines = [
        f" [2026-11-23 01:46:00] iteration      {i}/     305 | lm loss: 4.1E+00 |" for i in (260, 270, 280)
    ]
    j = judge(TRANSIENT, _ended(lines, JobState.COMPLETED, 0), RestartHistory())
    assert j.outcome.kind is OutcomeKind.EARLY_EXIT


def test_a_task_that_exited_with_a_code_is_no_silent_death() -> None:
    """srun's `task 0: Exited with exit code 3` ends the job (the launcher tears down) but the worker chose
    its status: not `killed`; with no cause line the job's end decides (crash)."""
    view = _view(settle_s=1.0)
    view.read(["srun: error: node1: task 0: Exited with exit code 3"], 10.0)
    assert view.fatal_verdict(20.0) is None
    record = JobRecord("1", JobState.FAILED, "sacct", exit_code=3)
    j = judge(TRANSIENT, view.end_verdict(record, 21.0), RestartHistory())
    assert (j.outcome.kind, j.decision.reason) == (
        OutcomeKind.CRASH,
        "Transient failure detected (error_type=crash)",
    )


XID = "{node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


def _crash_view(lines: list[str]) -> AttemptView:
    view = AttemptView(PATTERNS, early=EarlySettings(settle_s=1.0))
    view.mark_running(0.0)
    view.read(lines, 1.0)
    return view


@pytest.mark.parametrize(
    ("named", "allocation", "excluded", "withheld"),
    [
        (["node3"], ["node1", "node2", "node3", "node4"], ("node3",), False),
        (["node1", "node2"], ["node1", "node2"], (), True),  # every node: a job-wide failure
        (["node9"], ["node1", "node2"], (), False),  # not this attempt's node
    ],
)
def test_judge_excludes_only_nodes_the_evidence_singles_out(
    named: list[str], allocation: list[str], excluded: tuple[str, ...], withheld: bool
) -> None:
    """A hardware line with its host blames that node of the allocation; lines naming more than the
    guard share blame none, and the evidence says why."""
    view = _crash_view([XID.format(node=n) for n in named])
    record = JobRecord("1", JobState.FAILED, "sacct", exit_code=1)
    j = judge(TRANSIENT, view.end_verdict(record, 5.0), RestartHistory(), view.classifier.signals,
              allocation=allocation)  # fmt: skip
    assert j.decision.action is DecisionAction.RESTART
    assert j.effects.exclude_nodes == excluded and j.blame.nodes == excluded
    assert bool(j.evidence.blame_withheld) is withheld
    assert Evidence.from_json(j.evidence.to_json()) == j.evidence


def test_startup_recovery_window_applies_before_the_first_iteration() -> None:
    """With in-job restarts, a fatal line before any iteration waits the startup window; after one, the
    steady-state window."""
    early = {"settle_s": 1.0, "in_job_restarts": True, "recovery_window_s": 60.0,
             "recovery_window_startup_s": 600.0}  # fmt: skip
    view = AttemptView(PATTERNS, early=EarlySettings(**early))  # type: ignore[arg-type]
    view.mark_running(0.0)
    view.read(["[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"], 10.0)
    assert view.fatal_due_s() == 610.0
    verdict = view.fatal_verdict(610.0)
    assert verdict is not None and "recovery window of 600 s passed" in (verdict.observed or "")
    steady = _view(**early)
    steady.read(["[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"], 10.0)
    assert steady.fatal_due_s() == 70.0


def test_judge_excludes_the_node_of_a_rank_prefixed_gpu_fault_through_the_layout_line() -> None:
    """The monitor's path: the attempt view reads the script's layout line, iterations, then a
    host-less ECC line on rank 13 (4 ranks per node) and the peers' NCCL errors; the settled fatal
    line is judged at once and excludes node 13 // 4 = node4 of the allocation."""
    view = AttemptView(PATTERNS, early=EarlySettings(settle_s=1.0))
    view.mark_running(0.0)
    view.read(["autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)",
               " [2026-11-23 08:32:38.004485] iteration       10/     300 | lm loss: 6.888007E+00 |"], 1.0)  # fmt: skip
    view.read(["[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
               "[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, "
               "remote process exited or there was a network error, NCCL version 2.28.8"], 10.0)  # fmt: skip
    verdict = view.fatal_verdict(12.0)
    assert verdict is not None
    j = judge(TRANSIENT, verdict, RestartHistory(), view.classifier.signals,
              allocation=["node1", "node2", "node3", "node4"])  # fmt: skip
    assert j.outcome.error_type == "gpu_hardware" and j.decision.action is DecisionAction.RESTART
    assert j.effects.exclude_nodes == ("node4",) and j.effects.cancel
    assert "rank 13, 4 ranks per node: node 3 of the allocation" in j.evidence.blamed[0]

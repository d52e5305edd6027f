"""The replay simulation (core/replay/replay.py): batches, ticks, verdicts and judgements on a virtual clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.decide.judge import PastDecision
from oellm_autoexp.core.decide.policy import load_policy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.replay import recorded_log as log_lines
from oellm_autoexp.core.replay.line_time import line_times
from oellm_autoexp.core.replay.log_end import TAIL_LINES, LogEnd, end_of
from oellm_autoexp.core.replay.read_times import ReadMark, coalesces
from oellm_autoexp.core.replay.recorded_log import split_log
from oellm_autoexp.core.replay.replay import (
    Batch,
    ReplayResult,
    ReplaySetup,
    SlurmView,
    batches_of,
    replay,
    replay_lines,
    replay_log,
)
from oellm_autoexp.core.watch.attempt_view import EarlySettings
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.daemon.replay_runs import decoded_lines
from tests.conftest import unavailable
from tests.paths import REPO
from tests.unit.synthetic_logs import synthetic_log

ROOT = REPO
PATTERNS = load_patterns(["megatron_production"])
TRANSIENT = load_policy(yaml.safe_load((ROOT / "config" / "restart" / "megatron_transient.yaml").read_text()))
FAILED = LogEnd(JobState.FAILED, 1, "test")
NCCL_TIMEOUT = (
    "[rank0]:[E1122 04:21:32.820484898 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=30000) ran for 30012 "
    "milliseconds before timing out."
)
OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB."
NAN = "[rank1]: RuntimeError: Rank 1: found NaN in lm loss at iteration 5 (local loss nan)."


def iteration(n: int) -> str:
    return f" [2026-11-22 04:21:02] iteration {n:>8}/      12 | lm loss: 5.0E+00 |"


def setup(**kw: object) -> ReplaySetup:
    base: dict[str, object] = {
        "policy": TRANSIENT,
        "patterns": PATTERNS,
        "early": EarlySettings(settle_s=5.0),
    }
    return ReplaySetup(**{**base, **kw})  # type: ignore[arg-type]


def test_batches_group_lines_of_the_same_time() -> None:
    """Consecutive lines with one time are read together; a new time starts a new batch."""
    batches = batches_of(["a", "b", "c", "d"], [0.0, 0.0, 1.0, 1.0])
    assert [(b.at_s, b.lines) for b in batches] == [(0.0, ("a", "b")), (1.0, ("c", "d"))]


def test_fatal_line_is_judged_at_its_settle_time_and_stops_reading() -> None:
    """An OOM read at t=12 while the job runs is judged at exactly t=17 (not at the next 10 s poll);
    the stop ends the attempt, so lines after it are not read."""
    batches = [Batch(0.0, (iteration(1),)), Batch(12.0, (OOM,)), Batch(40.0, (NCCL_TIMEOUT,))]
    result = replay(batches, SlurmView(0.0, 60.0, FAILED), setup())
    [decision] = result.decisions
    assert decision.at_s == 17.0 and decision.lines_read == 2
    assert decision.judgement.decision.reason == "Permanent failure detected (excluded error_type: oom)"
    assert decision.judgement.evidence.after_first_fatal_s == 5.0
    assert result.ended_by == "decision" and result.end is None


def test_a_quick_exit_is_judged_at_the_end() -> None:
    """A job that exits right after its fatal line is judged on Slurm's end, seen at the last line."""
    batches = [Batch(0.0, (iteration(1),)), Batch(12.0, (OOM,)), Batch(13.0, ("bye",))]
    result = replay(batches, SlurmView(0.0, 13.0, FAILED), setup())
    [decision] = result.decisions
    assert decision.at_s == 13.0 and decision.judgement.evidence.trigger == "end"
    assert result.end == FAILED


def test_wait_for_end_is_a_wait_event_then_the_end_decides() -> None:
    """megatron_transient waits for a NaN job to end (its rerun machinery saves and exits): the settled
    line gives a `wait` event, not a decision; the end is then judged once."""
    batches = [Batch(0.0, (iteration(1),)), Batch(10.0, (NAN,)), Batch(30.0, ("still printing",))]
    result = replay(batches, SlurmView(0.0, 30.0, FAILED), setup())
    waits = [e for e in result.events if e.kind == "wait"]
    assert len(waits) == 1 and waits[0].at_s == 15.0 and "waiting for it to end" in waits[0].text
    [decision] = result.decisions
    assert decision.at_s == 30.0
    assert (
        decision.judgement.decision.reason
        == "Permanent failure detected (excluded error_type: numerical_instability)"
    )


def test_silence_is_a_hang_at_the_first_poll_past_the_limit() -> None:
    """After iteration 2 nothing moves: with a 30 s progress floor and a 10 s poll the hang verdict comes at
    the first poll past 30 s of no progress (t=50 for progress at t=10), recorded as kind hang."""
    batches = [Batch(0.0, (iteration(1),)), Batch(10.0, (iteration(2),)), Batch(100.0, ("late",))]
    config = HangConfig(progress_floor_s=30.0, progress_factor=1.0, no_output_timeout_s=1000.0)
    result = replay(batches, SlurmView(0.0, 100.0, FAILED), setup(hang=config, poll_s=10.0))
    [decision] = result.decisions
    assert decision.at_s == 50.0 and decision.lines_read == 2
    assert decision.judgement.evidence.kind == "hang" and decision.judgement.evidence.trigger == "hang"
    assert [e.kind for e in result.events] == ["hang", "decision"]


def test_history_before_the_attempt_counts_against_budgets() -> None:
    """With two hang restarts already recorded for the job, the third hang stops on the hang budget.
    The earlier attempts got as far (iteration 2): no new ground, so the budget has not refilled."""
    past = tuple(
        PastDecision(
            "restart", float(i), Evidence(rule="transient", kind="hang", error_type="hang", iteration=2)
        )
        for i in range(2)
    )
    batches = [Batch(0.0, (iteration(1),)), Batch(10.0, (iteration(2),)), Batch(100.0, ("late",))]
    config = HangConfig(progress_floor_s=30.0, progress_factor=1.0, no_output_timeout_s=1000.0)
    result = replay(batches, SlurmView(0.0, 100.0, FAILED), setup(hang=config, past=past, attempt_no=3))
    [decision] = result.decisions
    assert decision.judgement.decision.reason == "retry budget exhausted for error_type=hang (attempt 3/2)"


def test_offsets_of_the_timing_record_are_reported() -> None:
    """A batch's end offset (from the monitor's timing record) is the decision's offset."""
    batches = [Batch(0.0, (iteration(1),), 80), Batch(12.0, (OOM,), 160), Batch(40.0, ("x",), 162)]
    result = replay(batches, SlurmView(0.0, 60.0, FAILED), setup())
    assert result.decisions[0].offset == 160


def test_a_clean_log_completes() -> None:
    """No fatal line and a COMPLETED end: one decision, `Job completed successfully`."""
    batches = [Batch(0.0, (iteration(1),)), Batch(5.0, (iteration(12),))]
    result = replay(batches, SlurmView(0.0, 5.0, LogEnd(JobState.COMPLETED, 0, "t")), setup())
    assert [d.judgement.decision.reason for d in result.decisions] == ["Job completed successfully"]
    assert result.first_fatal is None and result.root_cause is None


@pytest.mark.parametrize(
    ("last", "start", "at_s", "has_signal", "expected"),
    [
        (ReadMark(1, 0, 100, 10.0), 100, 10.5, False, True),  # a burst of plain lines: one row
        (ReadMark(1, 0, 100, 10.0), 100, 11.0, False, False),  # 1 s later: a row of its own
        (ReadMark(1, 0, 100, 10.0), 100, 10.5, True, False),  # a signal keeps its own time
        (ReadMark(1, 0, 100, 10.0, has_signal=True), 100, 10.5, False, False),  # nor is a signal row grown
        (ReadMark(1, 0, 100, 10.0), 0, 10.5, False, False),  # the file was read again from 0
        (ReadMark(None, 0, 100, 10.0), 100, 10.5, False, True),  # not saved yet: it grows in memory
        (None, 0, 10.0, False, False),
    ],
)
def test_timing_record_coalesces_only_plain_bursts(
    last: ReadMark | None, start: int, at_s: float, has_signal: bool, expected: bool
) -> None:
    """A batch extends the row before it only when it follows it in the file within 1 s and neither holds
    a signal other than progress: the times a decision rests on stay exact."""
    assert coalesces(last, start, at_s, has_signal) is expected


def _summary(result: ReplayResult) -> tuple:
    decisions = [(d.at_s, d.lines_read, d.judgement.decision.action, d.judgement.decision.reason)
                 for d in result.decisions]  # fmt: skip
    events = [(e.at_s, e.kind, e.text) for e in result.events]
    return decisions, events, result.lines_read, result.end, result.ended_by, result.first_fatal


@pytest.mark.parametrize(
    "log",
    sorted((ROOT / "tests" / "fixtures" / "logs").glob("*/*.log")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_replay_of_lines_by_bisection_equals_replay_of_batches(log: Path) -> None:
    """A log file's lines replayed by time bisection decide exactly as one batch per distinct time."""
    lines = decoded_lines(log.read_bytes())
    times = line_times(lines, fallback_year=2026).times_s
    slurm = SlurmView(times[0], times[-1], end_of(lines))
    quick = HangConfig(startup_timeout_s=30, no_output_timeout_s=20, progress_floor_s=20)
    healing = EarlySettings(settle_s=5.0, in_job_restarts=True, recovery_window_s=60.0)
    for one in (setup(), setup(hang=quick), setup(early=healing)):
        expected = replay(batches_of(lines, times), slurm, one, source="x")
        assert _summary(replay_lines(lines, times, slurm, one, source="x")) == _summary(expected)


# -- the fast path (replay_log over core/replay/recorded_log.py) against the reference -----------------------

FIXTURE_LOGS = sorted((ROOT / "tests" / "fixtures" / "logs").glob("*/*.log"))
SETTINGS = {
    "default": setup(),
    "quick": setup(hang=HangConfig(startup_timeout_s=30, no_output_timeout_s=20, progress_floor_s=20)),
    "healing": setup(early=EarlySettings(settle_s=5.0, in_job_restarts=True, recovery_window_s=60.0)),
    # A poll that is no divisor of the stamps' seconds, and limits a few polls long.
    "odd_poll": setup(
        early=EarlySettings(settle_s=2.5), poll_s=3.7,
        hang=HangConfig(startup_timeout_s=50, no_output_timeout_s=400, progress_floor_s=90, progress_factor=4),
    ),
    "tiny": setup(
        early=EarlySettings(settle_s=1.0), poll_s=1.0,
        hang=HangConfig(startup_timeout_s=3, no_output_timeout_s=2, progress_floor_s=2, progress_factor=3),
    ),
    "no_hang": setup(hang=None, poll_s=3.0),
}  # fmt: skip


@pytest.fixture(params=["python", "numpy"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """core/replay/recorded_log.py's way of splitting a log, for every log size."""
    try:
        log_lines.set_engine(request.param)
    except ValueError:
        unavailable("numpy (the `fast` extra) is not installed")
    yield request.param
    log_lines.set_engine("auto")


def _everything(result: ReplayResult) -> tuple:
    """All a replay reports: every decision in full (its judgement and evidence), the timeline, the ends."""
    decisions = [(d.at_s, d.lines_read, d.offset, d.judgement) for d in result.decisions]
    events = [(e.at_s, e.kind, e.text, e.signal) for e in result.events]
    return (decisions, events, result.lines_read, result.end, result.ended_by, result.first_fatal,
            result.root_cause, result.dropped_signals, result.origin_s, result.slurm)  # fmt: skip


MAX_POLLS = 100_000  # a log spanning months (three yearless fixtures) runs its quiet polls only up to here


def _reference(data: bytes, one: ReplaySetup) -> ReplayResult:
    """The slow way: every line decoded and stamped one by one, one batch per distinct time, every poll run."""
    lines = decoded_lines(data)
    times = line_times(lines, fallback_year=2026).times_s
    slurm = SlurmView(times[0], times[-1], end_of(lines))
    every_poll = (times[-1] - times[0]) / one.poll_s < MAX_POLLS
    return replay(batches_of(lines, times), slurm, one, source="x", every_poll=every_poll)


def _fast(data: bytes, one: ReplaySetup) -> ReplayResult:
    """What `autoexp replay LOG` runs (daemon/replay_runs.py replay_file)."""
    log = split_log(data, fallback_year=2026)
    times = log.times.times_s
    slurm = SlurmView(times[0], times[-1], end_of(log.tail(TAIL_LINES)))
    return replay_log(log, slurm, one, source="x")


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fast_replay_of_every_fixture_equals_the_reference(log: Path, engine: str) -> None:
    """Lines split and stamped in bulk, groups classified as one text, kept progress lines as marks and
    quiet polls passed over decide, report and time everything exactly as the line-by-line reference."""
    data = log.read_bytes()
    for name, one in SETTINGS.items():
        assert _everything(_fast(data, one)) == _everything(_reference(data, one)), name


@pytest.mark.parametrize("seed", range(40))
def test_fast_replay_of_generated_logs_equals_the_reference(seed: int, engine: str) -> None:
    """Generated logs (tests/unit/synthetic_logs.py: skewed ranks, unstamped stretches, silences, stalls,
    saves, counters going back, CRLF, bad UTF-8, fatal ends) replay exactly as the reference."""
    data = synthetic_log(seed)
    for name, one in SETTINGS.items():
        assert _everything(_fast(data, one)) == _everything(_reference(data, one)), name


def _megatron(t: float, it: int, rank: str = "") -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0 + t))
    return f"{rank} [{stamp}] iteration {it:>8}/    50000 | lm loss: 5.0E+00 | loss scale: 1.0 |"


def _glog(t: float) -> str:
    return time.strftime("W%m%d %H:%M:%S.000000 42 run.py:1] still here", time.gmtime(T0 + t))


T0 = 1_795_300_000  # 2026-11-22


def _bytes(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


QUICK = SETTINGS["quick"]  # hang limits of 20 s, a 10 s poll


@pytest.mark.parametrize(
    ("case", "lines", "at_s", "reason"),
    [
        (  # 300 lines a second, a 1,000 s silence, more lines: a hang at the first poll past 20 s
            "a long gap inside a quiet stretch",
            [_megatron(t, t + 1) for t in range(300)] + [_megatron(1300 + t, 301 + t) for t in range(50)],
            320.0,
            "Transient failure detected (error_type=hang)",
        ),
        (  # lines keep coming, the counter stands still from t=99: no progress past 20 s, at the poll t=120
            "a hang threshold crossed inside a stretch of lines",
            [_megatron(t, t + 1) for t in range(100)] + [_glog(100 + t) for t in range(200)],
            120.0,
            "Transient failure detected (error_type=hang)",
        ),
        (  # rank 1's clock is 15 s behind (its stamps read as the latest so far); an OOM at t=199 is judged 5 s on
            "interleaved ranks, stamps going back",
            [
                x
                for t in range(200)
                for x in (_megatron(t, t + 1, "[rank0]:"), _megatron(t - 15, t + 1, "[rank1]:"))
            ]
            + [OOM, _glog(230)],
            204.0,
            "Permanent failure detected (excluded error_type: oom)",
        ),
        (  # 400 unstamped lines take the time of the stamp before them (t=59), the next stamp is t=160
            "an unstamped stretch",
            [_megatron(t, t + 1) for t in range(60)]
            + [f"plain line {i}" for i in range(400)]
            + [_megatron(160 + t, 61 + t) for t in range(30)],
            80.0,
            "Transient failure detected (error_type=hang)",
        ),
    ],
    ids=["long gap", "threshold crossed", "ranks going back", "unstamped stretch"],
)
def test_fast_replay_cases(case: str, lines: list[str], at_s: float, reason: str, engine: str) -> None:
    """Each case decides where the reference does, and where the limits say."""
    data = _bytes(lines)
    fast, reference = _fast(data, QUICK), _reference(data, QUICK)
    assert _everything(fast) == _everything(reference)
    [decision] = fast.decisions
    assert decision.at_s - fast.origin_s == at_s and decision.judgement.decision.reason == reason


def test_lines_of_one_time_are_one_batch_also_by_bisection() -> None:
    """Lines sharing the first line's time are read together before the tick at that time, as one batch
    is: before, bisection read them one at a time when a tick was due then, and a fixture judged its
    fatal line with a different set of lines than the batch replay (exception.log, 1 s polls)."""
    log = ROOT / "tests" / "fixtures" / "logs" / "cpu" / "exception.log"
    lines = decoded_lines(log.read_bytes())
    times = line_times(lines, fallback_year=2026).times_s
    slurm = SlurmView(times[0], times[-1], end_of(lines))
    one = SETTINGS["tiny"]
    by_lines = replay_lines(lines, times, slurm, one, source="x")
    assert _everything(by_lines) == _everything(replay(batches_of(lines, times), slurm, one, source="x"))
    assert by_lines.decisions[0].judgement.evidence.lines == (
        "[rank1]: ValueError: shard index 6000 out of range for dataset with 5000 samples",
    )


def test_a_rank_that_raised_and_lingers_beside_a_blocked_peer_is_judged_at_the_settle_window() -> None:
    """Two H100s (2026-11-25): rank 1 raised at the start of iteration 230 and its process stayed;
    rank 0 printed iteration 229 (in flight) just after the traceback and blocked in NCCL. The
    exception line is judged 5 s after it, not at the hang limit."""
    data = (REPO / "tests/fixtures/logs/gpu_monitor/raise_and_linger_pg600.log").read_bytes()
    result = _fast(data, setup())
    first = result.decisions[0]
    assert first.judgement.evidence.after_first_fatal_s == 5.0
    assert "injected crash at iteration 230 on rank 1" in (first.judgement.evidence.first_fatal_line or "")


PORT_EVENT = (
    "gpu17:3468:3912 [0] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : "
    "mlx5_0:1 Got non-fatal async event: port error(10)"
)


def test_a_port_event_then_a_still_counter_is_a_hang_within_the_warned_limit_not_the_watchdog() -> None:
    """Counter every 10 s, then NCCL's port event on gpu17 at t=100 and silence (every rank waits in
    the collective; torch's watchdog would speak at t=700): judged hung max(5 x 10 s, 180 s) after the
    event, on the event as its cause, and the restart keeps gpu17 out."""
    hang = HangConfig(no_output_timeout_s=1800.0, progress_floor_s=900.0)  # the shipped limits
    batches = [Batch(10.0 * n, (iteration(n),)) for n in range(1, 10)] + [Batch(100.0, (PORT_EVENT,))]
    result = replay(batches, SlurmView(0.0, 5000.0, FAILED), setup(hang=hang))
    [decision] = result.decisions
    assert 280.0 <= decision.at_s <= 300.0  # 100 s + 180 s, at the next poll
    judged = decision.judgement
    assert judged.outcome.error_type == "nccl" and judged.evidence.signal == "nccl_ib_port_event"
    assert "warns of a hang" in (judged.evidence.observed or "")
    assert judged.effects.exclude_nodes == ("gpu17",)


STEP_CANCELLED = "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-11-22T04:22:00 ***"


def test_a_recorded_poll_is_a_tick_so_a_hang_is_judged_before_the_cancel_lines_it_caused() -> None:
    """The monitor judged the hang at t=41 (its poll; recorded), 31 s after the last advance; its cancel's
    lines were read at t=42. The replay's own grid ticks at 40 (too early) and 50: without the recorded
    poll it reads the cancel line first and calls the attempt cancelled; with it, the hang at 41, as
    the monitor did. Every poll (the reference) agrees."""
    batches = [Batch(0.0, (iteration(1),)), Batch(10.0, (iteration(2),)), Batch(42.0, (STEP_CANCELLED,))]
    config = HangConfig(progress_floor_s=30.0, progress_factor=1.0, no_output_timeout_s=1000.0)
    own = setup(hang=config, poll_s=10.0)
    grid_only = replay(batches, SlurmView(0.0, 60.0, FAILED), own)
    assert grid_only.decisions[0].judgement.evidence.trigger != "hang"
    for every_poll in (False, True):
        recorded = replay(
            batches, SlurmView(0.0, 60.0, FAILED, polls_at_s=(41.0,)), own, every_poll=every_poll
        )
        [decision] = recorded.decisions
        assert decision.at_s == 41.0 and decision.lines_read == 2
        assert decision.judgement.evidence.trigger == "hang"

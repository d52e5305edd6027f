"""The monitor's start-up limit: each attempt's start-up from the attempts table, the same after a resume."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import AttemptView
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.startup import Startup
from oellm_autoexp.daemon.startup import learn_startup, learned_limit, note_first_iteration, startups

T0 = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)


def attempt(no: int, started_s: float | None, first_iteration_s: float | None) -> AttemptInfo:
    started = None if started_s is None else T0 + timedelta(seconds=started_s)
    first = None if first_iteration_s is None else T0 + timedelta(seconds=first_iteration_s)
    return AttemptInfo(
        id=no, job_id=1, attempt_no=no, submit_tag=f"t{no}", intent="confirmed", executor_job_id=str(no),
        nodes=(), intended_at=T0, submitted_at=T0, started_at=started, ended_at=None,
        state=JobState.FAILED, exit_code=1, log_path=None, last_iteration=None, first_iteration_at=first,
    )  # fmt: skip


def test_startups_are_first_iteration_minus_start_for_earlier_attempts_that_ran() -> None:
    """Oldest first; one never seen running is left out; one that ran without an iteration is None;
    one whose first iteration was read before the poll that saw it RUNNING counts as 0 s."""
    rows = [attempt(3, 5000.0, None), attempt(1, 0.0, 900.0), attempt(2, None, None),
            attempt(4, 9000.0, 8990.0), attempt(5, 9500.0, None)]  # fmt: skip
    assert startups(rows, before_attempt_no=5) == [Startup(900.0), Startup(None), Startup(0.0)]
    assert startups(rows, before_attempt_no=2) == [Startup(900.0)]


def _live(job_id: int, attempt_no: int, hang: HangConfig | None) -> Any:
    runtime = SimpleNamespace(settings=SimpleNamespace(hang=hang), job=SimpleNamespace(id=job_id))
    return SimpleNamespace(runtime=runtime, attempt=SimpleNamespace(attempt_no=attempt_no))


def test_a_resuming_monitor_reads_the_same_limit_from_the_store(tmp_path: Path) -> None:
    """Attempt 1 started at T0 and logged its first iteration 900 s later; attempt 2's limit is 1800 s,
    for the monitor that wrote it and for a new one that opens the same database."""
    hang = HangConfig()
    with SQLiteStore(tmp_path) as store:
        session = store.create_session("s", config_path="x.yaml", config={}, now=T0)
        job = store.add_job(session.id, job_key="k", name="k", plan={}, now=T0)
        first = store.record_intent(job.id, 1, "tag-1", now=T0)
        store.confirm_submitted(first, "101", now=T0)
        store.update_attempt_state(first, JobState.RUNNING, started_at=T0)
        store.set_first_iteration(first, T0 + timedelta(seconds=900))
        second = store.record_intent(job.id, 2, "tag-2", now=T0)
        store.confirm_submitted(second, "102", now=T0)
        before = learned_limit(store, _live(job.id, 2, hang))
        assert learned_limit(store, _live(job.id, 2, None)) is None  # hangs not judged: no limit
    with SQLiteStore(tmp_path) as reopened:
        after = learned_limit(reopened, _live(job.id, 2, hang))
    assert before is not None and before == after
    assert (before.limit_s, before.basis) == (1800.0, "2 x this job's slowest start-up of 900s")


PATTERNS = load_patterns(["megatron_production"])
ITERATION = " [2026-11-26 03:00:00] iteration        1/     100 | lm loss: 2.0E+00 |"


class Writes:
    """The monitor's buffered writes: only what note_first_iteration asks."""

    def __init__(self) -> None:
        self.first: list[tuple[int, datetime]] = []

    def set_first_iteration(self, attempt_id: int, at: datetime) -> None:
        self.first.append((attempt_id, at))


def _watched(first_iteration_at: datetime | None = None) -> Any:
    runtime = SimpleNamespace(settings=SimpleNamespace(hang=HangConfig()), job=SimpleNamespace(id=1))
    attempt = SimpleNamespace(id=7, attempt_no=1, first_iteration_at=first_iteration_at)
    store = SimpleNamespace(attempts_for_job=lambda job_id: [])
    live = SimpleNamespace(runtime=runtime, attempt=attempt, view=AttemptView(PATTERNS), startup_noted=False)
    return live, store


def test_the_first_iteration_read_is_written_once() -> None:
    """The read that brings the first iteration line writes its time; later ones write nothing."""
    live, store = _watched()
    learn_startup(store, live)
    assert live.view.startup is not None and live.view.startup.limit_s == 3600.0  # a first attempt
    writes = Writes()
    live.view.read(["loading checkpoint"], 1000.0)
    note_first_iteration(writes, live)
    assert writes.first == []
    live.view.read([ITERATION], 1900.0)
    note_first_iteration(writes, live)
    live.view.read([ITERATION.replace("       1/", "       2/")], 1910.0)
    note_first_iteration(writes, live)
    assert writes.first == [(7, datetime.fromtimestamp(1900.0, UTC))]


def test_a_first_iteration_seen_only_catching_up_on_a_resumed_log_is_not_written() -> None:
    """A resumed monitor reads the consumed log again at once: that time says nothing of when it was
    logged. Nothing is written (the attempt then counts as one that never reached it)."""
    live, store = _watched()
    live.view.read([ITERATION], 5000.0)  # daemon/resume.py prime(), before learn_startup on attach
    learn_startup(store, live)
    writes = Writes()
    note_first_iteration(writes, live)
    assert writes.first == [] and live.startup_noted
    already, store = _watched(first_iteration_at=T0)  # an earlier monitor wrote it
    learn_startup(store, already)
    already.view.read([ITERATION], 5000.0)
    note_first_iteration(writes, already)
    assert writes.first == []

"""An attempt Slurm calls FAILED whose log no pattern explains gets a guessed cause (core/watch/attempt_view.py
`end_verdict`); every other verdict, and every other end, is left as the lines and Slurm say."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import LAST_WORDS_LINES, TAIL_CHARS
from oellm_autoexp.core.classify.signals import PatternSet, SignalPattern, merge_pattern_sets
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import KILLED_PATTERN, AttemptView, EarlySettings
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.verdict import Trigger

PATTERNS = load_patterns(["megatron_production"])
# No shipped pattern matches these; the shipped model reads them as numerical_instability and nccl.
DIVERGED = "ERROR:root:training diverged at iteration 120: the loss exploded to 3.1e+38, stopping the run"
QP_FAILED = "ERROR: InfiniBand queue pair transition failed on mlx5_0, peer unreachable"
OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
TEARDOWN = ("W1122 04:21:03.468000 1208 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process "
            "1655 closing signal SIGTERM")  # fmt: skip


def _view(lines: list[str], patterns: PatternSet | Sequence[SignalPattern] = PATTERNS) -> AttemptView:
    view = AttemptView(patterns, early=EarlySettings(settle_s=1.0))
    view.mark_running(0.0)
    view.read(["starting the run", *lines, "bye"], 1.0)
    return view


@pytest.mark.parametrize(("line", "expected"), [(DIVERGED, "numerical_instability"), (QP_FAILED, "nccl")])
def test_failed_with_an_unexplained_telling_line_is_guessed(line: str, expected: str) -> None:
    """FAILED and no pattern explains the log: the cause is the guess, its line and number the log's."""
    view = _view([line])
    assert view.cause() is None
    verdict = view.end_verdict(JobRecord("7", JobState.FAILED, "sacct", exit_code=1), 5.0)
    cause = verdict.cause
    assert verdict.trigger is Trigger.END and cause is not None
    assert (cause.pattern, cause.error_type, cause.role, cause.line, cause.line_no) == (
        GUESS_PATTERN, expected, "root", line, 2)  # fmt: skip


def test_the_guess_line_number_counts_from_the_log_start() -> None:
    """Read in chunks past TAIL_CHARS, the guessed line keeps its number in the whole log."""
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    filler = "".join(f"step {i} went fine, nothing to report\n" for i in range(1, TAIL_CHARS // 10))
    for start in range(0, len(filler), 4096):
        view.read_text(filler[start : start + 4096], 1.0)
    view.read_text(QP_FAILED + "\nbye\n", 2.0)
    cause = view.end_verdict(JobRecord("7", JobState.FAILED, "sacct", exit_code=1), 5.0).cause
    assert cause is not None and cause.pattern == GUESS_PATTERN
    assert cause.line_no == filler.count("\n") + 1


@pytest.mark.parametrize(
    "state",
    [JobState.COMPLETED, JobState.OUT_OF_MEMORY, JobState.TIMEOUT, JobState.CANCELLED, JobState.NODE_FAIL],
)
def test_other_ends_are_never_guessed(state: JobState) -> None:
    """Only FAILED is guessed: Slurm's other ends say why themselves (or that nothing failed)."""
    assert _view([DIVERGED]).end_verdict(JobRecord("7", state, "sacct", exit_code=1), 5.0).cause is None


def test_a_pattern_explained_cause_is_never_replaced() -> None:
    """A log with a recognised root keeps it, however strongly another line's words read."""
    view = _view([OOM, DIVERGED])
    cause = view.end_verdict(JobRecord("7", JobState.FAILED, "sacct", exit_code=1), 5.0).cause
    assert cause is not None and cause.pattern != GUESS_PATTERN and cause.error_type == "oom"
    assert cause.line == OOM


def test_no_guess_without_a_model() -> None:
    """Patterns with the guess turned off (`vocabulary: false`) leave a FAILED end with no cause."""
    off = merge_pattern_sets([PATTERNS, PatternSet(vocabulary=False)])
    assert _view([DIVERGED], off).end_verdict(JobRecord("7", JobState.FAILED, "sacct"), 5.0).cause is None
    bare = list(PATTERNS.patterns)  # a plain list of patterns names no model
    assert _view([DIVERGED], bare).end_verdict(JobRecord("7", JobState.FAILED, "sacct"), 5.0).cause is None


def test_a_running_job_is_never_acted_on_from_a_guess() -> None:
    """While the job runs, a guess never triggers a verdict: unexplained telling lines alone give no
    fatal verdict, and a hang with no root line has no cause."""
    quiet = _view([DIVERGED, QP_FAILED])
    assert quiet.fatal_verdict(100.0) is None
    hang = quiet.hang_verdict(10_000.0, HangConfig(progress_floor_s=30.0, no_output_timeout_s=60.0))
    assert hang is not None and hang.hang is not None and hang.cause is None


def test_a_silent_death_is_named_by_the_failed_workers_last_words() -> None:
    """The launcher tears the job down (that, not a guess, is the verdict's trigger); a telling line no
    pattern knows just before the teardown names the class; a worker with no last words stays `killed`,
    and words more than LAST_WORDS_LINES before the teardown are not its last."""
    fatal = _view([DIVERGED, TEARDOWN]).fatal_verdict(10.0)
    assert fatal is not None and fatal.cause is not None
    assert (fatal.cause.pattern, fatal.cause.error_type, fatal.cause.line) == (
        GUESS_PATTERN,
        "numerical_instability",
        DIVERGED,
    )
    silent = _view(["step 1", TEARDOWN]).fatal_verdict(10.0)
    assert silent is not None and silent.cause is not None and silent.cause.pattern == KILLED_PATTERN
    filler = [f"step {i}" for i in range(LAST_WORDS_LINES)]
    long_ago = _view([DIVERGED, *filler, TEARDOWN]).fatal_verdict(10.0)
    assert long_ago is not None and long_ago.cause is not None and long_ago.cause.pattern == KILLED_PATTERN

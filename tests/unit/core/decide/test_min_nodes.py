"""A rule's `min_nodes`: the shipped default gives a first exception one try only at fleet scale."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.core.decide.policy import (
    DecisionAction,
    Match,
    RestartHistory,
    RestartRecord,
    decide,
    load_policy,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind
from tests.paths import REPO

TRANSIENT = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))


def exception(nodes: int) -> Outcome:
    return Outcome(JobState.FAILED, "exception", exit_code=1, nodes=nodes)


@pytest.mark.parametrize(("nodes", "fits"), [(0, False), (1, False), (127, False), (128, True), (2048, True)])
def test_min_nodes_fits_an_attempt_of_that_size_or_larger(nodes: int, fits: bool) -> None:
    assert Match(error_types=("exception",), min_nodes=128).fits(exception(nodes)) is fits
    assert Match(error_types=("exception",)).fits(exception(nodes))  # 0: any size, unknown too


@pytest.mark.parametrize("nodes", [0, 1, 2, 127])
def test_a_small_job_still_stops_at_its_first_exception(nodes: int) -> None:
    """The 2-GPU proofs' crash: a Python exception stops at once, as before."""
    decision = decide(TRANSIENT, exception(nodes), RestartHistory(attempt=1), 0.0)
    assert decision.action is DecisionAction.STOP
    assert decision.reason == "Permanent failure detected (excluded error_type: exception)"


def test_at_fleet_scale_a_first_exception_gets_one_try_and_the_same_again_without_progress_stops() -> None:
    first = decide(TRANSIENT, exception(2048), RestartHistory(attempt=1, iteration=500), 0.0)
    assert (first.action, first.rule) == (DecisionAction.RESTART, "first_exception_at_scale")
    tried = RestartRecord(0.0, "first_exception_at_scale", OutcomeKind.CRASH, "exception", 500)
    again = decide(
        TRANSIENT, exception(2048), RestartHistory(attempt=2, restarts=(tried,), iteration=500), 60.0
    )
    assert again.action is DecisionAction.STOP and "retry budget exhausted" in again.reason
    # Progress past the best iteration refills it: a later, unrelated exception gets its try.
    later = decide(
        TRANSIENT, exception(2048), RestartHistory(attempt=2, restarts=(tried,), iteration=9000), 9e5
    )
    assert later.action is DecisionAction.RESTART

"""A losing fan-out candidate whose cancel failed is cancelled again at the next polls (daemon/fanout.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.daemon.fanout import CANCEL_TRIES, FanOut


class FlakyCancel:
    """An executor whose first `failures` cancels fail, as under a controller that times out."""

    name = "slurm"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.cancelled: list[str] = []

    def cancel(self, job_id: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ExecutorError("scancel: Socket timed out on send/recv operation")
        self.cancelled.append(job_id)


def _fanout(said: list[str]) -> FanOut:
    store: Any = None  # the cancel path writes nothing
    return FanOut(store, said.append, lambda *_: None)


def test_failed_cancel_of_a_loser_is_retried_at_the_next_poll() -> None:
    """The loser's scancel fails once; the next poll of that executor cancels it."""
    said: list[str] = []
    executor = FlakyCancel(failures=1)
    fanout = _fanout(said)
    fanout._cancel(SimpleNamespace(rt=SimpleNamespace(executor=executor)), ["101"])  # type: ignore[arg-type]
    assert executor.cancelled == [] and "failed" in said[0]
    fanout.settle("slurm", {}, 0.0)
    assert executor.cancelled == ["101"]
    fanout.settle("slurm", {}, 10.0)
    assert executor.cancelled == ["101"]  # asked once, not again


def test_a_loser_that_cannot_be_cancelled_is_named_for_the_user() -> None:
    """After CANCEL_TRIES failed polls the monitor stops retrying and says which job to cancel by hand."""
    said: list[str] = []
    executor = FlakyCancel(failures=10**6)
    fanout = _fanout(said)
    fanout._cancel(SimpleNamespace(rt=SimpleNamespace(executor=executor)), ["7"])  # type: ignore[arg-type]
    for poll in range(CANCEL_TRIES + 3):
        fanout.settle("slurm", {}, float(poll))
    assert sum("scancel 7" in line for line in said) == 1
    assert executor.failures == 10**6 - 1 - CANCEL_TRIES

"""A hang verdict about a multi-node job is held while every rank is asked for its stacks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from oellm_autoexp.daemon.stack_probe import StackProbe

HUNG = Verdict(Trigger.HANG, 100.0)


class Executor:
    def __init__(self, fails: bool = False) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fails = fails

    def signal_tasks(self, job_id: str, signal_name: str) -> None:
        if self.fails:
            raise ExecutorError("scancel: error: Kill job error on job id 7: Access/permission denied")
        self.sent.append((job_id, signal_name))


def live(executor: Any, nodes: tuple[str, ...] = ("n1", "n2"), hung: bool = True) -> Any:
    view = SimpleNamespace(hang_verdict=lambda now, config: HUNG if hung else None)
    return SimpleNamespace(attempt=SimpleNamespace(id=1, nodes=nodes), nodes=nodes, executor_id="7",
                           runtime=SimpleNamespace(executor=executor), view=view)  # fmt: skip


def test_the_verdict_waits_for_the_answers_then_comes_unchanged() -> None:
    said: list[str] = []
    executor, probe, config = Executor(), StackProbe(said.append), HangConfig(stack_dump_wait_s=5)
    attempt = live(executor)
    assert probe.hang_verdict(attempt, 100.0, config) is None  # sent, held
    assert executor.sent == [("7", "USR2")]
    assert probe.hang_verdict(attempt, 104.0, config) is None  # still waiting: not sent again
    assert executor.sent == [("7", "USR2")]
    assert probe.hang_verdict(attempt, 105.0, config) is HUNG  # the held verdict, once
    assert any("asked every rank for its stacks (SIGUSR2)" in line for line in said)


def test_no_probe_when_off_on_one_node_or_without_a_hang() -> None:
    executor = Executor()
    probe = StackProbe(lambda _: None)
    assert probe.hang_verdict(live(executor), 0.0, HangConfig(stack_dump_signal=None)) is HUNG
    assert probe.hang_verdict(live(executor, nodes=("n1",)), 0.0, HangConfig()) is HUNG
    assert probe.hang_verdict(live(executor, hung=False), 0.0, HangConfig()) is None
    assert probe.hang_verdict(live(object()), 0.0, HangConfig()) is HUNG  # an executor that cannot signal
    assert executor.sent == []


def test_a_probe_that_cannot_be_sent_costs_nothing() -> None:
    said: list[str] = []
    assert StackProbe(said.append).hang_verdict(live(Executor(fails=True)), 0.0, HangConfig()) is HUNG
    assert "was not sent" in said[0]


def test_the_signal_is_one_free_for_a_handler() -> None:
    assert HangConfig(stack_dump_signal="SIGWINCH").stack_dump_signal == "WINCH"
    for taken in ("USR1", "TERM", "KILL", "STOP"):  # the walltime warning's, or one that ends a process
        with pytest.raises(ValidationError, match="expected one of"):
            HangConfig(stack_dump_signal=taken)

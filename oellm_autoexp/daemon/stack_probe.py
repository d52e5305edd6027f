"""The silent-hang probe, the monitor's side: ask every rank for its stacks before a hang's cancel.

A hang verdict about a running job of several nodes, with `monitoring.hang.stack_dump_signal`
set, is not judged at once: the signal goes to the job's tasks (SlurmExecutor.signal_tasks:
`scancel --signal`, the job steps only, never the batch shell), and the verdict is held for
`stack_dump_wait_s` (at least until the loop's next look). Every Python rank answers with
faulthandler's dump (the rendered script registers it: workloads/stack_dump/sitecustomize.py);
the log tailer reads the answers like any other line, and the judge step then reads the held
verdict with them: node blame names the node whose ranks did not answer
(core/decide/stack_dump_blame.py). A probe that cannot be sent (an executor without
`signal_tasks`, scancel failing) costs nothing: the verdict is judged at once, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.verdict import Verdict
from oellm_autoexp.daemon.watch import LiveAttempt


@dataclass(frozen=True)
class _Sent:
    verdict: Verdict  # the hang verdict held while the answers come in
    at_s: float


@dataclass
class StackProbe:
    """The probes in flight, one per attempt at most."""

    say: Callable[[str], None]
    sent: dict[int, _Sent] = field(default_factory=dict)  # attempt id -> the probe sent

    def hang_verdict(self, live: LiveAttempt, now: float, config: HangConfig) -> Verdict | None:
        """The hang verdict to judge now, or None (no hang, or the probe's answers still awaited).

        The hang tracker is not asked while a probe is in flight: the answers are new output,
        which a `no output` hang would take for the job's recovery.
        """
        sent = self.sent.get(live.attempt.id)
        if sent is not None:
            if now - sent.at_s < config.stack_dump_wait_s:
                return None
            del self.sent[live.attempt.id]
            return sent.verdict
        verdict = live.view.hang_verdict(now, config)
        if verdict is None or not self._send(live, config):
            return verdict
        self.sent[live.attempt.id] = _Sent(verdict, now)
        return None

    def _send(self, live: LiveAttempt, config: HangConfig) -> bool:
        name = config.stack_dump_signal
        nodes = live.nodes or live.attempt.nodes
        send = getattr(live.runtime.executor, "signal_tasks", None)  # only SlurmExecutor signals steps
        if name is None or len(nodes) < 2 or send is None or not live.executor_id:
            return False
        try:
            send(live.executor_id, name)
        except ExecutorError as exc:
            self.say(f"warning: job {live.executor_id}: the hang probe's SIG{name} was not sent: {exc}")
            return False
        self.say(
            f"job {live.executor_id}: hang: asked every rank for its stacks (SIG{name}); "
            f"judging in {config.stack_dump_wait_s:g} s"
        )
        return True

"""Which ranks did not answer a stack-dump probe on a silent hang. Pure.

A hang that prints nothing (no NCCL watchdog line, no error: the bigscience "No timeouts from
NCCL" kind) names no node. Before it cancels such a job the monitor asks every rank for its
Python stacks (docs/hang.md: the rendered script registers `faulthandler` on
`monitoring.hang.stack_dump_signal` in every Python process; the probe sends that signal to the
job's tasks). faulthandler writes from its C signal handler, so a rank blocked in a collective
answers too; a rank that cannot answer is on the broken node: a frozen node, a process in
uninterruptible sleep, a stopped one. faulthandler's dump starts with one header per thread:

    Current thread 0x00007f1c2b7fe740 (most recent call first):
    Thread 0x00007f1c1a3ff640 (most recent call first):

A header is read as a rank's answer only with the rank it came from (torchrun's `[rankN]:`
line prefix). Like straggler blame (core/decide/straggler_blame.py) the ranks that did not
answer count only when enough of the world did (an answer of nobody is no evidence: the probe
may not have run, the log may not be read yet), and node blame (core/decide/node_blame.py)
takes them only while the log holds no root cause, under its share guard.

Not done: comparing the innermost frames of the ranks that answered (a rank that answered
but is not waiting in the collective): the dump's frame lines would need the rank prefix
kept per thread, and nothing measured shows it is needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from oellm_autoexp.core.classify.prefixes import torch_rank
from oellm_autoexp.core.classify.signals import Signal

STACK_DUMP_PATTERN = "stack_dump"  # config/monitoring/base.yaml: faulthandler's thread header
# The share of the world that must have answered before the ranks that did not count as silent:
# half (one node of two may be the broken one; node blame's share guard keeps the blame to a
# few nodes on larger jobs).
MIN_ANSWERED_SHARE = 0.5


@dataclass(frozen=True)
class Unanswered:
    """A rank that printed no stack dump after the probe, and why that singles it out."""

    rank: int
    reason: str


def answered_ranks(signals: Iterable[Signal]) -> frozenset[int]:
    """The ranks whose stack-dump header is in the log (with a `[rankN]:` prefix)."""
    out: set[int] = set()
    for signal in signals:
        if signal.pattern != STACK_DUMP_PATTERN:
            continue
        rank = torch_rank(signal.line, {})
        if rank is not None:
            out.add(rank)
    return frozenset(out)


def unanswered(signals: Iterable[Signal], world_size: int) -> tuple[Unanswered, ...]:
    """The ranks of a world of `world_size` that did not answer the probe, or () when the answers
    are too few to read silence as evidence (or name ranks outside the world)."""
    answered = answered_ranks(signals)
    if world_size <= 0 or not answered or any(r >= world_size for r in answered):
        return ()
    if len(answered) < MIN_ANSWERED_SHARE * world_size:
        return ()
    n = len(answered)
    return tuple(
        Unanswered(rank, f"rank {rank} printed no stack dump after the probe ({n} of {world_size} ranks did)")
        for rank in range(world_size)
        if rank not in answered
    )

"""The two bounds: no supervisor at all, and the oracle. No I/O.

- `none`: nobody watches; a human looks in twice a day (human.py `next_check`) and then does
  the right thing (restarts keeping the broken nodes out, or fixes the bug first).
- `oracle`: knows at once what struck and which nodes are broken (instant detection, perfect
  blame): restarts at once keeping every broken node out, and for a fault that would strike
  every attempt (a bug, a config) has a human there at once (no response wait). It still pays
  what no supervisor can avoid: the work since the last checkpoint, the queue, the start-up,
  a human's fix. That is the ceiling for the given checkpoint and restart costs.
- `oracle_paged`: the same oracle, but the human it pages answers as ours does (human.py
  `response_s`): what is left between it and `oracle` is the human's response, which no
  supervisor can shorten; between ours and it, what a supervisor could still win.
"""

from __future__ import annotations

from dataclasses import dataclass

from oellm_autoexp.core.fleet.engine import HUMAN, RESTART, STOP, Reaction, Strike
from oellm_autoexp.core.fleet.human import next_check
from oellm_autoexp.core.fleet.settings import Human


@dataclass
class OraclePolicy:
    name: str = "oracle"

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        if strike.fault.recurs:
            return Reaction(STOP, 0.0, notified=True, why="oracle: fix first", cause=strike.fault.family)
        return Reaction(RESTART, 0.0, excluded=bad_nodes, why="oracle: restart without the broken nodes",
                        cause=strike.fault.family)  # fmt: skip

    def human_took_over(self, now: float) -> None:
        return None


@dataclass
class NonePolicy:
    human: Human
    name: str = "none"

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        return Reaction(HUMAN, next_check(now, self.human) - now, why="found at the next look")

    def human_took_over(self, now: float) -> None:
        return None

"""Where every second of the allocation went: effective training time and losses by cause. No I/O.

Every second of the horizon lands in exactly one bucket, so the buckets sum to the
horizon and ETTR = productive / horizon. Productive time is checkpointed training only
(work since the last checkpoint at the horizon's end is shown apart, `uncheckpointed_at_end`):
a run is only as far as its last checkpoint.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# The loss buckets, each with what it holds (docs/simulate.md).
LOSSES = {
    "detection_delay": "from a fault to the supervisor's action (the allocation idles or hangs)",
    "wrong_stop": "a stop that needed a restart: waiting for a human",
    "wrong_restart": "attempts of a fault that strikes every attempt, until a budget or a human stopped them",
    "repeated_bad_node": "attempts that landed on a node left in the pool while still broken",
    "queue_wait": "waiting in the queue after a resubmission (and a policy's cooldown)",
    "lost_work": "training since the last checkpoint when a fault struck",
    "restart_overhead": "start-up of each attempt: launch, init, checkpoint load",
    "preflight": "the pre-flight check at the start of each attempt (when it is on)",
    "awaiting_fix": "a fault only a human can fix: the wait for them and their fix",
    "checkpoint_save": "blocking checkpoint saves",
    "uncheckpointed_at_end": "training after the last checkpoint when the horizon ends",
}


@dataclass
class Ledger:
    """One policy's account of the horizon."""

    horizon_s: float
    productive_s: float = 0.0
    losses_s: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    human_interventions: int = 0
    faults: int = 0  # primary faults met
    strikes: int = 0  # strikes handled (primary + repeats at start-up)
    wrong_blame: int = 0
    decisions: Counter[str] = field(default_factory=Counter)  # the policy's reasons, counted

    def lose(self, cause: str, seconds: float) -> None:
        if cause not in LOSSES:
            raise ValueError(f"unknown loss bucket {cause}")
        self.losses_s[cause] = self.losses_s.get(cause, 0.0) + seconds

    @property
    def ettr(self) -> float:
        return self.productive_s / self.horizon_s if self.horizon_s else 0.0

    def accounted_s(self) -> float:
        return self.productive_s + sum(self.losses_s.values())

    def to_json(self, gpus: int) -> dict[str, Any]:
        """ETTR as a fraction, losses in GPU-hours, counts."""
        gpu_h = gpus / 3600.0
        return {
            "ettr": round(self.ettr, 6),
            "lost_gpu_hours": {k: round(self.losses_s.get(k, 0.0) * gpu_h, 1) for k in LOSSES},
            "lost_gpu_hours_total": round(sum(self.losses_s.values()) * gpu_h, 1),
            "productive_gpu_hours": round(self.productive_s * gpu_h, 1),
            "restarts": self.restarts,
            "human_interventions": self.human_interventions,
            "faults": self.faults,
            "strikes": self.strikes,
            "healthy_nodes_excluded": self.wrong_blame,
            "decisions": dict(self.decisions.most_common(12)),
        }

"""ETTR of every policy as one setting varies (job size, checkpoint interval): the plots' data. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.settings import SimSettings
from oellm_autoexp.core.fleet.simulate import POLICIES, simulate
from oellm_autoexp.core.replay.replay import ReplaySetup

JOB_SIZES_GPUS = (1024, 2048, 4096, 8192, 16384)  # the issue: 1k-16k GPUs
CHECKPOINT_MINUTES = (5, 10, 15, 30, 60, 120)


def sweep(
    mix: Mix, settings: SimSettings, setup: ReplaySetup, key: str, values: Sequence[float],
    policies: Sequence[str] = POLICIES, variants: Mapping[str, ReplaySetup] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """{"key", "values", "ettr": {policy: [...]}} with `key` of the settings set to each value in turn."""
    ettr: dict[str, list[float]] = {}
    for value in values:
        result = simulate(mix, settings.model_copy(update={key: value}), setup, policies, variants)
        for p, row in result["policies"].items():
            ettr.setdefault(p, []).append(row["ettr"])
    return {"key": key, "values": list(values), "ettr": ettr}

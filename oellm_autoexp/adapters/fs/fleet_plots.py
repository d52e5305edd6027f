"""PNG plots of the fleet simulation: ETTR per policy against job size and checkpoint interval.

matplotlib is an optional extra (`pip install 'oellm-autoexp[plot]'`); without it `--plot`
says so and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.settings import SimSettings
from oellm_autoexp.core.fleet.sweep import CHECKPOINT_MINUTES, JOB_SIZES_GPUS, sweep
from oellm_autoexp.core.replay.replay import ReplaySetup
from oellm_autoexp.errors import UserError

STYLE = {
    "autoexp": "o-",
    "upstream": "s--",
    "upstream_main": "v--",
    "none": "x:",
    "oracle": "^-",
    "oracle_paged": "^:",
}


def write_plots(
    directory: str, mix: Mix, settings: SimSettings, setup: ReplaySetup, policies: Sequence[str],
    variants: Mapping[str, ReplaySetup] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Two PNGs in `directory` and the data drawn; UserError without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a login node
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'oellm-autoexp[plot]'") from None
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    drawn = {
        "job_size": sweep(mix, settings, setup, "gpus", JOB_SIZES_GPUS, policies, variants),
        "checkpoint_interval": sweep(
            mix, settings, setup, "checkpoint_min", CHECKPOINT_MINUTES, policies, variants
        ),
    }
    labels = {"job_size": ("GPUs", True), "checkpoint_interval": ("checkpoint interval (min)", True)}
    files = {}
    for name, data in drawn.items():
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for policy, values in data["ettr"].items():
            ax.plot(data["values"], values, STYLE.get(policy, "D-."), label=policy)
        xlabel, logx = labels[name]
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ETTR (effective training time ratio)")
        if logx:
            ax.set_xscale("log", base=2)
            ax.set_xticks(data["values"], [f"{v:g}" for v in data["values"]])
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{mix.name}: {settings.days:g} days, seed {settings.seed}", fontsize=10)
        ax.legend(fontsize=8)
        path = out / f"ettr_{name}_{mix.name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files[name] = str(path)
    return {"files": files, "data": drawn}

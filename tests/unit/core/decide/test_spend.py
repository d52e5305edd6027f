"""GPU-hours and wall-hours across all attempts of a job, and the budget reason, from literal sacct output."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.decide.spend import (
    AttemptUsage,
    SpendLimits,
    gpus_of,
    parse_tres,
    parse_usage,
    spend_reason,
    total_spend,
)

# Localhost Slurm 22.05 (gres/gpu is not in its AccountingStorageTRES, so AllocTRES has no GPUs):
# sacct --allocations --duplicates --noheader --parsable2 \
#       --format JobID,State,ElapsedRaw,NNodes,AllocTRES,Start -j 10,11
# Job 10: -N2 --gres=gpu:2, 4 s. Job 11: --gres=gpu:1, requeued three times, then cancelled.
SACCT_LOCAL = """\
10|COMPLETED|4|2|billing=2,cpu=2,mem=200M,node=2|2026-11-23T08:22:54
11|REQUEUED|6|1|billing=1,cpu=1,mem=100M,node=1|2026-11-23T08:22:54
11|REQUEUED|3|1|billing=1,cpu=1,mem=100M,node=1|2026-11-23T08:23:11
11|REQUEUED|7|1|billing=1,cpu=1,mem=100M,node=1|2026-11-23T08:23:25
11|CANCELLED by 0|6|1|billing=1,cpu=1,mem=100M,node=1|2026-11-23T08:23:43
"""
# AllocTRES values of clusters that account GPUs, as quoted in neilmunday/slurm-mail#142 and
# PrincetonUniversity/jobstats#6 (typed and untyped gres/gpu both listed).
TRES_TYPED = "billing=192,cpu=16,gres/cpu=16,gres/gpu:h100=1,gres/gpu=1,mem=180G,node=1"
TRES_EXCLUSIVE = "billing=112,cpu=36,gres/gpu:rtx2080ti=4,gres/gpu=4,mem=180G,node=1"


def test_parse_usage_on_real_sacct() -> None:
    """Each run of a requeued id is its own attempt; nodes and elapsed seconds are read."""
    usage = parse_usage(SACCT_LOCAL)
    assert [(u.job_id, u.elapsed_s, u.nodes, u.gpus) for u in usage] == [
        ("10", 4, 2, None),
        ("11", 6, 1, None),
        ("11", 3, 1, None),
        ("11", 7, 1, None),
        ("11", 6, 1, None),
    ]
    spend = total_spend(usage, gpus_per_node=2)
    assert spend.attempts == 5
    assert spend.wall_hours == pytest.approx(26 / 3600)
    assert spend.gpu_hours == pytest.approx((4 * 4 + 22 * 2) / 3600)
    assert spend.node_hours == pytest.approx((4 * 2 + 22) / 3600)


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        (TRES_TYPED, 1),
        (TRES_EXCLUSIVE, 4),
        ("billing=2,cpu=2,mem=200M,node=2", None),
        ("gres/gpu:a100=2,gres/gpu:h100=2", 4),
    ],
)
def test_gpus_from_alloc_tres(tres: str, gpus: int | None) -> None:
    """The untyped gres/gpu counts once (typed entries repeat it); typed ones are summed only when alone."""
    assert gpus_of(parse_tres(tres)) == gpus


def attempts(n: int, hours: float, gpus: int = 256) -> list[AttemptUsage]:
    return [AttemptUsage(str(i), "FAILED", int(hours * 3600), 32, gpus, "") for i in range(n)]


@pytest.mark.parametrize(
    ("limits", "used", "reason"),
    [
        (SpendLimits(max_gpu_hours=800), attempts(5, 0.5), None),
        (
            SpendLimits(max_gpu_hours=600),
            attempts(5, 0.5),
            "GPU-hour budget spent: 640.0 of 600 GPU-h over 5 attempts",
        ),
        (
            SpendLimits(max_wall_hours=2),
            attempts(5, 0.5),
            "wall-hour budget spent: 2.5 of 2 h over 5 attempts",
        ),
        (
            SpendLimits(max_wall_hours=2.5),
            attempts(1, 2.5),
            "wall-hour budget spent: 2.5 of 2.5 h over 1 attempt",
        ),
        (SpendLimits(), attempts(50, 10), None),
    ],
)
def test_spend_reason(limits: SpendLimits, used: list[AttemptUsage], reason: str | None) -> None:
    """A budget reached stops the job with the figures; within budget, or with no budget, nothing is said."""
    assert spend_reason(limits, used) == reason


def test_gpu_budget_uses_gpus_per_node_when_sacct_has_none() -> None:
    """Where the cluster does not account GPUs, nodes x the job's GPUs per node is used."""
    usage = parse_usage(SACCT_LOCAL)
    assert spend_reason(SpendLimits(max_gpu_hours=0.02), usage, gpus_per_node=2) is None
    assert spend_reason(SpendLimits(max_gpu_hours=0.02), usage, gpus_per_node=4) == (
        "GPU-hour budget spent: 0.0333 of 0.02 GPU-h over 5 attempts"
    )

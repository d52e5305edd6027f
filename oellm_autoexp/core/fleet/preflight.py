"""The pre-flight check in the fleet simulation (`--preflight S`): its cost and what it catches. No I/O.

With the check on (config `preflight:`, docs/preflight.md), every attempt of ours runs it
before training: `preflight_s` seconds on every attempt, whatever happens. An attempt that
lands on a broken node of a family the check catches (`preflight_catches`) ends in the check
instead of at training start-up: the check's own line names the node
(`preflight FAIL <node>: ...`, oellm_autoexp/workloads/preflight.py), the monitor replays it
like any other fault (classifier, blame, `decide()`: the `preflight` rule, no budget charged)
and the attempt costs its queue, launch and check, not the checkpoint load.

What it catches is a judgement from what the checks measure (docs/preflight.md, J): a GPU off
the bus, one with uncorrectable ECC or pending row remapping, or a broken NVLink (`gpu_hw`)
fails the GEMM, HBM or intra-node all-reduce check; a node's HCA or cable (`network_link`)
only the opt-in cross-node `pairwise` check. A lemon that happens to pass is not caught: it
strikes only when its strike draw says so (timeline.py), and then the check fails instead.
"""

from __future__ import annotations

from dataclasses import replace

from oellm_autoexp.core.fleet.faults import Fault
from oellm_autoexp.core.fleet.mix import Variant

FAMILY = "preflight"  # the strike a failed check is judged as (not a family of any mix)
VARIANT = Variant.model_validate(
    {
        "source": "oellm_autoexp.workloads.preflight and core/templates/sbatch.sh.j2 (their own lines)",
        "lines": [
            [0, "preflight FAIL {node}: gemm 412.0 TFLOP/s < 0.9 x median 790.1"],
            [1, "autoexp: preflight step took 61.0 s (status 1)"],
            [1, "autoexp: pre-flight failed: training not started"],
        ],
        "end": "FAILED:1",
        "end_after_s": 2,
    }
)


def caught(bad: Fault) -> Fault:
    """The strike of a broken node the check found: its node, judged as the check's failure."""
    return replace(bad, family=FAMILY, variant=0, recurs=False)

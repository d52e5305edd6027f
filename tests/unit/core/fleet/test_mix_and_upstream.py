"""Mixes (core/fleet/mix.py), the shipped data, and the upstream baseline's reading of a fault."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.fs.fleet_files import read_mix, shipped_families, shipped_mixes
from oellm_autoexp.core.fleet.engine import RESTART, STOP
from oellm_autoexp.core.fleet.lines import names_for
from oellm_autoexp.core.fleet.mix import load_mix
from oellm_autoexp.core.fleet.settings import SimSettings
from oellm_autoexp.core.fleet.upstream_policy import INACTIVITY_TIMEOUT_S, UpstreamPolicy
from oellm_autoexp.errors import UserError


@pytest.mark.parametrize("name", ["llama3", "byterobust", "kokolis"])
def test_shipped_mixes_load_with_their_sources_and_shares(name):
    """Each shipped mix names its source; its shares sum to one over families that all have lines."""
    assert name in shipped_mixes()
    mix = read_mix(name)
    assert mix.source and mix.failures_per_1000_node_days > 0
    assert sum(mix.shares.values()) == pytest.approx(1.0)
    assert all(f.variants for f in mix.families.values())


def test_llama3_counts_are_table_5():
    """Llama 3: 460 of the 466 interruptions (Table 5 less the 6 thermal slowdowns, plus 47 planned)."""
    mix = read_mix("llama3")
    assert mix.shares["gpu_hw"] == pytest.approx(256 / 460)
    assert mix.failures_per_1000_node_days == pytest.approx(4.21)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"name": "x", "failures_per_1000_node_days": 1, "families": {"nope": {"count": 1}}}, "families.nope: unknown family"),
        ({"name": "x", "failures_per_1000_node_days": -1, "families": {"hang": {"count": 1}}}, "failures_per_1000_node_days"),
        ({"name": "x", "failures_per_1000_node_days": 1, "families": {"hang": {"count": 1, "recurs": 2}}}, "families.hang.recurs"),
        ({"name": "x", "failures_per_1000_node_days": 1, "families": {"new": {"count": 1, "variants": [{"end": "EXPLODED"}]}}}, "unknown state"),
        (["not", "a", "mapping"], "expected a mapping"),
    ],
)  # fmt: skip
def test_a_bad_mix_says_which_key(data, expected):
    """One clear message naming the key (the CLI turns it into exit 2)."""
    with pytest.raises(UserError, match=expected):
        load_mix(data, shipped_families(), "my.yaml")


def _upstream(family: dict) -> UpstreamPolicy:
    mix = load_mix({"name": "t", "failures_per_1000_node_days": 1, "families": {"f": {"count": 1, **family}}},
                   shipped_families(), "t")  # fmt: skip
    settings = SimSettings(gpus=16)
    return UpstreamPolicy(mix, settings, names_for(settings.nodes))


@pytest.mark.parametrize(
    ("line", "end", "action", "why"),
    [
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "FAILED:1", STOP, "err_torch_oom"),
        ("srun: error: nid000001: task 3: Exited with exit code 1", "FAILED:1", RESTART, "error"),
        ("srun: error: nid000001: task 3: Exited with exit code 16", "FAILED:16", RESTART, "error"),  # a substring of it
        ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", "FAILED:1", STOP, "marked finished (FAILED)"),
        ("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-03-11T13:26:25 DUE TO PREEMPTION ***", "PREEMPTED", RESTART, "inactive"),
    ],
)  # fmt: skip
def test_upstream_acts_on_its_lists_in_their_order(line, end, action, why):
    """Cancel list, restart list, `Exited with exit code 1`, marked finished, or inactivity."""
    up = _upstream({"variants": [{"lines": [[0, line]], "end": end, "end_after_s": 2}]})
    case = up._evaluate("f", 0, False, 0)
    assert (case.action, case.why) == (action, why)


def test_upstream_finds_a_silent_hang_after_its_inactivity_timeout():
    """No line, no end: five quiet polls and 1200 s since the first of them, at a 60 s poll."""
    up = _upstream({"variants": [{"lines": [], "end": "hang"}]})
    case = up._evaluate("f", 0, False, 0)
    assert case.action == RESTART and case.why == "inactive"
    assert INACTIVITY_TIMEOUT_S <= case.detect_s <= INACTIVITY_TIMEOUT_S + 2 * 60

"""A silent hang's broken node named by the ranks that did not answer the stack-dump probe."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.node_blame import blame_nodes
from oellm_autoexp.core.decide.stack_dump_blame import answered_ranks, unanswered
from tests.paths import REPO

ALLOC = ("gpu01", "gpu02", "gpu03", "gpu04")  # 4 ranks per node: 16 ranks
LAYOUT = "autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)"


def dump(rank: int) -> list[str]:
    """What faulthandler prints for a rank waiting in a collective, behind torchrun's prefix."""
    return [
        f"[rank{rank}]:Thread 0x00007f1c1a3ff640 (most recent call first):",
        f'[rank{rank}]:  File "/usr/lib/python3.11/threading.py", line 324 in wait',
        f"[rank{rank}]:Current thread 0x00007f1c2b7fe740 (most recent call first):",
        f'[rank{rank}]:  File "/opt/torch/distributed/distributed_c10d.py", line 2288 in all_reduce',
        f'[rank{rank}]:  File "train.py", line 88 in step',
    ]


@pytest.fixture(scope="module")
def classify():
    patterns = load_patterns([REPO / "config" / "monitoring" / "base.yaml"])

    def run(lines: Iterable[str]) -> list[Signal]:
        return classify_lines(list(lines), patterns)

    return run


def answers(ranks: Iterable[int]) -> list[str]:
    return [line for r in ranks for line in dump(r)]


def test_a_dump_header_is_an_answer_of_its_rank_and_no_failure(classify) -> None:
    signals = classify(dump(3))
    headers = [s for s in signals if s.pattern == "stack_dump"]
    assert len(headers) == 2 and {s.role for s in headers} == {"info"}
    assert answered_ranks(signals) == {3}


def test_the_ranks_of_the_node_that_did_not_answer_blame_it(classify) -> None:
    signals = classify([LAYOUT, *answers(r for r in range(16) if r // 4 != 2)])
    assert [u.rank for u in unanswered(signals, 16)] == [8, 9, 10, 11]
    found = blame_nodes(signals, ALLOC, max_share=0.25)
    assert found.nodes == ("gpu03",)
    assert "printed no stack dump after the probe (12 of 16 ranks did)" in found.blamed[0].evidence


def test_one_stopped_rank_blames_its_node(classify) -> None:
    signals = classify([LAYOUT, *answers(r for r in range(16) if r != 13)])
    assert blame_nodes(signals, ALLOC, max_share=0.25).nodes == ("gpu04",)


def test_every_rank_answered_blames_nobody(classify) -> None:
    signals = classify([LAYOUT, *answers(range(16))])
    assert unanswered(signals, 16) == ()
    assert blame_nodes(signals, ALLOC).nodes == ()


def test_too_few_answers_are_no_evidence(classify) -> None:
    # A quarter answered: the log may not be read to its end, the probe may have reached few.
    signals = classify([LAYOUT, *answers(range(4))])
    assert unanswered(signals, 16) == ()
    assert blame_nodes(signals, ALLOC, max_share=1.0).nodes == ()


def test_the_share_guard_withholds_blame_of_many_nodes(classify) -> None:
    # Two of four nodes silent: more than a quarter of the allocation, a job-wide event.
    signals = classify([LAYOUT, *answers(range(8))])
    assert len(unanswered(signals, 16)) == 8
    found = blame_nodes(signals, ALLOC, max_share=0.25)
    assert found.nodes == () and found.withheld is not None


def test_a_root_cause_in_the_log_decides_instead(classify) -> None:
    crash = "[rank9]: RuntimeError: CUDA error: an illegal memory access was encountered"
    signals = classify([LAYOUT, crash, *answers(r for r in range(16) if r // 4 != 2)])
    assert unanswered(signals, 16)  # the silence is there ...
    assert blame_nodes(signals, ALLOC, max_share=0.25).nodes == ()  # ... but the crash explains it


def test_no_layout_or_ranks_outside_the_world_blame_nobody(classify) -> None:
    without_layout = classify(answers(r for r in range(16) if r // 4 != 2))
    assert blame_nodes(without_layout, ALLOC).nodes == ()
    outside = classify(answers([*range(12), 40]))
    assert unanswered(outside, 16) == ()

"""The classifier on real log lines quoted from public sources (tests/corpus/*.yaml).

Two sets: the fitted corpus (tests/corpus/*.yaml, which patterns were written for) and the
held-out one (tests/corpus/holdout/*.yaml: a third of every new batch, never used to write
or tune a pattern). Both accuracies, the decision accuracy and a per-family table go into the
pytest output (run with -s, or read them in the failure message). The floors in
tests/corpus/accuracy_floors.yaml are raised whenever the patterns get better; never lowered
to make a change pass.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.score import (
    HEALTHY,
    Excerpt,
    Score,
    excerpts_from_records,
    format_families,
    format_score,
    score_excerpts,
)
from oellm_autoexp.core.decide.class_action import decision_accuracy
from oellm_autoexp.core.decide.policy import load_policy
from tests.paths import REPO, TESTS

CORPUS = TESTS / "corpus"
HOLDOUT = CORPUS / "holdout"
FLOORS = yaml.safe_load((CORPUS / "accuracy_floors.yaml").read_text(encoding="utf-8"))
POLICY = load_policy(
    yaml.safe_load((REPO / "config" / "restart" / "default.yaml").read_text(encoding="utf-8"))
)
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$|^https?://\S+$")


def _corpus(folder: Path) -> list[Excerpt]:
    excerpts: list[Excerpt] = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "accuracy_floors.yaml":
            continue
        excerpts += excerpts_from_records(yaml.safe_load(path.read_text(encoding="utf-8")), path.name)
    return excerpts


EXCERPTS = _corpus(CORPUS)
HELD_OUT = _corpus(HOLDOUT)


def _decisions(score: Score) -> float:
    return decision_accuracy(score, POLICY)


@pytest.fixture(scope="module")
def score() -> Score:
    return score_excerpts(EXCERPTS, load_patterns(["megatron_production"]))


@pytest.fixture(scope="module")
def held_score(score: Score, corpus_report: list[str]) -> Score:
    held = score_excerpts(HELD_OUT, load_patterns(["megatron_production"]))
    head = [
        f"fitted:   class accuracy {score.accuracy:.1%} ({sum(r.right for r in score.readings)}/"
        f"{len(score.readings)}), decision accuracy {_decisions(score):.1%}",
        f"held out: class accuracy {held.accuracy:.1%} ({sum(r.right for r in held.readings)}/"
        f"{len(held.readings)}), decision accuracy {_decisions(held):.1%}",
        f"word-model guesses right: fitted {score.guesses[0]}/{score.guesses[1]}, "
        f"held out {held.guesses[0]}/{held.guesses[1]}",
    ]
    corpus_report[:] = [*head, "", *format_families(score, held).splitlines()]  # the CI log's summary
    print("\n" + "\n".join(head))
    print(format_families(score, held))
    print(format_score(score, wrong_limit=30))
    # Held-out misses are counted, never listed: a listed text invites a pattern written for it.
    print("held out:\n" + format_score(held, confusions=False))
    return held


def test_accuracy_is_at_least_the_recorded_floor(score: Score, held_score: Score) -> None:
    """Fitted and held-out accuracy never drop below the floors recorded in the repo."""
    report = format_families(score, held_score)
    assert score.accuracy >= FLOORS["fitted"], format_score(score, wrong_limit=30)
    assert held_score.accuracy >= FLOORS["held_out"], (
        report + "\n" + format_score(held_score, confusions=False)
    )


def test_no_family_is_below_the_held_out_family_floor(score: Score, held_score: Score) -> None:
    """Every failure family with at least `family_min_lines` held-out lines is read at least as well as the
    recorded floor. A family of one to three lines moves by a third or more with one line: it is in the
    printed table, not under the floor, until a batch gives it enough lines to measure."""
    low = {
        f: right / n
        for f, n, right in held_score.families()
        if n >= FLOORS["family_min_lines"] and right / n < FLOORS["family_held_out"]
    }
    assert low == {}, format_families(score, held_score)


def test_decisions_are_at_least_the_recorded_floor(score: Score, held_score: Score) -> None:
    """The readings lead to the default policy's action for the true class at least as often as recorded."""
    assert _decisions(score) >= FLOORS["decision_fitted"]
    assert _decisions(held_score) >= FLOORS["decision_held_out"]


def test_held_out_excerpts_are_not_in_the_fitted_corpus() -> None:
    """No held-out text is also a fitted excerpt (a leak would make the held-out score a fitted one)."""
    fitted = {e.text for e in EXCERPTS}
    assert HELD_OUT, "the held-out corpus is empty"
    assert [e.source for e in HELD_OUT if e.text in fitted] == []


def test_no_healthy_excerpt_is_called_a_failure_by_a_pattern(score: Score, held_score: Score) -> None:
    """Healthy-but-alarming lines (NCCL INFO/WARN at init, loss-scale skips, ...) never match as failures.

    Held-out excerpts are only counted: their text is never shown (nothing may be tuned to it)."""
    wrong = [f"{r.excerpt.source}: {r.got}: {r.excerpt.text[:120]}" for r in score.healthy_called_failures]
    assert (wrong, len(held_score.healthy_called_failures)) == ([], 0)


def test_every_record_names_a_source_and_a_known_class() -> None:
    """Each excerpt cites owner/repo#N or a URL, and its class is one the patterns can give (or healthy)."""
    patterns = load_patterns(["megatron_production"])
    classes = {p.error_type for p in patterns.patterns if p.error_type} | {HEALTHY}
    bad = [
        e.source for e in [*EXCERPTS, *HELD_OUT] if not SOURCE.match(e.source) or e.expected not in classes
    ]
    assert bad == []


# Classes whose real log lines are rare in public sources: the search found fewer than ten
# (Slurm's `DUE TO JOB REQUEUE` line is seldom quoted: issue threads, HPC centre docs and
# published training logs gave two outside a preemption). Their count may only grow; move a
# class out of here once it has ten.
# `hang` fell to 6 when the device-side asserts that had been labelled hang were relabelled
# cuda_error from what their threads show (issue #26).
# `filesystem` (a network mount's client gone, an I/O error on a checkpoint path) entered with batch 15:
# two fitted lines (mixed.yaml).
SCARCE = {"requeue": 2, "filesystem": 2}


def test_corpus_is_large_enough_per_class() -> None:
    """At least 300 excerpts, 40 healthy ones, and 10 of every class (SCARCE: at least what was found)."""
    counts = Counter(e.expected for e in EXCERPTS)
    assert len(EXCERPTS) >= 300, len(EXCERPTS)
    assert counts[HEALTHY] >= 40, counts
    short = {c: n for c, n in counts.items() if n < SCARCE.get(c, 10)}
    assert short == {}, counts
    assert all(counts[c] < 10 for c in SCARCE), "a SCARCE class has ten now: drop it from SCARCE"


def test_corpus_mixes_roots_with_their_cascades(score) -> None:
    """At least 50 excerpts hold a root together with teardown/cascade lines or lines of another class."""
    assert score.mixed >= 50, score.mixed


def test_corpus_report_names_a_broken_record_file(tmp_path: Path) -> None:
    """scripts/corpus_report.py on invalid YAML: one line naming the file and line, exit 2."""
    (tmp_path / "bad.yaml").write_text("- source: a/b#1\n  text: |-\n    x\n   y: [\n", encoding="utf-8")
    script = REPO / "scripts" / "corpus_report.py"
    done = subprocess.run(
        [sys.executable, str(script), "--corpus", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith("corpus_report: bad.yaml line ") and "Traceback" not in done.stderr

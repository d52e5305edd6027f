"""The classifier on real log lines quoted from public sources (tests/corpus/*.yaml).

The per-class table and the confusion pairs go into the pytest output (run with -s,
or read them in the failure message). The floor in tests/corpus/accuracy_floor.txt
is raised whenever the patterns get better; it is never lowered to make a change pass.
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
    excerpts_from_records,
    format_score,
    score_excerpts,
)
from tests.paths import REPO, TESTS

CORPUS = TESTS / "corpus"
FLOOR = float((CORPUS / "accuracy_floor.txt").read_text().split()[0])
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$|^https?://\S+$")


def _corpus() -> list[Excerpt]:
    excerpts: list[Excerpt] = []
    for path in sorted(CORPUS.glob("*.yaml")):
        excerpts += excerpts_from_records(yaml.safe_load(path.read_text(encoding="utf-8")), path.name)
    return excerpts


EXCERPTS = _corpus()


@pytest.fixture(scope="module")
def score():
    result = score_excerpts(EXCERPTS, load_patterns(["megatron_production"]))
    print("\n" + format_score(result, wrong_limit=30))
    return result


def test_accuracy_is_at_least_the_recorded_floor(score) -> None:
    """Overall accuracy on the corpus never drops below the floor recorded in the repo."""
    assert score.accuracy >= FLOOR, format_score(score, wrong_limit=30)


def test_no_healthy_excerpt_is_called_a_failure(score) -> None:
    """Healthy-but-alarming lines (NCCL INFO/WARN at init, loss-scale skips, ...) never read as failures."""
    wrong = [f"{r.excerpt.source}: {r.got}: {r.excerpt.text[:120]}" for r in score.healthy_called_failures]
    assert wrong == []


def test_every_record_names_a_source_and_a_known_class() -> None:
    """Each excerpt cites owner/repo#N or a URL, and its class is one the patterns can give (or healthy)."""
    patterns = load_patterns(["megatron_production"])
    classes = {p.error_type for p in patterns.patterns if p.error_type} | {HEALTHY}
    bad = [e.source for e in EXCERPTS if not SOURCE.match(e.source) or e.expected not in classes]
    assert bad == []


# Classes whose real log lines are rare in public sources: the search found fewer than ten
# (Slurm's `DUE TO JOB REQUEUE` line is seldom quoted: issue threads, HPC centre docs and
# published training logs gave two outside a preemption). Their count may only grow; move a
# class out of here once it has ten.
SCARCE = {"requeue": 2}


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

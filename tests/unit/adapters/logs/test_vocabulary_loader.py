"""Loading the word model a pattern file names (`vocabulary:`, adapters/logs/pattern_files.py load_vocabulary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns, load_vocabulary, monitoring_dirs
from oellm_autoexp.core.classify.vocabulary import HEALTHY, WordModel, train
from oellm_autoexp.errors import UserError
from tests.paths import REPO

SHIPPED = REPO / "config" / "monitoring"


def _dirs(tmp_path: Path) -> list[Path]:
    """The throw-away dir first, then the shipped ones (for `include: [base]`)."""
    return [tmp_path, *monitoring_dirs()]


def test_the_shipped_model_loads_with_the_default_patterns() -> None:
    """megatron_production includes base, which names the shipped model: the default set guesses."""
    for patterns in (load_patterns(), load_patterns(["megatron_production"]), load_patterns(["base"])):
        assert isinstance(patterns.words, WordModel)
        assert patterns.vocabulary == "vocabulary"
        assert {HEALTHY, "oom", "nccl", "numerical_instability"} <= set(patterns.words.classes)
    shipped = load_patterns().words
    assert shipped is not None and load_vocabulary("vocabulary", [SHIPPED]).counts == shipped.counts


def test_a_missing_model_names_its_name(tmp_path: Path) -> None:
    """A name no search dir holds: one UserError naming the name, the key and the file that asked."""
    with pytest.raises(UserError) as direct:
        load_vocabulary("no_such_words", [tmp_path])
    assert "no_such_words" in str(direct.value)
    (tmp_path / "mine.yaml").write_text("include: [base]\nvocabulary: no_such_words\n")
    with pytest.raises(UserError) as via_file:
        load_patterns(["mine"], _dirs(tmp_path))
    message = str(via_file.value)
    assert "mine.yaml" in message and "vocabulary" in message and "no_such_words.json" in message


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2, 3]",
        '{"alpha": 0.3}',  # no counts
        '{"alpha": 0, "counts": {"oom": {"memory": 1}}}',
        '{"alpha": 0.3, "counts": {"oom": ["memory"]}}',
        '{"alpha": 0.3, "counts": {"oom": {"memory": "many"}}}',
    ],
)
def test_a_corrupt_model_names_its_file(tmp_path: Path, text: str) -> None:
    """Not JSON, or JSON that is no word model: one UserError naming the file, no traceback's worth of type."""
    (tmp_path / "broken.json").write_text(text)
    with pytest.raises(UserError) as caught:
        load_vocabulary("broken", [tmp_path])
    assert str(tmp_path / "broken.json") in str(caught.value) and "not a word model" in str(caught.value)


def test_a_file_of_ones_own_is_used_and_false_turns_it_off(tmp_path: Path) -> None:
    """A pattern file naming its own model replaces base's; `vocabulary: false` turns the guess off;
    a file that says nothing keeps base's."""
    model = train([("oom", "cannot allocate memory"), ("nccl", "ibv queue pair failed")], alpha=0.2)
    (tmp_path / "mywords.json").write_text(json.dumps(model.to_json()))
    (tmp_path / "own.yaml").write_text("include: [base]\nvocabulary: mywords\n")
    (tmp_path / "off.yaml").write_text("include: [base]\nvocabulary: false\n")
    (tmp_path / "quiet.yaml").write_text("include: [base]\n")
    own = load_patterns(["own"], _dirs(tmp_path)).words
    assert own is not None and own.classes == ["nccl", "oom"] and own.alpha == 0.2
    assert load_patterns(["off"], _dirs(tmp_path)).words is None
    quiet = load_patterns(["quiet"], _dirs(tmp_path)).words
    assert quiet is not None and HEALTHY in quiet.classes


@pytest.mark.parametrize("value", ["true", "1"])
def test_vocabulary_true_is_a_user_error(tmp_path: Path, value: str) -> None:
    """`vocabulary:` takes a model's name or false; `true` (which names no model) is one clear error, not a
    silent loss of the guess the included base file named."""
    (tmp_path / "yes.yaml").write_text(f"include: [base]\nvocabulary: {value}\n")
    with pytest.raises(UserError) as caught:
        load_patterns(["yes"], _dirs(tmp_path))
    assert "yes.yaml" in str(caught.value) and "vocabulary" in str(caught.value)

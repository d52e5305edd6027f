"""scripts/text_only_reader.py: the reader's labels join the corpus records they were given, and the figures
count what they say (both wrong, at least one right)."""

from __future__ import annotations

from tests.script_loader import load_script

text_only_reader = load_script("scripts/text_only_reader.py")


def test_the_labels_join_the_corpus_by_source_and_text() -> None:
    """Each labelled record is found again by its source and its text's hash: the study's 1,182 excerpts
    (records edited or added since are not, and are reported as not labelled)."""
    labels = text_only_reader.load_labels()
    corpus = {
        "fitted": text_only_reader.load_corpus(text_only_reader.CORPUS_DIR),
        "held_out": text_only_reader.load_corpus(text_only_reader.CORPUS_DIR / text_only_reader.HOLDOUT),
    }
    joined = {
        name: sum((name, *text_only_reader.text_key(e)) in labels for e in excerpts)
        for name, excerpts in corpus.items()
    }
    assert joined["fitted"] >= 840 and joined["held_out"] >= 330
    assert set(str(r["label"]) for r in labels.values()) <= set(text_only_reader.CLASS_NAMES)


def row(
    reader: bool, ours: bool, reader_decides: bool, ours_decides: bool, confident: bool, family: str = "f"
):
    """A Row in one line: (reader right, classifier right, their decisions right, reader confident)."""
    return text_only_reader.Row(family, reader, ours, reader_decides, ours_decides, confident)


def test_figures_count_each_row_once() -> None:
    rows = [
        row(True, True, True, True, confident=True),
        row(False, True, True, True, confident=False),
        row(True, False, True, False, confident=True),
        row(False, False, False, True, confident=True),
    ]
    f = text_only_reader.figures(rows)
    assert (f["n"], f["reader_right"], f["ours_right"]) == (4, 2, 2)
    assert (f["both_wrong"], f["either_right"]) == (1, 3)
    assert (f["reader_decides_right"], f["ours_decides_right"]) == (3, 3)
    assert (f["reader_confident"], f["reader_right_when_confident"]) == (3, 2)


def test_families_count_each_family_apart() -> None:
    rows = [
        row(True, False, True, False, confident=True, family="nccl"),
        row(False, False, False, False, confident=True, family="nccl"),
        row(False, True, False, True, confident=False, family="xid"),
    ]
    assert text_only_reader.families(rows) == {
        "nccl": {"n": 2, "reader_right": 1, "ours_right": 0},
        "xid": {"n": 1, "reader_right": 0, "ours_right": 1},
    }

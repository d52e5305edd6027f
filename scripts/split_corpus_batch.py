#!/usr/bin/env python3
"""Split a new batch of corpus records into the fitted and held-out sets, before any pattern is written.

    scripts/split_corpus_batch.py BATCH_DIR [--corpus DIR] [--label TEXT]

BATCH_DIR holds one <family>.yaml per failure family (records as in tests/corpus/). Records whose
source or text the corpus already has are dropped, and so is a record whose text another record of
the batch has (a text in both sets would make the held-out score a fitted one). The rest are ordered
by the SHA-256 of their source id; every third (the 1st, 4th, ...) goes to holdout/<family>.yaml,
the others to <family>.yaml. The split depends on nothing but the source ids, so anyone can check it.
Records are appended as YAML text under a comment line naming the batch.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
HOLDOUT = "holdout"
FLOORS_FILE = "accuracy_floors.yaml"


def corpus_records(corpus: Path) -> list[dict[str, str]]:
    """Every record of the fitted and the held-out corpus."""
    records: list[dict[str, str]] = []
    for folder in (corpus, corpus / HOLDOUT):
        for path in sorted(folder.glob("*.yaml")):
            if path.name != FLOORS_FILE:
                records += yaml.safe_load(path.read_text(encoding="utf-8")) or []
    return records


def split(batch: list[dict[str, str]], known: list[dict[str, str]]) -> tuple[list[dict], list[dict]]:
    """(fitted, held out): new records only, one per text, every third by source hash held out."""
    sources = {r["source"] for r in known}
    texts = {r["text"] for r in known}
    fresh: list[dict[str, str]] = []
    for record in sorted(batch, key=lambda r: r["source"]):
        if record["source"] in sources or record["text"] in texts:
            continue
        texts.add(record["text"])
        fresh.append(record)
    ordered = sorted(fresh, key=lambda r: hashlib.sha256(r["source"].encode()).hexdigest())
    held = [r for i, r in enumerate(ordered) if i % 3 == 0]
    fitted = [r for i, r in enumerate(ordered) if i % 3 != 0]
    return fitted, held


class _Dumper(yaml.SafeDumper):
    """Multi-line texts as literal blocks, as the corpus files hold them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def append(path: Path, records: list[dict[str, str]], label: str) -> None:
    if not records:
        return
    body = yaml.dump(records, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1000)
    with path.open("a", encoding="utf-8") as out:
        out.write(f"# {label}\n{body}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("batch", type=Path)
    parser.add_argument("--corpus", type=Path, default=REPO / "tests" / "corpus")
    parser.add_argument("--label", default="new batch (split by scripts/split_corpus_batch.py)")
    args = parser.parse_args()
    known = corpus_records(args.corpus)
    for path in sorted(args.batch.glob("*.yaml")):
        batch = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        fitted, held = split(batch, known)
        known += fitted + held
        append(args.corpus / path.name, fitted, args.label)
        append(args.corpus / HOLDOUT / path.name, held, args.label)
        print(f"{path.stem}: {len(batch)} gathered, {len(fitted)} fitted, {len(held)} held out")
    return 0


if __name__ == "__main__":
    sys.exit(main())

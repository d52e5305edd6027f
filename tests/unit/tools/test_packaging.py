"""What a plain install brings: the fast matcher by default, numpy with the torch extra (issue 28)."""

from __future__ import annotations

import re
import tomllib

from tests.paths import REPO


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0].strip().lower() for r in requirements}


def test_the_fast_matcher_is_a_plain_dependency() -> None:
    """The README's install line (no extras) classifies with ahocorasick-rs, not the str.find fallback."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "ahocorasick-rs" in _names(project["dependencies"])


def test_the_torch_extra_brings_numpy() -> None:
    """torch warns "Failed to initialize NumPy" at import when numpy is missing."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert {"torch", "numpy"} <= _names(extras["torch"])

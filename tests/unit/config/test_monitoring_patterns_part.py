"""The pattern part of a `monitoring:` section: what modifies the default set and what replaces it."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns, pattern_set_from_mapping
from oellm_autoexp.config.monitoring import split_monitoring

SHIPPED = len(load_patterns())


@pytest.mark.parametrize(
    "section",
    [{}, {"fatal_settle_s": 2}, {"vocabulary": False}, {"disable": ["cuda_oom"]}, {"catalogs": ["xid"]}],
)
def test_a_section_without_include_or_patterns_modifies_the_default_set(section: dict[str, object]) -> None:
    """`vocabulary: false` (or `disable:`) alone keeps the shipped patterns: before, it dropped all of them."""
    _, part = split_monitoring(section, "exp.yaml")
    patterns = pattern_set_from_mapping(part, "exp.yaml: monitoring")
    dropped = len(section.get("disable", []))  # type: ignore[arg-type]
    assert len(patterns) == SHIPPED - dropped
    assert (patterns.words is None) == (section.get("vocabulary") is False)


def test_a_section_with_its_own_patterns_and_no_include_stands_alone() -> None:
    own = {"name": "mine", "regex": "my failure", "error_type": "exception"}
    _, part = split_monitoring({"patterns": [own]}, "exp.yaml")
    patterns = pattern_set_from_mapping(part, "exp.yaml: monitoring")
    assert [p.name for p in patterns.patterns] == ["mine"] and patterns.words is None

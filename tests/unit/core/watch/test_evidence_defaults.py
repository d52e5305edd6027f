"""Evidence's defaults are spelt out (evidence.py imports no classifier); they stay the enums' values."""

from __future__ import annotations

from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.verdict import Trigger


def test_defaults_are_the_enum_values() -> None:
    assert Evidence().kind == OutcomeKind.CRASH.value
    assert Evidence().trigger == Trigger.END.value
    assert Evidence.from_json({"kind": "oom", "unknown_key": 1}).kind == "oom"

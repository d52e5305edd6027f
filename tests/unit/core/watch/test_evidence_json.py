"""Evidence as a decision row stores it and reads it back (core/watch/evidence.py): every field by
name, the sequences as JSON lists and back as tuples, unknown keys ignored, missing ones
defaulted, anything but an object read as the defaults."""

from __future__ import annotations

import json

from oellm_autoexp.core.watch.evidence import Evidence

FULL = Evidence(rule="oom", kind="oom", state="FAILED", error_type="cuda_oom", signal="torch_oom", node="n1",
                iteration=120, exclude_nodes=("n1",), delay_s=5.0, lines=("a", "b"), trigger="fatal_line",
                observed="hang", root_line_no=7, first_fatal_line_no=6, first_fatal_line="b",
                after_first_fatal_s=1.5, blamed=("n1: Xid 79",), blame_withheld=None, override_set=2,
                overrides=("x=1",), failed_load_iteration=100, named_nodes=("n1", "n7"))  # fmt: skip


def test_a_record_round_trips_through_json() -> None:
    stored = json.loads(json.dumps(FULL.to_json()))
    assert (
        stored["lines"] == ["a", "b"] and stored["exclude_nodes"] == ["n1"] and stored["overrides"] == ["x=1"]
    )
    assert (
        len(stored) == 22 and stored["failed_load_iteration"] == 100 and stored["named_nodes"] == ["n1", "n7"]
    )
    assert Evidence.from_json(stored) == FULL
    assert Evidence().to_json() == {**Evidence.from_json({}).to_json()}


def test_unknown_keys_are_ignored_and_missing_ones_default() -> None:
    read = Evidence.from_json({"error_type": "nccl", "lines": None, "later_field": [1]})
    assert read == Evidence(error_type="nccl") and read.lines == () and read.kind == "crash"
    assert read.state == "UNKNOWN" and read.trigger == "end" and read.delay_s == 0.0
    assert Evidence.from_json(None) == Evidence() == Evidence.from_json(["not", "an", "object"])

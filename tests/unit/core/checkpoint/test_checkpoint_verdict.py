"""Checkpoint verdicts and the rollback plan, from file facts alone (no files)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from oellm_autoexp.core.checkpoint.rollback import (
    RunListing,
    aside_name,
    judge_run,
    next_to_judge,
    parse_tracker,
    rollback_line,
)
from oellm_autoexp.core.checkpoint.verdict import (
    CheckpointFacts,
    CheckpointVerdict,
    DcpMetadata,
    ZipFacts,
    judge_checkpoint,
)

WHOLE_ZIP = ZipFacts(1000, b"PK\x03\x04", (("a/data.pkl", 0, 100), ("a/data/0", 200, 300)), 900)
CUT_ZIP = ZipFacts(500, b"PK\x03\x04", error="File is not a zip file")
LEGACY = ZipFacts(500, b"\x80\x02\x8a\n", error="File is not a zip file")
OVERLAP = ZipFacts(1000, b"PK", (("a/data.pkl", 0, 300), ("a/data/0", 200, 300)), 900)
NO_PKL = ZipFacts(1000, b"PK", (("a/data/0", 0, 100),), 900)
SHARDS = DcpMetadata(".metadata", {"__0_0.distcp": 4096, "__1_0.distcp": 2048}, items=5)
CONFIG = {"sharded_backend": "torch_dist"}


def dist(files: dict[str, int], dcp: tuple[DcpMetadata, ...] = (SHARDS,), **kw: object) -> CheckpointFacts:
    base = {"metadata.json": 100, "common.pt": 1000, ".metadata": 500}
    zips = {"common.pt": WHOLE_ZIP}
    return CheckpointFacts("iter_0000100", {**base, **files}, zips, dcp, CONFIG, **kw)  # type: ignore[arg-type]


def torch_fmt(ranks: list[str], zips: dict[str, ZipFacts] | None = None) -> CheckpointFacts:
    files = {r: 1000 for r in ranks}
    return CheckpointFacts("iter_0000100", files, zips or dict.fromkeys(ranks, WHOLE_ZIP))


@pytest.mark.parametrize(
    ("facts", "status", "problem"),
    [
        (dist({"__0_0.distcp": 4096, "__1_0.distcp": 3000}), "complete", None),
        (dist({"__0_0.distcp": 4096}), "incomplete", "__1_0.distcp: listed in .metadata but missing"),
        (
            dist({"__0_0.distcp": 4000, "__1_0.distcp": 2048}),
            "incomplete",
            "4000 bytes, .metadata needs at least 4096",
        ),
        (
            dist({"__0_0.distcp": 4096, "__1_0.distcp": 2048, "__1_1.distcp.tmp": 9}),
            "incomplete",
            "leftover temporary",
        ),
        (dist({"__0_0.distcp": 4096}, dcp=()), "incomplete", "no .metadata"),
        (
            dist({}, dcp=(DcpMetadata(".metadata", error="not a readable pickle"),)),
            "unverifiable",
            "not a readable",
        ),
        (torch_fmt(["mp_rank_00/model_optim_rng.pt", "mp_rank_01/model_optim_rng.pt"]), "complete", None),
        (
            torch_fmt(["mp_rank_00_000/model_optim_rng.pt", "mp_rank_01_001/model_optim_rng.pt"]),
            "incomplete",
            "2 of 4 ranks",
        ),
        (
            torch_fmt(
                [
                    "mp_rank_00/model_optim_rng.pt",
                    "mp_rank_00/distrib_optim.pt",
                    "mp_rank_01/model_optim_rng.pt",
                ]
            ),
            "incomplete",
            "distrib_optim.pt in 1 of 2",
        ),
        (
            replace(torch_fmt(["mp_rank_00/model_optim_rng.pt"]), dirs=("mp_rank_00", "mp_rank_01")),
            "incomplete",
            "1 mp_rank_* directories have no model_optim_rng.pt",
        ),
        (
            torch_fmt(["mp_rank_00/model_optim_rng.pt"], {"mp_rank_00/model_optim_rng.pt": CUT_ZIP}),
            "incomplete",
            "cut short",
        ),
        (
            torch_fmt(["mp_rank_00/model_optim_rng.pt"], {"mp_rank_00/model_optim_rng.pt": OVERLAP}),
            "incomplete",
            "past 200",
        ),
        (
            torch_fmt(["mp_rank_00/model_optim_rng.pt"], {"mp_rank_00/model_optim_rng.pt": NO_PKL}),
            "incomplete",
            "data.pkl",
        ),
        (
            torch_fmt(["mp_rank_00/model_optim_rng.pt"], {"mp_rank_00/model_optim_rng.pt": LEGACY}),
            "unverifiable",
            "legacy",
        ),
        (
            CheckpointFacts("iter_0000100.pt", {"iter_0000100.pt": 1000}, {"iter_0000100.pt": WHOLE_ZIP}),
            "complete",
            None,
        ),
        (
            CheckpointFacts(
                "iter_0000100.pt", {"iter_0000100.pt": 0}, {"iter_0000100.pt": ZipFacts(0, error="x")}
            ),
            "incomplete",
            "empty",
        ),
        (CheckpointFacts("iter_0000100", {"weights.bin": 10}), "unverifiable", "format not recognised"),
        (CheckpointFacts("iter_0000100", {"a.safetensors.tmp": 10}), "incomplete", "leftover temporary"),
        (CheckpointFacts("iter_0000100", {}, unreadable=("sub",)), "unverifiable", "cannot read sub"),
    ],
)
def test_judge_checkpoint(facts: CheckpointFacts, status: str, problem: str | None) -> None:
    """Each format is complete only when every file its metadata names is whole; otherwise the problem is named."""
    verdict = judge_checkpoint(facts)
    assert verdict.status == status
    if problem is None:
        assert verdict.problems == ()
    else:
        assert any(problem in p for p in verdict.problems), verdict.problems


OK = CheckpointVerdict("complete", "torch_dist")
BAD = CheckpointVerdict("incomplete", "torch_dist", ("__0_0.distcp: listed in .metadata but missing",))
UNSURE = CheckpointVerdict("unverifiable", "torch", ("model_optim_rng.pt: legacy",))


def listing(*names: str, tracker: str | None = "300") -> RunListing:
    return RunListing(tuple(names) + (("latest_checkpointed_iteration.txt",) if tracker else ()), tracker)


@pytest.mark.parametrize(
    ("run", "verdicts", "status", "iteration", "moves", "tracker"),
    [
        (listing("iter_0000200", "iter_0000300"), {"iter_0000300": OK}, "complete", 300, None, None),
        (
            listing("iter_0000200", "iter_0000300"),
            {"iter_0000300": BAD, "iter_0000200": OK},
            "incomplete",
            200,
            [("iter_0000300", "failed_iter_0000300")],
            "200",
        ),
        # A save in progress when the job died: newer than the tracker, incomplete, blocks the next save.
        (
            listing("iter_0000200", "iter_0000300", tracker="200"),
            {"iter_0000300": BAD, "iter_0000200": OK},
            "incomplete",
            200,
            [("iter_0000300", "failed_iter_0000300")],
            None,
        ),
        (listing("iter_0000200", tracker="300"), {"iter_0000200": OK}, "incomplete", 200, [], "200"),
        (listing("iter_0000200", "iter_0000300"), {"iter_0000300": UNSURE}, "unverifiable", 300, None, None),
        (listing(tracker=None), {}, "empty", None, None, None),
        (
            listing("iter_0000100.pt", "iter_0000200.pt", "iter_0000300.pt.tmp", tracker="200"),
            {"iter_0000200.pt": OK},
            "complete",
            200,
            None,
            None,
        ),
    ],
)
def test_judge_run(
    run: RunListing,
    verdicts: dict[str, CheckpointVerdict],
    status: str,
    iteration: int | None,
    moves: list[tuple[str, str]] | None,
    tracker: str | None,
) -> None:
    """The run resumes from the newest complete checkpoint at or below the tracker; bad ones are moved aside."""
    verdict = judge_run(run, verdicts)
    assert (verdict.status, verdict.iteration) == (status, iteration)
    if moves is None:
        assert verdict.plan is None
    else:
        assert verdict.plan is not None
        assert list(verdict.plan.moves) == moves
        assert verdict.plan.tracker_text == tracker


def test_rollback_budget_counts_failed_dirs_on_disk() -> None:
    """Two failed_iter_* on disk spend the default budget: the third rollback is refused with the count."""
    run = listing("failed_iter_0000300", "failed_iter_0000300.2", "iter_0000200", "iter_0000300")
    verdict = judge_run(run, {"iter_0000300": BAD, "iter_0000200": OK})
    assert verdict.status == "incomplete" and verdict.plan is None
    assert verdict.refused == "rollback budget spent: 2 of 2 rollbacks done, 1 more needed"
    assert judge_run(run, {"iter_0000300": BAD, "iter_0000200": OK}, rollbacks_done=0).plan is not None
    assert "no rollback: rollback budget spent" in rollback_line(verdict)


def test_no_complete_checkpoint_left_refuses() -> None:
    """When every checkpoint is incomplete there is nothing to roll back to, and it says so."""
    verdict = judge_run(listing("iter_0000300"), {"iter_0000300": BAD})
    assert (verdict.plan, verdict.refused) == (None, "no complete checkpoint left to fall back to")


def test_next_to_judge_stops_at_the_resume_point() -> None:
    """Checkpoints are read newest first and only until a complete one at or below the tracker is found."""
    run = listing("iter_0000100", "iter_0000200", "iter_0000300", tracker="200")
    assert next_to_judge(run, {}) == "iter_0000300"
    assert next_to_judge(run, {"iter_0000300": BAD}) == "iter_0000200"
    assert next_to_judge(run, {"iter_0000300": BAD, "iter_0000200": OK}) is None
    assert next_to_judge(run, {"iter_0000300": BAD, "iter_0000200": BAD}) == "iter_0000100"


@pytest.mark.parametrize(
    ("text", "value"), [(None, None), ("300\n", 300), ("release", "release"), ("x1", "x1")]
)
def test_parse_tracker(text: str | None, value: object) -> None:
    """Megatron's tracker holds an iteration or `release`; anything else comes back as text to report."""
    assert parse_tracker(text) == value


def test_bad_tracker_is_unverifiable() -> None:
    """A tracker that names no iteration stops the resume with what to check."""
    verdict = judge_run(listing("iter_0000300", tracker="garbage"), {})
    assert verdict.status == "unverifiable" and "'garbage', not an iteration" in verdict.problems[0]


def test_aside_name_never_overwrites() -> None:
    """A second failure of the same iteration gets a numbered name; nothing is overwritten."""
    assert aside_name("iter_0000300", []) == "failed_iter_0000300"
    assert (
        aside_name("iter_0000300", ["failed_iter_0000300", "failed_iter_0000300.2"])
        == "failed_iter_0000300.3"
    )

"""Checkpoint checks on real trees written by torch (tests/fixtures/checkpoints), cut short on purpose.

Every directory under tests/fixtures/checkpoints is one run's checkpoint directory whose
checkpoints are all complete; Megatron-written trees (megatron_*) dropped in there are
tested the same way with no change here.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from oellm_autoexp.adapters.checkpoints.checkpoint_files import check_checkpoint, check_run, read_listing
from oellm_autoexp.adapters.checkpoints.dcp_metadata import read_dcp_metadata
from oellm_autoexp.cli.main import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
RUNS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
# Runs whose checkpoints are directories (all but the workload's single files).
DIR_RUNS = [r for r in RUNS if any(p.is_dir() for p in (FIXTURES / r).glob("iter_*"))]


@pytest.fixture(params=RUNS)
def run_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A fresh copy of one fixture run, safe to damage."""
    target = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, target)
    return target


def newest(run: Path) -> Path:
    return run / read_listing(run).checkpoints[0][1]


def largest_data_file(checkpoint: Path) -> Path:
    """The biggest shard or torch.save file of a checkpoint (the checkpoint itself for a file)."""
    if checkpoint.is_file():
        return checkpoint
    data = [p for p in checkpoint.rglob("*") if p.is_file() and p.suffix in (".distcp", ".pt")]
    return max(data, key=lambda p: p.stat().st_size)


def cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def test_fixtures_are_complete(run_dir: Path) -> None:
    """Every fixture run, as torch (or Megatron) wrote it, is complete at its newest checkpoint."""
    verdict = check_run(run_dir)
    assert verdict.status == "complete", verdict.problems
    assert verdict.iteration == read_listing(run_dir).checkpoints[0][0]


def test_a_cut_shard_makes_it_incomplete_and_rollback_keeps_it_aside(run_dir: Path) -> None:
    """Half a shard: incomplete; rollback renames it failed_*, points the tracker back, and the run checks complete."""
    bad = newest(run_dir)
    single = len(read_listing(run_dir).checkpoints) == 1
    cut(largest_data_file(bad))
    before = check_run(run_dir)
    if single:  # the megatron runs keep one save: nothing to fall back to, so no plan (stop, say why)
        assert (before.status, before.plan, before.refused) == (
            "incomplete", None, "no complete checkpoint left to fall back to")  # fmt: skip
        return
    assert before.status == "incomplete" and before.plan is not None
    older = before.plan.resume_iteration
    assert main(["checkpoint", "rollback", str(run_dir)]) == 0
    assert not bad.exists() and (run_dir / f"failed_{bad.name}").exists()
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == str(older)
    after = check_run(run_dir)
    assert (after.status, after.iteration) == ("complete", older)


@pytest.mark.parametrize("name", DIR_RUNS)
def test_a_leftover_tmp_in_a_checkpoint_dir_is_incomplete(name: str, tmp_path: Path) -> None:
    """A `.tmp` inside a checkpoint directory marks a save that never finished."""
    shutil.copytree(FIXTURES / name, tmp_path / name)
    checkpoint = newest(tmp_path / name)
    (checkpoint / "__0_0.distcp.tmp").write_bytes(b"")
    verdict = check_checkpoint(checkpoint)
    assert verdict.status == "incomplete"
    assert "__0_0.distcp.tmp: leftover temporary file (a save was cut short)" in verdict.problems


def test_one_byte_short_is_incomplete(tmp_path: Path) -> None:
    """The shard table is exact: a shard one byte shorter than its last item's end is caught."""
    checkpoint = tmp_path / "iter_0000020"
    shutil.copytree(FIXTURES / "torch_dist_run" / "iter_0000020", checkpoint)
    shard = checkpoint / "__0_1.distcp"
    os.truncate(shard, shard.stat().st_size - 1)
    verdict = check_checkpoint(checkpoint)
    assert verdict.status == "incomplete"
    assert verdict.problems == (
        f"__0_1.distcp: {shard.stat().st_size} bytes, .metadata needs at least {shard.stat().st_size + 1}",
    )


def test_metadata_never_renamed_is_incomplete(tmp_path: Path) -> None:
    """A torch_dist save killed while writing .metadata leaves .metadata.tmp and no .metadata."""
    checkpoint = tmp_path / "iter_0000020"
    shutil.copytree(FIXTURES / "torch_dist_run" / "iter_0000020", checkpoint)
    (checkpoint / ".metadata").rename(checkpoint / ".metadata.tmp")
    verdict = check_checkpoint(checkpoint)
    assert verdict.status == "incomplete"
    assert any("no .metadata" in p for p in verdict.problems)


def test_workload_tmp_file_is_ignored_like_the_workload_does(tmp_path: Path) -> None:
    """The workload resumes from its newest iter_*.pt and ignores a .tmp: the check agrees and notes it."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "workload_run", run)
    (run / "iter_0000030.pt.tmp").write_bytes(b"PK\x03\x04partial")
    verdict = check_run(run)
    assert (verdict.status, verdict.iteration) == ("complete", 20)
    assert any("iter_0000030.pt.tmp" in n for n in verdict.notes)


def test_metadata_pickle_runs_no_code(tmp_path: Path) -> None:
    """A hostile `.metadata` whose unpickling would create a directory is read without running it."""
    marker = tmp_path / "pwned"

    class Hostile:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.mkdir, (str(marker),))

    path = tmp_path / ".metadata"
    path.write_bytes(pickle.dumps({"storage_data": Hostile()}))
    table = read_dcp_metadata(path, ".metadata")
    assert not marker.exists()
    assert table.error is not None and "storage_data" in table.error


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`autoexp checkpoint check` exits 0 complete, 1 incomplete, 2 unverifiable; --json prints one object."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "torch_dist_run", run)
    assert main(["checkpoint", "check", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["status"], report["iteration"]) == ("complete", 20)
    cut(run / "iter_0000020" / "__0_1.distcp")
    assert main(["checkpoint", "check", str(run), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["rollback"]["moves"] == [["iter_0000020", "failed_iter_0000020"]]
    assert main(["checkpoint", "check", str(run / "iter_0000010")]) == 0
    assert "iter_0000010: complete (torch_dist" in capsys.readouterr().out
    (run / "latest_checkpointed_iteration.txt").write_text("release")
    assert main(["checkpoint", "check", str(run)]) == 2
    assert "names a release checkpoint; check it by hand" in capsys.readouterr().out
    assert main(["checkpoint", "check", str(tmp_path / "missing")]) == 2
    assert "no such checkpoint directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["checkpoint", "check", str(tmp_path / "notes.txt")]) == 2
    assert "not a directory" in capsys.readouterr().err

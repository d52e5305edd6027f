"""Checkpoint check time on a 450 GB torch_dist tree of 2,000 shard files (sparse), ours vs torch's reader.

Tree: a run directory with the tracker and two `iter_*` checkpoints, each laid out as
megatron-core's torch_dist: metadata.json, common.pt (a real torch.save), `.metadata` (a
real torch.distributed.checkpoint Metadata, pickled as torch does, listing 4 items per
shard file) and 2,000 `__R_0.distcp` shard files made with truncate (sparse: 225 MB each as
far as stat knows, ~0 bytes on disk). The newest checkpoint is then cut (one shard short).

OURS: `check_run` (adapters/checkpoints/checkpoint_files.py): listing, stat of every file, the inert
unpickle of `.metadata`, the zip end record of common.pt, the pure verdicts; on the complete
tree (one checkpoint read) and on the cut tree (both read: the newest, then the fallback).

BASELINE: the least any metadata check must do, with torch's own code:
`FileSystemReader(dir).read_metadata()` (a plain, unsafe `pickle.load`) plus one `os.stat` per
shard file it lists. Reading the bytes instead (a checksum pass) is stated as computed, at
an optimistic 2 GB/s.
"""

from __future__ import annotations

import os
import pickle
import statistics
import time
from pathlib import Path

import torch
from _common import Report, parse_args, save_result, workdir
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from oellm_autoexp.adapters.checkpoints.checkpoint_files import check_run

SHARD_BYTES = 225 * 10**6  # 2,000 x 225 MB = 450 GB
ITEMS_PER_SHARD = 4
READ_GBPS = 2.0  # a generous parallel-filesystem read rate for one reader


def write_checkpoint(target: Path, shards: int) -> None:
    target.mkdir(parents=True)
    (target / "metadata.json").write_text('{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')
    torch.save({"iteration": 1}, target / "common.pt")
    state, storage = {}, {}
    item = SHARD_BYTES // ITEMS_PER_SHARD
    for rank in range(shards):
        for i in range(ITEMS_PER_SHARD):
            fqn = f"decoder.layers.{rank}.w{i}"
            size = torch.Size([item // 2])
            chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=size)
            state[fqn] = TensorStorageMetadata(TensorProperties(dtype=torch.bfloat16), size, [chunk])
            storage[MetadataIndex(fqn, torch.Size([0]))] = _StorageInfo(f"__{rank}_0.distcp", i * item, item)
        os.truncate(_touch(target / f"__{rank}_0.distcp"), SHARD_BYTES)
    with open(target / ".metadata", "wb") as handle:
        pickle.dump(Metadata(state_dict_metadata=state, storage_data=storage), handle)


def _touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def baseline(checkpoint: Path) -> float:
    start = time.perf_counter()
    metadata = FileSystemReader(checkpoint).read_metadata()
    for name in {info.relative_path for info in metadata.storage_data.values()}:
        os.stat(checkpoint / name)
    return time.perf_counter() - start


def timed(run: Path, expect: str) -> float:
    start = time.perf_counter()
    verdict = check_run(run)
    elapsed = time.perf_counter() - start
    assert verdict.status == expect, verdict.summary()
    return elapsed


def main() -> None:
    args = parse_args(__doc__)
    shards, trials = (500, 3) if args.quick else (2000, 5)
    out = Report()
    with workdir("ckpt") as scratch:
        run = Path(scratch) / "run"
        write_checkpoint(run / "iter_0000100", shards)
        write_checkpoint(run / "iter_0000200", shards)
        (run / "latest_checkpointed_iteration.txt").write_text("200")
        apparent = sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) / 1e9
        on_disk = sum(p.stat().st_blocks * 512 for p in run.rglob("*") if p.is_file()) / 1e6
        meta_mb = (run / "iter_0000200" / ".metadata").stat().st_size / 1e6
        out(
            f"tree: 2 checkpoints x {shards} shard files, {apparent:.0f} GB apparent, {on_disk:.1f} MB on disk; "
            f".metadata {meta_mb:.1f} MB"
        )
        complete = [timed(run, "complete") for _ in range(trials)]
        base = [baseline(run / "iter_0000200") for _ in range(trials)]
        os.truncate(run / "iter_0000200" / f"__{shards - 1}_0.distcp", SHARD_BYTES - 1)
        cut = [timed(run, "incomplete") for _ in range(trials)]
    per_ckpt_gb = apparent / 2
    figures = {
        "shards": shards,
        "checkpoint_gb": round(per_ckpt_gb, 1),
        "ours_complete_s": round(statistics.median(complete), 3),
        "ours_cut_s": round(statistics.median(cut), 3),
        "baseline_torch_reader_s": round(statistics.median(base), 3),
        "read_all_bytes_s_computed": round(per_ckpt_gb / READ_GBPS, 0),
    }
    out(
        f"ours, complete tree (newest checkpoint read):        median {figures['ours_complete_s']:.3f} s over {trials}"
    )
    out(
        f"ours, newest cut one byte short (both read):         median {figures['ours_cut_s']:.3f} s over {trials}"
    )
    out(
        f"baseline: torch FileSystemReader.read_metadata+stat: median {figures['baseline_torch_reader_s']:.3f} s"
    )
    out(
        f"reading every byte of one {per_ckpt_gb:.0f} GB checkpoint at {READ_GBPS} GB/s (computed): "
        f"{figures['read_all_bytes_s_computed']:.0f} s"
    )
    save_result("checkpoint_check", args, figures, out.text)


if __name__ == "__main__":
    main()

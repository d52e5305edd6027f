"""Is one checkpoint complete? A verdict from file facts only. Pure: no file is opened here.

The facts (names, sizes, a zip's central directory, the shard table of a `.metadata`)
are gathered by adapters/checkpoints/checkpoint_files.py; nothing is loaded. Formats understood:

- torch_dist / torch_dcp (megatron-core, torch.distributed.checkpoint): `.metadata` is
  written last (as `.metadata.tmp`, then renamed) and lists, for every saved item, the
  shard file (`__R_N.distcp`), offset and length. Complete: every listed shard file is
  there and at least `offset + length` bytes long, and no `*.tmp` is left. megatron-core
  also writes `metadata.json` (its backend config) first and `common.pt` (a torch.save).
- torch (megatron's legacy format): `mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt`, plus
  `distrib_optim.pt` beside it with the distributed optimizer; every rank of the
  tensor x pipeline x expert grid must be there.
- The project's own workloads: one file `iter_NNNNNNN.pt` per checkpoint.

Every `.pt` is a torch.save zip: the central directory sits at the very end, so a file cut
short has none, and each member's data must end before the next member begins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["complete", "incomplete", "unverifiable"]

ZIP_LOCAL_HEADER_BYTES = 30  # fixed part of a zip local file header, before name and extra
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's global metadata file
MEGATRON_CONFIG = "metadata.json"  # megatron-core's dist-checkpoint backend config
MEGATRON_COMMON = "common.pt"  # megatron-core's non-sharded state (rank 0)
TMP_SUFFIX = ".tmp"
_RANK_METADATA = re.compile(r"^__\d+\.metadata$")  # per-rank metadata (no rank coordination)
_TORCH_RANK_FILE = re.compile(
    r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?/(model_optim_rng|distrib_optim)\.pt$"
)
_TORCH_RANK_DIR = re.compile(r"^mp_rank_\d{2}(?:_\d{3})?(?:_\d{3})?$")


@dataclass(frozen=True)
class ZipFacts:
    """What a torch.save file's end record says. `head` is its first bytes (kind detection)."""

    size: int
    head: bytes = b""
    members: tuple[tuple[str, int, int], ...] = ()  # (name, local header offset, compressed size)
    directory_offset: int = 0  # where the central directory starts
    error: str | None = None  # why no central directory could be read (None: it was read)


@dataclass(frozen=True)
class DcpMetadata:
    """The shard table of one `.metadata`: shard file -> bytes it must hold at least."""

    name: str
    shards: Mapping[str, int] = field(default_factory=dict)
    items: int = 0  # storage entries listed
    error: str | None = None  # why the table could not be read


@dataclass(frozen=True)
class CheckpointFacts:
    """Everything the verdict needs about one checkpoint (a directory or one file)."""

    name: str  # iter_0000100 (a directory) or iter_0000100.pt (a workload file)
    files: Mapping[str, int]  # path relative to the checkpoint -> size in bytes
    zips: Mapping[str, ZipFacts] = field(default_factory=dict)  # relative path -> its zip facts
    dcp: tuple[DcpMetadata, ...] = ()
    megatron_config: Mapping[str, Any] | None = None  # metadata.json, parsed
    megatron_config_error: str | None = None
    unreadable: tuple[str, ...] = ()  # entries that could not be listed or stat'ed
    dirs: tuple[str, ...] = ()  # sub-directories (relative), empty ones included

    @property
    def is_single_file(self) -> bool:
        return self.name.endswith(".pt")


@dataclass(frozen=True)
class CheckpointVerdict:
    """complete / incomplete (problems say what is wrong) / unverifiable (problems say what to check)."""

    status: Status
    format: str  # torch_dist, torch, workload, unknown
    problems: tuple[str, ...] = ()
    checked: str = ""  # one line: what was looked at

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "format": self.format,
            "problems": list(self.problems),
            "checked": self.checked,
        }


def judge_checkpoint(facts: CheckpointFacts) -> CheckpointVerdict:
    """The verdict on one checkpoint from its file facts."""
    if facts.is_single_file:
        return _verdict("workload", [], _zip_findings(facts.name, facts.zips.get(facts.name)), "1 file")
    if facts.unreadable:
        return CheckpointVerdict(
            "unverifiable", "unknown", tuple(f"cannot read {p}" for p in facts.unreadable)
        )
    if any(p == DCP_METADATA or _RANK_METADATA.match(p) for p in facts.files) or _has_config(facts):
        return _judge_dist(facts)
    if any(_TORCH_RANK_DIR.match(p.split("/")[0]) for p in [*facts.files, *facts.dirs]):
        return _judge_torch(facts)
    tmp = _leftover_tmp(facts.files)
    if tmp:
        return CheckpointVerdict("incomplete", "unknown", tuple(tmp), f"{len(facts.files)} files")
    return CheckpointVerdict(
        "unverifiable",
        "unknown",
        (
            f"{facts.name}: no {DCP_METADATA}, {MEGATRON_CONFIG} or mp_rank_*/model_optim_rng.pt: "
            "format not recognised; check it by loading it",
        ),
        f"{len(facts.files)} files",
    )


# --------------------------------------------------------------------------- formats


def _judge_dist(facts: CheckpointFacts) -> CheckpointVerdict:
    incomplete = _leftover_tmp(facts.files)
    unsure: list[str] = []
    if facts.megatron_config_error:
        unsure.append(f"{MEGATRON_CONFIG}: {facts.megatron_config_error}")
    if not facts.dcp:
        incomplete.append(f"no {DCP_METADATA}: it is written last, so the save never finished")
    shards = 0
    for meta in facts.dcp:
        if meta.error:
            unsure.append(f"{meta.name}: {meta.error}")
            continue
        shards += len(meta.shards)
        incomplete += _shard_findings(meta, facts.files)
    for path in sorted(facts.zips):
        found = _zip_findings(path, facts.zips[path])
        (incomplete if found[0] == "incomplete" else unsure).extend(found[1])
    checked = f"{shards} shard files listed in {len(facts.dcp)} metadata file(s), {len(facts.files)} files"
    return _verdict("torch_dist", incomplete, ("unverifiable", unsure), checked)


def _shard_findings(meta: DcpMetadata, files: Mapping[str, int]) -> list[str]:
    out = []
    for shard, needed in sorted(meta.shards.items()):
        size = files.get(shard)
        if size is None:
            out.append(f"{shard}: listed in {meta.name} but missing")
        elif size < needed:
            out.append(f"{shard}: {size} bytes, {meta.name} needs at least {needed}")
    return out


def _judge_torch(facts: CheckpointFacts) -> CheckpointVerdict:
    incomplete = _leftover_tmp(facts.files)
    unsure: list[str] = []
    ranks: dict[tuple[int, int, int], set[str]] = {}
    for path in facts.files:
        match = _TORCH_RANK_FILE.match(path)
        if match:
            tp, pp, ep, kind = match.groups()
            ranks.setdefault((int(tp), int(pp or 0), int(ep or 0)), set()).add(kind)
    tops = {p.split("/")[0] for p in [*facts.files, *facts.dirs]}
    rank_dirs = {d for d in tops if _TORCH_RANK_DIR.match(d)}
    incomplete += _grid_findings(ranks, rank_dirs)
    for path in sorted(facts.zips):
        status, found = _zip_findings(path, facts.zips[path])
        (incomplete if status == "incomplete" else unsure).extend(found)
    checked = f"{len(ranks)} model-parallel ranks, {len(facts.zips)} torch.save files"
    return _verdict("torch", incomplete, ("unverifiable", unsure), checked)


def _grid_findings(ranks: Mapping[tuple[int, int, int], set[str]], rank_dirs: set[str]) -> list[str]:
    """Every (tp, pp, ep) of the grid has model_optim_rng.pt, and distrib_optim.pt if any rank has."""
    out = []
    with_model = {r for r, kinds in ranks.items() if "model_optim_rng" in kinds}
    if len(with_model) < len(rank_dirs):
        out.append(f"{len(rank_dirs) - len(with_model)} mp_rank_* directories have no model_optim_rng.pt")
    if ranks:
        sizes = [max(r[i] for r in ranks) + 1 for i in range(3)]
        expected = sizes[0] * sizes[1] * sizes[2]
        if len(ranks) < expected:
            out.append(
                f"{len(ranks)} of {expected} ranks (tp x pp x ep = {' x '.join(map(str, sizes))}) saved"
            )
    optim = [r for r, kinds in ranks.items() if "distrib_optim" in kinds]
    if optim and len(optim) < len(ranks):
        out.append(f"distrib_optim.pt in {len(optim)} of {len(ranks)} rank directories")
    return out


# --------------------------------------------------------------------------- torch.save zips


def _zip_findings(path: str, facts: ZipFacts | None) -> tuple[Status, list[str]]:
    """(status, problems) of one torch.save file; problems empty when it is whole."""
    if facts is None:
        return "incomplete", [f"{path}: missing"]
    if facts.error is None:
        return "incomplete", _member_findings(path, facts)
    if facts.size == 0:
        return "incomplete", [f"{path}: empty"]
    if facts.head.startswith(b"PK"):
        return "incomplete", [f"{path}: a zip with no end record ({facts.error}): cut short"]
    if facts.head[:1] == b"\x80":
        return "unverifiable", [
            f"{path}: legacy (non-zip) torch.save format has no end record; check it by loading it"
        ]
    return "unverifiable", [f"{path}: not a torch.save zip ({facts.error}); check it by loading it"]


def _member_findings(path: str, facts: ZipFacts) -> list[str]:
    if not any(name.endswith("/data.pkl") or name == "data.pkl" for name, _, _ in facts.members):
        return [f"{path}: zip without data.pkl: not a whole torch.save file"]
    ordered = sorted(facts.members, key=lambda m: m[1])
    limits = [m[1] for m in ordered[1:]] + [facts.directory_offset]
    for (name, offset, length), limit in zip(ordered, limits, strict=True):
        end = offset + ZIP_LOCAL_HEADER_BYTES + len(name.encode()) + length
        if end > limit:
            return [f"{path}: member {name} ends at byte {end}, past {limit}"]
    return []


# --------------------------------------------------------------------------- helpers


def _has_config(facts: CheckpointFacts) -> bool:
    return facts.megatron_config is not None or facts.megatron_config_error is not None


def _leftover_tmp(files: Iterable[str]) -> list[str]:
    return [
        f"{p}: leftover temporary file (a save was cut short)"
        for p in sorted(files)
        if p.endswith(TMP_SUFFIX)
    ]


def _verdict(
    fmt: str, incomplete: list[str], unsure: tuple[Status, list[str]], checked: str
) -> CheckpointVerdict:
    """Incomplete wins over unverifiable: a known defect is reason enough to roll back."""
    status, problems = unsure
    if incomplete:
        return CheckpointVerdict("incomplete", fmt, tuple(incomplete + problems), checked)
    if problems:
        return CheckpointVerdict(status, fmt, tuple(problems), checked)
    return CheckpointVerdict("complete", fmt, (), checked)

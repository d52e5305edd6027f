"""Gather checkpoint file facts from disk and carry out a rollback. Reads metadata only.

What is read: directory listings and sizes (stat), the last bytes of every `.pt` (the
zip's end record and central directory, via zipfile, which reads nothing else), every
`.metadata` (through the inert unpickler) and megatron's `metadata.json`. No checkpoint
is loaded, so a checkpoint of hundreds of GB is checked in the time a few thousand
stat calls take. The verdicts are pure, in core/checkpoint/verdict.py and
core/checkpoint/rollback.py.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

from oellm_autoexp.adapters.checkpoints.dcp_metadata import read_dcp_metadata
from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.core.checkpoint.rollback import (
    DEFAULT_MAX_ROLLBACKS,
    TRACKER_FILENAME,
    RollbackPlan,
    RunListing,
    RunVerdict,
    judge_run,
    next_to_judge,
)
from oellm_autoexp.core.checkpoint.verdict import (
    MEGATRON_CONFIG,
    CheckpointFacts,
    CheckpointVerdict,
    ZipFacts,
    judge_checkpoint,
)

ZIP_HEAD_BYTES = 4  # enough to tell a zip (PK) from a legacy pickle (0x80)
_METADATA_NAME = re.compile(r"^(?:__\d+)?\.metadata$")
_ITER_NAME = re.compile(r"^iter_\d+(?:\.pt)?$")


def read_listing(run_dir: Path) -> RunListing:
    """The names in a run's checkpoint directory and its tracker's text."""
    names = tuple(sorted(os.listdir(run_dir)))
    tracker = run_dir / TRACKER_FILENAME
    text = tracker.read_text(encoding="utf-8", errors="replace") if TRACKER_FILENAME in names else None
    return RunListing(names, text)


def read_facts(path: Path) -> CheckpointFacts:
    """The facts of one checkpoint: an `iter_*` directory or a workload's `iter_*.pt` file."""
    if path.is_file():
        return CheckpointFacts(path.name, {path.name: path.stat().st_size}, {path.name: read_zip(path)})
    files, dirs, unreadable = _walk_sizes(path)
    zips = {rel: read_zip(path / rel) for rel in files if rel.endswith(".pt")}
    dcp = tuple(read_dcp_metadata(path / rel, rel) for rel in sorted(files) if _METADATA_NAME.match(rel))
    config, config_error = (
        _read_megatron_config(path / MEGATRON_CONFIG) if MEGATRON_CONFIG in files else (None, None)
    )
    return CheckpointFacts(path.name, files, zips, dcp, config, config_error, tuple(unreadable), tuple(dirs))


def read_zip(path: Path) -> ZipFacts:
    """A torch.save file's size, first bytes and central directory (members, where it starts)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as stream:
            head = stream.read(ZIP_HEAD_BYTES)
            stream.seek(0)
            with zipfile.ZipFile(stream) as archive:
                members = tuple((m.filename, m.header_offset, m.compress_size) for m in archive.infolist())
                start = getattr(archive, "start_dir", size)  # zipfile keeps the directory's offset here
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        return ZipFacts(size, head, error=str(exc) or type(exc).__name__)
    except OSError as exc:
        return ZipFacts(0, b"", error=f"cannot read: {exc.strerror or exc}")
    return ZipFacts(size, head, members, start)


def check_checkpoint(path: Path) -> CheckpointVerdict:
    """The verdict on one checkpoint directory or file (unverifiable when it cannot be read)."""
    try:
        facts = read_facts(path)
    except OSError as exc:
        return CheckpointVerdict(
            "unverifiable", "unknown", (f"cannot read {path.name}: {exc.strerror or exc}",)
        )
    return judge_checkpoint(facts)


def check_run(
    run_dir: Path,
    max_rollbacks: int = DEFAULT_MAX_ROLLBACKS,
    rollbacks_done: int | None = None,
    failed_loads: Mapping[int, str] | None = None,
) -> RunVerdict:
    """The run's verdict: newest checkpoints read one by one until the resume point is known.

    `failed_loads`: iteration -> why, checkpoints an attempt failed to load. Their metadata may
    be whole, but they count as incomplete: quarantined by the rollback like a cut-short save.
    """
    listing = read_listing(run_dir)
    verdicts: dict[str, CheckpointVerdict] = {}
    for iteration, failed in listing.checkpoints:
        why = (failed_loads or {}).get(iteration)
        if why is not None:
            found = check_checkpoint(run_dir / failed)
            verdicts[failed] = CheckpointVerdict(
                "incomplete", found.format, (f"{failed}: failed to load: {why}",)
            )
    while (name := next_to_judge(listing, verdicts)) is not None:
        verdicts[name] = check_checkpoint(run_dir / name)
    return judge_run(listing, verdicts, max_rollbacks, rollbacks_done)


def apply_rollback(run_dir: Path, plan: RollbackPlan) -> None:
    """Move the incomplete checkpoints aside (rename, never delete), then rewrite the tracker.

    Moves come first: were the tracker rewritten first and the moves then failed, a
    resume would still find the bad checkpoint newer than the tracker at its next save.
    """
    for name, aside in plan.moves:
        os.rename(run_dir / name, run_dir / aside)
    if plan.tracker_text is not None:
        write_text_atomic(run_dir / TRACKER_FILENAME, plan.tracker_text)


def is_single_checkpoint(path: Path) -> bool:
    """Is `path` one checkpoint (an iter_* directory or file) rather than a run's directory?"""
    return bool(_ITER_NAME.match(path.name))


def _walk_sizes(root: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """(relative file -> size, relative sub-directories, entries that could not be read)."""
    files: dict[str, int] = {}
    dirs: list[str] = []
    unreadable: list[str] = []

    def on_error(exc: OSError) -> None:
        unreadable.append(os.path.relpath(exc.filename or str(root), root))

    for folder, subdirs, names in os.walk(root, onerror=on_error):
        rel_folder = os.path.relpath(folder, root)
        prefix = "" if rel_folder == "." else f"{rel_folder}/"
        dirs += [prefix + d for d in subdirs]
        for name in names:
            try:
                files[prefix + name] = os.stat(os.path.join(folder, name)).st_size
            except OSError:
                unreadable.append(prefix + name)
    return files, dirs, unreadable


def _read_megatron_config(path: Path) -> tuple[dict[str, object] | None, str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"not readable JSON ({exc})"
    if not isinstance(data, dict) or "sharded_backend" not in data:
        return None, "no sharded_backend key"
    return data, None

"""Replacing a file atomically: readers see the old or the new content, never a mix.

Used for the local executor's job records (read by later `autoexp` processes),
rendered sbatch scripts (a job never starts from half a script) and
monitor_state.json (read by users with jq). Standard library only: the local
job runner imports it inside jobs.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    """Write a temp file beside `path`, fsync it, rename it over `path`, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2) -> None:
    """`indent=None`: one line, through json's C encoder (an indent takes the pure-Python one)."""
    write_text_atomic(path, json.dumps(data, indent=indent) + "\n")


def _fsync_dir(directory: Path) -> None:
    # The rename is only durable once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

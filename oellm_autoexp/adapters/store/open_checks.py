"""Opening the state store safely: what is checked before SQLite touches the file.

- A file that is not a SQLite database (D7) is refused with one line naming it;
  nothing is written to it.
- Read-only commands (`status`, `sessions`, `explain`) open the database read-only
  and create nothing: no state dir, no file, no migration (D8 and a missing dir).
- Writers in a state dir they cannot write say so, naming the dir.
- The journal mode follows the state dir's filesystem (R6): WAL on a local disk, the
  rollback journal on NFS, Lustre, GPFS, BeeGFS and anything not known to be local.
"""

from __future__ import annotations

import os
from pathlib import Path

from oellm_autoexp.adapters.fs.mountinfo import MOUNTINFO_PATH, fs_type_of
from oellm_autoexp.core.host.fs_kind import sqlite_journal_mode
from oellm_autoexp.errors import UserError

SQLITE_HEADER = b"SQLite format 3\x00"


def check_is_database(db_path: Path) -> None:
    """UserError if `db_path` exists, is not empty, and is not a SQLite database."""
    try:
        with db_path.open("rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"{db_path}: cannot read the state database: {exc.strerror}") from None
    if head and head != SQLITE_HEADER:
        raise not_a_database(db_path)


def not_a_database(db_path: Path) -> UserError:
    return UserError(
        f"{db_path}: not a database (the file is corrupted or is not autoexp's); nothing was changed. "
        f"Move it aside (mv {db_path} {db_path}.bad) to start with an empty state, or restore it from a backup"
    )


def check_readable_state(state_dir: Path, db_path: Path) -> None:
    """For read-only commands: UserError when there is no state to read (nothing is created)."""
    if not state_dir.is_dir():
        raise UserError(
            f"no sessions: the state dir {state_dir} does not exist (start one with `autoexp run CONFIG`)"
        )
    if not db_path.is_file():
        raise UserError(
            f"no sessions: {state_dir} has no {db_path.name} (start one with `autoexp run CONFIG`)"
        )


def prepare_writable_state(state_dir: Path, db_path: Path) -> None:
    """For writers: create the state dir, or UserError saying why it cannot be written."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _not_writable(state_dir, exc.strerror or str(exc)) from None
    for path in (state_dir, db_path):
        if path.exists() and not os.access(path, os.W_OK):
            raise _not_writable(path, "permission denied")


def _not_writable(path: Path, why: str) -> UserError:
    return UserError(
        f"{path}: cannot write the state there ({why}); this command records sessions and decisions in it. "
        "Read-only commands (status, sessions, explain) still work; for this one fix the permissions "
        "or pass --state-dir DIR"
    )


MOUNTINFO = MOUNTINFO_PATH  # where the mount table is read (tests point it at a fixture)


def journal_mode_for(state_dir: Path, mountinfo_path: Path | None = None) -> str:
    """SQLite's journal mode (WAL or DELETE) for a database in `state_dir`, from its filesystem."""
    return sqlite_journal_mode(fs_type_of(state_dir, mountinfo_path or MOUNTINFO))


def read_only_uri(db_path: Path) -> str:
    """A SQLite URI that reads `db_path` without writing anything next to it.

    In a directory we cannot write, SQLite cannot create the WAL index (`-shm`):
    `immutable=1` reads the file as it is (no writer can be at work there anyway).
    """
    writable = os.access(db_path.parent, os.W_OK)
    query = "mode=ro" if writable else "mode=ro&immutable=1"
    return f"file:{db_path.absolute()}?{query}"


def opening_error(db_path: Path, exc: Exception) -> UserError:
    """SQLite's complaint while opening, as one line naming the file."""
    text = str(getattr(exc, "orig", exc))
    if "not a database" in text or "malformed" in text:
        return not_a_database(db_path)
    if "readonly" in text or "unable to open" in text:
        return _not_writable(db_path, text)
    return UserError(f"{db_path}: cannot open the state database: {text}")


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the database file; None if it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def identity_problem(path: Path, opened: tuple[int, int] | None) -> str | None:
    """Why the file at `path` is no longer the one opened (deleted, replaced); None if it is."""
    now = file_identity(path)
    if now is None:
        return f"{path} was deleted while in use: what is written now goes to a file nobody will read"
    if opened is not None and now != opened:
        return f"{path} was replaced by another file (inode {opened[1]} -> {now[1]}) while in use"
    return None

"""Finding sessions and opening the store: shared by the session commands.

The store modules are imported inside the functions that open them: `autoexp --help` and the
read-only commands never import the ORM (tests/unit/cli/test_startup_imports.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.fs.state_dir import DEFAULT_STATE_DIR, state_dir
from oellm_autoexp.adapters.store.vocab import SessionStatus
from oellm_autoexp.errors import UserError

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.reader import StoreReader
    from oellm_autoexp.adapters.store.records import JobInfo, SessionInfo
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

    Store = SQLiteStore | StoreReader  # what the lookups below read from


def open_store(args: argparse.Namespace, *, read_only: bool = False) -> tuple[SQLiteStore, Path]:
    """The store of `--state-dir`; `read_only` for commands that only look (they create nothing).

    A writer is refused while a monitor on another host holds a session (R6).
    """
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.daemon.session_lock import refuse_if_monitored_elsewhere

    directory = state_dir(getattr(args, "state_dir", None))
    store = SQLiteStore(directory, read_only=read_only)
    if not read_only:
        try:
            refuse_if_monitored_elsewhere(store, datetime.now(UTC))
        except BaseException:
            store.close()
            raise
    return store, directory


def open_reader(args: argparse.Namespace) -> tuple[StoreReader, Path]:
    """The store of `--state-dir` for a command that only reads (status, sessions, explain)."""
    from oellm_autoexp.adapters.store.reader import StoreReader

    directory = state_dir(getattr(args, "state_dir", None))
    return StoreReader(directory), directory


def find_session(store: Store, ref: str) -> SessionInfo:
    """A session by numeric id or by name; UserError naming the known ones otherwise."""
    found = store.get_session(int(ref)) if ref.isdigit() else None
    found = found or store.find_session(ref)
    if found is None:
        known = ", ".join(f"{s.id} ({s.name})" for s in store.list_sessions()[-5:]) or "none"
        raise UserError(f"no session {ref!r} in {store.path} (latest sessions: {known})")
    return found


def latest_session(store: Store) -> SessionInfo:
    sessions = store.list_sessions()
    if not sessions:
        raise UserError(f"no sessions in {store.path}; start one with `autoexp run CONFIG`")
    return sessions[-1]


def active_sessions(store: Store) -> list[SessionInfo]:
    return [s for s in store.list_sessions() if s.status == SessionStatus.ACTIVE.value]


def find_job(store: Store, session: SessionInfo, ref: str) -> JobInfo:
    """A job of the session by key, name or id; UserError naming the session's jobs otherwise."""
    job = store.find_job(session.id, ref)
    if job is None:
        names = ", ".join(j.name for j in store.jobs_for_session(session.id)) or "none"
        raise UserError(f"no job {ref!r} in session {session.id} (jobs: {names})")
    return job


def resume_command(state: Path, session_ids: Sequence[int]) -> str:
    """The exact `autoexp monitor-session` command that resumes monitoring these sessions."""
    import shlex  # here: `status` prints this, mostly for the default state dir

    where = "" if state == Path(DEFAULT_STATE_DIR) else f" --state-dir {shlex.quote(str(state))}"
    which = f"--session-id {session_ids[0]}" if len(session_ids) == 1 else "--all"
    return f"autoexp{where} monitor-session {which}"

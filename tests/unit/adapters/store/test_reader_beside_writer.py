"""A StoreReader opened in a process that holds the writer (`autoexp run`'s live view) must leave
the writer's locks alone. POSIX drops all of a process's locks on a file when ANY descriptor on it
is closed: a reader that opened and closed the database file itself (to check its header) freed
the writer's; another process that closed its own connection then found itself the last one,
checkpointed and deleted the WAL, and the writer went on writing into the deleted file: the
monitor's writes were lost to every other process (found by the Slurm tests of a failing scancel)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.store.reader import StoreReader
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

T0 = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)
OTHER_PROCESS = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions'); c.close()"
)
READ_STATUS = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT status FROM sessions').fetchone()[0])"


def test_writes_after_another_process_came_and_went_reach_the_file(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path) as store:
        session = store.create_session("s", config_path="e.yaml", config={}, now=T0)
        with StoreReader.beside(store) as reader:
            assert reader.get_session(session.id) == store.get_session(session.id)
            subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(store.path)], check=True, timeout=30)
            store.set_session_status(session.id, "completed")
            seen = subprocess.run([sys.executable, "-c", READ_STATUS, str(store.path)], check=True, timeout=30,
                                  capture_output=True, text=True)  # fmt: skip
            assert seen.stdout.split() == ["completed"]  # the other process reads what was written
            assert reader.get_session(session.id).status == "completed"  # type: ignore[union-attr]

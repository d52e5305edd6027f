"""The store's words for a session's and an attempt's state: plain enums, no database code.

Kept apart from schema.py (the SQLAlchemy tables) so that the read-only commands, which read
the file through the standard library's sqlite3 (adapters/store/reader.py), never import an ORM.
"""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    ACTIVE = "active"  # jobs are being submitted and watched
    STOPPED = "stopped"  # the user stopped it; jobs may be left as they were
    COMPLETED = "completed"  # every job reached a final status


class Intent(StrEnum):
    INTENDED = "intended"  # recorded before sbatch; sbatch may or may not have run
    SUBMITTED = "submitted"  # sbatch returned an executor job id
    CONFIRMED = "confirmed"  # the executor has since reported the job
    ABANDONED = "abandoned"  # the monitor established the submission never happened


DB_FILENAME = "autoexp.db"  # in the state dir (sqlite_store.DB_FILENAME)

# PRAGMA user_version of a database at this code's schema (schema.py SCHEMA_VERSION: 1 + its
# migrations; tests/unit/adapters/store/test_reader.py keeps the two equal).
SCHEMA_VERSION = 7

"""Where sessions live: `--state-dir`, else $AUTOEXP_STATE_DIR, else ./.oellm_state.

Its own module, so that every command can find the directory without importing the executors.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "AUTOEXP_STATE_DIR"
DEFAULT_STATE_DIR = ".oellm_state"


def state_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)

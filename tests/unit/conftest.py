"""Fixtures for the config/planning unit tests: a throw-away config search path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config dir; $AUTOEXP_CONFIG_DIR and $AUTOEXP_SHIPPED_CONFIG are cleared."""
    monkeypatch.delenv("AUTOEXP_CONFIG_DIR", raising=False)
    monkeypatch.delenv("AUTOEXP_SHIPPED_CONFIG", raising=False)
    root = tmp_path / "conf"
    root.mkdir()
    return root


@pytest.fixture
def write_yaml() -> Callable[[Path, object], Path]:
    """write_yaml(path, data): dump data as YAML, creating parent dirs; returns the path."""

    def write(path: Path, data: object) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write

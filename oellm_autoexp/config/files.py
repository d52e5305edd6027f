"""Where config files are looked up, and reading one YAML file: no config models here.

Its own module so that commands that only read pattern files (`autoexp classify`) need
neither the experiment's pydantic models nor the composer (config/loader.py re-exports these).
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from oellm_autoexp.errors import UserError

CONFIG_DIR_ENV = "AUTOEXP_CONFIG_DIR"
SHIPPED_CONFIG_ENV = "AUTOEXP_SHIPPED_CONFIG"
# Where setup.py's build hook puts a copy of the repository's config/ inside a wheel.
SHIPPED_PACKAGE_DIR = "_shipped"


def shipped_config_dir() -> Path:
    """The config groups shipped with autoexp.

    $AUTOEXP_SHIPPED_CONFIG wins; then the package data of an installed wheel
    (`oellm_autoexp/_shipped/`, found through importlib.resources); then the
    repository's top-level `config/`, which is where a checkout or an editable
    install keeps them.
    """
    explicit = os.environ.get(SHIPPED_CONFIG_ENV)
    if explicit:
        return Path(explicit)
    return _packaged_config_dir() or Path(__file__).resolve().parents[2] / "config"


def _packaged_config_dir() -> Path | None:
    packaged = importlib.resources.files("oellm_autoexp") / SHIPPED_PACKAGE_DIR
    # A wheel installs unzipped, so the resource is a real directory (a Path).
    return packaged if isinstance(packaged, Path) and packaged.is_dir() else None


def search_path(
    config_dirs: Sequence[str | Path] = (), environ: Mapping[str, str] | None = None
) -> list[Path]:
    env = os.environ if environ is None else environ
    from_env = [p for p in env.get(CONFIG_DIR_ENV, "").split(os.pathsep) if p]
    return [Path(p) for p in [*config_dirs, *from_env]] + [shipped_config_dir()]


# libyaml's safe loader when PyYAML was built with it (the wheels are): the same documents, ~10x
# faster than the pure-Python one, which was most of `autoexp classify`'s start-up (pattern files).
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`; UserError with file and line for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read config file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start});"
            " save the file as UTF-8"
        ) from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # a safe loader: libyaml's when built
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(f"{path}{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    return data

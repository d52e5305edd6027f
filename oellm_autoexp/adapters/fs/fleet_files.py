"""Reading the fleet simulation's inputs: the shipped families and mixes, or the user's mix YAML.

The data lives in oellm_autoexp/core/fleet/data/ (package data, found through
importlib.resources, so a wheel carries it); parsing and checking is core/fleet/mix.py's.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import yaml

from oellm_autoexp.core.fleet.mix import Family, Mix, load_families, load_mix
from oellm_autoexp.errors import UserError

DATA = ("oellm_autoexp.core.fleet", "data")


def _data_dir() -> Any:
    return importlib.resources.files(DATA[0]) / DATA[1]


def shipped_mixes() -> list[str]:
    """The names `--mix` takes besides a file."""
    return sorted(
        p.name.removesuffix(".yaml") for p in (_data_dir() / "mixes").iterdir() if p.name.endswith(".yaml")
    )


def shipped_families() -> dict[str, Family]:
    text = (_data_dir() / "lines.yaml").read_text(encoding="utf-8")
    return load_families(yaml.safe_load(text), "lines.yaml")


def read_mix(name_or_path: str) -> Mix:
    """A shipped mix by name (llama3, byterobust, kokolis) or the user's YAML file."""
    families = shipped_families()
    if name_or_path in shipped_mixes():
        text = (_data_dir() / "mixes" / f"{name_or_path}.yaml").read_text(encoding="utf-8")
        return load_mix(yaml.safe_load(text), families, f"mix {name_or_path}")
    path = Path(name_or_path)
    if not path.exists():
        raise UserError(
            f"--mix {name_or_path}: neither a shipped mix ({', '.join(shipped_mixes())}) nor a file"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise UserError(f"{path}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the mix: {exc}") from None
    return load_mix(data, families, str(path))
